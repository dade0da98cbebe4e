"""Apply a series in a private working copy: exact first, then 3-way, every patch reported.

The working copy is a private repository under the cache borrowing the source's objects
(clone_private), so the user's checkout (work tree, index, refs, reflog, worktree list) is only
read until the very end, when `apply` copies the new objects in and switches to the finished
branch (engine/checkout.py). Patches git would apply exactly are applied in Python (FastSeries,
engine/fastapply.py); the others go through the index-only core (engine/core.py, shared with
matrix/status/rebase). One commit per applied patch, author and message from the patch, built
by `commit_object` on both paths. A conflicting patch is skipped and the later ones are still
tried (`after-conflict`), which `git am` alone cannot do.

Test-only hook: with LUCEPATCH_TEST_PAUSE_AT_PATCH=<dir>, at every patch boundary k (before patch
k+1; k = len(series) is "all applied, before the checkout moves") the run creates
<dir>/boundary-<k>, prints its pid there, and waits until the file is removed.
"""

from __future__ import annotations

import email.utils
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, odb, trailers
from lucepatch.engine import fastapply
from lucepatch.engine.core import APPLIED, APPLIED_3WAY, CONFLICT, PURE_CONFIG, IndexEngine, validate_diffs
from lucepatch.engine.safety import base_listing, check_series_safety
from lucepatch.engine.workarea import WorkArea, reclaim_orphans  # noqa: F401 (re-exported: its users import it here)
from lucepatch.errors import EnvironmentMissing, UsageError
from lucepatch.faults import PAUSE_ENV, pause  # noqa: F401 (PAUSE_ENV re-exported)
from lucepatch.series import Patch
from lucepatch.target import Target

# Outcomes per patch (JSON values; docs/design.md "Contracts", Apply): applied (exact context), applied-3way,
# already-upstream (the 3-way merge produced no change), conflict. Defined in engine/core.py.


@dataclass
class PatchOutcome:
    patch: Patch
    status: str
    commit: str | None = None
    detail: str = ""
    after_conflict: bool = False  # tried after an earlier patch conflicted
    signal: str | None = None  # already-upstream by the one judge (engine/absorption.py): the code signal

    def to_json(self) -> dict:
        doc = {"name": self.patch.name, "subject": self.patch.subject, "patch_id": self.patch.patch_id,
               "status": self.status, "commit": self.commit, "after_conflict": self.after_conflict,
               "detail": self.detail}
        if self.signal:
            doc["signal"] = self.signal
        return doc


@dataclass
class SeriesResult:
    base: str
    head: str
    tree: str
    outcomes: list[PatchOutcome] = field(default_factory=list)
    workdir: Path | None = None
    method: dict = field(default_factory=dict)  # patches applied in Python / by the per-patch engine
    subs: list = field(default_factory=list)  # [(engine.subtargets.SubTarget, SeriesResult)] of the submodules
    place: object = None  # a sub-target's engine.layout.Place where it was applied (None: the superproject)

    @property
    def conflicts(self) -> list[PatchOutcome]:
        return [o for o in self.outcomes if o.status == CONFLICT]

    @property
    def all_conflicts(self) -> list[PatchOutcome]:
        """Conflicts of the target and of every sub-target."""
        return self.conflicts + [o for _, r in self.subs for o in r.conflicts]

    def to_json(self) -> dict:
        doc = {
            "base": self.base,
            "head": self.head,
            "tree": self.tree,
            "patches": [o.to_json() for o in self.outcomes],
            "conflicts": len(self.conflicts),
            "applied_by": self.method,
            **({"place": self.place.to_json()} if self.place is not None else {}),
        }
        if self.subs:
            doc["submodules"] = [{**st.to_json(), **r.to_json()} for st, r in self.subs]
            doc["conflicts_all"] = len(self.all_conflicts)
        return doc


def series_trailers(target: Target, patch: Patch) -> list[str]:
    return [f"Lucepatch-Series: {target.name}@{target.version}", f"Patch-Id: {patch.patch_id}"]


def with_trailers(patch: Patch, extra: list[str]) -> bytes:
    """The patch's mbox text with extra trailers appended to its trailer block (diff untouched)."""
    return trailers.edit_patch(patch.raw, add=[trailers.split(e) for e in extra])


def pause_at(boundary: int) -> None:
    """Test-only: announce a patch boundary and wait until the test removes the marker."""
    pause(f"boundary-{boundary}")


def clone_private(source: Path, dest: Path, alternates: list[Path] = ()) -> None:
    """A private repository at `dest` that borrows `source`'s objects (objects/info/alternates),
    as `git clone --shared --no-checkout` does, without copying refs or hook samples: made in
    a millisecond, removed with the work area, and holding only this run's new objects, so
    nothing is reused across runs that a `git gc --prune=now` in the source could break.
    `alternates`: more object folders to borrow (a re-rooted sub-target's). `source` is never written."""
    res = git.run(source, "rev-parse", "--git-common-dir", "--show-object-format", env={"GIT_OPTIONAL_LOCKS": "0"})
    common, fmt = res.stdout.split("\n")[:2]
    objects = (Path(source) / common).resolve() / "objects"
    gd = dest / ".git"
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (gd / sub).mkdir(parents=True, exist_ok=True)
    (gd / "objects" / "info" / "alternates").write_text("".join(f"{o}\n" for o in dict.fromkeys([objects, *alternates])))
    (gd / "HEAD").write_text("ref: refs/heads/lucepatch\n")
    ext = f"[extensions]\n\tobjectformat = {fmt}\n" if fmt != "sha1" else ""
    (gd / "config").write_text(f"[core]\n\trepositoryformatversion = {0 if fmt == 'sha1' else 1}\n"
                               "\tfilemode = true\n\tbare = false\n\tlogallrefupdates = false\n" + ext)


def resolve_base(source: Path, ref: str, target_name: str, *, fetch: bool | None = None,
                 upstream: str | None = None, what: str | None = None) -> str:
    """The base commit in `source`. `fetch`: True = git fetch when missing; False = the verb has a
    --fetch option that was not given (the hint names it); None = the verb has none (no such hint).
    `upstream`: the target's upstream URL (the hint fetches from the remote that is it, in this
    repository); `what`: the name of `ref` (default: the pinned base; a flag's when a user gave it)."""
    hint = git.fetch_hint(source, upstream, ref)
    remedy = f"fetch it into that checkout ({hint})"
    if fetch is False:
        remedy += " or pass --fetch to let lucepatch run git fetch"
    sha = git.try_resolve(source, ref)
    if sha is None and fetch:
        remote = hint.split(" fetch ", 1)[1].split()[0]
        git.run(source, "fetch", "--quiet", remote, check=False)
        if git.is_shallow(source):
            git.run(source, "fetch", "--quiet", "--unshallow", remote, check=False)
        sha = git.try_resolve(source, ref)
    if sha is None:
        why = " (the checkout is a shallow clone)" if git.is_shallow(source) else ""
        name = what or f"base commit {ref} of {target_name}"
        raise EnvironmentMissing(f"{name} is not in the checkout {source}{why}; {remedy}")
    return sha


def patch_author(patch: Patch) -> dict:
    name, addr = email.utils.parseaddr(patch.author or "")
    env = {}
    if name or addr:
        env["GIT_AUTHOR_NAME"] = name or addr.split("@")[0]
        env["GIT_AUTHOR_EMAIL"] = addr
    if patch.date:
        env["GIT_AUTHOR_DATE"] = patch.date
    return env


def commit_message(patch: Patch, extra: list[str]) -> str:
    msg = (patch.subject or patch.slug) + ("\n\n" + patch.body.rstrip() if patch.body.strip() else "") + "\n"
    return trailers.append(msg, [trailers.split(e) for e in extra]) if extra else msg


def prepare_patch_files(patches: list[Patch], work: WorkArea) -> list[Path]:
    d = work.path / "patches"
    d.mkdir(exist_ok=True)
    files = []
    for i, p in enumerate(patches, 1):
        f = d / f"{i:04d}.diff"
        f.write_bytes(p.diff)
        files.append(f)
    return files


_ODD = re.compile(r"[<>\n\0]")


def commit_object(tree: str, parent: str, patch: Patch, msg: str, commit_env: dict) -> bytes | None:
    """The commit object `git commit-tree` would write, built here to save one process per patch;
    None when anything is unusual (then commit-tree itself is used)."""
    name, addr = email.utils.parseaddr(patch.author or "")
    parsed = email.utils.parsedate_tz(patch.date) if patch.date else None
    if not name or not addr or parsed is None or parsed[9] is None:
        return None
    if _ODD.search(name + addr) or name != name.strip(" .,:;\"'\\") or addr != addr.strip():
        return None
    cn = commit_env.get("GIT_COMMITTER_NAME", "lucepatch")
    ce = commit_env.get("GIT_COMMITTER_EMAIL", "lucepatch@localhost")
    if "GIT_COMMITTER_DATE" in commit_env or _ODD.search(cn + ce):
        return None
    try:
        msg.encode("utf-8")
    except UnicodeEncodeError:
        return None
    off = parsed[9]
    tz = f"{'-' if off < 0 else '+'}{abs(off) // 3600:02d}{abs(off) % 3600 // 60:02d}"
    epoch = email.utils.mktime_tz(parsed)
    if epoch < 0:
        return None
    return odb.commit_bytes(tree, parent, f"{name} <{addr}> {epoch} {tz}", f"{cn} <{ce}> 0 +0000", msg)


ENGINE_ENV = "LUCEPATCH_ENGINE"  # "per-patch": skip the fast path (tests run both paths)


def _signoff(am_args: tuple[str, ...], commit_env: dict) -> str | None:
    if "--signoff" in am_args:
        n, e = commit_env.get("GIT_COMMITTER_NAME"), commit_env.get("GIT_COMMITTER_EMAIL")
        if n and e:
            return f"Signed-off-by: {n} <{e}>"
    return None


def _extra_trailers(p: Patch, target: Target | None, trailers: bool, signoff: str | None) -> list[str]:
    extra = []
    if signoff and signoff not in p.trailer_all("Signed-off-by") and \
            signoff.split(": ", 1)[1] not in p.trailer_all("Signed-off-by"):
        extra.append(signoff)
    if trailers:
        extra += series_trailers(target, p)
    return extra


_UNPARSED = object()


class TreeState:
    """The tree a series goes onto, patch by patch: the one place lucepatch applies a patch and
    makes its commit (apply, check, a rebase session's walk and its old chain, quilt import, the
    retirement's code signals).

    A patch git would apply exactly is applied in Python (engine/fastapply.py: no git process);
    any other (3-way, conflicts, anything unusual, a -pN other than 1) goes through the per-patch
    engine (engine/core.py: `git apply --cached`, then `--3way`) on an index holding the current
    tree; LUCEPATCH_ENGINE=per-patch (or fast=False) sends every patch there. The blobs, trees and
    commits made here are kept until `flush` writes them into `repo`; every commit object is built
    by `commit_object` whichever path its patch took, so a series gets the same commit ids either way
    (tests/test_apply_paths.py compares them)."""

    def __init__(self, repo: Path, index: Path, base: str, *, listing: str | None = None,
                 read_from: Path | None = None, fast: bool | None = None):
        self.repo, self.index = Path(repo), Path(index)
        self.read_from = Path(read_from or repo)  # where the base's blobs are read (a checkout: no alternates)
        self.algo = "sha256" if len(base) == 64 else "sha1"
        self.fast = os.environ.get(ENGINE_ENV) != "per-patch" if fast is None else fast
        self.blobs: dict[str, bytes] = {}
        self.objects: dict[str, tuple[str, bytes]] = {}  # made here, not written yet
        self.python_applied = 0
        self._engine: IndexEngine | None = None
        self._engine_tree: str | None = None  # the tree the engine's index holds
        self.tree: odb.Tree | None = None
        if self.fast:
            self.tree = odb.Tree(base_listing(self.read_from, base) if listing is None else listing, self.algo)
            self.tree.dirty.add("")
            self.tree_id = self.tree.write()
            self.tree.new_objects.clear()  # the base tree exists already
        else:
            self.tree_id = self._engine_at(base)

    # ---- the per-patch engine
    def _engine_at(self, tree: str) -> str:
        """The engine's index at `tree` (a commit or a tree); the tree's id."""
        if self._engine is None:
            self._engine = IndexEngine(self.repo, self.index)
        if self._engine_tree != tree:
            self._engine.reset(tree)
            self._engine_tree = self._engine.write_tree()
        return self._engine_tree

    @property
    def engine(self) -> IndexEngine:
        """The per-patch engine at the current tree (the objects made so far written first)."""
        self.flush()
        self._engine_at(self.tree_id)
        return self._engine

    def check_reverse(self, f: Path) -> bool:
        """Does the patch reverse-apply exactly to the current tree (the tree already has it)?"""
        return self.engine.check_reverse(f)

    def _with_engine(self, f: Path, name: str, strip: int) -> tuple[str, str]:
        eng = self.engine
        status, detail = eng.apply(f, name=name, strip=strip)
        if status in (APPLIED, APPLIED_3WAY):
            new = eng.write_tree()
            self._engine_tree = new
            if new != self.tree_id:
                if self.tree is not None:
                    self.tree = odb.Tree(base_listing(self.repo, new), self.algo)
                self.tree_id = new
        return status, detail

    # ---- the Python path
    def prefetch(self, patches: list[Patch]) -> list:
        """Each patch's file diffs as the Python path reads them (None: git decides), with every
        base blob they modify read in one git process."""
        if not self.fast:
            return [None] * len(patches)
        parsed = [fastapply.parse(p.diff) for p in patches]
        want = set()
        for fds in parsed:
            for fd in fds or []:
                e = self.tree.get(fd.path)
                if e is not None and fd.kind != "add":
                    want.add(e[1])
        self._read_blobs(self.read_from, want)
        return parsed

    def _read_blobs(self, repo: Path, oids: set[str]) -> None:
        try:
            self.blobs.update(odb.read_blobs(repo, {o for o in oids if o not in self.blobs}))
        except ValueError as exc:
            raise UsageError(f"the base tree names {exc} as a file but it is not a blob") from None

    def try_python(self, fds) -> bool:
        """Apply the patch's files in Python; False (nothing changed) when git must decide."""
        if not fds:
            return False
        changes = []
        for fd in fds:
            e = self.tree.get(fd.path)
            if fd.kind == "add":
                if not self.tree.can_create(fd.path):
                    return False
                content, mode = b"", fd.mode
            else:
                if e is None or e[0] not in ("100644", "100755"):
                    return False
                if e[1] not in self.blobs:
                    self._read_blobs(self.repo, {e[1]})
                content, mode = self.blobs[e[1]], e[0]
            out = fastapply.apply_file(content, fd.hunks)
            if out is None or (fd.kind == "delete" and out):
                return False
            changes.append((fd, mode, out))
        for fd, mode, out in changes:
            if fd.kind == "delete":
                self.tree.delete(fd.path)
                continue
            oid = odb.object_id("blob", out, self.algo)
            self.blobs[oid] = out
            self.objects.setdefault(oid, ("blob", out))
            self.tree.put(fd.path, mode, oid)
        self.tree_id = self.tree.write()
        self.objects.update(self.tree.new_objects)
        self.tree.new_objects.clear()
        self.python_applied += 1
        return True

    # ---- one patch, one commit
    def apply(self, p: Patch, f: Path, fds=_UNPARSED, *, strip: int = 1) -> tuple[str, str]:
        """(status, detail) of patch `p` (its diff written at `f`) on the current tree, which then
        holds the result: Python first where it can decide, else the per-patch engine."""
        if self.fast and strip == 1:
            if fds is _UNPARSED:
                fds = fastapply.parse(p.diff)
            if self.try_python(fds):
                return APPLIED, ""
        return self._with_engine(f, str(p.path), strip)

    def commit(self, p: Patch, msg: str, parent: str, commit_env: dict) -> str:
        """The commit of the current tree on `parent` (author and date from the patch): built here,
        or by `git commit-tree` when its identity is unusual (`commit_object` returns None)."""
        obj = commit_object(self.tree_id, parent, p, msg, commit_env)
        if obj is not None:
            oid = odb.object_id("commit", obj, self.algo)
            self.objects[oid] = ("commit", obj)
            return oid
        self.flush()
        return odb.commit_tree(self.repo, self.tree_id, parent, msg,
                               env={"GIT_OPTIONAL_LOCKS": "0", **PURE_CONFIG, **commit_env, **patch_author(p)})

    def flush(self) -> None:
        """Write the objects made here into `repo` (odb.write_objects: one pack, which the switch
        copies into the checkout as it is; loose objects for sha256 ids)."""
        odb.write_objects(self.repo, self.objects)
        self.objects.clear()


def apply_loop(state: TreeState, target: Target | None, patches: list[Patch], files: list[Path], head: str, *,
               trailers: bool = True, am_args: tuple[str, ...] = (), am_env: dict | None = None,
               pause: bool = False, strip: int = 1, parsed: list | None = None) -> tuple[list[PatchOutcome], str]:
    """The one apply loop: `patches` in order on `state`, one commit per applied patch on `head`
    (author, date and message from the patch, lucepatch's trailers unless `trailers` is False,
    `--signoff` in `am_args` signing with `am_env`'s committer); a conflicting patch is skipped and
    the later ones are still tried (`after_conflict`). The objects stay in `state` until its flush.
    `parsed`: the patches' file diffs from `state.prefetch` (read here when not given)."""
    commit_env = dict(am_env or {})
    signoff = _signoff(am_args, commit_env)
    outcomes, seen_conflict = [], False
    for i, (p, f) in enumerate(zip(patches, files)):
        if pause:
            pause_at(i)
        status, detail = state.apply(p, f, parsed[i] if parsed is not None else _UNPARSED, strip=strip)
        outcome = PatchOutcome(p, status, detail=detail)
        if status in (APPLIED, APPLIED_3WAY):
            head = state.commit(p, commit_message(p, _extra_trailers(p, target, trailers, signoff)), head, commit_env)
            outcome.commit = head
        outcome.after_conflict = seen_conflict
        seen_conflict = seen_conflict or status == CONFLICT
        outcomes.append(outcome)
    return outcomes, head


def apply_series(target: Target, source: Path, patches: list[Patch], work: WorkArea,
                 base: str | None = None, *, trailers: bool = True, am_args: tuple[str, ...] = (),
                 am_env: dict | None = None, checkout: bool = True, fetch: bool | None = None,
                 write_objects: bool = True, base_label: str | None = None, alternates: list[Path] = ()) -> SeriesResult:
    """Apply `patches` in order onto `base` (default: the pinned base) in a private repository.

    `am_args` accepts "--signoff" (the committer identity from `am_env` signs each commit);
    `checkout=False` leaves the private repository without a work tree (apply/check/status do
    not need one); `write_objects=False` (check) computes the outcomes without writing the new
    commits anywhere; `base_label` names `base` in an error (the flag a user gave it with);
    `alternates`: object folders borrowed besides the source's.
    The patches go through the one apply loop (`apply_loop` on a `TreeState`): in Python where
    git would apply them exactly, the others by the per-patch engine; LUCEPATCH_ENGINE=per-patch
    uses the engine for all.
    """
    base_sha = resolve_base(source, base or target.base, target.name, fetch=fetch, upstream=target.upstream_urls,
                            what=base_label)
    listing = base_listing(source, base_sha)
    check_series_safety(patches, source, base_sha, listing)
    clone_private(source, work.repo, alternates)
    files = prepare_patch_files(patches, work)
    validate_diffs(work.repo, [(f, str(p.path)) for f, p in zip(files, patches)])
    state = TreeState(work.repo, work.path / "index", base_sha, listing=listing, read_from=source)
    outcomes, head = apply_loop(state, target, patches, files, base_sha, trailers=trailers, am_args=am_args,
                                am_env=am_env, pause=True, parsed=state.prefetch(patches))
    if write_objects or checkout:
        state.flush()
    result = SeriesResult(base=base_sha, head=base_sha, tree=state.tree_id, workdir=work.repo,
                          method={"python": state.python_applied, "engine": len(patches) - state.python_applied})
    result.outcomes.extend(outcomes)
    pause_at(len(patches))
    result.head = head
    if checkout:
        git.run(work.repo, "checkout", "--quiet", "--detach", head)
    elif write_objects:
        git.run(work.repo, "update-ref", "--no-deref", "HEAD", head)
    return result


def prepare_private(source: Path, patches: list[Patch], work: WorkArea, commit: str, alternates=()) -> list[Path]:
    """The series checked against `commit`, a private clone (borrowing `alternates` too), the patch
    diffs written and validated (what every read-only use of the series starts with)."""
    check_series_safety(patches, source, commit)
    clone_private(source, work.repo, alternates)
    files = prepare_patch_files(patches, work)
    validate_diffs(work.repo, [(f, str(p.path)) for f, p in zip(files, patches)])
    return files


def open_state(source: Path, patches: list[Patch], work: WorkArea, commit: str) -> tuple[TreeState, list[Path]]:
    """`prepare_private`, and the series' tree at `commit` as the one apply loop carries it."""
    files = prepare_private(source, patches, work, commit)
    return TreeState(work.repo, work.path / "index", commit, read_from=source), files
