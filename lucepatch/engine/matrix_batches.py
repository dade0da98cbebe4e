"""The matrix's batches: many (patch, state) evaluations in one `git apply --cached`.

A patch's shape (which files, which blobs before and after its `index` lines say, whether it is
simple enough for a batch) decides whether it can be batched. An evaluation (a patch on a state,
the blob ids of its paths) is split into its files — git applies and merges each file of a patch
on its own — so equal (patch, file, blob) evaluations are done once across every state and
earlier-patch outcome; a synthetic index (lucepatch/odb.py's writer) holds each evaluation's blobs
under a folder of its own, `e<k>/`, and one patch input holds the file's diff once per evaluation
with its path moved there: `--cached` exact first, `--3way` for the ones that failed, the index
read back for every result. engine/matrix.py plans the rounds and falls back to the per-state
engine when git answers in a way a batch cannot attribute (`Fallback`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, odb
from lucepatch.engine.core import ALREADY_UPSTREAM, APPLIED, APPLIED_3WAY, CONFLICT, PURE_CONFIG
from lucepatch.series import Patch

MISSING = "-"


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


class Fallback(Exception):
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
                raise Fallback("the exact subset failed on its second run")
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
            raise Fallback(f"git apply crashed ({res.status})")
        named: dict[int, list[str]] = {}
        for line in res.stderr.splitlines():
            m = _EK.match(line)
            if m:
                named.setdefault(int(m.group(1)), []).append(line)
        if extra and not named and "error:" not in res.stderr:
            return {}
        if not named:
            raise Fallback(f"git apply failed without naming a path: {res.stderr.strip()[:200]}")
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
