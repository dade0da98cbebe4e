/* llama-vmm: the ggml-cuda VMM pool / NCCL host-memory probe pattern.
 *
 * ggml-cuda's VMM pool (and NCCL's ncclCuMemHostEnable probe) drive the virtual memory API
 * directly: cuMemGetAllocationGranularity, cuMemCreate (HOST_NUMA for the probe, DEVICE for the
 * pool), cuMemAddressReserve, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease -- often
 * from a thread that never made a context current.  cuMemCreate needs no context: the
 * location in `prop` says where the memory goes.
 *
 * Before HAMi-core 72b24fd (PR #192) a HOST_NUMA cuMemCreate passed an uninitialised device
 * id to add_chunk_only -> oom_check -> SIGSEGV (HAMi-core #169, #187; the blog's llama.cpp /
 * Lucebox crash).  At the pin 8f3a89c that is fixed, but a DEVICE cuMemCreate is charged to
 * the *current context's* device instead of prop->location.id.
 *
 * Usage: llama_vmm <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lp_report.h"

static int g_ok = 1;
static int g_count;
static CUcontext g_ctx0;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

/* Bytes in use on `dev` as HAMi reports them, read with that device's primary context pushed
 * on the calling thread (the main thread; the VMM work happens elsewhere).
 * The primary context is retained once per device and held until exit, never released between
 * reads: HAMi v2.5.x (54b1305) charges its context_size again on every cuDevicePrimaryCtxRetain
 * that follows a cuDevicePrimaryCtxRelease (upstream fixed that in 98a39b7), so a read that
 * retained and released would itself grow the usage it reads (measured on an H200: the
 * control's usage ended 36 MiB above where it began, or past the limit, where cuMemGetInfo fails). */
static long long used_on(int dev) {
    static CUcontext held[8];
    CUcontext popped;
    if (dev < 0 || dev >= 8)
        return -1;
    if (!held[dev]) {
        CUdevice d;
        if (cuDeviceGet(&d, dev) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&held[dev], d) != CUDA_SUCCESS)
            return -1;
    }
    cuCtxPushCurrent(held[dev]);
    long long u = lp_used_bytes();
    cuCtxPopCurrent(&popped);
    return u;
}

/* One ggml-style VMM block: reserve, create, map, set access.  `loc_type`/`loc_id` say where
 * the physical memory lives; access is always granted to device `access_dev`. */
struct vmm_block {
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle h;
    int mapped, created;
};

/* returns 0 when the driver itself refuses this location (the scenario is skipped) */
static int vmm_create(struct vmm_block *b, CUmemLocationType loc_type, int loc_id, int access_dev,
                      const char *who, int poison) {
    char name[160];
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = loc_type;
    prop.location.id = loc_id;
    if (loc_type != CU_MEM_LOCATION_TYPE_DEVICE)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* as NCCL asks */
    size_t gran = 0;
    CUresult r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS || gran == 0)
        return 0;
    b->size = 16 * gran;
    snprintf(name, sizeof name, "%s: cuMemAddressReserve", who);
    check(name, CUDA_SUCCESS, cuMemAddressReserve(&b->va, b->size, 0, 0, 0));
    if (poison)
        lp_poison_stack();
    r = cuMemCreate(&b->h, b->size, &prop, 0);
    if (loc_type != CU_MEM_LOCATION_TYPE_DEVICE && (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE ||
                                                    r == CUDA_ERROR_INVALID_DEVICE)) {
        cuMemAddressFree(b->va, b->size);
        return 0; /* the driver (not the interposer: it forwards first) refuses host memory here */
    }
    snprintf(name, sizeof name, "%s: cuMemCreate", who);
    check(name, CUDA_SUCCESS, r);
    if (r != CUDA_SUCCESS)
        return 1;
    b->created = 1;
    snprintf(name, sizeof name, "%s: cuMemMap", who);
    r = cuMemMap(b->va, b->size, 0, b->h, 0);
    check(name, CUDA_SUCCESS, r);
    b->mapped = r == CUDA_SUCCESS;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = access_dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    snprintf(name, sizeof name, "%s: cuMemSetAccess", who);
    if (b->mapped)
        check(name, CUDA_SUCCESS, cuMemSetAccess(b->va, b->size, &acc, 1));
    return 1;
}

static void vmm_destroy(struct vmm_block *b, const char *who, int poison) {
    char name[160];
    if (b->created) {
        /* ggml releases the handle right after mapping; the mapping keeps the memory alive */
        if (poison)
            lp_poison_stack();
        snprintf(name, sizeof name, "%s: cuMemRelease", who);
        check(name, CUDA_SUCCESS, cuMemRelease(b->h));
    }
    if (b->mapped) {
        snprintf(name, sizeof name, "%s: cuMemUnmap", who);
        check(name, CUDA_SUCCESS, cuMemUnmap(b->va, b->size));
    }
    if (b->va) {
        snprintf(name, sizeof name, "%s: cuMemAddressFree", who);
        check(name, CUDA_SUCCESS, cuMemAddressFree(b->va, b->size));
    }
}

static int run_helper(void *(*body)(void *), void *arg) {
    pthread_t t;
    if (pthread_create(&t, NULL, body, arg) != 0)
        return 0;
    pthread_join(t, NULL);
    return 1;
}

/* ---- scenarios ----------------------------------------------------------------------------- */

static const char *g_scenario;

/* main thread, context current on device 0, DEVICE memory on device 0: the VMM calls work through
 * the interposer and usage ends where it began -- what every version does, whether it accounts VMM
 * memory (8f3a89c) or not (54b1305) */
static void scenario_control(void) {
    struct vmm_block b = {0};
    long long before = used_on(0);
    if (!vmm_create(&b, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0, "main", 0)) {
        check("main: cuMemGetAllocationGranularity (DEVICE)", CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED);
        return;
    }
    /* recorded, not judged: whether it is charged is main-device's question */
    lp_report_value("usage_delta_while_mapped", used_on(0) - before);
    vmm_destroy(&b, "main", 0);
    check_eq("usage on device 0 after release+unmap is back", before, used_on(0));
}

/* the same on the main thread, with the usage read while mapped: charged (since bd3d7c3) */
static void scenario_main_device(void) {
    struct vmm_block b = {0};
    long long before = used_on(0);
    if (!vmm_create(&b, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0, "main", 0)) {
        check("main: cuMemGetAllocationGranularity (DEVICE)", CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED);
        return;
    }
    check_eq("usage on device 0 after cuMemCreate(DEVICE 0) grows by its size", before + (long long)b.size,
             used_on(0));
    vmm_destroy(&b, "main", 0);
    check_eq("usage on device 0 after release+unmap is back", before, used_on(0));
}

struct helper_job {
    CUmemLocationType type;
    long long used_before, used_mapped;
    int supported;
    size_t size;
};

/* context-less helper thread (never calls cuCtxSetCurrent), like ggml's / NCCL's threads */
static void *helper_vmm(void *arg) {
    struct helper_job *j = arg;
    struct vmm_block b = {0};
    j->supported = vmm_create(&b, j->type, 0, 0, "helper (no context)", 1);
    j->size = b.size;
    if (!j->supported)
        return NULL;
    j->used_mapped = used_on(0); /* pushes device 0's context briefly, then pops: still context-less */
    vmm_destroy(&b, "helper (no context)", 1);
    return NULL;
}

/* NCCL's ncclCuMemHostEnable probe: HOST_NUMA memory, no GPU charge (pre-72b24fd: SIGSEGV) */
static void scenario_host_numa_create(void) {
    struct helper_job j = {.type = CU_MEM_LOCATION_TYPE_HOST_NUMA};
    j.used_before = used_on(0);
    if (!run_helper(helper_vmm, &j))
        g_ok = 0;
    if (!j.supported)
        lp_skip(g_scenario, "the driver does not support HOST_NUMA cuMemCreate here");
    check_eq("usage on device 0 while HOST_NUMA memory is mapped: unchanged (host memory)", j.used_before,
             j.used_mapped);
    check_eq("usage on device 0 after release+unmap: unchanged", j.used_before, used_on(0));
}

/* ggml's VMM pool growing from a context-less thread: DEVICE memory on device 0 */
static void scenario_ctxless_device(void) {
    struct helper_job j = {.type = CU_MEM_LOCATION_TYPE_DEVICE};
    j.used_before = used_on(0);
    if (!run_helper(helper_vmm, &j))
        g_ok = 0;
    if (!j.supported) {
        check("helper: cuMemGetAllocationGranularity (DEVICE)", CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED);
        return;
    }
    check_eq("usage on device 0 while mapped grows by the block size", j.used_before + (long long)j.size,
             j.used_mapped);
    check_eq("usage on device 0 after release+unmap is back", j.used_before, used_on(0));
}

/* context current on device 0, memory created on device 1: charge device 1, not device 0 */
static void scenario_device_create(void) {
    if (g_count < 2)
        lp_skip(g_scenario, "needs 2 CUDA devices");
    struct vmm_block b = {0};
    long long before0 = used_on(0), before1 = used_on(1);
    if (!vmm_create(&b, CU_MEM_LOCATION_TYPE_DEVICE, 1, 1, "main (context on device 0)", 1)) {
        check("main: cuMemGetAllocationGranularity (DEVICE 1)", CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED);
        return;
    }
    check_eq("usage on device 1 grows by the size of a cuMemCreate on device 1", before1 + (long long)b.size,
             used_on(1));
    check_eq("usage on device 0 is unchanged by a cuMemCreate on device 1", before0, used_on(0));
    vmm_destroy(&b, "main (context on device 0)", 1);
    check_eq("usage on device 1 after release+unmap is back", before1, used_on(1));
    check_eq("usage on device 0 after release+unmap is unchanged", before0, used_on(0));
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"main-device", scenario_main_device},
    {"host-numa-create", scenario_host_numa_create},
    {"ctxless-device", scenario_ctxless_device},
    {"device-create", scenario_device_create},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run;
    if (!run) {
        fprintf(stderr, "usage: %s control|main-device|host-numa-create|ctxless-device|device-create\n", argv[0]);
        return 2;
    }
    g_scenario = argv[1];
    lp_bind_now(argv);
    CUdevice dev;
    if (lp_setup_primary("llama_vmm", &g_count, &dev, &g_ctx0))
        return 2;
    run();
    cuDevicePrimaryCtxRelease(dev);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
