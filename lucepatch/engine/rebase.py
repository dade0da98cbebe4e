"""rebase: the rules a rebase session (engine/session.py) applies to a finished walk.

Version bump: MAJOR when the base changes, MINOR when a patch leaves the series (absorbed,
skipped, dropped) or its change (patch-id) differs, PATCH when only its text changes (index
lines, context, offsets of the fresh re-export). Attribution: an absorbed patch names the
oldest first-parent commit of base..onto where its signal first holds.
"""

from __future__ import annotations

from pathlib import Path

from lucepatch.engine import upstreamed
from lucepatch.engine.core import ALREADY_UPSTREAM, IndexEngine
from lucepatch.series import Patch


def bump_version(version: str, kind: str | None) -> str:
    major, minor, patch = (int(x) for x in version.split("."))
    if kind == "major":
        return f"{major + 1}.0.0"
    if kind == "minor":
        return f"{major}.{minor + 1}.0"
    if kind == "patch":
        return f"{major}.{minor}.{patch + 1}"
    return version


def attribute(repo: Path, base: str, onto: str, work: Path, patch: Patch, f: Path, signal: str) -> str | None:
    """The oldest commit of base..onto where the signal first holds (None when none does)."""
    eng = IndexEngine(repo, Path(work) / "attr.index")
    if signal in ("reverse-apply", "3-way"):
        def has(c):
            eng.reset(c)
            return eng.check_reverse(f) if signal == "reverse-apply" else eng.apply(f)[0] == ALREADY_UPSTREAM
    else:
        def has(c):
            return upstreamed.content_match(patch, upstreamed.tree_reader(repo, c))
    return upstreamed.first_commit_with(repo, base, onto, has)
