/* async-sched: stream-ordered allocation from a thread with no current CUDA context.
 *
 * The pattern behind "vLLM with async scheduling": the main thread owns the context and a
 * stream; a helper thread (vLLM's output thread, a loader pool, NCCL/Triton internals) never
 * makes a context current but issues cuMemAllocAsync/cuMemFreeAsync on that stream.  The
 * driver accepts this (an explicit stream carries its context); an interposer that asks
 * cuCtxGetDevice for "the" device gets 201 and an untouched, uninitialised id.
 *
 * Usage: async_sched <scenario>    exit 0 = passed, 1 = a check failed, 2 = setup/usage error
 * Output: @@lucepatch JSON lines, see reproducers/common/lp_report.h.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lp_report.h"

#define ALLOC_BYTES (4u << 20) /* well under the 1g HAMi limit the scenarios run with */

static CUstream g_stream;        /* created by main, so it carries main's context */
static CUdeviceptr g_main_async; /* main's async allocation, freed by the helper */
static int g_ok = 1;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

/* ---- helper-thread bodies: this thread never calls cuCtxSetCurrent ----------------------- */

static void *helper_async_alloc(void *arg) {
    (void)arg;
    CUdeviceptr p = 0;
    lp_poison_stack();
    CUresult r = cuMemAllocAsync(&p, ALLOC_BYTES, g_stream);
    check("helper: cuMemAllocAsync on main's stream", CUDA_SUCCESS, r);
    if (p) {
        lp_poison_stack();
        r = cuMemFreeAsync(p, g_stream);
        check("helper: cuMemFreeAsync on main's stream", CUDA_SUCCESS, r);
    }
    return NULL;
}

static void *helper_async_free(void *arg) {
    (void)arg;
    lp_poison_stack();
    CUresult r = cuMemFreeAsync(g_main_async, g_stream);
    check("helper: cuMemFreeAsync of main's allocation", CUDA_SUCCESS, r);
    return NULL;
}

static void *helper_sync_alloc(void *arg) {
    (void)arg;
    CUdeviceptr p = 0;
    lp_poison_stack();
    /* the driver needs a current context here: exactly 201, not OOM, not a fake success */
    CUresult r = cuMemAlloc(&p, ALLOC_BYTES);
    check("helper: cuMemAlloc without a context", CUDA_ERROR_INVALID_CONTEXT, r);
    return NULL;
}

static int run_helper(void *(*body)(void *)) {
    pthread_t t;
    if (pthread_create(&t, NULL, body, NULL) != 0)
        return 0;
    pthread_join(t, NULL);
    return 1;
}

/* ---- scenarios ------------------------------------------------------------------------------ */

static void scenario_control(void) {
    CUdeviceptr p = 0, q = 0;
    check("main: cuMemAlloc", CUDA_SUCCESS, cuMemAlloc(&p, ALLOC_BYTES));
    if (p)
        check("main: cuMemFree", CUDA_SUCCESS, cuMemFree(p));
    check("main: cuMemAllocAsync", CUDA_SUCCESS, cuMemAllocAsync(&q, ALLOC_BYTES, g_stream));
    if (q)
        check("main: cuMemFreeAsync", CUDA_SUCCESS, cuMemFreeAsync(q, g_stream));
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
}

static void scenario_ctxless_async_alloc(void) {
    if (!run_helper(helper_async_alloc))
        g_ok = 0;
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
}

static void scenario_ctxless_async_free(void) {
    check("main: cuMemAllocAsync", CUDA_SUCCESS, cuMemAllocAsync(&g_main_async, ALLOC_BYTES, g_stream));
    if (g_main_async && !run_helper(helper_async_free))
        g_ok = 0;
    check("main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
}

static void scenario_ctxless_sync_alloc(void) {
    if (!run_helper(helper_sync_alloc))
        g_ok = 0;
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"ctxless-async-alloc", scenario_ctxless_async_alloc},
    {"ctxless-async-free", scenario_ctxless_async_free},
    {"ctxless-sync-alloc", scenario_ctxless_sync_alloc},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run;
    if (!run) {
        fprintf(stderr, "usage: %s control|ctxless-async-alloc|ctxless-async-free|ctxless-sync-alloc\n", argv[0]);
        return 2;
    }

    lp_bind_now(argv);

    /* Set up like cudart does: primary context, made current on the main thread only. */
    CUdevice dev;
    CUcontext ctx;
    int version = 0, count = 0;
    char name[256] = "";
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1 ||
        cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "async_sched: no usable CUDA device\n");
        return 2;
    }
    lp_report_loaded();
    cuDriverGetVersion(&version);
    cuDeviceGetName(name, sizeof name, dev);
    lp_report_driver(version, count, name);

    if (cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        fprintf(stderr, "async_sched: cuStreamCreate failed\n");
        return 2;
    }
    run();
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(dev);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
