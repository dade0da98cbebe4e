"""The simulated driver's stream capture against the documented rules (no GPU needed).

tests/test_traces.py compares the same probe (driver-semantics.capture) with the hardware once its
H100/H200 trace is recorded; these tests pin down what the model does until then, so a change to
fakecuda.c / fakegraph.c that breaks a documented rule fails here first: which calls a capture
forbids, per capture mode and thread (cuThreadExchangeStreamCaptureMode's rules in cuda.h), that a
forbidden call invalidates the capture (cuStreamEndCapture then returns 901 and no graph), that the
thread's own relaxed mode lifts the prohibition, and that captured allocations are graph memory
nodes (no pool memory at capture).
"""

from __future__ import annotations

import os
import shutil

import pytest

from lucepatch.native import trace
from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.verify.record_traces import compile_semantics

CUDA_INC = "/usr/local/cuda/include"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not os.path.isfile(f"{CUDA_INC}/cuda.h"),
                                reason="no-tool: needs gcc and /usr/local/cuda/include/cuda.h")

UNSUPPORTED, INVALIDATED = 900, 901
ACTIVE, STATUS_INVALIDATED = 1, 2
# the order semantics.c's capture probe makes its calls in (enum Q_*)
QUERIES = ["cuMemPoolGetAttribute", "cuDeviceGetMemPool", "cuDeviceGetDefaultMemPool", "cuStreamGetDevice",
           "cuStreamGetCtx", "cuCtxGetDevice", "cuDeviceGetCount", "cuMemGetInfo_v2", "cuMemAlloc_v2",
           "cuCtxSynchronize"]
UNSAFE = {"cuMemPoolGetAttribute", "cuStreamGetDevice", "cuMemAlloc_v2", "cuCtxSynchronize"}


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    cache = tmp_path_factory.mktemp("capture-cache")
    stubs = build_fakecuda(cache / "fakecuda")
    entries, rc = trace.record(compile_semantics(cache, stubs), "capture", trace.build_interposer(cache),
                               {"LD_LIBRARY_PATH": str(stubs)})
    assert rc == 0
    return entries


def _captures(entries):
    """Split the trace into captures: (calls between begin and the status read, status, end result)."""
    out, cur = [], None
    for e in entries:
        if e["call"] == "cuStreamBeginCapture_v2":
            cur = {"calls": [], "status": None, "end": None}
        elif cur is None:
            continue
        elif e["call"] == "cuStreamIsCapturing" and cur["status"] is None:
            cur["status"] = e["value"]
        elif e["call"] == "cuStreamEndCapture":
            cur["end"] = e["result"]
            out.append(cur)
            cur = None
        elif cur["status"] is None and e["call"] not in ("cuThreadExchangeStreamCaptureMode", "cuCtxSetCurrent"):
            cur["calls"].append(e)
    return out


def _expect(query, forbidden):
    return (UNSUPPORTED, STATUS_INVALIDATED, INVALIDATED) if forbidden else (0, ACTIVE, 0)


def test_a_forbidden_call_fails_and_invalidates_the_capture(probe):
    caps = _captures(probe)
    n = len(QUERIES)
    blocks = {  # the probe's order: main in global, thread-local, relaxed; another thread in global,
                # thread-local; main switched to relaxed under its global capture
        "main, global capture": (caps[0:n], True),
        "main, thread-local capture": (caps[n:2 * n], True),
        "main, relaxed capture": (caps[2 * n:3 * n], False),
        "another thread, global capture on main": (caps[3 * n:4 * n], True),
        "another thread, thread-local capture on main": (caps[4 * n:5 * n], False),
        "main in relaxed mode, its global capture": (caps[5 * n:6 * n], False),
    }
    for where, (block, prohibits) in blocks.items():
        assert [c["calls"][0]["call"] for c in block] == QUERIES, where
        for q, c in zip(QUERIES, block):
            first = c["calls"][0]
            want = _expect(q, prohibits and q in UNSAFE)
            assert (first["result"], c["status"], c["end"]) == want, f"{where}: {q}"
            if q in UNSAFE and prohibits:  # where it ran matters: the other thread's own call
                assert first["thread"] == ("other" if where.startswith("another") else "main")


def test_waiting_for_the_capturing_stream_conflicts_in_any_mode(probe):
    sync, query = _captures(probe)[60:62]
    assert [(c["calls"][0]["call"], c["calls"][0]["result"], c["status"], c["end"]) for c in (sync, query)] == [
        ("cuStreamSynchronize", UNSUPPORTED, STATUS_INVALIDATED, INVALIDATED),
        ("cuStreamQuery", UNSUPPORTED, STATUS_INVALIDATED, INVALIDATED)]


def test_captured_allocations_are_graph_memory_nodes(probe):
    tail = probe[[i for i, e in enumerate(probe) if e["call"] == "cuMemPoolCreate"][-1]:]
    calls = [(e["call"], e["result"]) for e in tail if e["call"] != "cuThreadExchangeStreamCaptureMode"]
    assert ("cuMemAllocAsync", 0) in calls and ("cuMemAllocFromPoolAsync", 0) in calls
    assert ("cuStreamEndCapture", 0) in calls and calls.count(("cuGraphLaunch", 0)) == 2
    # pool attributes (RESERVED_MEM_CURRENT, USED_MEM_CURRENT of the default and the created pool), read in
    # relaxed mode before the capture, after the captured allocations and after the replays: nothing moves
    reads = [e["value"] for e in tail if e["call"] == "cuMemPoolGetAttribute"]
    assert reads == [0] * 12
    status = [e["value"] for e in tail if e["call"] == "cuStreamIsCapturing"]
    assert status == [ACTIVE]
