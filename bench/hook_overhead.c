/* hook_overhead: ns per cuMemAllocAsync + cuMemFreeAsync pair on an explicit stream, the hot
 * path HAMi-core's allocator fixes touch.  Run bare, or under LD_PRELOAD=libvgpu.so.
 *
 * Usage: hook_overhead ITERATIONS [BYTES]
 * Prints the lucepatch load proof (loaded/driver events) and one line:
 *   @@lucepatch {"event":"bench","iterations":N,"bytes":B,"ns_per_pair":X,"ns_per_pair_best_block":Y}
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lp_report.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    size_t bytes = argc > 2 ? (size_t)atoll(argv[2]) : (1u << 20);
    int count = 0;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    if (iters < 100 || lp_setup_primary("hook_overhead", &count, &dev, &ctx) ||
        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return 2;
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
    printf("@@lucepatch {\"event\":\"bench\",\"iterations\":%ld,\"bytes\":%zu,\"ns_per_pair\":%.1f,"
           "\"ns_per_pair_best_block\":%.1f}\n", 10 * block, bytes, total, best);
    cuStreamDestroy(s);
    cuDevicePrimaryCtxRelease(dev);
    return 0;
}
