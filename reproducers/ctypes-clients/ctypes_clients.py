"""ctypes-clients: the thread-pool patterns of real Python clients, on the CUDA driver API through
ctypes (no PyTorch): the same workload runner, load proof and verdicts as torch-clients, runnable
on the simulated driver, so CI exercises the workload path end to end.

Threads of a concurrent.futures.ThreadPoolExecutor have no current CUDA context (the driver's
context stack is per thread), exactly like PyTorch's and vLLM's worker threads that skip
cudaSetDevice. Stream-ordered calls on the main thread's stream are legal from them (the stream
carries its context); a synchronous cuMemAlloc is not (CUDA_ERROR_INVALID_CONTEXT).

Every scenario compares the interposer's accounting (cuMemGetInfo_v2: under HAMi-core with a
limit, limit - its accounted usage) with what the allocator really holds, so a fix that only
silences HAMi's `Illegal device id` log line still fails: for stream-ordered allocations HAMi
charges each allocation up to what the default pool's reservation grew (a pool may reserve more
than it was asked for), so its usage must grow by min(bytes allocated, pool growth); otherwise by
the bytes allocated.
"""

import ctypes
from concurrent.futures import ThreadPoolExecutor

import lp_workload as lp

MIB = 1 << 20
BLOCK = 64 * MIB
TASKS = 8
WORKERS = 4
# the pool reserves in granules; HAMi charges pool growth per allocation: allow one granule per task
SLACK = 2 * MIB * TASKS


def _setup():
    cu = lp.Driver()
    cu.setup_primary(0)
    lp.report_loaded()
    lp.report_driver(*cu.info(0))
    return cu


def control():
    """Main thread, context current: sync and stream-ordered allocations, each charged and uncharged."""
    cu = _setup()
    ok = True
    base = cu.used()
    r, ptr = cu.alloc(BLOCK)
    ok &= lp.check_result("main thread: cuMemAlloc", lp.CUDA_SUCCESS, r)
    ok &= lp.check_eq("usage after cuMemAlloc grows by the block", BLOCK, cu.used() - base)
    ok &= lp.check_result("main thread: cuMemFree", lp.CUDA_SUCCESS, cu.cuMemFree_v2(ptr))
    ok &= lp.check_eq("usage after cuMemFree is back", 0, cu.used() - base)
    stream = cu.stream()
    base, reserved0 = cu.used(), cu.pool_reserved(0)
    r, ptr = cu.alloc_async(BLOCK, stream)
    ok &= lp.check_result("main thread: cuMemAllocAsync", lp.CUDA_SUCCESS, r)
    ok &= lp.check_result("cuStreamSynchronize", lp.CUDA_SUCCESS, cu.cuStreamSynchronize(stream))
    grown = cu.pool_reserved(0) - reserved0
    lp.value("pool_reserved_delta", grown)
    lp.value("accounted_delta", cu.used() - base)
    ok &= lp.check_within("accounted usage follows the allocation (up to the pool's growth)", min(BLOCK, grown),
                          cu.used() - base, SLACK)
    ok &= lp.check_result("main thread: cuMemFreeAsync", lp.CUDA_SUCCESS, cu.cuMemFreeAsync(ptr, stream))
    ok &= lp.check_result("cuStreamSynchronize", lp.CUDA_SUCCESS, cu.cuStreamSynchronize(stream))
    return ok


def threadpool_async_alloc():
    """Context-less pool threads allocate stream-ordered memory on the main thread's stream."""
    cu = _setup()
    stream = cu.stream()
    base, reserved0 = cu.used(), cu.pool_reserved(0)
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(lambda _: cu.alloc_async(BLOCK, stream), range(TASKS)))
    ok = True
    for i, (r, _) in enumerate(results):
        ok &= lp.check_result(f"worker {i}: cuMemAllocAsync", lp.CUDA_SUCCESS, r)
    ok &= lp.check_result("cuStreamSynchronize", lp.CUDA_SUCCESS, cu.cuStreamSynchronize(stream))
    grown, charged = cu.pool_reserved(0) - reserved0, cu.used() - base
    lp.value("pool_reserved_delta", grown)
    lp.value("accounted_delta", charged)
    ok &= lp.check_within("accounted usage follows the allocations (up to the pool's growth)",
                          min(TASKS * BLOCK, grown), charged, SLACK)
    ok &= lp.check_eq("the pool grew by at least the allocations", True, grown >= TASKS * BLOCK)
    for r, ptr in results:
        if r == lp.CUDA_SUCCESS:
            cu.cuMemFreeAsync(ptr, stream)
    cu.cuStreamSynchronize(stream)
    return ok


def threadpool_async_free():
    """The main thread allocates on its stream; context-less pool threads free the allocations."""
    cu = _setup()
    stream = cu.stream()
    base = cu.used()
    ptrs = []
    ok = True
    for i in range(TASKS):
        r, ptr = cu.alloc_async(BLOCK, stream)
        ok &= lp.check_result(f"main thread: cuMemAllocAsync {i}", lp.CUDA_SUCCESS, r)
        ptrs.append(ptr)
    cu.cuStreamSynchronize(stream)
    charged = cu.used() - base
    lp.value("accounted_after_alloc", charged)
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(lambda p: cu.cuMemFreeAsync(p, stream), ptrs))
    for i, r in enumerate(results):
        ok &= lp.check_result(f"worker {i}: cuMemFreeAsync", lp.CUDA_SUCCESS, r)
    ok &= lp.check_result("cuStreamSynchronize", lp.CUDA_SUCCESS, cu.cuStreamSynchronize(stream))
    lp.value("accounted_after_free", cu.used() - base)
    ok &= lp.check_within("accounted usage is released with the frees", 0, cu.used() - base, SLACK)
    return ok


def threadpool_sync_alloc():
    """A synchronous cuMemAlloc from a context-less pool thread: the driver answers exactly
    CUDA_ERROR_INVALID_CONTEXT; nothing is allocated, nothing is charged."""
    cu = _setup()
    base = cu.used()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(lambda _: cu.alloc(BLOCK), range(TASKS)))
    ok = True
    for i, (r, ptr) in enumerate(results):
        ok &= lp.check_result(f"worker {i}: cuMemAlloc without a context", lp.CUDA_ERROR_INVALID_CONTEXT, r)
        if r == lp.CUDA_SUCCESS:
            cu.cuMemFree_v2(ptr)
    ok &= lp.check_eq("usage unchanged", 0, cu.used() - base)
    return ok


def _param_bytes(name: str) -> int:
    """A declared parameter (reproducer.toml [params]): lucepatch always sets it, as plain bytes."""
    import os

    v = os.environ.get(name, "")
    if not v.isdigit():
        lp.setup_error(f"{name}={v!r} is not a byte count (a declared parameter: lucepatch sets it)")
    return int(v)


def _full_info(cu) -> tuple[int, int]:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    r = cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    lp.check_result("cuMemGetInfo_v2(&free, &total)", lp.CUDA_SUCCESS, r)
    return free.value, total.value


def meminfo_null_total():
    """cudaMemGetInfo(&free, NULL) the way a Python client makes it through ctypes (None is NULL):
    CUDA_SUCCESS and the full call's free, before and after an allocation (base: SIGSEGV)."""
    cu = _setup()
    block = _param_bytes("LP_PARAM_BLOCK")
    ok = True
    f0, _ = _full_info(cu)
    free = ctypes.c_size_t(0)
    ok &= lp.check_result("cuMemGetInfo_v2(&free, None)", lp.CUDA_SUCCESS, cu.cuMemGetInfo_v2(ctypes.byref(free), None))
    ok &= lp.check_eq("free from (&free, None) equals the full call's", f0, free.value)
    r, ptr = cu.alloc(block)
    ok &= lp.check_result("cuMemAlloc of the block", lp.CUDA_SUCCESS, r)
    ok &= lp.check_result("cuMemGetInfo_v2(&free, None) after it", lp.CUDA_SUCCESS,
                          cu.cuMemGetInfo_v2(ctypes.byref(free), None))
    ok &= lp.check_eq("free is down by the block", f0 - block, free.value)
    if r == lp.CUDA_SUCCESS:
        cu.cuMemFree_v2(ptr)
    return ok


def meminfo_null_free_procaddress():
    """OptiX's cuMemGetInfo_v2(NULL, &total), with the entry point resolved the way cudart resolves it
    (cuGetProcAddress_v2("cuMemGetInfo", CUDA 12.0)): CUDA_SUCCESS and the full call's total."""
    cu = _setup()
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
    get = cu.lib.cuGetProcAddress_v2
    get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                    ctypes.c_void_p]
    get.restype = ctypes.c_int
    fn = ctypes.c_void_p()
    ok = lp.check_result('cuGetProcAddress_v2("cuMemGetInfo")', lp.CUDA_SUCCESS,
                         get(b"cuMemGetInfo", ctypes.byref(fn), 12000, 0, None))
    if not fn.value:
        return False
    mem_get_info = proto(fn.value)
    _, t0 = _full_info(cu)
    total = ctypes.c_size_t(0)
    ok &= lp.check_result("cuMemGetInfo(None, &total) through cuGetProcAddress", lp.CUDA_SUCCESS,
                          mem_get_info(None, ctypes.byref(total)))
    ok &= lp.check_eq("total equals the full call's", t0, total.value)
    return ok


if __name__ == "__main__":
    lp.run({"control": control, "threadpool-async-alloc": threadpool_async_alloc,
            "threadpool-async-free": threadpool_async_free, "threadpool-sync-alloc": threadpool_sync_alloc,
            "meminfo-null-total": meminfo_null_total, "meminfo-null-free-procaddress": meminfo_null_free_procaddress})
