"""ctypes-meminfo: cuMemGetInfo with an omitted output, the way a Python client makes the call.

A client on the driver API through ctypes passes None for an output it does not want (None is
NULL), and cudart's cudaMemGetInfo resolves the entry point through cuGetProcAddress_v2. The driver
writes only the outputs it is given (OptiX passes NULL free, HAMi-core#321/#333; llama.cpp NULL
total, llama.cpp#20499); HAMi-core's hook dereferences both and the interpreter dies with SIGSEGV.
Every scenario compares the NULL-output call with a full call made just before. The inputs are
declared in reproducer.toml ([params]) and set by the runner.
"""

import ctypes
import os

import lp_workload as lp


def _setup():
    cu = lp.Driver()
    cu.setup_primary(0)
    lp.report_loaded()
    lp.report_driver(*cu.info(0))
    return cu


def _param_bytes(name: str) -> int:
    """A declared parameter: lucepatch always sets it, as plain bytes (no second default here)."""
    v = os.environ.get(name, "")
    if not v.isdigit():
        lp.setup_error(f"{name}={v!r} is not a byte count (a declared parameter: lucepatch sets it)")
    return int(v)


def _full(cu) -> tuple[bool, int, int]:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    r = cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    return lp.check_result("cuMemGetInfo_v2(&free, &total)", lp.CUDA_SUCCESS, r), free.value, total.value


def _alloc_moves(cu, query, what: str) -> bool:
    """`query()` -> (result, free): agrees with the full call, and moves by exactly the block allocated."""
    block = _param_bytes("LP_PARAM_BLOCK")
    ok, f0, _ = _full(cu)
    r, f = query()
    ok &= lp.check_result(what, lp.CUDA_SUCCESS, r)
    ok &= lp.check_eq(f"free from {what} equals the full call's", f0, f)
    r, ptr = cu.alloc(block)
    ok &= lp.check_result("cuMemAlloc of the block", lp.CUDA_SUCCESS, r)
    r, f = query()
    ok &= lp.check_result(f"{what} after the allocation", lp.CUDA_SUCCESS, r)
    ok &= lp.check_eq("free is down by the block", f0 - block, f)
    if r == lp.CUDA_SUCCESS:
        cu.cuMemFree_v2(ptr)
    return ok


def control():
    """Both outputs through ctypes: free moves by the block allocated."""
    cu = _setup()

    def both():
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        return cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), free.value
    return _alloc_moves(cu, both, "cuMemGetInfo_v2(&free, &total)")


def null_total():
    """cuMemGetInfo_v2(&free, None): llama.cpp's call, as ctypes makes it."""
    cu = _setup()

    def free_only():
        free = ctypes.c_size_t(0)
        return cu.cuMemGetInfo_v2(ctypes.byref(free), None), free.value
    return _alloc_moves(cu, free_only, "cuMemGetInfo_v2(&free, None)")


def _proc_mem_get_info(cu):
    """cuMemGetInfo resolved the way cudart resolves it: cuGetProcAddress_v2("cuMemGetInfo", CUDA 12.0)."""
    get = cu.lib.cuGetProcAddress_v2
    get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p]
    get.restype = ctypes.c_int
    fn = ctypes.c_void_p()
    ok = lp.check_result('cuGetProcAddress_v2("cuMemGetInfo")', lp.CUDA_SUCCESS,
                         get(b"cuMemGetInfo", ctypes.byref(fn), 12000, 0, None))
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
    return ok and bool(fn.value), proto(fn.value) if fn.value else None


def null_free_procaddress():
    """OptiX's cuMemGetInfo(NULL, &total) through the cudart-style entry point: the full call's total."""
    cu = _setup()
    ok, mem_get_info = _proc_mem_get_info(cu)
    if not ok:
        return False
    ok, _, t0 = _full(cu)
    total = ctypes.c_size_t(0)
    ok &= lp.check_result("cuMemGetInfo(None, &total) through cuGetProcAddress", lp.CUDA_SUCCESS,
                          mem_get_info(None, ctypes.byref(total)))
    return ok & lp.check_eq("total equals the full call's", t0, total.value)


def null_total_procaddress():
    """cudaMemGetInfo(&free, NULL) as cudart forwards it: through the cuGetProcAddress entry point."""
    cu = _setup()
    ok, mem_get_info = _proc_mem_get_info(cu)
    if not ok:
        return False

    def free_only():
        free = ctypes.c_size_t(0)
        return mem_get_info(ctypes.byref(free), None), free.value
    return ok & _alloc_moves(cu, free_only, "cuMemGetInfo(&free, None) through cuGetProcAddress")


if __name__ == "__main__":
    lp.run({"control": control, "null-total": null_total, "null-free-procaddress": null_free_procaddress,
            "null-total-procaddress": null_total_procaddress, "null-total-unlimited": null_total})
