/* pointer-attrs: cuPointerGetAttributes reports what the driver reports.
 *
 * HAMi-core's cuPointerGetAttributes hook (8f3a89c, 54b1305) calls the driver, then overwrites every
 * CU_POINTER_ATTRIBUTE_IS_MANAGED it was asked for with 0 -- a cuMemAllocManaged pointer reads as
 * unmanaged, unlike through cuPointerGetAttribute -- and walks the caller's arrays whatever the
 * driver answered: with the arrays the driver rejects (NULL data or NULL attributes, which it
 * answers CUDA_ERROR_INVALID_VALUE) the hook dereferences them (HAMi-core#281).
 *
 * Inputs: LP_PARAM_BLOCK (bytes per allocation; reproducer.toml [params]).
 * Usage: pointer_attrs <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
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

/* A declared parameter: lucepatch always sets it (reproducer.toml [params]) */
static size_t param_bytes(const char *env) {
    const char *v = getenv(env);
    char *end = NULL;
    unsigned long long n = v && *v ? strtoull(v, &end, 10) : 0;
    if (!v || !*v || *end || n == 0) {
        fprintf(stderr, "pointer_attrs: %s=%s is not a byte count (a declared parameter: lucepatch sets it)\n", env,
                v ? v : "(unset)");
        exit(2);
    }
    return (size_t)n;
}

/* IS_MANAGED and MEMORY_TYPE of `p` through both APIs: they must agree, and say `managed` */
static void agree(CUdeviceptr p, int managed, const char *what) {
    char name[160];
    int single = -1;
    snprintf(name, sizeof name, "%s: cuPointerGetAttribute(IS_MANAGED)", what);
    check(name, CUDA_SUCCESS, cuPointerGetAttribute(&single, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    snprintf(name, sizeof name, "%s: IS_MANAGED through cuPointerGetAttribute", what);
    check_eq(name, managed, single);
    CUpointer_attribute ats[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned int type = 0;
    int multi = -1;
    void *data[2] = {&type, &multi};
    snprintf(name, sizeof name, "%s: cuPointerGetAttributes(MEMORY_TYPE, IS_MANAGED)", what);
    check(name, CUDA_SUCCESS, cuPointerGetAttributes(2, ats, data, p));
    snprintf(name, sizeof name, "%s: IS_MANAGED through cuPointerGetAttributes", what);
    check_eq(name, managed, multi);
    unsigned int type1 = 0;
    cuPointerGetAttribute(&type1, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    snprintf(name, sizeof name, "%s: MEMORY_TYPE agrees between the two", what);
    check_eq(name, type1, type);
}

static void scenario_control(void) {
    CUdeviceptr p = 0;
    check("cuMemAlloc", CUDA_SUCCESS, cuMemAlloc(&p, param_bytes("LP_PARAM_BLOCK")));
    agree(p, 0, "device memory");
    check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

static void scenario_managed(void) {
    CUdeviceptr p = 0;
    check("cuMemAllocManaged", CUDA_SUCCESS, cuMemAllocManaged(&p, param_bytes("LP_PARAM_BLOCK"), CU_MEM_ATTACH_GLOBAL));
    agree(p, 1, "managed memory");
    check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

/* The error side: arrays the driver rejects must come back with its error, untouched */
static void scenario_error_null_data(void) {
    CUdeviceptr p = 0;
    check("cuMemAllocManaged", CUDA_SUCCESS, cuMemAllocManaged(&p, param_bytes("LP_PARAM_BLOCK"), CU_MEM_ATTACH_GLOBAL));
    CUpointer_attribute ats[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
    check("cuPointerGetAttributes with data = NULL", CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes(2, ats, NULL, p));
    check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

static void scenario_error_null_attributes(void) {
    CUdeviceptr p = 0;
    check("cuMemAlloc", CUDA_SUCCESS, cuMemAlloc(&p, param_bytes("LP_PARAM_BLOCK")));
    int v = -1;
    void *data[1] = {&v};
    check("cuPointerGetAttributes with attributes = NULL", CUDA_ERROR_INVALID_VALUE,
          cuPointerGetAttributes(1, NULL, data, p));
    check_eq("the output is untouched after the error", -1, v);
    check("cuMemFree", CUDA_SUCCESS, cuMemFree(p));
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"managed-reported-managed", scenario_managed},
    {"error-null-data", scenario_error_null_data},
    {"error-null-attributes", scenario_error_null_attributes},
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
    if (lp_setup_primary("pointer_attrs", &count, &dev, &ctx))
        return 2;
    run();
    cuDevicePrimaryCtxRelease(dev);
    lp_report_done(g_scenario, g_ok);
    return g_ok ? 0 : 1;
}
