/* first-writer: a process started without the limit variables must not erase the pod's memory limit
 * (HAMi#2125).
 *
 * HAMi-core latches the limits into the shared region when the region file is created, from the
 * environment of the process that creates it. A process started over ssh, su or cron inside the pod has
 * no CUDA_DEVICE_MEMORY_LIMIT*: at the pin it creates the region with limit 0 ("no limit"), and every
 * configured process that joins later reads 0 — the limit is gone for all of them. An explicit 0
 * (CUDA_DEVICE_MEMORY_LIMIT_0=0m, which Olares sets for pods without gpumem) is a configuration and
 * must stay "no limit": unset and explicit 0 are different.
 *
 * Scenarios (the runner gives both processes the same region file, as one pod's processes share it):
 *   control        the configured process alone: a 1 GiB limit holds (2 GiB refused, total = 1 GiB)
 *   envless-first  a process without the limit variables initialises CUDA first; then the configured one:
 *                  the 1 GiB limit holds for it, and for the env-less process too
 *   zero-first     a process with an explicit CUDA_DEVICE_MEMORY_LIMIT=0m first; then the configured one:
 *                  the region stays without a limit (2 GiB allocates): explicit 0 is not "unset"
 *
 * Usage: first_writer <scenario>   exit 0 = passed, 1 = a check failed, 2 = setup error
 *        first_writer <scenario> --first FD_READY FD_GO FD_RESULT   (internal: the first process)
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lp_report.h"

#define GIB (1ull << 30)
#define LIMIT "1g"

static int g_ok = 1;

static int init_ctx(void) {
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 2;
    return 0;
}

/* Does a 2 GiB allocation succeed? (the memory limit as HAMi enforces it) */
static CUresult try_2gib(void) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, 2 * GIB);
    if (r == CUDA_SUCCESS)
        cuMemFree(p);
    return r;
}

/* the first process: initialise (creating the region), say so, wait, then try 2 GiB and report */
static int first(int ready, int go, int result) {
    if (init_ctx())
        return 2;
    lp_report_loaded();
    CUdeviceptr p = 0;
    cuMemAlloc(&p, 1 << 20); /* registered in the region, as a process that uses the GPU */
    if (write(ready, "r", 1) != 1)
        return 2;
    char c;
    if (read(go, &c, 1) != 1)
        return 2;
    int r = (int)try_2gib();
    if (write(result, &r, sizeof r) != (ssize_t)sizeof r)
        return 2;
    if (read(go, &c, 1) != 1) /* stay until the configured process is done */
        return 2;
    return 0;
}

static void strip_limits(void) {
    const char *names[] = {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT"};
    for (int n = 0; n < 2; n++) {
        unsetenv(names[n]);
        for (int i = 0; i < 16; i++) {
            char v[64];
            snprintf(v, sizeof v, "%s_%d", names[n], i);
            unsetenv(v);
        }
    }
}

/* Start the first process with `env` ("" = none of the limit variables); returns its pid. */
static pid_t start_first(const char *scenario, char **argv, const char *zero, int *ready, int *go, int *result) {
    int r[2], g[2], res[2];
    if (pipe(r) || pipe(g) || pipe(res))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        char fds[64];
        close(r[0]), close(g[1]), close(res[0]);
        strip_limits();
        if (zero)
            setenv("CUDA_DEVICE_MEMORY_LIMIT", zero, 1);
        snprintf(fds, sizeof fds, "%d", r[1]);
        char f2[16], f3[16];
        snprintf(f2, sizeof f2, "%d", g[0]);
        snprintf(f3, sizeof f3, "%d", res[1]);
        execl("/proc/self/exe", argv[0], scenario, "--first", fds, f2, f3, (char *)NULL);
        _exit(127);
    }
    close(r[1]), close(g[0]), close(res[1]);
    *ready = r[0], *go = g[1], *result = res[0];
    return pid;
}

static void check_alloc(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

int main(int argc, char **argv) {
    lp_bind_now(argv);
    if (argc < 2) {
        fprintf(stderr, "usage: first_writer <scenario>\n");
        return 2;
    }
    const char *scenario = argv[1];
    if (argc == 6 && strcmp(argv[2], "--first") == 0)
        return first(atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    const char *lim = getenv("CUDA_DEVICE_MEMORY_LIMIT");
    if (!lim || strcmp(lim, LIMIT) != 0) {
        fprintf(stderr, "first_writer: the configured process needs CUDA_DEVICE_MEMORY_LIMIT=%s\n", LIMIT);
        return 2;
    }
    int envless = strcmp(scenario, "envless-first") == 0, zero = strcmp(scenario, "zero-first") == 0;
    if (!envless && !zero && strcmp(scenario, "control") != 0) {
        fprintf(stderr, "first_writer: unknown scenario %s\n", scenario);
        return 2;
    }
    pid_t pid = -1;
    int ready = -1, go = -1, result = -1;
    if (envless || zero) {
        pid = start_first(scenario, argv, zero ? "0m" : NULL, &ready, &go, &result);
        char c;
        if (pid < 0 || read(ready, &c, 1) != 1) {
            fprintf(stderr, "first_writer: the first process did not come up\n");
            return 2;
        }
    }
    if (init_ctx())
        return 2;
    lp_report_loaded();
    int version = 0;
    char name[256] = "";
    cuDriverGetVersion(&version);
    cuDeviceGetName(name, sizeof name, 0);
    lp_report_driver(version, 1, name);
    size_t free_b = 0, total = 0;
    cuMemGetInfo(&free_b, &total);
    if (zero) {
        check_alloc("2 GiB in a region whose first process set an explicit 0 (no limit)", CUDA_SUCCESS, try_2gib());
    } else {
        char got[32];
        snprintf(got, sizeof got, "%zu", total);
        if (!lp_report_check(envless ? "cuMemGetInfo total is the 1 GiB limit after an env-less first process"
                                      : "cuMemGetInfo total is the 1 GiB limit",
                             "1073741824", got, total == GIB))
            g_ok = 0;
        check_alloc(envless ? "2 GiB over the 1 GiB limit (an env-less process made the region)"
                            : "2 GiB over the 1 GiB limit",
                    CUDA_ERROR_OUT_OF_MEMORY, try_2gib());
    }
    if (pid > 0) {
        int first_result = -1;
        if (write(go, "g", 1) != 1 || read(result, &first_result, sizeof first_result) != (ssize_t)sizeof first_result) {
            lp_report_check("the first process answered", "its allocation's result", "nothing", 0);
            g_ok = 0;
        } else if (envless) {
            check_alloc("the env-less process: 2 GiB over the region's 1 GiB limit", CUDA_ERROR_OUT_OF_MEMORY,
                        (CUresult)first_result);
        } else {
            check_alloc("the explicit-0 process: 2 GiB with no limit", CUDA_SUCCESS, (CUresult)first_result);
        }
        if (write(go, "g", 1) != 1)
            g_ok = 0;
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st))
            raise(WTERMSIG(st));
    }
    lp_report_done(scenario, g_ok);
    return g_ok ? 0 : 1;
}
