"""The targets of a workspace, as the verbs name them (a name, or none when there is one)."""

from __future__ import annotations

from lucepatch.target import Target, family_lines, list_targets, load_target
from lucepatch.workspace import Workspace


def target(ws: Workspace, name: str | None = None) -> Target:
    """The target `name` (the only one when None); UsageError naming the others when unknown."""
    return load_target(ws, name)


def names(ws: Workspace) -> list[str]:
    """Every target of the workspace, by name."""
    return list_targets(ws)


def lines_of(ws: Workspace, family: str) -> list[str]:
    """The lines (targets) of a series family, beside the family's own target."""
    return family_lines(ws, family)
