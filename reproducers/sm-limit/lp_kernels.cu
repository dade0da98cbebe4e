// The sm-limit reproducer's kernel (issue 38): a bandwidth-bound read, what a batch-1 decode step is
// (every weight read once per token). Compiled to PTX by tools/gen_lp_kernels.py into lp_kernels_ptx.h,
// which the reproducer loads with cuModuleLoadData: the driver JIT-compiles it for whatever GPU runs it,
// and the simulated driver models its time from its parameters (lucepatch/native/fakecuda/fakegpu.c).
// Parameters: the buffer, the bytes to read, and a sink that is written only if the data hash to a value
// they never do, so the loads cannot be optimised away.
extern "C" __global__ void lp_stream_read(const uint4 *__restrict__ src, unsigned long long bytes,
                                          unsigned long long *sink) {
    unsigned long long n = bytes / sizeof(uint4);
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned int acc = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint4 v = src[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u)
        sink[0] = acc;
}
