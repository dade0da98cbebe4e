"""Where things are, as every verb resolves them: the workspace, the cache, a target's checkout,
the targets of a workspace. Commands reach them through here (docs/design.md "Layers": a command
imports the service layer, not the floors below it)."""

from __future__ import annotations

from pathlib import Path

from lucepatch.workspace import Workspace, resolve_cache, resolve_source, resolve_workspace


def workspace(path: str | None) -> Workspace:
    """`--workspace`, else $LUCEPATCH_WORKSPACE, the nearest lucepatch.toml, the packaged copy."""
    return resolve_workspace(path)


def cache(path: str | None) -> Path:
    """`--cache-dir`, else $LUCEPATCH_CACHE, else $XDG_CACHE_HOME/lucepatch (created)."""
    return resolve_cache(path)


def source(path: str | None, target_name: str, *, family: str | None = None) -> Path:
    """`--source`, else $LUCEPATCH_SRC_<TARGET> (a line's family's too)."""
    return resolve_source(path, target_name, family=family)
