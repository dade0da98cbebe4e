/* hook_overhead: the host cost of a hot-path call, bare or under LD_PRELOAD=libvgpu.so.
 *   alloc   ns per cuMemAllocAsync + cuMemFreeAsync pair on an explicit stream (the allocator fixes)
 *   launch  ns per cuLaunchKernel of an empty kernel (the SM limiter's launch path)
 *   graph   ns per cuGraphLaunch of a one-kernel graph (the SM limiter's graph path, issue 38)
 * For launch and graph only the calls are timed: every 256 calls the stream is synchronised outside
 * the clock, so a full launch queue (the device's time) never enters the figure.
 *
 * Usage: hook_overhead ITERATIONS [BYTES] [OP]       (OP: alloc, launch or graph; default alloc)
 * Prints the lucepatch load proof (loaded/driver events) and one line:
 *   @@lucepatch {"event":"bench","op":OP,"iterations":N,"bytes":B,"ns_per_pair":X,"ns_per_pair_best_block":Y}
 * (ns_per_pair is ns per call for launch and graph.)
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lp_report.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* an empty kernel (PTX, JIT-compiled by the driver; the simulated driver models it as a fixed time) */
static const char empty_ptx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry lp_empty()\n{\n\tret;\n}\n";

#define BATCH 256

/* ns per call of `op` over iters calls (launch or graph): each batch timed, synchronised outside */
static int launch_loop(const char *op, long iters, CUfunction f, CUgraphExec x, CUstream s, double *per_call,
                       double *best) {
    double total = 0;
    *best = 1e300;
    for (long done = 0; done < iters;) {
        long n = iters - done < BATCH ? iters - done : BATCH;
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            CUresult r = op[0] == 'l' ? cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) : cuGraphLaunch(x, s);
            if (r != CUDA_SUCCESS) {
                fprintf(stderr, "hook_overhead: %s failed (%d)\n", op, (int)r);
                return 1;
            }
        }
        double t = now_ns() - t0;
        total += t;
        if (t / n < *best)
            *best = t / n;
        cuStreamSynchronize(s);
        done += n;
    }
    *per_call = total / iters;
    return 0;
}

static int bench_launch(const char *op, long iters, CUstream s) {
    CUmodule m;
    CUfunction f;
    CUgraphExec x = NULL;
    if (cuModuleLoadData(&m, empty_ptx) != CUDA_SUCCESS || cuModuleGetFunction(&f, m, "lp_empty") != CUDA_SUCCESS) {
        fprintf(stderr, "hook_overhead: cannot load the empty kernel\n");
        return 2;
    }
    if (op[0] == 'g') {
        CUgraph g;
        if (cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS ||
            cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS ||
            cuStreamEndCapture(s, &g) != CUDA_SUCCESS || cuGraphInstantiate(&x, g, 0) != CUDA_SUCCESS) {
            fprintf(stderr, "hook_overhead: cannot capture the one-kernel graph\n");
            return 2;
        }
    }
    double per, best, warm_per, warm_best;
    if (launch_loop(op, iters / 10 < 1000 ? 1000 : iters / 10, f, x, s, &warm_per, &warm_best)) /* warm-up */
        return 1;
    if (launch_loop(op, iters, f, x, s, &per, &best))
        return 1;
    printf("@@lucepatch {\"event\":\"bench\",\"op\":\"%s\",\"iterations\":%ld,\"bytes\":0,\"ns_per_pair\":%.1f,"
           "\"ns_per_pair_best_block\":%.1f}\n", op, iters, per, best);
    return 0;
}


int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    size_t bytes = argc > 2 ? (size_t)atoll(argv[2]) : (1u << 20);
    const char *op = argc > 3 ? argv[3] : "alloc";
    int count = 0;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    if (iters < 100 || lp_setup_primary("hook_overhead", &count, &dev, &ctx) ||
        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return 2;
    if (strcmp(op, "launch") == 0 || strcmp(op, "graph") == 0)
        return bench_launch(op, iters, s);
    if (strcmp(op, "alloc") != 0) {
        fprintf(stderr, "hook_overhead: OP is alloc, launch or graph, not %s\n", op);
        return 2;
    }
    /* warm-up: pool creation, first-call binding, HAMi's lazy init */
    for (int i = 0; i < 1000; i++) {
        CUdeviceptr p;
        if (cuMemAllocAsync(&p, bytes, s) != CUDA_SUCCESS || cuMemFreeAsync(p, s) != CUDA_SUCCESS) {
            fprintf(stderr, "hook_overhead: alloc/free failed during warm-up\n");
            return 1;
        }
    }
    cuStreamSynchronize(s);
    long block = iters / 10;
    double best = 1e300, t0 = now_ns();
    for (int b = 0; b < 10; b++) {
        double tb = now_ns();
        for (long i = 0; i < block; i++) {
            CUdeviceptr p;
            if (cuMemAllocAsync(&p, bytes, s) != CUDA_SUCCESS || cuMemFreeAsync(p, s) != CUDA_SUCCESS) {
                fprintf(stderr, "hook_overhead: alloc/free failed\n");
                return 1;
            }
        }
        double per = (now_ns() - tb) / block;
        if (per < best)
            best = per;
    }
    double total = (now_ns() - t0) / (10.0 * block);
    cuStreamSynchronize(s);
    printf("@@lucepatch {\"event\":\"bench\",\"op\":\"alloc\",\"iterations\":%ld,\"bytes\":%zu,\"ns_per_pair\":%.1f,"
           "\"ns_per_pair_best_block\":%.1f}\n", 10 * block, bytes, total, best);
    cuStreamDestroy(s);
    cuDevicePrimaryCtxRelease(dev);
    return 0;
}
