"""The simulated driver's newer models against their documented semantics (no GPU needed):
CUDA_VISIBLE_DEVICES (CUDA enumerates the listed GPUs in order, NVML ignores the variable),
cuMemGetInfo_v2 with NULL outputs, managed memory and the pointer-attribute queries, and frees of
pointers no allocation holds. The H200 trace of the `queries` probe checks them against hardware
once recorded (tests/test_traces.py); these tests pin down what the model itself does."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from lucepatch.verify import trace
from lucepatch.verify.fakecuda import build_fakecuda
from lucepatch.verify.trace.record_all import compile_semantics

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
