/* Shared between the fake libcuda.so.1 and the fake libnvidia-ml.so.1.
 *
 * The NVML side needs to know which devices hold a context of this process and how much
 * memory is allocated (nvmlDeviceGetComputeRunningProcesses / GetMemoryInfo).  It must not
 * use dlsym (libvgpu.so replaces dlsym), so libnvidia-ml.so.1 links against libcuda.so.1 and
 * calls these few exported helpers directly.
 */
#ifndef LUCEPATCH_FAKECUDA_COMMON_H
#define LUCEPATCH_FAKECUDA_COMMON_H

#include <stddef.h>

#define FC_MAX_DEVICES 16
#define FC_DEVICE_MEM (80ULL << 30) /* 80 GiB per simulated device */
#define FC_DEVICE_NAME "lucepatch-fakecuda H200 (simulated)"
/* A machine GPU's UUID as NVML prints it (and CUDA_VISIBLE_DEVICES may name it); the argument is
 * the machine index. fakecuda's cuDeviceGetUuid returns the same 16 bytes. */
#define FC_UUID_FORMAT "GPU-1ce9a7c4-0000-4fa1-8b00-6c75636570%02x"

/* Export `impl` under the linker name `sym`.  An asm label sidesteps cuda.h/nvml.h macros
 * such as `#define cuGetProcAddress cuGetProcAddress_v2`, so both names can exist. */
#define FC_EXPORT(sym, impl)                                                                \
    extern __typeof__(impl) impl##__export __asm__(sym)                                     \
        __attribute__((alias(#impl), visibility("default")));

#define FC_API __attribute__((visibility("default")))

/* GPUs in the machine (NVML's count: CUDA_VISIBLE_DEVICES does not apply). */
FC_API int lucepatch_fakecuda_device_count(void);
/* 1 when any context (primary retained or created) on machine GPU `dev` is alive in this process. */
FC_API int lucepatch_fakecuda_device_has_context(int dev);
/* Bytes of device memory in use on machine GPU `dev` (allocations + VMM handles + context overhead). */
FC_API unsigned long long lucepatch_fakecuda_device_used(int dev);
/* The simulated generation (fakegpu.c): its key ("hopper", "blackwell") and device name, and whether
 * its NVML answers nvmlDeviceGetProcessUtilization (0: NOT_SUPPORTED, Blackwell with driver >= 580). */
FC_API const char *lucepatch_fakecuda_generation(void);
FC_API const char *lucepatch_fakecuda_device_name(void);
FC_API int lucepatch_fakecuda_process_utilization_supported(void);
/* Other live processes of the simulated machine holding a context on machine GPU `dev` (never the caller). */
FC_API int lucepatch_fakecuda_other_processes(int dev, unsigned int *pids, int max);
/* Per-process SM utilisation of machine GPU `dev` since `since_us` (CLOCK_REALTIME µs; 0 = the whole
 * buffer): up to `max` (pid, percent) pairs with a non-zero share; returns how many there are. */
FC_API int lucepatch_fakecuda_process_utilization(int dev, unsigned long long since_us, unsigned int *pids,
                                                  unsigned int *percent, int max, unsigned long long *stamp_us);

#endif
