"""`apply` as a service: the series applied in a private clone, then the user's checkout switched to
lucepatch/<target>/<version> — only when every patch applied (or `partial`), never over untracked
files the series would overwrite, with `stash` carrying uncommitted changes across."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.engine import checkout as co
from lucepatch.engine.absorption import judge_conflicts
from lucepatch.engine.apply import SeriesResult, WorkArea, apply_series
from lucepatch.engine.subtargets import applied_each, sub_targets
from lucepatch.errors import UsageError
from lucepatch.target import Target


@dataclass
class Applied:
    result: SeriesResult
    branch: str
    switched: bool
    stash: dict = field(default_factory=lambda: {"stashed": False, "restored": None})
    sub_stash: list = field(default_factory=list)  # the same, per switched submodule


def apply_onto_checkout(t: Target, src: Path, cache: Path, *, partial: bool = False, force: bool = False,
                        stash: bool = False, fetch: bool = False) -> Applied:
    """With [[submodule]] sub-targets, each submodule checkout is switched too (its own series, a
    branch of the same name), all of them or none (checkout.switch_group)."""
    co.open_checkout(src)
    branch = t.branch_name
    journals = cache / "switch"  # the switch's journal: a killed switch is restored by the next command
    co.check_no_switch_running(src, journals)
    co.require_switchable(src, branch, force=force, allow_dirty=stash)
    co.require_writable_git_dir(src)
    with contextlib.ExitStack() as stack:
        if t.submodules:
            for st_src, st in _submodule_checkouts(t, src):
                co.check_no_switch_running(st_src, journals)
                co.require_switchable(st_src, branch, force=force, allow_dirty=stash, detached_at=st.target.base)
                co.require_writable_git_dir(st_src)
            applied = applied_each(t, src, cache, stack, label="apply", fetch=fetch)
            result = applied[0].result
            result.subs = [(a.sub, a.result) for a in applied[1:]]
            # a folder sub-target's patches are commits of the superproject's branch: one member
            applied = [a for a in applied if not a.in_superproject]
        else:
            work = stack.enter_context(WorkArea(cache, f"apply-{t.name}"))
            res = apply_series(t, src, t.patches, work, checkout=False, fetch=fetch)
            judge_conflicts(res.outcomes, work.repo, res.base, res.base, work.path / "judge")  # as check does
            applied = [_Single(src, res, work)]
        result = applied[0].result
        if not t.submodules:
            result.subs = []
        if result.all_conflicts and not partial:
            return Applied(result, branch, False)
        members = []
        for a in applied:
            r, repo = a.result, a.work.repo
            clash = co.untracked_collisions(a.source, repo, r.base, r.head)
            if clash:
                raise UsageError(f"untracked file {a.source / clash[0]} would be overwritten by the series; "
                                 "move it away or commit it first")
            overlap = co.stash_overlap(a.source, repo, r.base, r.head) if stash else []
            if overlap:
                raise UsageError(f"your uncommitted change to {a.source / overlap[0]} overlaps a file the series "
                                 "changes; commit it (or move it away) instead of --stash")
            members.append(co.Member(a.source, repo, branch, stash))
        infos = co.switch_group(members, journals)
        return Applied(result, branch, True, infos[0], infos[1:])


@dataclass
class _Single:
    source: Path
    result: SeriesResult
    work: WorkArea


def _submodule_checkouts(t: Target, src: Path):
    for st in sub_targets(t)[1:]:
        if st.target.series and st.submodule.layout == "submodule":  # a folder is the superproject's
            yield st.source(src), st
