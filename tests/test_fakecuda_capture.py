"""The simulated driver's stream capture against the documented rules and the H100's answers.

tests/test_traces.py replays the same probe (driver-semantics.capture) against its trace recorded on
the bare driver of an H100 80GB HBM3 (driver 580.159.04, CUDA 13.0); these tests name the rules the
model follows, so a change to fakecuda.c / fakegpu.c that breaks one fails here with the rule's name:
which calls a capture forbids, per capture mode and thread (cuThreadExchangeStreamCaptureMode's rules
in cuda.h), that a forbidden call invalidates the capture (cuStreamEndCapture then returns 901 and no
graph), that the thread's own relaxed mode lifts the prohibition of a potentially unsafe call but not
of a call that conflicts with the capturing stream itself (cuStreamGetDevice of it, cuCtxSynchronize
of its context: measured), and that captured allocations are graph memory nodes (no pool memory at
capture).
"""

from __future__ import annotations

import os
import shutil
import subprocess

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
# potentially unsafe: forbidden where the thread's mode and the capture's mode say so
UNSAFE = {"cuMemPoolGetAttribute", "cuMemAlloc_v2"}
# conflict with the capturing stream itself: forbidden in every mode, from every thread (measured on the
# H100: cuStreamGetDevice of the capturing stream; cuCtxSynchronize of its context)
CONFLICTS = {"cuStreamGetDevice", "cuCtxSynchronize"}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    cache = tmp_path_factory.mktemp("capture-cache")
    return cache, build_fakecuda(cache / "fakecuda")


@pytest.fixture(scope="module")
def probe(fake):
    cache, stubs = fake
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
            forbidden = (prohibits and q in UNSAFE) or q in CONFLICTS
            want = _expect(q, forbidden)
            assert (first["result"], c["status"], c["end"]) == want, f"{where}: {q}"
            if forbidden:  # where it ran matters: the other thread's own call
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


OTHER_THREAD_ALLOC = r"""
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
static CUcontext ctx;
static CUstream side;
static int relax;
static void *worker(void *arg) {
    CUdeviceptr p = 0;
    CUresult r, f = (CUresult)-1;
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    (void)arg;
    cuCtxSetCurrent(ctx);
    if (relax)
        cuThreadExchangeStreamCaptureMode(&m);
    r = cuMemAllocAsync(&p, 1 << 20, side);
    if (p)
        f = cuMemFreeAsync(p, side);
    if (relax)
        cuThreadExchangeStreamCaptureMode(&m);
    printf("worker-%s %d %d\n", relax ? "relaxed" : "global", (int)r, (int)f);
    return NULL;
}
int main(void) {
    CUdevice d;
    CUstream s;
    cuInit(0);
    cuDeviceGet(&d, 0);
    cuDevicePrimaryCtxRetain(&ctx, d);
    cuCtxSetCurrent(ctx);
    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    cuStreamCreate(&side, CU_STREAM_NON_BLOCKING);
    for (relax = 0; relax < 2; relax++) {
        pthread_t t;
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        CUgraph g = NULL;
        cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        pthread_create(&t, NULL, worker, NULL);
        pthread_join(t, NULL);
        cuStreamIsCapturing(s, &st);
        CUresult e = cuStreamEndCapture(s, &g);
        printf("main-%s %d %d\n", relax ? "relaxed" : "global", (int)st, (int)e);
        if (g)
            cuGraphDestroy(g);
    }
    return 0;
}
"""


def test_another_threads_allocation_on_its_own_stream_during_a_global_capture(tmp_path, fake):
    """Measured on the H100's bare driver (graph-capture.other-thread-global before its worker relaxed
    itself; docs/evidence.md, issue 36): a worker thread in the default (global) mode gets 900 for
    cuMemAllocAsync on its own, non-capturing stream while main captures globally, and main's capture is
    invalidated. The worker switched to relaxed (cuThreadExchangeStreamCaptureMode, as cuda.h says a
    thread must to make such calls during another's global capture) allocates and frees, and main's
    capture ends with a graph: the documented rule, not yet measured on a GPU."""
    stubs = fake[1]
    exe = tmp_path / "other_thread_alloc"
    src = tmp_path / "other_thread_alloc.c"
    src.write_text(OTHER_THREAD_ALLOC)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), f"-I{CUDA_INC}", f"-L{stubs}", "-lcuda", "-lpthread"],
                   check=True)
    out = subprocess.run([str(exe)], env={"LD_LIBRARY_PATH": str(stubs)}, capture_output=True, text=True,
                         check=True, timeout=10).stdout.splitlines()
    assert out == [f"worker-global {UNSUPPORTED} -1", f"main-global {STATUS_INVALIDATED} {INVALIDATED}",
                   "worker-relaxed 0 0", f"main-relaxed {ACTIVE} 0"]
