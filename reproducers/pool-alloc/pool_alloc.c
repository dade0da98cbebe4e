/* pool-alloc: allocations from explicit memory pools (cuMemPoolCreate + cuMemAllocFromPoolAsync).
 *
 * The pattern behind cudaMallocFromPoolAsync users: PyTorch's and RAPIDS' pool-backed allocators,
 * CUDA graphs' memory nodes, NCCL and cuBLASLt workspaces.  The driver serves a pool allocation
 * from the *pool's* device ("The specified memory pool may be from a device different than that
 * of the specified hStream", CUDA Driver API) and, on an explicit stream, needs no current
 * context on the calling thread.
 *
 * HAMi-core at the pin forwards cuMemAllocFromPoolAsync untracked (src/cuda/memory.c): the
 * allocation is charged to no device, so a pod can allocate past its memory limit, and
 * cuMemFreeAsync of such a pointer finds no list entry and returns -1 without freeing.  Upstream's
 * later tracking (#217) takes the device from an unchecked cuCtxGetDevice: garbage on a thread
 * without a context, the current context's device (not the pool's) otherwise.
 *
 * Usage read back through the interposer's cuMemGetInfo_v2 (HAMi's view: the pod's charges).
 * Usage: pool_alloc <scenario>    exit 0 = passed, 1 = a check failed, 2 = setup/usage error
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lp_report.h"

/* Well under the 1g limit, and a multiple of the pool's reservation granularity: the bare
 * driver's own cuMemGetInfo then moves by exactly the allocation too (with 8 MiB it does not on an
 * H200, tests/fakecuda/traces/known-differences.toml), so the traces compare exit codes as well. */
#define POOL_BYTES (64ull << 20)
#define ASYNC_BYTES POOL_BYTES
#define OVER_LIMIT_BYTES (2ull << 30) /* twice the 1g limit the scenarios run with */

static CUcontext g_ctx[2];
static CUstream g_stream; /* device 0's, created by main */
static CUmemoryPool g_pool;
static CUdeviceptr g_ptr;
static int g_ok = 1;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

static CUresult make_pool(CUmemoryPool *pool, int dev) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    return cuMemPoolCreate(pool, &props);
}

static int run_helper(void *(*body)(void *)) {
    pthread_t t;
    if (pthread_create(&t, NULL, body, NULL) != 0)
        return 0;
    pthread_join(t, NULL);
    return 1;
}

/* ---- helper-thread bodies: these threads never make a context current ------------------- */

static void *helper_alloc(void *arg) {
    (void)arg;
    lp_poison_stack();
    check("helper: cuMemAllocFromPoolAsync on main's stream", CUDA_SUCCESS,
          cuMemAllocFromPoolAsync(&g_ptr, POOL_BYTES, g_pool, g_stream));
    return NULL;
}

static void *helper_free(void *arg) {
    (void)arg;
    lp_poison_stack();
    check("helper: cuMemFreeAsync of the pool allocation", CUDA_SUCCESS, cuMemFreeAsync(g_ptr, g_stream));
    return NULL;
}

static void *helper_default_pool(void *arg) {
    (void)arg;
    check("helper: cuDeviceGetDefaultMemPool(device 0)", CUDA_SUCCESS, cuDeviceGetDefaultMemPool(&g_pool, 0));
    return helper_alloc(NULL);
}

/* ---- scenarios ------------------------------------------------------------------------------ */

/* every version: pool create/destroy work, and a default-pool cuMemAllocAsync on the main
 * thread is charged and released (HAMi-core tracks that path at every version) */
static void scenario_control(void) {
    CUmemoryPool pool;
    CUdeviceptr p = 0;
    check("main: cuMemPoolCreate on device 0", CUDA_SUCCESS, make_pool(&pool, 0));
    long long before = lp_used_bytes();
    check("main: cuMemAllocAsync", CUDA_SUCCESS, cuMemAllocAsync(&p, ASYNC_BYTES, g_stream));
    check_eq("usage grows by the cuMemAllocAsync allocation", before + (long long)ASYNC_BYTES, lp_used_bytes());
    if (p)
        check("main: cuMemFreeAsync", CUDA_SUCCESS, cuMemFreeAsync(p, g_stream));
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage after the free is back", before, lp_used_bytes());
    check("main: cuMemPoolDestroy", CUDA_SUCCESS, cuMemPoolDestroy(pool));
}

/* main thread, context current, pool on device 0: charged on allocation, released on free */
static void scenario_pool_charged(void) {
    check("main: cuMemPoolCreate on device 0", CUDA_SUCCESS, make_pool(&g_pool, 0));
    long long before = lp_used_bytes();
    check("main: cuMemAllocFromPoolAsync", CUDA_SUCCESS, cuMemAllocFromPoolAsync(&g_ptr, POOL_BYTES, g_pool, g_stream));
    check_eq("usage grows by the pool allocation", before + (long long)POOL_BYTES, lp_used_bytes());
    if (g_ptr)
        check("main: cuMemFreeAsync of the pool allocation", CUDA_SUCCESS, cuMemFreeAsync(g_ptr, g_stream));
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage after the free is back", before, lp_used_bytes());
    check("main: cuMemPoolDestroy", CUDA_SUCCESS, cuMemPoolDestroy(g_pool));
}

/* the memory limit holds for pool allocations: 2 GiB under a 1 GiB limit is refused */
static void scenario_over_limit(void) {
    check("main: cuMemPoolCreate on device 0", CUDA_SUCCESS, make_pool(&g_pool, 0));
    long long before = lp_used_bytes();
    CUresult r = cuMemAllocFromPoolAsync(&g_ptr, OVER_LIMIT_BYTES, g_pool, g_stream);
    check("main: cuMemAllocFromPoolAsync past the limit", CUDA_ERROR_OUT_OF_MEMORY, r);
    check_eq("usage is unchanged", before, lp_used_bytes());
    if (r == CUDA_SUCCESS && g_ptr)
        cuMemFreeAsync(g_ptr, g_stream); /* the bypass: give the memory back (result not judged) */
    cuStreamSynchronize(g_stream);
    cuMemPoolDestroy(g_pool);
}

/* a thread without a context allocates from the pool on main's stream and frees it again */
static void scenario_ctxless_pool_alloc(void) {
    check("main: cuMemPoolCreate on device 0", CUDA_SUCCESS, make_pool(&g_pool, 0));
    long long before = lp_used_bytes();
    if (!run_helper(helper_alloc))
        g_ok = 0;
    check_eq("usage grows by the helper's pool allocation", before + (long long)POOL_BYTES, lp_used_bytes());
    if (g_ptr && !run_helper(helper_free))
        g_ok = 0;
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage after the helper's free is back", before, lp_used_bytes());
    check("main: cuMemPoolDestroy", CUDA_SUCCESS, cuMemPoolDestroy(g_pool));
}

/* a thread without a context allocates from device 0's *default* pool through the pool API */
static void scenario_default_pool(void) {
    long long before = lp_used_bytes();
    if (!run_helper(helper_default_pool))
        g_ok = 0;
    check_eq("usage grows by the default-pool allocation", before + (long long)POOL_BYTES, lp_used_bytes());
    if (g_ptr && !run_helper(helper_free))
        g_ok = 0;
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage after the free is back", before, lp_used_bytes());
}

/* context and stream on device 0, pool on device 1: the memory is device 1's */
static void scenario_cross_device(void) {
    long long b0 = lp_used_bytes_on(0), b1 = lp_used_bytes_on(1);
    check("main: cuMemPoolCreate on device 1", CUDA_SUCCESS, make_pool(&g_pool, 1));
    check("main: cuMemAllocFromPoolAsync from device 1's pool on device 0's stream", CUDA_SUCCESS,
          cuMemAllocFromPoolAsync(&g_ptr, POOL_BYTES, g_pool, g_stream));
    check_eq("usage on device 1 grows by the allocation (the pool's device)", b1 + (long long)POOL_BYTES,
             lp_used_bytes_on(1));
    check_eq("usage on device 0 is unchanged", b0, lp_used_bytes_on(0));
    if (g_ptr)
        check("main: cuMemFreeAsync on device 0's stream", CUDA_SUCCESS, cuMemFreeAsync(g_ptr, g_stream));
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage on device 1 after the free is back", b1, lp_used_bytes_on(1));
    check_eq("usage on device 0 after the free is unchanged", b0, lp_used_bytes_on(0));
    check("main: cuMemPoolDestroy", CUDA_SUCCESS, cuMemPoolDestroy(g_pool));
}

static const struct {
    const char *name;
    void (*run)(void);
    int devices;
} scenarios[] = {
    {"control", scenario_control, 1},
    {"pool-charged", scenario_pool_charged, 1},
    {"over-limit", scenario_over_limit, 1},
    {"ctxless-pool-alloc", scenario_ctxless_pool_alloc, 1},
    {"default-pool", scenario_default_pool, 1},
    {"cross-device", scenario_cross_device, 2},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    int need = 1;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run, need = scenarios[i].devices;
    if (!run) {
        fprintf(stderr, "usage: %s control|pool-charged|over-limit|ctxless-pool-alloc|default-pool|cross-device\n",
                argv[0]);
        return 2;
    }
    lp_bind_now(argv);
    int count = 0;
    CUdevice dev0;
    if (lp_setup_primary("pool_alloc", &count, &dev0, &g_ctx[0]))
        return 2;
    if (count < need) {
        char why[96];
        snprintf(why, sizeof why, "needs %d CUDA devices, this machine has %d", need, count);
        lp_skip(argv[1], why);
    }
    if (cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        fprintf(stderr, "pool_alloc: cuStreamCreate failed\n");
        return 2;
    }
    run();
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(dev0);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
