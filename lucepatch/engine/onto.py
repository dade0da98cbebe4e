"""`apply` as a service: the series applied in a private clone, then the user's checkout switched to
lucepatch/<target>/<version> — only when every patch applied (or `partial`), never over untracked
files the series would overwrite, with `stash` carrying uncommitted changes across."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.engine import checkout as co
from lucepatch.engine.apply import SeriesResult, WorkArea, apply_series
from lucepatch.errors import UsageError
from lucepatch.target import Target


@dataclass
class Applied:
    result: SeriesResult
    branch: str
    switched: bool
    stash: dict = field(default_factory=lambda: {"stashed": False, "restored": None})


def apply_onto_checkout(t: Target, src: Path, cache: Path, *, partial: bool = False, force: bool = False,
                        stash: bool = False, fetch: bool = False) -> Applied:
    co.open_checkout(src)
    branch = t.branch_name
    journals = cache / "switch"  # the switch's journal: a killed switch is restored by the next command
    co.check_no_switch_running(src, journals)
    co.require_switchable(src, branch, force=force, allow_dirty=stash)
    co.require_writable_git_dir(src)
    with WorkArea(cache, f"apply-{t.name}") as work:
        result = apply_series(t, src, t.patches, work, checkout=False, fetch=fetch)
        if result.conflicts and not partial:
            return Applied(result, branch, False)
        clash = co.untracked_collisions(src, work.repo, result.base, result.head)
        if clash:
            raise UsageError(f"untracked file {src / clash[0]} would be overwritten by the series; "
                             "move it away or commit it first")
        overlap = co.stash_overlap(src, work.repo, result.base, result.head) if stash else []
        if overlap:
            raise UsageError(f"your uncommitted change to {src / overlap[0]} overlaps a file the series changes; "
                             "commit it (or move it away) instead of --stash")
        info = co.switch(src, work.repo, branch, stash=stash, journal_dir=journals)
        return Applied(result, branch, True, info)
