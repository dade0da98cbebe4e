"""Where patches/ and reproducers/ live (the workspace) and where work happens (the cache).

Resolution order is the team contract (docs/design.md "Contracts"):
workspace: --workspace, $LUCEPATCH_WORKSPACE, nearest ancestor of cwd holding lucepatch.toml,
else the copy packaged in the wheel (read-only: writing verbs refuse with exit 2).
cache: --cache-dir, $LUCEPATCH_CACHE, $XDG_CACHE_HOME/lucepatch (~/.cache/lucepatch).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lucepatch.errors import EnvironmentMissing, UsageError, oserror_fix

MARKER = "lucepatch.toml"
PACKAGED = Path(__file__).resolve().parent / "_workspace"


@dataclass(frozen=True)
class Workspace:
    path: Path
    origin: str  # flag | env | ancestor | packaged
    read_only: bool = False

    @property
    def patches_dir(self) -> Path:
        return self.path / "patches"

    @property
    def reproducers_dir(self) -> Path:
        return self.path / "reproducers"

    def require_writable(self, verb: str) -> None:
        if self.read_only:
            raise UsageError(
                f"{verb} writes to the workspace, but the workspace in use is the read-only copy packaged "
                f"in lucepatch ({self.path}); pass --workspace DIR or run inside a folder holding {MARKER}"
            )

    def describe(self) -> str:
        return f"{self.path} ({self.origin}{', read-only' if self.read_only else ''})"

    def to_json(self) -> dict:
        return {"path": str(self.path), "origin": self.origin, "read_only": self.read_only}


def _check_dir(path: Path, how: str) -> Path:
    path = path.expanduser()
    if not path.is_dir():
        raise UsageError(f"workspace {path} (from {how}) is not a directory; create it or point {how} elsewhere")
    if not (path / "patches").is_dir() and not (path / MARKER).is_file():
        raise UsageError(f"workspace {path} (from {how}) has neither {MARKER} nor patches/; it is not a lucepatch workspace")
    return path.resolve()


def resolve_workspace(explicit: str | os.PathLike | None = None, cwd: Path | None = None) -> Workspace:
    if explicit:
        return Workspace(_check_dir(Path(explicit), "--workspace"), "flag")
    env = os.environ.get("LUCEPATCH_WORKSPACE")
    if env:
        return Workspace(_check_dir(Path(env), "$LUCEPATCH_WORKSPACE"), "env")
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / MARKER).is_file():
            return Workspace(candidate, "ancestor")
    packaged = _packaged_workspace()
    return Workspace(packaged, "packaged", read_only=True)


def _packaged_workspace() -> Path:
    if (PACKAGED / "patches").is_dir():
        return PACKAGED
    # Editable install: the package sits inside the source tree, whose root is the workspace.
    root = Path(__file__).resolve().parent.parent
    if (root / MARKER).is_file():
        return root
    raise UsageError("no workspace found and this lucepatch has no packaged patches; pass --workspace DIR")


def cache_location(explicit: str | os.PathLike | None = None) -> Path:
    """Where the cache is (nothing created)."""
    if explicit:
        path = Path(explicit).expanduser()
    elif os.environ.get("LUCEPATCH_CACHE"):
        path = Path(os.environ["LUCEPATCH_CACHE"]).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "lucepatch"
    return path


def resolve_cache(explicit: str | os.PathLike | None = None) -> Path:
    path = cache_location(explicit)
    try:
        if path.exists() and not path.is_dir():
            raise UsageError(f"cache {path} exists and is not a directory; pass --cache-dir DIR")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where a folder belongs, a name too long, a read-only disk ...
        fix = oserror_fix(exc, cache=path)
        if fix is None:
            raise
        raise EnvironmentMissing(f"cache {path}: {os.strerror(exc.errno)}; {fix} (--cache-dir, $LUCEPATCH_CACHE)") \
            from None
    return path.resolve()


def source_env(target_name: str) -> str:
    """The environment variable naming a target's upstream checkout (LUCEPATCH_SRC_HAMI_CORE)."""
    return f"LUCEPATCH_SRC_{target_name.upper().replace('-', '_').replace('.', '_')}"


def source_envs(target_name: str, family: str | None = None) -> list[str]:
    """The variables that may name a target's checkout, in the order they are read: one variable per
    upstream repository serves every line of it ($LUCEPATCH_SRC_HAMI_CORE for hami-core and
    hami-core-v2.5); a line's own $LUCEPATCH_SRC_<LINE> (LUCEPATCH_SRC_HAMI_CORE_V2_5), when set,
    overrides it for that line alone (docs/series-engine.md "Lines")."""
    return list(dict.fromkeys([source_env(target_name), source_env(family or target_name)]))


def find_source(target_name: str, family: str | None = None) -> tuple[Path | None, str | None]:
    """(the checkout a variable names, expanded, and that variable) or (None, None)."""
    for env in source_envs(target_name, family):
        if os.environ.get(env):
            return Path(os.environ[env]).expanduser(), env
    return None, None


def resolve_source(source: str | os.PathLike | None, target_name: str, *, family: str | None = None) -> Path:
    """The upstream checkout of a target: the one given, else $LUCEPATCH_SRC_<TARGET>, else (for a
    line of a series, docs/series-engine.md "Lines") $LUCEPATCH_SRC_<FAMILY>, else exit 3. A leading
    `~` is expanded here, where the path enters (an API caller's string, `--source=~/...`, a
    variable set in an env file)."""
    if source:
        return Path(source).expanduser()
    path, _ = find_source(target_name, family)
    if path is not None:
        return path
    raise EnvironmentMissing(f"no upstream checkout of {target_name}: pass --source PATH or set {source_hint(target_name, family)}")


def source_hint(target_name: str, family: str | None = None) -> str:
    """The variable to set, said once: the repository's, and for a line the override it may use."""
    if family and family != target_name:
        return (f"{source_env(family)} (it serves every line of {family}; {source_env(target_name)} overrides it "
                f"for {target_name} alone)")
    return source_env(target_name)
