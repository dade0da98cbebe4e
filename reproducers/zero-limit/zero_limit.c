/* zero-limit: CUDA_DEVICE_MEMORY_LIMIT_<i>=0m must mean "no limit".
 *
 * Olares' device plugin sets CUDA_DEVICE_MEMORY_LIMIT_0=0m for every pod that requests no
 * nvidia.com/gpumem.  HAMi-core's allocator already reads a 0 limit as "unlimited", but at the
 * pin cuDeviceTotalMem_v2 reports the limit (0 bytes: "Total VRAM: 0 MiB", callers that size
 * their pools from it allocate nothing), and an explicit per-device 0 cannot override the
 * CUDA_DEVICE_MEMORY_LIMIT fallback.  The limits come from each scenario's environment.
 *
 * Usage: zero_limit <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "lp_report.h"

#define GIB (1ull << 30)

static int g_ok = 1;
static CUdevice g_dev;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_true(const char *name, const char *expected, long long got, int ok) {
    char b[32];
    snprintf(b, sizeof b, "%lld", got);
    if (!lp_report_check(name, expected, b, ok))
        g_ok = 0;
}

static void alloc_free(const char *name, size_t bytes) {
    CUdeviceptr p = 0;
    check(name, CUDA_SUCCESS, cuMemAlloc(&p, bytes));
    if (p)
        check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

/* CUDA_DEVICE_MEMORY_LIMIT_0=1g: the limit is the device size every version reports */
static void scenario_control(void) {
    size_t total = 0, info_free = 0, info_total = 0;
    check("cuDeviceTotalMem", CUDA_SUCCESS, cuDeviceTotalMem(&total, g_dev));
    check_true("cuDeviceTotalMem reports the 1g limit", "1073741824", (long long)total, total == GIB);
    check("cuMemGetInfo", CUDA_SUCCESS, cuMemGetInfo(&info_free, &info_total));
    check_true("cuMemGetInfo total is the 1g limit", "1073741824", (long long)info_total, info_total == GIB);
    alloc_free("cuMemAlloc 64 MiB under a 1g limit", 64u << 20);
}

/* CUDA_DEVICE_MEMORY_LIMIT_0=0m: no limit, so the device's real size */
static void scenario_zero_means_unlimited(void) {
    size_t total = 0, info_free = 0, info_total = 0;
    check("cuDeviceTotalMem", CUDA_SUCCESS, cuDeviceTotalMem(&total, g_dev));
    check("cuMemGetInfo", CUDA_SUCCESS, cuMemGetInfo(&info_free, &info_total));
    check_true("cuDeviceTotalMem with a 0m limit is the device size, not 0", "> 0", (long long)total, total > 0);
    char want[32];
    snprintf(want, sizeof want, "%zu", info_total);
    check_true("cuDeviceTotalMem agrees with cuMemGetInfo's total", want, (long long)total,
               total == info_total && total > 0);
    alloc_free("cuMemAlloc 64 MiB with no limit", 64u << 20);
}

/* CUDA_DEVICE_MEMORY_LIMIT=1g, CUDA_DEVICE_MEMORY_LIMIT_0=0m: the per-device 0 wins */
static void scenario_zero_overrides_fallback(void) {
    size_t total = 0;
    check("cuDeviceTotalMem", CUDA_SUCCESS, cuDeviceTotalMem(&total, g_dev));
    check_true("cuDeviceTotalMem is the device size, not the 1g fallback", "> 1073741824", (long long)total,
               total > GIB);
    alloc_free("cuMemAlloc 2 GiB (over the 1g fallback, device 0 unlimited)", 2 * GIB);
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"zero-means-unlimited", scenario_zero_means_unlimited},
    {"zero-overrides-fallback", scenario_zero_overrides_fallback},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run;
    if (!run) {
        fprintf(stderr, "usage: %s control|zero-means-unlimited|zero-overrides-fallback\n", argv[0]);
        return 2;
    }
    lp_bind_now(argv);
    int count = 0;
    CUcontext ctx;
    if (lp_setup_primary("zero_limit", &count, &g_dev, &ctx))
        return 2;
    run();
    cuDevicePrimaryCtxRelease(g_dev);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
