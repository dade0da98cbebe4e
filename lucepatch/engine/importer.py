"""Import: bring patches into a target's series (`lucepatch import`, the API).

FROM is one of:
- a directory of `git format-patch` files (or one mbox file of them): files already in
  `--zero-commit` format-patch form are copied byte for byte, so export(import(x)) == x;
- a quilt directory (a `series` file, plain or git diffs with DEP-3 headers): each patch is applied
  in order on the target's base (`--source`), committed with its DEP-3 header block kept as the
  message (Author:/From: as author, a fixed date) and re-emitted with format-patch — normalised
  once; importing or exporting the result again changes no byte;
- `--from-branch A..B --source P`: the commits A..B of P (lucepatch's own trailers removed).

New patches are appended to the series (`--replace` replaces it); a patch whose patch-id is
already in the series is skipped and reported.
"""

from __future__ import annotations

import email.utils
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git
from lucepatch.engine.apply import TreeState, WorkArea, apply_loop, clone_private, resolve_base
from lucepatch.engine.commits import PURE_ENV, format_commits, format_patch_slug, upstream_merge
from lucepatch.engine.core import ALREADY_UPSTREAM, CONFLICT
from lucepatch.engine.safety import MAX_PATCH_BYTES, check_patch_paths, check_patch_shape
from lucepatch.errors import UsageError
from lucepatch.series import Patch, parse_patch, read_series_entries
from lucepatch.target import list_targets, load_target, write_target_toml
from lucepatch.workspace import Workspace, resolve_source

FP_FORM = re.compile(rb"^From 0{40} Mon Sep 17 00:00:00 2001\n")
_DIFF_LINE = re.compile(r"^(diff --git |diff -|Index: |--- \S)", re.M)
QUILT_DATE = "Thu, 1 Jan 1970 00:00:00 +0000"


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return (s[:64].rstrip("-") or "patch") + ".patch"


def split_quilt(text: str) -> tuple[str, str]:
    """(header, diff) of a quilt patch; the diff starts at its first diff/Index/--- line."""
    for m in _DIFF_LINE.finditer(text):
        rest = text[m.start():]
        if rest.startswith("--- ") and not re.match(r"--- [^\n]*\n\+\+\+ ", rest):
            continue
        return text[: m.start()], rest
    return text, ""


def quilt_message(header: str, fallback: str) -> tuple[str, str, str, str]:
    """(subject, body, author name, author email) from a DEP-3 / plain header; the header lines are
    kept in the body (empty when they are only the subject)."""
    lines = [l.rstrip() for l in header.split("\n")]
    while lines and (not lines[-1].strip() or set(lines[-1]) <= {"=", "-"}):
        lines.pop()
    lines = [l for l in lines if not l.startswith("Index: ")]
    while lines and not lines[0].strip():
        lines.pop(0)
    fields = {}
    for l in lines:
        m = re.match(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$", l)
        if m:
            fields.setdefault(m.group(1).lower(), m.group(2).strip())
    subject = fields.get("subject") or fields.get("description") or (lines[0].strip() if lines else "") or fallback
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
    who = fields.get("author") or fields.get("from") or "unknown <unknown@unknown.invalid>"
    name, addr = email.utils.parseaddr(who)
    body = "\n".join(lines).strip("\n")
    return subject, (body if body.strip() != subject else ""), name or who, addr or "unknown@unknown.invalid"


def _quoted_ident(name: str, addr: str) -> str:
    """`"name" <addr>`: parses back (email.utils.parseaddr, as the engine reads authors) to exactly
    (name, addr), whatever the name holds (commas, '@', quotes, non-ASCII)."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '" <' + addr + ">"


def normalise_quilt(src: Path, work: WorkArea, base: str, qdir: Path) -> list[tuple[str, bytes]]:
    entries = read_series_entries(qdir / "series")
    if not entries:
        raise UsageError(f"quilt series {qdir / 'series'} lists no patches")
    clone_private(src, work.repo)
    state = TreeState(work.repo, work.path / "index", base)
    head = base
    d = work.path / "q"
    d.mkdir()
    for i, (name, strip) in enumerate(entries):
        path = qdir / name
        if not path.is_file():
            raise UsageError(f"quilt patch {path} is listed in {qdir / 'series'} but does not exist")
        if path.stat().st_size > MAX_PATCH_BYTES:
            raise UsageError(f"quilt patch {path} is over {MAX_PATCH_BYTES >> 20} MiB; split it")
        text = path.read_bytes().decode("utf-8", "surrogateescape")
        header, diff = split_quilt(text)
        if not diff.strip():
            raise UsageError(f"quilt patch {path} holds no diff")
        probe = Patch(path=path, name=name, raw=diff.encode("utf-8", "surrogateescape"),
                      diff=diff.encode("utf-8", "surrogateescape"))
        check_patch_shape(probe)  # before unidiff reads it: CRLF headers get their own message
        check_patch_paths(probe)
        f = d / f"{i:04d}.diff"
        f.write_bytes(probe.diff)
        subject, body, an, ae = quilt_message(header, name)
        probe.subject, probe.body, probe.author, probe.date = subject, body, _quoted_ident(an, ae), QUILT_DATE
        # the one apply loop, one patch at a time: the first patch that does not apply stops the import
        (outcome,), head = apply_loop(state, None, [probe], [f], head, trailers=False, strip=strip)
        if outcome.status in (CONFLICT, ALREADY_UPSTREAM):
            raise UsageError(f"quilt patch {path} does not apply on {base[:12]} ({outcome.detail or outcome.status}); "
                             "import it onto the base it was made for (--base)")
    state.flush()
    files = format_commits(work.repo, base, head, work.path / "out")
    return [(format_patch_slug(f.name), f.read_bytes()) for f, _, _ in files]


def read_fp_dir(path: Path, work: WorkArea) -> list[tuple[str, bytes]]:
    if path.is_file():
        out = work.path / "mbox"
        out.mkdir()
        n = git.run(work.path, "mailsplit", "-b", "-d4", f"-o{out}", str(path), env=PURE_ENV, check=False)
        if n.status != 0:
            raise UsageError(f"{path} is not an mbox of patches; pass a folder of format-patch files")
        files = sorted(out.iterdir())
        result = []
        for f in files:
            data = f.read_bytes()
            if not data.startswith(b"From "):
                data = path.read_bytes().split(b"\n", 1)[0] + b"\n" + data
            p = parse_patch(f, f.name)
            result.append((_slug(p.subject), data))
        return result
    files = sorted(f for f in path.iterdir() if f.is_file() and f.suffix in (".patch", ".diff", ".mbox", ".eml"))
    if not files:
        raise UsageError(f"{path} holds no .patch files; pass a folder of git format-patch files or a quilt folder")
    return [(format_patch_slug(f.name) if f.suffix == ".patch" else f.stem + ".patch", f.read_bytes()) for f in files]


@dataclass
class ImportResult:
    target: str
    dir: Path
    kind: str  # branch | quilt | format-patch
    created: bool
    plan: list[tuple[str, bytes | None, str]] = field(default_factory=list)  # (name, bytes or None, action)


def import_patches(ws: Workspace, target: str, cache: Path, *, from_path: str | None = None,
                   from_branch: str | None = None, source: str | None = None, base: str | None = None,
                   upstream_url: str | None = None, replace: bool = False) -> ImportResult:
    """Validate every incoming patch, then write the new files and the series (nothing half-written)."""
    ws.require_writable("import")
    if bool(from_path) == bool(from_branch):
        raise UsageError("pass exactly one of FROM (a folder or mbox file) and --from-branch A..B")
    tdir = ws.patches_dir / target
    if target in list_targets(ws):
        t = load_target(ws, target)
        _ = t.patches
        create = False
    else:
        if not base:
            raise UsageError(f"target {target!r} does not exist in {ws.path}; pass --base COMMIT (and --upstream URL) to create it")
        create = True
        t = None
    src = None
    quilt = False
    if from_path:
        fp = Path(from_path)
        if not fp.exists():
            raise UsageError(f"{fp} does not exist; pass a quilt folder, a folder of format-patch files or an mbox file")
        quilt = fp.is_dir() and (fp / "series").is_file() and not all(
            (fp / n).is_file() and FP_FORM.match((fp / n).read_bytes()[:80]) for n, _ in read_series_entries(fp / "series"))
    needs_source = quilt or bool(from_branch)
    if needs_source:
        src = resolve_source(source, target)
        git.open_repo(src)
    base_ref = (t.base if t else base)
    with WorkArea(cache, f"import-{target}") as work:
        if from_branch:
            if ".." not in from_branch:
                raise UsageError(f"--from-branch {from_branch!r} must be a range A..B")
            a, b = from_branch.split("..", 1)
            a_sha = git.resolve_commit(src, a, what="--from-branch start", remedy="pass an existing ref")
            b_sha = git.resolve_commit(src, b or "HEAD", what="--from-branch end",
                                       remedy="pass an existing ref")
            merged = upstream_merge(src, a_sha, b_sha)
            if merged:
                m, side, subject = merged
                raise UsageError(f"--from-branch {from_branch}: {m[:12]} ({subject}) merges upstream {side[:12]} into "
                                 "the branch, and its patch would carry upstream's changes, not the branch's; rebase "
                                 f"the branch onto {side[:12]} (and the target onto it) first, or import from "
                                 f"{m[:12]} on")
            clone_private(src, work.repo)
            files = format_commits(work.repo, a_sha, b_sha, work.path / "out")
            incoming = [(format_patch_slug(f.name), f.read_bytes()) for f, _, _ in files]
        elif quilt:
            base_sha = resolve_base(src, base_ref, target, upstream=t.upstream if t else upstream_url,
                                    what=None if t else f"--base {base_ref}")
            incoming = normalise_quilt(src, work, base_sha, Path(from_path))
        else:
            fp = Path(from_path)
            if fp.is_dir() and (fp / "series").is_file():
                incoming = [(n, (fp / n).read_bytes()) for n, _ in read_series_entries(fp / "series")]
            else:
                incoming = read_fp_dir(fp, work)
        # validate every incoming patch before writing anything
        staged = work.path / "staged"
        staged.mkdir()
        parsed = []
        for name, data in incoming:
            f = staged / name
            f.write_bytes(data)
            p = parse_patch(f, name)
            _ = p.patch_id
            check_patch_shape(p)
            check_patch_paths(p)
            parsed.append((name, data, p))
        existing = {} if (replace or t is None) else {p.patch_id: p.name for p in t.patches}
        names = [] if (replace or t is None) else list(t.series)
        plan = []
        for name, data, p in parsed:
            if p.patch_id in existing:
                plan.append((existing[p.patch_id], None, "skipped (already in series)"))
                continue
            stem, n, final = name[:-6] if name.endswith(".patch") else name, 2, name
            while final in names or final in ("series", "target.toml"):
                final = f"{stem}-{n}.patch"
                n += 1
            names.append(final)
            existing[p.patch_id] = final
            plan.append((final, data, "added"))
        if create:
            if not re.match(r"^[a-z0-9][a-z0-9._-]*$", target):
                raise UsageError(f"target name {target!r} must be lowercase letters, digits, '.', '_' or '-'")
            write_target_toml(tdir / "target.toml", {
                "name": target, "upstream": upstream_url or "https://example.invalid/" + target, "branch": "main",
                "base": base, "version": "1.0.0"})
        for final, data, action in plan:
            if data is not None:
                tmp = tdir / (final + ".lucepatch-tmp")
                tmp.write_bytes(data)
                tmp.replace(tdir / final)
        if replace and t is not None:
            for old in t.series:
                if old not in names:
                    (tdir / old).unlink(missing_ok=True)
        tmp = tdir / "series.lucepatch-tmp"
        tmp.write_text("".join(f"{n}\n" for n in names))
        tmp.replace(tdir / "series")
        shutil.rmtree(staged, ignore_errors=True)
    kind = "branch" if from_branch else "quilt" if quilt else "format-patch"
    return ImportResult(target, tdir, kind, create, plan)
