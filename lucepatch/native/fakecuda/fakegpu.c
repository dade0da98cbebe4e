/* fakegpu.c: the simulated GPU's time — kernels, CUDA graphs, stream capture — and the utilisation
 * NVML derives from it (issue 38: a compute limit must be testable without a GPU, by modelling the
 * GPU, never by answering what the limiter expects).
 *
 * #included by fakecuda.c, so it shares that file's static context and stream helpers (one
 * translation unit; the same rules: no dlsym, -Wl,-Bsymbolic).
 *
 * The model, and what it rests on:
 *   - A device runs one kernel at a time, in launch order, across every process of the machine:
 *     without MPS, kernels of different processes are time-sliced, never concurrent (CUDA C++
 *     Programming Guide, "Multi-process" / MPS overview). Kernels of one process's streams are also
 *     serialised here (a simplification: it costs a real GPU little for the bandwidth-bound kernels
 *     the reproducers run, which saturate it alone).
 *   - A launch is asynchronous: it returns at once and the kernel occupies the device from
 *     max(now, the stream's last kernel, the device's last kernel) for its duration. A stream holds at
 *     most FC_QUEUE_DEPTH pending kernels; a launch beyond that blocks until the oldest completes
 *     (the driver's launch queue is finite: a host thread cannot run arbitrarily far ahead).
 *     cuStreamSynchronize / cuCtxSynchronize / cuEventSynchronize sleep until the work they wait for
 *     is done, in real time (HAMi's watcher runs on the wall clock, so the simulated GPU must too).
 *   - A kernel's duration: `lp_stream_read` (reproducers/common/lp_kernels.cu; params: const void
 *     *src, unsigned long long bytes, void *sink) is bandwidth-bound: bytes / (the generation's
 *     sustained bandwidth × min(1, blocks / SMs)) + FC_KERNEL_FIXED_NS; any other kernel takes
 *     FC_KERNEL_FIXED_NS + FC_WAVE_NS per wave of blocks over the SMs (a fixed guess, said so).
 *   - CUDA graphs: a graph's kernel nodes (child graphs and conditional bodies included) run
 *     back to back when the executable graph is launched — one API call, many kernels. Conditional
 *     bodies run as their handle's default value says (no device code runs here to set it): IF when
 *     it is non-zero, SWITCH body[value], WHILE once when non-zero (a lower bound, said so).
 *   - Stream capture (cuStreamBeginCapture_v2 ... cuStreamEndCapture): kernel launches into a
 *     capturing stream become kernel nodes of the graph being captured, in order, and run nothing.
 *     A capture keeps the mode it was begun with and the thread that began it: "If mode is not
 *     CU_STREAM_CAPTURE_MODE_RELAXED, cuStreamEndCapture must be called on this stream from the
 *     same thread" (else CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD). What a capture forbids other calls
 *     and the memory nodes (allocations captured, run at each launch) are fakecuda.c's
 *     stream-capture section.
 *   - NVML's per-process SM utilisation (nvmlDeviceGetProcessUtilization, and the
 *     nvmlDeviceGetProcessesUtilizationInfo that Blackwell with driver >= 580 answers instead): the
 *     share of a window during which a kernel of that process occupied the device — the NVML API
 *     reference's definition ("percent of time over the past sample period during which one or more
 *     kernels was executing"). Busy time is kept per process in FC_BUCKET_NS buckets; a query's
 *     window runs from lastSeenTimeStamp (0: the whole buffer) to the last completed bucket.
 *   - Several processes share one simulated machine when LUCEPATCH_FAKECUDA_MACHINE names a file
 *     (verify gives every run its own, as it gives every run its own region file): the device
 *     timeline, the processes' busy time and which processes hold a context live there, in a
 *     process-shared mapping under a robust mutex. Without it, each process has a private machine.
 *   - Generations (LUCEPATCH_FAKECUDA_GENERATION): "hopper" (default: an H200-like device, 132 SMs)
 *     and "blackwell" (an RTX PRO 6000 Blackwell Server Edition-like device: 188 SMs, 1536 threads per
 *     SM, sm_120), whose NVML answers NVML_ERROR_NOT_SUPPORTED to nvmlDeviceGetProcessUtilization
 *     with a driver >= 580 and serves nvmlDeviceGetProcessesUtilizationInfo (HAMi-core #218).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define FC_QUEUE_DEPTH 1024
#define FC_KERNEL_FIXED_NS 2000LL
#define FC_WAVE_NS 1000LL
#define FC_BUCKET_NS 10000000LL /* 10 ms */
#define FC_BUCKETS 512          /* 5.12 s of history (and of queued future) */
#define FC_MACHINE_PROCS 16
#define FC_MACHINE_MAGIC 0x4c504d43u /* "LPMC" */
#define FC_MACHINE_VERSION 1u
#define FC_FUNC_MAGIC 0x4c504655u    /* "LPFU" */
#define FC_MOD_MAGIC 0x4c504d4fu     /* "LPMO" */
#define FC_GRAPH_MAGIC 0x4c504752u   /* "LPGR" */
#define FC_NODE_MAGIC 0x4c504e44u    /* "LPND" */
#define FC_EXEC_MAGIC 0x4c504758u    /* "LPGX" */
#define FC_EVENT_MAGIC 0x4c504556u   /* "LPEV" */
#define FC_MAX_KPARAMS 8

/* ---- generations ---------------------------------------------------------------------------- */

struct fc_generation {
    const char *key;
    const char *name;
    int sm, threads_per_sm, cc_major, cc_minor;
    double bytes_per_ns;     /* sustained streaming bandwidth */
    int process_utilization; /* nvmlDeviceGetProcessUtilization: 1 answers, 0 NOT_SUPPORTED */
};

/* Sustained bandwidth taken as 0.8 of the peak (H200 4.8 TB/s; RTX PRO 6000 Blackwell 1.79 TB/s): the
 * field notes' H100 decode read 6.4 GB per token at 400 tok/s, 0.77 of its 3.35 TB/s. */
static const struct fc_generation g_generations[] = {
    {"hopper", FC_DEVICE_NAME, 132, 2048, 9, 0, 3840.0, 1},
    {"blackwell", "lucepatch-fakecuda RTX PRO 6000 Blackwell Server Edition (simulated)", 188, 1536, 12, 0, 1432.0, 0},
};
static const struct fc_generation *g_gen = &g_generations[0];
static int g_gen_bad; /* LUCEPATCH_FAKECUDA_GENERATION named no generation: cuInit refuses */

static void fc_gpu_setup(void) {
    const char *s = getenv("LUCEPATCH_FAKECUDA_GENERATION");
    if (!s || !*s)
        return;
    for (size_t i = 0; i < sizeof g_generations / sizeof g_generations[0]; i++)
        if (strcmp(s, g_generations[i].key) == 0) {
            g_gen = &g_generations[i];
            return;
        }
    fprintf(stderr, "fakecuda: LUCEPATCH_FAKECUDA_GENERATION=%s names no simulated generation (hopper, blackwell)\n", s);
    g_gen_bad = 1;
}

FC_API const char *lucepatch_fakecuda_generation(void) {
    fc_lazy_setup();
    return g_gen->key;
}

FC_API const char *lucepatch_fakecuda_device_name(void) {
    fc_lazy_setup();
    return g_gen->name;
}

/* ---- the machine: shared by the processes of one run ------------------------------------------- */

struct fc_bucket {
    int64_t index; /* monotonic ns / FC_BUCKET_NS this slot holds; another value: empty */
    int64_t busy[FC_MACHINE_PROCS];
};

struct fc_mdev {
    int64_t tail_ns; /* when the device finishes the last kernel queued on it */
    struct fc_bucket b[FC_BUCKETS];
};

struct fc_mproc {
    int32_t pid;
    int32_t ctx[FC_MAX_DEVICES]; /* holds a context on machine GPU i */
};

struct fc_machine {
    uint32_t magic, version;
    pthread_mutex_t lock; /* process-shared, robust */
    struct fc_mproc procs[FC_MACHINE_PROCS];
    struct fc_mdev dev[FC_MAX_DEVICES];
};

static struct fc_machine *g_machine;
static pthread_once_t g_machine_once = PTHREAD_ONCE_INIT;

static void machine_init_lock(struct fc_machine *m, int shared) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (shared) {
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    }
    pthread_mutex_init(&m->lock, &a);
    pthread_mutexattr_destroy(&a);
}

static void machine_open(void) {
    const char *path = getenv("LUCEPATCH_FAKECUDA_MACHINE");
    if (path && *path) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0 && flock(fd, LOCK_EX) == 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size < sizeof(struct fc_machine))
                if (ftruncate(fd, sizeof(struct fc_machine)) != 0)
                    st.st_size = -1;
            void *p = mmap(NULL, sizeof(struct fc_machine), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) {
                struct fc_machine *m = p;
                if (m->magic != FC_MACHINE_MAGIC || m->version != FC_MACHINE_VERSION) {
                    memset(m, 0, sizeof *m);
                    machine_init_lock(m, 1);
                    m->version = FC_MACHINE_VERSION;
                    __atomic_store_n(&m->magic, FC_MACHINE_MAGIC, __ATOMIC_RELEASE);
                }
                g_machine = m;
            }
            flock(fd, LOCK_UN);
        }
        if (fd >= 0)
            close(fd);
        if (g_machine)
            return;
        fprintf(stderr, "fakecuda: cannot map LUCEPATCH_FAKECUDA_MACHINE=%s (%s): this process gets a private machine\n",
                path, strerror(errno));
    }
    g_machine = calloc(1, sizeof(struct fc_machine));
    if (g_machine)
        machine_init_lock(g_machine, 0);
}

static struct fc_machine *machine(void) {
    pthread_once(&g_machine_once, machine_open);
    return g_machine;
}

static void machine_lock(struct fc_machine *m) {
    if (pthread_mutex_lock(&m->lock) == EOWNERDEAD) /* a process died holding it: its state is whole */
        pthread_mutex_consistent(&m->lock);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(int64_t t) {
    for (;;) {
        int64_t d = t - now_ns();
        if (d <= 0)
            return;
        struct timespec ts = {d / 1000000000LL, d % 1000000000LL};
        nanosleep(&ts, NULL);
    }
}

/* caller holds the machine lock: this process's slot (claimed on first use; a dead process's slot is
 * taken over), -1 when every slot holds a live process */
static int my_slot(struct fc_machine *m) {
    int32_t me = (int32_t)getpid();
    int free_slot = -1;
    for (int i = 0; i < FC_MACHINE_PROCS; i++) {
        if (m->procs[i].pid == me)
            return i;
        if (free_slot < 0 && (m->procs[i].pid == 0 || (kill(m->procs[i].pid, 0) != 0 && errno == ESRCH)))
            free_slot = i;
    }
    if (free_slot < 0)
        return -1;
    memset(&m->procs[free_slot], 0, sizeof m->procs[free_slot]);
    for (int d = 0; d < FC_MAX_DEVICES; d++) /* the slot's busy history was another process's */
        for (int k = 0; k < FC_BUCKETS; k++)
            m->dev[d].b[k].busy[free_slot] = 0;
    m->procs[free_slot].pid = me;
    return free_slot;
}

/* caller holds the machine lock: add [start, end) to `slot`'s busy time on machine GPU `mdev` */
static void add_busy(struct fc_machine *m, int mdev, int slot, int64_t start, int64_t end) {
    for (int64_t k = start / FC_BUCKET_NS; k * FC_BUCKET_NS < end; k++) {
        struct fc_bucket *b = &m->dev[mdev].b[k % FC_BUCKETS];
        if (b->index != k) {
            memset(b, 0, sizeof *b);
            b->index = k;
        }
        int64_t lo = start > k * FC_BUCKET_NS ? start : k * FC_BUCKET_NS;
        int64_t hi = end < (k + 1) * FC_BUCKET_NS ? end : (k + 1) * FC_BUCKET_NS;
        b->busy[slot] += hi - lo;
    }
}

/* fakecuda.c's context bookkeeping calls this when a process gains or loses its last context on CUDA
 * ordinal `dev`: NVML lists the processes holding one, machine-wide */
static void fc_gpu_ctx_changed(int dev, int holds) {
    struct fc_machine *m = machine();
    if (!m || dev < 0 || dev >= g_nvis)
        return;
    machine_lock(m);
    int s = my_slot(m);
    if (s >= 0)
        m->procs[s].ctx[g_vis[dev]] = holds;
    pthread_mutex_unlock(&m->lock);
}

/* NVML's side (machine indices): the other live processes holding a context on `machine_dev`, at most
 * `max`, never the caller (fakenvml adds the caller from this process's own state). */
FC_API int lucepatch_fakecuda_other_processes(int machine_dev, unsigned int *pids, int max) {
    fc_lazy_setup();
    struct fc_machine *m = machine();
    if (!m || machine_dev < 0 || machine_dev >= FC_MAX_DEVICES)
        return 0;
    int n = 0;
    int32_t me = (int32_t)getpid();
    machine_lock(m);
    for (int i = 0; i < FC_MACHINE_PROCS && n < max; i++) {
        struct fc_mproc *p = &m->procs[i];
        if (p->pid && p->pid != me && p->ctx[machine_dev] && !(kill(p->pid, 0) != 0 && errno == ESRCH))
            pids[n++] = (unsigned int)p->pid;
    }
    pthread_mutex_unlock(&m->lock);
    return n;
}

/* NVML's side: per-process SM utilisation of machine GPU `machine_dev` over the window from `since_us`
 * (CLOCK_REALTIME µs, NVML's lastSeenTimeStamp; 0 = the whole buffer) to the last completed bucket.
 * Writes up to `max` (pid, percent) pairs with a non-zero share and the window's end in `*stamp_us`;
 * returns how many there are (possibly more than max). */
FC_API int lucepatch_fakecuda_process_utilization(int machine_dev, unsigned long long since_us, unsigned int *pids,
                                                  unsigned int *percent, int max, unsigned long long *stamp_us) {
    fc_lazy_setup();
    struct fc_machine *m = machine();
    if (!m || machine_dev < 0 || machine_dev >= FC_MAX_DEVICES)
        return 0;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t mono = now_ns();
    int64_t real_ns = (int64_t)tv.tv_sec * 1000000000LL + (int64_t)tv.tv_usec * 1000LL;
    int64_t end = (mono / FC_BUCKET_NS) * FC_BUCKET_NS;
    int64_t start = end - (int64_t)(FC_BUCKETS - 1) * FC_BUCKET_NS;
    if (since_us) {
        int64_t since_mono = (int64_t)since_us * 1000LL - (real_ns - mono);
        if (since_mono > start)
            start = since_mono;
    }
    if (stamp_us)
        *stamp_us = (unsigned long long)((end + (real_ns - mono)) / 1000LL);
    if (start >= end)
        return 0;
    int64_t busy[FC_MACHINE_PROCS] = {0};
    int32_t pid[FC_MACHINE_PROCS];
    machine_lock(m);
    for (int i = 0; i < FC_MACHINE_PROCS; i++)
        pid[i] = m->procs[i].pid;
    for (int64_t k = start / FC_BUCKET_NS; k * FC_BUCKET_NS < end; k++) {
        struct fc_bucket *b = &m->dev[machine_dev].b[k % FC_BUCKETS];
        if (b->index != k)
            continue;
        /* a bucket cut by the window's start counts in proportion (busy spread evenly in a bucket) */
        int64_t lo = start > k * FC_BUCKET_NS ? start : k * FC_BUCKET_NS;
        int64_t part = (k + 1) * FC_BUCKET_NS - lo;
        for (int i = 0; i < FC_MACHINE_PROCS; i++)
            busy[i] += b->busy[i] * part / FC_BUCKET_NS;
    }
    pthread_mutex_unlock(&m->lock);
    int n = 0;
    for (int i = 0; i < FC_MACHINE_PROCS; i++) {
        unsigned int pct = (unsigned int)(busy[i] * 100 / (end - start));
        if (!pid[i] || pct == 0)
            continue;
        if (n < max) {
            pids[n] = (unsigned int)pid[i];
            percent[n] = pct > 100 ? 100 : pct;
        }
        n++;
    }
    return n;
}

FC_API int lucepatch_fakecuda_process_utilization_supported(void) {
    fc_lazy_setup();
    return g_gen->process_utilization;
}

/* ---- per-stream queues ------------------------------------------------------------------------ */

struct fc_graph;
struct fc_queue {
    const void *key; /* the stream, or the context for its default stream */
    struct CUctx_st *ctx;
    int dev; /* CUDA ordinal */
    int64_t ends[FC_QUEUE_DEPTH];
    int head, count;
    int64_t tail;
    struct CUgraph_st *capture; /* the graph a capture builds; NULL: not capturing */
    int capture_invalid;
    int capture_mode;          /* the CUstreamCaptureMode it was begun with */
    pthread_t capture_thread;  /* the thread that began it */
    uint64_t capture_id;
    struct CUgraphNode_st *capture_last;
    struct fc_queue *next;
};

static struct fc_queue *g_queues;
static uint64_t g_next_capture_id = 1;

/* caller holds g_lock */
static struct fc_queue *queue_for(CUstream s, struct CUctx_st *c, int create) {
    uintptr_t v = (uintptr_t)s;
    const void *key = (v == 0 || v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD)
                          ? (const void *)c : (const void *)s;
    for (struct fc_queue *q = g_queues; q; q = q->next)
        if (q->key == key)
            return q;
    if (!create)
        return NULL;
    struct fc_queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->key = key;
    q->ctx = c;
    q->dev = c->dev;
    q->next = g_queues;
    g_queues = q;
    return q;
}

/* caller holds g_lock; a destroyed stream leaves the table (its pending work still occupies the device) */
static void queue_forget(const void *key) {
    for (struct fc_queue **pp = &g_queues; *pp; pp = &(*pp)->next)
        if ((*pp)->key == key) {
            struct fc_queue *q = *pp;
            *pp = q->next;
            free(q);
            return;
        }
}

/* Put a kernel of `dur` ns on queue q (g_lock not held): blocks while the queue is full, then books the
 * device from max(now, q's tail, the device's tail). */
static void enqueue_kernel(struct fc_queue *q, int64_t dur) {
    for (;;) {
        pthread_mutex_lock(&g_lock);
        int64_t now = now_ns();
        while (q->count && q->ends[q->head] <= now) {
            q->head = (q->head + 1) % FC_QUEUE_DEPTH;
            q->count--;
        }
        if (q->count < FC_QUEUE_DEPTH)
            break;
        int64_t oldest = q->ends[q->head];
        pthread_mutex_unlock(&g_lock);
        sleep_until(oldest);
    }
    struct fc_machine *m = machine();
    int mdev = g_vis[q->dev];
    machine_lock(m);
    int64_t now = now_ns();
    int64_t start = now;
    if (q->tail > start)
        start = q->tail;
    if (m->dev[mdev].tail_ns > start)
        start = m->dev[mdev].tail_ns;
    int64_t end = start + dur;
    m->dev[mdev].tail_ns = end;
    int slot = my_slot(m);
    if (slot >= 0)
        add_busy(m, mdev, slot, start, end);
    pthread_mutex_unlock(&m->lock);
    q->tail = end;
    q->ends[(q->head + q->count) % FC_QUEUE_DEPTH] = end;
    q->count++;
    pthread_mutex_unlock(&g_lock);
}

/* when the work queued on stream s (or, for the default stream, on context c) completes; 0: none */
static int64_t queue_tail(CUstream s, struct CUctx_st *c) {
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 0);
    int64_t t = q ? q->tail : 0;
    pthread_mutex_unlock(&g_lock);
    return t;
}

/* the tail of every queue of context c (cuCtxSynchronize) */
static int64_t ctx_tail(struct CUctx_st *c) {
    int64_t t = 0;
    pthread_mutex_lock(&g_lock);
    for (struct fc_queue *q = g_queues; q; q = q->next)
        if (q->ctx == c && q->tail > t)
            t = q->tail;
    pthread_mutex_unlock(&g_lock);
    return t;
}

/* fakecuda.c's synchronisation calls wait here */
static void fc_gpu_wait_stream(CUstream s, struct CUctx_st *c) { sleep_until(queue_tail(s, c)); }
static void fc_gpu_wait_ctx(struct CUctx_st *c) { sleep_until(ctx_tail(c)); }
static int fc_gpu_stream_busy(CUstream s, struct CUctx_st *c) { return queue_tail(s, c) > now_ns(); }
static int fc_gpu_stream_capturing(CUstream s, struct CUctx_st *c) {
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 0);
    int r = q && q->capture;
    if (r)
        q->capture_invalid = 1; /* a synchronize inside a capture is illegal and ends it */
    pthread_mutex_unlock(&g_lock);
    return r;
}
/* Whether a stream of context c captures; every such capture is invalidated (a wait for all of the
 * context's streams, cuCtxSynchronize, conflicts with each). */
static int fc_gpu_ctx_capturing(struct CUctx_st *c) {
    int r = 0;
    pthread_mutex_lock(&g_lock);
    for (struct fc_queue *q = g_queues; q; q = q->next)
        if (q->ctx == c && q->capture) {
            q->capture_invalid = 1;
            r = 1;
        }
    pthread_mutex_unlock(&g_lock);
    return r;
}
static void fc_gpu_stream_destroyed(CUstream s) {
    pthread_mutex_lock(&g_lock);
    queue_forget(s);
    pthread_mutex_unlock(&g_lock);
}

/* ---- modules and functions ------------------------------------------------------------------ */

enum { FC_MODEL_WAVES = 0, FC_MODEL_STREAM_READ = 1 };

struct CUmod_st {
    uint32_t magic;
    char *image; /* a copy, NUL-terminated; names are looked up in it */
    size_t len;
};

struct CUfunc_st {
    uint32_t magic;
    struct CUmod_st *mod;
    int model;
    int nparams; /* parameters the model reads and graph nodes keep (0: unknown, none kept) */
    char name[128];
};

/* The size of a module image: PTX is NUL-terminated text; a cubin/fatbin is an ELF (its header says
 * how long it is) or a fatbin wrapper. A fake driver cannot load code: it keeps the bytes to find the
 * function names the program asks for. */
static size_t image_len(const void *image) {
    const unsigned char *p = image;
    if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F' && p[4] == 2) {
        uint64_t shoff, phoff;
        uint16_t shentsize, shnum;
        memcpy(&phoff, p + 0x20, 8);
        memcpy(&shoff, p + 0x28, 8);
        memcpy(&shentsize, p + 0x3a, 2);
        memcpy(&shnum, p + 0x3c, 2);
        (void)phoff;
        return (size_t)(shoff + (uint64_t)shentsize * shnum);
    }
    if (p[0] == 0x50 && p[1] == 0xed && p[2] == 0x55 && p[3] == 0xba) { /* fatbin: magic, version, header size, size */
        uint16_t hsize;
        uint64_t fsize;
        memcpy(&hsize, p + 6, 2);
        memcpy(&fsize, p + 8, 8);
        return (size_t)(hsize + fsize);
    }
    return strlen((const char *)image);
}

static CUresult fc_cuModuleLoadData(CUmodule *pmod, const void *image) {
    NEED_INIT();
    if (!pmod || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cur_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    size_t n = image_len(image);
    struct CUmod_st *m = calloc(1, sizeof *m);
    char *copy = malloc(n + 1);
    if (!m || !copy) {
        free(m);
        free(copy);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(copy, image, n);
    copy[n] = 0;
    *m = (struct CUmod_st){FC_MOD_MAGIC, copy, n};
    *pmod = m;
    return CUDA_SUCCESS;
}

static CUresult fc_cuModuleLoadDataEx(CUmodule *pmod, const void *image, unsigned int n, CUjit_option *o, void **v) {
    (void)n;
    (void)o;
    (void)v;
    return fc_cuModuleLoadData(pmod, image);
}

static CUresult fc_cuModuleUnload(CUmodule mod) {
    NEED_INIT();
    if (!mod || mod->magic != FC_MOD_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    mod->magic = 0;
    free(mod->image);
    free(mod);
    return CUDA_SUCCESS;
}

static int image_has(const struct CUmod_st *m, const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i + n <= m->len; i++)
        if (m->image[i] == name[0] && memcmp(m->image + i, name, n) == 0) {
            char after = i + n < m->len ? m->image[i + n] : 0;
            char before = i ? m->image[i - 1] : 0;
            int ident = (after == '_' || (after >= '0' && after <= '9') || (after >= 'a' && after <= 'z') ||
                         (after >= 'A' && after <= 'Z')) ||
                        (before == '_' || (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z'));
            if (!ident)
                return 1;
        }
    return 0;
}

static CUresult fc_cuModuleGetFunction(CUfunction *pf, CUmodule mod, const char *name) {
    NEED_INIT();
    if (!pf || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!mod || mod->magic != FC_MOD_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    if (strlen(name) >= sizeof(((struct CUfunc_st *)0)->name) || !image_has(mod, name))
        return CUDA_ERROR_NOT_FOUND;
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->magic = FC_FUNC_MAGIC;
    f->mod = mod;
    strcpy(f->name, name);
    if (strcmp(name, "lp_stream_read") == 0) {
        f->model = FC_MODEL_STREAM_READ;
        f->nparams = 3;
    }
    *pf = f;
    return CUDA_SUCCESS;
}

static int valid_func(CUfunction f) { return f && f->magic == FC_FUNC_MAGIC; }

/* A kernel's duration in ns (see the top of this file). params: the values of the model's parameters. */
static int64_t kernel_ns(const struct CUfunc_st *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, const uint64_t *params) {
    uint64_t blocks = (uint64_t)gx * gy * gz;
    uint64_t threads = (uint64_t)bx * by * bz;
    if (f->model == FC_MODEL_STREAM_READ) {
        double eff = blocks >= (uint64_t)g_gen->sm ? 1.0 : (double)blocks / g_gen->sm;
        return FC_KERNEL_FIXED_NS + (int64_t)((double)params[1] / (g_gen->bytes_per_ns * eff));
    }
    uint64_t per_sm = threads ? (uint64_t)g_gen->threads_per_sm / threads : 1;
    if (per_sm == 0)
        per_sm = 1;
    uint64_t slots = per_sm * (uint64_t)g_gen->sm;
    return FC_KERNEL_FIXED_NS + FC_WAVE_NS * (int64_t)((blocks + slots - 1) / slots);
}

static void copy_params(const struct CUfunc_st *f, void **kernelParams, uint64_t *out) {
    memset(out, 0, sizeof(uint64_t) * FC_MAX_KPARAMS);
    for (int i = 0; kernelParams && i < f->nparams; i++)
        memcpy(&out[i], kernelParams[i], sizeof(uint64_t)); /* the models' parameters are 8-byte values */
}

/* ---- graphs -------------------------------------------------------------------------------- */

struct CUgraph_st;
struct CUgraphNode_st {
    uint32_t magic;
    CUgraphNodeType type;
    struct CUgraph_st *owner;
    /* kernel */
    struct CUfunc_st *func;
    unsigned grid[3], block[3], smem;
    uint64_t params[FC_MAX_KPARAMS];
    void *param_ptrs[FC_MAX_KPARAMS]; /* what GetParams hands out: pointers into params */
    /* child graph (owned clone) / conditional bodies (owned) */
    struct CUgraph_st *child;
    CUgraphConditionalNodeType ctype;
    CUgraphConditionalHandle handle;
    unsigned nbody;
    struct CUgraph_st *body[8];
    /* memory nodes (captured allocations and frees: fakecuda.c's stream-capture section) */
    struct fc_graph_mem *mem; /* the allocation a MEM_ALLOC / MEM_FREE node works on (one reference) */
    CUdeviceptr free_ptr;      /* a MEM_FREE node of memory the graph did not allocate */
    struct CUgraphNode_st *next;
};

struct CUgraph_st {
    uint32_t magic;
    struct CUgraphNode_st *first, *last;
    size_t nnodes;
    unsigned handle_defaults[64]; /* conditional handles created on this graph: their default values */
    unsigned nhandles;
};

struct fc_xkernel { /* one kernel (or memory node) an executable graph runs */
    const struct CUgraphNode_st *origin; /* the node of the instantiated graph it came from (top level) */
    CUgraphNodeType memop;     /* MEM_ALLOC / MEM_FREE: a memory node (func unused); else 0 */
    struct fc_graph_mem *mem;  /* as the node's, one reference per executable */
    CUdeviceptr free_ptr;
    struct CUfunc_st *func;
    unsigned grid[3], block[3];
    uint64_t params[FC_MAX_KPARAMS];
};

struct CUgraphExec_st {
    uint32_t magic;
    struct fc_xkernel *k;
    size_t nk, cap;
    int dev;
};

static struct CUgraph_st *graph_new(void) {
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (g)
        g->magic = FC_GRAPH_MAGIC;
    return g;
}

static int valid_graph(CUgraph g) { return g && g->magic == FC_GRAPH_MAGIC; }
static int valid_node(CUgraphNode n) { return n && n->magic == FC_NODE_MAGIC; }

static void graph_free(struct CUgraph_st *g) {
    if (!g)
        return;
    for (struct CUgraphNode_st *n = g->first, *next; n; n = next) {
        next = n->next;
        graph_free(n->child);
        for (unsigned i = 0; i < n->nbody; i++)
            graph_free(n->body[i]);
        if (n->mem)
            graph_mem_unref(n->mem);
        n->magic = 0;
        free(n);
    }
    g->magic = 0;
    free(g);
}

static struct CUgraphNode_st *node_add(struct CUgraph_st *g, CUgraphNodeType type) {
    struct CUgraphNode_st *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->magic = FC_NODE_MAGIC;
    n->type = type;
    n->owner = g;
    for (int i = 0; i < FC_MAX_KPARAMS; i++)
        n->param_ptrs[i] = &n->params[i];
    if (g->last)
        g->last->next = n;
    else
        g->first = n;
    g->last = n;
    g->nnodes++;
    return n;
}

static void node_set_kernel(struct CUgraphNode_st *n, const CUDA_KERNEL_NODE_PARAMS *p) {
    n->func = p->func;
    n->grid[0] = p->gridDimX, n->grid[1] = p->gridDimY, n->grid[2] = p->gridDimZ;
    n->block[0] = p->blockDimX, n->block[1] = p->blockDimY, n->block[2] = p->blockDimZ;
    n->smem = p->sharedMemBytes;
    copy_params(p->func, p->kernelParams, n->params);
}

static struct CUgraph_st *graph_clone(const struct CUgraph_st *g);

static struct CUgraphNode_st *node_clone_into(struct CUgraph_st *dst, const struct CUgraphNode_st *n) {
    struct CUgraphNode_st *c = node_add(dst, n->type);
    if (!c)
        return NULL;
    c->func = n->func;
    memcpy(c->grid, n->grid, sizeof c->grid);
    memcpy(c->block, n->block, sizeof c->block);
    c->smem = n->smem;
    memcpy(c->params, n->params, sizeof c->params);
    c->child = n->child ? graph_clone(n->child) : NULL;
    c->ctype = n->ctype;
    c->handle = n->handle;
    c->nbody = n->nbody;
    for (unsigned i = 0; i < n->nbody; i++)
        c->body[i] = graph_clone(n->body[i]);
    c->mem = n->mem ? graph_mem_ref(n->mem) : NULL;
    c->free_ptr = n->free_ptr;
    return c;
}

static struct CUgraph_st *graph_clone(const struct CUgraph_st *g) {
    struct CUgraph_st *c = graph_new();
    if (!c)
        return NULL;
    memcpy(c->handle_defaults, g->handle_defaults, sizeof c->handle_defaults);
    c->nhandles = g->nhandles;
    for (const struct CUgraphNode_st *n = g->first; n; n = n->next)
        node_clone_into(c, n);
    return c;
}

static CUresult fc_cuGraphCreate(CUgraph *pg, unsigned int flags) {
    NEED_INIT();
    if (!pg || flags)
        return CUDA_ERROR_INVALID_VALUE;
    *pg = graph_new();
    return *pg ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fc_cuGraphDestroy(CUgraph g) {
    NEED_INIT();
    if (!valid_graph(g))
        return CUDA_ERROR_INVALID_VALUE;
    graph_free(g);
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphAddKernelNode_v2(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                           const CUDA_KERNEL_NODE_PARAMS *p) {
    NEED_INIT();
    (void)deps;
    (void)ndeps; /* dependencies do not change a serial device's timing */
    if (!pn || !valid_graph(g) || !p || !valid_func(p->func))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphNode_st *n = node_add(g, CU_GRAPH_NODE_TYPE_KERNEL);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    node_set_kernel(n, p);
    *pn = n;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphAddEmptyNode(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps, size_t ndeps) {
    NEED_INIT();
    (void)deps;
    (void)ndeps;
    if (!pn || !valid_graph(g))
        return CUDA_ERROR_INVALID_VALUE;
    *pn = node_add(g, CU_GRAPH_NODE_TYPE_EMPTY);
    return *pn ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* The driver clones the child graph into the node (CUDA driver API, cuGraphAddChildGraphNode). */
static CUresult fc_cuGraphAddChildGraphNode(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                            CUgraph child) {
    NEED_INIT();
    (void)deps;
    (void)ndeps;
    if (!pn || !valid_graph(g) || !valid_graph(child))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphNode_st *n = node_add(g, CU_GRAPH_NODE_TYPE_GRAPH);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->child = graph_clone(child);
    *pn = n;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *ph, CUgraph g, CUcontext ctx,
                                                  unsigned int def, unsigned int flags) {
    NEED_INIT();
    (void)ctx;
    if (!ph || !valid_graph(g) || g->nhandles >= 64)
        return CUDA_ERROR_INVALID_VALUE;
    /* without CU_GRAPH_COND_ASSIGN_DEFAULT the value is undefined until device code sets it: 0 here */
    g->handle_defaults[g->nhandles] = (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) ? def : 0;
    *ph = (CUgraphConditionalHandle)g->nhandles++;
    return CUDA_SUCCESS;
}

/* cuGraphAddNode: kernel, empty, child-graph and conditional nodes (the kinds a compute graph's cost
 * depends on); other kinds are kept as nodes that take no device time. */
static CUresult fc_cuGraphAddNode_v2(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                     size_t ndeps, CUgraphNodeParams *p) {
    NEED_INIT();
    (void)deps;
    (void)edges;
    (void)ndeps;
    if (!pn || !valid_graph(g) || !p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        CUDA_KERNEL_NODE_PARAMS kp = {0};
        kp.func = p->kernel.func;
        kp.gridDimX = p->kernel.gridDimX, kp.gridDimY = p->kernel.gridDimY, kp.gridDimZ = p->kernel.gridDimZ;
        kp.blockDimX = p->kernel.blockDimX, kp.blockDimY = p->kernel.blockDimY, kp.blockDimZ = p->kernel.blockDimZ;
        kp.sharedMemBytes = p->kernel.sharedMemBytes;
        kp.kernelParams = p->kernel.kernelParams;
        return fc_cuGraphAddKernelNode_v2(pn, g, NULL, 0, &kp);
    }
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH)
        return fc_cuGraphAddChildGraphNode(pn, g, NULL, 0, p->graph.graph);
    struct CUgraphNode_st *n = node_add(g, p->type);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        CUDA_CONDITIONAL_NODE_PARAMS *c = &p->conditional;
        unsigned want = c->type == CU_GRAPH_COND_TYPE_WHILE ? 1 : c->size;
        if (c->size == 0 || c->size > 8 || (c->type == CU_GRAPH_COND_TYPE_WHILE && c->size != 1) ||
            (c->type == CU_GRAPH_COND_TYPE_IF && c->size > 2) || (unsigned)c->handle >= g->nhandles) {
            n->type = CU_GRAPH_NODE_TYPE_EMPTY; /* never runs */
            return CUDA_ERROR_INVALID_VALUE;
        }
        n->ctype = c->type;
        n->handle = c->handle;
        n->nbody = want;
        for (unsigned i = 0; i < want; i++)
            n->body[i] = graph_new();
        c->phGraph_out = (CUgraph *)n->body; /* CUDA-owned, valid for the node's lifetime */
    }
    *pn = n;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *num) {
    NEED_INIT();
    if (!valid_graph(g) || !num)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes) {
        size_t i = 0;
        for (struct CUgraphNode_st *n = g->first; n && i < *num; n = n->next)
            nodes[i++] = n;
        *num = i;
    } else {
        *num = g->nnodes;
    }
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphNodeGetType(CUgraphNode n, CUgraphNodeType *t) {
    NEED_INIT();
    if (!valid_node(n) || !t)
        return CUDA_ERROR_INVALID_VALUE;
    *t = n->type;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphKernelNodeGetParams_v2(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS *p) {
    NEED_INIT();
    if (!valid_node(n) || !p || n->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(p, 0, sizeof *p);
    p->func = n->func;
    p->gridDimX = n->grid[0], p->gridDimY = n->grid[1], p->gridDimZ = n->grid[2];
    p->blockDimX = n->block[0], p->blockDimY = n->block[1], p->blockDimZ = n->block[2];
    p->sharedMemBytes = n->smem;
    p->kernelParams = n->func->nparams ? n->param_ptrs : NULL;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphKernelNodeSetParams_v2(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p) {
    NEED_INIT();
    if (!valid_node(n) || !p || n->type != CU_GRAPH_NODE_TYPE_KERNEL || !valid_func(p->func))
        return CUDA_ERROR_INVALID_VALUE;
    node_set_kernel(n, p);
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphChildGraphNodeGetGraph(CUgraphNode n, CUgraph *pg) {
    NEED_INIT();
    if (!valid_node(n) || !pg || n->type != CU_GRAPH_NODE_TYPE_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    *pg = n->child;
    return CUDA_SUCCESS;
}

/* ---- executable graphs ---- */
/* the memory nodes' references an executable's entries hold */
static void exec_release_mem(struct fc_xkernel *k, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (k[i].mem)
            graph_mem_unref(k[i].mem);
}


static int exec_push(struct CUgraphExec_st *x, const struct CUgraphNode_st *origin, const struct CUgraphNode_st *n) {
    if (x->nk == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        struct fc_xkernel *k = realloc(x->k, cap * sizeof *k);
        if (!k)
            return -1;
        x->k = k;
        x->cap = cap;
    }
    struct fc_xkernel *k = &x->k[x->nk++];
    memset(k, 0, sizeof *k);
    k->origin = origin;
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
        k->memop = n->type;
        k->mem = n->mem ? graph_mem_ref(n->mem) : NULL;
        k->free_ptr = n->free_ptr;
        return 0;
    }
    k->func = n->func;
    memcpy(k->grid, n->grid, sizeof k->grid);
    memcpy(k->block, n->block, sizeof k->block);
    memcpy(k->params, n->params, sizeof k->params);
    return 0;
}

/* Flatten what one launch runs: kernel nodes in order, child graphs inline, conditional bodies as their
 * default value says. `origin`: the top-level node the kernels come from (NULL: use each node). */
static int exec_flatten(struct CUgraphExec_st *x, const struct CUgraph_st *g, const struct CUgraph_st *top,
                        const struct CUgraphNode_st *origin) {
    for (const struct CUgraphNode_st *n = g->first; n; n = n->next) {
        const struct CUgraphNode_st *o = origin ? origin : n;
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL || n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
            n->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            if (exec_push(x, o, n))
                return -1;
        } else if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child) {
            if (exec_flatten(x, n->child, top, o))
                return -1;
        } else if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
            unsigned v = (unsigned)n->handle < n->owner->nhandles ? n->owner->handle_defaults[n->handle] : 0;
            const struct CUgraph_st *body = NULL;
            if (n->ctype == CU_GRAPH_COND_TYPE_IF)
                body = v ? n->body[0] : (n->nbody == 2 ? n->body[1] : NULL);
            else if (n->ctype == CU_GRAPH_COND_TYPE_WHILE)
                body = v ? n->body[0] : NULL; /* once: no device code runs to clear the condition */
            else if (v < n->nbody)
                body = n->body[v];
            if (body && exec_flatten(x, body, top, o))
                return -1;
        }
    }
    return 0;
}

static CUresult instantiate(CUgraphExec *px, CUgraph g) {
    if (!px || !valid_graph(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = FC_EXEC_MAGIC;
    x->dev = c->dev;
    if (exec_flatten(x, g, g, NULL)) {
        exec_release_mem(x->k, x->nk);
        free(x->k);
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *px = x;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphInstantiateWithFlags(CUgraphExec *px, CUgraph g, unsigned long long flags) {
    NEED_INIT();
    (void)flags;
    return instantiate(px, g);
}

static CUresult fc_cuGraphInstantiateWithParams(CUgraphExec *px, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    NEED_INIT();
    CUresult r = instantiate(px, g);
    if (p)
        p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

static int valid_exec(CUgraphExec x) { return x && x->magic == FC_EXEC_MAGIC; }


static CUresult fc_cuGraphExecDestroy(CUgraphExec x) {
    NEED_INIT();
    if (!valid_exec(x))
        return CUDA_ERROR_INVALID_VALUE;
    x->magic = 0;
    exec_release_mem(x->k, x->nk);
    free(x->k);
    free(x);
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphExecKernelNodeSetParams_v2(CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p) {
    NEED_INIT();
    if (!valid_exec(x) || !valid_node(n) || !p || n->type != CU_GRAPH_NODE_TYPE_KERNEL || !valid_func(p->func))
        return CUDA_ERROR_INVALID_VALUE;
    int found = 0;
    for (size_t i = 0; i < x->nk; i++)
        if (x->k[i].origin == n) {
            struct fc_xkernel *k = &x->k[i];
            k->func = p->func;
            k->grid[0] = p->gridDimX, k->grid[1] = p->gridDimY, k->grid[2] = p->gridDimZ;
            k->block[0] = p->blockDimX, k->block[1] = p->blockDimY, k->block[2] = p->blockDimZ;
            copy_params(p->func, p->kernelParams, k->params);
            found = 1;
        }
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* cuGraphExecUpdate: the executable takes the parameters of a graph of the same shape (the kinds and
 * order of its nodes); otherwise CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED and nothing changes. */
static CUresult fc_cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info) {
    NEED_INIT();
    if (!valid_exec(x) || !valid_graph(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st fresh = {FC_EXEC_MAGIC, NULL, 0, 0, x->dev};
    if (exec_flatten(&fresh, g, g, NULL)) {
        exec_release_mem(fresh.k, fresh.nk);
        free(fresh.k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (info)
        memset(info, 0, sizeof *info);
    if (fresh.nk != x->nk) {
        exec_release_mem(fresh.k, fresh.nk);
        free(fresh.k);
        if (info)
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    exec_release_mem(x->k, x->nk); /* the fresh entries hold their own references */
    for (size_t i = 0; i < x->nk; i++) {
        const struct CUgraphNode_st *keep = x->k[i].origin;
        x->k[i] = fresh.k[i];
        x->k[i].origin = keep; /* the executable's nodes keep their identity */
    }
    free(fresh.k);
    if (info)
        info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphUpload(CUgraphExec x, CUstream s) {
    NEED_INIT();
    struct CUctx_st *c;
    if (!valid_exec(x))
        return CUDA_ERROR_INVALID_VALUE;
    return stream_ctx(s, &c);
}

/* ---- launching --------------------------------------------------------------------------------- */

static CUresult capture_kernel(struct fc_queue *q, struct CUfunc_st *f, const unsigned *grid, const unsigned *block,
                               unsigned smem, void **kernelParams) {
    /* caller holds g_lock */
    struct CUgraphNode_st *n = node_add(q->capture, CU_GRAPH_NODE_TYPE_KERNEL);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUDA_KERNEL_NODE_PARAMS p = {0};
    p.func = f;
    p.gridDimX = grid[0], p.gridDimY = grid[1], p.gridDimZ = grid[2];
    p.blockDimX = block[0], p.blockDimY = block[1], p.blockDimZ = block[2];
    p.sharedMemBytes = smem;
    p.kernelParams = kernelParams;
    node_set_kernel(n, &p);
    q->capture_last = n;
    return CUDA_SUCCESS;
}

static CUresult launch(struct CUfunc_st *f, const unsigned *grid, const unsigned *block, unsigned smem, CUstream s,
                       void **kernelParams) {
    NEED_INIT();
    if (!valid_func(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2])
        return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->nparams && !kernelParams)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 1);
    if (!q) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (q->capture) {
        r = q->capture_invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                               : capture_kernel(q, f, grid, block, smem, kernelParams);
        pthread_mutex_unlock(&g_lock);
        return r;
    }
    pthread_mutex_unlock(&g_lock);
    uint64_t params[FC_MAX_KPARAMS];
    copy_params(f, kernelParams, params);
    enqueue_kernel(q, kernel_ns(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], params));
    return CUDA_SUCCESS;
}

static CUresult fc_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned smem, CUstream s, void **kernelParams, void **extra) {
    (void)extra;
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, smem, s, kernelParams);
}

static CUresult fc_cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **kernelParams, void **extra) {
    (void)extra;
    if (!cfg)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
    unsigned block[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
    return launch(f, grid, block, cfg->sharedMemBytes, cfg->hStream, kernelParams);
}

static CUresult fc_cuGraphLaunch(CUgraphExec x, CUstream s) {
    NEED_INIT();
    if (!valid_exec(x))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 1);
    int capturing = q && q->capture;
    pthread_mutex_unlock(&g_lock);
    if (!q)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (capturing) /* a graph launch into a capture (child-graph node) is not modelled */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    for (size_t i = 0; i < x->nk; i++) {
        const struct fc_xkernel *k = &x->k[i];
        if (k->memop) { /* a memory node: fakecuda.c's stream-capture section */
            graph_mem_launch(k->memop, k->mem, k->free_ptr);
            continue;
        }
        enqueue_kernel(q, kernel_ns(k->func, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
                                    k->params));
    }
    return CUDA_SUCCESS;
}

/* cuMemsetD8: synchronous with respect to the host for device memory (CUDA driver API, "API
 * synchronization behavior"), and as long as writing the bytes at the generation's bandwidth. */
static CUresult fc_cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    NEED_INIT();
    (void)v;
    struct CUctx_st *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(NULL, c, 1);
    pthread_mutex_unlock(&g_lock);
    if (!q)
        return CUDA_ERROR_OUT_OF_MEMORY;
    enqueue_kernel(q, FC_KERNEL_FIXED_NS + (int64_t)((double)n / g_gen->bytes_per_ns));
    sleep_until(queue_tail(NULL, c));
    return CUDA_SUCCESS;
}

/* ---- stream capture ------------------------------------------------------------------------------ */

static int is_default_stream(CUstream s) {
    uintptr_t v = (uintptr_t)s;
    return v == 0 || v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD;
}

static CUresult fc_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
    NEED_INIT();
    if (is_default_stream(s)) /* the legacy stream cannot be captured */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 1);
    if (!q)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (q->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (!(q->capture = graph_new()))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        q->capture_invalid = 0;
        q->capture_mode = mode;
        q->capture_thread = pthread_self();
        q->capture_id = g_next_capture_id++;
        q->capture_last = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult fc_cuStreamBeginCapture_v1(CUstream s) { return fc_cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL); }

static CUresult fc_cuStreamEndCapture(CUstream s, CUgraph *pg) {
    NEED_INIT();
    if (!pg)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = queue_for(s, c, 0);
    if (!q || !q->capture) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (q->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(q->capture_thread, pthread_self())) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD; /* the capture goes on */
    } else if (q->capture_invalid) {
        graph_free(q->capture);
        *pg = NULL;
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        *pg = q->capture;
    }
    if (q)
        q->capture = NULL, q->capture_invalid = 0, q->capture_last = NULL;
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult capture_status(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                               const CUgraphNode **deps, size_t *ndeps) {
    NEED_INIT();
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_lock);
    struct fc_queue *q = is_default_stream(s) ? NULL : queue_for(s, c, 0);
    CUstreamCaptureStatus v = !q || !q->capture ? CU_STREAM_CAPTURE_STATUS_NONE
                              : q->capture_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (st)
        *st = v;
    if (v == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (id)
            *id = q->capture_id;
        if (g)
            *g = q->capture;
        if (deps)
            *deps = q->capture_last ? (const CUgraphNode *)&q->capture_last : NULL;
        if (ndeps)
            *ndeps = q->capture_last ? 1 : 0;
    }
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) {
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    return capture_status(s, st, NULL, NULL, NULL, NULL);
}

static CUresult fc_cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                             const CUgraphNode **deps, size_t *ndeps) {
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    return capture_status(s, st, id, g, deps, ndeps);
}

static CUresult fc_cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps) {
    if (edges)
        *edges = NULL; /* every edge is a default one */
    return fc_cuStreamGetCaptureInfo_v2(s, st, id, g, deps, ndeps);
}

/* ---- events ---------------------------------------------------------------------------------- */

struct CUevent_st {
    uint32_t magic;
    int64_t when; /* monotonic ns at which the work before the record completes; 0: never recorded */
};

static CUresult fc_cuEventCreate(CUevent *pe, unsigned int flags) {
    NEED_INIT();
    (void)flags;
    if (!pe)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cur_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FC_EVENT_MAGIC;
    *pe = e;
    return CUDA_SUCCESS;
}

static int valid_event(CUevent e) { return e && e->magic == FC_EVENT_MAGIC; }

static CUresult fc_cuEventRecord(CUevent e, CUstream s) {
    NEED_INIT();
    if (!valid_event(e))
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUctx_st *c;
    CUresult r = stream_ctx(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    int64_t t = queue_tail(s, c), now = now_ns();
    e->when = t > now ? t : now;
    return CUDA_SUCCESS;
}

static CUresult fc_cuEventSynchronize(CUevent e) {
    NEED_INIT();
    if (!valid_event(e))
        return CUDA_ERROR_INVALID_HANDLE;
    sleep_until(e->when);
    return CUDA_SUCCESS;
}

static CUresult fc_cuEventQuery(CUevent e) {
    NEED_INIT();
    if (!valid_event(e))
        return CUDA_ERROR_INVALID_HANDLE;
    return e->when <= now_ns() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult fc_cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    NEED_INIT();
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_event(a) || !valid_event(b))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!a->when || !b->when)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->when > now_ns() || b->when > now_ns())
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(b->when - a->when) / 1e6);
    return CUDA_SUCCESS;
}

static CUresult fc_cuEventDestroy_v2(CUevent e) {
    NEED_INIT();
    if (!valid_event(e))
        return CUDA_ERROR_INVALID_HANDLE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}

/* ---- the symbol table's part ------------------------------------------------------------------ */

#define FC_GPU_SYMBOLS(X)                                                       \
    X("cuModuleLoadData", fc_cuModuleLoadData)                                  \
    X("cuModuleLoadDataEx", fc_cuModuleLoadDataEx)                              \
    X("cuModuleUnload", fc_cuModuleUnload)                                      \
    X("cuModuleGetFunction", fc_cuModuleGetFunction)                            \
    X("cuLaunchKernel", fc_cuLaunchKernel)                                      \
    X("cuLaunchKernelEx", fc_cuLaunchKernelEx)                                  \
    X("cuMemsetD8_v2", fc_cuMemsetD8_v2)                                        \
    X("cuGraphCreate", fc_cuGraphCreate)                                        \
    X("cuGraphDestroy", fc_cuGraphDestroy)                                      \
    X("cuGraphAddKernelNode_v2", fc_cuGraphAddKernelNode_v2)                    \
    X("cuGraphAddEmptyNode", fc_cuGraphAddEmptyNode)                            \
    X("cuGraphAddChildGraphNode", fc_cuGraphAddChildGraphNode)                  \
    X("cuGraphAddNode_v2", fc_cuGraphAddNode_v2)                                \
    X("cuGraphConditionalHandleCreate", fc_cuGraphConditionalHandleCreate)      \
    X("cuGraphGetNodes", fc_cuGraphGetNodes)                                    \
    X("cuGraphNodeGetType", fc_cuGraphNodeGetType)                              \
    X("cuGraphKernelNodeGetParams_v2", fc_cuGraphKernelNodeGetParams_v2)        \
    X("cuGraphKernelNodeSetParams_v2", fc_cuGraphKernelNodeSetParams_v2)        \
    X("cuGraphChildGraphNodeGetGraph", fc_cuGraphChildGraphNodeGetGraph)        \
    X("cuGraphInstantiateWithFlags", fc_cuGraphInstantiateWithFlags)            \
    X("cuGraphInstantiateWithParams", fc_cuGraphInstantiateWithParams)          \
    X("cuGraphExecDestroy", fc_cuGraphExecDestroy)                              \
    X("cuGraphExecKernelNodeSetParams_v2", fc_cuGraphExecKernelNodeSetParams_v2) \
    X("cuGraphExecUpdate_v2", fc_cuGraphExecUpdate_v2)                          \
    X("cuGraphUpload", fc_cuGraphUpload)                                        \
    X("cuGraphLaunch", fc_cuGraphLaunch)                                        \
    X("cuStreamBeginCapture", fc_cuStreamBeginCapture_v1)                       \
    X("cuStreamBeginCapture_v2", fc_cuStreamBeginCapture_v2)                    \
    X("cuStreamEndCapture", fc_cuStreamEndCapture)                              \
    X("cuStreamIsCapturing", fc_cuStreamIsCapturing)                            \
    X("cuStreamGetCaptureInfo_v2", fc_cuStreamGetCaptureInfo_v2)                \
    X("cuStreamGetCaptureInfo_v3", fc_cuStreamGetCaptureInfo_v3)                \
    X("cuEventCreate", fc_cuEventCreate)                                        \
    X("cuEventRecord", fc_cuEventRecord)                                        \
    X("cuEventSynchronize", fc_cuEventSynchronize)                              \
    X("cuEventQuery", fc_cuEventQuery)                                          \
    X("cuEventElapsedTime", fc_cuEventElapsedTime)                              \
    X("cuEventDestroy_v2", fc_cuEventDestroy_v2)

#define FC_GPU_EXPORT(name, impl) FC_EXPORT2(name, impl, )
