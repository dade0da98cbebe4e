"""The child processes lucepatch starts that must not outlive it (docs/design.md "Output and exit codes").

Every long-running child — a verify run, a build step, a compiler, the driver probe and holder — is
started here, in a process group of its own (a new session), and registered. A Ctrl-C at a terminal
then reaches lucepatch alone, and lucepatch.signals, on the first SIGINT/SIGTERM, kills every
registered group at once (SIGKILL, the grandchildren too: make's compilers, a reproducer's forks) —
whichever thread started it and wherever the main thread is — so no `finally` waits for a build, a run
or a probe to end by itself, and the exit takes milliseconds. From then on `popen` refuses to start
another child (`Stopped`): a worker thread that was about to launch a run does not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

_lock = threading.RLock()  # re-entrant: the signal handler runs in the main thread, which may hold it
_live: set[subprocess.Popen] = set()
_state = {"stopping": False}


class Stopped(BaseException):
    """A child was asked for after lucepatch began stopping (a BaseException: no `except Exception`
    of the caller turns it into a result)."""


def reset() -> None:
    """A new command (main() or an in-process caller) may start children again."""
    with _lock:
        _state["stopping"] = False


def stopping() -> bool:
    return _state["stopping"]


def popen(cmd, **kw) -> subprocess.Popen:
    """subprocess.Popen in a new session, registered until `release`."""
    kw.setdefault("start_new_session", True)
    with _lock:
        if _state["stopping"]:
            raise Stopped()
        p = None
        try:
            p = subprocess.Popen(cmd, **kw)
        finally:  # registered even when the signal handler raised right after the fork
            if p is not None:
                _live.add(p)
                if _state["stopping"]:
                    kill_group(p)
    return p


def release(p: subprocess.Popen) -> None:
    with _lock:
        _live.discard(p)


def kill_group(p: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it leads one: popen starts a new session)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(cmd, *, input=None, timeout: float | None = None, check: bool = False, **kw) -> subprocess.CompletedProcess:
    """subprocess.run through `popen`: on a timeout or any interruption the whole group is killed and
    reaped before the exception goes on."""
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    if kw.pop("capture_output", False):
        kw["stdout"], kw["stderr"] = subprocess.PIPE, subprocess.PIPE
    p = popen(cmd, **kw)
    try:
        out, err = p.communicate(input, timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt, Terminated: nothing of it may go on running
        kill_group(p)
        p.communicate()
        raise
    finally:
        release(p)
    if check and p.returncode:
        raise subprocess.CalledProcessError(p.returncode, cmd, out, err)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def kill_all() -> int:
    """Stop: no child is started from now on, and every live one's group gets SIGKILL. Returns how many
    groups were signalled. Safe to call from the signal handler (the lock is re-entrant, and a worker
    thread holds it only while it forks)."""
    with _lock:
        _state["stopping"] = True
        live = list(_live)
    for p in live:
        kill_group(p)
    return len(live)


def run_helper(argv: list[str], *, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess | None:
    """A short helper program of a verify run, outside the run itself (addr2line resolving a crash's
    frames, a workload interpreter asked which modules it has); None when it cannot be run.
    Bounded by `timeout` rather than registered: it lives seconds, like git's own children."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
