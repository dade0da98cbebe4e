/* shared-region: two processes of one pod share HAMi-core's region file.
 *
 * HAMi-core keeps every process's per-device usage in one mmap'd file (the runner gives each
 * run a fresh one through CUDA_DEVICE_MEMORY_SHARED_CACHE; the child inherits it).  Process A
 * frees, from a thread with no current context, an allocation its main thread made on its own
 * stream.  At the pin remove_chunk_async() uncharges the device named by a failed
 * cuCtxGetDevice: stack residue.  Out of range it is an out-of-bounds write into the region
 * every process maps (crash or silent corruption of B's slot); in range but wrong (residue 1)
 * the right device stays charged forever, and B -- which only shares the file -- sees usage
 * that belongs to nobody.  B's view of the pod's usage must be the same before A's allocation
 * and after A's free.
 *
 * B is forked before any CUDA call (a CUDA process must not fork after cuInit).
 * Usage: shared_region <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 */
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lp_report.h"

#define A_BYTES (16u << 20)
#define B_BYTES (32u << 20)

static int g_ok = 1;
static CUstream g_stream;
static CUdeviceptr g_a_alloc;
static uint32_t g_poison;
static int g_to_b[2], g_from_b[2];

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

/* ---- process B: allocates, then answers "what usage do you see?" until told to quit ------- */

static int xread(int fd, void *buf, size_t n) { return read(fd, buf, n) == (ssize_t)n; }
static int xwrite(int fd, const void *buf, size_t n) { return write(fd, buf, n) == (ssize_t)n; }

static int process_b(void) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p = 0;
    long long status = -2;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cuMemAlloc(&p, B_BYTES) != CUDA_SUCCESS) {
        xwrite(g_from_b[1], &status, sizeof status);
        return 2;
    }
    status = 0;
    xwrite(g_from_b[1], &status, sizeof status);
    char cmd;
    while (xread(g_to_b[0], &cmd, 1)) {
        if (cmd == 'q')
            break;
        long long used = lp_used_bytes();
        xwrite(g_from_b[1], &used, sizeof used);
    }
    cuMemFree(p);
    cuDevicePrimaryCtxRelease(dev);
    return 0;
}

static long long b_usage(void) {
    long long used = -1;
    char cmd = 'u';
    if (!xwrite(g_to_b[1], &cmd, 1) || !xread(g_from_b[0], &used, sizeof used))
        return -1;
    return used;
}

/* ---- process A ------------------------------------------------------------------------------ */

static void *helper_free(void *arg) {
    (void)arg; /* this thread never makes a context current */
    lp_poison_stack_word(g_poison);
    check("A helper (no context): cuMemFreeAsync of main's allocation", CUDA_SUCCESS,
          cuMemFreeAsync(g_a_alloc, g_stream));
    return NULL;
}

static void run_a(int ctxless) {
    long long b_before = b_usage(), a_before = lp_used_bytes();
    lp_report_value("b_sees_before", b_before);
    check("A main: cuMemAllocAsync on its stream", CUDA_SUCCESS, cuMemAllocAsync(&g_a_alloc, A_BYTES, g_stream));
    check_eq("B sees A's allocation", b_before + A_BYTES, b_usage());
    if (g_a_alloc) {
        if (ctxless) {
            pthread_t t;
            if (pthread_create(&t, NULL, helper_free, NULL) != 0)
                g_ok = 0;
            else
                pthread_join(t, NULL);
        } else {
            check("A main: cuMemFreeAsync", CUDA_SUCCESS, cuMemFreeAsync(g_a_alloc, g_stream));
        }
    }
    check("A main: cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    long long b_after = b_usage();
    lp_report_value("b_sees_after", b_after);
    check_eq("B's view of the pod's usage after A's free is what it was before A's allocation", b_before, b_after);
    check_eq("A's view after its free is what it was before", a_before, lp_used_bytes());
}

static const struct {
    const char *name;
    int ctxless;
    uint32_t poison;
} scenarios[] = {
    {"control", 0, 0},
    {"ctxless-free-other-process", 1, LP_STACK_POISON_WORD}, /* out-of-range residue */
    {"ctxless-free-wrong-device", 1, 1},                     /* in-range residue: device 1 */
};

int main(int argc, char **argv) {
    int which = -1;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            which = (int)i;
    if (which < 0) {
        fprintf(stderr, "usage: %s control|ctxless-free-other-process|ctxless-free-wrong-device\n", argv[0]);
        return 2;
    }
    lp_bind_now(argv);
    g_poison = scenarios[which].poison;
    if (pipe(g_to_b) || pipe(g_from_b)) {
        perror("pipe");
        return 2;
    }
    fflush(stdout);
    pid_t b = fork();
    if (b < 0) {
        perror("fork");
        return 2;
    }
    if (b == 0) {
        close(g_to_b[1]);
        close(g_from_b[0]);
        _exit(process_b());
    }
    close(g_to_b[0]);
    close(g_from_b[1]);

    int count = 0;
    CUdevice dev;
    CUcontext ctx;
    long long b_status = -1;
    if (lp_setup_primary("shared_region", &count, &dev, &ctx) ||
        cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        !xread(g_from_b[0], &b_status, sizeof b_status) || b_status != 0) {
        fprintf(stderr, "shared_region: set-up failed (process B status %lld)\n", b_status);
        kill(b, SIGKILL);
        waitpid(b, NULL, 0);
        return 2;
    }
    run_a(scenarios[which].ctxless);
    char quit = 'q';
    xwrite(g_to_b[1], &quit, 1);
    int st = 0;
    waitpid(b, &st, 0);
    check_eq("process B exit status", 0, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(dev);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
