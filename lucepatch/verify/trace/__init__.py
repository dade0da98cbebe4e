"""Driver-call traces: what a reproducer asks the driver and what the driver answers.

Recorded on a real GPU with the interposer (and no HAMi), replayed in CI against the simulated
driver: any difference in (call, thread, context current, result, output written; for pool
attributes also the attribute and the value read) means the simulation no longer models the
hardware it stands in for.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from lucepatch import compiling
from lucepatch.builders import toolchain

SOURCE = Path(__file__).with_name("interposer.c")
FIELDS = ("call", "proc", "thread", "ctx", "result", "written")
# Recorded only by some calls (memory-pool attributes): which attribute, and the value read.
OPTIONAL_FIELDS = ("attr", "value")


def build_interposer(cache: Path) -> Path:
    cc = compiling.cc()
    inc = toolchain.cuda_include()
    unit = compiling.Unit(
        what="the driver-call trace interposer",
        steps=[[cc, "-shared", "-fPIC", "-O1", "-g", "-o", "{out}/liblucepatch-trace.so", str(SOURCE), f"-I{inc}",
                "-ldl", "-pthread"]],
        outputs=["liblucepatch-trace.so"], inputs=[SOURCE], headers=[inc / "cuda.h"])
    return compiling.build_cached(unit, cache / "trace", compiler=cc) / "liblucepatch-trace.so"


def record(binary: Path, scenario: str, interposer: Path, env_extra: dict | None = None,
           timeout: float = 60) -> tuple[list[dict], int]:
    """Run `binary scenario` with the interposer; return (trace, returncode)."""
    with tempfile.TemporaryDirectory(prefix="lucepatch-trace-") as d:
        trace = Path(d) / "trace.jsonl"
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
        env.update(env_extra or {})
        env["LD_PRELOAD"] = str(interposer)
        env["LUCEPATCH_TRACE_FILE"] = str(trace)
        p = subprocess.run([str(binary), scenario], env=env, capture_output=True, timeout=timeout, cwd=d)
        lines = trace.read_text().splitlines() if trace.exists() else []
    return [normalise(json.loads(l)) for l in lines if l.strip()], p.returncode


def normalise(entry: dict) -> dict:
    out = {k: entry.get(k) for k in FIELDS}
    out.update({k: entry[k] for k in OPTIONAL_FIELDS if k in entry})
    out["proc"] = out["proc"] or "root"  # traces recorded before processes were labelled
    return out


def per_process(entries: list[dict]) -> list[dict]:
    """Calls grouped by process (root first), order kept within each: two processes' calls
    interleave differently on every run, one process's calls do not."""
    return sorted(entries, key=lambda e: e["proc"] != "root")


def load(path: Path) -> list[dict]:
    return [normalise(json.loads(l)) for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]


def diff(expected: list[dict], got: list[dict]) -> list[str]:
    """Human-readable differences; empty when the traces agree."""
    expected, got = per_process(expected), per_process(got)
    out = []
    for i in range(max(len(expected), len(got))):
        e = expected[i] if i < len(expected) else None
        g = got[i] if i < len(got) else None
        if e != g:
            out.append(f"call #{i}: recorded {e} but simulated {g}")
    return out
