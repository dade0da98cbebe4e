"""matrix: every upstream commit of a range x every patch of the series, without checkouts.

Cells mean what `apply`/`check` mean (engine/core.py: exact `git apply --cached`, else `--3way`,
a 3-way no-op is already-upstream), cumulative in series order by default (`independent=True`:
each patch alone on the commit). `git apply` reads nothing but the files a patch names, so:

1. One `git cat-file --batch-check` over the whole range gives, per commit, the blob ids of every
   path the series names; commits with the same combination share one evaluation.
2. Per patch (a round), the states are grouped by the blobs of *that patch's* paths, so one
   evaluation serves every commit (and every earlier-patch outcome) with those blobs.
3. A patch whose preimage blobs (its `index` lines) are exactly the state's applies exactly,
   without running git (b4's check_applies_clean); its result is the postimage blob ids. The
   index lines are trusted only after git itself applied the patch to that preimage once and got
   the postimage ids (a hand-edited patch with stale index lines loses the shortcut).
4. Every other evaluation of the round goes through git at once (engine/matrix_batches.py): a
   synthetic index holds each evaluation's blobs under its own folder `e<k>/`, and ONE patch input
   holds the patch once per evaluation with its paths moved there; `git apply --cached` (exact)
   then `--3way` on the ones that failed, the index read back for every result. So the number of
   git processes grows with the series length (about four per patch), not with the history length.

Series with renames, copies, mode changes, binary or quoted paths, and ranges where a path is a
folder or submodule at some commit, go through the general path (`_evaluate_full`: a read-tree
and the engine per distinct state), which is also what the agreement test compares with.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, odb
from lucepatch.engine.absorption import judge_cells
from lucepatch.engine.apply import WorkArea, prepare_private
from lucepatch.engine.core import ALREADY_UPSTREAM, APPLIED, APPLIED_3WAY, CONFLICT, IndexEngine
from lucepatch.engine.matrix_batches import MISSING, Batches, Fallback, Item, PatchShape, patch_shape, trusted_patches
from lucepatch.engine.safety import diff_paths
from lucepatch.engine import layout
from lucepatch.engine.subtargets import sub_targets
from lucepatch.errors import UsageError
from lucepatch.series import Patch

SYMBOL = {APPLIED: "A", APPLIED_3WAY: "3", ALREADY_UPSTREAM: "U", CONFLICT: "X"}


@dataclass
class MatrixResult:
    commits: list[str]
    subjects: list[str]
    cells: list[list[str]]  # [commit][patch]
    states: int
    independent: bool
    details: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)  # how the cells were computed (evaluations, git runs)

    def compatible(self, i: int) -> bool:
        return all(c != CONFLICT for c in self.cells[i])

    @property
    def newest_compatible(self) -> str | None:
        for i in range(len(self.commits) - 1, -1, -1):
            if self.compatible(i):
                return self.commits[i]
        return None


def range_commits(repo: Path, rev_range: str, *, first_parent: bool = False) -> tuple[list[str], list[str]]:
    """Commits of the range, oldest first (all of them, topological order; or the first-parent chain)."""
    how = ("--first-parent",) if first_parent else ("--topo-order",)
    out = git.run(repo, "log", *how, "--reverse", "--format=%H%x00%s", rev_range).stdout
    commits, subjects = [], []
    for line in out.splitlines():
        if "\x00" in line:
            c, s = line.split("\x00", 1)
            commits.append(c)
            subjects.append(s)
    return commits, subjects


def state_keys(repo: Path, commits: list[str], paths: list[str]) -> tuple[list[tuple], bool]:
    """Per commit, the object ids at `paths` (MISSING when absent); and whether every present
    object is a blob (False: a path is a folder or a submodule somewhere in the range)."""
    if not paths:
        return [()] * len(commits), True
    out = odb.batch_check(repo, [f"{c}:{p}" for c in commits for p in paths])
    keys, only_blobs = [], True
    n = len(paths)
    for i in range(len(commits)):
        row = []
        for found in out[i * n:(i + 1) * n]:
            if found is None:
                row.append(MISSING)
            else:
                oid, kind = found
                only_blobs = only_blobs and kind == "blob"
                row.append(oid)
        keys.append(tuple(row))
    return keys, only_blobs


# ---- the matrix -------------------------------------------------------------------------------
def _series_paths(patches: list[Patch]) -> list[str]:
    paths: list[str] = []
    for p in patches:
        for x in diff_paths(p.diff):
            if x not in paths:
                paths.append(x)
    return paths


def run_matrix(repo: Path, work_dir: Path, patches: list[Patch], files: list[Path], commits: list[str],
               subjects: list[str], *, independent: bool = False, jobs: int | None = None) -> MatrixResult:
    paths = _series_paths(patches)
    keys, only_blobs = state_keys(repo, commits, paths)
    first_of: dict[tuple, str] = {}
    for c, key in zip(commits, keys):
        first_of.setdefault(key, c)
    distinct = list(first_of)
    shapes = [patch_shape(p.diff) for p in patches]
    rows: dict[tuple, list[str]] | None = None
    details: dict = {}
    stats: dict = {"method": "rounds"}
    if only_blobs and all(s.simple for s in shapes):
        try:
            rows, dkeys, rstats = _by_rounds(repo, work_dir, patches, shapes, paths, distinct, independent,
                                             max(1, min(jobs or os.cpu_count() or 1, 8)))
            for (key, name), d in dkeys.items():
                details[(first_of[key], name)] = d
            stats.update(rstats)
        except Fallback as exc:
            rows = None
            stats["fallback"] = str(exc)
    if rows is None:
        stats["method"] = "per-state engine"
        by_commit: dict[str, list[str]] = {}
        _run_full(repo, work_dir, [first_of[k] for k in distinct], patches, files, independent, jobs,
                  by_commit, details)
        rows = {k: by_commit[first_of[k]] for k in distinct}
    cells = [list(rows[key]) for key in keys]
    return MatrixResult(commits, subjects, cells, len(distinct), independent, details, stats)


def _rounds(shapes: list[PatchShape], independent: bool) -> list[list[int]]:
    """Patches evaluated in one batch: all of them when independent; else runs of consecutive
    patches whose paths are disjoint (none reads what an earlier one in the run writes)."""
    if independent:
        return [list(range(len(shapes)))]
    groups: list[list[int]] = []
    seen: set[str] = set()
    for j, sh in enumerate(shapes):
        if groups and not seen & set(sh.paths):
            groups[-1].append(j)
            seen |= set(sh.paths)
        else:
            groups.append([j])
            seen = set(sh.paths)
    return groups


def _by_rounds(repo, work_dir, patches, shapes, paths, distinct, independent, jobs=1):
    """Patch by patch (a round), every distinct state of that patch's paths evaluated once: by
    blob id where the preimage matches a trusted patch, the rest in one batch per round (one
    batch for all patches with `independent`: nothing depends on an earlier patch then)."""
    batches = Batches(repo, work_dir, jobs)
    trusted = trusted_patches(batches, patches, shapes)
    col = {p: i for i, p in enumerate(paths)}
    current = [list(k) for k in distinct]
    rows: dict[tuple, list[str]] = {k: [] for k in distinct}
    dkeys: dict = {}
    by_blob = 0
    for group in _rounds(shapes, independent):
        items: list[Item] = []
        plan = []  # (j, {input tuple: result or item number})
        for j in group:
            shape = shapes[j]
            idx = [col[f.path] for f in shape.files]
            pre = tuple(f.pre or MISSING for f in shape.files)
            post = tuple(f.post or MISSING for f in shape.files)
            where: dict[tuple, object] = {}
            for st in current:
                inp = tuple(st[i] for i in idx)
                if inp in where:
                    continue
                if trusted[j] and inp == pre:
                    where[inp] = (APPLIED, post, "")
                    by_blob += 1
                else:
                    where[inp] = len(items)
                    items.append(Item(j, shape, inp))
            plan.append((j, idx, where))
        got = batches.run(items)
        for j, idx, where in plan:
            for key, st in zip(distinct, current):
                r = where[tuple(st[i] for i in idx)]
                status, blobs, detail = got[r] if isinstance(r, int) else r
                rows[key].append(status)
                if status == CONFLICT:
                    dkeys[(key, patches[j].name)] = detail
                if not independent and status != CONFLICT:
                    for i, b in zip(idx, blobs):
                        st[i] = b
    return rows, dkeys, {"evaluations": batches.evaluations, "file_evaluations": batches.file_evaluations,
                         "exact_by_blob_id": by_blob,
                         "git_runs": batches.git_runs + 1,
                         "index_lines_trusted": [p.name for p, ok in zip(patches, trusted) if ok]}


# ---- the general path: one read-tree + the engine per distinct state ----------------------------
def _evaluate_full(repo: Path, index: Path, todo: list[str], patches, files, independent: bool, out: dict,
                   details: dict):
    engine = IndexEngine(repo, index)
    saved = index.with_name(index.name + ".base")
    for c in todo:
        engine.reset(c)
        if independent:
            shutil.copyfile(engine.index, saved)
        row = []
        for j, (p, f) in enumerate(zip(patches, files)):
            if independent and j:
                shutil.copyfile(saved, engine.index)
                engine._tree = None
            status, detail = engine.apply(f, name=str(p.path))
            row.append(status)
            if status == CONFLICT:
                details[(c, p.name)] = detail
        out[c] = row


def _run_full(repo, work_dir, todo, patches, files, independent, jobs, rows, details):
    jobs = max(1, min(jobs or os.cpu_count() or 1, 8, len(todo)))
    if jobs == 1:
        _evaluate_full(repo, work_dir / "matrix-index-0", todo, patches, files, independent, rows, details)
        return
    threads = [threading.Thread(target=_evaluate_full, args=(repo, work_dir / f"matrix-index-{k}", todo[k::jobs],
                                                              patches, files, independent, rows, details))
               for k in range(jobs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    missing = [c for c in todo if c not in rows]
    if missing:  # a worker raised (e.g. a malformed patch): redo serially so the error surfaces
        _evaluate_full(repo, work_dir / "matrix-index-0", missing, patches, files, independent, rows, details)


# ---- the verb: a target (and its sub-targets) over a range --------------------------------------
@dataclass
class SubMatrix:
    """A sub-target's cells along the superproject's commits, where each commit holds it
    (engine/layout.py): in a submodule, at the commit the gitlink names (no cells when the
    submodule's checkout lacks that commit); in a folder (vendored) or absent, its patches
    re-rooted onto the superproject commit itself."""

    sub: object  # engine.subtargets.SubTarget
    commits: list[str]  # superproject commits
    links: list[str | None]
    cells: list[list[str] | None]
    states: int = 0
    stats: dict = field(default_factory=dict)
    places: list = field(default_factory=list)  # engine.layout.Place per commit

    def to_json(self) -> dict:
        places = self.places or [None] * len(self.commits)
        return {**self.sub.to_json(), "patches": [p.name for p in self.sub.target.patches],
                "distinct_states": self.states, "evaluation": self.stats,
                "commits": [{"commit": c, "submodule_commit": link, "cells": cells,
                             "layout": pl.kind if pl else None, "at": pl.path if pl else None,
                             "compatible": None if cells is None else all(x != CONFLICT for x in cells)}
                            for c, link, cells, pl in zip(self.commits, self.links, self.cells, places)]}


def _sub_matrix(st, src: Path, cache: Path, commits: list[str], independent: bool, jobs: int | None) -> SubMatrix:
    places = layout.places(src, commits, st.submodule)
    links = [pl.commit if pl.kind == layout.SUBMODULE else None for pl in places]
    sm = SubMatrix(st, commits, links, [None] * len(commits), 0, {}, places)
    stats: dict = {}
    # in a submodule: every distinct gitlink its checkout has, the submodule's own history
    checkout = next((c for c in (layout.checkout_of(src, st.submodule, pl) for pl in places if pl.kind == layout.SUBMODULE)
                     if c is not None), None)
    have = [c for c in dict.fromkeys(links) if c and checkout is not None and git.try_resolve(checkout, c) == c]
    if have:
        with WorkArea(cache, f"matrix-{st.target.name}") as work:
            sfiles = prepare_private(checkout, st.target.patches, work, have[0])
            r = run_matrix(work.repo, work.path, st.target.patches, sfiles, have, [""] * len(have),
                           independent=independent, jobs=jobs)
            judge_cells(work.repo, st.target.patches, sfiles, have, r.cells, work.path / "judge")
        by_link = dict(zip(have, r.cells))
        sm.states += r.states
        stats["submodule"] = r.stats
        sm.cells = [by_link.get(link) if link else None for link in links]
    # in the superproject (a folder, or absent): the re-rooted series on those superproject commits
    for at in dict.fromkeys(pl.path for pl in places if pl.in_superproject):
        idx = [i for i, pl in enumerate(places) if pl.in_superproject and pl.path == at]
        moved = [layout.reroot(p, "", at) for p in st.target.patches]
        alternates = [layout.objects_of(checkout)] if checkout is not None else []
        with WorkArea(cache, f"matrix-{st.target.name}-folder") as work:
            files = prepare_private(src, moved, work, commits[idx[0]], alternates=alternates)
            r = run_matrix(work.repo, work.path, moved, files, [commits[i] for i in idx], [""] * len(idx),
                           independent=independent, jobs=jobs)
            judge_cells(work.repo, moved, files, [commits[i] for i in idx], r.cells, work.path / "judge")
        for i, cells in zip(idx, r.cells):
            sm.cells[i] = cells
        sm.states += r.states
        stats[f"folder {at}"] = r.stats
    sm.stats = stats
    return sm


def matrix_of(t, src: Path, cache: Path, rev_range: str, *, independent: bool = False, first_parent: bool = False,
              jobs: int | None = None) -> tuple[MatrixResult, list[SubMatrix]]:
    """`matrix`: the target's cells at every commit of the range, and each sub-target's."""
    if ".." not in rev_range:
        raise UsageError(f"--range {rev_range!r} must be a git range A..B")
    a, b = rev_range.split("..", 1)
    for ref in (a, b or "HEAD"):
        if ref:
            git.resolve_commit(src, ref, what=f"--range {'start' if ref == a else 'end'}", upstream=t.upstream_urls)
    commits, subjects = range_commits(src, rev_range, first_parent=first_parent)
    if not commits:
        raise UsageError(f"--range {rev_range} holds no commits in {src}")
    with WorkArea(cache, f"matrix-{t.name}") as work:
        files = prepare_private(src, t.patches, work, commits[0])
        res = run_matrix(work.repo, work.path, t.patches, files, commits, subjects, independent=independent, jobs=jobs)
        # a conflict the tree already has (a backport it contains, ...) is U, as check --onto says it
        res.details.update(judge_cells(work.repo, t.patches, files, commits, res.cells, work.path / "judge"))
    subs = [_sub_matrix(st, src, cache, commits, independent, jobs) for st in sub_targets(t)[1:] if st.target.series]
    return res, subs
