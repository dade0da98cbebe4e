"""The only place that runs git.

GitPython gives us repository objects (open_repo); the plumbing on the hot paths (apply, patch-id,
read-tree, hash-object, format-patch) runs the git CLI here, with explicit argument lists (never a
shell), a fixed environment (no pager, no editor, stable identity for commits lucepatch creates
when the patch gives none) and stdin as bytes. `env` values of None remove a variable (the user's
own identity and clock for what lucepatch writes into their checkout: stash, reflog).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# GitPython probes for git at import and raises ImportError when it is missing; that must be the
# one-line "git not found" below instead (exit 3), so let run() find out.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git as gitpython  # noqa: E402
from git.exc import InvalidGitRepositoryError, NoSuchPathError  # noqa: E402

from lucepatch.errors import EnvironmentMissing, ToolFailed, UsageError

# Commits lucepatch creates get a fixed committer so re-runs give identical commit ids.
_ENV = {
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_COMMITTER_NAME": "lucepatch",
    "GIT_COMMITTER_EMAIL": "lucepatch@localhost",
    "GIT_COMMITTER_DATE": "1970-01-01T00:00:00Z",
    "LC_ALL": "C",
}


@dataclass
class Result:
    status: int
    stdout: str
    stderr: str


class GitFailed(ToolFailed):
    """A git command lucepatch needed failed: the environment (hooks, permissions, locks, a
    broken repository), not lucepatch. One line: the command, git's first error line, the fix."""

    def __init__(self, repo_dir, args, status: int, stderr: str):
        self.args_ = list(args)
        self.status = status
        self.stderr = stderr
        super().__init__(command="git " + " ".join(self.args_[:2]), where=str(repo_dir), status=status,
                         stderr=stderr, fix=_remedy(str(repo_dir), self.args_, stderr))


# commands that run a hook whose failure git reports only by its exit status
_HOOKED = {"checkout": "post-checkout", "switch": "post-checkout", "commit": "pre-commit", "am": "applypatch-msg",
           "merge": "pre-merge-commit", "push": "pre-push"}


def _failed_hook(repo_dir: str, args: list[str], stderr: str) -> str | None:
    verb = next((a for a in args if not a.startswith("-") and "=" not in a), "")
    name = _HOOKED.get(verb)
    if not name or any(w in stderr.lower() for w in ("fatal:", "error:")):
        return None
    res = run(repo_dir, "rev-parse", "--git-path", f"hooks/{name}", check=False)
    hook = Path(repo_dir) / res.stdout.strip() if res.status == 0 and res.stdout.strip() else None
    if hook is not None and hook.is_file() and os.access(hook, os.X_OK):
        return str(hook.resolve())
    return None


def _remedy(repo_dir: str, args: list[str], stderr: str) -> str:
    low = stderr.lower()
    hook = _failed_hook(repo_dir, args, stderr)
    if hook:
        return f"the hook {hook} exited non-zero; fix the hook (or its PATH) and run again"
    lock = next((w.strip("'\"") for w in stderr.split() if w.strip("'\"").endswith(".lock")), None)
    if lock and ("file exists" in low or "unable to create" in low):
        return (f"another git process is running there, or a crashed one left {lock}; "
                "remove that file once no git command runs")
    if "hook" in low:
        return "a git hook in that repository failed; fix the hook (or its PATH) and run again"
    if "read-only file system" in low or "permission denied" in low:
        return f"git cannot write there; make {repo_dir} (and its .git) writable by you"
    if "not a git repository" in low:
        return f"{repo_dir} is not a git checkout; pass the path of one"
    if "no space left" in low:
        return "the disk is full; free space and run again"
    if "dubious ownership" in low:
        return f"git refuses a repository owned by another user; git config --global --add safe.directory {repo_dir}"
    return f"run git {' '.join(args[:1])} there by hand to see git's full message"



def user_clock() -> dict:
    """What lucepatch writes into the user's checkout (stash commits, reflog lines) carries the
    user's own identity and the real time, not the fixed committer of lucepatch's commits."""
    return {k: os.environ.get(k) for k in ("GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE")}


def _environment(env: dict | None) -> dict:
    full = {**os.environ, **_ENV, **(env or {})}
    return {k: v for k, v in full.items() if v is not None}


def run(repo_dir: Path | str, *args: str, stdin: bytes | None = None, check: bool = True,
        env: dict | None = None) -> Result:
    """Run `git <args>` in repo_dir. Raises GitFailed (a one-line LucepatchError) when check and status != 0."""
    try:
        p = subprocess.run(["git", *args], cwd=str(repo_dir), input=stdin if stdin is not None else b"",
                           capture_output=True, env=_environment(env))
    except NotADirectoryError:
        raise UsageError(f"{repo_dir} is not a directory")
    except FileNotFoundError as exc:
        if not Path(str(repo_dir)).exists():
            raise UsageError(f"{repo_dir} does not exist")
        raise EnvironmentMissing("git not found on PATH: install git (apt-get install git) or fix PATH") from exc
    out = p.stdout.decode("utf-8", "surrogateescape")
    err = p.stderr.decode("utf-8", "replace")
    if check and p.returncode != 0:
        raise GitFailed(repo_dir, args, p.returncode, err)
    return Result(p.returncode, out, err)


def open_repo(path: Path | str, what: str = "--source") -> gitpython.Repo:
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{what} {p} does not exist; pass the path of an upstream git checkout")
    if not p.is_dir():
        raise UsageError(f"{what} {p} is not a directory; pass the path of an upstream git checkout")
    try:
        repo = gitpython.Repo(str(p))
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise UsageError(f"{what} {p} is not a git checkout; clone the upstream repository there first")
    if repo.bare:
        raise UsageError(f"{what} {p} is a bare repository; lucepatch needs a checkout with a work tree")
    top = Path(repo.working_tree_dir).resolve()
    if top != p.resolve():
        raise UsageError(f"{what} {p} is inside the git checkout {top}, not its top; pass {top}")
    return repo


def resolve_commit(repo_dir: Path | str, ref: str, *, what: str = "base commit", remedy: str = "") -> str:
    res = run(repo_dir, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if res.status != 0:
        hint = remedy or "fetch it (git fetch --unshallow / the right remote) or pass --fetch"
        raise EnvironmentMissing(f"{what} {ref} is not in the checkout {repo_dir}; {hint}")
    return res.stdout.strip()


def try_resolve(repo_dir: Path | str, ref: str) -> str | None:
    res = run(repo_dir, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return res.stdout.strip() if res.status == 0 else None


def head(repo_dir: Path | str) -> str:
    return run(repo_dir, "rev-parse", "HEAD").stdout.strip()


def current_branch(repo_dir: Path | str) -> str | None:
    res = run(repo_dir, "symbolic-ref", "--short", "-q", "HEAD", check=False)
    return res.stdout.strip() or None


def branch_exists(repo_dir: Path | str, branch: str) -> bool:
    return run(repo_dir, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False).status == 0


def patch_id(diff: bytes) -> str | None:
    """`git patch-id --stable` of a diff; None when the text holds no diff."""
    res = run(".", "patch-id", "--stable", stdin=diff)
    first = res.stdout.split()
    return first[0] if first else None


def tree_of(repo_dir: Path | str, rev: str = "HEAD") -> str:
    return run(repo_dir, "rev-parse", f"{rev}^{{tree}}").stdout.strip()


def config_identity(repo_dir: Path | str) -> tuple[str, str] | None:
    name = run(repo_dir, "config", "user.name", check=False).stdout.strip()
    email = run(repo_dir, "config", "user.email", check=False).stdout.strip()
    if name and email:
        return name, email
    return None


def commit_time(repo_dir: Path | str, rev: str) -> str:
    """Committer time of `rev`, seconds since the epoch (SOURCE_DATE_EPOCH of reproducible builds)."""
    return str(gitpython.Repo(str(repo_dir)).commit(rev).committed_date)


__all__ = [name for name in dir() if not name.startswith("_")]
