/* graph-capture: stream-ordered allocations under CUDA-graph stream capture.
 *
 * The pattern behind torch.cuda.graph with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync and
 * vLLM's graph capture: cuStreamBeginCapture on a stream, cuMemAllocAsync / cuMemAllocFromPoolAsync
 * and cuMemFreeAsync on it (graph memory nodes), cuStreamEndCapture, then the graph is
 * instantiated and launched again and again.
 *
 * While a stream captures, the driver refuses "potentially unsafe" calls made under the capture
 * with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and invalidates the capture
 * (cuThreadExchangeStreamCaptureMode, cuda.h): the capturing thread's own calls, and with a GLOBAL
 * capture every other thread's too. HAMi-core's cuMemAllocAsync hook asks the device's pool for
 * its reserved high-water mark after every allocation to decide what to charge; under PyTorch's
 * capture that query failed with 900, the hook returned the error without freeing what it had
 * allocated (HAMi-core#306), and the capture was invalidated: cuStreamEndCapture then answers
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901) and there is no graph (measured on an H200, driver
 * 580.159.04: docs/evidence/torch-clients-guards.h200.json, cuda-graph-async).
 *
 * Checks: the allocation on the capturing stream succeeds and the capture stays ACTIVE; HAMi's
 * usage (cuMemGetInfo_v2 through the interposer, read in relaxed capture mode so the reading
 * itself cannot disturb the capture) follows the graph allocation while it is allocated and
 * returns when it is freed; the capture ends with a graph that instantiates and replays.
 * Usage: graph_capture <scenario>    exit 0 = passed, 1 = a check failed, 2 = setup/usage error
 * Parameter: LP_PARAM_BYTES (reproducer.toml [params.bytes]) = the size of each allocation.
 */
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lp_report.h"

#define LAUNCHES 3

static CUcontext g_ctx;
static CUstream g_stream; /* the capturing stream */
static long long g_bytes;
static int g_ok = 1;

static void check(const char *name, CUresult want, CUresult got) {
    if (!lp_check_result(name, want, got))
        g_ok = 0;
}

static void check_eq(const char *name, long long want, long long got) {
    if (!lp_check_eq(name, want, got))
        g_ok = 0;
}

static long long param_bytes(const char *env) {
    const char *v = getenv(env);
    char *end = NULL;
    if (!v || !*v) {
        fprintf(stderr, "graph_capture: %s is not set (a declared parameter: lucepatch sets it)\n", env);
        exit(2);
    }
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || *end || n <= 0) {
        fprintf(stderr, "graph_capture: %s=%s is not a positive integer\n", env, v);
        exit(2);
    }
    return n;
}

/* HAMi's usage, read in relaxed mode: a read of our own must never be what breaks a capture */
static long long used_relaxed(void) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return -1;
    long long u = lp_used_bytes();
    cuThreadExchangeStreamCaptureMode(&mode);
    return u;
}

static void check_capturing(const char *name, CUstreamCaptureStatus want) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = cuStreamIsCapturing(g_stream, &st);
    check("cuStreamIsCapturing", CUDA_SUCCESS, r);
    check_eq(name, want, st);
}

/* End the capture; the graph must come back, instantiate and replay LAUNCHES times */
static void end_and_replay(void) {
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    check("cuStreamEndCapture", CUDA_SUCCESS, cuStreamEndCapture(g_stream, &graph));
    check_eq("cuStreamEndCapture returned a graph", 1, graph != NULL);
    if (!graph)
        return;
    check("cuGraphInstantiateWithFlags", CUDA_SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
    for (int i = 0; exec && i < LAUNCHES; i++)
        check("cuGraphLaunch", CUDA_SUCCESS, cuGraphLaunch(exec, g_stream));
    check("cuStreamSynchronize after the replays", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    if (exec)
        check("cuGraphExecDestroy", CUDA_SUCCESS, cuGraphExecDestroy(exec));
    check("cuGraphDestroy", CUDA_SUCCESS, cuGraphDestroy(graph));
}

/* An allocation and its free captured on g_stream, in `mode`; charged while allocated */
static void capture_alloc_free(CUstreamCaptureMode mode) {
    CUdeviceptr p = 0;
    long long before = used_relaxed();
    check("cuStreamBeginCapture", CUDA_SUCCESS, cuStreamBeginCapture(g_stream, mode));
    check("cuMemAllocAsync on the capturing stream", CUDA_SUCCESS, cuMemAllocAsync(&p, (size_t)g_bytes, g_stream));
    check_capturing("the capture is still active after the allocation", CU_STREAM_CAPTURE_STATUS_ACTIVE);
    check_eq("usage grows by the captured allocation", before + g_bytes, used_relaxed());
    if (p)
        check("cuMemFreeAsync on the capturing stream", CUDA_SUCCESS, cuMemFreeAsync(p, g_stream));
    check_eq("usage after the captured free is back", before, used_relaxed());
    end_and_replay();
    check_eq("usage after the replays is back", before, used_relaxed());
}

/* ---- scenarios ------------------------------------------------------------------------------ */

/* every version: an empty capture ends, instantiates and replays; an allocation outside any
 * capture is charged and released */
static void scenario_control(void) {
    CUdeviceptr p = 0;
    long long before = lp_used_bytes();
    check("cuMemAllocAsync", CUDA_SUCCESS, cuMemAllocAsync(&p, 64ull << 20, g_stream));
    check_eq("usage grows by the allocation", before + (64ll << 20), lp_used_bytes());
    if (p)
        check("cuMemFreeAsync", CUDA_SUCCESS, cuMemFreeAsync(p, g_stream));
    check("cuStreamSynchronize", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage after the free is back", before, lp_used_bytes());
    check("cuStreamBeginCapture (global)", CUDA_SUCCESS, cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    check_capturing("the stream captures", CU_STREAM_CAPTURE_STATUS_ACTIVE);
    end_and_replay();
    check_capturing("the stream no longer captures", CU_STREAM_CAPTURE_STATUS_NONE);
}

/* PyTorch's default (capture_error_mode="global") */
static void scenario_capture_global(void) { capture_alloc_free(CU_STREAM_CAPTURE_MODE_GLOBAL); }

static void scenario_capture_thread_local(void) { capture_alloc_free(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL); }

/* relaxed: nothing is forbidden, but the graph's allocation must still be charged */
static void scenario_capture_relaxed(void) { capture_alloc_free(CU_STREAM_CAPTURE_MODE_RELAXED); }

/* the graph's output: allocated in the capture, freed after a replay, outside the graph */
static void scenario_capture_kept(void) {
    CUdeviceptr p = 0;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    long long before = used_relaxed();
    check("cuStreamBeginCapture (global)", CUDA_SUCCESS, cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    check("cuMemAllocAsync on the capturing stream", CUDA_SUCCESS, cuMemAllocAsync(&p, (size_t)g_bytes, g_stream));
    check_capturing("the capture is still active after the allocation", CU_STREAM_CAPTURE_STATUS_ACTIVE);
    check("cuStreamEndCapture", CUDA_SUCCESS, cuStreamEndCapture(g_stream, &graph));
    check_eq("cuStreamEndCapture returned a graph", 1, graph != NULL);
    if (graph)
        check("cuGraphInstantiateWithFlags", CUDA_SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
    if (exec)
        check("cuGraphLaunch", CUDA_SUCCESS, cuGraphLaunch(exec, g_stream));
    check("cuStreamSynchronize after the launch", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage holds the graph's allocation", before + g_bytes, lp_used_bytes());
    if (p && exec)
        check("cuMemFreeAsync of the graph's allocation, outside the graph", CUDA_SUCCESS, cuMemFreeAsync(p, g_stream));
    check("cuStreamSynchronize after the free", CUDA_SUCCESS, cuStreamSynchronize(g_stream));
    check_eq("usage after the free is back", before, lp_used_bytes());
    if (exec)
        cuGraphExecDestroy(exec);
    if (graph)
        cuGraphDestroy(graph);
}

/* an allocation from a created pool (cudaMallocFromPoolAsync) captured, freed in the graph */
static void scenario_capture_pool(void) {
    CUmemoryPool pool;
    CUmemPoolProps props;
    CUdeviceptr p = 0;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    check("cuMemPoolCreate on device 0", CUDA_SUCCESS, cuMemPoolCreate(&pool, &props));
    long long before = used_relaxed();
    check("cuStreamBeginCapture (global)", CUDA_SUCCESS, cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    check("cuMemAllocFromPoolAsync on the capturing stream", CUDA_SUCCESS,
          cuMemAllocFromPoolAsync(&p, (size_t)g_bytes, pool, g_stream));
    check_capturing("the capture is still active after the allocation", CU_STREAM_CAPTURE_STATUS_ACTIVE);
    check_eq("usage grows by the captured pool allocation", before + g_bytes, used_relaxed());
    if (p)
        check("cuMemFreeAsync on the capturing stream", CUDA_SUCCESS, cuMemFreeAsync(p, g_stream));
    check_eq("usage after the captured free is back", before, used_relaxed());
    end_and_replay();
    check_eq("usage after the replays is back", before, used_relaxed());
    check("cuMemPoolDestroy", CUDA_SUCCESS, cuMemPoolDestroy(pool));
}

/* A GLOBAL capture on the main thread forbids other threads' potentially unsafe calls too: on an H100
 * (driver 580.159.04, bare driver, no HAMi) a worker thread in the default (global) mode got 900 for
 * cuMemAllocAsync on its own, non-capturing stream, and main's capture was invalidated. A thread that
 * must allocate during another's global capture switches itself to relaxed mode
 * (cuThreadExchangeStreamCaptureMode, cuda.h), as this worker does; then nothing it calls is
 * prohibited, and what HAMi-core's hook calls on its behalf must not invalidate main's capture either
 * (vLLM, PyTorch: a side thread allocates while the main thread captures). */
static CUstream g_side;
static void *worker_alloc(void *arg) {
    CUdeviceptr p = 0;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    (void)arg;
    cuCtxSetCurrent(g_ctx);
    check("worker: cuThreadExchangeStreamCaptureMode (relaxed)", CUDA_SUCCESS, cuThreadExchangeStreamCaptureMode(&mode));
    check("worker: cuMemAllocAsync on its own stream", CUDA_SUCCESS, cuMemAllocAsync(&p, (size_t)g_bytes, g_side));
    if (p)
        check("worker: cuMemFreeAsync", CUDA_SUCCESS, cuMemFreeAsync(p, g_side));
    check("worker: cuThreadExchangeStreamCaptureMode (back)", CUDA_SUCCESS, cuThreadExchangeStreamCaptureMode(&mode));
    return NULL;
}

static void scenario_other_thread_global(void) {
    pthread_t t;
    long long before = lp_used_bytes();
    check("cuStreamCreate (the worker's stream)", CUDA_SUCCESS, cuStreamCreate(&g_side, CU_STREAM_NON_BLOCKING));
    check("cuStreamBeginCapture (global)", CUDA_SUCCESS, cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    if (pthread_create(&t, NULL, worker_alloc, NULL) != 0) {
        g_ok = 0;
        return;
    }
    pthread_join(t, NULL);
    check_capturing("main's capture is still active after the worker's allocation", CU_STREAM_CAPTURE_STATUS_ACTIVE);
    end_and_replay();
    check("cuStreamSynchronize (the worker's stream)", CUDA_SUCCESS, cuStreamSynchronize(g_side));
    check_eq("usage after the worker's free is back", before, lp_used_bytes());
    cuStreamDestroy(g_side);
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"control", scenario_control},
    {"capture-global", scenario_capture_global},
    {"capture-thread-local", scenario_capture_thread_local},
    {"capture-relaxed", scenario_capture_relaxed},
    {"capture-kept", scenario_capture_kept},
    {"capture-pool", scenario_capture_pool},
    {"other-thread-global", scenario_other_thread_global},
};

int main(int argc, char **argv) {
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0)
            run = scenarios[i].run;
    if (!run) {
        fprintf(stderr, "usage: %s control|capture-global|capture-thread-local|capture-relaxed|capture-kept|"
                        "capture-pool|other-thread-global\n", argv[0]);
        return 2;
    }
    lp_bind_now(argv);
    g_bytes = param_bytes("LP_PARAM_BYTES");
    int count = 0;
    CUdevice dev0;
    if (lp_setup_primary("graph_capture", &count, &dev0, &g_ctx))
        return 2;
    if (cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        fprintf(stderr, "graph_capture: cuStreamCreate failed\n");
        return 2;
    }
    run();
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(dev0);
    lp_report_done(argv[1], g_ok);
    return g_ok ? 0 : 1;
}
