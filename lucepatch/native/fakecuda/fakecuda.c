/* fakecuda: a simulated libcuda.so.1 for GPU-less machines.
 *
 * It models the documented driver semantics that HAMi-core's bug family depends on
 * (docs/field-notes.md §2-3), nothing more:
 *   - a per-thread context stack; cuCtxGetDevice on a thread without a current context
 *     returns CUDA_ERROR_INVALID_CONTEXT (201) and leaves *device untouched;
 *   - synchronous allocation needs a current context (else 201);
 *   - stream-ordered calls on an explicit stream use the stream's context, so they work on a
 *     context-less thread; the default stream on such a thread is 201;
 *   - cuMemCreate / granularity queries need no context;
 *   - stream-ordered memory pools (cuMemPoolCreate, cuMemAllocFromPoolAsync, ...): the memory
 *     comes from the pool's device, not the stream's; a pool's backing memory (its
 *     "reserved" memory) is what the device loses, freed blocks stay reserved until a
 *     synchronize releases what exceeds the release threshold, or cuMemPoolTrimTo;
 *   - CUDA_VISIBLE_DEVICES selects and orders the devices CUDA enumerates, NVML ignores it (the
 *     CUDA ordinal and the NVML index of one GPU differ; see fc_setup);
 *   - cuMemGetInfo_v2 writes only the outputs it is given (see fc_cuMemGetInfo_v2);
 *   - managed memory (cuMemAllocManaged) and the pointer-attribute queries (cuPointerGetAttribute,
 *     cuPointerGetAttributes), see the managed-memory section;
 *   - stream capture (see the stream-capture section): the per-thread capture mode, which calls a
 *     capture forbids (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is invalidated), and
 *     stream-ordered allocations on a capturing stream becoming graph memory nodes;
 *   - what the H200 showed beyond the documentation (tests/fakecuda/traces): an allocation keeps
 *     one granule of the reported free memory back (FC_HEADROOM), cuMemFree of pool memory leaves
 *     the pool counting it (fc_cuMemFree_v2), VMM calls on a range with nothing mapped (fc_cuMemUnmap,
 *     fc_cuMemSetAccess).
 * Device pointers are fake addresses; nothing is ever dereferenced.
 *
 * Rules: never call dlsym here (libvgpu.so replaces dlsym), and link with -Wl,-Bsymbolic
 * (libvgpu.so exports the same names and would otherwise interpose our internal calls).
 * Every entry point is an `fc_*` function exported under the driver name with FC_EXPORT, and
 * listed in the cuGetProcAddress table at the bottom.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_common.h"

#define FC_CTX_MAGIC 0x4c504358u    /* "LPCX" */
#define FC_STREAM_MAGIC 0x4c505354u /* "LPST" */
#define FC_POOL_MAGIC 0x4c50504fu   /* "LPPO" */
#define FC_GRANULARITY (2ULL << 20)
/* A pool's reservation grows in chunks of this size, as the H200 shows: a 16 MiB cuMemAllocAsync
 * made the default pool reserve 32 MiB (docs/evidence/hami-core-v2.5-all.h200.json,
 * shared-region:control at 54b1305, which charges the reservation: +32 MiB), a 64 MiB
 * cuMemAllocFromPoolAsync reserved 64 MiB (tests/fakecuda/traces/driver-semantics.pools.h200.jsonl),
 * and bare-driver cuMemGetInfo moved by more than 8 MiB allocations (multi-device traces). */
#define FC_POOL_CHUNK (32ULL << 20)
/* The driver does not hand out the last of the memory cuMemGetInfo_v2 reports free: an allocation
 * must leave this much free, and free is reported without it. Observed on H200, driver 580.159.04,
 * tests/fakecuda/traces/vmm-release.limit.h200.jsonl: with 149,557,477,376 bytes free, cuMemCreate
 * of the whole granules of it (149,556,297,728 bytes: 1,179,648 left) is CUDA_ERROR_OUT_OF_MEMORY
 * and one granule succeeds, so the headroom is more than 1.125 MiB; one granule (2 MiB) is the
 * smallest whole-granule headroom that explains it. meminfo-null.null-total-at-limit.h200.jsonl and
 * device-index.control.h200.jsonl show the same for cuMemAlloc of exactly the free memory (refused,
 * free unchanged, one byte then allocated). The H200 did not show whether pool growth
 * (cuMemAllocAsync) keeps it too; it is taken to (inference: one rule per device). */
#define FC_HEADROOM FC_GRANULARITY
#define FC_MAX_CTX_STACK 64

struct CUctx_st {
    uint32_t magic;
    int dev;
    int primary;
    unsigned int flags;
};

struct CUstream_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    unsigned int flags;
};

/* A stream-ordered memory pool (a device's default pool or one from cuMemPoolCreate). */
struct CUmemPoolHandle_st {
    uint32_t magic;
    int dev;         /* owning device; -1 for a host pool (charged to no GPU) */
    int is_default;  /* a device's default pool: cannot be destroyed */
    int destroyed;   /* cuMemPoolDestroy called; freed once no allocation is outstanding */
    int outstanding; /* allocations not yet freed */
    size_t max_size; /* CUmemPoolProps::maxSize; 0 = no pool-specific cap */
    size_t used_current, used_high, reserved_current, reserved_high, release_threshold;
    size_t used_stale; /* blocks freed with cuMemFree that USED_MEM_CURRENT still counts (fc_cuMemFree_v2) */
    struct CUmemPoolHandle_st *next; /* list of created pools */
};

struct fc_alloc {
    CUdeviceptr ptr;
    size_t size;
    int dev;                          /* -1: host memory (a host pool) */
    struct CUmemPoolHandle_st *pool;  /* NULL for cuMemAlloc; else the pool it came from */
    struct fc_alloc *next;
    int managed;                      /* cuMemAllocManaged: migrates on demand, no device charge */
    struct CUctx_st *ctx;             /* the context it was allocated in (pointer attributes) */
    uint64_t buffer_id;               /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation */
};

struct fc_handle { /* a cuMemCreate handle */
    uint64_t id;
    size_t size;
    int device; /* -1 for host locations: not charged to any GPU */
    int released;
    int maps;
    struct fc_handle *next;
};

struct fc_mapping {
    CUdeviceptr ptr;
    size_t size;
    struct fc_handle *h;
    struct fc_mapping *next;
};

struct fc_va { /* a cuMemAddressReserve range */
    CUdeviceptr ptr;
    size_t size;
    struct fc_va *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_initialized;
static int g_ndev = 2;  /* GPUs in the machine: what NVML enumerates */
/* What CUDA enumerates: ordinal i is the machine's GPU g_vis[i] (CUDA_VISIBLE_DEVICES). Every
 * per-device array below is indexed by the CUDA ordinal; only the NVML side (the exported helpers)
 * speaks machine indices. */
static int g_nvis = 2;
static int g_vis[FC_MAX_DEVICES];
static size_t g_ctx_overhead;
static struct CUctx_st g_primary[FC_MAX_DEVICES];
static int g_primary_refs[FC_MAX_DEVICES];
static unsigned int g_primary_flags[FC_MAX_DEVICES];
static int g_created_ctx[FC_MAX_DEVICES]; /* live cuCtxCreate contexts per device */
static struct CUmemPoolHandle_st g_pool[FC_MAX_DEVICES]; /* default pools */
static struct CUmemPoolHandle_st *g_cur_pool[FC_MAX_DEVICES];
static struct CUmemPoolHandle_st *g_created_pools;
static size_t g_used[FC_MAX_DEVICES];
static uint64_t g_next_addr[FC_MAX_DEVICES];
static uint64_t g_next_host_addr = 0x7f0000000000ULL; /* host-pool allocations */
static uint64_t g_next_va = 0x7e0000000000ULL;
static uint64_t g_next_handle = 1;
static uint64_t g_next_managed_addr = 0x7c0000000000ULL; /* managed allocations */
static uint64_t g_next_buffer_id = 1;
static struct fc_alloc *g_allocs;
static struct fc_handle *g_handles;
static struct fc_mapping *g_maps;
static struct fc_va *g_vas;

static __thread struct CUctx_st *t_stack[FC_MAX_CTX_STACK];
static __thread int t_depth;

/* The machine index of a CUDA_VISIBLE_DEVICES entry, -1 when it names no GPU. Entries are integer
 * indices or UUID strings ("GPU-..."); a UUID may be given by a unique prefix, as the CUDA
 * Programming Guide's "CUDA Environment Variables" describes. */
static int visible_entry(const char *e, size_t n) {
    while (n && (*e == ' ' || *e == '\t')) e++, n--;
    while (n && (e[n - 1] == ' ' || e[n - 1] == '\t')) n--;
    if (n == 0)
        return -1;
    if (n > 4 && strncmp(e, "GPU-", 4) == 0) {
        int found = -1;
        for (int i = 0; i < g_ndev; i++) {
            char uuid[64];
            snprintf(uuid, sizeof uuid, FC_UUID_FORMAT, i);
            if (strncmp(uuid, e, n) == 0) {
                if (found >= 0)
                    return -1; /* an ambiguous prefix names no GPU */
                found = i;
            }
        }
        return found;
    }
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i] < '0' || e[i] > '9' || v > FC_MAX_DEVICES)
            return -1;
        v = v * 10 + (e[i] - '0');
    }
    return v < g_ndev ? v : -1;
}

/* CUDA_VISIBLE_DEVICES (CUDA Programming Guide, "CUDA Environment Variables"): unset, every GPU in
 * machine order; set, only the listed GPUs, enumerated in the order listed, and "if one of the
 * indices is invalid, only the devices whose index precedes the invalid index are visible". An
 * entry repeated is treated as invalid (inference: one GPU cannot have two ordinals). NVML ignores
 * the variable (its indices are the machine's), so the two numberings differ whenever the list is
 * not 0,1,2,... */
static void parse_visible_devices(const char *s) {
    g_nvis = 0;
    if (s == NULL) {
        for (int i = 0; i < g_ndev; i++)
            g_vis[g_nvis++] = i;
        return;
    }
    const char *p = s;
    while (g_nvis < g_ndev) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int d = visible_entry(p, n);
        for (int i = 0; d >= 0 && i < g_nvis; i++)
            if (g_vis[i] == d)
                d = -1;
        if (d < 0)
            break;
        g_vis[g_nvis++] = d;
        if (!comma)
            break;
        p = comma + 1;
    }
}

/* The CUDA ordinal of machine GPU `machine`, -1 when CUDA_VISIBLE_DEVICES hides it. */
static int ordinal_of(int machine) {
    for (int i = 0; i < g_nvis; i++)
        if (g_vis[i] == machine)
            return i;
    return -1;
}

static void fc_gpu_setup(void); /* fakegpu.c: the generation */

static void fc_setup(void) {
    const char *s = getenv("LUCEPATCH_FAKECUDA_DEVICES");
    if (s && *s) {
        int n = atoi(s);
        g_ndev = n < 0 ? 0 : (n > FC_MAX_DEVICES ? FC_MAX_DEVICES : n);
    }
    s = getenv("LUCEPATCH_FAKECUDA_CTX_OVERHEAD_MIB");
    if (s && *s)
        g_ctx_overhead = (size_t)strtoull(s, NULL, 10) << 20;
    parse_visible_devices(getenv("CUDA_VISIBLE_DEVICES"));
    for (int i = 0; i < FC_MAX_DEVICES; i++) {
        g_primary[i] = (struct CUctx_st){FC_CTX_MAGIC, i, 1, 0};
        g_pool[i] = (struct CUmemPoolHandle_st){.magic = FC_POOL_MAGIC, .dev = i, .is_default = 1};
        g_cur_pool[i] = &g_pool[i];
        /* distinct, recognisable address ranges per device; never 0 */
        g_next_addr[i] = 0x700000000000ULL + ((uint64_t)i << 36);
    }
    fc_gpu_setup();
}

static void fc_lazy_setup(void) { pthread_once(&g_once, fc_setup); }

static struct CUctx_st *cur_ctx(void) { return t_depth > 0 ? t_stack[t_depth - 1] : NULL; }

static int valid_ctx(struct CUctx_st *c) { return c && c->magic == FC_CTX_MAGIC; }

static int valid_dev(CUdevice d) { return d >= 0 && d < g_nvis; }

#define NEED_INIT()                           \
    do {                                      \
        if (!g_initialized)                   \
            return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

/* Resolve the context a stream-ordered call runs in: an explicit stream carries its own;
 * the legacy / per-thread default streams (0, 1, 2) mean the calling thread's context. */
static CUresult stream_ctx(CUstream s, struct CUctx_st **out) {
    uintptr_t v = (uintptr_t)s;
    if (v == 0 || v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD) {
        struct CUctx_st *c = cur_ctx();
        if (!c)
            return CUDA_ERROR_INVALID_CONTEXT;
        *out = c;
        return CUDA_SUCCESS;
    }
    if (s->magic != FC_STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s->ctx;
    return CUDA_SUCCESS;
}

static size_t round_up(size_t v, size_t unit) { return (v + unit - 1) / unit * unit; }

/* caller holds g_lock; can device `dev` back `bytes` more and still keep FC_HEADROOM free? */
static int device_fits(int dev, size_t bytes) {
    return g_used[dev] + g_ctx_overhead + bytes + FC_HEADROOM <= FC_DEVICE_MEM;
}

/* Graph memory nodes (the stream-capture section below); fakegpu.c's graphs and executables hold them. */
struct fc_graph_mem;
static struct fc_graph_mem *graph_mem_ref(struct fc_graph_mem *m);
static void graph_mem_unref(struct fc_graph_mem *m);
static void graph_mem_launch(CUgraphNodeType op, struct fc_graph_mem *m, CUdeviceptr free_ptr);

/* The simulated GPU's time: kernels, graphs, stream capture, events, and the utilisation NVML reports
 * (issue 38). Part of this translation unit: it uses the helpers above. */
#include "fakegpu.c"

/* ---- exported helpers for fakenvml ---------------------------------------------------- */

FC_API int lucepatch_fakecuda_device_count(void) {
    fc_lazy_setup();
    return g_ndev;
}

/* NVML's side: `machine` is a machine index (NVML ignores CUDA_VISIBLE_DEVICES). */
FC_API int lucepatch_fakecuda_device_has_context(int machine) {
    fc_lazy_setup();
    int dev = machine >= 0 && machine < g_ndev ? ordinal_of(machine) : -1;
    if (dev < 0)
        return 0;
    pthread_mutex_lock(&g_lock);
    int r = g_primary_refs[dev] > 0 || g_created_ctx[dev] > 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API unsigned long long lucepatch_fakecuda_device_used(int machine) {
    fc_lazy_setup();
    int dev = machine >= 0 && machine < g_ndev ? ordinal_of(machine) : -1;
    if (dev < 0)
        return 0; /* hidden from this process's CUDA: it holds nothing there */
    pthread_mutex_lock(&g_lock);
    unsigned long long r = g_used[dev];
    if (g_primary_refs[dev] > 0 || g_created_ctx[dev] > 0)
        r += g_ctx_overhead;
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ---- init, version, errors -------------------------------------------------------------- */

static CUresult fc_cuInit(unsigned int flags) {
    fc_lazy_setup();
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (g_gen_bad) /* LUCEPATCH_FAKECUDA_GENERATION names no generation (said on stderr) */
        return CUDA_ERROR_NOT_SUPPORTED;
    if (g_nvis == 0)
        return CUDA_ERROR_NO_DEVICE;
    g_initialized = 1;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDriverGetVersion(int *v) {
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

struct fc_errname {
    CUresult code;
    const char *name;
    const char *text;
};

static const struct fc_errname g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult fc_cuGetErrorName(CUresult e, const char **s) {
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == e) {
            *s = g_errors[i].name;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fc_cuGetErrorString(CUresult e, const char **s) {
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == e) {
            *s = g_errors[i].text;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fc_cuGetExportTable(const void **table, const CUuuid *id) {
    (void)id;
    if (table)
        *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED; /* cudart needs private tables: out of scope */
}

/* ---- devices ---------------------------------------------------------------------------- */

static CUresult fc_cuDeviceGetCount(int *n) {
    NEED_INIT();
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = g_nvis;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGet(CUdevice *d, int ordinal) {
    NEED_INIT();
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetName(char *name, int len, CUdevice d) {
    NEED_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    strncpy(name, g_gen->name, (size_t)len - 1);
    name[len - 1] = 0;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    NEED_INIT();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = FC_DEVICE_MEM;
    return CUDA_SUCCESS;
}

static void fill_uuid(CUuuid *u, int d) {
    /* stable per machine GPU; matches fakenvml's "GPU-..." string (FC_UUID_FORMAT) */
    static const unsigned char base[16] = {0x1c, 0xe9, 0xa7, 0xc4, 0x00, 0x00, 0x4f, 0xa1,
                                           0x8b, 0x00, 0x6c, 0x75, 0x63, 0x65, 0x70, 0x00};
    memcpy(u->bytes, base, 16);
    u->bytes[15] = (unsigned char)g_vis[d];
}

static CUresult fc_cuDeviceGetUuid(CUuuid *u, CUdevice d) {
    NEED_INIT();
    if (!u)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    fill_uuid(u, d);
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    NEED_INIT();
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (a) { /* the generation's profile (fakegpu.c; H200-like by default); anything not listed reads 0 */
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = g_gen->sm; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = g_gen->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = g_gen->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = g_gen->threads_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = 0x18 + g_vis[d]; break; /* the machine's slot */
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

/* ---- contexts ----------------------------------------------------------------------------- */

static CUresult push_ctx(struct CUctx_st *c) {
    if (t_depth >= FC_MAX_CTX_STACK)
        return CUDA_ERROR_UNKNOWN;
    t_stack[t_depth++] = c;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    g_primary_refs[d]++;
    fc_gpu_ctx_changed(d, 1); /* NVML lists the process machine-wide (fakegpu.c) */
    pthread_mutex_unlock(&g_lock);
    *pctx = &g_primary[d]; /* retaining does NOT make it current */
    return CUDA_SUCCESS;
}

static CUresult fc_cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    NEED_INIT();
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (g_primary_refs[d] <= 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else
        g_primary_refs[d]--;
    fc_gpu_ctx_changed(d, g_primary_refs[d] > 0 || g_created_ctx[d] > 0);
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult fc_cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
    NEED_INIT();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    *flags = g_primary_flags[d];
    *active = g_primary_refs[d] > 0;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
    NEED_INIT();
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    g_primary_flags[d] = flags;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDevicePrimaryCtxReset_v2(CUdevice d) {
    NEED_INIT();
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    g_primary_flags[d] = 0;
    return CUDA_SUCCESS;
}

static CUresult create_ctx(CUcontext *pctx, unsigned int flags, CUdevice d) {
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (struct CUctx_st){FC_CTX_MAGIC, d, 0, flags};
    pthread_mutex_lock(&g_lock);
    g_created_ctx[d]++;
    fc_gpu_ctx_changed(d, 1);
    pthread_mutex_unlock(&g_lock);
    CUresult r = push_ctx(c); /* a created context becomes current */
    *pctx = c;
    return r;
}

static CUresult fc_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice d) {
    (void)p;
    return create_ctx(pctx, flags, d);
}

static CUresult fc_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice d) {
    return create_ctx(pctx, flags, d);
}

static CUresult fc_cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags, CUdevice d) {
    (void)params;
    (void)n;
    return create_ctx(pctx, flags, d);
}

static CUresult fc_cuCtxDestroy_v2(CUcontext ctx) {
    NEED_INIT();
    if (!valid_ctx(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* remove from this thread's stack (other threads' stacks: undefined behaviour, as in CUDA) */
    for (int i = 0; i < t_depth; i++)
        if (t_stack[i] == ctx) {
            memmove(&t_stack[i], &t_stack[i + 1], (size_t)(t_depth - i - 1) * sizeof t_stack[0]);
            t_depth--;
            i--;
        }
    pthread_mutex_lock(&g_lock);
    g_created_ctx[ctx->dev]--;
    fc_gpu_ctx_changed(ctx->dev, g_primary_refs[ctx->dev] > 0 || g_created_ctx[ctx->dev] > 0);
    pthread_mutex_unlock(&g_lock);
    ctx->magic = 0;
    free(ctx);
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxSetCurrent(CUcontext ctx) {
    NEED_INIT();
    if (ctx == NULL) {
        if (t_depth > 0)
            t_depth--; /* replaces the top with "nothing" */
        return CUDA_SUCCESS;
    }
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (t_depth == 0)
        return push_ctx(ctx);
    t_stack[t_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxGetCurrent(CUcontext *pctx) {
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = cur_ctx();
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxPushCurrent_v2(CUcontext ctx) {
    NEED_INIT();
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return push_ctx(ctx);
}

static CUresult fc_cuCtxPopCurrent_v2(CUcontext *pctx) {
    NEED_INIT();
    if (t_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = t_stack[--t_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

/* The heart of the bug family: no current context -> 201, *device NOT written. */
static CUresult fc_cuCtxGetDevice(CUdevice *device) {
    NEED_INIT();
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->dev;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxGetFlags(unsigned int *flags) {
    NEED_INIT();
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxGetApiVersion(CUcontext ctx, unsigned int *v) {
    NEED_INIT();
    if (!ctx)
        ctx = cur_ctx();
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

static void pools_release_over_threshold(void);

/* A synchronize waits for the context's kernels (fakegpu.c) and is where pools give memory above
 * their release threshold back (see the pool section). */
static CUresult fc_cuCtxSynchronize(void) {
    NEED_INIT();
    if (!cur_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    /* it waits for every stream of the context: the stream-capture section (measured on the H100) */
    if (fc_gpu_ctx_capturing(cur_ctx()))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    fc_gpu_wait_ctx(cur_ctx());
    pthread_mutex_lock(&g_lock);
    pools_release_over_threshold();
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* ---- stream capture --------------------------------------------------------------------------
 *
 * The capture itself (cuStreamBeginCapture_v2, cuStreamEndCapture, cuStreamIsCapturing,
 * cuStreamGetCaptureInfo, the graph a capture builds, struct fc_queue) is fakegpu.c's; this section models what
 * capture means for the rest of the driver, from cuda.h 13.0 (cuThreadExchangeStreamCaptureMode,
 * cuStreamBeginCapture, the CUDA_ERROR_STREAM_CAPTURE_* codes) and the CUDA Programming Guide
 * ("Graph Memory Nodes"):
 *   - each thread has a capture interaction mode, GLOBAL by default, swapped by
 *     cuThreadExchangeStreamCaptureMode. "Potentially unsafe API calls" are prohibited on a thread
 *     whose mode is GLOBAL when it has an ongoing capture not begun RELAXED or when any other thread
 *     has a capture begun GLOBAL; THREAD_LOCAL: only its own captures not begun RELAXED count;
 *     RELAXED: never prohibited. A prohibited call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 *     (900, "the operation is not permitted when the stream is capturing") and "will invalidate all
 *     the conflicting captures" (cuCtxRecordEvent's note): the captures that prohibited it; their
 *     cuStreamEndCapture then returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901) and no graph;
 *   - which calls are potentially unsafe: the documentation's example is cudaMalloc ("not enqueued
 *     asynchronously to a stream, and is not observed by stream capture"); modelled as such are the
 *     synchronous allocation calls (cuMemAlloc, cuMemAllocManaged, cuMemFree) and
 *     cuMemPoolGetAttribute (measured on an H100 80GB HBM3, driver 580.159.04, CUDA 13.0: the capture
 *     probe's trace tests/fakecuda/traces/driver-semantics.capture.h200.jsonl, and on an H200 under
 *     PyTorch's capture, docs/evidence/torch-clients-guards.h200.json), and a stream-ordered
 *     allocation (cuMemAllocAsync) on a stream that is NOT capturing: on the H100, during a global
 *     capture on the main thread, another thread (its mode global, the default) got 900 for a
 *     cuMemAllocAsync on its own non-capturing stream and main's capture was invalidated
 *     (graph-capture.other-thread-global, recorded on the bare driver); cuMemAllocFromPoolAsync on a
 *     non-capturing stream is taken to be the same (inference: the same allocator; not measured),
 *     cuMemFreeAsync on one is taken to be allowed (not measured). Measured allowed under a capture in
 *     every mode and thread: cuDeviceGetMemPool, cuDeviceGetDefaultMemPool, cuStreamGetCtx(_v2),
 *     cuCtxGetDevice, cuDeviceGetCount, cuMemGetInfo_v2, cuStreamGetCaptureInfo. Every call not
 *     measured is taken to be allowed;
 *   - cuStreamGetDevice of a capturing stream is refused with 900 in every mode, relaxed included,
 *     from the capturing thread and from another thread, and invalidates that capture (measured on
 *     the H100: the capture probe, and a probe of its own for global, global with the capturing thread
 *     switched to relaxed, and a relaxed capture): like a wait for the capturing stream below, not
 *     like a potentially unsafe call. Of a stream that does not capture it answers (taken to be
 *     allowed: not measured during another stream's capture);
 *   - cuStreamSynchronize and cuStreamQuery of a capturing stream wait for (or ask about) work that
 *     is not executed while it is captured: calls that "necessarily conflict with stream capture",
 *     like the documentation's example of cuEventQuery on an event recorded in a capture, so in any
 *     mode: 900, and that capture is invalidated (measured on the H100 for a relaxed capture: the
 *     capture probe); so does cuCtxSynchronize, which waits for every stream of the context, while
 *     one of them captures: 900 in every mode, relaxed included, from the capturing thread and from
 *     another one, and the capture invalidated (measured on the H100: the capture probe);
 *   - cuMemAllocAsync / cuMemAllocFromPoolAsync on a capturing stream add a graph memory node: the
 *     returned address is fixed for every launch of the graph, no pool memory is reserved at
 *     capture (the pools' attributes do not move), the memory is mapped when the graph runs and
 *     stays with the graph (its memory is kept between launches) until the graph and its
 *     executables are destroyed (simplification: cuDeviceGraphMemTrim is not modelled). A graph
 *     allocation may be freed in the graph (cuMemFreeAsync captured on the same graph) or, after a
 *     launch, outside it; a stream-ordered call on an invalidated capture fails with 901.
 */

static __thread CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult fc_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    NEED_INIT();
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode prev = t_capture_mode;
    t_capture_mode = *mode;
    *mode = prev;
    return CUDA_SUCCESS;
}

/* Asked first by every potentially unsafe entry point: 900, and the conflicting captures invalidated,
 * when an ongoing capture prohibits the call on this thread. Caller holds g_lock (the stream-ordered
 * allocations decide under it whether their stream captures); unsafe_under_capture takes it. */
static CUresult unsafe_under_capture_locked(void) {
    int found = 0;
    if (t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    for (struct fc_queue *q = g_queues; q; q = q->next) {
        if (!q->capture || q->capture_invalid || q->capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
            continue;
        if (pthread_equal(q->capture_thread, pthread_self()) ||
            (t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && q->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            q->capture_invalid = 1;
            found = 1;
        }
    }
    return found ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

static CUresult unsafe_under_capture(void) {
    pthread_mutex_lock(&g_lock);
    CUresult r = unsafe_under_capture_locked();
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* A graph allocation (cuMemAllocAsync / cuMemAllocFromPoolAsync captured). The list and each entry's
 * flags are protected by g_graph_mem_lock (taken inside g_lock where both are needed); the device
 * memory it maps (g_used) by g_lock. Referenced by its graph's nodes and by every executable made from
 * the graph: an executable may outlive its graph. */
struct fc_graph_mem {
    CUdeviceptr ptr;
    size_t size;
    int dev;    /* -1: a host pool's (charged to no GPU) */
    int mapped; /* memory mapped: since the first launch that ran its allocation, until the last reference goes */
    int live;   /* allocated by a launch and not freed since */
    int refs;
    struct fc_graph_mem *next;
};
static pthread_mutex_t g_graph_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_graph_mem *g_graph_mems;
static uint64_t g_next_graph_addr = 0x7a0000000000ULL;

/* caller holds g_graph_mem_lock */
static struct fc_graph_mem *find_graph_mem(CUdeviceptr p) {
    for (struct fc_graph_mem *m = g_graph_mems; m; m = m->next)
        if (m->ptr == p)
            return m;
    return NULL;
}

static struct fc_graph_mem *graph_mem_ref(struct fc_graph_mem *m) {
    pthread_mutex_lock(&g_graph_mem_lock);
    m->refs++;
    pthread_mutex_unlock(&g_graph_mem_lock);
    return m;
}

/* The last reference gone: the memory goes back to the device. Takes g_lock only when the memory was
 * mapped, i.e. the allocation ran in a launch; a graph freed under g_lock (an invalidated capture's, in
 * cuStreamEndCapture) was never instantiated, so never launched. */
static void graph_mem_unref(struct fc_graph_mem *m) {
    pthread_mutex_lock(&g_graph_mem_lock);
    int last = --m->refs == 0;
    if (last)
        for (struct fc_graph_mem **pp = &g_graph_mems; *pp; pp = &(*pp)->next)
            if (*pp == m) {
                *pp = m->next;
                break;
            }
    pthread_mutex_unlock(&g_graph_mem_lock);
    if (!last)
        return;
    if (m->mapped && m->dev >= 0) {
        pthread_mutex_lock(&g_lock);
        g_used[m->dev] -= m->size;
        pthread_mutex_unlock(&g_lock);
    }
    free(m);
}

static CUresult free_async_now(CUdeviceptr p);

/* A memory node run by cuGraphLaunch (g_lock not held): the allocation (re)made at its captured address,
 * or a free, in the graph's order */
static void graph_mem_launch(CUgraphNodeType op, struct fc_graph_mem *m, CUdeviceptr free_ptr) {
    if (op == CU_GRAPH_NODE_TYPE_MEM_FREE && !m) { /* memory the graph did not allocate */
        (void)free_async_now(free_ptr);
        return;
    }
    pthread_mutex_lock(&g_lock);
    pthread_mutex_lock(&g_graph_mem_lock);
    if (op == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        if (!m->mapped && m->dev >= 0)
            g_used[m->dev] += m->size;
        m->mapped = 1;
        m->live = 1;
    } else {
        m->live = 0;
    }
    pthread_mutex_unlock(&g_graph_mem_lock);
    pthread_mutex_unlock(&g_lock);
}

/* caller holds g_lock; q captures. A MEM_ALLOC node on device `dev` (-1: host) at a fresh address. */
static CUresult capture_alloc(struct fc_queue *q, CUdeviceptr *dptr, size_t size, int dev) {
    if (q->capture_invalid)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph_mem *m = calloc(1, sizeof *m);
    struct CUgraphNode_st *n = m ? node_add(q->capture, CU_GRAPH_NODE_TYPE_MEM_ALLOC) : NULL;
    if (!n) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->size = round_up(size, FC_GRANULARITY);
    m->dev = dev;
    m->refs = 1; /* the node's */
    pthread_mutex_lock(&g_graph_mem_lock);
    m->ptr = (CUdeviceptr)g_next_graph_addr;
    g_next_graph_addr += m->size;
    m->next = g_graph_mems;
    g_graph_mems = m;
    pthread_mutex_unlock(&g_graph_mem_lock);
    n->mem = m;
    q->capture_last = n;
    *dptr = m->ptr;
    return CUDA_SUCCESS;
}

/* caller holds g_lock; q captures. A MEM_FREE node: of a graph allocation, or of memory allocated
 * outside (freed when the graph runs). */
static CUresult capture_free(struct fc_queue *q, CUdeviceptr p) {
    if (q->capture_invalid)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    pthread_mutex_lock(&g_graph_mem_lock);
    struct fc_graph_mem *m = find_graph_mem(p);
    if (m)
        m->refs++;
    pthread_mutex_unlock(&g_graph_mem_lock);
    int known = m != NULL;
    for (struct fc_alloc *a = g_allocs; !known && a; a = a->next)
        known = a->ptr == p;
    struct CUgraphNode_st *n = known ? node_add(q->capture, CU_GRAPH_NODE_TYPE_MEM_FREE) : NULL;
    if (!n) {
        if (m) { /* the reference just taken; never the last: the allocating node holds one */
            pthread_mutex_lock(&g_graph_mem_lock);
            m->refs--;
            pthread_mutex_unlock(&g_graph_mem_lock);
        }
        return known ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    n->mem = m;
    n->free_ptr = p;
    q->capture_last = n;
    return CUDA_SUCCESS;
}

/* ---- streams ------------------------------------------------------------------------------ */

static CUresult fc_cuStreamCreate(CUstream *ps, unsigned int flags) {
    NEED_INIT();
    if (!ps)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *s = (struct CUstream_st){FC_STREAM_MAGIC, c, flags};
    *ps = s;
    return CUDA_SUCCESS;
}

static CUresult fc_cuStreamCreateWithPriority(CUstream *ps, unsigned int flags, int prio) {
    (void)prio;
    return fc_cuStreamCreate(ps, flags);
}

static CUresult fc_cuStreamDestroy_v2(CUstream s) {
    NEED_INIT();
    uintptr_t v = (uintptr_t)s;
    if (v == 0 || v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD ||
        s->magic != FC_STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_gpu_stream_destroyed(s);
    s->magic = 0;
    free(s);
    return CUDA_SUCCESS;
}

static CUresult fc_cuStreamSynchronize(CUstream s) {
    NEED_INIT();
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r == CUDA_SUCCESS && fc_gpu_stream_capturing(s, c)) /* illegal in a capture, which it invalidates */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS) {
        fc_gpu_wait_stream(s, c);
        pthread_mutex_lock(&g_lock);
        pools_release_over_threshold();
        pthread_mutex_unlock(&g_lock);
    }
    return r;
}

static CUresult fc_cuStreamQuery(CUstream s) {
    NEED_INIT();
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r == CUDA_SUCCESS && fc_gpu_stream_capturing(s, c)) /* conflicts with its capture, which it invalidates */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS && fc_gpu_stream_busy(s, c)) /* its kernels have not finished (fakegpu.c) */
        return CUDA_ERROR_NOT_READY;
    return r;
}

static CUresult fc_cuStreamGetCtx(CUstream s, CUcontext *pctx) {
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r == CUDA_SUCCESS)
        *pctx = c;
    return r;
}

static CUresult fc_cuStreamGetCtx_v2(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen) {
    if (pgreen)
        *pgreen = NULL;
    return fc_cuStreamGetCtx(s, pctx);
}

static CUresult fc_cuStreamGetDevice(CUstream s, CUdevice *dev) {
    NEED_INIT();
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r == CUDA_SUCCESS && fc_gpu_stream_capturing(s, c)) /* measured (H100): 900 in any mode, capture invalidated */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS)
        *dev = c->dev;
    return r;
}

static CUresult fc_cuStreamGetFlags(CUstream s, unsigned int *flags) {
    NEED_INIT();
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r == CUDA_SUCCESS && flags)
        *flags = ((uintptr_t)s > 2) ? s->flags : 0;
    return r;
}

/* ---- linear memory ------------------------------------------------------------------------- */

/* caller holds g_lock; a cuMemAlloc allocation (not from a pool) */
static CUresult do_alloc(CUdeviceptr *dptr, size_t size, int dev) {
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t rs = round_up(size, FC_GRANULARITY);
    if (!device_fits(dev, rs))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fc_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->ptr = (CUdeviceptr)g_next_addr[dev];
    g_next_addr[dev] += rs;
    a->size = rs;
    a->dev = dev;
    a->ctx = cur_ctx();
    a->buffer_id = g_next_buffer_id++;
    a->next = g_allocs;
    g_allocs = a;
    g_used[dev] += rs;
    *dptr = a->ptr;
    return CUDA_SUCCESS;
}

/* caller holds g_lock; unlinks the allocation at `p`. A pool allocation's memory goes back
 * to its pool (still reserved), a cuMemAlloc allocation's back to the device. */
static struct fc_alloc *take_alloc(CUdeviceptr p) {
    for (struct fc_alloc **pp = &g_allocs; *pp; pp = &(*pp)->next)
        if ((*pp)->ptr == p) {
            struct fc_alloc *a = *pp;
            *pp = a->next;
            if (!a->pool && !a->managed)
                g_used[a->dev] -= a->size;
            return a;
        }
    return NULL;
}

/* Measured on the H200 (tests/fakecuda/traces): allocation and info calls clear their outputs
 * before they fail, unlike cuCtxGetDevice, which leaves its output untouched. */
static CUresult fc_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    NEED_INIT();
    if (dptr)
        *dptr = 0;
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult u = unsafe_under_capture();
    if (u != CUDA_SUCCESS)
        return u;
    pthread_mutex_lock(&g_lock);
    CUresult r = do_alloc(dptr, size, c->dev);
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ---- memory pools ----------------------------------------------------------------------------
 *
 * Modelled from NVIDIA's CUDA Driver API reference, "Stream Ordered Memory Allocator"
 * (https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html, and the same
 * text in cuda.h 13.0):
 *   - cuMemAllocAsync "allocates from the current mempool of the provided stream's device";
 *     cuMemAllocFromPoolAsync from the given pool, which "may be from a device different than
 *     that of the specified hStream": the memory is the pool's device's, the stream only orders;
 *   - both return CUDA_ERROR_INVALID_CONTEXT for a "default stream specified with no current
 *     context"; an explicit stream carries its own context;
 *   - RESERVED_MEM_CURRENT is the "backing memory currently allocated for the mempool" (what the
 *     device loses), USED_MEM_CURRENT the memory "currently in use by the application"; the _HIGH
 *     watermarks may only be reset (set to 0, "illegal to set ... to a non-zero value");
 *   - RELEASE_THRESHOLD (default 0): "When more than the release threshold bytes of memory are
 *     held by the memory pool, the allocator will try to release memory back to the OS on the next
 *     call to stream, event or context synchronize";
 *   - cuMemPoolTrimTo releases reserved memory down to minBytesToKeep, never memory backing
 *     outstanding allocations (all work completes when issued here, so a freed block is
 *     releasable at once);
 *   - cuMemPoolCreate: allocType "must be ... CU_MEM_ALLOCATION_TYPE_PINNED"; HOST pools need
 *     handleTypes 0; HOST_NUMA_CURRENT is CUDA_ERROR_INVALID_VALUE;
 *   - cuMemPoolDestroy with outstanding allocations returns at once and the pool goes away when
 *     the last one is freed; destroying a device's current pool makes its default pool current;
 *     "A device's default memory pool cannot be destroyed".
 * Simplifications: reservations grow in FC_POOL_CHUNK steps as needed (allocations themselves
 * take FC_GRANULARITY steps); a synchronize releases over-threshold memory of every pool of the
 * process.
 */

static int valid_pool(struct CUmemPoolHandle_st *pl) { return pl && pl->magic == FC_POOL_MAGIC && !pl->destroyed; }

/* caller holds g_lock; returns reserved memory of `pl` down to `keep` (never below what backs
 * outstanding allocations) to its device */
static void pool_release_to(struct CUmemPoolHandle_st *pl, size_t keep) {
    size_t floor_b = round_up(pl->used_current, FC_POOL_CHUNK);
    keep = round_up(keep, FC_POOL_CHUNK);
    if (keep < floor_b)
        keep = floor_b;
    if (pl->reserved_current <= keep)
        return;
    if (pl->dev >= 0)
        g_used[pl->dev] -= pl->reserved_current - keep;
    pl->reserved_current = keep;
}

/* caller holds g_lock; frees a destroyed pool once nothing is outstanding */
static void pool_maybe_free(struct CUmemPoolHandle_st *pl) {
    if (!pl->destroyed || pl->outstanding > 0)
        return;
    pool_release_to(pl, 0);
    for (struct CUmemPoolHandle_st **pp = &g_created_pools; *pp; pp = &(*pp)->next)
        if (*pp == pl) {
            *pp = pl->next;
            break;
        }
    pl->magic = 0;
    free(pl);
}

/* caller holds g_lock: the release a stream / context synchronize triggers */
static void pools_release_over_threshold(void) {
    for (int d = 0; d < g_nvis; d++)
        if (g_pool[d].reserved_current > g_pool[d].release_threshold)
            pool_release_to(&g_pool[d], g_pool[d].release_threshold);
    for (struct CUmemPoolHandle_st *pl = g_created_pools; pl; pl = pl->next)
        if (pl->reserved_current > pl->release_threshold)
            pool_release_to(pl, pl->release_threshold);
}

/* caller holds g_lock; an allocation of `size` bytes from `pl`: freed blocks are reused first,
 * the rest is reserved from the pool's device (or the host) */
static CUresult pool_alloc(CUdeviceptr *dptr, size_t size, struct CUmemPoolHandle_st *pl) {
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t rs = round_up(size, FC_GRANULARITY);
    size_t spare = pl->reserved_current - pl->used_current;
    size_t grow = rs > spare ? round_up(rs - spare, FC_POOL_CHUNK) : 0;
    if (pl->max_size && pl->reserved_current + grow > pl->max_size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (pl->dev >= 0 && !device_fits(pl->dev, grow))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fc_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t *next = pl->dev >= 0 ? &g_next_addr[pl->dev] : &g_next_host_addr;
    *a = (struct fc_alloc){(CUdeviceptr)*next, rs, pl->dev, pl, g_allocs, 0, NULL, g_next_buffer_id++};
    *next += rs;
    g_allocs = a;
    pl->reserved_current += grow;
    if (pl->dev >= 0)
        g_used[pl->dev] += grow;
    if (pl->reserved_current > pl->reserved_high)
        pl->reserved_high = pl->reserved_current;
    pl->used_current += rs;
    if (pl->used_current + pl->used_stale > pl->used_high) /* the watermark of what USED_MEM_CURRENT reads */
        pl->used_high = pl->used_current + pl->used_stale;
    pl->outstanding++;
    *dptr = a->ptr;
    return CUDA_SUCCESS;
}

static CUresult fc_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    NEED_INIT();
    if (dptr)
        *dptr = 0;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c); /* the stream orders the allocation; it does not place it */
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 0);
    if (!valid_pool(pool))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (q && q->capture) /* a graph memory node on the pool's device: the graph's memory, not the pool's */
        r = capture_alloc(q, dptr, size, pool->dev);
    else if ((r = unsafe_under_capture_locked()) == CUDA_SUCCESS) /* (inference) as cuMemAllocAsync's */
        r = pool_alloc(dptr, size, pool);
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* Stream-ordered: the stream's context decides the device, not the calling thread. */
static CUresult fc_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) {
    NEED_INIT();
    if (dptr)
        *dptr = 0;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 0);
    if (q && q->capture) /* a graph memory node: nothing comes from the device's pool now */
        r = capture_alloc(q, dptr, size, c->dev);
    else if ((r = unsafe_under_capture_locked()) == CUDA_SUCCESS) /* measured (H100): the stream-capture section */
        r = pool_alloc(dptr, size, g_cur_pool[c->dev]);
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* (inference) cuMemFree is modelled as needing a current context, like cuMemAlloc.
 *
 * A stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync) freed with cuMemFree:
 * CUDA_SUCCESS, the block's memory goes back to the device at once, and the pool's
 * USED_MEM_CURRENT keeps counting the block. Observed on H200, driver 580.159.04,
 * tests/fakecuda/traces/untracked-free.sync-free-async-alloc.h200.jsonl (default pool) and
 * untracked-free.sync-free-pool-alloc.h200.jsonl (a created pool): a 64 MiB block, cuMemFree
 * CUDA_SUCCESS, then USED_MEM_CURRENT 67108864 and cuMemGetInfo_v2's free back to its value before
 * the allocation. That block filled its reservation (two FC_POOL_CHUNKs), so the smallest model
 * releases the block's own bytes from the reservation; what a smaller block leaves reserved is
 * released like any freed block's (a synchronize, cuMemPoolTrimTo). The stale count stays until
 * the pool goes (the H200 showed no later reading). */
static CUresult fc_cuMemFree_v2(CUdeviceptr p) {
    NEED_INIT();
    if (!cur_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult u = unsafe_under_capture();
    if (u != CUDA_SUCCESS)
        return u;
    if (p == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    pthread_mutex_lock(&g_graph_mem_lock);
    struct fc_graph_mem *m = find_graph_mem(p);
    if (m) { /* a graph allocation freed outside its graph: back to the graph's memory */
        CUresult r = m->live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        m->live = 0;
        pthread_mutex_unlock(&g_graph_mem_lock);
        pthread_mutex_unlock(&g_lock);
        return r;
    }
    pthread_mutex_unlock(&g_graph_mem_lock);
    struct fc_alloc *a = take_alloc(p);
    if (a && a->pool) {
        struct CUmemPoolHandle_st *pl = a->pool;
        pl->used_current -= a->size;
        pl->used_stale += a->size;
        pl->reserved_current -= a->size; /* the reservation never holds less than what is in use */
        if (pl->dev >= 0)
            g_used[pl->dev] -= a->size;
        pl->outstanding--;
        pool_maybe_free(pl);
    }
    pthread_mutex_unlock(&g_lock);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    free(a);
    return CUDA_SUCCESS;
}

/* Any pool's allocation, on any stream: the block returns to its pool, still reserved. A graph
 * allocation freed outside its graph goes back to the graph's memory. */
static CUresult free_async_now(CUdeviceptr p) {
    pthread_mutex_lock(&g_lock);
    pthread_mutex_lock(&g_graph_mem_lock);
    struct fc_graph_mem *m = find_graph_mem(p);
    if (m) {
        CUresult r = m->live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        m->live = 0;
        pthread_mutex_unlock(&g_graph_mem_lock);
        pthread_mutex_unlock(&g_lock);
        return r;
    }
    pthread_mutex_unlock(&g_graph_mem_lock);
    struct fc_alloc *a = take_alloc(p);
    if (a && a->pool) {
        a->pool->used_current -= a->size;
        a->pool->outstanding--;
        pool_maybe_free(a->pool);
    }
    pthread_mutex_unlock(&g_lock);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    free(a);
    return CUDA_SUCCESS;
}

static CUresult fc_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    NEED_INIT();
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 0);
    int capturing = q && q->capture;
    if (capturing) /* a MEM_FREE node of the graph being captured */
        r = capture_free(q, p);
    pthread_mutex_unlock(&g_lock);
    return capturing ? r : free_async_now(p);
}

/* Either output may be NULL: the driver writes the ones it is given and succeeds. Measured by
 * others on the real driver: OptiX calls cuMemGetInfo_v2(NULL, &total) during its initialisation
 * (HAMi-core#321, driver 580.126.09; #333, driver 575.57.08) and llama.cpp calls
 * cudaMemGetInfo(&free, NULL) (llama.cpp#20499), both working without HAMi; NULL for both is taken
 * to succeed as well (inference). The driver-semantics probe `meminfo` records all three on the
 * H200 (tools/gpu_session.sh traces). */
static CUresult fc_cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    NEED_INIT();
    if (free_b)
        *free_b = 0;
    if (total)
        *total = 0;
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    unsigned long long used = lucepatch_fakecuda_device_used(g_vis[c->dev]);
    if (total)
        *total = FC_DEVICE_MEM;
    if (free_b)
        *free_b = FC_DEVICE_MEM - used;
    return CUDA_SUCCESS;
}

static CUresult fc_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    NEED_INIT();
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    switch (props->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!valid_dev(props->location.id))
            return CUDA_ERROR_INVALID_VALUE; /* (inference) the documented codes name no INVALID_DEVICE */
        dev = props->location.id;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
        if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
            return CUDA_ERROR_INVALID_VALUE;
        dev = -1;
        break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (props->location.id != 0) /* the simulated host has one NUMA node */
            return CUDA_ERROR_INVALID_VALUE;
        dev = -1;
        break;
    default: /* HOST_NUMA_CURRENT among them, as documented */
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct CUmemPoolHandle_st *pl = calloc(1, sizeof *pl);
    if (!pl)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pl->magic = FC_POOL_MAGIC;
    pl->dev = dev;
    pl->max_size = props->maxSize;
    pthread_mutex_lock(&g_lock);
    pl->next = g_created_pools;
    g_created_pools = pl;
    pthread_mutex_unlock(&g_lock);
    *pool = pl;
    return CUDA_SUCCESS;
}

static CUresult fc_cuMemPoolDestroy(CUmemoryPool pool) {
    NEED_INIT();
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (!valid_pool(pool) || pool->is_default) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        if (pool->dev >= 0 && g_cur_pool[pool->dev] == pool)
            g_cur_pool[pool->dev] = &g_pool[pool->dev];
        pool->destroyed = 1;
        pool_maybe_free(pool);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult fc_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) {
    NEED_INIT();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    *pool = g_cur_pool[d];
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) {
    NEED_INIT();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = &g_pool[d];
    return CUDA_SUCCESS;
}

/* "The memory pool must be local to the specified device." */
static CUresult fc_cuDeviceSetMemPool(CUdevice d, CUmemoryPool pool) {
    NEED_INIT();
    if (!valid_dev(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (!valid_pool(pool) || pool->dev != d)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        g_cur_pool[d] = pool;
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult fc_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    NEED_INIT();
    CUresult u = unsafe_under_capture(); /* measured on the H200 (the stream-capture section) */
    if (u != CUDA_SUCCESS)
        return u;
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (!valid_pool(pool) || !v) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        switch (a) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)v = 1; break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)v = pool->release_threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)v = pool->reserved_current; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)v = pool->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)v = pool->used_current + pool->used_stale; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)v = pool->used_high; break;
        default: r = CUDA_ERROR_INVALID_VALUE; break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult fc_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    NEED_INIT();
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (!valid_pool(pool) || !v) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        switch (a) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->release_threshold = *(cuuint64_t *)v; break;
        /* documented: the high watermarks may only be reset, i.e. set to 0 */
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
            if (*(cuuint64_t *)v != 0) r = CUDA_ERROR_INVALID_VALUE;
            else pool->reserved_high = pool->reserved_current;
            break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            if (*(cuuint64_t *)v != 0) r = CUDA_ERROR_INVALID_VALUE;
            else pool->used_high = pool->used_current + pool->used_stale;
            break;
        default: r = CUDA_ERROR_INVALID_VALUE; break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* "If the pool has less than minBytesToKeep reserved, the TrimTo operation is a no-op.
 * Otherwise the pool will be guaranteed to have at least minBytesToKeep bytes reserved." */
static CUresult fc_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    NEED_INIT();
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (!valid_pool(pool))
        r = CUDA_ERROR_INVALID_VALUE;
    else
        pool_release_to(pool, keep);
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ---- managed memory and pointer attributes -----------------------------------------------------
 *
 * From the CUDA Driver API reference (Memory Management; Unified Addressing):
 *   - cuMemAllocManaged needs a current context; flags must be CU_MEM_ATTACH_GLOBAL or
 *     CU_MEM_ATTACH_HOST, and a size of 0 is CUDA_ERROR_INVALID_VALUE; the memory "migrates on
 *     demand", so it is charged to no device here until touched (nothing is ever touched); it is
 *     freed with cuMemFree;
 *   - cuPointerGetAttribute: "If ptr was not allocated by, mapped by, or registered with a CUcontext
 *     which uses unified virtual addressing then CUDA_ERROR_INVALID_VALUE is returned"; an interior
 *     pointer names its allocation (RANGE_START_ADDR / RANGE_SIZE say which); IS_MANAGED is 1 for
 *     managed memory; MEMORY_TYPE is CU_MEMORYTYPE_DEVICE for device and managed memory (inference
 *     for managed: cudart derives its cudaMemoryTypeManaged from IS_MANAGED), CU_MEMORYTYPE_HOST
 *     for a host pool's; HOST_POINTER of device memory is CUDA_ERROR_INVALID_VALUE;
 *   - cuPointerGetAttributes: "Unlike cuPointerGetAttribute, this function will not return an error
 *     when the ptr encountered is not a valid CUDA pointer. Instead, the attributes are assigned
 *     default NULL values and CUDA_SUCCESS is returned"; NULL arrays, a NULL data slot or an
 *     attribute it does not know are CUDA_ERROR_INVALID_VALUE, checked before anything is written
 *     (inference).
 * Pointer queries need no current context here: with unified addressing the pointer names its
 * context (inference; the scenarios make none context-less).
 * Attributes not listed in ptr_attr_size are not modelled (CUDA_ERROR_INVALID_VALUE).
 */

static CUresult fc_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    NEED_INIT();
    if (dptr)
        *dptr = 0;
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!dptr || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult u = unsafe_under_capture();
    if (u != CUDA_SUCCESS)
        return u;
    struct fc_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t rs = round_up(size, FC_GRANULARITY);
    pthread_mutex_lock(&g_lock);
    *a = (struct fc_alloc){(CUdeviceptr)g_next_managed_addr, rs, c->dev, NULL, g_allocs, 1, c, g_next_buffer_id++};
    g_next_managed_addr += rs;
    g_allocs = a;
    *dptr = a->ptr;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* caller holds g_lock: the allocation holding `p` (interior pointers included) */
static struct fc_alloc *alloc_containing(CUdeviceptr p) {
    for (struct fc_alloc *a = g_allocs; a; a = a->next)
        if (p >= a->ptr && p < a->ptr + a->size)
            return a;
    return NULL;
}

/* Bytes each modelled attribute writes (cuda.h's types); 0: not modelled. */
static size_t ptr_attr_size(CUpointer_attribute at) {
    switch (at) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MAPPED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    default: return 0;
    }
}

/* caller holds g_lock; `a` may be NULL (not a CUDA pointer): then every attribute reads 0/NULL
 * and the result says whether cuPointerGetAttribute would have failed */
static CUresult ptr_attr(const struct fc_alloc *a, CUdeviceptr p, CUpointer_attribute at, void *out) {
    size_t n = ptr_attr_size(at);
    unsigned char v[sizeof(unsigned long long)] = {0};
    CUresult r = a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (a) {
        int host = a->dev < 0;
        switch (at) {
        case CU_POINTER_ATTRIBUTE_CONTEXT: memcpy(v, &a->ctx, sizeof a->ctx); break;
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: {
            unsigned int t = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
            memcpy(v, &t, sizeof t);
            break;
        }
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: memcpy(v, &p, sizeof p); break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            if (a->managed || host) {
                void *h = (void *)(uintptr_t)p;
                memcpy(v, &h, sizeof h);
            } else {
                r = CUDA_ERROR_INVALID_VALUE; /* device memory has no host address */
            }
            break;
        case CU_POINTER_ATTRIBUTE_BUFFER_ID: memcpy(v, &a->buffer_id, sizeof a->buffer_id); break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: {
            int m = a->managed;
            memcpy(v, &m, sizeof m);
            break;
        }
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
            int d = host ? -1 : a->dev;
            memcpy(v, &d, sizeof d);
            break;
        }
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: memcpy(v, &a->ptr, sizeof a->ptr); break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: memcpy(v, &a->size, sizeof a->size); break;
        case CU_POINTER_ATTRIBUTE_MAPPED: {
            int one = 1;
            memcpy(v, &one, sizeof one);
            break;
        }
        case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: memcpy(v, &a->pool, sizeof a->pool); break;
        default: break;
        }
    }
    memcpy(out, v, n);
    return r;
}

static CUresult fc_cuPointerGetAttribute(void *data, CUpointer_attribute at, CUdeviceptr p) {
    NEED_INIT();
    if (!data || ptr_attr_size(at) == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct fc_alloc *a = alloc_containing(p);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (a) {
        unsigned char v[sizeof(unsigned long long)];
        r = ptr_attr(a, p, at, v);
        if (r == CUDA_SUCCESS)
            memcpy(data, v, ptr_attr_size(at));
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult fc_cuPointerGetAttributes(unsigned int n, CUpointer_attribute *ats, void **data, CUdeviceptr p) {
    NEED_INIT();
    if (n == 0 || !ats || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < n; i++)
        if (!data[i] || ptr_attr_size(ats[i]) == 0)
            return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct fc_alloc *a = alloc_containing(p);
    for (unsigned int i = 0; i < n; i++) {
        unsigned char v[sizeof(unsigned long long)];
        if (ptr_attr(a, p, ats[i], v) != CUDA_SUCCESS && a)
            memset(v, 0, sizeof v); /* e.g. HOST_POINTER of device memory: NULL (inference) */
        memcpy(data[i], v, ptr_attr_size(ats[i]));
    }
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* ---- virtual memory management (no context needed) ----------------------------------------- */

static CUresult fc_cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags opt) {
    NEED_INIT();
    (void)opt;
    if (!g || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_dev(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    *g = FC_GRANULARITY;
    return CUDA_SUCCESS;
}

static CUresult fc_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
    NEED_INIT();
    (void)flags;
    if (!handle || !prop || size == 0 || size % FC_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = -1;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!valid_dev(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        dev = prop->location.id;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: break; /* host memory: no GPU charge */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    struct fc_handle *h = calloc(1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    if (dev >= 0 && !device_fits(dev, size)) {
        pthread_mutex_unlock(&g_lock);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->id = g_next_handle++;
    h->size = size;
    h->device = dev;
    h->next = g_handles;
    g_handles = h;
    if (dev >= 0)
        g_used[dev] += size;
    pthread_mutex_unlock(&g_lock);
    *handle = (CUmemGenericAllocationHandle)h->id;
    return CUDA_SUCCESS;
}

/* caller holds g_lock; frees the backing memory once released and unmapped (documented) */
static void handle_maybe_destroy(struct fc_handle *h) {
    if (!h->released || h->maps > 0)
        return;
    for (struct fc_handle **pp = &g_handles; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    if (h->device >= 0)
        g_used[h->device] -= h->size;
    free(h);
}

static struct fc_handle *find_handle(CUmemGenericAllocationHandle id) {
    for (struct fc_handle *h = g_handles; h; h = h->next)
        if (h->id == (uint64_t)id && !h->released)
            return h;
    return NULL;
}

static CUresult fc_cuMemRelease(CUmemGenericAllocationHandle id) {
    NEED_INIT();
    pthread_mutex_lock(&g_lock);
    struct fc_handle *h = find_handle(id);
    if (h) {
        h->released = 1;
        handle_maybe_destroy(h);
    }
    pthread_mutex_unlock(&g_lock);
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fc_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                       unsigned long long flags) {
    NEED_INIT();
    (void)addr;
    (void)flags;
    if (!ptr || size == 0 || size % FC_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (align < FC_GRANULARITY)
        align = FC_GRANULARITY;
    struct fc_va *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    g_next_va = round_up(g_next_va, align);
    *ptr = (CUdeviceptr)g_next_va;
    g_next_va += size;
    *r = (struct fc_va){*ptr, size, g_vas};
    g_vas = r;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    NEED_INIT();
    (void)size;
    if (!ptr)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    for (struct fc_va **pp = &g_vas; *pp; pp = &(*pp)->next)
        if ((*pp)->ptr == ptr) {
            struct fc_va *r = *pp;
            *pp = r->next;
            free(r);
            break;
        }
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* caller holds g_lock: does a live cuMemAddressReserve range hold [ptr, ptr + size)? */
static int va_reserved(CUdeviceptr ptr, size_t size) {
    for (struct fc_va *r = g_vas; r; r = r->next)
        if (ptr >= r->ptr && ptr + size <= r->ptr + r->size)
            return 1;
    return 0;
}

/* caller holds g_lock: does some mapping lie in [ptr, ptr + size)? */
static int va_mapped(CUdeviceptr ptr, size_t size) {
    for (struct fc_mapping *m = g_maps; m; m = m->next)
        if (m->ptr < ptr + size && ptr < m->ptr + m->size)
            return 1;
    return 0;
}

static CUresult fc_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle id,
                            unsigned long long flags) {
    NEED_INIT();
    (void)flags;
    if (!ptr || size == 0 || offset)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_mapping *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    struct fc_handle *h = find_handle(id);
    if (!h || size > h->size) {
        pthread_mutex_unlock(&g_lock);
        free(m);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->maps++;
    *m = (struct fc_mapping){ptr, size, h, g_maps};
    g_maps = m;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* A reserved range with nothing mapped in it unmaps with CUDA_SUCCESS: observed on H200, driver
 * 580.159.04, tests/fakecuda/traces/vmm-release.limit.h200.jsonl (the cuMemCreate before the
 * cuMemMap was refused, so nothing was mapped). (inference) An address no reservation holds stays
 * CUDA_ERROR_INVALID_VALUE. */
static CUresult fc_cuMemUnmap(CUdeviceptr ptr, size_t size) {
    NEED_INIT();
    pthread_mutex_lock(&g_lock);
    int found = 0;
    for (struct fc_mapping **pp = &g_maps; *pp;) {
        struct fc_mapping *m = *pp;
        if (m->ptr >= ptr && m->ptr < ptr + size) {
            *pp = m->next;
            m->h->maps--;
            handle_maybe_destroy(m->h);
            free(m);
            found = 1;
        } else {
            pp = &m->next;
        }
    }
    if (!found)
        found = va_reserved(ptr, size);
    pthread_mutex_unlock(&g_lock);
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Access is set on mapped memory: a range with nothing mapped in it is CUDA_ERROR_INVALID_VALUE,
 * observed on H200, driver 580.159.04, tests/fakecuda/traces/vmm-release.limit.h200.jsonl. */
static CUresult fc_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    NEED_INIT();
    if (!ptr || !size || !desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_dev(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    int mapped = va_mapped(ptr, size);
    pthread_mutex_unlock(&g_lock);
    return mapped ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- arrays: none exist in the simulation ------------------------------------------------- */

/* Older HAMi-core (e.g. e3c3477) calls this directly, so it must resolve at load time
 * (the reproducers run with LD_BIND_NOW=1); no array handle is ever valid here. */
static CUresult fc_cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *desc, CUarray arr) {
    NEED_INIT();
    (void)arr;
    return desc ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
}

/* ---- cuGetProcAddress: resolve from our own table, never via dlsym ------------------------- */

struct fc_sym {
    const char *name;
    void *fn;
};

static CUresult fc_cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
static CUresult fc_cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status);

#define FC_SYMBOLS(X)                                                   \
    X("cuInit", fc_cuInit)                                              \
    X("cuDriverGetVersion", fc_cuDriverGetVersion)                      \
    X("cuGetErrorName", fc_cuGetErrorName)                              \
    X("cuGetErrorString", fc_cuGetErrorString)                          \
    X("cuGetExportTable", fc_cuGetExportTable)                          \
    X("cuGetProcAddress", fc_cuGetProcAddress)                          \
    X("cuGetProcAddress_v2", fc_cuGetProcAddress_v2)                    \
    X("cuDeviceGetCount", fc_cuDeviceGetCount)                          \
    X("cuDeviceGet", fc_cuDeviceGet)                                    \
    X("cuDeviceGetName", fc_cuDeviceGetName)                            \
    X("cuDeviceTotalMem_v2", fc_cuDeviceTotalMem_v2)                    \
    X("cuDeviceGetUuid", fc_cuDeviceGetUuid)                            \
    X("cuDeviceGetUuid_v2", fc_cuDeviceGetUuid)                         \
    X("cuDeviceGetAttribute", fc_cuDeviceGetAttribute)                  \
    X("cuDevicePrimaryCtxRetain", fc_cuDevicePrimaryCtxRetain)          \
    X("cuDevicePrimaryCtxRelease", fc_cuDevicePrimaryCtxRelease_v2)     \
    X("cuDevicePrimaryCtxRelease_v2", fc_cuDevicePrimaryCtxRelease_v2)  \
    X("cuDevicePrimaryCtxGetState", fc_cuDevicePrimaryCtxGetState)      \
    X("cuDevicePrimaryCtxSetFlags", fc_cuDevicePrimaryCtxSetFlags_v2)   \
    X("cuDevicePrimaryCtxSetFlags_v2", fc_cuDevicePrimaryCtxSetFlags_v2) \
    X("cuDevicePrimaryCtxReset", fc_cuDevicePrimaryCtxReset_v2)         \
    X("cuDevicePrimaryCtxReset_v2", fc_cuDevicePrimaryCtxReset_v2)      \
    X("cuCtxCreate_v2", fc_cuCtxCreate_v2)                              \
    X("cuCtxCreate_v3", fc_cuCtxCreate_v3)                              \
    X("cuCtxCreate_v4", fc_cuCtxCreate_v4)                              \
    X("cuCtxDestroy_v2", fc_cuCtxDestroy_v2)                            \
    X("cuCtxSetCurrent", fc_cuCtxSetCurrent)                            \
    X("cuCtxGetCurrent", fc_cuCtxGetCurrent)                            \
    X("cuCtxPushCurrent_v2", fc_cuCtxPushCurrent_v2)                    \
    X("cuCtxPopCurrent_v2", fc_cuCtxPopCurrent_v2)                      \
    X("cuCtxGetDevice", fc_cuCtxGetDevice)                              \
    X("cuCtxGetFlags", fc_cuCtxGetFlags)                                \
    X("cuCtxGetApiVersion", fc_cuCtxGetApiVersion)                      \
    X("cuCtxSynchronize", fc_cuCtxSynchronize)                          \
    X("cuStreamCreate", fc_cuStreamCreate)                              \
    X("cuStreamCreateWithPriority", fc_cuStreamCreateWithPriority)      \
    X("cuStreamDestroy_v2", fc_cuStreamDestroy_v2)                      \
    X("cuStreamSynchronize", fc_cuStreamSynchronize)                    \
    X("cuStreamQuery", fc_cuStreamQuery)                                \
    X("cuStreamGetCtx", fc_cuStreamGetCtx)                              \
    X("cuStreamGetCtx_v2", fc_cuStreamGetCtx_v2)                        \
    X("cuStreamGetDevice", fc_cuStreamGetDevice)                        \
    X("cuStreamGetFlags", fc_cuStreamGetFlags)                          \
    X("cuMemAlloc_v2", fc_cuMemAlloc_v2)                                \
    X("cuMemFree_v2", fc_cuMemFree_v2)                                  \
    X("cuMemAllocAsync", fc_cuMemAllocAsync)                            \
    X("cuMemFreeAsync", fc_cuMemFreeAsync)                              \
    X("cuMemGetInfo_v2", fc_cuMemGetInfo_v2)                            \
    X("cuMemAllocManaged", fc_cuMemAllocManaged)                        \
    X("cuPointerGetAttribute", fc_cuPointerGetAttribute)                \
    X("cuPointerGetAttributes", fc_cuPointerGetAttributes)              \
    X("cuDeviceGetMemPool", fc_cuDeviceGetMemPool)                      \
    X("cuDeviceGetDefaultMemPool", fc_cuDeviceGetDefaultMemPool)        \
    X("cuDeviceSetMemPool", fc_cuDeviceSetMemPool)                      \
    X("cuMemPoolGetAttribute", fc_cuMemPoolGetAttribute)                \
    X("cuMemPoolSetAttribute", fc_cuMemPoolSetAttribute)               \
    X("cuMemPoolTrimTo", fc_cuMemPoolTrimTo)                            \
    X("cuMemPoolCreate", fc_cuMemPoolCreate)                            \
    X("cuMemPoolDestroy", fc_cuMemPoolDestroy)                          \
    X("cuMemAllocFromPoolAsync", fc_cuMemAllocFromPoolAsync)            \
    X("cuMemGetAllocationGranularity", fc_cuMemGetAllocationGranularity) \
    X("cuMemCreate", fc_cuMemCreate)                                    \
    X("cuMemRelease", fc_cuMemRelease)                                  \
    X("cuMemAddressReserve", fc_cuMemAddressReserve)                    \
    X("cuMemAddressFree", fc_cuMemAddressFree)                          \
    X("cuMemMap", fc_cuMemMap)                                          \
    X("cuMemUnmap", fc_cuMemUnmap)                                      \
    X("cuMemSetAccess", fc_cuMemSetAccess)                              \
    X("cuArray3DGetDescriptor_v2", fc_cuArray3DGetDescriptor_v2)     \
    X("cuThreadExchangeStreamCaptureMode", fc_cuThreadExchangeStreamCaptureMode)        \
    FC_GPU_SYMBOLS(X)

#define FC_TABLE_ENTRY(name, impl) {name, (void *)impl},
static const struct fc_sym g_syms[] = {FC_SYMBOLS(FC_TABLE_ENTRY)};

/* One alias per exported name; names sharing an impl need distinct alias identifiers. */
#define FC_EXPORT2(sym, impl, tag)                                                          \
    extern __typeof__(impl) impl##__export##tag __asm__(sym)                                \
        __attribute__((alias(#impl), visibility("default")));

static const void *lookup(const char *name) {
    for (size_t i = 0; i < sizeof g_syms / sizeof g_syms[0]; i++)
        if (strcmp(g_syms[i].name, name) == 0)
            return g_syms[i].fn;
    return NULL;
}

/* The driver takes a base name ("cuMemAlloc") and returns the newest ABI variant; we pick
 * the highest _vN present in the table (approximation: ignores cudaVersion cut-offs). */
static void *resolve(const char *symbol) {
    char buf[256];
    for (int v = 4; v >= 2; v--) {
        snprintf(buf, sizeof buf, "%s_v%d", symbol, v);
        const void *p = lookup(buf);
        if (p)
            return (void *)p;
    }
    return (void *)lookup(symbol);
}

static CUresult fc_cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status) {
    (void)ver;
    (void)flags;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = resolve(symbol);
    if (status)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

static CUresult fc_cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
    return fc_cuGetProcAddress_v2(symbol, pfn, ver, flags, NULL);
}

/* Exports.  Each impl may carry several names (tags keep the alias identifiers unique). */
FC_EXPORT2("cuInit", fc_cuInit, )
FC_EXPORT2("cuDriverGetVersion", fc_cuDriverGetVersion, )
FC_EXPORT2("cuGetErrorName", fc_cuGetErrorName, )
FC_EXPORT2("cuGetErrorString", fc_cuGetErrorString, )
FC_EXPORT2("cuGetExportTable", fc_cuGetExportTable, )
FC_EXPORT2("cuGetProcAddress", fc_cuGetProcAddress, )
FC_EXPORT2("cuGetProcAddress_v2", fc_cuGetProcAddress_v2, )
FC_EXPORT2("cuDeviceGetCount", fc_cuDeviceGetCount, )
FC_EXPORT2("cuDeviceGet", fc_cuDeviceGet, )
FC_EXPORT2("cuDeviceGetName", fc_cuDeviceGetName, )
FC_EXPORT2("cuDeviceTotalMem_v2", fc_cuDeviceTotalMem_v2, )
FC_EXPORT2("cuDeviceGetUuid", fc_cuDeviceGetUuid, )
FC_EXPORT2("cuDeviceGetUuid_v2", fc_cuDeviceGetUuid, _v2)
FC_EXPORT2("cuDeviceGetAttribute", fc_cuDeviceGetAttribute, )
FC_EXPORT2("cuDevicePrimaryCtxRetain", fc_cuDevicePrimaryCtxRetain, )
FC_EXPORT2("cuDevicePrimaryCtxRelease", fc_cuDevicePrimaryCtxRelease_v2, _v1)
FC_EXPORT2("cuDevicePrimaryCtxRelease_v2", fc_cuDevicePrimaryCtxRelease_v2, )
FC_EXPORT2("cuDevicePrimaryCtxGetState", fc_cuDevicePrimaryCtxGetState, )
FC_EXPORT2("cuDevicePrimaryCtxSetFlags", fc_cuDevicePrimaryCtxSetFlags_v2, _v1)
FC_EXPORT2("cuDevicePrimaryCtxSetFlags_v2", fc_cuDevicePrimaryCtxSetFlags_v2, )
FC_EXPORT2("cuDevicePrimaryCtxReset", fc_cuDevicePrimaryCtxReset_v2, _v1)
FC_EXPORT2("cuDevicePrimaryCtxReset_v2", fc_cuDevicePrimaryCtxReset_v2, )
FC_EXPORT2("cuCtxCreate_v2", fc_cuCtxCreate_v2, )
FC_EXPORT2("cuCtxCreate_v3", fc_cuCtxCreate_v3, )
FC_EXPORT2("cuCtxCreate_v4", fc_cuCtxCreate_v4, )
FC_EXPORT2("cuCtxDestroy_v2", fc_cuCtxDestroy_v2, )
FC_EXPORT2("cuCtxSetCurrent", fc_cuCtxSetCurrent, )
FC_EXPORT2("cuCtxGetCurrent", fc_cuCtxGetCurrent, )
FC_EXPORT2("cuCtxPushCurrent_v2", fc_cuCtxPushCurrent_v2, )
FC_EXPORT2("cuCtxPopCurrent_v2", fc_cuCtxPopCurrent_v2, )
FC_EXPORT2("cuCtxGetDevice", fc_cuCtxGetDevice, )
FC_EXPORT2("cuCtxGetFlags", fc_cuCtxGetFlags, )
FC_EXPORT2("cuCtxGetApiVersion", fc_cuCtxGetApiVersion, )
FC_EXPORT2("cuCtxSynchronize", fc_cuCtxSynchronize, )
FC_EXPORT2("cuStreamCreate", fc_cuStreamCreate, )
FC_EXPORT2("cuStreamCreateWithPriority", fc_cuStreamCreateWithPriority, )
FC_EXPORT2("cuStreamDestroy_v2", fc_cuStreamDestroy_v2, )
FC_EXPORT2("cuStreamSynchronize", fc_cuStreamSynchronize, )
FC_EXPORT2("cuStreamQuery", fc_cuStreamQuery, )
FC_EXPORT2("cuStreamGetCtx", fc_cuStreamGetCtx, )
FC_EXPORT2("cuStreamGetCtx_v2", fc_cuStreamGetCtx_v2, )
FC_EXPORT2("cuStreamGetDevice", fc_cuStreamGetDevice, )
FC_EXPORT2("cuStreamGetFlags", fc_cuStreamGetFlags, )
FC_EXPORT2("cuMemAlloc_v2", fc_cuMemAlloc_v2, )
FC_EXPORT2("cuMemFree_v2", fc_cuMemFree_v2, )
FC_EXPORT2("cuMemAllocAsync", fc_cuMemAllocAsync, )
FC_EXPORT2("cuMemFreeAsync", fc_cuMemFreeAsync, )
FC_EXPORT2("cuMemGetInfo_v2", fc_cuMemGetInfo_v2, )
FC_EXPORT2("cuMemAllocManaged", fc_cuMemAllocManaged, )
FC_EXPORT2("cuPointerGetAttribute", fc_cuPointerGetAttribute, )
FC_EXPORT2("cuPointerGetAttributes", fc_cuPointerGetAttributes, )
FC_EXPORT2("cuDeviceGetMemPool", fc_cuDeviceGetMemPool, )
FC_EXPORT2("cuDeviceGetDefaultMemPool", fc_cuDeviceGetDefaultMemPool, )
FC_EXPORT2("cuDeviceSetMemPool", fc_cuDeviceSetMemPool, )
FC_EXPORT2("cuMemPoolGetAttribute", fc_cuMemPoolGetAttribute, )
FC_EXPORT2("cuMemPoolSetAttribute", fc_cuMemPoolSetAttribute, )
FC_EXPORT2("cuMemPoolTrimTo", fc_cuMemPoolTrimTo, )
FC_EXPORT2("cuMemPoolCreate", fc_cuMemPoolCreate, )
FC_EXPORT2("cuMemPoolDestroy", fc_cuMemPoolDestroy, )
FC_EXPORT2("cuMemAllocFromPoolAsync", fc_cuMemAllocFromPoolAsync, )
FC_EXPORT2("cuMemGetAllocationGranularity", fc_cuMemGetAllocationGranularity, )
FC_EXPORT2("cuMemCreate", fc_cuMemCreate, )
FC_EXPORT2("cuMemRelease", fc_cuMemRelease, )
FC_EXPORT2("cuMemAddressReserve", fc_cuMemAddressReserve, )
FC_EXPORT2("cuMemAddressFree", fc_cuMemAddressFree, )
FC_EXPORT2("cuMemMap", fc_cuMemMap, )
FC_EXPORT2("cuMemUnmap", fc_cuMemUnmap, )
FC_EXPORT2("cuMemSetAccess", fc_cuMemSetAccess, )
FC_EXPORT2("cuArray3DGetDescriptor_v2", fc_cuArray3DGetDescriptor_v2, )
FC_GPU_SYMBOLS(FC_GPU_EXPORT)
FC_EXPORT2("cuThreadExchangeStreamCaptureMode", fc_cuThreadExchangeStreamCaptureMode, )
