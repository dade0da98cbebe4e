/* async-accounting: what a stream-ordered allocation is charged, and that its free gives it back.
 *
 * HAMi-core charges cuMemAllocAsync through add_chunk_async().  At 54b1305 (HAMi v2.5.1) it
 * charges the growth of the default pool's CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH over a process-wide
 * device_allocasync->limit, then raises the limit to that high-water mark; remove_chunk_async()
 * uncharges the allocation's size and never lowers the limit.  A pool reserves in its own granule
 * (on an H200 a 16 MiB allocation made the default pool reserve 32 MiB), so the first allocation
 * charges the reservation, and later ones charge nothing while their frees still uncharge their
 * size: the process's usage drifts away from what it holds.  Upstream charges min(growth, size),
 * records it in the entry and lowers the limit on free (740f9ef, 111bf4d).
 *
 * Usage: async_accounting <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "lp_report.h"

#define BYTES (16ll << 20)
#define CYCLES 4

static int g_ok = 1;
static CUstream g_stream;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

/* cuMemAlloc/cuMemFree: charged by the allocation's size on every version */
static void scenario_control(void) {
    CUdeviceptr p = 0;
    long long before = lp_used_bytes();
    lp_report_value("used_before", before);
    check("cuMemAlloc 16 MiB", CUDA_SUCCESS, cuMemAlloc(&p, BYTES));
    check_eq("usage after cuMemAlloc is before + 16 MiB", before + BYTES, lp_used_bytes());
    if (p)
        check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
    check_eq("usage after cuMemFree is before", before, lp_used_bytes());
}

/* One stream-ordered cycle; `tag` names the cycle in the checks */
static void async_cycle(const char *tag, long long before) {
    char name[128];
    CUdeviceptr p = 0;
    snprintf(name, sizeof name, "%s: cuMemAllocAsync 16 MiB", tag);
    check(name, CUDA_SUCCESS, cuMemAllocAsync(&p, BYTES, g_stream));
    long long during = lp_used_bytes();
    snprintf(name, sizeof name, "%s: usage after cuMemAllocAsync is before + 16 MiB", tag);
    check_eq(name, before + BYTES, during);
    if (p) {
        snprintf(name, sizeof name, "%s: cuMemFreeAsync", tag);
        check(name, CUDA_SUCCESS, cuMemFreeAsync(p, g_stream));
    }
    snprintf(name, sizeof name, "%s: cuStreamSynchronize", tag);
    check(name, CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    snprintf(name, sizeof name, "%s: usage after cuMemFreeAsync is before", tag);
    check_eq(name, before, lp_used_bytes());
}

static void scenario_async_free(void) {
    long long before = lp_used_bytes();
    lp_report_value("used_before", before);
    async_cycle("cycle 1", before);
    lp_report_value("used_after", lp_used_bytes());
}

static void scenario_async_cycles(void) {
    char tag[16];
    long long before = lp_used_bytes();
    lp_report_value("used_before", before);
    for (int i = 1; i <= CYCLES; i++) {
        snprintf(tag, sizeof tag, "cycle %d", i);
        async_cycle(tag, before);
    }
    lp_report_value("used_after", lp_used_bytes());
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"async-free-releases-the-charge", scenario_async_free},
    {"async-cycles-do-not-drift", scenario_async_cycles},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run;
    if (!run) {
        fprintf(stderr, "usage: %s control|async-free-releases-the-charge|async-cycles-do-not-drift\n", argv[0]);
        return 2;
    }
    lp_bind_now(argv);
    int count = 0;
    CUdevice dev;
    CUcontext ctx;
    if (lp_setup_primary("async_accounting", &count, &dev, &ctx) ||
        cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return 2;
    run();
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(dev);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
