"""Targets: an upstream, its pinned base and the series carried on it (patches/<target>/)."""

from __future__ import annotations

import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import tomlkit

from lucepatch.errors import UsageError
from lucepatch.files import write_atomic
from lucepatch.series import Patch, compute_patch_ids, parse_patch, read_series, series_hash
from lucepatch.target_sections import BuildConfig, ModelConfig, PrConfig, Profile, Submodule, parse_sections
from lucepatch.workspace import Workspace

VARIANTS = ("baseline", "patched")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


@dataclass
class Target:
    name: str
    dir: Path
    upstream: str
    branch: str
    base: str
    version: str
    description: str = ""
    build: BuildConfig | None = None  # None: the target has no [build] table
    profiles: dict[str, Profile] = field(default_factory=dict)
    submodules: list[Submodule] = field(default_factory=list)
    pr: PrConfig = field(default_factory=PrConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    raw: dict = field(default_factory=dict)  # the document as read (provenance only; use the typed fields)
    # Lines (docs/series-engine.md "Lines"): one series family on several bases. A line is a
    # target of its own (patches/<family>-<line>/) naming its family in `line_of`; the
    # family's first target is line "main". Reproducers name the family, so every line shares them.
    line: str = "main"
    line_of: str | None = None
    serves: dict = field(default_factory=dict)  # e.g. {hami = [...], shrreg = "1.1"}: what it deploys onto
    # reproducer or reproducer:scenario -> why its assumptions do not hold at this base (verify
    # reports them not-applicable, never runs or passes them)
    not_applicable: dict = field(default_factory=dict)
    # former URLs of a renamed upstream (Luce-Org/lucebox-hub -> Luce-Org/lucebox): a checkout
    # whose remote still names one is a checkout of this upstream
    upstream_aliases: list[str] = field(default_factory=list)

    @property
    def upstream_urls(self) -> tuple[str, ...]:
        """The upstream's URL, then its former ones (what fetch hints match a checkout's remotes against)."""
        return (self.upstream, *self.upstream_aliases)

    # reproducer:scenario -> what upstream fixed at this base (issue 36): verify runs it as a
    # regression guard here (both sides pass: `guarded`, not "not-proven"), e.g. a line on a newer
    # upstream that fixed what the series' patch fixed at the older base
    regression_guard: dict = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.line_of or self.name

    @property
    def toml_path(self) -> Path:
        return self.dir / "target.toml"

    @cached_property
    def series(self) -> list[str]:
        return read_series(self.dir / "series")

    @cached_property
    def patches(self) -> list[Patch]:
        out = []
        for name in self.series:
            path = (self.dir / name)
            if not path.resolve().is_relative_to(self.dir.resolve()):
                raise UsageError(f"series of {self.name}: {name} resolves outside {self.dir}")
            out.append(parse_patch(path, name))
        compute_patch_ids(out)
        return out

    @property
    def build_only_patches(self) -> list[Patch]:
        return [p for p in self.patches if p.build_only]

    def variant_patches(self, variant: str) -> list[Patch]:
        """baseline = the Build-Only patches (what it takes to build upstream here at all); patched = all."""
        if variant not in VARIANTS:
            raise UsageError(f"unknown variant {variant!r}; use baseline or patched")
        return self.build_only_patches if variant == "baseline" else self.patches

    @cached_property
    def series_hash(self) -> str:
        return series_hash(self.toml_path, self.patches)

    @property
    def branch_name(self) -> str:
        return f"lucepatch/{self.name}/{self.version}"

    def sub_targets(self) -> list["Target"]:
        """One Target per [[submodule]] with a series of its own (name `<target>.<submodule>`)."""
        return [sub_target(self, s) for s in self.submodules]

    def to_json(self, with_patches: bool = True) -> dict:
        out = {
            "name": self.name,
            "upstream": self.upstream,
            "branch": self.branch,
            "base": self.base,
            "version": self.version,
            "description": self.description,
            "series_hash": self.series_hash,
            "family": self.family,
            "line": self.line,
            "line_of": self.line_of,
            "serves": self.serves,
        }
        if with_patches:
            out["patches"] = [p.to_json() for p in self.patches]
            if self.submodules:
                # a submodule series has no target.toml of its own, hence no series_hash
                out["submodules"] = [{"name": s.name, "path": s.raw.get("path"), "upstream": s.upstream,
                                      "branch": s.branch, "base": s.base, "patches": [p.to_json() for p in s.patches]}
                                     for s in self.sub_targets()]
        return out


def load_target_dir(tdir: Path) -> Target:
    toml_path = tdir / "target.toml"
    try:
        if toml_path.is_file() and toml_path.stat().st_size > 1024 * 1024:
            raise UsageError(f"{toml_path} is over 1 MiB; a target.toml holds a few settings, check the file")
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{toml_path} is missing; every target folder needs a target.toml")
    except IsADirectoryError:
        raise UsageError(f"{toml_path} is a directory; it must be a TOML file")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{toml_path} is not valid TOML: {exc}")
    missing = [k for k in ("name", "upstream", "base", "version") if not data.get(k)]
    if missing:
        raise UsageError(f"{toml_path} lacks required key(s) {', '.join(missing)}")
    for key in ("name", "upstream", "base", "version", "branch", "description", "line", "line_of"):
        if key in data and not isinstance(data[key], str):
            raise UsageError(f"{toml_path}: {key} must be a string")
    if not _NAME.match(data["name"]):
        raise UsageError(f"{toml_path}: name {data['name']!r} must be lowercase letters, digits, '.', '_' or '-'")
    if data["name"] != tdir.name:
        raise UsageError(f"{toml_path}: name {data['name']!r} differs from its folder {tdir.name!r}")
    if not _VERSION.match(data["version"]):
        raise UsageError(f"{toml_path}: version {data['version']!r} must be MAJOR.MINOR.PATCH")
    if not re.match(r"^[0-9a-f]{7,64}$", data["base"]):
        raise UsageError(f"{toml_path}: base {data['base']!r} must be a commit id (hex)")
    if "line_of" in data and not _NAME.match(str(data["line_of"])):
        raise UsageError(f"{toml_path}: line_of {data['line_of']!r} must name a target (lowercase letters, digits, '.', '_', '-')")
    if "line_of" in data and "line" not in data:
        raise UsageError(f"{toml_path}: a target with line_of needs a line name (line = \"v2.5\")")
    for key in ("line", "line_of"):
        if key in data and not isinstance(data[key], str):
            raise UsageError(f"{toml_path}: {key} must be a string")
    return Target(
        name=data["name"], dir=tdir, upstream=data["upstream"], branch=data.get("branch", "main"),
        base=data["base"], version=data["version"], description=data.get("description", ""),
        raw=data, **parse_sections(data, str(toml_path)),
        line=data.get("line", "main"), line_of=data.get("line_of"), serves=_serves(toml_path, data.get("serves", {})),
        not_applicable=_reasons(toml_path, "not_applicable", data.get("not_applicable", {})),
        regression_guard=_reasons(toml_path, "regression_guard", data.get("regression_guard", {})),
        upstream_aliases=_aliases(toml_path, data.get("upstream_aliases", [])),
    )


def _aliases(toml_path: Path, value) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)):
        raise UsageError(f"{toml_path}: upstream_aliases must be a list of URLs (the upstream's former names)")
    return list(value)


def _serves(toml_path: Path, table) -> dict:
    """[serves] hami = [releases], shrreg = "MAJOR.MINOR": what a line's libraries may replace."""
    if not isinstance(table, dict):
        raise UsageError(f"{toml_path}: [serves] must be a table")
    unknown = sorted(set(table) - {"hami", "shrreg"})
    if unknown:
        raise UsageError(f"{toml_path}: [serves] has unknown key(s) {', '.join(unknown)} (hami, shrreg)")
    if not (isinstance(table.get("hami", []), list) and all(isinstance(v, str) for v in table.get("hami", []))):
        raise UsageError(f"{toml_path}: [serves] hami must be a list of HAMi release names")
    if not isinstance(table.get("shrreg", ""), str):
        raise UsageError(f"{toml_path}: [serves] shrreg must be a string (\"1.1\")")
    return dict(table)


def _reasons(toml_path: Path, name: str, table) -> dict:
    """[not_applicable] / [regression_guard]: key -> the reason, a non-empty string."""
    if not isinstance(table, dict):
        raise UsageError(f"{toml_path}: [{name}] must be a table")
    for k, v in table.items():
        if not isinstance(v, str) or not v.strip():
            raise UsageError(f"{toml_path}: [{name}] {k!r} needs the reason as a string")
    return dict(table)


def update_target_toml(path: Path, *, remove: tuple[str, ...] = (), after: str | None = None, **keys) -> None:
    """THE writer of an existing target.toml (tomlkit; no regex edits a TOML file): removes the
    top-level keys `remove`, then sets `keys` (e.g. base=..., version=...) — a key already there
    keeps its place, its comment and its line; a new one goes after `after` (then after the one
    before it), else after the other top-level keys. Written atomically, and only when the result
    still loads as a target (a bad value is a UsageError and the file is left as it was)."""
    path = Path(path)
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    for key in remove:
        if key in doc:
            del doc[key]
    prev = after
    for key, value in keys.items():
        if key in doc or prev is None or prev not in doc:
            doc[key] = value
        else:
            doc = _with_key_after(doc, prev, key, value)
            prev = key
    _write_checked(path, tomlkit.dumps(doc), write_atomic)


def update_submodule_toml(toml: Path, label: str, *, remove: tuple[str, ...] = (), **keys) -> None:
    """Edit the [[submodule]] table of `label` (its name, else its path's last part) in an existing
    target.toml: remove keys, then set `keys` (tomlkit, comments kept; checked as update_target_toml)."""
    path = Path(toml)
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    table = next((t for t in doc.get("submodule", []) if (t.get("name") or Path(t.get("path", "")).name) == label), None)
    if table is None:
        raise UsageError(f"{path}: no [[submodule]] named {label}")
    for key in remove:
        if key in table:
            del table[key]
    for key, value in keys.items():
        table[key] = value
    _write_checked(path, tomlkit.dumps(doc), write_atomic)


def _with_key_after(doc, prev: str, key: str, value):
    """`doc` with `key = value` right after the top-level key `prev`, every other item (comments and
    blank lines too) where it was. Through tomlkit's public body/add: its private _insert_after went
    away in tomlkit 0.15.3 (a fresh venv's newest tomlkit failed every line-making rebase on it)."""
    out = tomlkit.document()
    for k, item in doc.body:
        if isinstance(item, tomlkit.items.Null):
            continue  # what tomlkit leaves where a removed key was (`remove=`): nothing to write
        if k is None:
            out.add(item)  # a comment or whitespace between items
            continue
        out.add(k, item)
        if k.key == prev:
            out.add(key, value)
    return out


def write_target_toml(path: Path, data: dict) -> None:
    """A new target.toml from `data` (top-level keys, then tables), rendered by tomlkit."""
    _write_checked(Path(path), tomlkit.dumps(data), write_atomic)


def _write_checked(path: Path, text: str, write_atomic) -> None:
    with tempfile.TemporaryDirectory() as d:  # validate the exact bytes before they replace the file
        # in the folder its name says (a staged copy's own folder has another name)
        name = tomllib.loads(text).get("name")
        probe = Path(d) / (name if isinstance(name, str) and _NAME.match(name) else path.parent.name)
        probe.mkdir()
        (probe / "target.toml").write_text(text, encoding="utf-8")
        load_target_dir(probe)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"))


def list_targets(ws: Workspace) -> list[str]:
    if not ws.patches_dir.is_dir():
        return []
    # hidden folders are lucepatch's own staging copies (engine/transaction.py), never targets
    return sorted(p.name for p in ws.patches_dir.iterdir() if not p.name.startswith(".") and (p / "target.toml").is_file())


def family_lines(ws: Workspace, family: str) -> list[str]:
    """The targets that are lines of `family` (line_of = family), by name."""
    out = []
    for name in list_targets(ws):
        if name != family:
            try:
                if load_target_dir(ws.patches_dir / name).line_of == family:
                    out.append(name)
            except UsageError:
                continue  # a broken target.toml is lint's to report, not a line
    return out


def line_name(family: str, line: str) -> str:
    """The target folder of `line` of `family`: hami-core + v2.5 -> hami-core-v2.5."""
    if not _NAME.match(line):
        raise UsageError(f"line {line!r} must be lowercase letters, digits, '.', '_' or '-' (e.g. v2.5)")
    return f"{family}-{line}"


def lines_of(ws: Workspace, family: str) -> list[Target]:
    """Every target of the family `family`, its own first (line main), then by name."""
    out = [load_target(ws, n) for n in list_targets(ws)]
    out = [t for t in out if t.family == family]
    return sorted(out, key=lambda t: (t.line_of is not None, t.name))


def load_target(ws: Workspace, name: str | None) -> Target:
    names = list_targets(ws)
    if name is None:
        if len(names) == 1:
            name = names[0]
        else:
            raise UsageError(f"name a TARGET; workspace {ws.path} has {', '.join(names) or 'none'}")
    if name not in names:
        raise UsageError(f"unknown target {name!r} in workspace {ws.path}; known: {', '.join(names) or 'none'}")
    return load_target_dir(ws.patches_dir / name)


def sub_target(target: Target, sub: Submodule) -> Target:
    """A Target-like object for one [[submodule]]: its own base and series under series_dir."""
    if sub.layout not in ("submodule", "folder", "absent"):
        raise UsageError(f"{target.toml_path}: [[submodule]] {sub.label}: layout must be 'submodule', 'folder' or "
                         f"'absent', not {sub.layout!r}")
    # a folder's series applies on the superproject's base: it has no base of its own
    for key in ("path", "series_dir") + (("base",) if sub.layout == "submodule" else ()):
        if not getattr(sub, key):
            raise UsageError(f"{target.toml_path}: a [[submodule]] has an empty {key}")
    if sub.layout != "submodule" and sub.base:
        raise UsageError(f"{target.toml_path}: [[submodule]] {sub.label} is a folder of the superproject "
                         "(layout = 'folder'): drop its base, the superproject's base is the folder's")
    sdir = (target.dir / sub.series_dir).resolve()
    if not sdir.is_relative_to(target.dir.resolve()):
        raise UsageError(f"{target.toml_path}: series_dir {sub.series_dir!r} leaves the target folder")
    return Target(name=f"{target.name}.{sub.label}", dir=sdir, upstream=sub.url or target.upstream,
                  branch=sub.branch, base=sub.base or target.base, version=target.version, raw=sub.to_json())
