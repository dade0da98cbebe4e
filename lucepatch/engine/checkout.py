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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, report, signals
from lucepatch.engine.faults import pause
from lucepatch.errors import EnvironmentMissing, LucepatchError, UsageError

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
        tmp = self.path.with_name(self.path.name + ".tmp")
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


def _wait_unlocked(src: Path, gd: Path, seconds: float = 5.0) -> None:
    """A git killed with us may still be finishing; a lock still there after that is stale."""
    lock = gd / "index.lock"
    t0 = time.monotonic()
    while lock.exists() and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    if lock.exists():
        raise EnvironmentMissing(f"cannot restore {src}: {lock} exists (another git process is running there, or "
                                 "one killed with lucepatch left it); remove that file once no git command runs, "
                                 "then run any lucepatch command to finish the restore")


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
    restored_stash = None
    ours = d.get("stash")
    if ours is None and "stash" in steps:  # killed right after `stash push`, before the journal said so
        top = _rev(src, "refs/stash")
        msg = git.run(src, "log", "-1", "--format=%s", top, env=RO).stdout if top and top != d.get("stash_before") else ""
        ours = top if f"lucepatch apply {branch}" in msg else None
    if ours and _rev(src, "stash@{0}") == ours:
        res = _w(d, *NO_HOOKS, "stash", "pop", "--index", "--quiet", check=False)
        restored_stash = res.status == 0
    _restore_reflogs(gd, d.get("reflogs", {}))
    _restore_meta(gd, d.get("meta", {}))
    note = f"{src} restored to {orig or 'its detached HEAD'} ({orig_head[:12]})"
    if restored_stash is False:
        note += "; your uncommitted changes are kept in `git stash list`"
    return note


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


def _finish(d: dict) -> str:
    """Roll a member forward: its switch had reached the commit point (the group's, or its own
    stash pop); only the pop of our stash may be left."""
    src = Path(d["src"])
    if d.get("stash") and _rev(src, "stash@{0}") == d["stash"] and "popped" not in d.get("steps", []):
        res = _w(d, "stash", "pop", "--index", "--quiet", check=False)
        if res.status != 0:
            _w(d, "stash", "pop", "--quiet", check=False)
    return f"the apply interrupted in {src} had completed ({d['branch']} checked out)"


def _completed(d: dict) -> bool:
    steps = d.get("steps", [])
    return "commit" in steps or "popped" in steps or \
        ("pop" in steps and _rev(Path(d["src"]), "refs/stash") != d.get("stash"))


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
    forward = any(_completed(m[1]) for m in members)
    notes = []
    try:
        with signals.held():
            for mp, md in (members if forward else list(reversed(members))):
                src = Path(md["src"])
                if not (src / ".git").exists() and not Path(md["git_dir"]).is_dir():
                    mp.unlink(missing_ok=True)  # the checkout is gone: nothing to restore
                    continue
                notes.append(_finish(md) if forward else "an apply was killed while switching; " + rollback(md))
                mp.unlink(missing_ok=True)
    except LucepatchError as exc:
        if strict:
            raise
        report.progress(f"warning: could not restore {d['src']} after a killed apply: {exc}")
        return None
    for n in notes:
        report.progress(n)
    return "; ".join(notes) or None


def recover_all(journal_dir: Path) -> list[str]:
    """Every journal left by a killed switch (main.py calls this before any verb)."""
    notes = []
    for jp in sorted(Path(journal_dir).glob("*.json")):
        n = _recover_one(jp, strict=False)
        if n:
            notes.append(n)
    return notes


def _copy_objects(d: dict, workrepo: Path) -> None:
    """The series' new objects into the checkout's object store. The private repository holds
    exactly this run's objects (it borrows everything else): the packs lucepatch wrote and any
    loose objects git wrote there are copied as they are (content-addressed; a temporary name,
    then a rename, a pack before its index, as git does). A checkout with core.sharedRepository
    (group permissions git maintains) gets them by fetch instead."""
    src, gd = Path(d["src"]), Path(d["git_dir"])
    common = gd
    if (gd / "commondir").is_file():
        common = (gd / (gd / "commondir").read_text().strip()).resolve()
    dest = common / "objects"
    mine = workrepo / ".git" / "objects"
    if d.get("shared_repository") or not dest.is_dir():
        git.run(src, *QUIET_GC, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(workrepo), "HEAD")
        return
    for idx in sorted((mine / "pack").glob("pack-*.idx")):
        for f in (idx.with_suffix(".pack"), idx):
            final = dest / "pack" / f.name
            if not final.exists():
                tmp = final.with_name(f"tmp-lucepatch-{f.name}-{os.getpid()}")
                shutil.copyfile(f, tmp)
                os.chmod(tmp, 0o444)
                os.replace(tmp, final)
    for fan in mine.iterdir():
        if len(fan.name) != 2 or not fan.is_dir():
            continue
        target = dest / fan.name
        for obj in fan.iterdir():
            final = target / obj.name
            if final.exists() or obj.name.startswith("."):
                continue
            target.mkdir(exist_ok=True)
            tmp = target / f".lucepatch-{obj.name}-{os.getpid()}"
            shutil.copyfile(obj, tmp)
            os.chmod(tmp, 0o444)
            os.replace(tmp, final)


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
                        notes.append(rollback(j.data))
                        j.remove()
            note = "; ".join(reversed(notes))
            if isinstance(exc, LucepatchError):
                exc.args = (f"{exc.args[0]}; {note}" if exc.args else note,)
            else:
                signals.on_interrupt(note)
        raise
    pause("switch-done")
    return infos
