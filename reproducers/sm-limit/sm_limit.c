/* sm-limit: does HAMi-core's compute limit (CUDA_DEVICE_SM_LIMIT) hold, and what does the layer cost?
 * (issue 38; HAMi#1445, HAMi-core#274/#314/#317, HAMi-core#218, HAMi#2863)
 *
 * A decode-like loop on the driver API: per token, `layers` launches of lp_stream_read, each reading
 * `layer_bytes` of a weight buffer (bandwidth-bound, as a batch-1 decode step is), then an event the
 * host waits for one token later (two tokens in flight, as a decode loop that schedules ahead). Eager mode launches the kernels one by one (cuLaunchKernel); graph
 * mode captures one token's launches into a CUDA graph once and replays it (cuGraphLaunch), as
 * llama.cpp/ggml and vLLM run their decode (LP_GRAPH_SHAPE: "captured", the default; "child", the captured
 * token as a child graph node of an otherwise empty graph; "conditional", the token built inside the
 * body of an IF node whose condition defaults to 1: what a graph launch runs without a kernel node of its
 * own). After `warmup_ms` (not counted: the limiter's token bucket
 * and the clocks settle), tokens are counted for `measure_ms`; the run reports the rate (tokens/s) and its
 * series per 250 ms for the plots.
 *
 * With LP_TENANTS="30,70" the run is two tenants at once, each in its OWN region file (as two pods
 * are) with its own CUDA_DEVICE_SM_LIMIT: the program re-executes itself once per tenant (fresh
 * processes, so the interposer initialises with the tenant's environment), starts the second only once
 * the first has initialised (HAMi-core finds its host pid by diffing NVML's process list around a
 * context creation: simultaneous starts would race), lets both warm up, then measures both over the
 * same window. It reports each tenant's rate and the first tenant's share of the pair.
 *
 * What runs is the reproducer's environment: the SM limit, the memory limit, the region file come from
 * reproducer.toml and the runner; the verdict is decided by lucepatch from the rates (docs/design.md
 * "Quantitative scenarios"), never here. A run fails only when it cannot measure.
 *
 * Usage: sm_limit <scenario>            exit 0 = measured, 1 = could not measure, 2 = setup error
 *        sm_limit <scenario> --tenant I (internal: tenant I of LP_TENANTS)
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lp_kernels_ptx.h"
#include "lp_report.h"

#define SERIES_MS 250
#define MAX_POINTS 512
#define MAX_TENANTS 4

static CUfunction g_fn;
static CUstream g_stream;
static CUdeviceptr g_weights, g_sink;
static int g_layers, g_grid;
static unsigned long long g_layer_bytes;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long param(const char *name, long long fallback_for_tenant_children) {
    const char *v = getenv(name);
    if (!v || !*v) {
        if (fallback_for_tenant_children >= 0)
            return fallback_for_tenant_children;
        fprintf(stderr, "sm_limit: %s is not set (the runner sets every declared parameter)\n", name);
        exit(2);
    }
    return strtoll(v, NULL, 10);
}

static void report_rate(const char *name, double value) {
    printf("@@lucepatch {\"event\":\"value\",\"name\":");
    lp_json_str(stdout, name);
    printf(",\"value\":%.6f}\n", value);
    fflush(stdout);
}

static void report_series(const char *name, const int *counts, int n) {
    printf("@@lucepatch {\"event\":\"series\",\"name\":");
    lp_json_str(stdout, name);
    printf(",\"step_s\":%.3f,\"unit\":\"tok/s\",\"values\":[", SERIES_MS / 1000.0);
    for (int i = 0; i < n; i++)
        printf("%s%.3f", i ? "," : "", counts[i] * 1000.0 / SERIES_MS);
    printf("]}\n");
    fflush(stdout);
}

static int fail(const char *what, CUresult r) {
    char b[32];
    lp_report_check(what, "CUDA_SUCCESS", lp_curesult_name(r, b, sizeof b), 0);
    return 1;
}

/* one token: every layer's read, in order, on the stream */
static CUresult token_eager(void) {
    for (int l = 0; l < g_layers; l++) {
        CUdeviceptr src = g_weights + (CUdeviceptr)l * g_layer_bytes;
        unsigned long long bytes = g_layer_bytes;
        void *args[] = {&src, &bytes, &g_sink};
        CUresult r = cuLaunchKernel(g_fn, g_grid, 1, 1, 256, 1, 1, 0, g_stream, args, NULL);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* The token inside an IF node's body (its condition's default value 1): the top graph holds one
 * conditional node and no kernel node; what runs is only in the body (CUDA 12.4+ conditional nodes). */
static int conditional_graph(CUgraph *out) {
    CUgraph top;
    CUgraphConditionalHandle h;
    CUgraphNode cond, prev = NULL, n;
    CUcontext ctx;
    CUgraphNodeParams p;
    CUresult r;
    if ((r = cuGraphCreate(&top, 0)) != CUDA_SUCCESS || (r = cuCtxGetCurrent(&ctx)) != CUDA_SUCCESS ||
        (r = cuGraphConditionalHandleCreate(&h, top, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT)) != CUDA_SUCCESS)
        return fail("cuGraphConditionalHandleCreate", r);
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h;
    p.conditional.type = CU_GRAPH_COND_TYPE_IF;
    p.conditional.size = 1;
    p.conditional.ctx = ctx;
    if ((r = cuGraphAddNode(&cond, top, NULL, NULL, 0, &p)) != CUDA_SUCCESS)
        return fail("cuGraphAddNode (IF)", r);
    CUgraph body = p.conditional.phGraph_out[0];
    static CUdeviceptr srcs[256];
    static unsigned long long bytes;
    static void *args[256][3];
    bytes = g_layer_bytes;
    for (int l = 0; l < g_layers && l < 256; l++) {
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof kp);
        srcs[l] = g_weights + (CUdeviceptr)l * g_layer_bytes;
        args[l][0] = &srcs[l], args[l][1] = &bytes, args[l][2] = &g_sink;
        kp.func = g_fn;
        kp.gridDimX = g_grid, kp.gridDimY = 1, kp.gridDimZ = 1;
        kp.blockDimX = 256, kp.blockDimY = 1, kp.blockDimZ = 1;
        kp.kernelParams = args[l];
        if ((r = cuGraphAddKernelNode(&n, body, prev ? &prev : NULL, prev ? 1 : 0, &kp)) != CUDA_SUCCESS)
            return fail("cuGraphAddKernelNode (body)", r);
        prev = n;
    }
    *out = top;
    return 0;
}

static int setup_decode(CUdevice dev) {
    CUmodule mod;
    int sms = 0;
    CUresult r;
    if ((r = cuModuleLoadData(&mod, lp_kernels_ptx)) != CUDA_SUCCESS)
        return fail("cuModuleLoadData(lp_kernels.ptx)", r);
    if ((r = cuModuleGetFunction(&g_fn, mod, "lp_stream_read")) != CUDA_SUCCESS)
        return fail("cuModuleGetFunction(lp_stream_read)", r);
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    g_grid = 4 * (sms > 0 ? sms : 1); /* 4 blocks of 256 threads per SM: enough loads in flight */
    if ((r = cuMemAlloc(&g_weights, (size_t)g_layers * g_layer_bytes)) != CUDA_SUCCESS)
        return fail("cuMemAlloc(weights)", r);
    if ((r = cuMemsetD8(g_weights, 0, (size_t)g_layers * g_layer_bytes)) != CUDA_SUCCESS)
        return fail("cuMemsetD8(weights)", r);
    if ((r = cuMemAlloc(&g_sink, 8)) != CUDA_SUCCESS)
        return fail("cuMemAlloc(sink)", r);
    if ((r = cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
        return fail("cuStreamCreate", r);
    return 0;
}

/* Decode for warmup + measure ms (starting when `go` says), report the rate under `name`. */
static int decode(const char *mode, const char *name, int go_fd, double *rate_out) {
    long long warm = param("LP_PARAM_WARMUP_MS", -1), measure = param("LP_PARAM_MEASURE_MS", -1);
    CUgraphExec exec = NULL;
    CUresult r;
    int graph = strcmp(mode, "graph") == 0;
    if (graph) {
        CUgraph g;
        const char *shape = getenv("LP_GRAPH_SHAPE") ? getenv("LP_GRAPH_SHAPE") : "captured";
        if (strcmp(shape, "conditional") == 0) {
            if (conditional_graph(&g))
                return 1;
        } else {
            if ((r = cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS)
                return fail("cuStreamBeginCapture", r);
            if ((r = token_eager()) != CUDA_SUCCESS)
                return fail("cuLaunchKernel (captured)", r);
            if ((r = cuStreamEndCapture(g_stream, &g)) != CUDA_SUCCESS)
                return fail("cuStreamEndCapture", r);
            if (strcmp(shape, "child") == 0) { /* the token as a child graph: the top graph has no kernel node */
                CUgraph top;
                CUgraphNode n;
                if ((r = cuGraphCreate(&top, 0)) != CUDA_SUCCESS || (r = cuGraphAddChildGraphNode(&n, top, NULL, 0, g)) != CUDA_SUCCESS)
                    return fail("cuGraphAddChildGraphNode", r);
                g = top;
            } else if (strcmp(shape, "captured") != 0) {
                fprintf(stderr, "sm_limit: LP_GRAPH_SHAPE is captured, child or conditional\n");
                exit(2);
            }
        }
        if ((r = cuGraphInstantiate(&exec, g, 0)) != CUDA_SUCCESS)
            return fail("cuGraphInstantiate", r);
    }
    if (go_fd >= 0) { /* a tenant: wait until the parent starts every tenant at once */
        char c;
        if (read(go_fd, &c, 1) != 1)
            return fail("tenant start signal", CUDA_ERROR_UNKNOWN);
    }
    static int series[MAX_POINTS];
    CUevent done_ev[2];
    for (int i = 0; i < 2; i++)
        if ((r = cuEventCreate(&done_ev[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
            return fail("cuEventCreate", r);
    long long start = now_ns(), counted_from = start + warm * 1000000LL, end = counted_from + measure * 1000000LL;
    long long tokens = 0;
    /* two tokens in flight, as a decode loop that schedules the next step while the GPU runs this one
     * (vLLM's async scheduling, llama.cpp's pipelining): the device never waits for the host to wake up,
     * so the bare rate is the GPU's, not the host's. A token counts when its completion is seen. */
    for (long long i = 0, t = start; t < end; i++, t = now_ns()) {
        r = graph ? cuGraphLaunch(exec, g_stream) : token_eager();
        if (r != CUDA_SUCCESS)
            return fail(graph ? "cuGraphLaunch" : "cuLaunchKernel", r);
        if ((r = cuEventRecord(done_ev[i % 2], g_stream)) != CUDA_SUCCESS)
            return fail("cuEventRecord", r);
        if (i == 0)
            continue;
        if ((r = cuEventSynchronize(done_ev[(i - 1) % 2])) != CUDA_SUCCESS)
            return fail("cuEventSynchronize", r);
        long long done = now_ns();
        if (done >= counted_from && done < end) {
            tokens++;
            long long slot = (done - counted_from) / (SERIES_MS * 1000000LL);
            if (slot < MAX_POINTS)
                series[slot]++;
        }
    }
    if ((r = cuStreamSynchronize(g_stream)) != CUDA_SUCCESS)
        return fail("cuStreamSynchronize", r);
    double rate = tokens * 1000.0 / measure;
    *rate_out = rate;
    report_rate(name, rate);
    char sname[128];
    snprintf(sname, sizeof sname, "%s", name);
    int points = (int)(measure / SERIES_MS);
    report_series(sname, series, points < MAX_POINTS ? points : MAX_POINTS);
    return tokens > 0 ? 0 : (lp_report_check("tokens decoded in the measured window", "> 0", "0", 0), 1);
}

static int one_process(const char *scenario, const char *mode, const char *rate_name, int go_fd, int ready_fd,
                       double *rate) {
    int count;
    CUdevice dev;
    CUcontext ctx;
    if (lp_setup_primary("sm_limit", &count, &dev, &ctx))
        return 2;
    g_layers = (int)param("LP_PARAM_LAYERS", -1);
    g_layer_bytes = (unsigned long long)param("LP_PARAM_LAYER_BYTES", -1);
    if (setup_decode(dev))
        return 1;
    /* one token before anything counts: the first launch pays HAMi-core's post-init (host pid, watcher) */
    CUresult r = token_eager();
    if (r == CUDA_SUCCESS)
        r = cuStreamSynchronize(g_stream);
    if (r != CUDA_SUCCESS)
        return fail("first token", r);
    if (ready_fd >= 0 && write(ready_fd, "r", 1) != 1)
        return 1;
    (void)scenario;
    return decode(mode, rate_name, go_fd, rate);
}

/* ---- two tenants, two regions ------------------------------------------------------------------- */

static int tenants(const char *scenario, const char *mode, const char *spec, char **argv) {
    int limits[MAX_TENANTS], n = 0;
    for (const char *p = spec; *p && n < MAX_TENANTS; p++) {
        limits[n++] = atoi(p);
        p = strchr(p, ',');
        if (!p)
            break;
    }
    const char *region = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (n < 2 || !region) {
        fprintf(stderr, "sm_limit: LP_TENANTS needs two limits and the runner's region file\n");
        return 2;
    }
    pid_t pids[MAX_TENANTS];
    int rates[MAX_TENANTS][2], go[2];
    if (pipe(go) != 0)
        return 2;
    for (int i = 0; i < n; i++) {
        int ready[2];
        if (pipe(rates[i]) != 0 || pipe(ready) != 0)
            return 2;
        pids[i] = fork();
        if (pids[i] < 0)
            return 2;
        if (pids[i] == 0) {
            char path[4096], lim[16], fds[64];
            snprintf(path, sizeof path, "%s.tenant%d", region, i);
            snprintf(lim, sizeof lim, "%d", limits[i]);
            snprintf(fds, sizeof fds, "%d,%d,%d", go[0], ready[1], rates[i][1]);
            setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", path, 1); /* its own region, as its own pod */
            setenv("CUDA_DEVICE_SM_LIMIT", lim, 1);
            setenv("LP_TENANT_FDS", fds, 1);
            unlink(path);
            char idx[8];
            snprintf(idx, sizeof idx, "%d", i);
            execl("/proc/self/exe", argv[0], scenario, "--tenant", idx, (char *)NULL);
            _exit(127);
        }
        close(ready[1]);
        char c;
        /* the next tenant starts once this one initialised (host-pid detection must not race) */
        if (read(ready[0], &c, 1) != 1) {
            fprintf(stderr, "sm_limit: tenant %d (SM %d) died before it was ready\n", i, limits[i]);
            for (int k = 0; k <= i; k++)
                kill(pids[k], SIGKILL);
            return 1;
        }
        close(ready[0]);
    }
    for (int i = 0; i < n; i++)
        if (write(go[1], "g", 1) != 1)
            return 2;
    double got[MAX_TENANTS] = {0}, total = 0;
    int ok = 1;
    for (int i = 0; i < n; i++) {
        close(rates[i][1]);
        if (read(rates[i][0], &got[i], sizeof got[i]) != (ssize_t)sizeof got[i])
            ok = 0;
        int st = 0;
        waitpid(pids[i], &st, 0);
        char path[4096];
        snprintf(path, sizeof path, "%s.tenant%d", region, i);
        unlink(path);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            char b[64];
            snprintf(b, sizeof b, WIFSIGNALED(st) ? "signal %d" : "exit %d",
                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            char what[64];
            snprintf(what, sizeof what, "tenant %d (SM %d) measured", i, limits[i]);
            lp_report_check(what, "exit 0", b, 0);
            if (WIFSIGNALED(st))
                raise(WTERMSIG(st)); /* a tenant's crash is the run's */
            ok = 0;
        }
        total += got[i];
    }
    if (!ok || total <= 0)
        return 1;
    char name[64];
    snprintf(name, sizeof name, "share_sm%d", limits[0]);
    report_rate(name, got[0] / total);
    (void)mode;
    return 0;
}

int main(int argc, char **argv) {
    lp_bind_now(argv);
    if (argc < 2) {
        fprintf(stderr, "usage: sm_limit <scenario>\n");
        return 2;
    }
    const char *scenario = argv[1];
    const char *mode = getenv("LP_MODE") ? getenv("LP_MODE") : "eager";
    if (strcmp(mode, "eager") && strcmp(mode, "graph")) {
        fprintf(stderr, "sm_limit: LP_MODE must be eager or graph\n");
        return 2;
    }
    const char *generation = getenv("LP_NEEDS_GENERATION");
    double rate = 0;
    if (argc == 4 && strcmp(argv[2], "--tenant") == 0) {
        int go = -1, ready = -1, out = -1;
        const char *fds = getenv("LP_TENANT_FDS");
        if (!fds || sscanf(fds, "%d,%d,%d", &go, &ready, &out) != 3)
            return 2;
        char name[64];
        snprintf(name, sizeof name, "tenant_sm%s.tok_per_s", getenv("CUDA_DEVICE_SM_LIMIT"));
        int rc = one_process(scenario, mode, name, go, ready, &rate);
        if (rc == 0 && write(out, &rate, sizeof rate) != (ssize_t)sizeof rate)
            rc = 1;
        lp_report_done(scenario, rc == 0);
        return rc;
    }
    if (generation) { /* a scenario about one GPU generation: anything else cannot run it */
        int count;
        CUdevice dev;
        CUcontext ctx;
        char name[256] = "";
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1 ||
            cuDeviceGet(&dev, 0) != CUDA_SUCCESS)
            return 2;
        cuDeviceGetName(name, sizeof name, dev);
        if (!strcasestr(name, generation)) {
            char why[400];
            snprintf(why, sizeof why, "needs a %s GPU (on the simulated driver: LUCEPATCH_FAKECUDA_GENERATION); this is %s",
                     generation, name);
            lp_skip(scenario, why);
        }
        (void)ctx;
    }
    const char *spec = getenv("LP_TENANTS");
    int rc = spec && *spec ? tenants(scenario, mode, spec, argv) : one_process(scenario, mode, "tok_per_s", -1, -1, &rate);
    lp_report_done(scenario, rc == 0);
    return rc;
}
