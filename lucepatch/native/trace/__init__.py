"""Driver-call traces: what a reproducer asks the driver and what the driver answers.

Recorded on a real GPU with the interposer (and no HAMi), replayed in CI against the simulated
driver: any difference in (call, thread, context current, result, output written, output value;
for pool attributes also the attribute) means the simulation no longer models the hardware it
stands in for.

Output values are compared by what they mean, per call (VALUE_CLASS): device ids, the driver
version, the allocation granularity and pool attribute values exactly; counts and memory sizes as
positive or zero; contexts by identity (the stream's context is the primary context it was created
in); device pointers, streams, pools and allocation handles as null or not (addresses differ
between runs, and a driver that clears a failed call's output writes null).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from lucepatch.native import compiling, toolchain

SOURCE = Path(__file__).with_name("interposer.c")
FIELDS = ("call", "proc", "thread", "ctx", "result", "written")
# Recorded only by some calls: which attribute (memory-pool and pointer attributes), the capture mode asked
# for (cuThreadExchangeStreamCaptureMode, whose output is the previous mode).
OPTIONAL_FIELDS = ("attr", "mode")
NOT_RECORDED = "<not recorded>"  # traces recorded before values were (compare written only)
VALUES_VERSION = 1  # the trace header's "values": traces that carry every written output's value
VALUE_CLASS = {
    "cuDriverGetVersion": "exact", "cuDeviceGet": "exact", "cuCtxGetDevice": "exact",
    "cuMemGetAllocationGranularity": "exact", "cuMemPoolGetAttribute": "exact",
    "cuDeviceGetCount": "positive", "cuDeviceTotalMem_v2": "positive", "cuMemGetInfo_v2": "positive",
    "cuDevicePrimaryCtxRetain": "context", "cuCtxPopCurrent_v2": "context", "cuStreamGetCtx": "context",
    "cuMemAlloc_v2": "nonnull", "cuMemAllocAsync": "nonnull", "cuMemAddressReserve": "nonnull",
    "cuStreamCreate": "nonnull", "cuDeviceGetMemPool": "nonnull", "cuMemCreate": "nonnull",
    "cuMemPoolCreate": "nonnull", "cuMemAllocFromPoolAsync": "nonnull", "cuDeviceGetDefaultMemPool": "nonnull",
    "cuMemAllocManaged": "nonnull",
    # stream capture: the status and the mode exactly, the graph and its executable null or not
    "cuStreamIsCapturing": "exact", "cuThreadExchangeStreamCaptureMode": "exact", "cuStreamGetDevice": "exact",
    "cuStreamEndCapture": "nonnull", "cuGraphInstantiateWithFlags": "nonnull",
    # recorded only for memory type, managed, device ordinal and mapped (the interposer)
    "cuPointerGetAttribute": "exact",
}


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
    out["value"] = entry.get("value", NOT_RECORDED)  # the raw output value (None: not written)
    return out


def meanings(entries: list[dict]) -> list[dict]:
    """Each entry with its raw value replaced by what it means (VALUE_CLASS); contexts become
    ctx1, ctx2, ... in order of first appearance within their process."""
    labels: dict[str, dict[int, str]] = {}
    out = []
    for e in entries:
        v = e.get("value", NOT_RECORDED)
        if v is not None and v != NOT_RECORDED:
            cls = VALUE_CLASS.get(e["call"], "exact")
            if cls == "exact":
                v = f"={v}"
            elif cls == "positive":
                v = "positive" if v > 0 else "zero"
            elif cls == "nonnull":
                v = "non-null" if v else "null"
            else:  # context identity
                seen = labels.setdefault(e["proc"], {})
                v = "null" if not v else seen.setdefault(v, f"ctx{len(seen) + 1}")
        out.append({**e, "value": v})
    return out


def per_process(entries: list[dict]) -> list[dict]:
    """Calls grouped by process (root first), order kept within each: two processes' calls
    interleave differently on every run, one process's calls do not."""
    return sorted(entries, key=lambda e: e["proc"] != "root")


def load(path: Path) -> list[dict]:
    return [normalise(json.loads(l)) for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]


def diff(expected: list[dict], got: list[dict]) -> list[str]:
    """Human-readable differences; empty when the traces agree."""
    expected, got = meanings(per_process(expected)), meanings(per_process(got))
    out = []
    for i in range(max(len(expected), len(got))):
        e = expected[i] if i < len(expected) else None
        g = got[i] if i < len(got) else None
        if e is not None and g is not None and e.get("value") == NOT_RECORDED:
            g = {**g, "value": NOT_RECORDED}  # an old recording: nothing to compare the value with
        if e != g:
            out.append(f"call #{i}: recorded {e} but simulated {g}")
    return out
