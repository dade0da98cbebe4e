/* driver-semantics: the driver behaviours the simulated driver must model, one probe each,
 * run under the trace interposer on a real GPU (no HAMi) so CI can compare the simulation with
 * the hardware call by call.  Every probe runs on a thread with NO current context unless its
 * name says "main".  Exit 0 always (the trace is the result), 2 if no device.
 *
 * Usage: driver-semantics [all|pools|queries]
 *   all    contexts, stream-ordered allocation on explicit and default streams, VMM (the
 *          original probe; its recorded trace is driver-semantics.all.h200.jsonl)
 *   pools  stream-ordered memory pools: cuMemPoolCreate, cuMemAllocFromPoolAsync from a thread
 *          without a context, the used/reserved attributes through free, synchronize (release
 *          threshold 0, then "keep everything"), cuMemPoolTrimTo, watermark resets, and
 *          cuMemPoolDestroy with an allocation outstanding.  Sizes are multiples of 64 MiB so
 *          that reservation granularities up to that size give the same byte counts.
 *   queries  what HAMi-core's hooks must forward faithfully, on the main thread with a context:
 *          cuMemGetInfo_v2 with a NULL free, a NULL total and both NULL (OptiX, llama.cpp);
 *          managed memory and its pointer attributes (IS_MANAGED through cuPointerGetAttribute,
 *          cuPointerGetAttributes on it, and with NULL data: an error the hook must return
 *          before touching outputs); cuMemFree of a pointer no allocation returned, and of a
 *          stream-ordered allocation (a synchronous free of cuMemAllocAsync memory).
 *   capture  stream capture (CUDA graphs), on the main thread with a context: for each capture
 *          mode (global, thread-local, relaxed), each call HAMi-core's allocation hooks make (pool
 *          attribute and pool lookups, the stream's device and context, the current device, the
 *          device count, cuMemGetInfo_v2) and the documented unsafe ones (cuMemAlloc,
 *          cuCtxSynchronize) made inside a fresh capture, then the stream's capture status
 *          (cuStreamIsCapturing: still active, or invalidated) and cuStreamEndCapture's answer;
 *          the same calls from another thread (a context current) during a global and a
 *          thread-local capture on main, and on the capturing thread after switching it to
 *          relaxed (cuThreadExchangeStreamCaptureMode); cuStreamSynchronize and cuStreamQuery of
 *          the capturing stream; and graph memory nodes: cuMemAllocAsync and
 *          cuMemAllocFromPoolAsync captured (the pools' attributes read, in relaxed mode, before
 *          and after), freed in the graph, then the graph instantiated and launched twice.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
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

/* ---- pools ---------------------------------------------------------------------------------- */

#define POOL_BYTES (64ull << 20)
static CUmemoryPool g_mpool;

static void pool_attrs(CUmemoryPool p) {
    cuuint64_t v;
    cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
    cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v);
    cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v);
    cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v);
}

static void *pool_ctxless(void *arg) {
    (void)arg;
    CUdeviceptr p = 0, q = 0;
    /* an explicit stream orders the allocation; no current context is needed */
    if (cuMemAllocFromPoolAsync(&p, POOL_BYTES, g_mpool, g_stream) == CUDA_SUCCESS) {
        pool_attrs(g_mpool); /* used and reserved: the allocation */
        cuMemFreeAsync(p, g_stream);
    }
    cuMemAllocFromPoolAsync(&q, POOL_BYTES, g_mpool, NULL); /* default stream, no context: 201 */
    CUmemoryPool dp = NULL;
    cuDeviceGetDefaultMemPool(&dp, g_dev); /* answers without a context (an interposer asks here) */
    cuuint64_t thr = 1;
    cuMemPoolGetAttribute(g_mpool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr);
    return NULL;
}

static void pools(void) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = g_dev;
    if (cuMemPoolCreate(&g_mpool, &props) != CUDA_SUCCESS)
        return;
    pool_attrs(g_mpool); /* a new pool holds nothing */
    pthread_t t;
    pthread_create(&t, NULL, pool_ctxless, NULL);
    pthread_join(t, NULL);
    cuStreamSynchronize(g_stream); /* release threshold 0: the freed block goes back */
    pool_attrs(g_mpool);

    cuuint64_t keep_all = UINT64_MAX, zero = 0, one = 1;
    cuMemPoolSetAttribute(g_mpool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all);
    CUdeviceptr p = 0;
    if (cuMemAllocFromPoolAsync(&p, POOL_BYTES, g_mpool, g_stream) == CUDA_SUCCESS)
        cuMemFreeAsync(p, g_stream);
    cuStreamSynchronize(g_stream);
    pool_attrs(g_mpool); /* the block stays reserved */
    cuMemPoolTrimTo(g_mpool, 0);
    pool_attrs(g_mpool); /* nothing outstanding: all of it is released */
    cuMemPoolSetAttribute(g_mpool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
    cuMemPoolSetAttribute(g_mpool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
    cuMemPoolSetAttribute(g_mpool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &one); /* only 0 is legal */
    pool_attrs(g_mpool);

    /* destroying a pool with an allocation outstanding returns at once; the free still works */
    p = 0;
    if (cuMemAllocFromPoolAsync(&p, POOL_BYTES, g_mpool, g_stream) == CUDA_SUCCESS) {
        cuMemPoolDestroy(g_mpool);
        cuMemFreeAsync(p, g_stream);
    } else {
        cuMemPoolDestroy(g_mpool);
    }
    cuStreamSynchronize(g_stream);
}

static void queries(void) {
    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    cuMemGetInfo_v2(NULL, &t);
    cuMemGetInfo_v2(&f, NULL);
    cuMemGetInfo_v2(NULL, NULL);

    CUdeviceptr dev_p = 0, man_p = 0;
    cuMemAlloc(&dev_p, 2 << 20);
    cuMemAllocManaged(&man_p, 2 << 20, CU_MEM_ATTACH_GLOBAL);
    int managed = -1, type = -1, ordinal = -1;
    cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, man_p);
    cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, man_p);
    cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, man_p);
    managed = -1;
    cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dev_p);
    cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev_p);
    cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev_p + 4096); /* interior */
    CUpointer_attribute ats[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned int mt = 0;
    int im = 0;
    void *data[2] = {&mt, &im};
    cuPointerGetAttributes(2, ats, data, man_p);
    cuPointerGetAttributes(2, ats, NULL, man_p);           /* NULL data */
    cuPointerGetAttributes(2, ats, data, (CUdeviceptr)8);  /* not a CUDA pointer */

    cuMemFree(man_p);
    cuMemFree(dev_p);
    cuMemFree(dev_p);  /* freed already: no allocation there any more */
    cuMemFree((CUdeviceptr)0x10000); /* never allocated */
    CUdeviceptr ap = 0;
    if (cuMemAllocAsync(&ap, 2 << 20, g_stream) == CUDA_SUCCESS) {
        cuStreamSynchronize(g_stream);
        cuMemFree(ap); /* a synchronous free of stream-ordered memory */
    }
}

/* ---- capture ---------------------------------------------------------------------------------- */

static CUcontext g_ctx;
static CUmemoryPool g_default_pool;

/* The calls probed under a capture; each is made once per capture. */
enum { Q_POOL_ATTR, Q_GET_MEMPOOL, Q_DEFAULT_POOL, Q_STREAM_DEVICE, Q_STREAM_CTX, Q_CTX_DEVICE, Q_DEVICE_COUNT,
       Q_MEMINFO, Q_MEMALLOC, Q_CTX_SYNC, Q_COUNT };

static void query(int q) {
    cuuint64_t v = 0;
    CUmemoryPool pool;
    CUdevice d = -999;
    CUcontext c;
    int n = 0;
    size_t f = 0, t = 0;
    CUdeviceptr p = 0;
    switch (q) {
    case Q_POOL_ATTR: cuMemPoolGetAttribute(g_default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v); break;
    case Q_GET_MEMPOOL: cuDeviceGetMemPool(&pool, g_dev); break;
    case Q_DEFAULT_POOL: cuDeviceGetDefaultMemPool(&pool, g_dev); break;
    case Q_STREAM_DEVICE: cuStreamGetDevice(g_stream, &d); break;
    case Q_STREAM_CTX: cuStreamGetCtx(g_stream, &c); break;
    case Q_CTX_DEVICE: cuCtxGetDevice(&d); break;
    case Q_DEVICE_COUNT: cuDeviceGetCount(&n); break;
    case Q_MEMINFO: cuMemGetInfo_v2(&f, &t); break;
    case Q_MEMALLOC:
        if (cuMemAlloc(&p, 2 << 20) == CUDA_SUCCESS) {
            CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED; /* give it back without a second probe */
            cuThreadExchangeStreamCaptureMode(&m);
            cuMemFree(p);
            cuThreadExchangeStreamCaptureMode(&m);
        }
        break;
    case Q_CTX_SYNC: cuCtxSynchronize(); break;
    }
}

static void end_capture(void) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph g = NULL;
    cuStreamIsCapturing(g_stream, &st);
    if (cuStreamEndCapture(g_stream, &g) == CUDA_SUCCESS && g)
        cuGraphDestroy(g);
}

static int g_query;
static void *other_thread_query(void *arg) {
    (void)arg;
    cuCtxSetCurrent(g_ctx);
    query(g_query);
    return NULL;
}

static void capture_pool_attrs(CUmemoryPool p) {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    cuuint64_t v = 0;
    cuThreadExchangeStreamCaptureMode(&m);
    cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
    cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v);
    cuThreadExchangeStreamCaptureMode(&m);
}

static void capture(void) {
    static const CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                                CU_STREAM_CAPTURE_MODE_RELAXED};
    cuDeviceGetDefaultMemPool(&g_default_pool, g_dev);
    for (int mi = 0; mi < 3; mi++)
        for (int q = 0; q < Q_COUNT; q++) {
            cuStreamBeginCapture(g_stream, modes[mi]);
            query(q);
            end_capture();
        }
    /* another thread, during a global and a thread-local capture on main */
    for (int mi = 0; mi < 2; mi++)
        for (int q = 0; q < Q_COUNT; q++) {
            pthread_t t;
            cuStreamBeginCapture(g_stream, modes[mi]);
            g_query = q;
            pthread_create(&t, NULL, other_thread_query, NULL);
            pthread_join(t, NULL);
            end_capture();
        }
    /* the capturing thread itself in relaxed mode, under its global capture */
    for (int q = 0; q < Q_COUNT; q++) {
        CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
        cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
        cuThreadExchangeStreamCaptureMode(&m);
        query(q);
        cuThreadExchangeStreamCaptureMode(&m);
        end_capture();
    }
    /* calls that wait for the capturing stream */
    cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    cuStreamSynchronize(g_stream);
    end_capture();
    cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    cuStreamQuery(g_stream);
    end_capture();
    /* graph memory nodes: captured allocations, freed in the graph, replayed */
    CUmemoryPool pool;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    cuMemPoolCreate(&pool, &props);
    CUdeviceptr a = 0, b = 0;
    CUgraph g = NULL;
    CUgraphExec e = NULL;
    capture_pool_attrs(g_default_pool);
    capture_pool_attrs(pool);
    cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    cuMemAllocAsync(&a, 64ull << 20, g_stream);
    cuMemAllocFromPoolAsync(&b, 64ull << 20, pool, g_stream);
    capture_pool_attrs(g_default_pool);
    capture_pool_attrs(pool);
    if (a)
        cuMemFreeAsync(a, g_stream);
    if (b)
        cuMemFreeAsync(b, g_stream);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuStreamIsCapturing(g_stream, &st);
    if (cuStreamEndCapture(g_stream, &g) == CUDA_SUCCESS && g &&
        cuGraphInstantiateWithFlags(&e, g, 0) == CUDA_SUCCESS) {
        cuGraphLaunch(e, g_stream);
        cuGraphLaunch(e, g_stream);
        cuStreamSynchronize(g_stream);
        capture_pool_attrs(g_default_pool);
        capture_pool_attrs(pool);
        cuGraphExecDestroy(e);
    }
    if (g)
        cuGraphDestroy(g);
    cuMemPoolDestroy(pool);
}

int main(int argc, char **argv) {
    CUcontext ctx;
    int n = 0;
    int pool_probe = argc > 1 && strcmp(argv[1], "pools") == 0;
    int query_probe = argc > 1 && strcmp(argv[1], "queries") == 0;
    int capture_probe = argc > 1 && strcmp(argv[1], "capture") == 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1 ||
        cuDeviceGet(&g_dev, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "driver-semantics: no device\n");
        return 2;
    }
    CUdevice before = -999;
    cuCtxGetDevice(&before); /* main thread, before any context: 201, untouched */
    cuDevicePrimaryCtxRetain(&ctx, g_dev);
    cuCtxSetCurrent(ctx);
    g_ctx = ctx;
    CUdevice cur = -999;
    cuCtxGetDevice(&cur); /* main with a context: written */
    cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING);
    if (pool_probe) {
        pools();
    } else if (query_probe) {
        queries();
    } else if (capture_probe) {
        capture();
    } else {
        pthread_t t;
        pthread_create(&t, NULL, ctxless, NULL);
        pthread_join(t, NULL);
    }
    cuStreamSynchronize(g_stream);
    cuStreamDestroy(g_stream);
    cuDevicePrimaryCtxRelease(g_dev);
    return 0;
}
