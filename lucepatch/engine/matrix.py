"""matrix: every upstream commit of a range x every patch of the series, without checkouts.

Cells come from the same IndexEngine.apply as `apply`/`check` (cumulative in series order by
default, `independent=True` for each patch alone on the commit). Two commits whose blobs agree on
every path the series names (both sides of renames included) give identical cells — `git apply`
reads nothing else — so each distinct state is computed once: one `git cat-file --batch-check`
for the whole range finds the states, one `read-tree` + the patch applications per state.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git
from lucepatch.engine.core import ALREADY_UPSTREAM, APPLIED, APPLIED_3WAY, CONFLICT, IndexEngine
from lucepatch.engine.safety import diff_paths
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


def state_keys(repo: Path, commits: list[str], paths: list[str]) -> list[tuple]:
    if not paths:
        return [()] * len(commits)
    lines = "".join(f"{c}:{p}\n" for c in commits for p in paths)
    out = git.run(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)",
                  stdin=lines.encode("utf-8", "surrogateescape")).stdout.splitlines()
    keys = []
    n = len(paths)
    for i in range(len(commits)):
        keys.append(tuple(l.split()[0] if not l.endswith("missing") else "-" for l in out[i * n:(i + 1) * n]))
    return keys


def _evaluate(repo: Path, index: Path, todo: list[str], patches, files, independent: bool, out: dict, details: dict):
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


def run_matrix(repo: Path, work_dir: Path, patches: list[Patch], files: list[Path], commits: list[str],
               subjects: list[str], *, independent: bool = False, jobs: int | None = None) -> MatrixResult:
    paths = []
    for p in patches:
        for x in diff_paths(p.diff):
            if x not in paths:
                paths.append(x)
    keys = state_keys(repo, commits, paths)
    first_of: dict[tuple, str] = {}
    for c, key in zip(commits, keys):
        first_of.setdefault(key, c)
    todo = list(first_of.values())
    jobs = max(1, min(jobs or os.cpu_count() or 1, 8, len(todo)))
    rows: dict[str, list[str]] = {}
    details: dict = {}
    if jobs == 1:
        _evaluate(repo, work_dir / "matrix-index-0", todo, patches, files, independent, rows, details)
    else:
        threads = [threading.Thread(target=_evaluate, args=(repo, work_dir / f"matrix-index-{k}", todo[k::jobs],
                                                             patches, files, independent, rows, details))
                   for k in range(jobs)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        missing = [c for c in todo if c not in rows]
        if missing:  # a worker raised (e.g. a malformed patch): redo serially so the error surfaces
            _evaluate(repo, work_dir / "matrix-index-0", missing, patches, files, independent, rows, details)
    cells = [list(rows[first_of[key]]) for key in keys]
    return MatrixResult(commits, subjects, cells, len(todo), independent, details)
