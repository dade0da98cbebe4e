"""The program's one signal policy (main() installs it; library callers keep their own).

- The first SIGINT/SIGTERM kills every child lucepatch started (lucepatch.children: builds, runs,
  probes, in their own process groups) and raises KeyboardInterrupt / `Terminated` in the main
  thread, so every `finally` (work areas, the checkout transaction's rollback) runs at once instead
  of waiting for a child to finish; the exit is 130 / 143 within a second. A second one while that
  unwinding runs is ignored (the cleanup it would interrupt is what the first one started; Python's
  default would raise again inside it, or print a traceback from the interpreter's shutdown).
- An inherited SIG_IGN for SIGINT is kept: a shell starts background jobs (`cmd &` without job
  control) and `nohup` starts commands with SIGINT ignored precisely so that a terminal's Ctrl-C does
  not stop them, and Python itself installs no KeyboardInterrupt there. A test that Ctrl-Cs a
  lucepatch it started gives it SIGINT's default disposition (tests/sigint.py).
- `held()` blocks SIGINT/SIGTERM for a few lines that must not be torn (a rollback, a commit
  point); a signal that arrives meanwhile is delivered when the block ends.
- `completed(note)`: the command's irreversible work is done (e.g. the checkout switched). From
  then on SIGINT/SIGTERM stay blocked until main() returns, and main() reports the completion
  with a note instead of "interrupted" — a user who pressed Ctrl-C late must not be told that a
  finished apply did not happen.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from lucepatch import children

SIGS = (signal.SIGINT, signal.SIGTERM)

_state = {"installed": False, "note": None, "held_for_exit": False, "interrupt_note": None, "stopping": None}


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so every `finally` still runs."""


def _on_signal(signum, frame):
    if _state["stopping"] is not None:
        return  # the first one's unwinding is under way (and bounded: its children are dead)
    _state["stopping"] = signal.Signals(signum).name
    children.kill_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt()
    raise Terminated()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install() -> None:
    """Called once by main(): SIGTERM unwinds like Ctrl-C, and both stop lucepatch's children first."""
    children.reset()
    if _main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not an inherited SIG_IGN
            signal.signal(signal.SIGINT, _on_signal)
        _state.update(installed=True, note=None, held_for_exit=False, interrupt_note=None, stopping=None)


def ignore_further() -> None:
    """The command was interrupted and is about to exit: later SIGINT/SIGTERM are ignored, not left to the
    interpreter's shutdown (which restores the default handlers, so a second Ctrl-C would end the process
    by the signal, not with 130)."""
    if _main_thread() and _state["stopping"] is not None:  # a signal, not click's Abort at an EOF
        for s in SIGS:
            signal.signal(s, signal.SIG_IGN)


def stopping() -> str | None:
    """'SIGINT'/'SIGTERM' once one arrived (the command is unwinding), else None."""
    return _state["stopping"]


def _block(how) -> set | None:
    try:
        return signal.pthread_sigmask(how, SIGS)
    except (ValueError, OSError):  # platforms without sigmask support
        return None


@contextlib.contextmanager
def held():
    """SIGINT/SIGTERM wait until the block ends (nested use is fine)."""
    old = _block(signal.SIG_BLOCK)
    try:
        yield
    finally:
        if old is not None and not _state["held_for_exit"]:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def completed(note: str) -> None:
    """The irreversible part is done: hold signals until main() reports, with `note`."""
    _state["note"] = note
    if _state["installed"] and _main_thread():
        _block(signal.SIG_BLOCK)
        _state["held_for_exit"] = True


def completion_note() -> str | None:
    return _state["note"]


def on_interrupt(note: str | None) -> None:
    """What main() adds to "interrupted"/"terminated" (e.g. that the checkout was restored)."""
    _state["interrupt_note"] = note


def interrupt_note() -> str | None:
    return _state["interrupt_note"]


def finish() -> str | None:
    """End of main(): the signal (if any) that arrived after completion is consumed and named.
    Returns 'SIGINT'/'SIGTERM' when one was pending, else None; signals are unblocked again."""
    if not _state["held_for_exit"]:
        _state.update(note=None, interrupt_note=None)
        return None
    pending = signal.sigpending() & set(SIGS)
    name = None
    if pending:
        name = signal.Signals(min(pending)).name
        # discard the pending signals: SIG_IGN drops them, then restore the handlers
        saved = {s: signal.getsignal(s) for s in SIGS}
        for s in SIGS:
            signal.signal(s, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGS)
        for s, h in saved.items():
            signal.signal(s, h)
    else:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGS)
    _state.update(note=None, held_for_exit=False, interrupt_note=None)
    return name
