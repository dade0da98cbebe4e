"""What runs in a GPU pod: is a libvgpu.so preloaded at all, which bytes, what it is, the HAMi and
driver the pod can see and the limits HAMi applies — the node report (lucepatch/node/report.py).

Two ways in, one reading:
- a root directory (`node --pod-root /` inside a pod; tests give a fixture tree): files are read
  under it (proc/1/environ, etc/ld.so.preload, proc/driver/nvidia/version, the preloaded
  libraries, lib*/libc.so.6); commands (nvidia-smi, getconf) run only when the root is "/";
- a running pod (`node --pod NAME`, kubernetes client exec): POD_SCRIPT runs once in the
  container and prints the same files base64-framed (the exec channel is text), plus the
  commands' output; `parse_script_output` turns that into the same Snapshot.
`report_of(snapshot)` decides from a Snapshot alone, so both ways give the same answer.

Where the facts come from: HAMi's device plugin mounts the library at /usr/local/vgpu/libvgpu.so
and /etc/ld.so.preload naming it unless the container sets CUDA_DISABLE_CONTROL=true; Olares'
apps get `LD_PRELOAD=/usr/local/vgpu/libvgpu.so` (beclab/Olares#3213); the plugin's Allocate sets
CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT, CUDA_DEVICE_MEMORY_SHARED_CACHE and, in the
beclab fork, CUDA_DEVICE_GPU_MODE_<i> (0 exclusive, 1 memory slicing, 2 time slicing),
CUDA_DEVICE_REAL_MEMORY_LIMIT_<i> and SCHEDULER_WEBSOCKET_URL (beclab/HAMi v2.5.4
pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go, util/types.go). Since Olares
1.12.6/1.12.7 a container whose only GPU is exclusive gets no library at all (beclab/Olares#3135).
The HAMi release is not visible inside a pod: it comes from --hami-version.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lucepatch import __version__
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.lines.identity import Identity, identify
from lucepatch.native import elf
from lucepatch.node.driver import DriverVersion
from lucepatch.node.report import (BROKEN, DISABLED, EXCLUSIVE, INJECTED, NOT_INJECTED, Fact, Injection, Library,
                                  NodeReport, save_node_report)

HAMI_LIB = "/usr/local/vgpu/libvgpu.so"
ENVIRON = ("/proc/1/environ", "/proc/self/environ")
PRELOAD_FILE = "/etc/ld.so.preload"
DRIVER_FILE = "/proc/driver/nvidia/version"
LIBC_PATHS = ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6",
              "/lib/aarch64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6")
GPU_MODES = {"0": "exclusive", "1": "memory slicing", "2": "time slicing"}  # beclab/HAMi util/types.go
HAMI_ENV = re.compile(r"CUDA_DEVICE_\w+|CUDA_OVERSUBSCRIBE|CUDA_TASK_PRIORITY|GPU_CORE_UTILIZATION_POLICY|"
                      r"CUDA_DISABLE_CONTROL|LIBCUDA_LOG_LEVEL|ACTIVE_OOM_KILLER|SCHEDULER_WEBSOCKET_URL|"
                      r"NVIDIA_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|LD_PRELOAD")
NVIDIA_SMI = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,uuid", "--format=csv,noheader"]

# One exec into the container: every file base64-framed, each command's output too. POSIX sh,
# coreutils' base64; LP_ROOT prefixes every path (tests run it on a fixture tree) and then no
# command runs (a root that is not "/" is not the live system).
POD_SCRIPT = r"""
R="${LP_ROOT:-}"
emit() { if [ -f "$R$1" ] && [ -r "$R$1" ]; then echo "@@lp-file $1"; base64 < "$R$1"; else echo "@@lp-nofile $1"; fi; }
emit /proc/1/environ
[ -r "$R/proc/1/environ" ] || emit /proc/self/environ
emit /etc/ld.so.preload
emit /proc/driver/nvidia/version
env_file="$R/proc/1/environ"; [ -r "$env_file" ] || env_file="$R/proc/self/environ"
seen=" "
for p in $( { tr '\000' '\n' < "$env_file" 2>/dev/null | sed -n 's/^LD_PRELOAD=//p' | tr ': ' '\n\n';
              sed 's/#.*//' "$R/etc/ld.so.preload" 2>/dev/null | tr ' :\t' '\n\n\n'; echo /usr/local/vgpu/libvgpu.so; } ); do
  case "$seen" in *" $p "*) continue ;; esac
  seen="$seen$p "
  emit "$p"
done
if [ -z "$R" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "@@lp-cmd nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total,uuid --format=csv,noheader 2>&1 | base64
  fi
  if command -v getconf >/dev/null 2>&1; then echo "@@lp-cmd glibc"; getconf GNU_LIBC_VERSION 2>&1 | base64; fi
fi
echo "@@lp-end"
"""


@dataclass
class Snapshot:
    """What was read in the pod: files by absolute path (None: absent), commands' output."""
    source: str
    files: dict[str, bytes | None] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    libc: Path | None = None  # a readable libc.so.6 of the pod (root reads only)

    def file(self, path: str) -> bytes | None:
        return self.files.get(path)


# ----------------------------------------------------------------------------------- reading
def _environ(snap: Snapshot) -> dict[str, str]:
    raw = next((snap.file(p) for p in ENVIRON if snap.file(p)), b"") or b""
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def preload_entries(env: dict[str, str], preload_file: bytes | None) -> list[tuple[str, str]]:
    """(path, via) in the order the loader preloads them: LD_PRELOAD first, then /etc/ld.so.preload."""
    out = [(p, "LD_PRELOAD") for p in re.split(r"[: ]+", env.get("LD_PRELOAD", "")) if p]
    for line in (preload_file or b"").decode("utf-8", "replace").splitlines():
        out += [(p, PRELOAD_FILE) for p in re.split(r"[\s:]+", line.split("#", 1)[0]) if p]
    return out


def snapshot_of_root(root: str | os.PathLike) -> Snapshot:
    root = Path(root)
    live = root.resolve() == Path("/")
    snap = Snapshot(source="this container" if live else f"root {root}")

    def read(p: str) -> bytes | None:
        f = root / p.lstrip("/")
        try:
            return f.read_bytes() if f.is_file() else None
        except OSError:
            return None

    for p in (*ENVIRON, PRELOAD_FILE, DRIVER_FILE):
        snap.files[p] = read(p)
    env = _environ(snap)
    for p, _ in preload_entries(env, snap.file(PRELOAD_FILE)) + [(HAMI_LIB, "")]:
        if p not in snap.files:
            snap.files[p] = read(p)
    snap.libc = next((root / p.lstrip("/") for p in LIBC_PATHS if (root / p.lstrip("/")).is_file()), None)
    if live:
        if shutil.which("nvidia-smi"):
            r = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=60)
            snap.commands["nvidia-smi"] = (r.stdout + r.stderr).strip()
        if shutil.which("getconf"):
            r = subprocess.run(["getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True, timeout=10)
            snap.commands["glibc"] = r.stdout.strip()
    return snap


def parse_script_output(text: str, source: str) -> Snapshot:
    """The Snapshot POD_SCRIPT printed; CheckFailed when the output is cut short or not the script's."""
    snap = Snapshot(source=source)
    cur_kind, cur_name, buf = None, None, []
    ended = False

    def flush():
        if cur_kind is None:
            return
        try:
            data = base64.b64decode("".join(buf), validate=True)
        except (binascii.Error, ValueError):
            raise CheckFailed(f"{source}: the pod's output for {cur_name} is not base64 (the container needs "
                              "sh and coreutils' base64)")
        if cur_kind == "file":
            snap.files[cur_name] = data
        else:
            snap.commands[cur_name] = data.decode("utf-8", "replace").strip()

    for line in text.splitlines():
        if line.startswith("@@lp-"):
            flush()
            cur_kind, cur_name, buf = None, None, []
            tag, _, rest = line.partition(" ")
            if tag == "@@lp-file":
                cur_kind, cur_name = "file", rest.strip()
            elif tag == "@@lp-cmd":
                cur_kind, cur_name = "cmd", rest.strip()
            elif tag == "@@lp-nofile":
                snap.files[rest.strip()] = None
            elif tag == "@@lp-end":
                ended = True
        elif cur_kind is not None:
            buf.append(line.strip())
    flush()
    if not ended:
        first = next((l for l in text.splitlines() if l.strip()), "no output")
        raise CheckFailed(f"{source}: the pod did not finish reporting ({first[:160]}); the container needs sh, tr, "
                          "sed and base64 (or read only the library: node --pod NAME --lib-path /usr/local/vgpu/libvgpu.so)")
    return snap


def from_pod(pod: str, exec_pod, *, namespace: str = "default", container: str | None = None,
             context: str | None = None) -> Snapshot:
    """Run POD_SCRIPT in the pod once; `exec_pod` is the cluster side's exec (k8s/client.py pod_exec,
    handed in by the caller: the cluster sits a floor above lines)."""
    out = exec_pod(pod, namespace=namespace, container=container, command=["sh", "-c", POD_SCRIPT], context=context)
    return parse_script_output(out or "", f"pod {namespace}/{pod}")


# ----------------------------------------------------------------------------------- deciding
def _driver(snap: Snapshot) -> tuple[Fact, list[dict]]:
    gpus = []
    smi = snap.commands.get("nvidia-smi") or ""
    for row in smi.splitlines():
        cols = [c.strip() for c in row.split(",")]
        if len(cols) >= 2 and re.fullmatch(r"\d+\.\d+(\.\d+)?", cols[1]):
            gpus.append({"name": cols[0], "driver": cols[1], "memory": cols[2] if len(cols) > 2 else "",
                         "uuid": cols[3] if len(cols) > 3 else ""})
    text = (snap.file(DRIVER_FILE) or b"").decode("utf-8", "replace")
    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        return Fact(m.group(1), DRIVER_FILE), gpus
    if gpus:
        return Fact(gpus[0]["driver"], "nvidia-smi"), gpus
    return Fact(None, "none", f"neither {DRIVER_FILE} nor nvidia-smi in the pod: the node's driver is not visible here"), gpus


def _glibc(snap: Snapshot) -> tuple[Fact, elf.LibcProvides | None]:
    if snap.libc is not None:
        try:
            lp = elf.libc_provides(snap.libc)
            if lp.glibc:
                return Fact(lp.glibc, f"{snap.libc.name} of the pod"), lp
        except (OSError, ValueError) as exc:
            return Fact(None, "none", f"unreadable libc.so.6 ({exc})"), None
    m = re.search(r"glibc\s+(\d+\.\d+)", snap.commands.get("glibc", ""))
    if m:
        return Fact(m.group(1), "getconf GNU_LIBC_VERSION"), None
    return Fact(None, "none", "the pod's glibc is not known (no getconf, no readable libc.so.6)"), None


def memory_mib(value: str) -> float | None:
    """HAMi-core's reading of a CUDA_DEVICE_MEMORY_LIMIT value: a number with k/m/g (KiB/MiB/GiB), else bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)[iI]?[bB]?\s*", value or "")
    if not m:
        return None
    n, unit = float(m.group(1)), m.group(2).lower()
    return {"k": n / 1024, "m": n, "g": n * 1024}.get(unit, n / (1 << 20))


def _limits(env: dict[str, str]) -> tuple[dict, list[str]]:
    notes = []
    mem, sm, modes, real = {}, {}, {}, {}
    for k, v in sorted(env.items()):
        m = re.fullmatch(r"CUDA_DEVICE_MEMORY_LIMIT(?:_(\d+))?", k)
        if m:
            mem[m.group(1) or "all"] = memory_mib(v)
            if memory_mib(v) == 0:
                notes.append(f"{k}={v}: Olares' value when the app requests no nvidia.com/gpumem; upstream HAMi-core "
                             "reads 0 as a zero limit, line hami-core-v2.5 as no limit")
        m = re.fullmatch(r"CUDA_DEVICE_SM_LIMIT(?:_(\d+))?", k)
        if m:
            sm[m.group(1) or "all"] = int(v) if v.strip().isdigit() else v
        m = re.fullmatch(r"CUDA_DEVICE_GPU_MODE_(\d+)", k)
        if m:
            modes[m.group(1)] = GPU_MODES.get(v.strip(), f"unknown ({v})")
        m = re.fullmatch(r"CUDA_DEVICE_REAL_MEMORY_LIMIT_(\d+)", k)
        if m:
            real[m.group(1)] = memory_mib(v)
    out = {"memory_mib": mem, "sm_percent": sm, "gpu_mode": modes, "real_memory_mib": real,
           "shared_cache": env.get("CUDA_DEVICE_MEMORY_SHARED_CACHE"),
           "env": {k: v for k, v in sorted(env.items()) if HAMI_ENV.fullmatch(k)}}
    return out, notes


def _vendor(env: dict[str, str], ident: Identity | None) -> Fact:
    if "SCHEDULER_WEBSOCKET_URL" in env or any(k.startswith("CUDA_DEVICE_GPU_MODE_") for k in env):
        keys = [k for k in env if k == "SCHEDULER_WEBSOCKET_URL" or k.startswith("CUDA_DEVICE_GPU_MODE_")]
        return Fact("beclab (Olares)", "device-plugin environment: " + ", ".join(sorted(keys)))
    if ident is not None and ident.kind == "fork":
        return Fact("a vendor's fork", "the library's exported names")
    if "CUDA_DEVICE_MEMORY_SHARED_CACHE" in env:
        return Fact("HAMi", "device-plugin environment: CUDA_DEVICE_MEMORY_SHARED_CACHE",
                    "no vendor-specific variable: an upstream-style device plugin")
    return Fact(None, "none", "no HAMi device-plugin variable in the environment")


def _identify_bytes(data: bytes, name: str, libc: Path | None) -> Identity:
    fd, tmp = tempfile.mkstemp(prefix="lucepatch-pod-lib-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        ident = identify(tmp, libc=libc)
    finally:
        os.unlink(tmp)
    ident.path = name
    return ident


def _loads(ident: Identity, glibc: Fact, lp: elf.LibcProvides | None) -> dict:
    """Whether the pod's processes can load the library (they bind lazily: no LD_BIND_NOW in a pod's
    environment is assumed); `lazy` says what a lazily bound reference the pod's glibc lacks costs."""
    if lp is not None:
        problems = elf.unmet_needs(ident.loader, lp)
        return {"ok": not problems, "problems": problems, "lazy": elf.lazy_notes(ident.loader, lp),
                "against": f"the pod's libc.so.6 (glibc {lp.glibc})"}
    if not glibc.value:
        return {"ok": None, "problems": [], "lazy": [], "against": "the pod's glibc is not known"}
    have = tuple(int(x) for x in glibc.value.split("."))
    problems, lazy = [], []
    if ident.loader.newest_glibc and tuple(int(x) for x in ident.loader.newest_glibc.split(".")) > have:
        problems.append(f"needs GLIBC_{ident.loader.newest_glibc}, the pod has glibc {glibc.value}")
    limits = elf.private_symbol_limits()
    for r in ident.loader.private:
        lim = limits.get(r.name)
        if lim and have >= tuple(int(x) for x in lim["removed_in"].split(".")):
            if r.fails_at_load():
                problems.append(f"needs {r}, which glibc {glibc.value} does not export (gone since {lim['removed_in']})")
            elif r.binding == elf.LAZY:
                lazy.append(elf.lazy_note(r))
    return {"ok": not problems, "problems": problems, "lazy": lazy, "against": f"glibc {glibc.value} ({glibc.source})"}


def _driver_version(driver: Fact) -> DriverVersion | None:
    if not driver.value:
        return None
    try:
        return DriverVersion.parse(driver.value, driver.source)
    except UsageError:  # a driver line lucepatch cannot read: kept as read in `driver`, not for the gates
        return None


def report_of(snap: Snapshot, *, hami_versions=(), now: str | None = None) -> NodeReport:
    env = _environ(snap)
    entries = preload_entries(env, snap.file(PRELOAD_FILE))
    vgpu = [(p, via) for p, via in entries if PurePosixPath(p).name.startswith("libvgpu")]
    limits, notes = _limits(env)
    modes = limits["gpu_mode"]
    exclusive = bool(modes) and all(m == "exclusive" for m in modes.values())
    mounted = snap.file(HAMI_LIB) is not None
    glibc, lp = _glibc(snap)
    lib_path, ident = None, None
    present = [(p, via) for p, via in vgpu if snap.file(p)]
    if present:
        lib_path = present[0][0]
        via = sorted({v for p, v in vgpu if p == lib_path})
        state = INJECTED
        msg = f"{lib_path} is preloaded ({', '.join(via)})"
        if len(present) > 1:
            msg += f"; also preloaded: {', '.join(p for p, _ in present[1:])}"
    elif vgpu:
        state = BROKEN
        via = sorted({v for _, v in vgpu})
        msg = (f"{', '.join(p for p, _ in vgpu)} is named by {', '.join(via)} but not in the container: the loader "
               "prints `cannot be preloaded ... ignored` and the app runs without HAMi-core (HAMi#1346, HAMi#1713)")
    elif exclusive:
        state, via = EXCLUSIVE, []
        msg = ("not injected: the container's only GPU is in exclusive mode ("
               + ", ".join(f"CUDA_DEVICE_GPU_MODE_{i}=0" for i in sorted(modes))
               + "); Olares 1.12.6+ gives such a container no libvgpu.so (beclab/Olares#3135): HAMi-core is not in "
               "the app's process at all")
    elif mounted and env.get("CUDA_DISABLE_CONTROL", "").lower() in ("1", "true", "yes"):
        state, via, lib_path = DISABLED, [], HAMI_LIB
        msg = f"{HAMI_LIB} is mounted but not preloaded: CUDA_DISABLE_CONTROL={env['CUDA_DISABLE_CONTROL']}"
    else:
        state, via = NOT_INJECTED, []
        msg = "not injected: no libvgpu.so in LD_PRELOAD or /etc/ld.so.preload" + (
            f" ({HAMI_LIB} is mounted, nothing preloads it)" if mounted else "")
        if mounted:
            lib_path = HAMI_LIB
    library = None
    loads: dict = {"ok": None, "problems": [], "lazy": [], "against": "no library"}
    if lib_path and snap.file(lib_path):
        data = snap.file(lib_path)
        ident = _identify_bytes(data, lib_path, snap.libc if lp is not None else None)
        library = Library(lib_path, ident.sha256, ident.size, ident.to_json())
        loads = _loads(ident, glibc, lp)
    driver, gpus = _driver(snap)
    hv = [v if str(v).startswith("v") else f"v{v}" for v in hami_versions]
    hami = Fact(", ".join(hv), "--hami-version") if hv else Fact(
        None, "none", "the HAMi release is not visible inside a pod: pass --hami-version (the device-plugin image tag)")
    return NodeReport(
        driver_version=_driver_version(driver), node=None, source="",
        collected_from=snap.source, collected_at=now or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        tool=f"lucepatch {__version__}",
        injection=Injection(state, msg, via, [p for p, _ in entries], lib_path),
        library=library, driver=driver, hami=hami, vendor=_vendor(env, ident), glibc=glibc, limits=limits,
        loads=loads, gpus=gpus, notes=notes)


def collect(*, pod: str | None = None, root: str | None = None, exec_pod=None, namespace: str = "default",
            container: str | None = None, context: str | None = None, hami_versions=()) -> tuple[NodeReport, bytes | None]:
    """(the node report, the preloaded library's bytes or None) of a pod or a root directory."""
    if pod:
        if exec_pod is None:
            raise UsageError("--pod needs the cluster side (lucepatch[k8s]); pass --pod-root DIR or --lib FILE")
        snap = from_pod(pod, exec_pod, namespace=namespace, container=container, context=context)
    else:
        snap = snapshot_of_root(root)
    report = report_of(snap, hami_versions=hami_versions)
    lib = report.library.path if report.library else None
    return report, (snap.file(lib) if lib else None)


def save(report: NodeReport, path: str) -> None:
    save_node_report(report, path)
