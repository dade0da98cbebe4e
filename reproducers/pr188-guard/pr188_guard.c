/* pr188-guard: a hook must never report success for work it did not do.
 *
 * HAMi-core PR #188 (closed unmerged) "fixed" add_chunk by returning CUDA_SUCCESS without
 * allocating when cuCtxGetDevice failed: the caller gets an uninitialised pointer and no
 * error.  On a thread with no current context the bare driver's cuMemAlloc answers
 * CUDA_ERROR_INVALID_CONTEXT (201); an interposer must answer exactly that (or allocate for
 * real), and must not change the accounting.
 *
 * Two residues: out of range (0x7f7f7f7f: the pin crashes, a correct fix returns 201, PR #188
 * returns success -> not proven) and a valid device (0: the pin happens to answer 201, PR #188
 * still returns success -> a regression).
 *
 * Usage: pr188_guard <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lp_report.h"

#define ALLOC_BYTES (4u << 20)

static int g_ok = 1;
static uint32_t g_poison;
static CUresult g_result;
static CUdeviceptr g_ptr;

static void *helper_alloc(void *arg) {
    (void)arg; /* never makes a context current */
    g_ptr = 0x5a5a5a5a; /* must come back cleared (failure) or a real allocation */
    lp_poison_stack_word(g_poison);
    g_result = cuMemAlloc(&g_ptr, ALLOC_BYTES);
    return NULL;
}

static void scenario_control(void) {
    CUdeviceptr p = 0;
    long long before = lp_used_bytes();
    if (!lp_check_result("main: cuMemAlloc with a context", CUDA_SUCCESS, cuMemAlloc(&p, ALLOC_BYTES)))
        g_ok = 0;
    if (!lp_check_eq("main: usage grows by the allocation", before + ALLOC_BYTES, lp_used_bytes()))
        g_ok = 0;
    if (p && !lp_check_result("main: cuMemFree", CUDA_SUCCESS, cuMemFree(p)))
        g_ok = 0;
}

static void scenario_ctxless(void) {
    long long before = lp_used_bytes();
    pthread_t t;
    if (pthread_create(&t, NULL, helper_alloc, NULL) != 0) {
        g_ok = 0;
        return;
    }
    pthread_join(t, NULL);
    if (!lp_check_result("helper (no context): cuMemAlloc answers the driver's error, never a fake success",
                         CUDA_ERROR_INVALID_CONTEXT, g_result))
        g_ok = 0;
    if (!lp_check_eq("usage unchanged by a failed allocation", before, lp_used_bytes()))
        g_ok = 0;
}

static const struct {
    const char *name;
    void (*run)(void);
    uint32_t poison;
} scenarios[] = {
    {"control", scenario_control, 0},
    {"ctxless-alloc-exact-error", scenario_ctxless, LP_STACK_POISON_WORD},
    {"ctxless-alloc-valid-residue", scenario_ctxless, 0},
};

int main(int argc, char **argv) {
    int which = -1;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            which = (int)i;
    if (which < 0) {
        fprintf(stderr, "usage: %s control|ctxless-alloc-exact-error|ctxless-alloc-valid-residue\n", argv[0]);
        return 2;
    }
    lp_bind_now(argv);
    g_poison = scenarios[which].poison;
    int count = 0;
    CUdevice dev;
    CUcontext ctx;
    if (lp_setup_primary("pr188_guard", &count, &dev, &ctx))
        return 2;
    scenarios[which].run();
    cuDevicePrimaryCtxRelease(dev);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
