"""Proof of what a run loaded: which interposer and which libcuda were mapped, per process.

A proof comes from the program (a `loaded` event it printed after CUDA init and before its action:
the C reproducers' lp_report.h, lp_workload.report_loaded) or from lucepatch's preloaded reporter
(reporter.c: at exit, and on a fatal signal, into the run's events file). The program's is preferred
(it was taken before anything could go wrong); the reporter's lets a crash before that point, or a
program lucepatch cannot change, still count as a measurement. Each proof must show the library
under test mapped with the sha256 of the artifact (every mapped file of that name: two different
libvgpu.so in one process prove nothing), a libcuda, and the interposer's load marker in that
process's log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

WHEN_ORDER = ("before-action", "on-signal", "at-exit")
# `Initialized` lines with the pid that printed them: HAMi-core `Msg(PID:TID:file.c:N)]`,
# `(pid:PID thread=…)`, fakehami `Msg(pid:PID)]`
_MARKER_PID = re.compile(r"\(pid:(\d+)|\((\d+):\d+:")


@dataclass
class Proof:
    reporter: str  # program | preload
    when: str  # before-action | at-exit | on-signal
    pid: int | None
    rank: int | None
    preload: list = field(default_factory=list)
    libcuda: dict | None = None
    hami_initialized: bool = False

    def to_json(self) -> dict:
        out = {"when": self.when, "reporter": self.reporter, "hami_initialized": self.hami_initialized}
        if self.pid is not None:
            out["pid"] = self.pid
        if self.rank is not None:
            out["rank"] = self.rank
        return out


def marker_pids(stderr: str, marker: str) -> tuple[set[int], bool]:
    """(pids whose log shows the marker, whether some marker line names no pid)."""
    pids, anonymous = set(), False
    if not marker:
        return pids, True
    for line in stderr.splitlines():
        if marker not in line:
            continue
        m = _MARKER_PID.search(line)
        if m:
            pids.add(int(m.group(1) or m.group(2)))
        else:
            anonymous = True
    return pids, anonymous


def collect(program_events: list[dict], reporter_events: list[dict], stderr: str, marker: str) -> list[Proof]:
    """Every proof the run left, program's first; ranks filled in from `rank` events."""
    rank_of = {e.get("pid"): e.get("rank") for e in program_events if e.get("event") == "rank"}
    pids, anonymous = marker_pids(stderr, marker)
    out = []
    for reporter, events in (("program", program_events), ("preload", reporter_events)):
        for e in events:
            if e.get("event") != "loaded":
                continue
            pid = e.get("pid")
            rank = e.get("rank", rank_of.get(pid))
            init = (not marker) or (pid in pids) or anonymous or (pid is None and bool(pids))
            out.append(Proof(reporter=e.get("reporter", reporter), when=e.get("when", "before-action"), pid=pid,
                             rank=rank, preload=list(e.get("preload") or []), libcuda=e.get("libcuda"),
                             hami_initialized=bool(init)))
    return out


def problem(p: Proof, preload: Path, expected_sha256: str | None) -> str:
    """Why this proof does not show the library under test, or "" when it does."""
    mapped = [m for m in p.preload if Path(m.get("path", "")).name == preload.name]
    if not mapped:
        return f"{preload.name} was not mapped: the preload did not load"
    if expected_sha256 and any(m.get("sha256") != expected_sha256 for m in mapped):
        return "the mapped library is not the artifact under test (sha256 differs)"
    if not p.libcuda:
        return "no libcuda.so.1 mapped"
    if not p.hami_initialized:
        return "load marker missing from the log"
    return ""


def best(proofs: list[Proof], *, pid: int | None = None, rank: int | None = None) -> Proof | None:
    """The proof to judge a process by: its program's report, else the reporter's."""
    mine = [p for p in proofs if (rank is not None and p.rank == rank)
            or (rank is None and (pid is None or p.pid in (pid, None)))]
    mine.sort(key=lambda p: (p.reporter != "program", WHEN_ORDER.index(p.when) if p.when in WHEN_ORDER else 9))
    return mine[0] if mine else None


def sole(proofs: list[Proof]) -> Proof | None:
    """When every proof comes from one process (a wrapper that forked the program instead of
    exec'ing it), that process's best proof."""
    pids = {p.pid for p in proofs}
    return best(proofs, pid=next(iter(pids))) if len(pids) == 1 else None
