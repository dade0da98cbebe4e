"""Apply a series in a private working copy: exact first, then 3-way, every patch reported.

The working copy is a `git clone --shared --no-checkout` under the cache, so the user's checkout
(work tree, index, refs, reflog, worktree list) is only read until the very end, when `apply`
fetches the finished branch and switches to it. Patches go through the index-only core
(engine/core.py, shared with matrix/status/rebase): one commit per applied patch is made with
`commit-tree`, author and message from the patch. A conflicting patch is skipped and the later
ones are still tried (`after-conflict`), which `git am` alone cannot do.

Test-only hook: with LUCEPATCH_TEST_PAUSE_AT_PATCH=<dir>, at every patch boundary k (before patch
k+1; k = len(series) is "all applied, before the checkout moves") the run creates
<dir>/boundary-<k>, prints its pid there, and waits until the file is removed.
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, trailers
from lucepatch.engine.checkout import pid_alive
from lucepatch.engine.core import (
    APPLIED,
    APPLIED_3WAY,
    CONFLICT,
    IndexEngine,
    validate_diffs,
)
from lucepatch.engine.faults import PAUSE_ENV, pause  # noqa: F401 (PAUSE_ENV re-exported)
from lucepatch.engine.safety import check_series_safety
from lucepatch.errors import EnvironmentMissing
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

    def to_json(self) -> dict:
        return {
            "name": self.patch.name,
            "subject": self.patch.subject,
            "patch_id": self.patch.patch_id,
            "status": self.status,
            "commit": self.commit,
            "after_conflict": self.after_conflict,
            "detail": self.detail,
        }


@dataclass
class SeriesResult:
    base: str
    head: str
    tree: str
    outcomes: list[PatchOutcome] = field(default_factory=list)
    workdir: Path | None = None

    @property
    def conflicts(self) -> list[PatchOutcome]:
        return [o for o in self.outcomes if o.status == CONFLICT]

    def to_json(self) -> dict:
        return {
            "base": self.base,
            "head": self.head,
            "tree": self.tree,
            "patches": [o.to_json() for o in self.outcomes],
            "conflicts": len(self.conflicts),
        }


def series_trailers(target: Target, patch: Patch) -> list[str]:
    return [f"Lucepatch-Series: {target.name}@{target.version}", f"Patch-Id: {patch.patch_id}"]


def with_trailers(patch: Patch, extra: list[str]) -> bytes:
    """The patch's mbox text with extra trailers appended to its trailer block (diff untouched)."""
    return trailers.edit_patch(patch.raw, add=[trailers.split(e) for e in extra])


class WorkArea:
    """A private clone under <cache>/work/, removed on exit, reclaimed if a run was killed."""

    def __init__(self, cache: Path, label: str):
        self.root = cache / "work"
        self.root.mkdir(parents=True, exist_ok=True)
        reclaim_orphans(self.root)
        self.path = self.root / f"{label}-{uuid.uuid4().hex[:10]}"
        self.path.mkdir()
        (self.path / "owner.pid").write_text(str(os.getpid()))
        self.repo = self.path / "tree"

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def reclaim_orphans(root: Path) -> list[Path]:
    """Remove work areas whose owning lucepatch process is gone (killed by SIGKILL, power loss)."""
    removed = []
    for d in root.iterdir() if root.is_dir() else []:
        pidfile = d / "owner.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            pid = -1
        if not pid_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def pause_at(boundary: int) -> None:
    """Test-only: announce a patch boundary and wait until the test removes the marker."""
    pause(f"boundary-{boundary}")


def clone_private(source: Path, dest: Path) -> None:
    """`git clone --shared --no-checkout`: objects are borrowed, nothing is written in `source`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    git.run(dest.parent, "clone", "--quiet", "--shared", "--no-checkout", "--no-tags",
            str(Path(source).resolve()), str(dest), env={"GIT_OPTIONAL_LOCKS": "0"})


def resolve_base(source: Path, ref: str, target_name: str, *, fetch: bool | None = None) -> str:
    """The base commit in `source`. `fetch`: True = git fetch when missing; False = the verb has a
    --fetch option that was not given (the hint names it); None = the verb has none (no such hint)."""
    remedy = "fetch it into the checkout (git fetch origin; or git fetch --unshallow if the clone is shallow)"
    if fetch is False:
        remedy += " or pass --fetch to let lucepatch run git fetch"
    sha = git.try_resolve(source, ref)
    if sha is None and fetch:
        git.run(source, "fetch", "--quiet", "origin", check=False)
        if git.is_shallow(source):
            git.run(source, "fetch", "--quiet", "--unshallow", "origin", check=False)
        sha = git.try_resolve(source, ref)
    if sha is None:
        why = " (the checkout is a shallow clone)" if git.is_shallow(source) else ""
        raise EnvironmentMissing(f"base commit {ref} of {target_name} is not in the checkout {source}{why}; {remedy}")
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
    body = (f"tree {tree}\nparent {parent}\nauthor {name} <{addr}> {epoch} {tz}\n"
            f"committer {cn} <{ce}> 0 +0000\n\n{msg}")
    return body.encode("utf-8")


class CommitMismatch(Exception):
    """git wrote other commit ids than the ones computed here (an object format or a git that
    writes commits differently): apply_loop redoes the series with `git commit-tree`."""


def flush_commits(engine: IndexEngine, pending: list[tuple[str, bytes]]) -> None:
    """Write the commit objects built in Python with one `git hash-object` and check their ids."""
    if not pending:
        return
    d = engine.index.parent / "commits"
    d.mkdir(exist_ok=True)
    paths = []
    for sha, obj in pending:
        f = d / sha
        f.write_bytes(obj)
        paths.append(str(f))
    out = engine.git("hash-object", "-t", "commit", "-w", "--stdin-paths",
                     stdin=("\n".join(paths) + "\n").encode()).stdout.split()
    if out != [sha for sha, _ in pending]:
        raise CommitMismatch()
    for f in paths:
        os.unlink(f)
    pending.clear()


def apply_loop(engine: IndexEngine, target: Target, patches: list[Patch], files: list[Path], head: str, *,
               trailers: bool = True, am_args: tuple[str, ...] = (), am_env: dict | None = None,
               pause: bool = False, strip: int = 1) -> tuple[list[PatchOutcome], str]:
    """Apply `patches` cumulatively on the engine's index; one commit per applied patch on `head`
    (author, date and message from the patch; `strip` is the -p level of the diffs)."""
    start = engine.write_tree()
    try:
        return _apply_loop(engine, target, patches, files, head, trailers=trailers, am_args=am_args,
                           am_env=am_env, pause=pause, strip=strip, native=len(head) == 40)
    except CommitMismatch:
        engine.reset(start)
        return _apply_loop(engine, target, patches, files, head, trailers=trailers, am_args=am_args,
                           am_env=am_env, pause=False, strip=strip, native=False)


def _apply_loop(engine: IndexEngine, target: Target, patches: list[Patch], files: list[Path], head: str, *,
                trailers: bool, am_args: tuple[str, ...], am_env: dict | None, pause: bool, strip: int,
                native: bool) -> tuple[list[PatchOutcome], str]:
    outcomes = []
    commit_env = dict(am_env or {})
    signoff = None
    if "--signoff" in am_args:
        n, e = commit_env.get("GIT_COMMITTER_NAME"), commit_env.get("GIT_COMMITTER_EMAIL")
        if n and e:
            signoff = f"Signed-off-by: {n} <{e}>"
    seen_conflict = False
    pending: list[tuple[str, bytes]] = []
    for i, (p, f) in enumerate(zip(patches, files)):
        if pause:
            pause_at(i)
        status, detail = engine.apply(f, name=str(p.path), strip=strip)
        outcome = PatchOutcome(p, status, detail=detail)
        if status in (APPLIED, APPLIED_3WAY):
            extra = []
            if signoff and signoff not in p.trailer_all("Signed-off-by") and \
                    signoff.split(": ", 1)[1] not in p.trailer_all("Signed-off-by"):
                extra.append(signoff)
            if trailers:
                extra += series_trailers(target, p)
            tree = engine.write_tree()
            msg = commit_message(p, extra)
            obj = commit_object(tree, head, p, msg, commit_env) if native else None
            if obj is not None:
                head = hashlib.sha1(b"commit %d\0" % len(obj) + obj).hexdigest()
                pending.append((head, obj))
            else:
                flush_commits(engine, pending)
                res = engine.git("commit-tree", tree, "-p", head, "-F", "-",
                                 stdin=msg.encode("utf-8", "surrogateescape"), env={**commit_env, **patch_author(p)})
                head = res.stdout.strip()
            outcome.commit = head
        outcome.after_conflict = seen_conflict
        seen_conflict = seen_conflict or status == CONFLICT
        outcomes.append(outcome)
    flush_commits(engine, pending)
    return outcomes, head


def apply_series(target: Target, source: Path, patches: list[Patch], work: WorkArea,
                 base: str | None = None, *, trailers: bool = True, am_args: tuple[str, ...] = (),
                 am_env: dict | None = None, checkout: bool = True, fetch: bool | None = None) -> SeriesResult:
    """Clone `source` privately and apply `patches` in order onto `base` (default: the pinned base).

    `am_args` accepts "--signoff" (the committer identity from `am_env` signs each commit);
    `checkout=False` leaves the private clone without a work tree (apply/check/status do not need one).
    """
    base_sha = resolve_base(source, base or target.base, target.name, fetch=fetch)
    check_series_safety(patches, source, base_sha)
    clone_private(source, work.repo)
    files = prepare_patch_files(patches, work)
    validate_diffs(work.repo, [(f, str(p.path)) for f, p in zip(files, patches)])
    engine = IndexEngine(work.repo, work.path / "index")
    engine.reset(base_sha)
    result = SeriesResult(base=base_sha, head=base_sha, tree=engine.write_tree(), workdir=work.repo)
    outcomes, head = apply_loop(engine, target, patches, files, base_sha, trailers=trailers,
                                am_args=am_args, am_env=am_env, pause=True)
    result.outcomes.extend(outcomes)
    pause_at(len(patches))
    result.head = head
    result.tree = engine.write_tree()
    if checkout:
        git.run(work.repo, "checkout", "--quiet", "--detach", head)
    else:
        git.run(work.repo, "update-ref", "--no-deref", "HEAD", head)
    return result


def open_engine(source: Path, patches: list[Patch], work: WorkArea, commit: str) -> tuple[IndexEngine, list[Path]]:
    """Private clone + index engine at `commit`, patch diffs written and validated (read-only verbs)."""
    check_series_safety(patches, source, commit)
    clone_private(source, work.repo)
    files = prepare_patch_files(patches, work)
    validate_diffs(work.repo, [(f, str(p.path)) for f, p in zip(files, patches)])
    engine = IndexEngine(work.repo, work.path / "index")
    engine.reset(commit)
    return engine, files


def applied_patch_ids(repo: Path, base: str, head: str) -> dict[str, str]:
    """Patch-Id trailer -> commit, for lucepatch commits in base..head (already applied)."""
    if base == head:
        return {}
    log = git.run(repo, "log", "--format=%H%x00%B%x01", "--grep=^Lucepatch-Series: ", f"{base}..{head}",
                  env={"GIT_OPTIONAL_LOCKS": "0"}).stdout
    out = {}
    for entry in log.split("\x01"):
        if "\x00" not in entry:
            continue
        sha, body = entry.strip("\n").split("\x00", 1)
        for m in re.finditer(r"^Patch-Id: ([0-9a-f]{40})\s*$", body, re.M):
            out.setdefault(m.group(1), sha)
    return out


# -- export: commits -> patch files --------------------------------------------------------------
OUR_TRAILER_KEYS = ("Lucepatch-Series", "Patch-Id")
# format-patch must not depend on the user's git config (format.*, diff.noprefix, ...)
PURE_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0"}
FORMAT_PATCH_ARGS = ("format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "--no-numbered")


def strip_our_trailers(msg: str) -> tuple[str, str | None]:
    pid = next(iter(trailers.values(trailers.parse(msg), "Patch-Id")), None)
    if pid is not None and not re.fullmatch(r"[0-9a-f]{40}", pid):
        pid = None
    return trailers.edit(msg, remove=OUR_TRAILER_KEYS), pid


def format_commits(repo: Path, base: str, head: str, out_dir: Path) -> list[tuple[Path, str | None, str]]:
    """Format base..head (our trailers removed) as patch files: [(file, Patch-Id trailer, commit)]."""
    commits = git.run(repo, "rev-list", "--reverse", "--no-merges", f"{base}..{head}").stdout.split()
    prev = base
    pid_of: list[tuple[str | None, str]] = []
    for c in commits:
        meta = git.run(repo, "log", "-1", "--format=%an%x00%ae%x00%ad%x00%T%x00%B", "--date=raw", c).stdout
        an, ae, ad, tree, msg = meta.split("\x00", 4)
        clean, pid = strip_our_trailers(msg)
        res = git.run(repo, "commit-tree", tree, "-p", prev, "-F", "-", stdin=clean.encode("utf-8", "surrogateescape"),
                      env={"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": "@" + ad, **PURE_ENV})
        prev = res.stdout.strip()
        pid_of.append((pid, c))
    out_dir.mkdir(parents=True, exist_ok=True)
    if not commits:
        return []
    names = git.run(repo, *FORMAT_PATCH_ARGS, "-o", str(out_dir), f"{base}..{prev}", env=PURE_ENV).stdout.split()
    return [(Path(n), pid, c) for n, (pid, c) in zip(names, pid_of)]


def format_patch_slug(file_name: str) -> str:
    """`0003-fix-foo.patch` -> `fix-foo.patch`."""
    m = re.match(r"^\d{4}-(.*)$", file_name)
    return m.group(1) if m else file_name
