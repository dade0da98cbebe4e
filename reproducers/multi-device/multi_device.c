/* multi-device: a context current on GPU 0, a stream on GPU 1.
 *
 * One thread driving several GPUs (NCCL, tensor-parallel loaders, vLLM workers with a stray
 * current context) issues stream-ordered calls on a stream of *another* device than the
 * current context's.  The driver allocates on the stream's device.  HAMi-core at the pin asks
 * cuCtxGetDevice, i.e. charges the current context's device on cuMemAllocAsync and uncharges
 * the current device (not the allocation's) on cuMemFreeAsync: accounting drifts on both GPUs.
 * Usage is read back through the interposer's cuMemGetInfo_v2 on each device.
 *
 * Needs 2 CUDA devices; with fewer every scenario reports `skip` (not a pass, not a failure).
 * Usage: multi_device <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "lp_report.h"

#define ALLOC_BYTES (8u << 20)

static int g_ok = 1;
static CUcontext g_ctx[2];
static CUstream g_stream[2];

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

/* run `stmt` with device d's context pushed on top of device 0's */
#define WITH_CTX(d, stmt)                        \
    do {                                         \
        CUcontext _popped;                       \
        cuCtxPushCurrent(g_ctx[d]);              \
        stmt;                                    \
        cuCtxPopCurrent(&_popped);               \
    } while (0)

/* every version: each stream used with its own device's context current */
static void scenario_control(void) {
    for (int d = 0; d < 2; d++) {
        long long b0 = lp_used_bytes_on(0), b1 = lp_used_bytes_on(1);
        CUdeviceptr p = 0;
        char name[128];
        snprintf(name, sizeof name, "cuMemAllocAsync on device %d's stream, its context current", d);
        WITH_CTX(d, check(name, CUDA_SUCCESS, cuMemAllocAsync(&p, ALLOC_BYTES, g_stream[d])));
        check_eq("usage on device 0 after the allocation", b0 + (d == 0 ? ALLOC_BYTES : 0), lp_used_bytes_on(0));
        check_eq("usage on device 1 after the allocation", b1 + (d == 1 ? ALLOC_BYTES : 0), lp_used_bytes_on(1));
        snprintf(name, sizeof name, "cuMemFreeAsync on device %d's stream, its context current", d);
        if (p)
            WITH_CTX(d, check(name, CUDA_SUCCESS, cuMemFreeAsync(p, g_stream[d])));
        WITH_CTX(d, check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream[d])));
        check_eq("usage on device 0 after the free", b0, lp_used_bytes_on(0));
        check_eq("usage on device 1 after the free", b1, lp_used_bytes_on(1));
    }
}

/* allocate on device 1's stream while device 0's context is current (free with device 1's) */
static void scenario_stream_device(void) {
    long long b0 = lp_used_bytes_on(0), b1 = lp_used_bytes_on(1);
    CUdeviceptr p = 0;
    check("cuMemAllocAsync on device 1's stream, device 0's context current", CUDA_SUCCESS,
          cuMemAllocAsync(&p, ALLOC_BYTES, g_stream[1]));
    check_eq("usage on device 1 grows by the allocation (the stream's device)", b1 + ALLOC_BYTES, lp_used_bytes_on(1));
    check_eq("usage on device 0 is unchanged", b0, lp_used_bytes_on(0));
    if (p)
        WITH_CTX(1, check("cuMemFreeAsync on device 1's stream, its context current", CUDA_SUCCESS,
                          cuMemFreeAsync(p, g_stream[1])));
    WITH_CTX(1, check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream[1])));
    check_eq("usage on device 1 after the free is back", b1, lp_used_bytes_on(1));
    check_eq("usage on device 0 after the free is unchanged", b0, lp_used_bytes_on(0));
}

/* allocate with device 1's context current (right at every version), free it while device
 * 0's context is current: the free must uncharge device 1, where the memory was */
static void scenario_free_recorded_device(void) {
    long long b0 = lp_used_bytes_on(0), b1 = lp_used_bytes_on(1);
    CUdeviceptr p = 0;
    WITH_CTX(1, check("cuMemAllocAsync on device 1's stream, its context current", CUDA_SUCCESS,
                      cuMemAllocAsync(&p, ALLOC_BYTES, g_stream[1])));
    check_eq("usage on device 1 grows by the allocation", b1 + ALLOC_BYTES, lp_used_bytes_on(1));
    if (p)
        check("cuMemFreeAsync on device 1's stream, device 0's context current", CUDA_SUCCESS,
              cuMemFreeAsync(p, g_stream[1]));
    WITH_CTX(1, check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream[1])));
    check_eq("usage on device 1 after the free is back", b1, lp_used_bytes_on(1));
    check_eq("usage on device 0 after the free is unchanged", b0, lp_used_bytes_on(0));
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"stream-device", scenario_stream_device},
    {"free-recorded-device", scenario_free_recorded_device},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run;
    if (!run) {
        fprintf(stderr, "usage: %s control|stream-device|free-recorded-device\n", argv[0]);
        return 2;
    }
    lp_bind_now(argv);
    int count = 0;
    CUdevice dev0, dev1;
    if (lp_setup_primary("multi_device", &count, &dev0, &g_ctx[0]))
        return 2;
    if (count < 2) {
        char why[96];
        snprintf(why, sizeof why, "needs 2 CUDA devices, this machine has %d", count);
        lp_skip(argv[1], why);
    }
    CUcontext popped;
    if (cuDeviceGet(&dev1, 1) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&g_ctx[1], dev1) != CUDA_SUCCESS ||
        cuStreamCreate(&g_stream[0], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cuCtxPushCurrent(g_ctx[1]) != CUDA_SUCCESS ||
        cuStreamCreate(&g_stream[1], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cuCtxPopCurrent(&popped) != CUDA_SUCCESS) {
        fprintf(stderr, "multi_device: cannot set up a context and a stream on each of 2 devices\n");
        return 2;
    }
    run();
    cuStreamDestroy(g_stream[0]);
    WITH_CTX(1, cuStreamDestroy(g_stream[1]));
    cuDevicePrimaryCtxRelease(dev1);
    cuDevicePrimaryCtxRelease(dev0);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
