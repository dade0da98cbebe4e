"""Series and patch-file checks (`lucepatch lint`, the gate's lint step); no upstream checkout needed.

Errors (exit 1): series <-> files mismatch, unparseable patch or diff, missing/invalid
`Upstream-Status` (a `Backport [...]` must name a commit or the pull request it merged as), missing `Signed-off-by`, unknown
`Reproducer:`/`Probe:` (or one of another series family), bad `Build-Only`, whitespace errors in
added lines, unsafe paths; lines: `line_of` naming no target or a line, two lines of one family
with one name, `[serves]` disagreeing with lucepatch/data/compatible_hami.toml, `[not_applicable]`
naming no reproducer/scenario of the family (or a control alone); target.toml sections nothing reads
given how the image is built (lint_image_sections: [model] or a template-only profile key where the image
is upstream's Dockerfile, an [build.image_leaves] variable no profile sets). Warnings: a
`Pending` patch older than --pending-days (default 90), a file not in format-patch form, a line
serving HAMi releases the deploy gate does not know.
"""

from __future__ import annotations

import email.utils
import re
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lucepatch.engine import stale
from lucepatch.engine.core import validate_diffs
from lucepatch.engine.safety import check_patch_paths, check_patch_shape
from lucepatch.errors import LucepatchError
from lucepatch.lines.fit import compat_data
from lucepatch.series import UPSTREAM_STATUS, parse_patch
from lucepatch.target import Target, list_targets, load_target
from lucepatch.target_sections import TEMPLATE_ONLY_PROFILE_KEYS, ModelConfig
from lucepatch.verify.reproducer import list_reproducers

ERROR, WARNING = "error", "warning"


@dataclass
class Finding:
    level: str
    target: str
    patch: str
    check: str
    message: str

    def to_json(self):
        return self.__dict__.copy()


# A backport names what upstream merged: the commit (an older line carries it), or, for a fix upstream
# merged after the fetchable history ends, its pull request (our own patch implementing the same fix).
BACKPORT = re.compile(r"Backport \[(?:[0-9a-f]{7,40}|https://[^\s\[\]/]+/[^\s\[\]/]+/[^\s\[\]/]+/pull/[0-9]+)\]")


def whitespace_errors(patch) -> list[str]:
    """Trailing whitespace and space-before-tab in the lines a patch adds (its unidiff hunks: a
    line adding `++ x` is content, not a `+++` header)."""
    out = []
    for pf in patch.patchset:
        path = pf.path
        for hunk in pf:
            for line in hunk:
                if not line.is_added:
                    continue
                body = line.value.rstrip("\n")
                if body.endswith("\r"):  # CRLF content is the file's own convention
                    body = body[:-1]
                if body != body.rstrip(" \t"):
                    out.append(f"{path}: trailing whitespace in added line {body.strip()[:40]!r}")
                elif re.match(r"^\t* +\t", body):
                    out.append(f"{path}: space before tab in indent {body.strip()[:40]!r}")
    return out


def lint_target(ws, name: str, *, pending_days: int, now: float) -> list[Finding]:
    t = load_target(ws, name)
    found: list[Finding] = []

    def add(level, patch, check, msg):
        found.append(Finding(level, t.name, patch, check, msg))

    listed = t.series
    on_disk = sorted(p.name for p in t.dir.iterdir() if p.is_file() and p.name.endswith(".patch"))
    for n in listed:
        if not (t.dir / n).is_file():
            add(ERROR, n, "series", f"{n} is listed in series but {t.dir / n} does not exist")
    for n in on_disk:
        if n not in listed:
            add(ERROR, n, "series", f"{t.dir / n} is not listed in series; add it there or move it to absorbed/")
    repro_dir = ws.reproducers_dir
    probes = {}
    probes_file = t.dir / "probes.toml"
    if probes_file.is_file():
        try:
            probes = tomllib.loads(probes_file.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            add(ERROR, "probes.toml", "toml", f"{probes_file} is not valid TOML: {exc}")
    good = []
    for n in listed:
        path = t.dir / n
        if not path.is_file():
            continue
        try:
            p = parse_patch(path, n)
            _ = p.patch_id
            check_patch_shape(p)
            check_patch_paths(p)
        except LucepatchError as exc:
            add(ERROR, n, "parse", str(exc))
            continue
        good.append((path, p))
        if not p.raw.startswith(b"From 0000000000000000000000000000000000000000 "):
            add(WARNING, n, "form", "not in `git format-patch --zero-commit` form; `lucepatch import` normalises it")
        status = p.trailer("Upstream-Status")
        if status is None:
            add(ERROR, n, "trailer", "no Upstream-Status trailer (Pending, Submitted [url], Denied, Inappropriate [reason], ...)")
        elif not UPSTREAM_STATUS.match(status):
            add(ERROR, n, "trailer", f"Upstream-Status {status!r} is not a valid value")
        elif status.startswith("Backport [") and not BACKPORT.fullmatch(status):
            add(ERROR, n, "trailer", f"Upstream-Status {status!r}: a backport names the upstream commit, "
                                     "Backport [<commit id>], or the pull request it merged as, "
                                     "Backport [https://<host>/<owner>/<repo>/pull/<n>]")
        if not p.trailer_all("Signed-off-by"):
            add(ERROR, n, "trailer", "no Signed-off-by trailer (DCO)")
        bo = p.trailer("Build-Only")
        if bo is not None and bo.strip().lower() not in ("yes", "no", "true", "false", "1", "0"):
            add(ERROR, n, "trailer", f"Build-Only {bo!r} must be yes or no")
        for r, _s in p.reproducers:
            if not (repro_dir / r).is_dir():
                add(ERROR, n, "trailer", f"Reproducer {r!r} has no folder {repro_dir / r}")
            elif (other := _reproducer_target(repro_dir / r)) not in (None, t.name, t.family):
                add(ERROR, n, "trailer", f"Reproducer {r!r} belongs to {other}, not to {t.family}'s lines")
        for pr in p.trailer_all("Probe"):
            if pr.strip() not in probes and pr.strip() not in probes.get("probe", {}):
                add(ERROR, n, "trailer", f"Probe {pr.strip()!r} is not an entry of {probes_file}")
        for w in whitespace_errors(p):
            add(ERROR, n, "whitespace", w)
        if status == "Pending" and p.date:
            try:
                age = (now - email.utils.parsedate_to_datetime(p.date).timestamp()) / 86400
            except (TypeError, ValueError):
                age = None
            if age is not None and age > pending_days:
                add(WARNING, n, "pending", f"Pending for {int(age)} days (> {pending_days}); submit it upstream or say why not")
    if good:
        try:
            validate_diffs(Path("."), [(path, str(path)) for path, _ in good])
        except LucepatchError as exc:
            add(ERROR, "-", "parse", str(exc))
    found += [Finding(level, t.name, "target.toml", "line", msg) for level, msg in lint_line(ws, t)]
    found += [Finding(ERROR, t.name, "target.toml", "build", msg) for msg in lint_image_sections(t)]
    by = {p.name: p for _, p in good}
    review = stale.read_review(t.dir)
    edited = {n for n, e in review.items() if n in by and e.get("message_sha256") != stale.message_sha256(by[n])}
    for name, sts in stale.flagged(t).items():
        found.append(Finding(WARNING, t.name, name, "review", f"its message cites what the move {review[name].get('move', '')} "
                             f"changed: {sts[0]['text'][:120]!r} ({sts[0]['cites']}){' and more' if len(sts) > 1 else ''}; "
                             f"edit it ({stale.REVIEW}): pr refuses it until then"))
    for name in sorted(edited | (set(review) - set(by))):
        found.append(Finding(WARNING, t.name, name, "review", f"{stale.REVIEW} still lists it, but its message was edited "
                             "(or it left the series): remove its entry"))
    for name in (t.build.instead_of if t.build else {}):
        if name not in by:
            found.append(Finding(ERROR, t.name, "target.toml", "build", f"[build.instead_of] {name!r} is no patch of "
                                 "the series"))
        elif not by[name].build_only:
            found.append(Finding(ERROR, t.name, "target.toml", "build", f"[build.instead_of] {name!r} is not Build-Only: "
                                 "only a patch that makes upstream build can be replaced by configure arguments"))
    return found


def lint_image_sections(t: Target) -> list[str]:
    """Sections of target.toml that nothing reads, given how the target's image is built: with upstream's own
    Dockerfile ([build] dockerfile) lucepatch's template and its entrypoint are not used, so [model] and the
    template's profile keys would be dead; without one, the keys only that route reads are."""
    b = t.build
    if not (b and b.dockerfile):
        return [f"[build] {k} is read only for an image built from upstream's Dockerfile ([build] dockerfile)"
                for k in ("cmake_args_build_arg", "image_leaves") if b and getattr(b, k)]
    out = []
    if t.model != ModelConfig():
        out.append(f"[model] is read only by lucepatch's image template; {t.name}'s image is upstream's {b.dockerfile}, "
                   "whose entrypoint fetches nothing: remove it (the chart's model_* values choose the model)")
    for name, prof in t.profiles.items():
        keys = [k for k in TEMPLATE_ONLY_PROFILE_KEYS if getattr(prof, k) is not None]
        if keys:
            out.append(f"[profiles.{name}] {', '.join(keys)}: only lucepatch's image template reads them; the image "
                       f"is upstream's {b.dockerfile} (build --image refuses the profile)")
    set_vars = {re.match(r"-D([^:=]+)", a).group(1) for p in t.profiles.values() for a in (p.cmake_args or [])
                if re.match(r"-D([^:=]+)", a)}
    out += [f"[build.image_leaves] {v}: no profile sets it" for v in b.image_leaves if v not in set_vars]
    return out


def _reproducer_target(d: Path) -> str | None:
    try:
        return tomllib.loads((d / "reproducer.toml").read_text()).get("target")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None  # the reproducer's own loader reports a broken file


def lint_line(ws, t: Target) -> list[tuple[str, str]]:
    """A line's place in its family, and what it serves against the deploy gate's data."""
    out = []
    names = list_targets(ws)
    if t.line_of:
        if t.line_of not in names:
            out.append((ERROR, f"line_of {t.line_of!r} is not a target of the workspace ({', '.join(names)})"))
        elif load_target(ws, t.line_of).line_of:
            out.append((ERROR, f"line_of {t.line_of!r} is itself a line; name the family's first target"))
    same = [n for n in names if n != t.name and _line_key(ws, n) == (t.family, t.line)]
    if same:
        out.append((ERROR, f"{', '.join(same)} is also line {t.line!r} of {t.family}; give each line its own name"))

    repros = {r.name: r for r in list_reproducers(ws) if r.target in (t.name, t.family)}
    for key in t.not_applicable:
        name, _, scen = key.partition(":")
        if name not in repros:
            out.append((ERROR, f"[not_applicable] {key!r}: no reproducer {name!r} of {t.family}"))
        elif scen and scen not in [s.name for s in repros[name].scenarios]:
            out.append((ERROR, f"[not_applicable] {key!r}: {name} has no scenario {scen!r}"))
        elif scen and repros[name].scenario(scen).control:
            out.append((ERROR, f"[not_applicable] {key!r} is a control: declare the whole reproducer {name!r}"))
    for key in t.regression_guard:
        name, _, scen = key.partition(":")
        if name not in repros or not scen:
            out.append((ERROR, f"[regression_guard] {key!r}: name a scenario of a reproducer of {t.family} "
                               "(reproducer:scenario)"))
        elif scen not in [s.name for s in repros[name].scenarios]:
            out.append((ERROR, f"[regression_guard] {key!r}: {name} has no scenario {scen!r}"))
        elif repros[name].scenario(scen).control:
            out.append((ERROR, f"[regression_guard] {key!r} is a control: it passes on both builds by definition"))
        elif key in t.not_applicable or name in t.not_applicable:
            out.append((ERROR, f"[regression_guard] {key!r} is also [not_applicable]: a scenario is run or it is not"))
    serves = t.serves or {}
    if serves.get("hami") or serves.get("shrreg"):

        ser = (compat_data().get("series") or {}).get(t.name)
        if ser is None:
            out.append((WARNING, f"[serves] names HAMi releases but lucepatch/data/compatible_hami.toml has no "
                                 f"[series.{t.name}]: the deploy gate refuses its libraries"))
        else:
            if serves.get("shrreg") != ser.get("shrreg"):
                out.append((ERROR, f"[serves] shrreg {serves.get('shrreg')!r} differs from compatible_hami.toml's "
                                   f"{ser.get('shrreg')!r}"))
            if sorted(serves.get("hami") or []) != sorted(ser.get("compatible") or []):
                out.append((ERROR, "[serves] hami differs from compatible_hami.toml's compatible list "
                                   f"{ser.get('compatible')}"))
            if ser.get("base") and not ser["base"].startswith(t.base[:7]) and not t.base.startswith(ser["base"][:7]):
                out.append((ERROR, f"compatible_hami.toml's [series.{t.name}] base {ser['base'][:12]} is not the "
                                   f"line's base {t.base[:12]}"))
    return out


def _line_key(ws, name: str) -> tuple[str, str] | None:
    try:
        o = load_target(ws, name)
    except LucepatchError:
        return None
    return o.family, o.line


COMPAT_FILE = "lucepatch/data/compatible_hami.toml"
_SHRREG = re.compile(r"none|unknown|\d+\.\d+")


def lint_compat_data(data: dict) -> list[Finding]:
    """The rows of compatible_hami.toml are well-formed: every row names its source and says what
    is unknown; [[release]] rows are upstream HAMi tags with a full HAMi-core commit; [[vendor]]
    rows (a distribution's own HAMi) map to no HAMi-core commit; a line serves upstream tags only."""
    out: list[Finding] = []

    def add(row: str, msg: str):
        out.append(Finding(ERROR, COMPAT_FILE, row, "compat", msg))

    upstream = set()
    for i, r in enumerate(data.get("release") or []):
        row = f"release[{i}] {r.get('hami', '?')}"
        if not re.fullmatch(r"v\d+\.\d+\.\d+", str(r.get("hami", ""))):
            add(row, "hami must be an upstream Project-HAMi/HAMi tag like v2.8.3 (a vendor's HAMi is a [[vendor]] row)")
        if not re.fullmatch(r"[0-9a-f]{40}", str(r.get("hami_core", ""))):
            add(row, "hami_core must be the full 40-hex HAMi-core commit of the tag's libvgpu submodule")
        if not _SHRREG.fullmatch(str(r.get("shrreg", ""))):
            add(row, "shrreg must be MAJOR.MINOR, \"none\" or \"unknown\"")
        if not str(r.get("source", "")).strip():
            add(row, "no source: name the repository, tag and path (or issue/PR) this row was read from")
        if not isinstance(r.get("unknown"), list):
            add(row, "no unknown list: say what the source does not establish (an empty list when nothing)")
        elif r.get("shrreg") == "unknown" and not r["unknown"]:
            add(row, "shrreg is unknown but `unknown` lists nothing")
        upstream.add(str(r.get("hami", "")))
    for i, v in enumerate(data.get("vendor") or []):
        row = f"vendor[{i}] {v.get('distribution', '?')} {', '.join(v.get('versions') or [])}"
        for key in ("distribution", "hami", "source"):
            if not str(v.get(key, "")).strip():
                add(row, f"no {key}")
        if not v.get("versions"):
            add(row, "no versions: which releases of the distribution ship it")
        if not v.get("unknown"):
            add(row, "no unknown list: a vendor's library is not public; say what is not known about it")
        if "hami_core" in v:
            add(row, "a vendor row names no upstream HAMi-core commit: its library is the vendor's build "
                     "(read what a node has with lucepatch node --pod)")
    for name, ser in (data.get("series") or {}).items():
        for tag in ser.get("compatible") or []:
            if tag not in upstream:
                add(f"series.{name}", f"compatible lists {tag!r}, which is no [[release]] row (a line serves upstream "
                                      "HAMi releases only)")
    return out


class Findings(list):
    """Lint findings (Finding: level, target, patch, check, message), and `.targets`: the targets linted."""

    def __init__(self, targets: list[str], findings=()):
        super().__init__(findings)
        self.targets = targets


def lint(ws, name: str | None = None, *, pending_days: int = 90, now: float | None = None) -> Findings:
    """`lint [TARGET]`: the findings of one target or, with no name, of every target and of the
    packaged data every line's gates read (compatible_hami.toml); `.targets` names those linted."""
    names = [name] if name else list_targets(ws)
    if name:
        load_target(ws, name)  # unknown target: exit 2
    now = time.time() if now is None else now
    findings: list[Finding] = []
    for n in names:
        findings += lint_target(ws, n, pending_days=pending_days, now=now)
    if not name:
        findings += lint_compat_data(compat_data())
    return Findings(names, findings)
