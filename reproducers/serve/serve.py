"""serve: a server binary under the library under test — starts, answers, is charged, is limited.

The server is named by a spec (LUCEPATCH_SERVER_SPEC: the path of a TOML file; servers/ next to this
file holds the shipped ones): its start command, its readiness URL, one request and the shape of its answer,
the memory limit it runs under, how to read what it reserved, and the limit it must refuse. The
same scenarios run against whatever build the spec points at (${VAR} in the spec: the caller's
environment), on the simulated driver with a stand-in (tests/fixtures/stand-in-server) or on a GPU
with Lucebox's dflash_server.

This program (the harness) is started by lucepatch's runner with the library under test preloaded,
a fresh region file and the events file; the server is its child and inherits all three, so HAMi
in the server charges the same region the harness reads. What each scenario proves:

  driver     (control) the harness's own cuMemAlloc moves HAMi's usage (cuMemGetInfo) and its slot
             in the region file by exactly the block: the library works here and the region reader
             (lp_region) reads this library's layout.
  serves     the server starts, answers readiness, answers the request with the declared status and
             shape, and exits within the stop timeout of SIGTERM; no crash.
  charged    as serves, then HAMi's charge for the server, read through cuMemGetInfo (the pod's usage
             minus the harness's own, measured before the server started) and from the server's slot
             in the region, follows what the server reserved within the spec's bound; what it
             reserved is read from the server's own log (`log`) and, on a real GPU, from NVML's
             per-process usage by a helper without the preload (`nvml`). After the server exits,
             nothing of it is charged (region file) and the pod's usage is back where it started.
  limit-oom  under the spec's small limit the server exits by itself with a non-zero status and its
             own out-of-memory error, after HAMi refused the allocation (`Device N OOM`), never
             answers readiness, never crashes or hangs; the region file read after it exited
             charges nothing. The harness makes no CUDA call before that (its own context would
             count against the limit).

Two processes prove what they loaded (`ranks = 2` in reproducer.toml): the harness after its CUDA
init (rank 0; in limit-oom at its end), the server from /proc/<pid>/maps once it answered
readiness (rank 1). The server also carries lucepatch's reporter with the at-exit proof switched
on, so a server that dies or exits early still proves what it ran, and a fatal signal in it is a
crash of the run. Processes the server or its library start (HAMi v2.5's OOM path runs `ps ax`
through popen) inherit the preload and report too; only the two ranks are judged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import lp_region
import lp_workload as lp

SPEC_ENV = "LUCEPATCH_SERVER_SPEC"
HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
CONTROL_BLOCK = 64 * MIB
_UNITS = {"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1 << 10, "m": MIB, "mib": MIB, "mb": MIB,
          "g": 1 << 30, "gib": 1 << 30, "gb": 1 << 30}
SHAPE_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "list": list,
               "object": dict, "any": object}
TRUTHS = ("log", "nvml", "device")
# a `device` truth reads the whole GPU: every run that starts a server holds this lock while its server lives
DEVICE_LOCK = "/tmp/lucepatch-serve-device.lock"
LOCK_WAIT_S = 300  # below the reproducer's timeout: a run that cannot get the GPU is invalid, not a timeout
SPEC_KEYS = {"name", "description", "build", "command", "args_env", "env", "ready_url", "ready_timeout_s", "stop_timeout_s", "request",
             "memory", "oom"}
REQUEST_KEYS = {"method", "url", "body", "headers", "timeout_s", "status", "shape"}
MEMORY_KEYS = {"limit", "bound", "truth", "log_pattern", "log_combine", "log_unit", "settle_s"}
OOM_KEYS = {"limit", "error", "timeout_s"}


# ---- the spec ---------------------------------------------------------------------------------
@dataclass
class Request:
    method: str
    url: str
    body: bytes | None
    headers: dict
    timeout_s: float
    status: int
    shape: dict  # JSON path -> type name


@dataclass
class Spec:
    name: str
    path: str
    sha256: str
    command: list[str]
    ready_url: str
    ready_timeout_s: float
    stop_timeout_s: float
    env: dict
    request: Request
    limit: int
    bound: int
    truth: list[str]
    log_pattern: re.Pattern | None
    log_combine: str
    log_unit: int
    settle_s: float
    oom_limit: int | None
    oom_error: re.Pattern | None
    oom_timeout_s: float
    description: str = ""
    build: str = ""  # which build of the server this is (a profile, a pool mode): recorded, shown by `show`
    port: int = 0
    expanded: dict = field(default_factory=dict)


def parse_bytes(v, where: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(\d+)\s*([kmg]?)\s*", v.lower())
        if m:
            return int(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"{where}: {v!r} is not a number of bytes (an integer, or digits with k, m or g)")


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _expand(text: str, port: int, where: str) -> str:
    """{port}, ${VAR}, ${VAR:-default} and $VAR; a variable that is unset (and has no default) is an error."""
    def one(m):
        name = m.group(1) or m.group(3)
        if name in os.environ:
            return os.environ[name]
        if m.group(2) is not None:
            return m.group(2)
        raise ValueError(f"{where}: ${{{name}}} is not set in the environment")
    return _VAR.sub(one, text.replace("{port}", str(port)))


def _bytes(v, port: int, where: str) -> int:
    return parse_bytes(_expand(v, port, where) if isinstance(v, str) else v, where)


def _keys(d, known: set, where: str) -> dict:
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return d


def spec_path(value: str) -> str:
    """The spec file's absolute path. A relative one is the caller's: lucepatch checked it from its working
    directory (reproducer.toml [requires]), while the runner starts this harness in a scratch folder, so it
    is resolved against the caller's $PWD."""
    if os.path.isabs(value):
        return value
    return os.path.join(os.environ.get("PWD", ""), value)


def load_spec(value: str, port: int) -> Spec:
    """The spec named by `value`, with {port} and ${VAR} expanded; ValueError naming what is wrong."""
    path = spec_path(value)
    try:
        raw = open(path, "rb").read()
    except OSError as exc:
        raise ValueError(f"{SPEC_ENV}={value}: cannot read {path} ({exc.strerror or exc}); the shipped specs are in "
                         f"{os.path.join(HERE, 'servers')}")
    try:
        d = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}")
    _keys(d, SPEC_KEYS, path)
    for key in ("name", "command", "ready_url", "request", "memory"):
        if key not in d:
            raise ValueError(f"{path} lacks required key {key!r}")
    if not isinstance(d["command"], list) or not d["command"] or not all(isinstance(a, str) for a in d["command"]):
        raise ValueError(f"{path}: command must be a non-empty list of strings")
    req = _keys(d["request"], REQUEST_KEYS, f"{path} [request]")
    mem = _keys(d["memory"], MEMORY_KEYS, f"{path} [memory]")
    oom = _keys(d.get("oom", {}), OOM_KEYS, f"{path} [oom]")
    shape = _keys(req.get("shape", {}), set(req.get("shape", {})), f"{path} [request.shape]")
    for k, t in shape.items():
        if t not in SHAPE_TYPES:
            raise ValueError(f"{path} [request.shape] {k}: {t!r} is not one of {', '.join(SHAPE_TYPES)}")
    truth = mem.get("truth", ["log"])
    if not isinstance(truth, list) or not truth or any(t not in TRUTHS for t in truth):
        raise ValueError(f"{path} [memory] truth must be a non-empty list of {', '.join(TRUTHS)}")
    if "log" in truth and "log_pattern" not in mem:
        raise ValueError(f"{path} [memory]: truth \"log\" needs log_pattern (a regex whose group 1 is a size)")
    combine = mem.get("log_combine", "last")
    if combine not in ("last", "sum"):
        raise ValueError(f"{path} [memory] log_combine must be \"last\" or \"sum\", not {combine!r}")
    unit = str(mem.get("log_unit", "bytes")).lower()
    if unit not in _UNITS:
        raise ValueError(f"{path} [memory] log_unit {unit!r} is not a unit ({', '.join(sorted(_UNITS))})")
    if ("limit" in oom) != ("error" in oom):
        raise ValueError(f"{path} [oom] needs both limit and error (the server's own out-of-memory message)")
    headers = req.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ValueError(f"{path} [request] headers must be a table of strings")
    env = d.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError(f"{path}: env must be a table of strings")
    body = req.get("body")
    command = [_expand(a, port, f"{path} command") for a in d["command"]]
    if d.get("args_env"):  # more arguments from one variable, split as a shell would (the caller's choice)
        command += shlex.split(os.environ.get(str(d["args_env"]), ""))
    return Spec(
        name=str(d["name"]), path=path, sha256=hashlib.sha256(raw).hexdigest(), description=str(d.get("description", "")),
        build=_expand(str(d.get("build", "")), port, f"{path} build"),
        command=command,
        ready_url=_expand(d["ready_url"], port, f"{path} ready_url"),
        ready_timeout_s=float(d.get("ready_timeout_s", 120)), stop_timeout_s=float(d.get("stop_timeout_s", 30)),
        env={k: _expand(v, port, f"{path} env.{k}") for k, v in env.items()},
        request=Request(method=str(req.get("method", "GET")).upper(), url=_expand(req["url"], port, f"{path} [request] url"),
                        body=_expand(body, port, f"{path} [request] body").encode() if body is not None else None,
                        headers={k: _expand(v, port, f"{path} [request] headers") for k, v in headers.items()},
                        timeout_s=float(req.get("timeout_s", 120)), status=int(req.get("status", 200)), shape=shape),
        limit=_bytes(mem.get("limit", "16g"), port, f"{path} [memory] limit"),
        bound=_bytes(mem.get("bound", "0"), port, f"{path} [memory] bound"), truth=list(truth),
        log_pattern=re.compile(mem["log_pattern"]) if "log_pattern" in mem else None, log_combine=combine,
        log_unit=_UNITS[unit], settle_s=float(mem.get("settle_s", 0)),
        oom_limit=_bytes(oom["limit"], port, f"{path} [oom] limit") if "limit" in oom else None,
        oom_error=re.compile(oom["error"]) if "error" in oom else None, oom_timeout_s=float(oom.get("timeout_s", 120)),
        port=port)


# ---- what a process loaded, the region, NVML ---------------------------------------------------
def _sha256(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return ""
    return h.hexdigest()


def report_loaded_of(pid: int, rank: int) -> bool:
    """The `loaded` event of another process (the server), read from its /proc/<pid>/maps as
    lp_workload.report_loaded reads its own: every mapped file named like an LD_PRELOAD entry,
    and the first libcuda.so*."""
    names = {os.path.basename(t) for t in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if t}
    seen, preload, libcuda = set(), [], None
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.readlines()
    except OSError:
        return False
    for line in lines:
        i = line.find("/")
        if i < 0:
            continue
        path = line[i:].rstrip("\n")
        if path.endswith(" (deleted)") or path in seen:
            continue
        seen.add(path)
        base = os.path.basename(path)
        if libcuda is None and base.startswith("libcuda.so"):
            libcuda = {"path": os.path.realpath(path), "sha256": _sha256(os.path.realpath(path))}
        if base in names:
            preload.append({"path": os.path.realpath(path), "sha256": _sha256(os.path.realpath(path))})
    lp.emit({"event": "loaded", "reporter": "program", "when": "before-action", "pid": pid, "rank": rank,
             "preload": preload, "libcuda": libcuda})
    return True


def region_now():
    """(Region or None, why not)."""
    try:
        return lp_region.read(os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/cudevshr.cache")), ""
    except lp_region.RegionError as exc:
        return None, str(exc)


# Run by a helper without the preload, the region or the reporter: the bare driver's NVML, as
# nvidia-smi reads per-process memory (the server's pid as the host sees it: HAMi's hostpid).
_NVML_QUERY = r"""
import ctypes, json, sys
index = int(sys.argv[1])
try:
    nv = ctypes.CDLL("libnvidia-ml.so.1")
except OSError as e:
    print(json.dumps({"error": f"cannot load libnvidia-ml.so.1: {e}"})); sys.exit(0)
if nv.nvmlInit_v2() != 0:
    print(json.dumps({"error": "nvmlInit_v2 failed"})); sys.exit(0)
h = ctypes.c_void_p()
if nv.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h)) != 0:
    print(json.dumps({"error": f"nvmlDeviceGetHandleByIndex_v2({index}) failed"})); sys.exit(0)
name = ctypes.create_string_buffer(96)
nv.nvmlDeviceGetName(h, name, 96)
if name.value.decode(errors="replace").startswith("lucepatch-fakecuda"):
    print(json.dumps({"error": "the simulated NVML lists other processes without their memory (not modelled)"}))
    sys.exit(0)
class P2(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]
class P1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
out = {"error": "no nvmlDeviceGetComputeRunningProcesses answered"}
for name, S in (("nvmlDeviceGetComputeRunningProcesses_v3", P2), ("nvmlDeviceGetComputeRunningProcesses_v2", P2),
                ("nvmlDeviceGetComputeRunningProcesses", P1)):
    try:
        fn = getattr(nv, name)
    except AttributeError:
        continue
    n, arr = ctypes.c_uint(256), (S * 256)()
    r = fn(h, ctypes.byref(n), arr)
    if r == 0:
        out = {"api": name, "procs": [[arr[i].pid, arr[i].usedGpuMemory] for i in range(n.value)]}
        break
print(json.dumps(out))
"""
NVML_NOT_AVAILABLE = (1 << 64) - 1


def nvml_used(pids: list[int], index: int) -> tuple[int | None, str]:
    """(bytes NVML reports in use by the first of `pids` it lists on device `index`, or None, why)."""
    try:
        r = subprocess.run([sys.executable, "-c", _NVML_QUERY, str(index)], capture_output=True, text=True, env=_bare_env(),
                           timeout=60)
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return None, f"the NVML helper failed: {exc}"
    if "error" in out:
        return None, out["error"]
    for pid in pids:
        for p, used in out["procs"]:
            if p == pid:
                if used == NVML_NOT_AVAILABLE:
                    return None, f"{out['api']} lists pid {pid} without its memory (NVML_VALUE_NOT_AVAILABLE)"
                return used, f"{out['api']}, pid {pid}"
    return None, (f"{out['api']} does not list pid {', '.join(map(str, pids))} (it lists "
                  f"{', '.join(str(p) for p, _ in out['procs']) or 'none'})")


# Run by a helper without the preload or the region: the bare driver's view of the whole device
# (cuMemGetInfo_v2 after retaining the primary context), and its name (the simulated driver's says so).
_DEVICE_QUERY = r"""
import ctypes, json, sys
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx, free, total = ctypes.c_int(0), ctypes.c_void_p(), ctypes.c_size_t(0), ctypes.c_size_t(0)
name = ctypes.create_string_buffer(256)
steps = (("cuInit", lambda: cu.cuInit(0)), ("cuDeviceGet", lambda: cu.cuDeviceGet(ctypes.byref(dev), 0)),
         ("cuDevicePrimaryCtxRetain", lambda: cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)),
         ("cuCtxSetCurrent", lambda: cu.cuCtxSetCurrent(ctx)),
         ("cuMemGetInfo_v2", lambda: cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))),
         ("cuDeviceGetName", lambda: cu.cuDeviceGetName(name, 256, dev)))
for what, call in steps:
    r = call()
    if r != 0:
        print(json.dumps({"error": f"{what} returned {r}"})); sys.exit(0)
print(json.dumps({"used": total.value - free.value, "total": total.value, "gpu": name.value.decode(errors="replace")}))
"""


def _bare_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                                              "LUCEPATCH_EVENTS", "LUCEPATCH_REPORT_AT_EXIT")}


def device_used() -> tuple[int | None, str]:
    """(bytes in use on the whole device as the bare driver reports it, or None, why/what)."""
    try:
        r = subprocess.run([sys.executable, "-c", _DEVICE_QUERY], capture_output=True, text=True, env=_bare_env(),
                           timeout=120)
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return None, f"the device helper failed: {exc}"
    if "error" in out:
        return None, out["error"]
    if out["gpu"].startswith("lucepatch-fakecuda"):
        return None, "the simulated driver keeps each process's memory to itself: no device-wide view"
    return out["used"], f"bare cuMemGetInfo_v2 on {out['gpu']}"


class DeviceLock:
    """Held while a server lives when the spec reads the whole device (`device` truth): a server of another
    run starting or stopping meanwhile would move the device's usage. Runs of a parallel verify queue here."""

    def __init__(self, held: bool):
        self.held, self.fd = held, None

    def __enter__(self):
        if self.held:
            import fcntl  # lazy: only a `device` truth locks

            t0 = time.monotonic()
            self.fd = os.open(DEVICE_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
            while True:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - t0 > LOCK_WAIT_S:  # a holder that never lets go: say so, do not hang
                        lp.setup_error(f"{DEVICE_LOCK} was held by another process for {LOCK_WAIT_S:g} s; a `device` "
                                       "truth needs the GPU to itself")
                    time.sleep(0.2)
            lp.value("device_lock_wait_s", round(time.monotonic() - t0, 3))
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def nvml_index() -> int:
    """NVML's index of CUDA device 0 (NVML ignores CUDA_VISIBLE_DEVICES; HAMi's region is indexed by it)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


# ---- the server --------------------------------------------------------------------------------
def free_port() -> int:
    """A port nothing listens on now (parallel runs each get their own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listens_on(pid: int, port: int) -> bool | None:
    """Does process `pid` hold a listening TCP socket on `port`? (None: cannot tell here.)"""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor, for one)
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port and cols[9] in inodes:
                return True
    return False


class Server:
    """The server as the harness's child: its output teed, line by line, to the harness's stderr (where
    the runner reads HAMi's lines and load marker) and kept for the checks."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._tee: threading.Thread | None = None
        self.started = 0.0
        self.returncode: int | None = None
        self.stopped_by_us = False
        self.proven = False

    def start(self) -> bool:
        env = dict(os.environ)
        env.update(self.spec.env)
        env["LUCEPATCH_REPORT_AT_EXIT"] = "1"  # the reporter's at-exit proof: a server that dies early still proves
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(self.spec.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL)
        except OSError as exc:  # the spec names no runnable program: nothing about the library was measured
            lp.setup_error(f"cannot start {self.spec.command[0]}: {exc.strerror or exc}")
        lp.emit({"event": "rank", "rank": 1, "pid": self.proc.pid, "ppid": os.getpid()})
        self._tee = threading.Thread(target=self._read, daemon=True)
        self._tee.start()
        return True

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            with self._lock:
                self.lines.append(line)
            sys.stderr.write(line)
            sys.stderr.flush()

    def output(self) -> str:
        with self._lock:
            return "".join(self.lines)

    def quiet(self, still_s: float = 0.3, most_s: float = 5.0) -> None:
        """Wait until the server's output has been still for `still_s` (at most `most_s`): the tee thread
        reads it asynchronously, and a line the server wrote just before answering may not be read yet."""
        end = time.monotonic() + most_s
        seen, since = -1, time.monotonic()
        while time.monotonic() < end:
            with self._lock:
                n = len(self.lines)
            if n != seen:
                seen, since = n, time.monotonic()
            elif time.monotonic() - since >= still_s:
                return
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> bool:
        if self.returncode is None and self.proc is not None:
            self.returncode = self.proc.poll()
        return self.returncode is not None

    def wait_ready(self, timeout_s: float) -> str:
        """"ready", "exited" (before answering) or "timeout"."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exited():
                return "exited"
            try:
                with urllib.request.urlopen(self.spec.ready_url, timeout=5) as r:
                    # the answer must come from our server: a port picked free can be taken by another run's
                    if 200 <= r.status < 300 and self._ours():
                        return "ready"
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.1)
        return "timeout"

    def _ours(self) -> bool:
        """Is the readiness URL's port our server's listening socket? (Unknown counts as yes.)"""
        port = urllib.parse.urlsplit(self.spec.ready_url).port
        return port is None or listens_on(self.pid, port) is not False

    def wait_exit(self, timeout_s: float) -> bool:
        try:
            self.returncode = self.proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def prove(self) -> None:
        """Rank 1's proof from the live server's maps (once): after readiness, or before we end a server
        that never got there (a hang still shows what it ran)."""
        if not self.proven and self.proc is not None and not self.exited():
            self.proven = report_loaded_of(self.pid, rank=1)

    def stop(self) -> tuple[bool, str]:
        """SIGTERM, then wait the stop timeout; SIGKILL if it did not exit. (exited by itself, how)."""
        if self.exited():
            return True, f"had already exited ({self.exit_text()})"
        self.prove()
        self.proc.send_signal(signal.SIGTERM)
        if self.wait_exit(self.spec.stop_timeout_s):
            self.stopped_by_us = self.returncode == -signal.SIGTERM
            return True, self.exit_text()
        self.proc.kill()
        self.proc.wait()
        self.returncode = self.proc.returncode
        self.stopped_by_us = True
        return False, f"still running {self.spec.stop_timeout_s:g} s after SIGTERM: killed"

    def kill(self):
        if self.proc is not None and not self.exited():
            self.prove()
            self.proc.kill()
            self.proc.wait()
            self.returncode = self.proc.returncode
            self.stopped_by_us = True

    def drain(self) -> None:
        """After the server exited: every line it wrote has been read (the tee ends at the pipe's end)."""
        if self._tee is not None:
            self._tee.join(timeout=10)

    def finish(self):
        """Report how the server ended (the runner counts a signal it did not get from us as a crash)."""
        self.drain()
        lp.child_exit(1, self.pid, self.returncode, killed=self.stopped_by_us)

    def exit_text(self) -> str:
        rc = self.returncode
        if rc is None:
            return "running"
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit status {rc}"


def request(spec: Spec) -> bool:
    """The one request; its status and the shape of its JSON answer are checked."""
    r = spec.request
    req = urllib.request.Request(r.url, data=r.body, method=r.method, headers=r.headers)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=r.timeout_s) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return lp.check(f"{r.method} {r.url} is answered", f"status {r.status}", f"no answer: {exc}", False)
    lp.value("request_s", round(time.monotonic() - t0, 3))
    ok = lp.check_eq(f"{r.method} {r.url} status", r.status, status)
    if not r.shape:
        return ok
    try:
        doc = json.loads(body)
    except ValueError:
        return lp.check("the answer is JSON", "JSON", body[:120].decode("utf-8", "replace"), False)
    for path, want in r.shape.items():
        got = _at(doc, path)
        kind = SHAPE_TYPES[want]
        good = got is not _MISSING and isinstance(got, kind) and not (want in ("integer", "number") and isinstance(got, bool))
        ok &= lp.check(f"answer has {path} ({want})", want, "missing" if got is _MISSING else type(got).__name__, good)
    return ok


_MISSING = object()


def _at(doc, path: str):
    cur = doc
    for part in path.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return _MISSING
    return cur


def log_reserved(spec: Spec, text: str) -> int | None:
    """What the server says it reserved: the last (or the sum of every) match of log_pattern."""
    sizes = []
    for m in spec.log_pattern.finditer(text):
        n = float(m.group(1))
        unit = spec.log_unit
        if m.re.groups >= 2 and m.group(2) is not None:
            u = m.group(2).strip().lower()
            if u not in _UNITS:
                lp.setup_error(f"{spec.path}: log_pattern's unit {m.group(2)!r} is not one of {', '.join(sorted(_UNITS))}")
            unit = _UNITS[u]
        sizes.append(int(n * unit))
    if not sizes:
        return None
    return sizes[-1] if spec.log_combine == "last" else sum(sizes)


# ---- scenarios ---------------------------------------------------------------------------------
def _spec() -> Spec:
    value = os.environ.get(SPEC_ENV, "")  # reproducer.toml [requires] skips every scenario when it is unset
    if not value:
        lp.setup_error(f"{SPEC_ENV} is not set (lucepatch skips the scenarios then: was this started by hand?)")
    try:
        spec = load_spec(value, free_port())
    except ValueError as exc:
        lp.setup_error(str(exc))
    binary = spec.command[0]
    real = os.path.realpath(binary) if os.sep in binary else binary
    lp.value("server", {"spec": spec.name, "build": spec.build, "spec_path": spec.path, "spec_sha256": spec.sha256,
                        "command": spec.command, "binary": real,
                        "binary_sha256": _sha256(real) if os.path.isfile(real) else ""})
    return spec


def _limit(limit: int) -> None:
    """The pod's limit, before HAMi initialises anywhere (it latches it into the region it creates)."""
    os.environ["CUDA_DEVICE_MEMORY_LIMIT"] = str(limit)
    lp.value("limit", limit)


def _reader(rank: int | None = None):
    cu = lp.Driver()
    cu.setup_primary(0)
    lp.report_loaded(rank)
    lp.report_driver(*cu.info(0))
    return cu


def control():
    """The library charges the harness's own cuMemAlloc, and the region reader reads its slot."""
    spec = _spec()
    _limit(spec.limit)
    cu = _reader()
    me = os.getpid()
    u0 = cu.used()
    r, ptr = cu.alloc(CONTROL_BLOCK)
    ok = lp.check_result("cuMemAlloc of the block", lp.CUDA_SUCCESS, r)
    u1 = cu.used()
    ok &= lp.check_eq("HAMi's usage (cuMemGetInfo) grows by the block", CONTROL_BLOCK, u1 - u0)
    region, why = region_now()
    if region is None:
        return lp.check("the region file is readable", "a known region", why, False) and False
    lp.value("region", region.to_json())
    slot = region.slot(me)
    ok &= lp.check("this process has a slot in the region", me, slot.pid if slot else "none", slot is not None)
    ok &= lp.check_eq("the region's charge (sum over its slots) equals HAMi's usage", u1, region.charged())
    if slot is not None:
        ok &= lp.check("this process's slot holds the block", f">= {CONTROL_BLOCK}", slot.total(), slot.total() >= CONTROL_BLOCK)
    if r == lp.CUDA_SUCCESS:
        ok &= lp.check_result("cuMemFree", lp.CUDA_SUCCESS, cu.cuMemFree_v2(ptr))
        ok &= lp.check_eq("HAMi's usage is back after the free", u0, cu.used())
    return ok


def _serve(charge: bool) -> bool:
    spec = _spec()
    _limit(spec.limit)
    lp.rank_started(0)
    cu = _reader(rank=0)
    u0 = cu.used()
    lp.value("harness_usage", u0)
    with DeviceLock("device" in spec.truth):
        d0 = device_used() if charge and "device" in spec.truth else (None, "")
        srv = Server(spec)
        if not srv.start():
            return False
        ok = True
        try:
            state = srv.wait_ready(spec.ready_timeout_s)
            lp.value("ready_s", round(time.monotonic() - srv.started, 3))
            ok &= lp.check(f"the server answers {spec.ready_url}", f"ready within {spec.ready_timeout_s:g} s",
                           state if state != "exited" else f"exited first ({srv.exit_text()})", state == "ready")
            if state != "ready":
                return False
            srv.prove()
            ok &= request(spec)
            if charge:
                ok &= _charged(spec, srv, cu, u0, d0)
            clean, how = srv.stop()
            lp.value("server_exit", how)
            ok &= lp.check(f"the server exits within {spec.stop_timeout_s:g} s of SIGTERM", "exits", how, clean)
            if charge:
                ok &= _nothing_left(srv.pid, cu, u0)
        finally:
            srv.kill()
            srv.finish()
    return ok


def _charged(spec: Spec, srv: Server, cu, u0: int, d0: tuple) -> bool:
    """HAMi's charge for the server (two views) against what the server reserved (each truth available).
    d0: the device's usage before the server started (`device` truth), or (None, why)."""
    if spec.settle_s:
        time.sleep(spec.settle_s)
    srv.quiet()
    u1 = cu.used()
    meminfo = u1 - u0
    region, why = region_now()
    if region is None:
        return lp.check("the region file is readable", "a known region", why, False)
    slot = region.slot(srv.pid)
    lp.value("charged_meminfo", meminfo)
    lp.value("charged_region", slot.to_json() if slot else None)
    ok = lp.check("the server has a slot in the region", srv.pid, slot.pid if slot else "none", slot is not None)
    truths = {}
    if "log" in spec.truth:
        n = log_reserved(spec, srv.output())
        lp.value("reserved_log", n)
        if n is None:
            lp.value("reserved_log_why", f"no line of the server's output matches {spec.log_pattern.pattern!r}")
        else:
            truths["log"] = n
    if "nvml" in spec.truth:
        pids = list(dict.fromkeys(p for p in ((slot.hostpid if slot else 0), srv.pid) if p))
        n, how = nvml_used(pids, nvml_index())
        lp.value("reserved_nvml", n)
        lp.value("reserved_nvml_how", how)
        if n is not None:
            truths["nvml"] = n
    if "device" in spec.truth:
        d1, how = device_used()
        n = d1 - d0[0] if d1 is not None and d0[0] is not None else None
        lp.value("reserved_device", n)
        lp.value("reserved_device_how", how if d1 is None or d0[0] is not None else d0[1])
        if n is not None:
            truths["device"] = n
    if not truths:
        lp.setup_error(f"none of the spec's truths ({', '.join(spec.truth)}) could be read here: nothing to compare "
                       "HAMi's charge with (see the values reserved_*_why / reserved_nvml_how)")
    for name, n in truths.items():
        ok &= lp.check_within(f"HAMi's usage through cuMemGetInfo follows what the server reserved ({name})", n, meminfo,
                              spec.bound)
        if slot is not None:
            ok &= lp.check_within(f"the server's slot in the region follows what it reserved ({name})", n, slot.total(),
                                  spec.bound)
    return ok


def _nothing_left(pid: int, cu, u0: int) -> bool:
    """After the server exited: its slot charges nothing (region file) and the pod's usage is where it was."""
    region, why = region_now()
    if region is None:
        return lp.check("the region file is readable after the server exited", "a known region", why, False)
    lp.value("region_after_exit", region.to_json())
    slot = region.slot(pid)
    ok = lp.check_eq("nothing is charged to the server after it exited (region file)", 0, slot.total() if slot else 0)
    ok &= lp.check_eq("HAMi's usage is back to the harness's own after the server exited", u0, cu.used())
    return ok


def serves():
    return _serve(charge=False)


def charged():
    return _serve(charge=True)


def limit_oom():
    """Under the spec's small limit: a clean out-of-memory exit with the server's own error."""
    spec = _spec()
    if spec.oom_limit is None:
        lp.setup_error(f"{spec.path} has no [oom] (limit and error): this scenario needs them")
    _limit(spec.oom_limit)  # the harness makes no CUDA call until the end: its own context would count against the limit
    lp.rank_started(0)
    with DeviceLock("device" in spec.truth):  # its server moves the device's usage too
        srv = Server(spec)
        if not srv.start():
            return False
        ok = True
        try:
            state = srv.wait_ready(spec.oom_timeout_s)
            lp.value("outcome", state)
            if state == "ready":
                ok &= lp.check(f"the server does not start under a limit of {spec.oom_limit} bytes", "an out-of-memory exit",
                               "it answered readiness: the limit was not enforced", False)
                srv.stop()
            elif state == "timeout":
                ok &= lp.check(f"the server ends within {spec.oom_timeout_s:g} s under the limit", "an out-of-memory exit",
                               "hang: neither exited nor answered readiness", False)
                srv.kill()
            else:
                srv.wait_exit(5)
            lp.value("server_exit", srv.exit_text())
            rc = srv.returncode
            srv.drain()
            out = srv.output()
            ok &= lp.check("the server exits by itself with a non-zero status", "exit status > 0", srv.exit_text(),
                           rc is not None and rc > 0 and not srv.stopped_by_us)
            m = spec.oom_error.search(out)
            lp.value("oom_error", _line_of(out, m))
            ok &= lp.check("the server reports its own out-of-memory error", spec.oom_error.pattern,
                           m.group(0)[:200] if m else "no such line", m is not None)
            hami = re.search(r"Device -?\d+ OOM \d+ / \d+", out)
            lp.value("hami_oom", hami.group(0) if hami else None)
            ok &= lp.check("the library refused an allocation (HAMi's `Device N OOM used / limit`)", "logged",
                           hami.group(0) if hami else "no such line", hami is not None)
            region, why = region_now()
            if region is None:
                ok &= lp.check("the region file is readable after the server exited", "a known region", why, False)
            else:
                lp.value("region_after_exit", region.to_json())
                ok &= lp.check_eq("nothing is charged after the server exited (region file)", 0, region.charged())
        finally:
            srv.kill()
            srv.finish()
    # rank 0's proof, taken only now: a context of the harness would have counted against the limit
    _reader_at_end()
    return ok


def _line_of(text: str, m) -> str | None:
    """The whole output line a match is on (the server's own words), at most 300 characters."""
    if m is None:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return text[start:end if end >= 0 else len(text)].strip()[:300]


def _reader_at_end() -> None:
    """The harness's own proof at its end (rank 0): CUDA initialised after the server is gone."""
    cu = lp.Driver()
    cu.setup_primary(0)
    preload, libcuda = lp.mapped_files()
    lp.emit({"event": "loaded", "reporter": "program", "when": "at-exit", "pid": os.getpid(), "rank": 0,
             "preload": preload, "libcuda": libcuda})
    lp.report_driver(*cu.info(0))


if __name__ == "__main__":
    lp.run({"driver": control, "serves": serves, "charged": charged, "limit-oom": limit_oom})
