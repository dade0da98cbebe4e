"""verify's progress (docs/design.md "Output and exit codes"): on stderr, one line per update that
fits 80 columns — runs done of at most how many, scenarios still open, elapsed, an ETA — never the
reproducers' names (`verify --all` on the H200 printed 80 lines of 200 characters); a rich
progress bar instead when stderr is a terminal; nothing with --quiet (the verb's final line says
what ran).

Kept apart from the run loop (verify/session.py) so the loop's own changes (stopping rules,
Ctrl-C) and the way progress is shown change independently."""

from __future__ import annotations

import time

from lucepatch import report

INTERVAL_S = 5.0  # a line at most every 5 s when stderr is not a terminal


def clock(seconds: float) -> str:
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def line(done: int, bound: int, open_: int, scenarios: int, elapsed: float) -> str:
    """'runs 120/≤220, 12/50 scenarios open, 0:42, ETA ≤0:31' — at most 68 characters for any
    count below a million, so with 'lucepatch: ' in front it fits 80 columns."""
    eta = ""
    if 0 < done < bound:
        eta = f", ETA ≤{clock(elapsed / done * (bound - done))}"
    at_most = "" if done >= bound else "≤"
    return f"runs {done}/{at_most}{bound}, {open_}/{scenarios} scenarios open, {clock(elapsed)}{eta}"


def final_line(done: int, scenarios: int, elapsed: float, processes: int | None = None) -> str:
    started = f" ({processes} processes)" if processes is not None and processes != done else ""
    return f"runs {done} done{started}, {scenarios} scenarios settled, {clock(elapsed)}"


class RunProgress:
    """Told after every run how far the verification is; shows it as a bar (a terminal) or as a
    line every INTERVAL_S (a pipe, a log), and as one final line at the end."""

    def __init__(self, scenarios: int, bound: int, *, interval: float = INTERVAL_S):
        self.scenarios, self.bound, self.interval = scenarios, bound, interval
        self.start = self._last = time.monotonic()
        self.done = 0
        self._bar = None
        if report.rich_progress_wanted():
            from rich.progress import (  # lazy: rich's progress bar, 24 ms
                BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn)

            self._bar = Progress(TextColumn("runs"), BarColumn(bar_width=None), MofNCompleteColumn(),
                                 TextColumn("{task.fields[open]} open"), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), console=report.err_console(),
                                 transient=True, expand=False)
            self._task = self._bar.add_task("verify", total=bound, open=scenarios)
            self._bar.start()

    def update(self, done: int, bound: int, open_: int) -> None:
        self.done, self.bound = done, max(bound, done)
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=self.bound, open=f"{open_}/{self.scenarios}")
            return
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            report.progress(line(done, self.bound, open_, self.scenarios, now - self.start))

    def __enter__(self) -> "RunProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def close(self, processes: int | None = None) -> str:
        """Stop the bar and print the final line; returns it."""
        self.stop()
        text = final_line(self.done, self.scenarios, time.monotonic() - self.start, processes)
        report.progress(text)
        return text
