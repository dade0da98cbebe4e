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


# errno values that mean "the machine will not let us", not "lucepatch is wrong"
_ENV_ERRNOS = {"EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "EMFILE", "ENFILE", "EBUSY", "ETXTBSY"}


def environment_oserror(exc: OSError) -> "EnvironmentMissing | None":
    """An OSError the environment caused (permissions, read-only or full disks) as one line, exit 3;
    None for any other OSError (that one is a bug and keeps its traceback)."""
    name = errno.errorcode.get(exc.errno or 0, "")
    if name not in _ENV_ERRNOS:
        return None
    path = exc.filename or ""
    what = f" {path}" if path else ""
    fixes = {"EACCES": "make it writable/readable by you or pass another path",
             "EPERM": "make it writable/readable by you or pass another path",
             "EROFS": "that file system is read-only; pass a writable path (--cache-dir, --workspace, --out)",
             "ENOSPC": "the disk is full; free space or pass --cache-dir on another disk",
             "EDQUOT": "your disk quota is used up; free space or pass --cache-dir elsewhere"}
    fix = fixes.get(name, "close other programs holding it and run again")
    return EnvironmentMissing(f"cannot use{what}: {os.strerror(exc.errno)}; {fix}")


def from_exception(exc: BaseException) -> "LucepatchError | None":
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
        return environment_oserror(exc)
    return None
