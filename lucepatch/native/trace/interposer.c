/* Driver-call trace interposer: LD_PRELOAD it (with NO HAMi loaded) in front of a reproducer to
 * record, for each CUDA driver call the program makes: the entry point, which thread (main or
 * another), whether a context was current on that thread, the CUresult, and whether the driver
 * wrote the call's output argument.  Recorded on a real GPU, these traces are the ground truth
 * the simulated driver is checked against in CI (tests/fakecuda/traces/*.h200.jsonl).
 *
 * For a call with one output the interposer also records the written value (the output's bytes
 * as an unsigned integer); the comparison reads it by what it means (exact ids, a context's
 * identity, null vs not), since addresses differ between any two runs.
 *
 * "Written" is detected without changing what the program sees: the output is saved, filled with
 * a sentinel, the call is made, the output compared with the sentinel, and restored when the
 * driver left it alone (so a program relying on "output untouched" still sees its own value).
 *
 * Memory-pool attribute calls also record which attribute ("attr", the CUmemPool_attribute
 * number) and, for a successful cuMemPoolGetAttribute, the value read ("value"): the pool's
 * used/reserved bytes are part of what the simulated driver must model.
 *
 * Environment: LUCEPATCH_TRACE_FILE=<path> (appended, one JSON object per line).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -2;
/* The process the recorder started; a forked child (e.g. shared-region's second process) is
 * labelled "child" so the comparison can order the two processes' calls independently. */
static pid_t g_root_pid;

__attribute__((constructor)) static void remember_root(void) { g_root_pid = getpid(); }

static void *real(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) {
        fprintf(stderr, "lucepatch-trace: %s not found in the next library\n", name);
        abort();
    }
    return p;
}

static int ctx_current(void) {
    static CUresult (*get)(CUcontext *);
    if (!get)
        get = (CUresult(*)(CUcontext *))real("cuCtxGetCurrent");
    CUcontext c = NULL;
    return get(&c) == CUDA_SUCCESS && c != NULL;
}

/* `extra`: "" or more JSON members, each starting with a comma */
static void emit_extra(const char *call, int ctx, CUresult res, int written, const char *extra) {
    pthread_mutex_lock(&g_lock);
    if (g_fd == -2) {
        const char *path = getenv("LUCEPATCH_TRACE_FILE");
        g_fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
    }
    if (g_fd >= 0) {
        char line[384];
        int main_thread = syscall(SYS_gettid) == getpid();
        int n = snprintf(line, sizeof line,
                         "{\"call\":\"%s\",\"proc\":\"%s\",\"thread\":\"%s\",\"ctx\":%s,\"result\":%d,"
                         "\"written\":%s%s}\n", call, getpid() == g_root_pid ? "root" : "child",
                         main_thread ? "main" : "other", ctx ? "true" : "false", (int)res,
                         written < 0 ? "null" : (written ? "true" : "false"), extra);
        if (write(g_fd, line, n) != n) {
            /* a short trace is detected by the comparison; nothing else to do here */
        }
    }
    pthread_mutex_unlock(&g_lock);
}

static void emit(const char *call, int ctx, CUresult res, int written) { emit_extra(call, ctx, res, written, ""); }

/* A call with one output: its value (the output's bytes as an unsigned integer) when written,
 * else null; lucepatch/native/trace compares it by what it means (VALUE_CLASS). */
static void emit_value(const char *call, int ctx, CUresult res, int written, unsigned long long value) {
    char extra[48];
    if (written == 1)
        snprintf(extra, sizeof extra, ",\"value\":%llu", value);
    else
        snprintf(extra, sizeof extra, ",\"value\":null");
    emit_extra(call, ctx, res, written, extra);
}

/* Output argument handling: save, poison, call, compare, restore if untouched. */
#define OUT_BEGIN(ptr)                                        \
    unsigned char saved_[64], sentinel_[64];                  \
    size_t sz_ = (ptr) ? sizeof(*(ptr)) : 0;                  \
    if (sz_ > sizeof saved_) sz_ = sizeof saved_;             \
    memset(sentinel_, 0xa5, sizeof sentinel_);                \
    if (sz_) { memcpy(saved_, (ptr), sz_); memcpy((ptr), sentinel_, sz_); }
#define OUT_END(ptr, written)                                 \
    int written = -1;                                         \
    unsigned long long value_ = 0;                            \
    if (sz_) {                                                \
        written = memcmp((ptr), sentinel_, sz_) != 0;         \
        if (!written) memcpy((ptr), saved_, sz_);             \
        else memcpy(&value_, (ptr), sz_ < sizeof value_ ? sz_ : sizeof value_); \
    }

/* A call with no output argument. */
#define TRACE0(name, params, args)                                   \
    CUresult name params {                                           \
        static CUresult(*next) params;                               \
        if (!next) next = (CUresult(*) params)real(#name);           \
        int ctx_ = ctx_current();                                    \
        CUresult r = next args;                                      \
        emit(#name, ctx_, r, -1);                                    \
        return r;                                                    \
    }

/* A call whose output argument is `out`. */
#define TRACE1(name, params, args, out)                              \
    CUresult name params {                                           \
        static CUresult(*next) params;                               \
        if (!next) next = (CUresult(*) params)real(#name);           \
        int ctx_ = ctx_current();                                    \
        OUT_BEGIN(out)                                               \
        CUresult r = next args;                                      \
        OUT_END(out, w_)                                             \
        emit_value(#name, ctx_, r, w_, value_);                      \
        return r;                                                    \
    }

TRACE0(cuInit, (unsigned int flags), (flags))
TRACE1(cuDriverGetVersion, (int *v), (v), v)
TRACE1(cuDeviceGetCount, (int *n), (n), n)
TRACE1(cuDeviceGet, (CUdevice *d, int ordinal), (d, ordinal), d)
TRACE1(cuDeviceTotalMem_v2, (size_t *b, CUdevice d), (b, d), b)
TRACE1(cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d), (c, d), c)
TRACE0(cuDevicePrimaryCtxRelease_v2, (CUdevice d), (d))
TRACE0(cuCtxSetCurrent, (CUcontext c), (c))
TRACE1(cuCtxGetDevice, (CUdevice *d), (d), d)
TRACE0(cuCtxPushCurrent_v2, (CUcontext c), (c))
TRACE1(cuCtxPopCurrent_v2, (CUcontext *c), (c), c)
TRACE0(cuCtxSynchronize, (void), ())
TRACE1(cuMemAlloc_v2, (CUdeviceptr *p, size_t n), (p, n), p)
TRACE0(cuMemFree_v2, (CUdeviceptr p), (p))
TRACE1(cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s), p)
TRACE0(cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))
TRACE1(cuMemGetInfo_v2, (size_t *f, size_t *t), (f, t), f)
TRACE1(cuStreamCreate, (CUstream *s, unsigned int flags), (s, flags), s)
TRACE0(cuStreamDestroy_v2, (CUstream s), (s))
TRACE0(cuStreamSynchronize, (CUstream s), (s))
TRACE1(cuStreamGetCtx, (CUstream s, CUcontext *c), (s, c), c)
TRACE1(cuDeviceGetMemPool, (CUmemoryPool *p, CUdevice d), (p, d), p)
TRACE1(cuMemGetAllocationGranularity,
       (size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags f), (g, prop, f), g)
TRACE1(cuMemCreate, (CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                     unsigned long long f), (h, n, prop, f), h)
TRACE0(cuMemRelease, (CUmemGenericAllocationHandle h), (h))
TRACE1(cuMemAddressReserve, (CUdeviceptr *p, size_t n, size_t a, CUdeviceptr addr, unsigned long long f),
       (p, n, a, addr, f), p)
TRACE0(cuMemAddressFree, (CUdeviceptr p, size_t n), (p, n))
TRACE0(cuMemMap, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f),
       (p, n, off, h, f))
TRACE0(cuMemUnmap, (CUdeviceptr p, size_t n), (p, n))
TRACE0(cuMemSetAccess, (CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t c), (p, n, d, c))

TRACE1(cuMemPoolCreate, (CUmemoryPool *p, const CUmemPoolProps *props), (p, props), p)
TRACE0(cuMemPoolDestroy, (CUmemoryPool p), (p))
TRACE1(cuMemAllocFromPoolAsync, (CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s), p)
TRACE0(cuMemPoolTrimTo, (CUmemoryPool p, size_t keep), (p, keep))
TRACE1(cuDeviceGetDefaultMemPool, (CUmemoryPool *p, CUdevice d), (p, d), p)
TRACE0(cuDeviceSetMemPool, (CUdevice d, CUmemoryPool p), (d, p))
TRACE1(cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned int flags), (p, n, flags), p)
/* stream capture (CUDA graphs) and the stream queries a capture may forbid */
TRACE0(cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode mode), (s, mode))
TRACE1(cuStreamEndCapture, (CUstream s, CUgraph *g), (s, g), g)
TRACE1(cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus *st), (s, st), st)
TRACE1(cuGraphInstantiateWithFlags, (CUgraphExec *e, CUgraph g, unsigned long long flags), (e, g, flags), e)
TRACE0(cuGraphLaunch, (CUgraphExec e, CUstream s), (e, s))
TRACE0(cuGraphExecDestroy, (CUgraphExec e), (e))
TRACE0(cuGraphDestroy, (CUgraph g), (g))
TRACE0(cuStreamQuery, (CUstream s), (s))
TRACE1(cuStreamGetDevice, (CUstream s, CUdevice *d), (s, d), d)
/* the arrays' slots are not watched: the result is what the comparison needs */
TRACE0(cuPointerGetAttributes, (unsigned int n, CUpointer_attribute *a, void **data, CUdeviceptr p), (n, a, data, p))

/* The reuse attributes are ints, the byte counts cuuint64_t (cuda.h). */
static size_t pool_attr_size(CUmemPool_attribute a) {
    switch (a) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: return sizeof(int);
    default: return sizeof(cuuint64_t);
    }
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    static CUresult (*next)(CUmemoryPool, CUmemPool_attribute, void *);
    if (!next)
        next = (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))real("cuMemPoolGetAttribute");
    int ctx_ = ctx_current();
    size_t sz = v ? pool_attr_size(a) : 0;
    unsigned char saved[8], sentinel[8];
    memset(sentinel, 0xa5, sizeof sentinel);
    if (sz) {
        memcpy(saved, v, sz);
        memcpy(v, sentinel, sz);
    }
    CUresult r = next(pool, a, v);
    int w = sz ? memcmp(v, sentinel, sz) != 0 : -1;
    if (w == 0)
        memcpy(v, saved, sz);
    char extra[96];
    if (r == CUDA_SUCCESS && w == 1) {
        unsigned long long val = sz == sizeof(int) ? (unsigned long long)*(int *)v : *(cuuint64_t *)v;
        snprintf(extra, sizeof extra, ",\"attr\":%d,\"value\":%llu", (int)a, val);
    } else {
        snprintf(extra, sizeof extra, ",\"attr\":%d", (int)a);
    }
    emit_extra("cuMemPoolGetAttribute", ctx_, r, w, extra);
    return r;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    static CUresult (*next)(CUmemoryPool, CUmemPool_attribute, void *);
    if (!next)
        next = (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))real("cuMemPoolSetAttribute");
    int ctx_ = ctx_current();
    CUresult r = next(pool, a, v);
    char extra[32];
    snprintf(extra, sizeof extra, ",\"attr\":%d", (int)a);
    emit_extra("cuMemPoolSetAttribute", ctx_, r, -1, extra);
    return r;
}

/* cuPointerGetAttribute: which attribute, and for the small-integer ones whose meaning does not
 * depend on addresses (memory type, managed, device ordinal, mapped) the value written. */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr ptr) {
    static CUresult (*next)(void *, CUpointer_attribute, CUdeviceptr);
    if (!next)
        next = (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))real("cuPointerGetAttribute");
    int ctx_ = ctx_current();
    int small = a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || a == CU_POINTER_ATTRIBUTE_IS_MANAGED ||
                a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL || a == CU_POINTER_ATTRIBUTE_MAPPED;
    size_t sz = data && small ? sizeof(int) : 0;
    unsigned char saved[4], sentinel[4];
    memset(sentinel, 0xa5, sizeof sentinel);
    if (sz) {
        memcpy(saved, data, sz);
        memcpy(data, sentinel, sz);
    }
    CUresult r = next(data, a, ptr);
    int w = sz ? memcmp(data, sentinel, sz) != 0 : -1;
    if (w == 0)
        memcpy(data, saved, sz);
    char extra[96];
    if (w == 1)
        snprintf(extra, sizeof extra, ",\"attr\":%d,\"value\":%d", (int)a, *(int *)data);
    else
        snprintf(extra, sizeof extra, ",\"attr\":%d,\"value\":null", (int)a);
    emit_extra("cuPointerGetAttribute", ctx_, r, w, extra);
    return r;
}

/* cuThreadExchangeStreamCaptureMode: *mode is in and out (the new mode in, the previous one out), so
 * it cannot be poisoned; "value" is the mode written back, "mode" the one asked for. */
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    static CUresult (*next)(CUstreamCaptureMode *);
    if (!next)
        next = (CUresult(*)(CUstreamCaptureMode *))real("cuThreadExchangeStreamCaptureMode");
    int ctx_ = ctx_current();
    int asked = mode ? (int)*mode : -1;
    CUresult r = next(mode);
    char extra[64];
    if (r == CUDA_SUCCESS && mode)
        snprintf(extra, sizeof extra, ",\"mode\":%d,\"value\":%d", asked, (int)*mode);
    else
        snprintf(extra, sizeof extra, ",\"mode\":%d,\"value\":null", asked);
    emit_extra("cuThreadExchangeStreamCaptureMode", ctx_, r, mode ? r == CUDA_SUCCESS : -1, extra);
    return r;
}

/* cuDeviceGetName writes a string: "written" means the first byte changed from the sentinel. */
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    static CUresult (*next)(char *, int, CUdevice);
    if (!next)
        next = (CUresult(*)(char *, int, CUdevice))real("cuDeviceGetName");
    int ctx_ = ctx_current();
    char saved = len > 0 ? name[0] : 0;
    if (len > 0)
        name[0] = (char)0xa5;
    CUresult r = next(name, len, d);
    int w = len > 0 ? name[0] != (char)0xa5 : -1;
    if (w == 0)
        name[0] = saved;
    emit("cuDeviceGetName", ctx_, r, w);
    return r;
}
