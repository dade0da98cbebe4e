/* gpu_time: probes of the simulated GPU's time model (lucepatch/native/fakecuda/fakegpu.c), driven by
 * tests/test_fakegpu.py. Each subcommand prints `key value` lines; the test judges them against the
 * model's documented rules. Driver API and NVML only, linked against the simulated driver, which never
 * reads the buffer: BYTES may exceed it (3,840,000,000 bytes take 1 ms on the default generation).
 *
 *   eager N BYTES        N launches of lp_stream_read, then a synchronize: elapsed ns; query right after
 *   graph N BYTES M      N launches captured into a graph, launched M times: nodes, elapsed ns
 *   capture-sync         a stream synchronize inside a capture, then the end of the capture
 *   nested BYTES         kernel + child graph (2 kernels) + IF(1) (1 kernel) + IF(0) + WHILE(1) (1 kernel)
 *   update BYTES         an executable's kernel node set to 2x, then updated from a graph of 3x bytes
 *   util PCT MS          a duty cycle of PCT % for MS ms, then nvmlDeviceGetProcessUtilization (last 1 s)
 *   gen                  the generation's name, SM count, threads per SM and NVML's two utilisation calls
 *   tenant MS BYTES      back-to-back kernels for MS ms (synchronising each 16): kernels done; NVML pids
 */
#include <cuda.h>
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "../../reproducers/sm-limit/lp_kernels_ptx.h"

#define CK(x)                                                                        \
    do {                                                                             \
        CUresult r_ = (x);                                                           \
        if (r_ != CUDA_SUCCESS) {                                                    \
            printf("error %s %d\n", #x, (int)r_);                                    \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static CUfunction g_f;
static CUdeviceptr g_buf, g_sink;
static CUstream g_s;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void setup(void) {
    CUdevice d;
    CUcontext c;
    CUmodule m;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&c, d));
    CK(cuCtxSetCurrent(c));
    CK(cuModuleLoadData(&m, lp_kernels_ptx));
    CK(cuModuleGetFunction(&g_f, m, "lp_stream_read"));
    CK(cuMemAlloc(&g_buf, 1 << 20));
    CK(cuMemAlloc(&g_sink, 8));
    CK(cuStreamCreate(&g_s, CU_STREAM_NON_BLOCKING));
}

static int sms(void) {
    int n;
    CK(cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    return n;
}

static void launch(unsigned long long bytes) {
    void *args[] = {&g_buf, &bytes, &g_sink};
    CK(cuLaunchKernel(g_f, sms(), 1, 1, 256, 1, 1, 0, g_s, args, NULL));
}

static void kernel_params(CUDA_KERNEL_NODE_PARAMS *p, void **args) {
    memset(p, 0, sizeof *p);
    p->func = g_f;
    p->gridDimX = sms(), p->gridDimY = 1, p->gridDimZ = 1;
    p->blockDimX = 256, p->blockDimY = 1, p->blockDimZ = 1;
    p->kernelParams = args;
}

static long long run_exec(CUgraphExec x, int times) {
    long long t0 = now_ns();
    for (int i = 0; i < times; i++)
        CK(cuGraphLaunch(x, g_s));
    CK(cuStreamSynchronize(g_s));
    return now_ns() - t0;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *cmd = argv[1];
    setup();
    if (!strcmp(cmd, "eager")) {
        int n = atoi(argv[2]);
        unsigned long long bytes = strtoull(argv[3], NULL, 10);
        long long t0 = now_ns();
        for (int i = 0; i < n; i++)
            launch(bytes);
        long long launched = now_ns() - t0;
        printf("query %d\n", (int)cuStreamQuery(g_s));
        CK(cuStreamSynchronize(g_s));
        printf("launch_ns %lld\nelapsed_ns %lld\n", launched, now_ns() - t0);
        printf("query_after %d\n", (int)cuStreamQuery(g_s));
    } else if (!strcmp(cmd, "graph")) {
        int n = atoi(argv[2]), m = atoi(argv[4]);
        unsigned long long bytes = strtoull(argv[3], NULL, 10);
        CUgraph g;
        CUgraphExec x;
        CUstreamCaptureStatus st;
        CK(cuStreamBeginCapture(g_s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CK(cuStreamIsCapturing(g_s, &st));
        printf("capturing %d\n", (int)st);
        long long t0 = now_ns();
        for (int i = 0; i < n; i++)
            launch(bytes);
        printf("capture_ns %lld\n", now_ns() - t0);
        CK(cuStreamEndCapture(g_s, &g));
        size_t nodes = 0;
        CK(cuGraphGetNodes(g, NULL, &nodes));
        printf("nodes %zu\n", nodes);
        CK(cuGraphInstantiate(&x, g, 0));
        printf("elapsed_ns %lld\n", run_exec(x, m));
    } else if (!strcmp(cmd, "capture-sync")) {
        CUgraph g = (CUgraph)1;
        CK(cuStreamBeginCapture(g_s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        launch(1 << 20); /* 1 MiB */
        printf("sync %d\n", (int)cuStreamSynchronize(g_s));
        CUstreamCaptureStatus st;
        CK(cuStreamIsCapturing(g_s, &st));
        printf("status %d\n", (int)st);
        printf("end %d\n", (int)cuStreamEndCapture(g_s, &g));
        printf("graph_null %d\n", g == NULL);
        printf("legacy %d\n", (int)cuStreamBeginCapture(0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    } else if (!strcmp(cmd, "nested")) {
        unsigned long long bytes = strtoull(argv[2], NULL, 10);
        void *args[] = {&g_buf, &bytes, &g_sink};
        CUDA_KERNEL_NODE_PARAMS kp;
        kernel_params(&kp, args);
        CUgraph top, child;
        CUgraphNode n;
        CK(cuGraphCreate(&top, 0));
        CK(cuGraphCreate(&child, 0));
        CK(cuGraphAddKernelNode(&n, top, NULL, 0, &kp));
        CK(cuGraphAddKernelNode(&n, child, NULL, 0, &kp));
        CK(cuGraphAddKernelNode(&n, child, NULL, 0, &kp));
        CK(cuGraphAddChildGraphNode(&n, top, NULL, 0, child));
        unsigned int defaults[3] = {1, 0, 1};
        CUgraphConditionalNodeType types[3] = {CU_GRAPH_COND_TYPE_IF, CU_GRAPH_COND_TYPE_IF, CU_GRAPH_COND_TYPE_WHILE};
        for (int i = 0; i < 3; i++) {
            CUgraphConditionalHandle h;
            CUcontext c;
            CK(cuCtxGetCurrent(&c));
            CK(cuGraphConditionalHandleCreate(&h, top, c, defaults[i], CU_GRAPH_COND_ASSIGN_DEFAULT));
            CUgraphNodeParams p;
            memset(&p, 0, sizeof p);
            p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
            p.conditional.handle = h;
            p.conditional.type = types[i];
            p.conditional.size = 1;
            p.conditional.ctx = c;
            CK(cuGraphAddNode(&n, top, NULL, NULL, 0, &p));
            CK(cuGraphAddKernelNode(&n, p.conditional.phGraph_out[0], NULL, 0, &kp));
        }
        size_t nodes = 0;
        CK(cuGraphGetNodes(top, NULL, &nodes));
        printf("top_nodes %zu\n", nodes);
        CUgraphNode all[8];
        nodes = 8;
        CK(cuGraphGetNodes(top, all, &nodes));
        CUgraphNodeType t;
        CK(cuGraphNodeGetType(all[1], &t));
        printf("child_type %d\n", (int)t);
        CUgraph inner;
        CK(cuGraphChildGraphNodeGetGraph(all[1], &inner));
        size_t inner_nodes = 0;
        CK(cuGraphGetNodes(inner, NULL, &inner_nodes));
        printf("child_nodes %zu\n", inner_nodes);
        CUgraphExec x;
        CK(cuGraphInstantiate(&x, top, 0));
        printf("elapsed_ns %lld\n", run_exec(x, 10));
    } else if (!strcmp(cmd, "update")) {
        unsigned long long bytes = strtoull(argv[2], NULL, 10), b2 = 2 * bytes, b3 = 3 * bytes;
        void *args[] = {&g_buf, &bytes, &g_sink};
        CUDA_KERNEL_NODE_PARAMS kp;
        kernel_params(&kp, args);
        CUgraph g;
        CUgraphNode n;
        CUgraphExec x;
        CK(cuGraphCreate(&g, 0));
        CK(cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
        CK(cuGraphInstantiate(&x, g, 0));
        printf("base_ns %lld\n", run_exec(x, 20));
        args[1] = &b2;
        CK(cuGraphExecKernelNodeSetParams(x, n, &kp));
        printf("set_ns %lld\n", run_exec(x, 20));
        args[1] = &b3;
        CK(cuGraphKernelNodeSetParams(n, &kp));
        printf("graph_only_ns %lld\n", run_exec(x, 20)); /* the executable keeps its own copy */
        CUgraphExecUpdateResultInfo info;
        printf("update %d\n", (int)cuGraphExecUpdate(x, g, &info));
        printf("updated_ns %lld\n", run_exec(x, 20));
        CK(cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
        int rc = cuGraphExecUpdate(x, g, &info);
        printf("update_topology %d %d\n", rc, (int)info.result);
    } else if (!strcmp(cmd, "util")) {
        int pct = atoi(argv[2]);
        long long ms = atoll(argv[3]);
        unsigned long long bytes = 3840ULL * 1000000ULL; /* 1 ms on the default generation (never read here) */
        long long kernel = 2000 + 1000000, end = now_ns() + ms * 1000000LL;
        static long long starts[100000];
        int nk = 0;
        while (now_ns() < end && nk < 100000) {
            long long t0 = now_ns();
            starts[nk++] = t0; /* the device is idle: the kernel starts at its launch */
            launch(bytes);
            CK(cuStreamSynchronize(g_s));
            long long busy = now_ns() - t0;
            long long idle = busy * (100 - pct) / pct;
            struct timespec ts = {idle / 1000000000LL, idle % 1000000000LL};
            nanosleep(&ts, NULL);
        }
        /* the share of NVML's window (1 s back from now, ending at the last 10 ms boundary) the probe's own
         * kernels covered, from its own clock: what the simulated NVML must report */
        long long wend = now_ns() / 10000000LL * 10000000LL, wstart = now_ns() - 1000000000LL, covered = 0;
        for (int i = 0; i < nk; i++) {
            long long a = starts[i] > wstart ? starts[i] : wstart, b = starts[i] + kernel < wend ? starts[i] + kernel : wend;
            if (b > a)
                covered += b - a;
        }
        printf("expected %lld\n", covered * 100 / (wend - wstart));
        nvmlDevice_t dev;
        nvmlInit_v2();
        nvmlDeviceGetHandleByIndex_v2(0, &dev);
        struct timeval tv;
        gettimeofday(&tv, NULL);
        unsigned long long last = (unsigned long long)(tv.tv_sec - 1) * 1000000ULL + tv.tv_usec;
        nvmlProcessUtilizationSample_t s[8];
        unsigned int n = 0;
        int size_rc = nvmlDeviceGetProcessUtilization(dev, NULL, &n, last);
        printf("size_query %d %u\n", size_rc, n);
        n = 8;
        int r = nvmlDeviceGetProcessUtilization(dev, s, &n, last);
        printf("result %d\ncount %u\n", r, n);
        for (unsigned i = 0; i < n; i++)
            printf("sample %u %u %d\n", s[i].pid, s[i].smUtil, s[i].pid == (unsigned)getpid());
    } else if (!strcmp(cmd, "gen")) {
        char name[128];
        int t;
        CK(cuDeviceGetName(name, sizeof name, 0));
        CK(cuDeviceGetAttribute(&t, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0));
        printf("name %s\nsm %d\nthreads %d\n", name, sms(), t);
        launch(3840ULL * 50000000ULL); /* 50 ms */
        CK(cuStreamSynchronize(g_s));
        usleep(30000);
        nvmlDevice_t dev;
        nvmlInit_v2();
        nvmlDeviceGetHandleByIndex_v2(0, &dev);
        struct timeval tv;
        gettimeofday(&tv, NULL);
        unsigned long long last = (unsigned long long)(tv.tv_sec - 1) * 1000000ULL + tv.tv_usec; /* as HAMi asks */
        nvmlProcessUtilizationSample_t s[8];
        unsigned int n = 8;
        printf("process_utilization %d\n", (int)nvmlDeviceGetProcessUtilization(dev, s, &n, last));
        nvmlProcessUtilizationInfo_v1_t arr[8];
        nvmlProcessesUtilizationInfo_t info = {nvmlProcessesUtilizationInfo_v1, 0, last, NULL};
        int size_rc = nvmlDeviceGetProcessesUtilizationInfo(dev, &info);
        printf("info_size %d %u\n", size_rc, info.processSamplesCount);
        info.procUtilArray = arr;
        info.processSamplesCount = 8;
        int r = nvmlDeviceGetProcessesUtilizationInfo(dev, &info);
        printf("info %d %u %u\n", r, info.processSamplesCount, r == 0 ? arr[0].smUtil : 0);
        info.version = 0;
        printf("info_version %d\n", (int)nvmlDeviceGetProcessesUtilizationInfo(dev, &info));
    } else if (!strcmp(cmd, "tenant")) {
        long long ms = atoll(argv[2]);
        unsigned long long bytes = strtoull(argv[3], NULL, 10);
        long long end = now_ns() + ms * 1000000LL, done = 0;
        while (now_ns() < end) {
            for (int i = 0; i < 16; i++)
                launch(bytes);
            CK(cuStreamSynchronize(g_s));
            done += 16;
        }
        printf("kernels %lld\n", done);
        nvmlDevice_t dev;
        nvmlInit_v2();
        nvmlDeviceGetHandleByIndex_v2(0, &dev);
        nvmlProcessInfo_t infos[8];
        unsigned int n = 8;
        int rc = nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, infos);
        printf("procs %d %u\n", rc, n);
        fflush(stdout);
        usleep(300000); /* stay alive while the other tenant looks */
    }
    return 0;
}
