/* driver-semantics: the driver behaviours the simulated driver must model, one probe each,
 * run under the trace interposer on a real GPU (no HAMi) so CI can compare the simulation with
 * the hardware call by call.  Every probe runs on a thread with NO current context unless its
 * name says "main".  Exit 0 always (the trace is the result), 2 if no device.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static CUstream g_stream;
static CUdevice g_dev;

static void *ctxless(void *arg) {
    (void)arg;
    CUdevice dev = -999; /* HAMi-core PR #172's probe: the driver must leave this untouched */
    cuCtxGetDevice(&dev);
    CUcontext c = NULL;
    cuStreamGetCtx(g_stream, &c); /* an explicit stream names its context from any thread */
    CUdeviceptr p = 0;
    if (cuMemAllocAsync(&p, 1 << 20, g_stream) == CUDA_SUCCESS) /* served via the stream's context */
        cuMemFreeAsync(p, g_stream);
    CUdeviceptr q = 0;
    cuMemAllocAsync(&q, 1 << 20, NULL); /* legacy default stream: needs a current context */
    CUdeviceptr r = 0;
    cuMemAlloc(&r, 1 << 20); /* needs a current context */
    size_t free_b = 0, total_b = 0;
    cuMemGetInfo(&free_b, &total_b); /* needs a current context */

    /* VMM: cuMemCreate needs no context (the NCCL host-NUMA probe and ggml's pool do this) */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_dev;
    size_t gran = 0;
    cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CUmemGenericAllocationHandle h = 0;
    if (gran && cuMemCreate(&h, gran, &prop, 0) == CUDA_SUCCESS) {
        CUdeviceptr va = 0;
        if (cuMemAddressReserve(&va, gran, 0, 0, 0) == CUDA_SUCCESS) {
            if (cuMemMap(va, gran, 0, h, 0) == CUDA_SUCCESS) {
                CUmemAccessDesc acc;
                memset(&acc, 0, sizeof acc);
                acc.location = prop.location;
                acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
                cuMemSetAccess(va, gran, &acc, 1);
                cuMemUnmap(va, gran);
            }
            cuMemAddressFree(va, gran);
        }
        cuMemRelease(h);
    }
    CUmemAllocationProp host = prop;
    host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    host.location.id = 0;
    host.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle hh = 0;
    if (cuMemCreate(&hh, gran ? gran : (2 << 20), &host, 0) == CUDA_SUCCESS)
        cuMemRelease(hh);
    return NULL;
}

int main(void) {
    CUcontext ctx;
    int n = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1 ||
        cuDeviceGet(&g_dev, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "driver-semantics: no device\n");
        return 2;
    }
    CUdevice before = -999;
    cuCtxGetDevice(&before); /* main thread, before any context: 201, untouched */
    cuDevicePrimaryCtxRetain(&ctx, g_dev);
    cuCtxSetCurrent(ctx);
    CUdevice cur = -999;
    cuCtxGetDevice(&cur); /* main with a context: written */
    cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING);
    pthread_t t;
    pthread_create(&t, NULL, ctxless, NULL);
    pthread_join(t, NULL);
    cuStreamSynchronize(g_stream);
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(g_dev);
    return 0;
}
