/* meminfo-null: cuMemGetInfo_v2 with a NULL output, the way real clients call it.
 *
 * The driver writes the outputs it is given: OptiX calls cuMemGetInfo_v2(NULL, &total) while it
 * initialises (HAMi-core#321, #333: Isaac Sim, Vulkan/OptiX renderers) and llama.cpp called
 * cudaMemGetInfo(&free, NULL) (llama.cpp#20499), both fine without HAMi. HAMi-core's hook (at
 * 8f3a89c and at 54b1305) writes and reads *free and *total unconditionally, on both of its
 * branches (no limit: free = total - usage; a limit: both clamped to it): SIGSEGV.
 *
 * Every scenario compares the NULL-output calls with a full call made just before (what the hook
 * itself reports), so a fix that only stops the crash but returns other numbers still fails.
 * Inputs come from the declared parameters (reproducer.toml [params]; the runner sets them):
 * CUDA_DEVICE_MEMORY_LIMIT (bytes; 0 = no limit) and LP_PARAM_BLOCK (bytes allocated between
 * two queries).
 *
 * Usage: meminfo_null <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lp_report.h"

static int g_ok = 1;
static const char *g_scenario;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

/* A declared parameter: lucepatch always sets it (reproducer.toml [params]); no second default here */
static unsigned long long param_bytes(const char *env) {
    const char *v = getenv(env);
    char *end = NULL;
    unsigned long long n = v && *v ? strtoull(v, &end, 10) : 0;
    if (!v || !*v || *end) {
        fprintf(stderr, "meminfo_null: %s=%s is not a byte count (a declared parameter: lucepatch sets it)\n", env,
                v ? v : "(unset)");
        exit(2);
    }
    return n;
}

/* The reference: both outputs, as every version reports them */
static void full(size_t *f, size_t *t) {
    *f = *t = 0;
    check("cuMemGetInfo_v2(&free, &total)", CUDA_SUCCESS, cuMemGetInfo_v2(f, t));
}

/* cuMemGetInfo_v2(&free, NULL) agrees with the full call before and after `block` bytes */
static void free_only(unsigned long long block) {
    size_t f0, t0, f = 0;
    full(&f0, &t0);
    check("cuMemGetInfo_v2(&free, NULL)", CUDA_SUCCESS, cuMemGetInfo_v2(&f, NULL));
    check_eq("free from (&free, NULL) equals the full call's", (long long)f0, (long long)f);
    CUdeviceptr p = 0;
    check("cuMemAlloc of the block", CUDA_SUCCESS, cuMemAlloc(&p, block));
    f = 0;
    check("cuMemGetInfo_v2(&free, NULL) after the allocation", CUDA_SUCCESS, cuMemGetInfo_v2(&f, NULL));
    check_eq("free after the allocation is down by the block", (long long)(f0 - block), (long long)f);
    if (p)
        check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

/* cuMemGetInfo_v2(NULL, &total) agrees with the full call (OptiX's call) */
static void total_only(void) {
    size_t f0, t0, t = 0;
    full(&f0, &t0);
    check("cuMemGetInfo_v2(NULL, &total)", CUDA_SUCCESS, cuMemGetInfo_v2(NULL, &t));
    check_eq("total from (NULL, &total) equals the full call's", (long long)t0, (long long)t);
}

static void scenario_control(void) {
    unsigned long long limit = param_bytes("CUDA_DEVICE_MEMORY_LIMIT"), block = param_bytes("LP_PARAM_BLOCK");
    size_t f0, t0, f1, t1;
    full(&f0, &t0);
    check_eq("total is the limit", (long long)limit, (long long)t0);
    CUdeviceptr p = 0;
    check("cuMemAlloc of the block", CUDA_SUCCESS, cuMemAlloc(&p, block));
    full(&f1, &t1);
    check_eq("free is down by the block", (long long)(f0 - block), (long long)f1);
    check_eq("total is unchanged", (long long)t0, (long long)t1);
    if (p)
        check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

static void scenario_null_total(void) { free_only(param_bytes("LP_PARAM_BLOCK")); }

static void scenario_null_free(void) { total_only(); }

/* Neither output: nothing to write; the call must come back with a documented CUresult (the driver's
 * own answer to (NULL, NULL) is recorded by the driver-semantics probe `queries`) */
static void scenario_null_both(void) {
    CUresult r = cuMemGetInfo_v2(NULL, NULL);
    lp_report_value("result", (long long)r);
    char got[32];
    snprintf(got, sizeof got, "%d", (int)r);
    if (!lp_report_check("cuMemGetInfo_v2(NULL, NULL) returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE",
                         "0 or 1", got, r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE))
        g_ok = 0;
}

/* The clamp's two sides: usage exactly at the limit (free 0, the allocation that hits it works) and
 * one byte over (refused, free stays 0) */
static void scenario_null_total_at_limit(void) {
    size_t f0, t0, f = 1;
    full(&f0, &t0);
    CUdeviceptr p = 0, q = 0;
    check("cuMemAlloc of exactly what is free", CUDA_SUCCESS, cuMemAlloc(&p, f0));
    check("cuMemGetInfo_v2(&free, NULL) at the limit", CUDA_SUCCESS, cuMemGetInfo_v2(&f, NULL));
    check_eq("free at the limit is 0", 0, (long long)f);
    check("cuMemAlloc of one byte over the limit", CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&q, 1));
    f = 1;
    check("cuMemGetInfo_v2(&free, NULL) after the refusal", CUDA_SUCCESS, cuMemGetInfo_v2(&f, NULL));
    check_eq("free stays 0", 0, (long long)f);
    if (q)
        cuMemFree(q);
    if (p)
        check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"null-total", scenario_null_total},
    {"null-free", scenario_null_free},
    {"null-both", scenario_null_both},
    {"null-total-unlimited", scenario_null_total},
    {"null-free-unlimited", scenario_null_free},
    {"null-free-limit-above-device", scenario_null_free},
    {"null-total-at-limit", scenario_null_total_at_limit},
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
    CUdevice dev;
    CUcontext ctx;
    if (lp_setup_primary("meminfo_null", &count, &dev, &ctx))
        return 2;
    run();
    cuDevicePrimaryCtxRelease(dev);
    lp_report_done(g_scenario, g_ok);
    return g_ok ? 0 : 1;
}
