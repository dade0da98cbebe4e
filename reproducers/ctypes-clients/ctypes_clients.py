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


if __name__ == "__main__":
    lp.run({"control": control, "threadpool-async-alloc": threadpool_async_alloc,
            "threadpool-async-free": threadpool_async_free, "threadpool-sync-alloc": threadpool_sync_alloc})
