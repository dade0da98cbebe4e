"""The only place that runs git.

Repository objects — refs, HEAD and branches, config, remotes, commits — are read with GitPython
(`repo_at`, `try_resolve`, `head`, `current_branch`, `subject`, `remote_url`, `config_identity`,
...; kept open, they answer without a process per question: bench/git_objects.py). The plumbing
that has no GitPython API or is a hot path (apply --cached, read-tree, write-tree, commit-tree/
hash-object, patch-id, format-patch, batched log/ls-files) runs the git CLI through `run`, with
explicit argument lists (never a shell), a fixed environment (no pager, no editor, stable identity
for commits lucepatch creates when the patch gives none) and stdin as bytes. `env` values of None
remove a variable (the user's own identity and clock for what lucepatch writes into their
checkout: stash, reflog).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path

from lucepatch.errors import EnvironmentMissing, ToolFailed, UsageError

class _GitPython:
    """GitPython, imported on first use: the import costs more start-up time than applying a
    series, and `lucepatch --help` or a verb that asks no repository question never pays it."""

    def __getattr__(self, name):
        # GitPython probes for git at import and raises ImportError when it is missing; that must
        # be the one-line "git not found" of run() instead (exit 3)
        os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
        import git as real  # lazy: GitPython, 34 ms (most git calls run the git binary)

        globals()["gitpython"] = real
        return getattr(real, name)


gitpython = _GitPython()

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
        shown = list(self.args_)
        while len(shown) >= 2 and shown[0] == "-c":  # `-c key=value` settings are not the command
            shown = shown[2:]
        super().__init__(command="git " + " ".join(shown[:2]), where=str(repo_dir), status=status,
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


# a repository named by the caller's environment (lucepatch run from a git hook, say) must not
# redirect the commands lucepatch runs in other repositories
_REPO_ENV = {k: None for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                               "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
                               "GIT_PREFIX", "GIT_QUARANTINE_PATH")}


def _environment(env: dict | None) -> dict:
    full = {**os.environ, **_REPO_ENV, **_ENV, **(env or {})}
    return {k: v for k, v in full.items() if v is not None}


TIMEOUT_ENV = "LUCEPATCH_GIT_TIMEOUT"
DEFAULT_TIMEOUT = 900.0  # seconds: a fetch of a large upstream fits; a git waiting on a prompt or a hook does not


def timeout() -> float | None:
    """Seconds one git command may take ($LUCEPATCH_GIT_TIMEOUT; 0 or less: no limit)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds (0: no limit)")
    return value if value > 0 else None


class GitTimedOut(EnvironmentMissing):
    """A git command that did not finish in time; it was killed (exit 3)."""

    def __init__(self, repo_dir, args, seconds: float):
        shown = list(args)
        while len(shown) >= 2 and shown[0] == "-c":
            shown = shown[2:]
        super().__init__(f"git {' '.join(shown[:2])} did not finish within {seconds:g} s in {repo_dir} and was "
                         "stopped; run it there by hand to see what it waits for (a remote, a credential prompt, "
                         f"a hook, a lock), or give it longer: {TIMEOUT_ENV}=SECONDS (0: no limit)")


def _run(repo_dir, args, stdin: bytes | None, env: dict | None) -> subprocess.CompletedProcess:
    limit = timeout()
    try:
        return subprocess.run(["git", *args], cwd=str(repo_dir), input=stdin if stdin is not None else b"",
                              capture_output=True, env=_environment(env), timeout=limit)
    except subprocess.TimeoutExpired:
        raise GitTimedOut(repo_dir, args, limit) from None


def run(repo_dir: Path | str, *args: str, stdin: bytes | None = None, check: bool = True,
        env: dict | None = None) -> Result:
    """Run `git <args>` in repo_dir. Raises GitFailed (a one-line LucepatchError) when check and status != 0,
    GitTimedOut when it runs past timeout()."""
    try:
        p = _run(repo_dir, args, stdin, env)
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


def run_bytes(repo_dir: Path | str, *args: str, stdin: bytes | None = None, env: dict | None = None) -> bytes:
    """`git <args>` whose stdout is binary (cat-file --batch); GitFailed on a non-zero status."""
    try:
        p = _run(repo_dir, args, stdin, env)
    except FileNotFoundError as exc:
        raise EnvironmentMissing("git not found on PATH: install git (apt-get install git) or fix PATH") from exc
    if p.returncode != 0:
        raise GitFailed(repo_dir, args, p.returncode, p.stderr.decode("utf-8", "replace"))
    return p.stdout


def open_repo(path: Path | str, what: str = "--source") -> gitpython.Repo:
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{what} {p} does not exist; pass the path of an upstream git checkout")
    if not p.is_dir():
        raise UsageError(f"{what} {p} is not a directory; pass the path of an upstream git checkout")
    try:
        repo = gitpython.Repo(str(p))
    except (gitpython.exc.InvalidGitRepositoryError, gitpython.exc.NoSuchPathError):
        raise UsageError(f"{what} {p} is not a git checkout; clone the upstream repository there first")
    if repo.bare:
        raise UsageError(f"{what} {p} is a bare repository; lucepatch needs a checkout with a work tree")
    top = Path(repo.working_tree_dir).resolve()
    if top != p.resolve():
        raise UsageError(f"{what} {p} is inside the git checkout {top}, not its top; pass {top}")
    return repo


_OPEN: "OrderedDict[str, tuple[gitpython.Repo, threading.Lock]]" = OrderedDict()
_OPEN_LOCK = threading.Lock()
MAX_OPEN = 4  # repositories kept open (each holds git cat-file helper processes)


@contextmanager
def repo_at(repo_dir: Path | str):
    """A GitPython Repo for reading repository objects (refs, config, remotes, commits). No hook
    runs, nothing is written. The last few are kept open: GitPython then answers from its running
    `git cat-file` helpers instead of one git process per question (bench/git_objects.py); one
    thread at a time uses a Repo (its helper pipes are not shared)."""
    key = os.path.realpath(repo_dir)
    with _OPEN_LOCK:
        entry = _OPEN.pop(key, None)
        if entry is not None and not os.path.isdir(entry[0].git_dir):  # the folder was removed
            entry[0].close()
            entry = None
        if entry is None:
            try:
                entry = (gitpython.Repo(str(repo_dir)), threading.Lock())
            except (gitpython.exc.InvalidGitRepositoryError, gitpython.exc.NoSuchPathError):
                raise UsageError(f"{repo_dir} is not a git checkout; pass the path of one")
            except gitpython.exc.GitCommandNotFound:
                raise EnvironmentMissing("git not found on PATH: install git (apt-get install git) or fix PATH")
        _OPEN[key] = entry
        while len(_OPEN) > MAX_OPEN:
            _, (old, old_lock) = _OPEN.popitem(last=False)
            if old_lock.acquire(blocking=False):  # in use elsewhere: its owner's Repo is collected later
                old.close()
                old_lock.release()
    repo, lock = entry
    with lock:
        try:
            yield repo
        except gitpython.exc.GitCommandNotFound:  # its helper process could not start (git left PATH)
            with _OPEN_LOCK:
                _OPEN.pop(key, None)
            raise EnvironmentMissing("git not found on PATH: install git (apt-get install git) or fix PATH")


def _reads_objects(repo: gitpython.Repo) -> bool:
    """GitPython reads SHA-1 object databases only; a SHA-256 repository
    (extensions.objectFormat = sha256) is read through the git CLI instead."""
    ok = getattr(repo, "_lucepatch_sha1", None)
    if ok is None:
        fmt = repo.config_reader("repository").get_value("extensions", "objectformat", "sha1")
        ok = repo._lucepatch_sha1 = str(fmt).lower() == "sha1"
    return ok


def _commit(repo: gitpython.Repo, ref: str):
    """The commit `ref` names, or None (GitPython's rev-parse: names, abbreviated ids, ~ and ^)."""
    if not _reads_objects(repo):
        return None
    try:
        obj = repo.rev_parse(ref)
        while obj.type == "tag":  # annotated tags peel to what they point at
            obj = obj.object
        return obj if obj.type == "commit" else None
    except (gitpython.BadName, gitpython.BadObject, ValueError, IndexError, KeyError):
        return None


def resolve_commit(repo_dir: Path | str, ref: str, *, what: str = "base commit", remedy: str = "",
                   upstream: str | None = None) -> str:
    """`ref` as a commit of `repo_dir`; missing, one line naming `what` (the flag or the pin) and
    `remedy` (default: the fetch into this repository from `upstream`, fetch_hint)."""
    sha = try_resolve(repo_dir, ref)
    if sha is None:
        hint = remedy or f"fetch it into that checkout ({fetch_hint(repo_dir, upstream, ref)})" + (
            " or name a ref that exists there" if what.startswith("--") else "")  # a flag's value can change; a pin cannot
        raise EnvironmentMissing(f"{what} {ref} is not in the checkout {repo_dir}; {hint}")
    return sha


def try_resolve(repo_dir: Path | str, ref: str) -> str | None:
    if not ref or ref.startswith("-"):
        return None
    with repo_at(repo_dir) as repo:
        c = _commit(repo, ref)
        if c is not None:
            return c.hexsha
    # what GitPython's rev-parse does not implement (e.g. @{upstream}, :/text): ask git itself
    res = run(repo_dir, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    return res.stdout.strip() if res.status == 0 else None


def is_ancestor(repo_dir: Path | str, a: str, b: str) -> bool:
    """Whether commit `a` is `b` or one of its ancestors (both must be in the repository)."""
    return run(repo_dir, "merge-base", "--is-ancestor", a, b, check=False,
               env={"GIT_OPTIONAL_LOCKS": "0"}).status == 0


def head(repo_dir: Path | str) -> str:
    with repo_at(repo_dir) as repo:
        if _reads_objects(repo):
            return repo.head.commit.hexsha
    return run(repo_dir, "rev-parse", "HEAD").stdout.strip()


def current_branch(repo_dir: Path | str) -> str | None:
    with repo_at(repo_dir) as repo:
        return None if repo.head.is_detached else repo.head.reference.name


def branch_exists(repo_dir: Path | str, branch: str) -> bool:
    with repo_at(repo_dir) as repo:
        return any(h.name == branch for h in repo.heads)


def tree_of(repo_dir: Path | str, rev: str = "HEAD") -> str:
    with repo_at(repo_dir) as repo:
        c = _commit(repo, rev)
        if c is not None:
            return c.tree.hexsha
    return run(repo_dir, "rev-parse", f"{rev}^{{tree}}").stdout.strip()


def subject(repo_dir: Path | str, rev: str) -> str:
    """First line of the commit message of `rev`."""
    with repo_at(repo_dir) as repo:
        c = _commit(repo, rev)
        if c is not None:
            return c.summary
    res = run(repo_dir, "log", "-1", "--format=%s", rev, check=False)
    return res.stdout.strip() if res.status == 0 else ""


def remote_url(repo_dir: Path | str, name: str) -> str | None:
    """The (first) URL of remote `name`, or None when there is no such remote."""
    with repo_at(repo_dir) as repo:
        try:
            return next(iter(repo.remote(name).urls), None)
        except ValueError:  # no such remote
            return None


def _same_repo(a: str, b: str) -> bool:
    def norm(u: str) -> str:
        u = u.strip().rstrip("/").removesuffix(".git").lower()
        u = re.sub(r"^(?:https?|ssh|git)://(?:[^@/]+@)?", "", u)
        return re.sub(r"^[^@/]+@([^:/]+):", r"\1/", u)  # git@github.com:org/repo -> github.com/org/repo
    return bool(a and b) and norm(a) == norm(b)


def fetch_hint(repo_dir: Path | str, upstream_url: str | Sequence[str] | None = None, commit: str = "") -> str:
    """How to bring a missing commit into `repo_dir` — that repository, by path, from the remote
    that is the target's upstream (a fork's `origin` is not; with none, the URL itself); a shallow
    clone deepened; a submodule's commit fetched in the submodule, not its superproject.
    `upstream_url` may list the upstream's names (a renamed repository: its URL now, then the old
    ones, which still fetch through the host's redirect): a remote with any of them is the upstream."""
    repo_dir = Path(repo_dir)
    names = [upstream_url] if isinstance(upstream_url, str) else list(upstream_url or [])
    upstream_url = names[0] if names else None
    remote = None
    try:
        with repo_at(repo_dir) as repo:
            urls = {r.name: next(iter(r.urls), "") for r in repo.remotes}
    except (UsageError, gitpython.exc.GitError, OSError, ValueError):  # not a repository: no remote to name
        urls = {}
    if upstream_url:
        remote = next((n for want in names for n, u in urls.items() if _same_repo(u, want)), None)
    where = f"git -C {repo_dir} fetch"
    if remote:
        cmd = f"{where} {remote}"
    elif upstream_url:
        cmd = f"{where} {upstream_url}" + (f" {commit}" if commit and len(commit) == 40 else "")
    else:
        cmd = f"{where} {'origin' if 'origin' in urls else '<the upstream remote>'}"
    if is_shallow(repo_dir):
        cmd += " --unshallow"
    return cmd


def is_shallow(repo_dir: Path | str) -> bool:
    with repo_at(repo_dir) as repo:
        return Path(repo.common_dir, "shallow").is_file()  # a worktree shares it


def version() -> str:
    """`git --version` ("git version 2.39.5"), or "" when git cannot run."""
    try:
        return run(".", "--version", check=False).stdout.strip()
    except EnvironmentMissing:
        return ""


def patch_id(diff: bytes) -> str | None:
    """`git patch-id --stable` of a diff; None when the text holds no diff."""
    res = run(".", "patch-id", "--stable", stdin=diff)
    first = res.stdout.split()
    return first[0] if first else None


def config_identity(repo_dir: Path | str) -> tuple[str, str] | None:
    """user.name and user.email as git would use them for this repository (all config levels)."""
    with repo_at(repo_dir) as repo:
        reader = repo.config_reader()
        name = str(reader.get_value("user", "name", default="")).strip()
        email = str(reader.get_value("user", "email", default="")).strip()
    if name and email:
        return name, email
    return None


def commit_time(repo_dir: Path | str, rev: str) -> str:
    """Committer time of `rev`, seconds since the epoch (SOURCE_DATE_EPOCH of reproducible builds)."""
    with repo_at(repo_dir) as repo:
        c = _commit(repo, rev)
        if c is not None:
            return str(c.committed_date)
    return run(repo_dir, "log", "-1", "--format=%ct", rev).stdout.strip()


__all__ = [name for name in dir() if not name.startswith("_")]
