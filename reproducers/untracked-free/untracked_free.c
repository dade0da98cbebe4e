/* untracked-free: frees of memory HAMi-core's allocator list does not hold go to the driver.
 *
 * HAMi-core's cuMemFree_v2 looks the pointer up in its list of cuMemAlloc allocations
 * (free_raw -> remove_chunk) and returns -1 -- not a CUresult -- when it is not there, without
 * calling the driver: the memory is never freed. Its cuMemFreeAsync does the same for pointers
 * outside its stream-ordered lists. Pointers the list does not hold are legal to free: Vulkan/OptiX
 * interop buffers (HAMi-core#321), stream-ordered allocations freed synchronously (the CUDA
 * Programming Guide's stream-ordered allocator allows cuMemFree on them), cuMemAllocFromPoolAsync
 * memory, and pointers the driver itself must reject with its own error.
 *
 * Each scenario frees through HAMi and checks the driver's answer (CUDA_SUCCESS, or its own error
 * for a pointer it does not know; never HAMi's -1), that the driver no longer knows a freed
 * cuMemAlloc allocation (its pointer attributes), and HAMi's accounted usage.
 *
 * A stream-ordered allocation freed with cuMemFree is not checked through its pool's
 * USED_MEM_CURRENT: on the H200 (driver 580.159.04) the pool keeps counting the block after a
 * successful cuMemFree although its memory is back on the device (cuMemGetInfo_v2's free returns to
 * its value before the allocation: tests/fakecuda/traces/untracked-free.sync-free-*.h200.jsonl), so
 * that count cannot tell a forwarded free from one HAMi swallowed. It is reported as a value.
 * Inputs: LP_PARAM_BLOCK (bytes per allocation; reproducer.toml [params]).
 *
 * Usage: untracked_free <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lp_report.h"

static int g_ok = 1;
static const char *g_scenario;
static CUdevice g_dev;
static CUstream g_stream;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

/* A declared parameter: lucepatch always sets it (reproducer.toml [params]) */
static size_t param_bytes(const char *env) {
    const char *v = getenv(env);
    char *end = NULL;
    unsigned long long n = v && *v ? strtoull(v, &end, 10) : 0;
    if (!v || !*v || *end || n == 0) {
        fprintf(stderr, "untracked_free: %s=%s is not a byte count (a declared parameter: lucepatch sets it)\n", env,
                v ? v : "(unset)");
        exit(2);
    }
    return (size_t)n;
}

/* Bytes of the device's default pool in use by the application (the driver's own count) */
static long long pool_used(void) {
    CUmemoryPool pool;
    cuuint64_t v = 0;
    if (cuDeviceGetDefaultMemPool(&pool, g_dev) != CUDA_SUCCESS ||
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v) != CUDA_SUCCESS)
        return -1;
    return (long long)v;
}

/* A pointer the driver knows: CUDA_SUCCESS from cuPointerGetAttribute (freed memory: an error) */
static CUresult pointer_known(CUdeviceptr p) {
    unsigned int type = 0;
    return cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
}

static void scenario_control(void) {
    size_t block = param_bytes("LP_PARAM_BLOCK");
    long long before = lp_used_bytes();
    CUdeviceptr p = 0;
    check("cuMemAlloc", CUDA_SUCCESS, cuMemAlloc(&p, block));
    check_eq("usage grows by the block", before + (long long)block, lp_used_bytes());
    check("cuMemFree of a tracked allocation", CUDA_SUCCESS, cuMemFree(p));
    check_eq("usage is back", before, lp_used_bytes());
    check("the driver no longer knows the pointer", CUDA_ERROR_INVALID_VALUE, pointer_known(p));
}

/* cuMemAllocAsync memory freed with cuMemFree: freed by the driver, uncharged by HAMi */
static void scenario_sync_free_async_alloc(void) {
    size_t block = param_bytes("LP_PARAM_BLOCK");
    long long before = lp_used_bytes(), used0 = pool_used();
    CUdeviceptr p = 0;
    check("cuMemAllocAsync", CUDA_SUCCESS, cuMemAllocAsync(&p, block, g_stream));
    check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    lp_report_value("accounted_after_alloc", lp_used_bytes() - before);
    check("cuMemFree of a stream-ordered allocation: the driver's answer", CUDA_SUCCESS, cuMemFree(p));
    /* the H200 keeps counting a block freed this way (see the top): recorded, not judged */
    lp_report_value("pool_used_after_free", pool_used() - used0);
    check_eq("HAMi's usage is back", before, lp_used_bytes());
}

/* cuMemAllocFromPoolAsync memory freed with cuMemFree */
static void scenario_sync_free_pool_alloc(void) {
    size_t block = param_bytes("LP_PARAM_BLOCK");
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = g_dev;
    CUmemoryPool pool;
    check("cuMemPoolCreate", CUDA_SUCCESS, cuMemPoolCreate(&pool, &props));
    long long before = lp_used_bytes();
    CUdeviceptr p = 0;
    check("cuMemAllocFromPoolAsync", CUDA_SUCCESS, cuMemAllocFromPoolAsync(&p, block, pool, g_stream));
    check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    lp_report_value("accounted_after_alloc", lp_used_bytes() - before);
    check("cuMemFree of a pool allocation: the driver's answer", CUDA_SUCCESS, cuMemFree(p));
    cuuint64_t used = 0;
    check("cuMemPoolGetAttribute(USED_MEM_CURRENT)", CUDA_SUCCESS,
          cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    /* the H200 keeps counting a block freed this way (see the top): recorded, not judged */
    lp_report_value("pool_used_after_free", (long long)used);
    check_eq("HAMi's usage is back", before, lp_used_bytes());
    check("cuMemPoolDestroy", CUDA_SUCCESS, cuMemPoolDestroy(pool));
}

/* A pointer no allocation returned, with HAMi's list empty and with it holding one: the driver's
 * own error (CUDA_ERROR_INVALID_VALUE), not -1; nothing uncharged */
static void free_unknown(int list_empty) {
    size_t block = param_bytes("LP_PARAM_BLOCK");
    CUdeviceptr keep = 0, gone = 0;
    if (!list_empty)
        check("cuMemAlloc (kept)", CUDA_SUCCESS, cuMemAlloc(&keep, block));
    /* an address that was an allocation and is no more: the driver has nothing there */
    check("cuMemAllocAsync", CUDA_SUCCESS, cuMemAllocAsync(&gone, block, g_stream));
    check("cuMemFreeAsync", CUDA_SUCCESS, cuMemFreeAsync(gone, g_stream));
    check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    long long before = lp_used_bytes();
    check("cuMemFree of a pointer no live allocation holds", CUDA_ERROR_INVALID_VALUE, cuMemFree(gone));
    check_eq("HAMi's usage is unchanged", before, lp_used_bytes());
    if (keep) {
        check("cuMemFree (kept)", CUDA_SUCCESS, cuMemFree(keep));
        check_eq("the kept allocation is uncharged", before - (long long)block, lp_used_bytes());
    }
}

static void scenario_free_unknown_empty(void) { free_unknown(1); }
static void scenario_free_unknown_tracked(void) { free_unknown(0); }

/* cuMemFreeAsync of memory from cuMemAlloc: legal (stream-ordered free of any device allocation);
 * freed by the driver and uncharged */
static void scenario_async_free_sync_alloc(void) {
    size_t block = param_bytes("LP_PARAM_BLOCK");
    long long before = lp_used_bytes();
    CUdeviceptr p = 0;
    check("cuMemAlloc", CUDA_SUCCESS, cuMemAlloc(&p, block));
    check("cuMemFreeAsync of a cuMemAlloc allocation", CUDA_SUCCESS, cuMemFreeAsync(p, g_stream));
    check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check("the driver no longer knows the pointer", CUDA_ERROR_INVALID_VALUE, pointer_known(p));
    check_eq("HAMi's usage is back", before, lp_used_bytes());
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"sync-free-async-alloc", scenario_sync_free_async_alloc},
    {"sync-free-pool-alloc", scenario_sync_free_pool_alloc},
    {"free-unknown-empty-list", scenario_free_unknown_empty},
    {"free-unknown-tracked-list", scenario_free_unknown_tracked},
    {"async-free-sync-alloc", scenario_async_free_sync_alloc},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run;
    if (!run) {
        fprintf(stderr, "usage: %s <scenario> (see reproducer.toml)\n", argv[0]);
        return 2;
    }
    g_scenario = argv[1];
    lp_bind_now(argv);
    int count;
    CUcontext ctx;
    if (lp_setup_primary("untracked_free", &count, &g_dev, &ctx))
        return 2;
    if (cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        fprintf(stderr, "untracked_free: cuStreamCreate failed\n");
        return 2;
    }
    run();
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(g_dev);
    lp_report_done(g_scenario, g_ok);
    return g_ok ? 0 : 1;
}
