"""Read-only questions about the user's checkout, and the one place it is changed (the switch).

The questions run git with GIT_OPTIONAL_LOCKS=0 so even `status` never refreshes the user's
index file: a refused run leaves every byte under .git as it was.

The switch is a transaction (`switch`): before its first write it records the user's branch,
HEAD, stash, the reflog sizes and the files the series adds in a journal under
<cache>/switch/; then stash push -> objects in -> branch ref -> checkout -> stash pop, with the
journal updated before each step. Any failure (a post-checkout hook exiting 1, a lock taken by
another git, a full disk) or SIGINT/SIGTERM after the first write rolls every step back
(`rollback`) and re-raises; the stash pop is the commit point, after which the switch is
complete and a late signal is reported as such (signals.completed). After a SIGKILL the journal
stays; the next lucepatch command (main.py) finds it and rolls back (`recover_all`).

Long: the switch and its undo are one protocol over one journal: each step the switch takes
(begin, stash, move the branch, copy objects, restore) has its rollback and its recovery after a
SIGKILL beside it, and they share the journal's fields; apart, a step would be read away from its
undo. The object copy is lucepatch/odb.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, odb, report, signals
from lucepatch.errors import EnvironmentMissing, LucepatchError, UsageError, oserror_fix
from lucepatch.faults import pause

RO = {"GIT_OPTIONAL_LOCKS": "0"}
_IDENT = {"GIT_AUTHOR_NAME": "lucepatch", "GIT_AUTHOR_EMAIL": "lucepatch@localhost",
          "GIT_COMMITTER_NAME": "lucepatch", "GIT_COMMITTER_EMAIL": "lucepatch@localhost"}

_IN_PROGRESS = {
    "rebase-apply": "a rebase or git am", "rebase-merge": "a rebase", "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert", "BISECT_LOG": "a bisect",
}


def run_ro(src: Path, *args: str, check: bool = True):
    return git.run(src, *args, check=check, env=RO)


def git_dir(src: Path) -> Path:
    return Path(run_ro(src, "rev-parse", "--absolute-git-dir").stdout.strip())


def open_checkout(src: Path) -> Path:
    """Validate --source: an existing, non-bare git checkout, given by its top directory."""
    git.open_repo(src)
    return Path(src)


def operation_in_progress(src: Path) -> str | None:
    gd = git_dir(src)
    for name, what in _IN_PROGRESS.items():
        if (gd / name).exists():
            return what
    return None


def dirty_paths(src: Path) -> list[str]:
    out = run_ro(src, "status", "--porcelain=v1", "-z", "--untracked-files=no").stdout
    return [e[3:] for e in out.split("\0") if len(e) > 3]


def require_switchable(src: Path, branch: str, *, force: bool, allow_dirty: bool,
                       detached_at: str | None = None) -> None:
    """Every reason `apply` must not move the checkout, as one UsageError line each.
    `detached_at`: a submodule checkout may be on a detached HEAD at that commit (its pin: the
    new branch starts there, so nothing is left unnamed)."""
    what = operation_in_progress(src)
    if what:
        raise UsageError(f"checkout {src} is in the middle of {what}; finish or abort it before lucepatch apply")
    head = None
    if detached_at and git.current_branch(src) is None:
        head = git.try_resolve(src, "HEAD")
        pinned = git.try_resolve(src, detached_at)
    if detached_at and head is not None and head == pinned:
        pass
    elif git.current_branch(src) is None:
        head = git.try_resolve(src, "HEAD")
        at = head[:12] if head else "an unborn HEAD"
        raise UsageError(f"checkout {src} is on a detached HEAD ({at}); switch to a branch first "
                         f"(git switch -c <name>) so apply does not leave that commit unnamed")
    dirty = dirty_paths(src)
    if dirty and not allow_dirty:
        raise UsageError(f"checkout {src} has uncommitted changes ({dirty[0]}{' …' if len(dirty) > 1 else ''}); "
                         "commit them, stash them, or pass --stash")
    if git.branch_exists(src, branch):
        if git.current_branch(src) == branch:
            raise UsageError(f"branch {branch} is checked out in {src}; switch to another branch before re-applying")
        wt = run_ro(src, "worktree", "list", "--porcelain").stdout
        if f"branch refs/heads/{branch}\n" in wt + "\n":
            raise UsageError(f"branch {branch} is checked out in another worktree of {src}; remove that worktree first")
        if not force:
            raise UsageError(f"branch {branch} already exists in {src}; delete it or pass --force")


def untracked_collisions(src: Path, workrepo: Path, base: str, head: str) -> list[str]:
    """Untracked files in the user's checkout that the switch would overwrite."""
    changed = git.run(workrepo, "diff", "--name-only", "-z", "--no-renames", base, head).stdout.split("\0")
    present = [rel for rel in filter(None, changed) if (Path(src) / rel).exists() or (Path(src) / rel).is_symlink()]
    if not present:
        return []
    tracked = set(run_ro(src, "ls-files", "-z", "--", *[f":(literal){p}" for p in present]).stdout.split("\0"))
    return [p for p in present if p not in tracked]


def stash_overlap(src: Path, workrepo: Path, base: str, head: str) -> list[str]:
    """Uncommitted paths that the series also changes (a stash pop there could conflict)."""
    changed = set(git.run(workrepo, "diff", "--name-only", "-z", "--no-renames", base, head).stdout.split("\0"))
    return [p for p in dirty_paths(src) if p in changed]


def require_writable_git_dir(src: Path) -> None:
    """The switch writes objects, a ref, the index and HEAD: refuse up front when it cannot."""
    gd = git_dir(src)
    for d in (gd, gd / "objects", gd / "refs" / "heads"):
        if d.is_dir() and not os.access(d, os.W_OK):
            raise EnvironmentMissing(f"checkout {src}: {d} is not writable (read-only file system or another owner); "
                                     f"make {gd} writable by you, or apply in a checkout you own")
    lock = gd / "index.lock"
    if lock.exists():
        raise EnvironmentMissing(f"checkout {src}: {lock} exists: another git process is running there, or a crashed "
                                 "one left it; remove that file once no git command runs")


# ---- the transaction ---------------------------------------------------------------------------
NO_HOOKS = ("-c", "core.hooksPath=/dev/null")  # a rollback must not run the hook that just failed
QUIET_GC = ("-c", "gc.auto=0", "-c", "maintenance.auto=false")
# the user's submodule.recurse=true must not move submodules: each is a member of its own
NO_SUBMODULE_RECURSION = ("-c", "submodule.recurse=false")
JOURNAL_VERSION = 1


@dataclass
class Journal:
    """What the switch has done so far, on disk before each step (atomic rename)."""

    path: Path
    data: dict = field(default_factory=dict)

    def save(self) -> None:
        # named with the writer's pid: a save a SIGKILL cut short before its first byte still
        # says whose it was (_drop_stale_save)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(self.data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def step(self, name: str) -> None:
        self.data.setdefault("steps", []).append(name)
        self.save()

    def done(self, name: str) -> bool:
        return name in self.data.get("steps", [])

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp").unlink(missing_ok=True)  # a save cut short


def journal_path(journal_dir: Path, gd: Path) -> Path:
    key = hashlib.sha256(str(gd.resolve()).encode()).hexdigest()[:16]
    return Path(journal_dir) / f"{key}.json"


def pid_alive(pid: int) -> bool:
    """Is that lucepatch process still running? (A reused pid of an unrelated program is not.)"""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the pid
    return b"lucepatch" in cmd or b"python" in cmd


def _rev(src: Path, ref: str) -> str | None:
    r = git.run(src, "rev-parse", "-q", "--verify", ref, check=False, env=RO)
    return r.stdout.strip() or None


# files git (re)writes as a side effect of checkout / stash pop (merge-ort's AUTO_MERGE)
_META = ("ORIG_HEAD", "AUTO_MERGE")


def _restore_meta(gd: Path, meta: dict) -> None:
    for name, text in meta.items():
        f = gd / name
        if text is None:
            f.unlink(missing_ok=True)
        elif not f.is_file() or f.read_text() != text:
            f.write_text(text)


def _reflog_sizes(gd: Path, refs: list[str]) -> dict:
    out = {}
    for ref in refs:
        f = gd / "logs" / ref
        out[ref] = f.stat().st_size if f.is_file() else None
    return out


def _added_paths(workrepo: Path, base: str, head: str, src: Path) -> tuple[list[str], list[str]]:
    """Files the series adds, and the directories of theirs that do not exist in the checkout."""
    out = git.run(workrepo, "diff", "--name-only", "-z", "--no-renames", "--diff-filter=A", base, head).stdout
    added = [p for p in out.split("\0") if p]
    dirs = []
    for rel in added:
        parts = Path(rel).parts[:-1]
        for i in range(1, len(parts) + 1):
            d = str(Path(*parts[:i]))
            if not (src / d).exists():
                if d not in dirs:
                    dirs.append(d)
                break
    return added, dirs


def _settings(src: Path) -> dict:
    """The few settings of the user's checkout the switch depends on, in one git process."""
    res = git.run(src, "config", "--get-regexp", r"^(user\.(name|email)|core\.sharedrepository)$", check=False, env=RO)
    out = {}
    for line in res.stdout.splitlines():
        k, _, v = line.partition(" ")
        out[k.lower()] = v
    return out


def user_env(src: Path, settings: dict | None = None) -> dict:
    """The user's identity and clock; lucepatch's name only where git would otherwise refuse a
    stash for want of any identity."""
    settings = _settings(src) if settings is None else settings
    env = git.user_clock()
    has_identity = settings.get("user.name") and settings.get("user.email")
    if not has_identity and not (os.environ.get("GIT_AUTHOR_NAME") and os.environ.get("EMAIL")):
        env.update(_IDENT)
    return env


def _w(d: dict, *args: str, check: bool = True):
    """A write into the user's checkout, as the user."""
    return git.run(d["src"], *args, check=check, env=d["user_env"])


def begin(src: Path, workrepo: Path, branch: str, new_head: str, journal_dir: Path, group: dict | None = None) -> Journal:
    gd = git_dir(src)
    jp = journal_path(journal_dir, gd)
    jp.parent.mkdir(parents=True, exist_ok=True)
    orig_branch = git.current_branch(src)
    orig_head = git.head(src)
    added, dirs = _added_paths(workrepo, orig_head, new_head, src)
    refs = ["HEAD", f"refs/heads/{branch}", "refs/stash"] + ([f"refs/heads/{orig_branch}"] if orig_branch else [])
    settings = _settings(src)
    j = Journal(jp, {
        "version": JOURNAL_VERSION, "pid": os.getpid(), "started": time.time(), "src": str(Path(src).resolve()),
        "git_dir": str(gd), "orig_branch": orig_branch, "orig_head": orig_head, "branch": branch,
        "branch_before": _rev(src, f"refs/heads/{branch}"), "new_head": new_head,
        "stash_before": _rev(src, "refs/stash"), "stash": None, "added": added, "created_dirs": dirs,
        "reflogs": _reflog_sizes(gd, refs), "user_env": user_env(src, settings),
        "shared_repository": settings.get("core.sharedrepository"), "steps": [],
        "meta": {n: (gd / n).read_text() if (gd / n).is_file() else None for n in _META},
        "group": group or {},
    })
    j.save()
    return j


def _common_dir(gd: Path) -> Path:
    """Where refs and objects live (a linked worktree's git dir names it in `commondir`)."""
    if (gd / "commondir").is_file():
        return (gd / (gd / "commondir").read_text().strip()).resolve()
    return gd


def _git_processes_in(src: Path, gd: Path) -> list[tuple[int, str]]:
    """Live git processes working in this checkout that are not this lucepatch's own: an orphan
    of a killed lucepatch finishing its command, or the user's own git. Read from /proc (their
    working folder); none where there is no /proc."""
    me = os.getpid()
    roots = {str(Path(src).resolve()), str(Path(gd).resolve())}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit() and int(e) != me]
    except OSError:
        return []
    out = []
    for e in entries:
        try:
            comm = Path(f"/proc/{e}/comm").read_text().strip()
            if not comm.startswith("git"):
                continue
            fields = Path(f"/proc/{e}/stat").read_text().rsplit(")", 1)[1].split()
            cwd = os.readlink(f"/proc/{e}/cwd")
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if fields[0] == "Z" or int(fields[1]) == me:  # a zombie; a child of ours (GitPython's helpers)
            continue
        if any(cwd == r or cwd.startswith(r + "/") for r in roots):
            out.append((int(e), comm))
    return out


SETTLE_SECONDS = 30.0


def _settle(src: Path, gd: Path, seconds: float = SETTLE_SECONDS) -> None:
    """Wait until no other git works in the checkout: a git the killed lucepatch started may still
    be finishing its command (SIGKILL reaches lucepatch, not its children), and nothing may be
    restored under it."""
    t0 = time.monotonic()
    while True:
        busy = _git_processes_in(src, gd)
        if not busy:
            return
        if time.monotonic() - t0 > seconds:
            raise EnvironmentMissing(f"cannot restore {src}: a git process (pid {busy[0][0]}) is still running there; "
                                     "let it finish (or end it), then run any lucepatch command to finish the restore")
        time.sleep(0.05)


def clear_private_locks(folder: Path) -> list[str]:
    """Lock files killed gits left in a private work area of lucepatch's (a rebase session, whose
    lock the caller holds: no other lucepatch works there). Waits for gits still finishing there
    first; returns what it removed."""
    folder = Path(folder)
    _settle(folder, folder)
    gone = []
    for f in sorted({*folder.glob("*.lock"), *folder.glob("*/.git/**/*.lock"), *folder.glob("*/.git/*.lock")}):
        if f.is_file():
            f.unlink(missing_ok=True)
            gone.append(str(f.relative_to(folder)))
    return gone


def _stale_files(gd: Path, since: float) -> list[Path]:
    """Lock and temporary files a killed git (or the killed switch's object copy) left: made after
    the switch began. Called only once no git runs in the checkout (_settle), so none is in use."""
    common = _common_dir(gd)
    found = {*gd.glob("*.lock"), *gd.glob("index.stash.*"), *common.glob("*.lock"),
             *(common / "refs").rglob("*.lock"), *(common / "logs").rglob("*.lock"),
             *(common / "objects" / "pack").glob("tmp*"), *(common / "objects").glob("??/tmp_obj_*"),
             *(common / "objects").glob("??/.lucepatch-*")}
    out = []
    for f in sorted(found):
        try:
            if f.is_file() and f.lstat().st_mtime >= since - 2:
                out.append(f)
        except OSError:
            continue
    return out


def _clear_stale(d: dict) -> list[str]:
    """Wait for git processes in the checkout, then remove what killed ones left; the names removed."""
    src, gd = Path(d["src"]), Path(d["git_dir"])
    _settle(src, gd)
    names = []
    for f in _stale_files(gd, float(d.get("started", 0))):
        f.unlink(missing_ok=True)
        if f.name.endswith(".lock"):
            names.append(str(f.relative_to(_common_dir(gd) if f.is_relative_to(_common_dir(gd)) else gd)))
    return names


def _wait_unlocked(src: Path, gd: Path, seconds: float = 5.0) -> None:
    """Another git may hold the index for a moment; a lock still there after that is not ours to
    remove (a killed switch's stale locks are gone already: _clear_stale)."""
    lock = gd / "index.lock"
    t0 = time.monotonic()
    while lock.exists() and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    if lock.exists():
        raise EnvironmentMissing(f"cannot restore {src}: {lock} exists (another git process is running there); "
                                 "remove that file once no git command runs, then run any lucepatch command to "
                                 "finish the restore")


def rollback(d: dict) -> str:
    """Undo whatever of the switch `d` (the journal) describes; idempotent. Returns a one-line note."""
    src, gd = Path(d["src"]), Path(d["git_dir"])
    steps = d.get("steps", [])
    if not steps:
        return f"{src} was not changed"
    orig, orig_head, branch = d["orig_branch"], d["orig_head"], d["branch"]
    if "checkout" in steps and _moved(d):
        _wait_unlocked(src, gd)
        # back to the user's branch: index and work tree to its commit (the user's own changes,
        # if any, are in our stash; the tree was clean otherwise: require_switchable)
        if orig:
            _w(d, *NO_HOOKS, "checkout", "--quiet", "--force", "--no-recurse-submodules", orig)
        else:  # a submodule checkout is usually on a detached HEAD
            _w(d, *NO_HOOKS, "checkout", "--quiet", "--force", "--no-recurse-submodules", "--detach", orig_head)
        for rel in d.get("added", []):
            p = src / rel
            if (p.exists() or p.is_symlink()) and not _tracked(src, rel):
                p.unlink()
        for rel in sorted(d.get("created_dirs", []), key=lambda x: -len(x)):
            _remove_empty_tree(src / rel)
    if "branch" in steps:
        before = d.get("branch_before")
        if before:
            _w(d, "update-ref", f"refs/heads/{branch}", before)
        elif _rev(src, f"refs/heads/{branch}"):
            _w(d, "update-ref", "-d", f"refs/heads/{branch}")
    ours = _our_stash(d)
    kept = why = None  # our stash, when the user's changes could not go back into the work tree
    if ours:
        where = _stash_state(src, ours)
        if where == ABSENT:
            res = _w(d, *NO_HOOKS, "stash", "apply", "--index", "--quiet", ours, check=False)
            if res.status != 0:
                kept, why = ours, (res.stderr.strip().splitlines() or ["git stash apply failed"])[0]
        elif where == PARTIAL:  # a push (or its reset) a SIGKILL cut short: finish putting them back
            _put_back(d, ours)
        elif where == OTHER:
            kept, why = ours, "the work tree holds other changes to those files"
    _restore_reflogs(gd, d.get("reflogs", {}))
    _restore_meta(gd, d.get("meta", {}))
    if ours:
        _reset_stash_ref(d)
        if kept:  # in the list, where the message says it is (`git stash store`: ref and reflog)
            subject = git.run(src, "log", "-1", "--format=%s", kept, env=RO).stdout.strip()
            _w(d, "stash", "store", "-m", subject, kept)
    _check_restored(d, kept)
    note = f"{src} restored to {orig or 'its detached HEAD'} ({orig_head[:12]})"
    if kept:
        note += f"; your uncommitted changes are kept in `git stash list` (stash@{{0}}: git stash pop --index; {why})"
    return note


ABSENT, APPLIED, PARTIAL, OTHER = "absent", "applied", "partial", "other"


def _our_stash(d: dict) -> str | None:
    """The stash commit the switch pushed, if it is still at the top of refs/stash."""
    src = Path(d["src"])
    ours, top = d.get("stash"), _rev(src, "refs/stash")
    if ours is None and "stash" in d.get("steps", []) and top and top != d.get("stash_before"):
        # killed inside `stash push`, before the journal recorded the commit
        msg = git.run(src, "log", "-1", "--format=%s", top, env=RO).stdout
        ours = top if f"lucepatch apply {d['branch']}" in msg else None
    return ours if ours and top == ours else None


def _stash_paths(src: Path, ours: str) -> set[str]:
    names = set()
    for a, b in ((f"{ours}^1", ours), (f"{ours}^1", f"{ours}^2")):
        out = git.run(src, "diff", "--name-only", "-z", "--no-renames", a, b, env=RO).stdout
        names |= {n for n in out.split("\0") if n}
    return names


def _blobs(src: Path, rev: str, names: set[str]) -> dict[str, str]:
    out = {}
    for e in git.run(src, "ls-tree", "-r", "-z", "--full-tree", rev, env=RO).stdout.split("\0"):
        meta, _, path = e.partition("\t")
        if path in names:
            out[path] = meta.split()[2]
    return out


def _stash_state(src: Path, ours: str) -> str:
    """Where the user's changes held in our stash are now, path by path (work tree and index):
    ABSENT (none there: apply the stash), APPLIED (all there: a push or a pop that a SIGKILL cut
    short had done that part), PARTIAL (each path either way: cut short in the middle), OTHER
    (something else is there: not ours to overwrite). The paths never overlap the series'
    (apply refuses --stash then), so "not there" is HEAD's content."""
    names = _stash_paths(src, ours)
    if not names:
        return APPLIED
    w, i, h = _blobs(src, ours, names), _blobs(src, f"{ours}^2", names), _blobs(src, "HEAD", names)
    index = {}
    for e in git.run(src, "ls-files", "-s", "-z", env=RO).stdout.split("\0"):
        meta, _, path = e.partition("\t")
        if path in names:
            index[path] = meta.split()[1]
    present = sorted(n for n in names if (src / n).is_file())
    hashes = odb.hash_files(src, present)
    tree = dict(zip(present, hashes))
    seen = set()
    for n in names:
        for now, theirs, in_tree in ((tree.get(n), w.get(n), True), (index.get(n), i.get(n), False)):
            if now == theirs:
                seen.add(APPLIED if now != h.get(n) else "both")
            elif now == h.get(n):
                seen.add(ABSENT)
            elif in_tree and _torn(src, n, (theirs, h.get(n))):
                seen.add(PARTIAL)  # a file a killed git was writing: the start of one of the two
            elif not in_tree and now == w.get(n):
                seen.add(PARTIAL)  # `stash apply --index` between its merge (W staged) and putting I back
            else:
                return OTHER
    seen.discard("both")
    return PARTIAL if len(seen) > 1 else seen.pop() if seen else APPLIED


def _torn(src: Path, rel: str, blobs) -> bool:
    """Is the work-tree file what git leaves when killed while writing it: the start of one of
    these blobs, or no file at all where both have one (git unlinks, then writes)?"""
    try:
        data = (src / rel).read_bytes() if (src / rel).is_file() else None
    except OSError:
        return False
    if data is None:
        return not (src / rel).is_symlink() and all(blobs)
    for b in blobs:
        if b and odb.read_object(src, "blob", b).startswith(data):
            return True
    return False


def _put_back(d: dict, ours: str) -> None:
    """The stash's paths as the stash holds them: the work tree from it, the index from its index commit."""
    paths = [f":(literal){n}" for n in sorted(_stash_paths(Path(d["src"]), ours))]
    _w(d, *NO_HOOKS, "restore", f"--source={ours}", "--worktree", "--", *paths)
    _w(d, *NO_HOOKS, "restore", f"--source={ours}^2", "--staged", "--", *paths)


def _reset_stash_ref(d: dict) -> None:
    """refs/stash back to what it was before the switch, its reflog as it was (cut after the update)."""
    src, gd = Path(d["src"]), Path(d["git_dir"])
    before = d.get("stash_before")
    if _rev(src, "refs/stash") != before:
        if before:
            _w(d, "update-ref", "refs/stash", before)
        else:
            _w(d, "update-ref", "-d", "refs/stash")
        _restore_reflogs(gd, {"refs/stash": d.get("reflogs", {}).get("refs/stash")})


def _check_restored(d: dict, kept: str | None) -> None:
    """Say "restored" only when it is: HEAD, the branch and the stash are where the note says."""
    src = Path(d["src"])
    wrong = []
    if git.current_branch(src) != d["orig_branch"] or _rev(src, "HEAD") != d["orig_head"]:
        wrong.append("HEAD")
    if _rev(src, "refs/stash") != (kept or d.get("stash_before")):
        wrong.append("refs/stash")
    if wrong:
        raise EnvironmentMissing(f"could not restore {src} after an interrupted apply ({', '.join(wrong)} differ from "
                                 f"before: {d['orig_branch'] or d['orig_head'][:12]}); check it with git status and "
                                 "git stash list")


def _moved(d: dict) -> bool:
    """Did the checkout step change anything? (A checkout that could not take the index lock did
    not; then the rollback needs no lock either.) The tree was clean before it: require_switchable
    refuses uncommitted changes, --stash moved them into the stash first."""
    src = Path(d["src"])
    if git.current_branch(src) != d["orig_branch"] or _rev(src, "HEAD") != d["orig_head"] or \
            (d["orig_branch"] is None and _symbolic(src)):
        return True
    if any((src / rel).exists() or (src / rel).is_symlink() for rel in d.get("added", [])):
        return True
    return git.run(src, "diff", "--quiet", "HEAD", "--", check=False, env=RO).status != 0


def _symbolic(src: Path) -> bool:
    return git.run(src, "symbolic-ref", "-q", "HEAD", check=False, env=RO).status == 0


def _tracked(src: Path, rel: str) -> bool:
    return bool(git.run(src, "ls-files", "-z", "--", f":(literal){rel}", env=RO).stdout)


def _remove_empty_tree(d: Path) -> None:
    if not d.is_dir() or d.is_symlink():
        return
    for sub in d.iterdir():
        if sub.is_dir() and not sub.is_symlink():
            _remove_empty_tree(sub)
    try:
        d.rmdir()
    except OSError:
        pass  # not empty: something the user put there stays


def _restore_reflogs(gd: Path, sizes: dict) -> None:
    """Reflogs are append-only: cut what the switch and its rollback appended."""
    for ref, size in sizes.items():
        f = gd / "logs" / ref
        if size is None:
            if f.is_file():
                f.unlink()
        elif f.is_file() and f.stat().st_size > size:
            with open(f, "r+b") as fh:
                fh.truncate(size)


def check_no_switch_running(src: Path, journal_dir: Path) -> None:
    """Refuse while another lucepatch switches this checkout; finish a killed one's rollback."""
    jp = journal_path(journal_dir, git_dir(src))
    if not jp.is_file():
        return
    d = _read_journal(jp)
    if d is not None and d.get("pid") != os.getpid() and pid_alive(int(d.get("pid", 0))):
        raise UsageError(f"another lucepatch (pid {d['pid']}) is switching {src} right now; wait for it to finish")
    _recover_one(jp, strict=True)


def _read_journal(jp: Path) -> dict | None:
    try:
        d = json.loads(jp.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and d.get("version") == JOURNAL_VERSION else None


# the message of the one reflog entry _finish_drop writes (git update-ref always logs), cut at once
_FINISH_DROP = "lucepatch: the drop a killed git stash pop began"


def _stash_log(gd: Path) -> Path:
    return _common_dir(gd) / "logs" / "refs" / "stash"


def _listed_top(gd: Path) -> str | None:
    """The commit `git stash list` shows as stash@{0}: the newest entry of refs/stash's reflog
    (the list is that reflog, not the ref); None when the list is empty."""
    try:
        lines = _stash_log(gd).read_bytes().splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        fields = line.split(b" ", 2)
        if len(fields) == 3:
            return fields[1].decode()
    return None


def _cut_finish_drop_entry(gd: Path) -> None:
    """Remove the reflog entry _finish_drop's update-ref appended (a kill may have come between
    the two; then this recovery's rerun finds it)."""
    f = _stash_log(gd)
    try:
        data = f.read_bytes()
    except FileNotFoundError:
        return
    lines = data.splitlines(True)
    if lines and lines[-1].rstrip(b"\n").endswith(b"\t" + _FINISH_DROP.encode()):
        with open(f, "r+b") as fh:
            fh.truncate(len(data) - len(lines[-1]))


def _finish_drop(d: dict, ours: str) -> None:
    """`git stash pop` was killed inside its drop, between its two renames: git rewrites the
    reflog without our entry first (the list no longer shows it; the user's older stash is
    stash@{0} again), then moves refs/stash off it; the kill left the ref on ours (and
    refs/stash.lock, holding the new value: gone with the stale locks). git drops only once the
    apply succeeded, so the pop is done but for the ref: move it where git was moving it, to the
    list's top, or delete it (and its log) when the list is empty, as git's drop does — never a
    `git stash drop` here, which would drop the user's own stash@{0}."""
    gd = Path(d["git_dir"])
    top = _listed_top(gd)
    if top:
        _w(d, "update-ref", "-m", _FINISH_DROP, "refs/stash", top, ours)
        _cut_finish_drop_entry(gd)
    else:
        _w(d, "update-ref", "-d", "refs/stash", ours)


def _finish(d: dict) -> str:
    """Roll a member forward: its switch had reached the commit point (the group's, or its own
    stash pop); only the pop of our stash may be left — or be half done, or applied but not
    dropped, or dropped from the list (the reflog) but not yet from refs/stash."""
    src, gd = Path(d["src"]), Path(d["git_dir"])
    note = f"the apply interrupted in {src} had completed ({d['branch']} checked out)"
    _cut_finish_drop_entry(gd)  # a recovery killed inside _finish_drop: redone below
    ours = d.get("stash") if _rev(src, "refs/stash") == d.get("stash") else None
    if ours and "popped" not in d.get("steps", []) and _listed_top(gd) != ours:
        _finish_drop(d, ours)
        ours = None
    if ours and "popped" not in d.get("steps", []):
        where = _stash_state(src, ours)
        if where == ABSENT and _w(d, "stash", "apply", "--index", "--quiet", ours, check=False).status != 0:
            where = OTHER
        elif where == PARTIAL:
            _put_back(d, ours)
        if where == OTHER:
            return note + "; your uncommitted changes are kept in `git stash list` (stash@{0}: git stash pop --index)"
        _w(d, "stash", "drop", "--quiet", "stash@{0}")
    if git.current_branch(src) != d["branch"]:
        raise EnvironmentMissing(f"could not finish the interrupted apply in {src}: it is not on {d['branch']}; "
                                 "check it with git status")
    return note


def _completed(d: dict) -> bool:
    steps = d.get("steps", [])
    return "commit" in steps or "popped" in steps or \
        ("pop" in steps and _rev(Path(d["src"]), "refs/stash") != d.get("stash"))


def _drop_stale_save(tmp: Path) -> None:
    """A journal save that a SIGKILL cut short (not yet renamed, perhaps not yet written): the
    journal beside it, if any, is the one that counts. Whose it was is in its name
    (<key>.json.<pid>.tmp); a save without one (an older lucepatch's) says it inside, or, empty,
    is left for two seconds (a save of a living switch is renamed within a moment)."""
    named = tmp.name.removesuffix(".tmp").rpartition(".")[2]
    try:
        pid = int(named) if named.isdigit() else int(json.loads(tmp.read_text()).get("pid", 0))
    except (OSError, ValueError, AttributeError):
        pid = 0
    try:
        fresh = time.time() - tmp.stat().st_mtime < 2.0
    except OSError:
        return
    if (pid and pid != os.getpid() and not pid_alive(pid)) or (not pid and not fresh):
        tmp.unlink(missing_ok=True)


def _recover_one(jp: Path, *, strict: bool) -> str | None:
    """Restore (or, past the commit point, finish) a killed switch — with every other member of
    its group (a target and its submodules switch all together or not at all)."""
    d = _read_journal(jp)
    if d is None:
        jp.unlink(missing_ok=True)
        return None
    if pid_alive(int(d.get("pid", 0))) and d.get("pid") != os.getpid():
        return None  # a switch in progress elsewhere
    group = d.get("group") or {}
    members = [(jp, d)]
    for other in group.get("journals", []):
        op = Path(other)
        if op != jp and op.is_file():
            od = _read_journal(op)
            if od is not None and (od.get("group") or {}).get("id") == group.get("id"):
                members.append((op, od))
    members.sort(key=lambda m: (m[1].get("group") or {}).get("index", 0))
    notes = []
    try:
        with signals.held():
            live = []
            for mp, md in members:
                if not (Path(md["src"]) / ".git").exists() and not Path(md["git_dir"]).is_dir():
                    Journal(mp).remove()  # the checkout is gone: nothing to restore
                    continue
                # the killed run's git may still be finishing (it decides whether the switch
                # completed); then what killed gits left is stale
                stale = _clear_stale(md)
                if stale:
                    notes.append(f"removed {', '.join(stale)} that a killed git left in {md['src']}")
                live.append((mp, md))
            forward = any(_completed(md) for _mp, md in live)
            for mp, md in (live if forward else list(reversed(live))):
                notes.append(_finish(md) if forward else "an apply was killed while switching; " + rollback(md))
                Journal(mp).remove()
                _drop_stale_saves(mp.parent, f"{mp.name}.*.tmp")  # the killed switch's save cut short
    except LucepatchError as exc:
        if strict:
            raise
        report.progress(f"warning: could not restore {d['src']} after a killed apply: {exc}")
        return None
    for n in notes:
        report.progress(n)
    return "; ".join(notes) or None


def _drop_stale_saves(journal_dir: Path, pattern: str) -> None:
    for tmp in sorted(Path(journal_dir).glob(pattern)):
        _drop_stale_save(tmp)


def recover_all(journal_dir: Path) -> list[str]:
    """Every journal left by a killed switch (main.py calls this before any verb)."""
    notes = []
    _drop_stale_saves(journal_dir, "*.json.*.tmp")
    _drop_stale_saves(journal_dir, "*.json.tmp")  # an older lucepatch's name
    for jp in sorted(Path(journal_dir).glob("*.json")):
        n = _recover_one(jp, strict=False)
        if n:
            notes.append(n)
    return notes


def _copy_objects(d: dict, workrepo: Path) -> None:
    """The series' new objects into the checkout's object store. The private repository holds
    exactly this run's objects (it borrows everything else): the packs lucepatch wrote and any
    loose objects git wrote there are copied as they are (odb.copy_objects). A checkout with
    core.sharedRepository (group permissions git maintains) gets them by fetch instead."""
    src = Path(d["src"])
    dest = odb.objects_dir(Path(d["git_dir"]))
    if d.get("shared_repository") or not dest.is_dir():
        git.run(src, *QUIET_GC, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(workrepo), "HEAD")
        return
    try:
        odb.copy_objects(workrepo / ".git" / "objects", dest)
    except OSError as exc:  # the checkout's disk (full, read-only, ...), named as the checkout's
        fix = oserror_fix(OSError(exc.errno, exc.strerror, str(dest)))
        if fix is None:
            raise
        raise EnvironmentMissing(f"cannot copy the series' objects into {dest}: {exc.strerror}; {fix}") from None


@dataclass
class Member:
    """One checkout of a switch group: the superproject or a submodule of the target."""

    src: Path
    workrepo: Path
    branch: str
    stash: bool = False


def switch(src: Path, workrepo: Path, branch: str, *, stash: bool, journal_dir: Path) -> dict:
    """Move the checkout onto the finished branch from the private repository, as a transaction
    (see the module doc); with `stash`, the user's uncommitted changes cross over byte for byte."""
    return switch_group([Member(src, workrepo, branch, stash)], journal_dir)[0]


def switch_group(members: list[Member], journal_dir: Path) -> list[dict]:
    """Switch every member or none: each goes through stash push -> objects in -> branch ref ->
    checkout with its own journal; only when all got there do the stash pops and the journals'
    removal happen (the commit point, signals held). A failure or a signal before rolls every
    member back; after a SIGKILL the next command restores (or, past the commit point, finishes)
    the whole group. Pause points: `switch-<step>` for the first member, `switch<k>-<step>` after."""
    gid = uuid.uuid4().hex[:12]
    paths = [str(journal_path(journal_dir, git_dir(m.src))) for m in members]
    infos = [{"stashed": False, "restored": None} for _ in members]
    journals: list[Journal] = []

    def tag(k: int, step: str) -> str:
        return f"switch-{step}" if k == 0 else f"switch{k}-{step}"

    try:
        for k, m in enumerate(members):
            new_head = git.head(m.workrepo)
            j = begin(m.src, m.workrepo, m.branch, new_head, journal_dir,
                      group={"id": gid, "index": k, "journals": paths})
            journals.append(j)
            if m.stash and dirty_paths(m.src):
                j.step("stash")
                _w(j.data, "stash", "push", "--quiet", "-m", f"lucepatch apply {m.branch}")
                j.data["stash"] = _rev(m.src, "refs/stash")
                j.save()
                infos[k]["stashed"] = True
                pause(tag(k, "stashed"))
            _copy_objects(j.data, m.workrepo)
            j.step("branch")
            _w(j.data, "update-ref", "-m", f"lucepatch apply {m.branch}", f"refs/heads/{m.branch}", new_head,
               j.data["branch_before"] or "")  # "": the ref must not exist yet
            pause(tag(k, "branch"))
            j.step("checkout")
            _w(j.data, *NO_SUBMODULE_RECURSION, "checkout", "--quiet", m.branch)
            pause(tag(k, "checkout"))
        with signals.held():  # the commit point: pops and the journals' removal are one step
            for j in journals:
                j.step("commit")
            for k, j in enumerate(journals):
                if infos[k]["stashed"]:
                    j.step("pop")
                    res = _w(j.data, "stash", "pop", "--index", "--quiet", check=False)
                    if res.status != 0:
                        res = _w(j.data, "stash", "pop", "--quiet", check=False)
                    infos[k]["restored"] = res.status == 0
                j.step("popped")
            for j in journals:
                j.remove()
            heads = ", ".join(f"{m.src} is on {m.branch}" for m in members)
            signals.completed(heads)
    except BaseException as exc:
        if journals and not any(j.done("commit") for j in journals):
            notes = []
            with signals.held():
                for j in reversed(journals):
                    if j.path.exists():
                        # a git of ours killed at its timeout left its locks; any other lock is not ours
                        stale = _clear_stale(j.data) if isinstance(exc, git.GitTimedOut) else []
                        notes.append(rollback(j.data) + (f" (removed {', '.join(stale)} a killed git left)"
                                                         if stale else ""))
                        j.remove()
            note = "; ".join(reversed(notes))
            if isinstance(exc, LucepatchError):
                exc.args = (f"{exc.args[0]}; {note}" if exc.args else note,)
            else:
                signals.on_interrupt(note)
        raise
    pause("switch-done")
    return infos
