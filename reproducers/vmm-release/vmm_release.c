/* vmm-release: VMM memory is charged for as long as the driver holds it.
 *
 * cuMemRelease "frees the memory that was allocated on a device through cuMemCreate. The memory
 * allocation will be freed when all outstanding mappings to the memory are unmapped and when all
 * outstanding references to the handle ... are also released" (CUDA Driver API, Virtual Memory
 * Management). ggml-cuda's VMM pool releases each handle right after mapping it and keeps the
 * mapping for the life of the pool, so its memory is live until cuMemUnmap. HAMi-core at 8f3a89c
 * uncharges at cuMemRelease: the pool's memory is never in its usage and never limited. At
 * 54b1305 (HAMi v2.5.x) no VMM memory is accounted at all: cuMemCreate is forwarded, cuMemRelease
 * not hooked.
 *
 * Each scenario reads HAMi's usage (cuMemGetInfo_v2 under the limit) at every step of a
 * create/map/unmap/release sequence and checks it equals what the driver holds. Inputs (declared
 * in reproducer.toml [params], set by the runner): LP_PARAM_GRANULES (the block in allocation
 * granules), CUDA_DEVICE_MEMORY_LIMIT.
 *
 * Usage: vmm_release <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lp_report.h"

static int g_ok = 1;
static const char *g_scenario;
static CUdevice g_dev;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

/* A declared parameter: lucepatch always sets it (reproducer.toml [params]) */
static unsigned long long param_u64(const char *env) {
    const char *v = getenv(env);
    char *end = NULL;
    unsigned long long n = v && *v ? strtoull(v, &end, 10) : 0;
    if (!v || !*v || *end || n == 0) {
        fprintf(stderr, "vmm_release: %s=%s is not a positive integer (a declared parameter: lucepatch sets it)\n",
                env, v ? v : "(unset)");
        exit(2);
    }
    return n;
}

static CUmemAllocationProp device_prop(void) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_dev;
    return prop;
}

static size_t granularity(void) {
    CUmemAllocationProp prop = device_prop();
    size_t g = 0;
    if (cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) {
        fprintf(stderr, "vmm_release: no allocation granularity for device memory\n");
        exit(2);
    }
    return g;
}

static CUresult create(CUmemGenericAllocationHandle *h, size_t size) {
    CUmemAllocationProp prop = device_prop();
    return cuMemCreate(h, size, &prop, 0);
}

/* reserve `size` bytes of address space and map `h` there with read/write access */
static CUdeviceptr map(CUmemGenericAllocationHandle h, size_t size, const char *what) {
    char name[160];
    CUdeviceptr va = 0;
    snprintf(name, sizeof name, "%s: cuMemAddressReserve", what);
    check(name, CUDA_SUCCESS, cuMemAddressReserve(&va, size, 0, 0, 0));
    snprintf(name, sizeof name, "%s: cuMemMap", what);
    check(name, CUDA_SUCCESS, cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = g_dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    snprintf(name, sizeof name, "%s: cuMemSetAccess", what);
    check(name, CUDA_SUCCESS, cuMemSetAccess(va, size, &acc, 1));
    return va;
}

static void unmap(CUdeviceptr va, size_t size, const char *what) {
    char name[160];
    snprintf(name, sizeof name, "%s: cuMemUnmap", what);
    check(name, CUDA_SUCCESS, cuMemUnmap(va, size));
    snprintf(name, sizeof name, "%s: cuMemAddressFree", what);
    check(name, CUDA_SUCCESS, cuMemAddressFree(va, size));
}

/* the whole cycle in the order every version handles: usage ends where it began */
static void scenario_control(void) {
    size_t size = param_u64("LP_PARAM_GRANULES") * granularity();
    long long before = lp_used_bytes();
    CUmemGenericAllocationHandle h;
    check("cuMemCreate", CUDA_SUCCESS, create(&h, size));
    CUdeviceptr va = map(h, size, "block");
    unmap(va, size, "block");
    check("cuMemRelease", CUDA_SUCCESS, cuMemRelease(h));
    check_eq("usage after unmap + release is back", before, lp_used_bytes());
}

/* ggml's VMM pool: release right after mapping; the mapping keeps the memory */
static void scenario_release_while_mapped(void) {
    size_t size = param_u64("LP_PARAM_GRANULES") * granularity();
    long long before = lp_used_bytes();
    CUmemGenericAllocationHandle h;
    check("cuMemCreate", CUDA_SUCCESS, create(&h, size));
    CUdeviceptr va = map(h, size, "pool block");
    check("cuMemRelease while mapped", CUDA_SUCCESS, cuMemRelease(h));
    check_eq("usage while the released block is still mapped: charged", before + (long long)size, lp_used_bytes());
    unmap(va, size, "pool block");
    check_eq("usage after the last unmap is back", before, lp_used_bytes());
}

/* NCCL's / PyTorch's order: unmap, then release; charged until the release */
static void scenario_unmap_then_release(void) {
    size_t size = param_u64("LP_PARAM_GRANULES") * granularity();
    long long before = lp_used_bytes();
    CUmemGenericAllocationHandle h;
    check("cuMemCreate", CUDA_SUCCESS, create(&h, size));
    check_eq("usage after cuMemCreate: charged", before + (long long)size, lp_used_bytes());
    CUdeviceptr va = map(h, size, "block");
    unmap(va, size, "block");
    check_eq("usage after unmap, handle held: still charged", before + (long long)size, lp_used_bytes());
    check("cuMemRelease", CUDA_SUCCESS, cuMemRelease(h));
    check_eq("usage after the release is back", before, lp_used_bytes());
}

/* one handle mapped twice, released: charged until the second unmap (both sides of "no mapping left") */
static void scenario_two_mappings(void) {
    size_t size = param_u64("LP_PARAM_GRANULES") * granularity();
    long long before = lp_used_bytes();
    CUmemGenericAllocationHandle h;
    check("cuMemCreate", CUDA_SUCCESS, create(&h, size));
    CUdeviceptr a = map(h, size, "first mapping");
    CUdeviceptr b = map(h, size, "second mapping");
    check("cuMemRelease while mapped twice", CUDA_SUCCESS, cuMemRelease(h));
    unmap(a, size, "first mapping");
    check_eq("usage with one mapping left: charged", before + (long long)size, lp_used_bytes());
    unmap(b, size, "second mapping");
    check_eq("usage after the last unmap is back", before, lp_used_bytes());
}

/* the limit: a block of exactly what is free is created, one granule more is refused */
static void scenario_limit(void) {
    size_t g = granularity();
    size_t f = 0, t = 0;
    check("cuMemGetInfo_v2", CUDA_SUCCESS, cuMemGetInfo_v2(&f, &t));
    size_t fit = f / g * g;
    CUmemGenericAllocationHandle h, h2;
    check("cuMemCreate of exactly the free memory (whole granules)", CUDA_SUCCESS, create(&h, fit));
    CUdeviceptr va = map(h, fit, "block at the limit");
    check("cuMemRelease while mapped", CUDA_SUCCESS, cuMemRelease(h));
    CUresult r = create(&h2, g);
    check("cuMemCreate of one granule over the limit", CUDA_ERROR_OUT_OF_MEMORY, r);
    if (r == CUDA_SUCCESS)
        cuMemRelease(h2);
    unmap(va, fit, "block at the limit");
    r = create(&h2, g);
    check("cuMemCreate of one granule after the block was unmapped", CUDA_SUCCESS, r);
    if (r == CUDA_SUCCESS)
        check("cuMemRelease", CUDA_SUCCESS, cuMemRelease(h2));
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"release-while-mapped", scenario_release_while_mapped},
    {"unmap-then-release", scenario_unmap_then_release},
    {"two-mappings", scenario_two_mappings},
    {"limit", scenario_limit},
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
    if (lp_setup_primary("vmm_release", &count, &g_dev, &ctx))
        return 2;
    run();
    cuDevicePrimaryCtxRelease(g_dev);
    lp_report_done(g_scenario, g_ok);
    return g_ok ? 0 : 1;
}
