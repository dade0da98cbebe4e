"""lp_workload: what a workload reproducer imports to speak the runner's language (stdlib only).

The workload runs in its own interpreter with this folder on PYTHONPATH; it must not import
lucepatch (whose dependencies the workload's interpreter need not have). Output contract, the same
as reproducers/common/lp_report.h: every machine-readable line on stdout is

    @@lucepatch <one-line JSON>

flushed at once, so a crash right after a line leaves the line on record. Events:
loaded (what is mapped: proof of what ran), driver, check, value, done, skip, setup-error,
rank (a rank's pid), child-exit (how a rank ended).

The order that makes a run count: initialise CUDA, then `report_loaded()`, then the scenario's
action. A run that crashes in the action has already proved what it loaded, so it is a crash,
never `invalid`.

`Driver` is the CUDA driver API through ctypes, resolved in the process's global scope (what a
program linked against libcuda binds to): the preloaded interposer's exports come first there,
whether or not it also hooks dlsym.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
import traceback

EVENT_PREFIX = "@@lucepatch "
SETUP_ERROR_EXIT = 2

# CUresult values the workloads name
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_CONTEXT = 201
CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5
CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7


def emit(event: dict) -> None:
    sys.stdout.write(EVENT_PREFIX + json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return ""
    return h.hexdigest()


def _preload_names() -> set:
    raw = os.environ.get("LD_PRELOAD", "")
    return {os.path.basename(t) for t in raw.replace(":", " ").split() if t}


def mapped_files() -> tuple[list, dict | None]:
    """(preloaded libraries, libcuda) as mapped now: realpath + sha256 from /proc/self/maps."""
    names, seen, preload, libcuda = _preload_names(), set(), [], None
    with open("/proc/self/maps") as f:
        for line in f:
            i = line.find("/")
            if i < 0:
                continue
            path = line[i:].rstrip("\n")
            if path.endswith(" (deleted)") or path in seen:
                continue
            seen.add(path)
            base = os.path.basename(path)
            if libcuda is None and base.startswith("libcuda.so"):
                real = os.path.realpath(path)
                libcuda = {"path": real, "sha256": _sha256(real)}
            if base in names:
                real = os.path.realpath(path)
                preload.append({"path": real, "sha256": _sha256(real)})
    return preload, libcuda


def report_loaded(rank: int | None = None) -> None:
    """Call after CUDA is initialised (the interposer dlopens libcuda then) and before the action."""
    preload, libcuda = mapped_files()
    ev = {"event": "loaded", "reporter": "program", "when": "before-action", "pid": os.getpid(),
          "preload": preload, "libcuda": libcuda}
    if rank is not None:
        ev["rank"] = rank
    emit(ev)


def report_driver(version: int, device_count: int, gpu: str) -> None:
    emit({"event": "driver", "version": int(version), "device_count": int(device_count), "gpu": gpu or ""})


def rank_started(rank: int) -> None:
    """First thing in a rank's process: lets the runner tie the reporter's pid-keyed events to it."""
    emit({"event": "rank", "rank": rank, "pid": os.getpid(), "ppid": os.getppid()})


def child_exit(rank: int, pid: int | None, exitcode: int | None, killed: bool = False) -> None:
    """How a rank ended, reported by the launcher: a negative exit code is the signal that killed
    it; killed=True when the launcher itself ended a rank that hung (not a crash of the rank)."""
    emit({"event": "child-exit", "rank": rank, "pid": pid, "exitcode": exitcode, "killed": bool(killed)})


def check(name: str, expected, got, ok: bool) -> bool:
    emit({"event": "check", "name": name, "expected": str(expected), "got": str(got), "ok": bool(ok)})
    return bool(ok)


def check_eq(name: str, want, got) -> bool:
    return check(name, want, got, want == got)


def check_result(name: str, want: int, got: int) -> bool:
    return check(name, result_name(want), result_name(got), want == got)


def check_within(name: str, want: int, got: int, tolerance: int) -> bool:
    """|got - want| <= tolerance (byte counts an allocator rounds)."""
    return check(name, f"{want} +/- {tolerance}", got, abs(int(got) - int(want)) <= tolerance)


def value(name: str, v) -> None:
    emit({"event": "value", "name": name, "value": v})


def done(scenario: str, ok: bool) -> None:
    emit({"event": "done", "scenario": scenario, "ok": bool(ok)})


def skip(scenario: str, reason: str):
    """The scenario cannot run on this machine: `skipped`, neither a pass nor a failure. Exits 0."""
    emit({"event": "skip", "scenario": scenario, "reason": reason})
    sys.exit(0)


def setup_error(message: str):
    """The environment cannot run the scenario (CUDA does not initialise, ...): `invalid`. Exits 2."""
    emit({"event": "setup-error", "message": message[:300]})
    sys.stderr.write(f"lp_workload: setup error: {message}\n")
    sys.exit(SETUP_ERROR_EXIT)


_NAMES = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
          3: "CUDA_ERROR_NOT_INITIALIZED", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
          201: "CUDA_ERROR_INVALID_CONTEXT", 400: "CUDA_ERROR_INVALID_HANDLE", 500: "CUDA_ERROR_NOT_FOUND",
          801: "CUDA_ERROR_NOT_SUPPORTED", 999: "CUDA_ERROR_UNKNOWN"}


def result_name(r: int) -> str:
    """Own table (a hook may return a value that is no CUresult at all, e.g. -1)."""
    return _NAMES.get(int(r), str(int(r)))


class Driver:
    """The driver API through ctypes, bound in the global scope (see the module docstring)."""

    def __init__(self):
        try:
            ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            setup_error(f"cannot load libcuda.so.1: {exc}")
        self.lib = ctypes.CDLL(None)
        c = ctypes
        self._sig("cuInit", [c.c_uint])
        self._sig("cuDriverGetVersion", [c.POINTER(c.c_int)])
        self._sig("cuDeviceGetCount", [c.POINTER(c.c_int)])
        self._sig("cuDeviceGet", [c.POINTER(c.c_int), c.c_int])
        self._sig("cuDeviceGetName", [c.c_char_p, c.c_int, c.c_int])
        self._sig("cuDevicePrimaryCtxRetain", [c.POINTER(c.c_void_p), c.c_int])
        self._sig("cuCtxSetCurrent", [c.c_void_p])
        self._sig("cuCtxGetDevice", [c.POINTER(c.c_int)])
        self._sig("cuStreamCreate", [c.POINTER(c.c_void_p), c.c_uint])
        self._sig("cuStreamSynchronize", [c.c_void_p])
        self._sig("cuStreamDestroy_v2", [c.c_void_p])
        self._sig("cuMemAlloc_v2", [c.POINTER(c.c_uint64), c.c_size_t])
        self._sig("cuMemFree_v2", [c.c_uint64])
        self._sig("cuMemAllocAsync", [c.POINTER(c.c_uint64), c.c_size_t, c.c_void_p])
        self._sig("cuMemFreeAsync", [c.c_uint64, c.c_void_p])
        self._sig("cuMemGetInfo_v2", [c.POINTER(c.c_size_t), c.POINTER(c.c_size_t)])
        self._sig("cuDeviceGetDefaultMemPool", [c.POINTER(c.c_void_p), c.c_int])
        self._sig("cuMemPoolGetAttribute", [c.c_void_p, c.c_int, c.c_void_p])

    def _sig(self, name, argtypes):
        fn = getattr(self.lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        setattr(self, name, fn)

    # -- set-up the way cudart does it: cuInit, device 0's primary context current on this thread --
    def setup_primary(self, device: int = 0):
        """(device, context); a failure is a setup error (exit 2)."""
        n, dev, ctx = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_void_p()
        if self.cuInit(0) != 0 or self.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value <= device:
            setup_error("no usable CUDA device (cuInit/cuDeviceGetCount)")
        if self.cuDeviceGet(ctypes.byref(dev), device) != 0 or \
                self.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0 or self.cuCtxSetCurrent(ctx) != 0:
            setup_error(f"cannot make device {device}'s primary context current")
        return dev.value, ctx

    def info(self, device: int = 0) -> tuple[int, int, str]:
        """(driver version, device count, device name)"""
        v, n, name = ctypes.c_int(0), ctypes.c_int(0), ctypes.create_string_buffer(256)
        self.cuDriverGetVersion(ctypes.byref(v))
        self.cuDeviceGetCount(ctypes.byref(n))
        self.cuDeviceGetName(name, 256, device)
        return v.value, n.value, name.value.decode(errors="replace")

    def stream(self):
        s = ctypes.c_void_p()
        r = self.cuStreamCreate(ctypes.byref(s), 0)
        if r != 0:
            setup_error(f"cuStreamCreate: {result_name(r)}")
        return s

    def alloc(self, size: int) -> tuple[int, int]:
        p = ctypes.c_uint64(0)
        return self.cuMemAlloc_v2(ctypes.byref(p), size), p.value

    def alloc_async(self, size: int, stream) -> tuple[int, int]:
        p = ctypes.c_uint64(0)
        return self.cuMemAllocAsync(ctypes.byref(p), size, stream), p.value

    def used(self) -> int:
        """Bytes in use on the current context's device as the interposer reports them
        (total - free of cuMemGetInfo_v2: under HAMi with a limit, its accounted usage); -1 on error."""
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        if self.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
            return -1
        return total.value - free.value

    def pool_reserved(self, device: int = 0) -> int:
        """Bytes the device's default memory pool (the stream-ordered allocator) has reserved; -1 on error."""
        pool, v = ctypes.c_void_p(), ctypes.c_uint64(0)
        if self.cuDeviceGetDefaultMemPool(ctypes.byref(pool), device) != 0:
            return -1
        if self.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, ctypes.byref(v)) != 0:
            return -1
        return v.value


def driver_info(device: int = 0) -> tuple[int, int, str]:
    """(driver version, device count, device name) straight from the driver, for a program that
    initialised CUDA itself (PyTorch): three read-only calls through the global scope."""
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        setup_error(f"cannot load libcuda.so.1: {exc}")
    lib = ctypes.CDLL(None)
    v, n, name = ctypes.c_int(0), ctypes.c_int(0), ctypes.create_string_buffer(256)
    lib.cuDriverGetVersion(ctypes.byref(v))
    lib.cuDeviceGetCount(ctypes.byref(n))
    lib.cuDeviceGetName(name, 256, ctypes.c_int(device))
    return v.value, n.value, name.value.decode(errors="replace")


def run(scenarios: dict) -> None:
    """main(): run the scenario named by argv[1]; an exception is a failed check, exit 1.

    A scenario function returns True when every check passed; it calls report_loaded() itself,
    after CUDA init and before its action."""
    if len(sys.argv) < 2 or sys.argv[1] not in scenarios:
        sys.stderr.write(f"usage: {sys.argv[0]} SCENARIO ({', '.join(scenarios)})\n")
        sys.exit(SETUP_ERROR_EXIT)
    name = sys.argv[1]
    try:
        ok = bool(scenarios[name]())
    except SystemExit:
        raise
    except BaseException as exc:  # the workload's own failure, with where it happened
        tb = traceback.format_exc().strip().splitlines()
        check("scenario raised no exception", "no exception", f"{type(exc).__name__}: {exc}"[:300], False)
        sys.stderr.write("\n".join(tb[-12:]) + "\n")
        ok = False
    done(name, ok)
    sys.stdout.flush()
    sys.exit(0 if ok else 1)
