/* fakenvml: a simulated libnvidia-ml.so.1 matching fakecuda's devices.
 *
 * HAMi-core's init enumerates devices and UUIDs through NVML and finds its host pid by
 * diffing nvmlDeviceGetComputeRunningProcesses before/after retaining a primary context, so
 * the process list shows the calling pid exactly while a context of this process exists on
 * the device (state read from fakecuda through exported helpers; never via dlsym).
 *
 * The process list holds every process of the simulated machine with a context on the device (the
 * others come from fakegpu.c's shared machine, LUCEPATCH_FAKECUDA_MACHINE), and the per-process SM
 * utilisation is the share of time their kernels occupied it (fakegpu.c models that time).
 *
 * NVML enumerates the machine's GPUs whatever CUDA_VISIBLE_DEVICES says (NVML API reference,
 * nvmlDeviceGetHandleByIndex: the index is NVML's, which "may not correlate to other APIs" such as
 * CUDA's device ordinals), so index i here is machine GPU i.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "fakecuda_common.h"

struct nvmlDevice_st {
    unsigned int index;
};

static struct nvmlDevice_st g_dev[FC_MAX_DEVICES];
static int g_init_count;

static int ndev(void) { return lucepatch_fakecuda_device_count(); }

static int dev_index(nvmlDevice_t d) {
    if (!d || d < &g_dev[0] || d >= &g_dev[FC_MAX_DEVICES] || (int)d->index >= ndev())
        return -1;
    return (int)d->index;
}

#define NEED_INIT()                           \
    do {                                      \
        if (g_init_count <= 0)                \
            return NVML_ERROR_UNINITIALIZED;  \
    } while (0)

static nvmlReturn_t fn_nvmlInit_v2(void) {
    for (int i = 0; i < FC_MAX_DEVICES; i++)
        g_dev[i].index = (unsigned int)i;
    __atomic_add_fetch(&g_init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

static nvmlReturn_t fn_nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return fn_nvmlInit_v2();
}

static nvmlReturn_t fn_nvmlShutdown(void) {
    NEED_INIT();
    __atomic_sub_fetch(&g_init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

static const char *fn_nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t fn_nvmlDeviceGetCount_v2(unsigned int *n) {
    NEED_INIT();
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = (unsigned int)ndev();
    return NVML_SUCCESS;
}

static nvmlReturn_t fn_nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    NEED_INIT();
    if (!d || (int)i >= ndev())
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &g_dev[i];
    return NVML_SUCCESS;
}

static nvmlReturn_t fn_nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) {
    NEED_INIT();
    int x = dev_index(d);
    if (x < 0 || !i)
        return NVML_ERROR_INVALID_ARGUMENT;
    *i = (unsigned int)x;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t fn_nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    NEED_INIT();
    int x = dev_index(d);
    if (x < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    char buf[64]; /* same bytes as fakecuda's cuDeviceGetUuid */
    snprintf(buf, sizeof buf, FC_UUID_FORMAT, x);
    return copy_str(uuid, len, buf);
}

static nvmlReturn_t fn_nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    NEED_INIT();
    if (dev_index(d) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return copy_str(name, len, lucepatch_fakecuda_device_name());
}

static nvmlReturn_t fn_nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    NEED_INIT();
    int x = dev_index(d);
    if (x < 0 || !m)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = FC_DEVICE_MEM;
    m->used = lucepatch_fakecuda_device_used(x);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

static nvmlReturn_t fn_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    NEED_INIT();
    int x = dev_index(d);
    if (x < 0 || !m)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = FC_DEVICE_MEM;
    m->reserved = 0;
    m->used = lucepatch_fakecuda_device_used(x);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

static nvmlReturn_t fn_nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    NEED_INIT();
    int x = dev_index(d);
    if (x < 0 || !p)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    p->bus = 0x18 + (unsigned int)x;
    p->pciDeviceId = 0x233510de; /* H200 device id | NVIDIA vendor id */
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", p->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", p->bus);
    return NVML_SUCCESS;
}

/* infoCount semantics: too small -> NVML_ERROR_INSUFFICIENT_SIZE with the needed count. The caller
 * first (its own state), then the machine's other processes holding a context there (their memory is
 * not modelled: 0). */
#define FC_MAX_PROCS 64
#define RUNNING_PROCESSES(infos_t)                                              \
    NEED_INIT();                                                                \
    int x = dev_index(d);                                                       \
    if (x < 0 || !count)                                                        \
        return NVML_ERROR_INVALID_ARGUMENT;                                     \
    unsigned int pids[FC_MAX_PROCS];                                            \
    unsigned int mine = lucepatch_fakecuda_device_has_context(x) ? 1u : 0u;     \
    unsigned int need = mine + (unsigned int)lucepatch_fakecuda_other_processes( \
                                   x, pids, FC_MAX_PROCS);                      \
    if (*count < need) {                                                        \
        *count = need;                                                          \
        return NVML_ERROR_INSUFFICIENT_SIZE;                                    \
    }                                                                           \
    *count = need;                                                              \
    if (need && !infos)                                                         \
        return NVML_ERROR_INVALID_ARGUMENT;                                     \
    for (unsigned int i = 0; i < need; i++) {                                   \
        memset(&infos[i], 0, sizeof(infos_t));                                  \
        infos[i].pid = i < mine ? (unsigned int)getpid() : pids[i - mine];      \
        infos[i].usedGpuMemory = i < mine ? lucepatch_fakecuda_device_used(x) : 0; \
    }                                                                           \
    return NVML_SUCCESS;

static nvmlReturn_t fn_nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count,
                                                            nvmlProcessInfo_v1_t *infos) {
    RUNNING_PROCESSES(nvmlProcessInfo_v1_t)
}

static nvmlReturn_t fn_nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                               nvmlProcessInfo_v2_t *infos) {
    RUNNING_PROCESSES(nvmlProcessInfo_v2_t)
}

/* nvmlDeviceGetProcessUtilization (NVML API reference): one sample per process with non-zero
 * utilisation since lastSeenTimeStamp (0: every sample the driver keeps); a NULL buffer asks for the
 * count (NVML_ERROR_INSUFFICIENT_SIZE with it), a short one too; none: NVML_ERROR_NOT_FOUND. smUtil is
 * the share of that window the process's kernels occupied the device (fakegpu.c). On the Blackwell
 * generation the call answers NVML_ERROR_NOT_SUPPORTED (driver >= 580; HAMi-core #218). */
static nvmlReturn_t fn_nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u,
                                                       unsigned int *count, unsigned long long last) {
    NEED_INIT();
    int x = dev_index(d);
    if (x < 0 || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!lucepatch_fakecuda_process_utilization_supported())
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int pids[FC_MAX_PROCS], pct[FC_MAX_PROCS];
    unsigned long long stamp = 0;
    int n = lucepatch_fakecuda_process_utilization(x, last, pids, pct, FC_MAX_PROCS, &stamp);
    if (n > FC_MAX_PROCS)
        n = FC_MAX_PROCS;
    if (n == 0) {
        *count = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (!u || *count < (unsigned int)n) {
        *count = (unsigned int)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        memset(&u[i], 0, sizeof u[i]);
        u[i].pid = pids[i];
        u[i].timeStamp = stamp;
        u[i].smUtil = pct[i];
    }
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

/* nvmlDeviceGetProcessesUtilizationInfo (NVML API reference; what Blackwell answers instead): the same
 * samples in a versioned struct; processSamplesCount is the array's size in and the count out. */
static nvmlReturn_t fn_nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t d, nvmlProcessesUtilizationInfo_t *info) {
    NEED_INIT();
    int x = dev_index(d);
    if (x < 0 || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlProcessesUtilizationInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned int pids[FC_MAX_PROCS], pct[FC_MAX_PROCS];
    unsigned long long stamp = 0;
    int n = lucepatch_fakecuda_process_utilization(x, info->lastSeenTimeStamp, pids, pct, FC_MAX_PROCS, &stamp);
    if (n > FC_MAX_PROCS)
        n = FC_MAX_PROCS;
    if (n == 0) {
        info->processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (!info->procUtilArray || info->processSamplesCount < (unsigned int)n) {
        info->processSamplesCount = (unsigned int)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        memset(&info->procUtilArray[i], 0, sizeof info->procUtilArray[i]);
        info->procUtilArray[i].pid = pids[i];
        info->procUtilArray[i].timeStamp = stamp;
        info->procUtilArray[i].smUtil = pct[i];
    }
    info->processSamplesCount = (unsigned int)n;
    return NVML_SUCCESS;
}

static nvmlReturn_t fn_nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    NEED_INIT();
    return copy_str(v, len, "580.00-lucepatch-fakecuda");
}

static nvmlReturn_t fn_nvmlSystemGetCudaDriverVersion(int *v) {
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = 13000;
    return NVML_SUCCESS;
}

FC_EXPORT("nvmlInit_v2", fn_nvmlInit_v2)
extern __typeof__(fn_nvmlInit_v2) fn_nvmlInit_v1__export __asm__("nvmlInit")
    __attribute__((alias("fn_nvmlInit_v2"), visibility("default")));
FC_EXPORT("nvmlInitWithFlags", fn_nvmlInitWithFlags)
FC_EXPORT("nvmlShutdown", fn_nvmlShutdown)
FC_EXPORT("nvmlErrorString", fn_nvmlErrorString)
FC_EXPORT("nvmlDeviceGetCount_v2", fn_nvmlDeviceGetCount_v2)
extern __typeof__(fn_nvmlDeviceGetCount_v2) fn_count_v1__export __asm__("nvmlDeviceGetCount")
    __attribute__((alias("fn_nvmlDeviceGetCount_v2"), visibility("default")));
FC_EXPORT("nvmlDeviceGetHandleByIndex_v2", fn_nvmlDeviceGetHandleByIndex_v2)
extern __typeof__(fn_nvmlDeviceGetHandleByIndex_v2) fn_handle_v1__export __asm__("nvmlDeviceGetHandleByIndex")
    __attribute__((alias("fn_nvmlDeviceGetHandleByIndex_v2"), visibility("default")));
FC_EXPORT("nvmlDeviceGetIndex", fn_nvmlDeviceGetIndex)
FC_EXPORT("nvmlDeviceGetUUID", fn_nvmlDeviceGetUUID)
FC_EXPORT("nvmlDeviceGetName", fn_nvmlDeviceGetName)
FC_EXPORT("nvmlDeviceGetMemoryInfo", fn_nvmlDeviceGetMemoryInfo)
FC_EXPORT("nvmlDeviceGetMemoryInfo_v2", fn_nvmlDeviceGetMemoryInfo_v2)
FC_EXPORT("nvmlDeviceGetPciInfo_v3", fn_nvmlDeviceGetPciInfo_v3)
extern __typeof__(fn_nvmlDeviceGetPciInfo_v3) fn_pci_v2__export __asm__("nvmlDeviceGetPciInfo_v2")
    __attribute__((alias("fn_nvmlDeviceGetPciInfo_v3"), visibility("default")));
extern __typeof__(fn_nvmlDeviceGetPciInfo_v3) fn_pci_v1__export __asm__("nvmlDeviceGetPciInfo")
    __attribute__((alias("fn_nvmlDeviceGetPciInfo_v3"), visibility("default")));
FC_EXPORT("nvmlDeviceGetComputeRunningProcesses", fn_nvmlDeviceGetComputeRunningProcesses)
FC_EXPORT("nvmlDeviceGetComputeRunningProcesses_v2", fn_nvmlDeviceGetComputeRunningProcesses_v2)
/* v3 shares the v2 struct (nvmlProcessInfo_t) in current nvml.h */
extern __typeof__(fn_nvmlDeviceGetComputeRunningProcesses_v2) fn_procs_v3__export
    __asm__("nvmlDeviceGetComputeRunningProcesses_v3")
    __attribute__((alias("fn_nvmlDeviceGetComputeRunningProcesses_v2"), visibility("default")));
FC_EXPORT("nvmlDeviceGetProcessUtilization", fn_nvmlDeviceGetProcessUtilization)
FC_EXPORT("nvmlDeviceGetProcessesUtilizationInfo", fn_nvmlDeviceGetProcessesUtilizationInfo)
FC_EXPORT("nvmlSystemGetDriverVersion", fn_nvmlSystemGetDriverVersion)
FC_EXPORT("nvmlSystemGetCudaDriverVersion", fn_nvmlSystemGetCudaDriverVersion)
extern __typeof__(fn_nvmlSystemGetCudaDriverVersion) fn_cudaver_v2__export __asm__("nvmlSystemGetCudaDriverVersion_v2")
    __attribute__((alias("fn_nvmlSystemGetCudaDriverVersion"), visibility("default")));
