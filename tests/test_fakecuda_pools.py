"""The simulated driver's memory pools against NVIDIA's documented semantics (no GPU needed).

The H200 trace of the same probe (driver-semantics.pools) checks the model against hardware once
it is recorded (tests/test_traces.py); these tests pin down what the model itself does, so a change
to fakecuda.c that breaks a documented rule fails here first: the attribute values through
allocate / free / synchronize / trim, the pool's device deciding where memory goes (not the
stream's), host pools charging no GPU, cuMemPoolDestroy with an allocation outstanding.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from lucepatch.native import trace
from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.verify.record_traces import compile_semantics
from lucepatch.verify.reproducer import load_reproducer_dir
from lucepatch.verify.runner import compile_reproducer

ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA_INC = "/usr/local/cuda/include"
MiB = 1 << 20

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not os.path.isfile(f"{CUDA_INC}/cuda.h"),
                                reason="no-tool: needs gcc and /usr/local/cuda/include/cuda.h")

# CUmemPool_attribute numbers (cuda.h)
RELEASE_THRESHOLD, RESERVED, RESERVED_HIGH, USED, USED_HIGH = 4, 5, 6, 7, 8


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    cache = tmp_path_factory.mktemp("pool-cache")
    stubs = build_fakecuda(cache / "fakecuda")
    return cache, stubs, trace.build_interposer(cache)


def _attr_reads(entries):
    """[(thread, attr, value)] of the successful cuMemPoolGetAttribute calls, in order."""
    return [(e["thread"], e["attr"], e["value"]) for e in entries
            if e["call"] == "cuMemPoolGetAttribute" and e["result"] == 0]


def test_pool_probe_follows_the_documented_semantics(sim):
    cache, stubs, interposer = sim
    entries, rc = trace.record(compile_semantics(cache, stubs), "pools", interposer, {"LD_LIBRARY_PATH": str(stubs)})
    assert rc == 0
    quad = lambda thread, r, rh, u, uh: [(thread, RESERVED, r), (thread, RESERVED_HIGH, rh), (thread, USED, u),
                                        (thread, USED_HIGH, uh)]
    want = (quad("main", 0, 0, 0, 0)                            # a new pool holds nothing
            + quad("other", 64 * MiB, 64 * MiB, 64 * MiB, 64 * MiB)  # allocated from a context-less thread
            + [("other", RELEASE_THRESHOLD, 0)]                 # the documented default
            + quad("main", 0, 64 * MiB, 0, 64 * MiB)            # freed + synchronize, threshold 0: released
            + quad("main", 64 * MiB, 64 * MiB, 0, 64 * MiB)     # threshold UINT64_MAX: stays reserved
            + quad("main", 0, 64 * MiB, 0, 64 * MiB)            # cuMemPoolTrimTo(0)
            + quad("main", 0, 0, 0, 0))                         # watermarks reset
    assert _attr_reads(entries) == want
    calls = [(e["call"], e["thread"], e["result"]) for e in entries]
    # an explicit stream needs no context; the default stream does (CUDA_ERROR_INVALID_CONTEXT)
    assert [c for c in calls if c[0] == "cuMemAllocFromPoolAsync" and c[1] == "other"] == [
        ("cuMemAllocFromPoolAsync", "other", 0), ("cuMemAllocFromPoolAsync", "other", 201)]
    assert ("cuDeviceGetDefaultMemPool", "other", 0) in calls
    # "It is illegal to set this attribute to a non-zero value": the last RESERVED_MEM_HIGH set fails
    sets = [(e["attr"], e["result"]) for e in entries if e["call"] == "cuMemPoolSetAttribute"]
    assert sets == [(RELEASE_THRESHOLD, 0), (USED_HIGH, 0), (RESERVED_HIGH, 0), (RESERVED_HIGH, 1)]
    # destroy with an allocation outstanding returns at once, and the free still succeeds
    tail = [c for c in calls if c[0] in ("cuMemPoolDestroy", "cuMemFreeAsync")][-2:]
    assert tail == [("cuMemPoolDestroy", "main", 0), ("cuMemFreeAsync", "main", 0)]


PROBE = r"""
#include <cuda.h>
#include <stdio.h>
#include <string.h>
static size_t used(int dev) {
    CUcontext c, p; size_t f = 0, t = 0;
    cuDevicePrimaryCtxRetain(&c, dev); cuCtxPushCurrent(c); cuMemGetInfo(&f, &t); cuCtxPopCurrent(&p);
    return t - f;
}
static CUresult pool(CUmemoryPool *p, CUmemLocationType type, int id, unsigned handles) {
    CUmemPoolProps props; memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED; props.location.type = type; props.location.id = id;
    props.handleTypes = (CUmemAllocationHandleType)handles;
    return cuMemPoolCreate(p, &props);
}
int main(void) {
    CUcontext ctx; CUdevice d0; CUstream s; CUmemoryPool p1, host, bad, dflt, cur;
    CUdeviceptr a = 0, b = 0, c = 0;
    cuInit(0); cuDeviceGet(&d0, 0); cuDevicePrimaryCtxRetain(&ctx, d0); cuCtxSetCurrent(ctx);
    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    /* the pool's device gets the memory, not the stream's */
    printf("create-dev1 %d\n", pool(&p1, CU_MEM_LOCATION_TYPE_DEVICE, 1, 0));
    size_t u0 = used(0), u1 = used(1);
    printf("alloc-dev1-pool %d\n", cuMemAllocFromPoolAsync(&a, 64 << 20, p1, s));
    printf("cross %zu %zu\n", used(0) - u0, used(1) - u1);
    printf("free %d\n", cuMemFreeAsync(a, s));
    printf("before-sync %zu\n", used(1) - u1);
    cuStreamSynchronize(s);
    printf("after-sync %zu\n", used(1) - u1);
    /* host pools: handle types must be 0 for HOST; HOST_NUMA_CURRENT is invalid */
    printf("host-handles %d\n", pool(&bad, CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    printf("numa-current %d\n", pool(&bad, CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, 0));
    printf("host-numa %d\n", pool(&host, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0));
    u0 = used(0);
    printf("host-alloc %d %zu\n", cuMemAllocFromPoolAsync(&b, 64 << 20, host, s), used(0) - u0);
    cuMemFreeAsync(b, s);
    /* default pool: cannot be destroyed; a destroyed current pool falls back to the default */
    cuDeviceGetDefaultMemPool(&dflt, 1);
    printf("destroy-default %d\n", cuMemPoolDestroy(dflt));
    printf("set-other-device %d\n", cuDeviceSetMemPool(0, p1));
    printf("set-own-device %d\n", cuDeviceSetMemPool(1, p1));
    cuMemPoolDestroy(p1);
    cuDeviceGetMemPool(&cur, 1);
    printf("current-after-destroy %d\n", cur == dflt);
    /* maxSize caps the pool */
    CUmemPoolProps props; memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED; props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.maxSize = 32 << 20;
    cuMemPoolCreate(&p1, &props);
    printf("over-max %d\n", cuMemAllocFromPoolAsync(&c, 64 << 20, p1, s));
    return 0;
}
"""


def test_pool_device_host_pools_and_destroy(tmp_path, sim):
    _, stubs, _ = sim
    src = tmp_path / "pools.c"
    src.write_text(PROBE)
    exe = tmp_path / "pools"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), f"-I{CUDA_INC}", f"-L{stubs}", "-lcuda"], check=True)
    out = subprocess.run([str(exe)], env={"LD_LIBRARY_PATH": str(stubs), "LUCEPATCH_FAKECUDA_DEVICES": "2"},
                         capture_output=True, text=True, check=True, timeout=20).stdout
    got = dict(line.split(" ", 1) for line in out.splitlines())
    assert got["create-dev1"] == "0" and got["alloc-dev1-pool"] == "0"
    assert got["cross"] == f"0 {64 * MiB}"          # device 1 (the pool's) pays, device 0 (the stream's) not
    assert got["free"] == "0"
    assert got["before-sync"] == str(64 * MiB)      # a freed block stays reserved until a synchronize
    assert got["after-sync"] == "0"                 # release threshold 0: given back at the synchronize
    assert got["host-handles"] == "1" and got["numa-current"] == "1"  # CUDA_ERROR_INVALID_VALUE
    assert got["host-numa"] == "0"
    assert got["host-alloc"] == "0 0"               # host memory: no GPU charged
    assert got["destroy-default"] == "1"            # a device's default pool cannot be destroyed
    assert got["set-other-device"] == "1" and got["set-own-device"] == "0"  # "must be local to the device"
    assert got["current-after-destroy"] == "1"
    assert got["over-max"] == "2"                   # CUDA_ERROR_OUT_OF_MEMORY past maxSize


@pytest.fixture(scope="module")
def pool_alloc(sim):
    cache, stubs, _ = sim
    repro = load_reproducer_dir(ROOT / "reproducers" / "pool-alloc")
    return repro, compile_reproducer(repro, cache, stubs), stubs


def _events(stdout: str) -> list[dict]:
    return [json.loads(l.split(" ", 1)[1]) for l in stdout.splitlines() if l.startswith("@@lucepatch ")]


@pytest.mark.parametrize("scenario", ["control", "pool-charged", "ctxless-pool-alloc", "default-pool", "cross-device"])
def test_pool_alloc_passes_on_the_bare_simulated_driver(pool_alloc, scenario):
    """Without HAMi the driver's own cuMemGetInfo shows each pool allocation on the pool's device."""
    repro, binary, stubs = pool_alloc
    env = {**os.environ, **repro.env, "LD_LIBRARY_PATH": str(stubs)}
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([str(binary), scenario], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    assert {"event": "done", "scenario": scenario, "ok": True} in _events(p.stdout)


def test_pool_alloc_over_limit_needs_hami(pool_alloc):
    """The bare driver has no 1 GiB limit: the over-limit check fails there, by design."""
    repro, binary, stubs = pool_alloc
    env = {**os.environ, **repro.env, "LD_LIBRARY_PATH": str(stubs)}
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([str(binary), "over-limit"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    checks = [e for e in _events(p.stdout) if e["event"] == "check" and not e["ok"]]
    assert [c["name"] for c in checks] == ["main: cuMemAllocFromPoolAsync past the limit", "usage is unchanged"]
    assert checks[1]["got"] == str(2 << 30)  # the driver itself charged the pool's device


def test_pool_alloc_cross_device_skips_on_one_device(pool_alloc):
    repro, binary, stubs = pool_alloc
    env = {**os.environ, **repro.env, "LD_LIBRARY_PATH": str(stubs), "LUCEPATCH_FAKECUDA_DEVICES": "1"}
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([str(binary), "cross-device"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    assert any(e["event"] == "skip" and "needs 2 CUDA devices" in e["reason"] for e in _events(p.stdout))
