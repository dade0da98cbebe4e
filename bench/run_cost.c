/* run_cost: where one verification run's time goes, measured from inside the process.
 *
 *   run_cost cuinit | ctx | nvml | hash
 *
 *   cuinit  cuInit(0) and nothing else
 *   ctx     cuInit, the primary context of device 0 made current, a 4 MiB cuMemAlloc/cuMemFree
 *           (what every reproducer does before its scenario), the context released
 *   nvml    ctx preceded by what HAMi-core's init asks NVML (nvmlInit_v2, the device handle, the
 *           compute processes), with no interposer
 *   hash    ctx, then the sha256 of the mapped libcuda.so.1 exactly as every reproducer's load
 *           report computes it (reproducers/common/lp_report.h)
 *
 * Prints one line: @@run_cost {"t_main":ns,"t_cuinit":ns,...} with CLOCK_MONOTONIC nanoseconds
 * (the clock Python's time.monotonic_ns reads), so the parent can place spawn and exit around them.
 * With LD_PRELOAD=libvgpu.so, HAMi-core's whole init (NVML, host pid detection, its own primary
 * context retain/release) happens inside cuInit.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lp_report.h"

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* NVML through dlopen (no nvml.h needed; the three calls HAMi-core's set_task_pid makes) */
static int nvml_like_hami(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h)
        return -1;
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*procs)(void *, unsigned *, void *) = (int (*)(void *, unsigned *, void *))dlsym(
        h, "nvmlDeviceGetComputeRunningProcesses");
    if (!init || !handle || !procs || init() != 0)
        return -2;
    void *dev = NULL;
    if (handle(0, &dev) != 0)
        return -3;
    static unsigned char buf[64 * 1024];
    unsigned n = 64;
    procs(dev, &n, buf);
    return 0;
}

static const char *mapped_libcuda(char *out, size_t n) {
    FILE *m = fopen("/proc/self/maps", "r");
    char line[4096];
    out[0] = 0;
    while (m && fgets(line, sizeof line, m)) {
        char *p = strchr(line, '/');
        if (!p)
            continue;
        p[strcspn(p, "\n")] = 0;
        if (strncmp(lp_basename(p), "libcuda.so", 10) == 0) {
            if (!realpath(p, out))
                snprintf(out, n, "%s", p);
            break;
        }
    }
    if (m)
        fclose(m);
    return out;
}

int main(int argc, char **argv) {
    long long t_main = now_ns(), t_nvml = 0, t_cuinit, t_ctx = 0, t_alloc = 0, t_hash = 0, t_release = 0;
    const char *mode = argc > 1 ? argv[1] : "";
    int want_ctx = strcmp(mode, "cuinit") != 0;
    if (!strcmp(mode, "nvml")) {
        int r = nvml_like_hami();
        if (r)
            fprintf(stderr, "run_cost: NVML failed (%d)\n", r);
        t_nvml = now_ns();
    }
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "run_cost: cuInit failed\n");
        return 2;
    }
    t_cuinit = now_ns();
    long long size = 0;
    char path[4096] = "";
    if (want_ctx) {
        CUdevice dev;
        CUcontext ctx;
        CUdeviceptr p = 0;
        if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
            fprintf(stderr, "run_cost: no context\n");
            return 2;
        }
        t_ctx = now_ns();
        if (cuMemAlloc(&p, 4u << 20) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
            fprintf(stderr, "run_cost: alloc failed\n");
            return 2;
        }
        t_alloc = now_ns();
        if (!strcmp(mode, "hash")) {
            char hex[65];
            mapped_libcuda(path, sizeof path);
            FILE *f = fopen(path, "rb");
            if (f) {
                fseek(f, 0, SEEK_END);
                size = ftell(f);
                fclose(f);
            }
            lp_sha256_file(path, hex);
            t_hash = now_ns();
        }
        cuDevicePrimaryCtxRelease(dev);
        t_release = now_ns();
    }
    printf("@@run_cost {\"mode\":\"%s\",\"t_main\":%lld,\"t_nvml\":%lld,\"t_cuinit\":%lld,\"t_ctx\":%lld,"
           "\"t_alloc\":%lld,\"t_hash\":%lld,\"t_release\":%lld,\"t_end\":%lld,\"libcuda_bytes\":%lld,\"libcuda\":",
           mode, t_main, t_nvml, t_cuinit, t_ctx, t_alloc, t_hash, t_release, now_ns(), size);
    lp_json_str(stdout, path);
    printf("}\n");
    fflush(stdout);
    return 0;
}
