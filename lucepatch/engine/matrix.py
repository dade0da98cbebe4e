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
4. Every other evaluation of the round goes through git at once: a synthetic index holds each
   evaluation's blobs under its own folder `e<k>/`, and ONE patch input holds the patch once per
   evaluation with its paths moved there; `git apply --cached` (exact) then `--3way` on the ones
   that failed, `git ls-files -s` reads every result. So the number of git processes grows with
   the series length (about four per patch), not with the history length.

Series with renames, copies, mode changes, binary or quoted paths, and ranges where a path is a
folder or submodule at some commit, go through the general path (`_evaluate_full`: a read-tree
and the engine per distinct state), which is also what the agreement test compares with.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, odb
from lucepatch.engine.apply import WorkArea, prepare_private
from lucepatch.engine.core import ALREADY_UPSTREAM, APPLIED, APPLIED_3WAY, CONFLICT, PURE_CONFIG, IndexEngine
from lucepatch.engine.safety import diff_paths
from lucepatch.engine.subtargets import gitlinks, sub_targets
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


MISSING = "-"


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


# ---- the shape of a patch: which files, which blobs before and after ---------------------------
@dataclass
class FileChange:
    path: str
    pre: str | None  # blob id before (None: the patch creates the file)
    post: str | None  # blob id after (None: the patch deletes it)
    mode: str = "100644"


@dataclass
class PatchShape:
    files: list[FileChange]
    simple: bool  # plain text modify/add/delete with full index lines and unquoted a/ b/ paths
    blocks: list[bytes] = field(default_factory=list)  # the diff of each file, aligned with files

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


_INDEX = re.compile(r"^index ([0-9a-f]{40}|[0-9a-f]{64})\.\.([0-9a-f]{40}|[0-9a-f]{64})(?: (\d{6}))?$")


def patch_shape(diff: bytes) -> PatchShape:
    text = diff.decode("utf-8", "surrogateescape")
    blocks = re.split(r"^(?=diff --git )", text, flags=re.M)
    files: list[FileChange] = []
    simple = True
    for block in blocks:
        if not block.startswith("diff --git "):
            if block.strip():
                simple = simple and not re.search(r"^(?:---|\+\+\+|@@) ", block, re.M)
            continue
        head, _, _ = block.partition("\n@@")
        lines = head.split("\n")
        m = re.match(r"^diff --git a/(\S+) b/(\S+)$", lines[0])
        if not m or m.group(1) != m.group(2):
            simple = False
            continue
        path = m.group(1)
        pre = post = None
        mode = "100644"
        kind = "modify"
        seen_index = False
        for line in lines[1:]:
            if line.startswith("new file mode "):
                kind, mode = "add", line.split()[-1]
            elif line.startswith("deleted file mode "):
                kind, mode = "delete", line.split()[-1]
            elif line.startswith("index "):
                im = _INDEX.match(line)
                if not im:
                    simple = False
                    break
                seen_index = True
                pre, post = im.group(1), im.group(2)
                mode = im.group(3) or mode
            elif line.startswith(("old mode", "new mode", "similarity", "dissimilarity", "rename ", "copy ",
                                  "GIT binary patch", "Binary files")):
                simple = False
            elif line.startswith("--- "):
                simple = simple and line in (f"--- a/{path}", "--- /dev/null")
            elif line.startswith("+++ "):
                simple = simple and line in (f"+++ b/{path}", "+++ /dev/null")
        if not seen_index or "\nGIT binary patch\n" in block or mode not in ("100644", "100755"):
            simple = False
        if kind == "add":
            pre = None
        if kind == "delete":
            post = None
        if any(f.path == path for f in files):
            simple = False  # one file twice in one patch: leave it to the engine
        files.append(FileChange(path, pre, post, mode))
    return PatchShape(files, simple and bool(files), [b.encode("utf-8", "surrogateescape") for b in blocks
                                                      if b.startswith("diff --git ")])


def _moved(block: bytes, path: str, prefix: str) -> bytes:
    """One file's diff with its path under `prefix`: the header lines only, never hunk lines."""
    head, sep, hunks = block.partition(b"\n@@")
    p = path.encode("utf-8", "surrogateescape")
    q = prefix.encode() + p
    lines = []
    for line in head.split(b"\n"):
        if line == b"diff --git a/" + p + b" b/" + p:
            line = b"diff --git a/" + q + b" b/" + q
        elif line == b"--- a/" + p:
            line = b"--- a/" + q
        elif line == b"+++ b/" + p:
            line = b"+++ b/" + q
        lines.append(line)
    out = b"\n".join(lines) + sep + hunks
    return out if out.endswith(b"\n") else out + b"\n"


# ---- batches: many (patch, state) evaluations in one git apply ---------------------------------
Result = tuple  # (status, post blobs aligned with shape.paths, detail)


class _Fallback(Exception):
    """git answered in a way the batch cannot attribute to one evaluation: use the engine."""


_EK = re.compile(r"^error: (?:patch failed: )?e(\d+)/")


@dataclass
class Item:
    key: int  # which patch (items of one patch share file evaluations)
    shape: PatchShape
    blobs: tuple  # the state of shape.paths (blob ids / MISSING)


@dataclass(frozen=True)
class _FileEval:
    key: int
    fi: int  # file index in the patch
    blob: str  # its state


class Batches:
    """Evaluates items in a private repository with index files of its own under `work_dir`.

    An item (a patch on a state) is decomposed into its files: git applies and merges each file
    of a patch on its own, so equal (patch, file, blob) evaluations across items are done once.
    A patch applies exactly iff every file does; otherwise every file goes through --3way
    (which in git 2.32+ merges first even where a direct application would work, as
    IndexEngine's second step does) and the patch conflicts iff one file does."""

    def __init__(self, repo: Path, work_dir: Path, jobs: int = 1):
        self.repo = Path(repo)
        self.dir = Path(work_dir) / "matrix-batches"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jobs = max(1, jobs)
        self.git_runs = 0
        self.evaluations = 0
        self.file_evaluations = 0
        self._n = 0
        self._lock = threading.Lock()

    def _git(self, index: Path, *args: str, stdin: bytes | None = None, check: bool = True):
        with self._lock:
            self.git_runs += 1
        return git.run(self.repo, *args, stdin=stdin, check=check,
                       env={"GIT_INDEX_FILE": str(index), "GIT_OPTIONAL_LOCKS": "0", **PURE_CONFIG})

    def present(self, oids: set[str]) -> set[str]:
        oids = sorted(o for o in oids if o != MISSING)
        if not oids:
            return set()
        self.git_runs += 1
        return {found[0] for found in odb.batch_check(self.repo, oids) if found and found[1] == "blob"}

    def _index(self) -> Path:
        with self._lock:
            self._n += 1
            return self.dir / f"index-{self._n}"

    def run(self, items: list[Item]) -> list[Result]:
        if not items:
            return []
        self.evaluations += len(items)
        shapes = {it.key: it.shape for it in items}
        order: dict[_FileEval, int] = {}
        for it in items:
            for fi, b in enumerate(it.blobs):
                order.setdefault(_FileEval(it.key, fi, b), len(order))
        fes = list(order)
        self.file_evaluations += len(fes)
        exact = self._parallel(fes, shapes, ())
        item_exact = [all(exact[order[_FileEval(it.key, fi, b)]][0] == "ok" for fi, b in enumerate(it.blobs))
                      for it in items]
        need = sorted({order[_FileEval(it.key, fi, b)] for it, ok in zip(items, item_exact) if not ok
                       for fi, b in enumerate(it.blobs)})
        merged = dict(zip(need, self._parallel([fes[i] for i in need], shapes, ("--3way",))))
        res: list[Result] = []
        for it, ok in zip(items, item_exact):
            ids = [order[_FileEval(it.key, fi, b)] for fi, b in enumerate(it.blobs)]
            if ok:
                res.append((APPLIED, tuple(exact[i][1] for i in ids), ""))
                continue
            outs = [merged[i] for i in ids]
            bad = [o for o in outs if o[0] != "ok"]
            if bad:
                res.append((CONFLICT, it.blobs, "; ".join(dict.fromkeys(o[1] for o in bad if o[1])) or
                            "; ".join(o[1] for o in (exact[i] for i in ids) if o[0] != "ok")))
                continue
            blobs = tuple(o[1] for o in outs)
            if blobs == it.blobs:
                res.append((ALREADY_UPSTREAM, blobs, "3-way merge produced no change: the tree already has it"))
            else:
                res.append((APPLIED_3WAY, blobs, "context differed; 3-way merge with the patch's preimage blobs"))
        return res

    def _parallel(self, fes: list[_FileEval], shapes: dict, extra: tuple) -> list[tuple[str, str]]:
        """Per file evaluation: ("ok", blob after) | ("failed", why) | ("conflict", why); in
        `jobs` chunks at once (each its own index), each chunk one or two `git apply`."""
        if not fes:
            return []
        n = min(self.jobs, max(1, len(fes) // 8))
        chunks = [list(range(c, len(fes), n)) for c in range(n)]
        out: list = [None] * len(fes)
        errors: list[BaseException] = []

        def work(ids):
            try:
                for i, r in zip(ids, self._chunk([fes[i] for i in ids], shapes, extra)):
                    out[i] = r
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)

        if n == 1:
            work(chunks[0])
        else:
            threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        if errors:
            raise errors[0]
        return out

    def _chunk(self, fes: list[_FileEval], shapes: dict, extra: tuple) -> list[tuple[str, str]]:
        index = self._index()
        files = [shapes[fe.key].files[fe.fi] for fe in fes]
        entries = [(f.mode, fe.blob, f"e{k}/{f.path}") for k, (fe, f) in enumerate(zip(fes, files))
                   if fe.blob != MISSING]
        odb.write_index(index, entries)
        oid_len = len(entries[0][1]) if entries else 40
        moved = [_moved(shapes[fe.key].blocks[fe.fi], f.path, f"e{k}/") for k, (fe, f) in enumerate(zip(fes, files))]
        result: dict[int, tuple[str, str]] = {}
        todo = list(range(len(fes)))
        while todo:
            named = self._apply(index, moved, todo, extra)
            if not named:
                break
            for k, lines in named.items():
                result[k] = ("failed", _detail(lines, k))
            todo = [k for k in todo if k not in named]
            if not extra and todo and self._apply(index, moved, todo, extra):
                raise _Fallback("the exact subset failed on its second run")
            if not extra:
                break
        listed = odb.read_index(index, oid_len)
        if listed is None:  # an index format we do not read: ask git
            listed = []
            for entry in self._git(index, "ls-files", "-s", "-z").stdout.split("\0"):
                if entry:
                    meta, _, path = entry.partition("\t")
                    listed.append((path, meta.split()[1], int(meta.split()[2])))
        index.unlink(missing_ok=True)
        after: dict[int, str] = {}
        unmerged: set[int] = set()
        for path, oid, stage in listed:
            k = int(path.partition("/")[0][1:])
            if stage:
                unmerged.add(k)
            else:
                after[k] = oid
        for k, f in enumerate(files):
            if k in result:
                continue
            if k in unmerged:
                result[k] = ("conflict", f"Applied patch to '{f.path}' with conflicts.; U {f.path}")
            else:
                result[k] = ("ok", after.get(k, MISSING))
        return [result[k] for k in range(len(fes))]

    def _apply(self, index: Path, moved: list[bytes], ks: list[int], extra: tuple) -> dict[int, list[str]]:
        """`git apply --cached` of the evaluations `ks` as one input; {} when it succeeded (or,
        with --3way, wrote its conflicts), else the evaluations git named in its errors (then
        nothing was written)."""
        data = b"".join(moved[k] for k in ks)
        if not data:
            return {}
        res = self._git(index, "apply", "--cached", *extra, stdin=data, check=False)
        if res.status == 0:
            return {}
        if res.status < 0 or res.status > 128:
            raise _Fallback(f"git apply crashed ({res.status})")
        named: dict[int, list[str]] = {}
        for line in res.stderr.splitlines():
            m = _EK.match(line)
            if m:
                named.setdefault(int(m.group(1)), []).append(line)
        if extra and not named and "error:" not in res.stderr:
            return {}
        if not named:
            raise _Fallback(f"git apply failed without naming a path: {res.stderr.strip()[:200]}")
        return named


def _detail(lines: list[str], k: int) -> str:
    clean = [l.replace(f"e{k}/", "") for l in lines]
    return "; ".join(dict.fromkeys(clean[:4]))


def trusted_patches(batches: Batches, patches: list[Patch], shapes: list[PatchShape]) -> list[bool]:
    """Which patches' index lines may stand in for git: git, applying each to exactly its
    preimage blobs, must produce exactly its postimage ids (and so writes the postimage blobs
    that later patches read). One batch for the whole series."""
    pres = [tuple(f.pre or MISSING for f in sh.files) for sh in shapes]
    have = batches.present({o for pre in pres for o in pre})
    cand = [j for j, pre in enumerate(pres) if all(o == MISSING or o in have for o in pre)]
    got = batches.run([Item(j, shapes[j], pres[j]) for j in cand])
    ok = [False] * len(patches)
    for j, (status, blobs, _) in zip(cand, got):
        ok[j] = status == APPLIED and blobs == tuple(f.post or MISSING for f in shapes[j].files)
    return ok


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
        except _Fallback as exc:
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
    """A submodule's cells along the superproject's commits: in each, the submodule is at the
    commit the superproject's gitlink names (None: no submodule there, or a commit the
    submodule's checkout does not have — no cells then)."""

    sub: object  # engine.subtargets.SubTarget
    commits: list[str]  # superproject commits
    links: list[str | None]
    cells: list[list[str] | None]
    states: int = 0
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {**self.sub.to_json(), "patches": [p.name for p in self.sub.target.patches],
                "distinct_states": self.states, "evaluation": self.stats,
                "commits": [{"commit": c, "submodule_commit": link, "cells": cells,
                             "compatible": None if cells is None else all(x != CONFLICT for x in cells)}
                            for c, link, cells in zip(self.commits, self.links, self.cells)]}


def matrix_of(t, src: Path, cache: Path, rev_range: str, *, independent: bool = False, first_parent: bool = False,
              jobs: int | None = None) -> tuple[MatrixResult, list[SubMatrix]]:
    """`matrix`: the target's cells at every commit of the range, and each sub-target's."""
    if ".." not in rev_range:
        raise UsageError(f"--range {rev_range!r} must be a git range A..B")
    a, b = rev_range.split("..", 1)
    for ref in (a, b or "HEAD"):
        if ref:
            git.resolve_commit(src, ref, what=f"--range {'start' if ref == a else 'end'}", upstream=t.upstream)
    commits, subjects = range_commits(src, rev_range, first_parent=first_parent)
    if not commits:
        raise UsageError(f"--range {rev_range} holds no commits in {src}")
    with WorkArea(cache, f"matrix-{t.name}") as work:
        files = prepare_private(src, t.patches, work, commits[0])
        res = run_matrix(work.repo, work.path, t.patches, files, commits, subjects, independent=independent, jobs=jobs)
    subs = []
    if t.submodules:
        for st in sub_targets(t)[1:]:
            if not st.target.series:
                continue
            ssrc = st.source(src)
            links = gitlinks(src, commits, st.path)
            have = [c for c in dict.fromkeys(links) if c and git.try_resolve(ssrc, c) == c]
            cells: dict[str, list[str]] = {}
            sm = SubMatrix(st, commits, links, [], 0)
            if have:
                with WorkArea(cache, f"matrix-{st.target.name}") as work:
                    sfiles = prepare_private(ssrc, st.target.patches, work, have[0])
                    r = run_matrix(work.repo, work.path, st.target.patches, sfiles, have, [""] * len(have),
                                   independent=independent, jobs=jobs)
                cells = dict(zip(have, r.cells))
                sm.states, sm.stats = r.states, r.stats
            sm.cells = [cells.get(link) if link else None for link in links]
            subs.append(sm)
    return res, subs
