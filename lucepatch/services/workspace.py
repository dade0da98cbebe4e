"""Where things are, as every verb and a program resolve them: the workspace, the cache, a target
(its series parsed) and its upstream checkout (docs/design.md "Layers"; lucepatch.api exposes these
by name)."""

from __future__ import annotations

from pathlib import Path

from lucepatch import git
from lucepatch.target import Target, load_target
# the workspace and the cache are resolved where they are defined (workspace.py): these are the use case
from lucepatch.workspace import Workspace, resolve_cache as cache_dir, resolve_source, resolve_workspace as open_workspace

__all__ = ["open_workspace", "cache_dir", "target", "source", "Workspace", "Target"]


def target(ws: Workspace, name: str | None = None) -> Target:
    """A target of the workspace (the only one when `name` is None), its series parsed: a patch
    that does not parse is refused here, before any work; UsageError naming the others when unknown."""
    t = load_target(ws, name)
    _ = t.patches
    return t


def source(t: Target, path: str | Path | None = None) -> Path:
    """The upstream checkout of `t`: `path` (`~` expanded), else $LUCEPATCH_SRC_<TARGET> (else, for a
    line of a series, $LUCEPATCH_SRC_<FAMILY>); checked to be the top of a git work tree. lucepatch
    only reads it, except `apply`, which switches its branch."""
    src = resolve_source(path, t.name, family=t.family)
    git.open_repo(src)
    return src
