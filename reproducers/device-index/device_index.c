/* device-index: the limit HAMi-core reports is the limit it enforces, when CUDA and NVML number
 * the GPUs differently.
 *
 * CUDA_VISIBLE_DEVICES selects and orders the GPUs CUDA enumerates; NVML ignores it. HAMi-core
 * maps a CUDA ordinal to an NVML index (cuda_to_nvml_map, from CUDA_VISIBLE_DEVICES) and charges
 * usage to used[nvml index] (add_gpu_device_memory_usage), but at 8f3a89c oom_check reads
 * used[cuda ordinal] and limit[cuda ordinal] while cuMemGetInfo_v2 reads used[] and limit[] at the
 * NVML index; at 54b1305 both read used[cuda ordinal]. With CUDA_VISIBLE_DEVICES=1,0 the charge
 * lands where the check does not look: the limit is never enforced (HAMi-core#319), or a
 * per-device limit reported by cuMemGetInfo is not the one an allocation is refused at.
 *
 * Each scenario, on one CUDA device: the free memory cuMemGetInfo_v2 reports can be allocated
 * exactly (the limit hit), then one byte more is CUDA_ERROR_OUT_OF_MEMORY, and the reported free
 * follows. HAMi-core resets its map to the identity in nvml_preInit, which its own host-pid probe
 * triggers at cuInit (nvmlInit) unless the program initialised NVML first, as vLLM and other
 * pynvml users do: LP_PARAM_INIT_ORDER says which order the program uses.
 *
 * Needs the GPUs CUDA_VISIBLE_DEVICES names: skipped (not failed) where cuInit finds none of them.
 * Usage: device_index <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lp_report.h"

/* NVML's two calls used here (nvml.h is not on the reproducers' include path); nvmlReturn_t is an enum */
int nvmlInit_v2(void);
int nvmlDeviceGetCount_v2(unsigned int *count);

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

/* A declared parameter: lucepatch always sets it (reproducer.toml [params]) */
static const char *param(const char *env) {
    const char *v = getenv(env);
    if (!v || !*v) {
        fprintf(stderr, "device_index: %s is not set (a declared parameter: lucepatch sets it)\n", env);
        exit(2);
    }
    return v;
}

static long long param_int(const char *env) {
    const char *v = param(env);
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end) {
        fprintf(stderr, "device_index: %s=%s is not an integer\n", env, v);
        exit(2);
    }
    return n;
}

/* On CUDA device `dev` (its primary context current): allocate exactly the reported free memory,
 * then one byte more; the reported free must follow both. */
static void limit_binds(int dev) {
    char name[160];
    CUdevice d;
    CUcontext c;
    if (cuDeviceGet(&d, dev) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS) {
        fprintf(stderr, "device_index: no CUDA device %d\n", dev);
        exit(2);
    }
    cuCtxSetCurrent(c);
    size_t f0 = 0, t0 = 0, f = 0, t = 0;
    check("cuMemGetInfo_v2", CUDA_SUCCESS, cuMemGetInfo_v2(&f0, &t0));
    lp_report_value("reported_total", (long long)t0);
    lp_report_value("reported_free", (long long)f0);
    long long want_total = param_int("LP_PARAM_EXPECT_TOTAL");
    if (want_total > 0)
        check_eq("cuMemGetInfo_v2 total is the device's limit", want_total, (long long)t0);
    CUdeviceptr p = 0, q = 0;
    snprintf(name, sizeof name, "device %d: cuMemAlloc of exactly the reported free memory (%zu bytes)", dev, f0);
    check(name, CUDA_SUCCESS, cuMemAlloc(&p, f0));
    check("cuMemGetInfo_v2 at the limit", CUDA_SUCCESS, cuMemGetInfo_v2(&f, &t));
    check_eq("reported free at the limit is 0", 0, (long long)f);
    snprintf(name, sizeof name, "device %d: cuMemAlloc of one byte over the limit", dev);
    check(name, CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&q, 1));
    if (q)
        cuMemFree(q);
    if (p)
        check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
    f = 0;
    check("cuMemGetInfo_v2 after the free", CUDA_SUCCESS, cuMemGetInfo_v2(&f, &t));
    check_eq("reported free is back", (long long)f0, (long long)f);
    cuCtxSetCurrent(NULL);
    cuDevicePrimaryCtxRelease(d);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <scenario> (see reproducer.toml)\n", argv[0]);
        return 2;
    }
    g_scenario = argv[1];
    lp_bind_now(argv);
    const char *order = param("LP_PARAM_INIT_ORDER");
    int dev = (int)param_int("LP_PARAM_DEVICE");
    if (strcmp(order, "nvml-first") == 0) {
        int r = nvmlInit_v2();
        if (r != 0) {
            fprintf(stderr, "device_index: nvmlInit_v2 failed (%d)\n", r);
            return 2;
        }
    } else if (strcmp(order, "cuda-first") != 0) {
        fprintf(stderr, "device_index: LP_PARAM_INIT_ORDER=%s: cuda-first or nvml-first\n", order);
        return 2;
    }
    CUresult r = cuInit(0);
    int count = 0;
    if (r == CUDA_ERROR_NO_DEVICE || (r == CUDA_SUCCESS && cuDeviceGetCount(&count) == CUDA_SUCCESS && count <= dev)) {
        char why[200];
        snprintf(why, sizeof why, "CUDA_VISIBLE_DEVICES=%s leaves %d CUDA device(s) here; the scenario uses device %d",
                 getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)", count, dev);
        lp_skip(g_scenario, why);
    }
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "device_index: cuInit failed (%d)\n", (int)r);
        return 2;
    }
    CUdevice d0;
    CUcontext c0;
    if (cuDeviceGet(&d0, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c0, d0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(c0) != CUDA_SUCCESS) {
        fprintf(stderr, "device_index: no usable CUDA device\n");
        return 2;
    }
    lp_report_loaded();
    int version = 0;
    char gpu[256] = "";
    cuDriverGetVersion(&version);
    cuDeviceGetName(gpu, sizeof gpu, d0);
    lp_report_driver(version, count, gpu);
    cuCtxSetCurrent(NULL);
    limit_binds(dev);
    cuDevicePrimaryCtxRelease(d0);
    lp_report_done(g_scenario, g_ok);
    return g_ok ? 0 : 1;
}
