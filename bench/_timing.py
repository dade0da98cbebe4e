"""Timing helpers shared by the benches: the same rules for lucepatch and its peer.

- A command is timed until every process it started has exited: it runs in its own session
  (process group) and the clock stops when the group is empty, not when the first child returns.
- Runs are interleaved (A, B, A, B, ...) so a busy neighbour slows both sides alike.
- Both sides report the same statistic (the median; min and max are printed too).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time


def run_group(args, *, cwd=None, env=None, check=True) -> tuple[float, subprocess.CompletedProcess]:
    """Seconds from start until the last process of the command's process group exited."""
    t0 = time.perf_counter()
    p = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    out, err = p.communicate()
    while True:  # children that outlived the leader (a daemonised git gc, a stray helper)
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            break
        time.sleep(0.001)
    dt = time.perf_counter() - t0
    cp = subprocess.CompletedProcess(args, p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    if check and cp.returncode:
        raise SystemExit(f"{' '.join(map(str, args))} failed ({cp.returncode}): {cp.stderr[-2000:]}")
    return dt, cp


def interleave(sides: dict, runs: int, prepare=None) -> dict[str, list[float]]:
    """sides: name -> fn() returning seconds. Each round runs every side once, in rotating order."""
    names = list(sides)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(runs):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            if prepare:
                prepare(n)
            out[n].append(sides[n]())
    return out


def describe(ts: list[float]) -> str:
    if not ts:
        return "n/a"
    return f"median {statistics.median(ts) * 1000:8.1f} ms (min {min(ts) * 1000:.1f}, max {max(ts) * 1000:.1f}, n={len(ts)})"


def median(ts: list[float]) -> float:
    return statistics.median(ts) if ts else float("nan")
