"""Starting a lucepatch the test will Ctrl-C: SIGINT's default disposition in the child.

A process started with SIGINT ignored (pytest run from a non-interactive shell's background job,
`cmd &`, or under nohup) passes SIG_IGN on to every child, and Python then installs no
KeyboardInterrupt handler: the child would never see the test's SIGINT. lucepatch keeps an inherited
SIG_IGN on purpose (lucepatch/signals.py says why), so the tests give their child the disposition a
terminal's foreground job has.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """preexec_fn for subprocess.Popen: SIGINT (and SIGTERM) back to their defaults before exec, and
    unblocked (a mask an earlier in-process test left blocked is inherited across fork and exec too)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


POPEN = {"preexec_fn": default_sigint}
