"""The simulated driver's newer models against their documented semantics (no GPU needed):
CUDA_VISIBLE_DEVICES (CUDA enumerates the listed GPUs in order, NVML ignores the variable),
cuMemGetInfo_v2 with NULL outputs, managed memory and the pointer-attribute queries, frees of
pointers no allocation holds, and the edges the H200 showed (the allocation headroom, a synchronous
free of pool memory, VMM calls on a range with nothing mapped). The H200 trace of the `queries` probe checks them against hardware
once recorded (tests/test_traces.py); these tests pin down what the model itself does."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from lucepatch.native import trace
from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.verify.record_traces import compile_semantics

CUDA_INC = "/usr/local/cuda/include"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not os.path.isfile(f"{CUDA_INC}/cuda.h"),
                                reason="no-tool: needs gcc and /usr/local/cuda/include/cuda.h")

# CUpointer_attribute numbers (cuda.h)
MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL = 2, 8, 9
CU_MEMORYTYPE_DEVICE = 2


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    cache = tmp_path_factory.mktemp("queries-cache")
    stubs = build_fakecuda(cache / "fakecuda")
    return cache, stubs, trace.build_interposer(cache)


def test_queries_probe_follows_the_documented_semantics(sim):
    cache, stubs, interposer = sim
    entries, rc = trace.record(compile_semantics(cache, stubs), "queries", interposer, {"LD_LIBRARY_PATH": str(stubs)})
    assert rc == 0
    calls = [e for e in entries if e["thread"] == "main" and e["ctx"]]
    info = [(e["result"], e["written"]) for e in calls if e["call"] == "cuMemGetInfo_v2"]
    # both outputs; NULL free (nothing watched); NULL total (free written); neither: all succeed
    assert info == [(0, True), (0, None), (0, True), (0, None)]
    attrs = [(e["attr"], e["result"], e["value"]) for e in calls if e["call"] == "cuPointerGetAttribute"]
    assert attrs == [(IS_MANAGED, 0, 1), (MEMORY_TYPE, 0, CU_MEMORYTYPE_DEVICE), (DEVICE_ORDINAL, 0, 0),
                     (IS_MANAGED, 0, 0), (MEMORY_TYPE, 0, CU_MEMORYTYPE_DEVICE),
                     (MEMORY_TYPE, 0, CU_MEMORYTYPE_DEVICE)]  # an interior pointer names its allocation
    # managed memory; NULL data is the driver's CUDA_ERROR_INVALID_VALUE; not a CUDA pointer: defaults, success
    assert [e["result"] for e in calls if e["call"] == "cuPointerGetAttributes"] == [0, 1, 0]
    assert [e["result"] for e in calls if e["call"] == "cuMemAllocManaged"] == [0]
    # managed, device, the device pointer again, never allocated: INVALID_VALUE; then a stream-ordered
    # allocation freed synchronously
    assert [e["result"] for e in calls if e["call"] == "cuMemFree_v2"] == [0, 0, 1, 1, 0]


PROBE = r"""
#include <cuda.h>
#include <stdio.h>
#include <string.h>
int nvmlInit_v2(void);
int nvmlDeviceGetCount_v2(unsigned int *);
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } mem_t;
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, mem_t *);
int main(void) {
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) { printf("init %d\n", (int)r); return 0; }
    int n = 0; cuDeviceGetCount(&n);
    unsigned int nn = 0; nvmlInit_v2(); nvmlDeviceGetCount_v2(&nn);
    printf("cuda %d nvml %u\n", n, nn);
    for (int i = 0; i < n; i++) {
        CUuuid u; int bus = -1;
        cuDeviceGetUuid(&u, i);
        cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i);
        printf("ordinal %d machine %d bus %d\n", i, u.bytes[15], bus);
    }
    CUcontext c; CUdeviceptr p;
    cuDevicePrimaryCtxRetain(&c, 0); cuCtxSetCurrent(c);
    cuMemAlloc(&p, 64 << 20);
    for (unsigned int i = 0; i < nn; i++) {
        nvmlDevice_t d; mem_t m;
        nvmlDeviceGetHandleByIndex_v2(i, &d); nvmlDeviceGetMemoryInfo(d, &m);
        printf("nvml %u used %llu\n", i, m.used);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def visible(sim, tmp_path_factory):
    _, stubs, _ = sim
    d = tmp_path_factory.mktemp("visible")
    src, exe = d / "probe.c", d / "probe"
    src.write_text(PROBE)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), f"-I{CUDA_INC}", f"-L{stubs}", "-lcuda",
                    "-lnvidia-ml"], check=True)

    def run(cvd: str | None, devices: int = 2) -> list[str]:
        env = {"LD_LIBRARY_PATH": str(stubs), "LUCEPATCH_FAKECUDA_DEVICES": str(devices)}
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        return subprocess.run([str(exe)], env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    return run


def test_cuda_visible_devices_orders_cuda_not_nvml(visible):
    out = visible("1,0")
    assert out[0] == "cuda 2 nvml 2"
    assert out[1:3] == ["ordinal 0 machine 1 bus 25", "ordinal 1 machine 0 bus 24"]
    # memory allocated on CUDA device 0 is on machine GPU 1, where NVML (machine order) sees it
    assert out[3] == "nvml 0 used 0" and out[4] == f"nvml 1 used {64 << 20}"


def test_cuda_visible_devices_unset_is_machine_order(visible):
    assert visible(None)[:3] == ["cuda 2 nvml 2", "ordinal 0 machine 0 bus 24", "ordinal 1 machine 1 bus 25"]


def test_cuda_visible_devices_stops_at_an_invalid_entry(visible):
    # "only the devices whose index precedes the invalid index are visible"
    assert visible("1,7,0")[:2] == ["cuda 1 nvml 2", "ordinal 0 machine 1 bus 25"]
    assert visible("0,0")[0] == "cuda 1 nvml 2"  # a repeated GPU (inference: one GPU, one ordinal)
    # no GPU left: cuInit's CUDA_ERROR_NO_DEVICE (what a one-GPU machine answers to 1,0)
    assert visible("1,0", devices=1) == ["init 100"]


def test_cuda_visible_devices_takes_uuids(visible):
    assert visible("GPU-1ce9a7c4-0000-4fa1-8b00-6c7563657001")[:2] == ["cuda 1 nvml 2", "ordinal 0 machine 1 bus 25"]
    assert visible("GPU-1ce9a7c4")[0] == "init 100"  # a prefix both GPUs share names neither


# What the H200 showed for issue 28's programs (driver 580.159.04, tests/fakecuda/traces/): the last
# granule of the free memory is never handed out, a stream-ordered block freed with cuMemFree goes
# back to the device while its pool keeps counting it, and VMM calls on a reserved range with nothing
# mapped. The traces compare the model with the H200 call for call; these pin the model's edges.
EDGES = r"""
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#define G (2ULL << 20)
int main(void) {
    CUdevice d; CUcontext c; CUdeviceptr p = 0, q = 0; size_t f, f2, t;
    cuInit(0); cuDeviceGet(&d, 0); cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
    cuMemGetInfo(&f, &t);
    printf("alloc-all %d\n", (int)cuMemAlloc(&p, f));
    printf("alloc-all-but-a-granule %d\n", (int)cuMemAlloc(&p, f - G));
    cuMemGetInfo(&f2, &t);
    printf("free-left %zu\n", f2);
    printf("alloc-one-byte-more %d\n", (int)cuMemAlloc(&q, 1));
    cuMemFree(p);
    CUmemAllocationProp prop; memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h;
    printf("create-all %d\n", (int)cuMemCreate(&h, f, &prop, 0));
    CUresult r = cuMemCreate(&h, f - G, &prop, 0);
    printf("create-all-but-a-granule %d\n", (int)r);
    if (r == CUDA_SUCCESS) cuMemRelease(h);
    CUstream s; CUmemoryPool pool; cuuint64_t used = 0, reserved = 0;
    cuStreamCreate(&s, 0); cuDeviceGetDefaultMemPool(&pool, d);
    unsigned long long sizes[2] = {64ULL << 20, G};
    for (int i = 0; i < 2; i++) {
        size_t fa;
        cuMemGetInfo(&f, &t);
        cuMemAllocAsync(&p, sizes[i], s); cuStreamSynchronize(s);
        cuMemGetInfo(&fa, &t);
        printf("sync-free %d", (int)cuMemFree(p));
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        cuMemGetInfo(&f2, &t);
        printf(" used %llu reserved %llu device-got-back %zu", (unsigned long long)used,
               (unsigned long long)reserved, f2 - fa);
        cuStreamSynchronize(s);
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        cuMemGetInfo(&f2, &t);
        printf(" after-sync reserved %llu back %d again %d\n", (unsigned long long)reserved, f2 == f,
               (int)cuMemFree(p));
    }
    CUdeviceptr va = 0; CUmemAccessDesc acc; memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    cuMemAddressReserve(&va, G, 0, 0, 0);
    printf("set-access-nothing-mapped %d\n", (int)cuMemSetAccess(va, G, &acc, 1));
    printf("unmap-nothing-mapped %d\n", (int)cuMemUnmap(va, G));
    cuMemAddressFree(va, G);
    printf("unmap-not-reserved %d\n", (int)cuMemUnmap(va, G));
    return 0;
}
"""


def test_the_h200s_edges_of_allocation_and_free(sim, tmp_path):
    _, stubs, _ = sim
    src, exe = tmp_path / "edges.c", tmp_path / "edges"
    src.write_text(EDGES)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), f"-I{CUDA_INC}", f"-L{stubs}", "-lcuda"], check=True)
    out = subprocess.run([str(exe)], env={"LD_LIBRARY_PATH": str(stubs)}, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    granule, block = 2 << 20, 64 << 20
    assert out[:7] == [
        "alloc-all 2",                       # exactly what cuMemGetInfo_v2 reports free: OUT_OF_MEMORY
        "alloc-all-but-a-granule 0",         # the headroom is one granule, no more
        f"free-left {granule}",              # and free is reported with it
        "alloc-one-byte-more 2",
        "create-all 2",                      # cuMemCreate keeps the same headroom
        "create-all-but-a-granule 0",
        # a 64 MiB block (its whole reservation) freed with cuMemFree: the pool still counts it, the
        # device has it back at once; a second cuMemFree is the driver's INVALID_VALUE (1)
        f"sync-free 0 used {block} reserved 0 device-got-back {block} after-sync reserved 0 back 1 again 1",
    ]
    # a 2 MiB block in a 32 MiB reservation chunk: the block's bytes come back at once, the rest of the
    # chunk at the next synchronize (release threshold 0); the pool now counts both stale blocks
    assert out[7] == (f"sync-free 0 used {block + granule} reserved {(32 << 20) - granule} "
                      f"device-got-back {granule} after-sync reserved 0 back 1 again 1")
    assert out[8:] == ["set-access-nothing-mapped 1", "unmap-nothing-mapped 0", "unmap-not-reserved 1"]
