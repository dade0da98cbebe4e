"""Read-only questions about the user's checkout, and the one place it is changed (the switch).

Everything here runs git with GIT_OPTIONAL_LOCKS=0 so even `status` never refreshes the user's
index file: a refused or interrupted run leaves every byte under .git as it was.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

from lucepatch import git
from lucepatch.errors import UsageError

RO = {"GIT_OPTIONAL_LOCKS": "0"}
_IDENT = {"GIT_AUTHOR_NAME": "lucepatch", "GIT_AUTHOR_EMAIL": "lucepatch@localhost"}

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


def require_switchable(src: Path, branch: str, *, force: bool, allow_dirty: bool) -> None:
    """Every reason `apply` must not move the checkout, as one UsageError line each."""
    what = operation_in_progress(src)
    if what:
        raise UsageError(f"checkout {src} is in the middle of {what}; finish or abort it before lucepatch apply")
    if git.current_branch(src) is None:
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


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM while the checkout switches; they are delivered right after."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (ValueError, OSError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def switch(src: Path, workrepo: Path, branch: str, *, stash: bool) -> dict:
    """Fetch the finished branch from the private clone and check it out; with `stash`, carry the
    user's uncommitted changes across (git stash push / pop --index) byte for byte."""
    info = {"stashed": False, "restored": None}
    with signals_deferred():
        if stash and dirty_paths(src):
            git.run(src, "stash", "push", "--quiet", "-m", f"lucepatch apply {branch}", env=_IDENT)
            info["stashed"] = True
        try:
            git.fetch_into(src, workrepo, "HEAD", f"refs/heads/{branch}")
            git.run(src, "checkout", "--quiet", branch)
        except git.GitFailed:
            if info["stashed"]:
                git.run(src, "stash", "pop", "--index", "--quiet", check=False, env=_IDENT)
            raise
        if info["stashed"]:
            res = git.run(src, "stash", "pop", "--index", "--quiet", check=False, env=_IDENT)
            if res.status != 0:
                res = git.run(src, "stash", "pop", "--quiet", check=False, env=_IDENT)
            info["restored"] = res.status == 0
    return info
