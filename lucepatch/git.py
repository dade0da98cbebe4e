"""The only place that runs git.

GitPython gives us repository objects and a safe command runner; the plumbing that has no
GitPython API (patch-id, am, apply, format-patch) goes through ``Repo.git.execute`` with explicit
argument lists (never a shell), a fixed environment (no pager, no editor, stable identity for
commits lucepatch creates when the patch gives none) and stdin from files.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import git as gitpython
from git.exc import GitCommandNotFound, InvalidGitRepositoryError, NoSuchPathError

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


def _remedy(repo_dir: str, args: list[str], stderr: str) -> str:
    low = stderr.lower()
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


def run(repo_dir: Path | str, *args: str, stdin: bytes | None = None, check: bool = True,
        env: dict | None = None) -> Result:
    """Run `git <args>` in repo_dir. Raises GitFailed (a one-line LucepatchError) when check and status != 0."""
    g = gitpython.Git(str(repo_dir))
    full_env = dict(_ENV)
    if env:
        full_env.update(env)
    istream = None
    if stdin is not None:
        istream = tempfile.TemporaryFile()
        istream.write(stdin)
        istream.seek(0)
    try:
        status, out, err = g.execute(
            ["git", *args], with_extended_output=True, with_exceptions=False, env=full_env,
            istream=istream, strip_newline_in_stdout=False, stdout_as_string=True,
        )
    except GitCommandNotFound:
        raise EnvironmentMissing("git not found on PATH: install git (apt-get install git) or fix PATH")
    except NotADirectoryError:
        raise UsageError(f"{repo_dir} is not a directory")
    except FileNotFoundError as exc:
        if exc.filename and Path(str(exc.filename)) == Path(str(repo_dir)):
            raise UsageError(f"{repo_dir} does not exist")
        raise EnvironmentMissing("git not found on PATH: install git (apt-get install git) or fix PATH")
    finally:
        if istream is not None:
            istream.close()
    if check and status != 0:
        raise GitFailed(repo_dir, args, status, err)
    return Result(status, out, err)


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


def fetch_into(dest_repo: Path | str, src_repo: Path | str, src_ref: str, dest_ref: str) -> None:
    run(dest_repo, "fetch", "--quiet", "--no-tags", str(src_repo), f"+{src_ref}:{dest_ref}")


__all__ = [name for name in dir() if not name.startswith("_")]
