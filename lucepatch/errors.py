"""The one error path.

Errors a user causes (bad input, a missing tool) are LucepatchError subclasses: main() prints
their message as ONE line on stderr and exits with their code, never a traceback. Anything
else escaping a verb is a bug: main() prints the traceback so it can be reported.
"""

import errno
import os
import subprocess

# Exit codes shared by every verb (docs/design.md "Output and exit codes").
EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a check failed: conflict, lint error, not-proven, regression, invalid run
EXIT_USAGE = 2  # usage or bad input
EXIT_ENVIRONMENT = 3  # environment missing: no docker daemon, no GPU, no compiler, no checkout


class LucepatchError(Exception):
    """An expected failure the user can fix; the message names the thing and the fix."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str):
        # One line, always: multi-line text from subprocesses is folded.
        super().__init__(" ".join(str(message).split()))


class UsageError(LucepatchError):
    exit_code = EXIT_USAGE


class EnvironmentMissing(LucepatchError):
    exit_code = EXIT_ENVIRONMENT


class CheckFailed(LucepatchError):
    exit_code = EXIT_CHECK_FAILED


class ToolFailed(EnvironmentMissing):
    """An external command lucepatch relies on (git, a compiler, cmake, docker) failed because of
    the environment. One line: the command, where, its first error line, the fix. Exit 3."""

    def __init__(self, *, command: str, stderr: str = "", fix: str, where: str = "", status: int | None = None):
        self.command = command
        self.first_line = first_error_line(stderr)
        at = f" in {where}" if where else ""
        code = f" (exit {status})" if status not in (None, 0) else ""
        said = f": {self.first_line}" if self.first_line else ""
        super().__init__(f"{command} failed{at}{code}{said}; {fix}")


def first_error_line(text: str, limit: int = 200) -> str:
    """The line of a tool's output that says what went wrong: the first `error`/`fatal` line,
    else the first non-empty one."""
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    pick = next((l for l in lines if any(w in l.lower() for w in ("fatal", "error", "denied"))), None)
    line = pick or (lines[0] if lines else "")
    return line[:limit]


# What the file system answers when the machine, or the path the user gave, will not do: each is
# one line naming the path, and exit 3 — never lucepatch's traceback. (ENOENT is not here: a path
# lucepatch itself expected to find is a bug, and the verbs check the paths a user gives.)
_FS_FIXES = {
    "EACCES": "make it readable/writable by you, or pass another path",
    "EPERM": "make it readable/writable by you, or pass another path",
    "EROFS": "that file system is read-only; make it writable or pass a path on a writable one",
    "ENOSPC": "the disk holding it is full; free space there (df -h shows which)",
    "EDQUOT": "your disk quota there is used up; free space or pass a path on another disk",
    "ENOTDIR": "a part of that path is a file, not a folder; pass a path whose folders are folders",
    "ENAMETOOLONG": "that path, or a name in it, is too long for the file system; pass a shorter path",
    "ELOOP": "that path loops through symbolic links; fix the links or pass another path",
    "EEXIST": "something is already there; move it away or pass another path",
    "EISDIR": "that is a folder where a file belongs; move it away or pass a file path",
    "ENOTEMPTY": "that folder is not empty; move what is in it away or pass another path",
    "EXDEV": "it is on another file system than its neighbour; keep them on one file system",
    "EMLINK": "the folder holds too many entries for the file system; free some or pass another path",
    "EFBIG": "the file is too large for that file system; pass a path on another disk",
    "EIO": "the disk reported an input/output error; check the disk (dmesg) and run again",
    "ESTALE": "a network file system handle went stale; remount it and run again",
    "EMFILE": "too many open files; raise the limit (ulimit -n) and run again",
    "ENFILE": "too many open files on the machine; close programs and run again",
    "EBUSY": "it is in use; close the programs holding it and run again",
    "ETXTBSY": "it is a program that is running; let it finish and run again",
}
_ENV_ERRNOS = set(_FS_FIXES)


def environment_oserror(exc: OSError, *, cache: str | os.PathLike | None = None) -> "EnvironmentMissing | None":
    """An OSError the file system answered (permissions, read-only or full disks, a file where a
    folder belongs, a path too long, a symlink loop ...) as one line naming the path, exit 3; None
    for any other OSError (that one is a bug and keeps its traceback). `cache`: the cache folder,
    so that a full disk under it — and only there — suggests moving the cache."""
    fix = oserror_fix(exc, cache=cache)
    if fix is None:
        return None
    paths = [str(p) for p in (exc.filename, exc.filename2) if p]
    if errno.errorcode.get(exc.errno or 0) in ("ENOSPC", "EDQUOT"):
        paths = paths[-1:]  # the destination of a copy: the disk that is full
    what = f" {' -> '.join(paths)}" if paths else ""
    return EnvironmentMissing(f"cannot use{what}: {os.strerror(exc.errno)}; {fix}")


def oserror_fix(exc: OSError, *, cache: str | os.PathLike | None = None) -> str | None:
    """What the user can do about an OSError the file system answered; None when it is not one."""
    name = errno.errorcode.get(exc.errno or 0, "")
    if name not in _ENV_ERRNOS:
        return None
    paths = [str(p) for p in (exc.filename, exc.filename2) if p]
    fix = _FS_FIXES[name]
    if name in ("ENOSPC", "EDQUOT"):
        paths = paths[-1:]  # a copy (source, destination) fills the destination's disk
        if not paths:
            fix = ("a disk lucepatch writes to is full (the cache, the checkout or the workspace: df -h shows "
                   "which); free space there")
        elif cache and any(_under(p, cache) for p in paths):
            fix += ", or pass --cache-dir on another disk"
    return fix


def _under(path: str, folder) -> bool:
    try:
        return os.path.commonpath([os.path.abspath(path), os.path.abspath(folder)]) == os.path.abspath(folder)
    except ValueError:
        return False


def from_exception(exc: BaseException, *, cache: str | os.PathLike | None = None) -> "LucepatchError | None":
    """The one mapping from what escaped a verb (or a CI step) to a one-line error: a
    LucepatchError as is; an OSError or a hung subprocess the environment caused as exit 3;
    None for everything else (a bug: the caller keeps the traceback, exit 70)."""
    if isinstance(exc, LucepatchError):
        return exc
    if isinstance(exc, subprocess.TimeoutExpired):
        cmd = exc.cmd if isinstance(exc.cmd, (list, tuple)) else str(exc.cmd).split()
        tool = os.path.basename(str(cmd[0])) if cmd else "a tool"
        return ToolFailed(command=tool, stderr=f"no answer after {exc.timeout:g} s",
                          fix=f"{tool} hangs here; run it by hand to see why (lucepatch doctor)")
    if isinstance(exc, OSError):
        name = str(exc.filename or "")
        if exc.errno == errno.ENOENT and name and os.sep not in name:
            # subprocess names the program it could not execute by the bare name it searched
            return EnvironmentMissing(f"{name} not found on PATH; install it or fix PATH (lucepatch doctor)")
        if exc.errno == errno.ENOEXEC:
            return EnvironmentMissing(f"cannot execute {name or 'a tool'}: {os.strerror(exc.errno)}; "
                                      "it is not a program for this machine, reinstall it")
        return environment_oserror(exc, cache=cache)
    return None
