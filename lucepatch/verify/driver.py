"""Which CUDA driver a run uses: the machine's real libcuda.so.1 or the simulated one.

The choice only sets the library search path. What a run actually used is read back from the
run itself (the mapped libcuda's realpath and sha256, cuDriverGetVersion, cuDeviceGetName), never
from this choice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lucepatch import children
from lucepatch.errors import EnvironmentMissing, UsageError
from lucepatch.files import sha256_file
from lucepatch.native.fakecuda import FAKE_DEVICE_NAME_PREFIX, build_fakecuda

_PROBE = r"""
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("noload", e); sys.exit(1)
if cu.cuInit(0) != 0:
    print("noinit"); sys.exit(1)
n = ctypes.c_int(0)
cu.cuDeviceGetCount(ctypes.byref(n))
print("devices", n.value)
sys.exit(0 if n.value > 0 else 1)
"""


@dataclass
class DriverChoice:
    requested: str  # auto | real | fake
    chosen: str  # real | fake
    env: dict
    fake_dir: Path | None
    note: str = ""


def real_gpu_available() -> tuple[bool, str]:
    try:
        r = children.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "probe timed out"
    return r.returncode == 0, (r.stdout.strip() or r.stderr.strip())[:200]


def driver_identity(requested: str, cache: Path) -> dict:
    """Driver kind and version of what runs would use (the CI gate's cache key): the simulated
    driver by its bytes, a real one by nvidia-smi's GPU name and driver version."""
    drv = choose_driver(requested, cache)
    ident = {"chosen": drv.chosen}
    if drv.chosen == "fake" and drv.fake_dir is not None:
        lib = Path(drv.fake_dir) / "libcuda.so.1"
        ident["libcuda"] = sha256_file(lib) if lib.is_file() else str(drv.fake_dir)
    else:
        smi = shutil.which("nvidia-smi")
        if smi:
            ident["driver"] = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                             capture_output=True, text=True).stdout.strip()
    return ident


_LOADABLE = "import ctypes, sys\ntry:\n    ctypes.CDLL('libcuda.so.1')\nexcept OSError as e:\n    print(e); sys.exit(1)\n"


def require_driver(requested: str) -> None:
    """--driver real where no libcuda.so.1 loads: refused before anything is built (tens of ms: a dlopen
    in a child, no cuInit). The full probe (cuInit, a device) still runs beside the builds: a GPU's
    initialisation is what takes time, and a machine without one refuses here."""
    if requested != "real":
        return
    try:
        r = children.run([sys.executable, "-c", _LOADABLE], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return  # a hung loader is the full probe's to report
    if r.returncode != 0:
        why = (r.stdout.strip() or r.stderr.strip() or "libcuda.so.1 does not load")[:200]
        raise EnvironmentMissing(f"--driver real: no NVIDIA driver here ({why}); use --driver fake or run on a GPU machine")


def choose_driver(requested: str, cache: Path) -> DriverChoice:
    if requested not in ("auto", "real", "fake"):
        raise UsageError(f"--driver {requested!r}: use auto, real or fake")
    fake_dir = build_fakecuda(cache / "fakecuda")
    if requested in ("auto", "real"):
        ok, note = real_gpu_available()
        if ok:
            return DriverChoice(requested, "real", {}, fake_dir, note)
        if requested == "real":
            raise EnvironmentMissing(f"--driver real: no usable NVIDIA driver/GPU here ({note}); use --driver fake or run on a GPU machine")
    return DriverChoice(requested, "fake", {"LD_LIBRARY_PATH": str(fake_dir)}, fake_dir,
                        "no GPU found; using the simulated driver" if requested == "auto" else "")


def classify_driver(libcuda_sha256: str | None, gpu_name: str | None, fake_dir: Path | None) -> str:
    """real | fake | unknown, from what the run mapped (sha256 of libcuda) and what it reported."""
    if gpu_name and gpu_name.startswith(FAKE_DEVICE_NAME_PREFIX):
        return "fake"
    if libcuda_sha256 and fake_dir is not None:
        fake = fake_dir / "libcuda.so.1"
        if fake.is_file() and sha256_file(fake) == libcuda_sha256:
            return "fake"
    if libcuda_sha256 and gpu_name:
        return "real"
    return "unknown"


# Kept open during the runs with the real driver: NVML and the CUDA driver initialised in a helper
# process, so that a run never pays GPU initialisation because no other process held the device
# (what nvidia-persistenced does; with persistence mode on it changes nothing). No context is
# created: the GPU's compute mode and memory are left alone.
_HOLD = r"""
import ctypes, sys
got = []
for lib, init in (("libnvidia-ml.so.1", "nvmlInit_v2"), ("libcuda.so.1", "cuInit")):
    try:
        f = getattr(ctypes.CDLL(lib), init)
        rc = f(0) if init == "cuInit" else f()
        got.append(f"{init}={rc}")
    except (OSError, AttributeError) as exc:
        got.append(f"{init}: {exc}")
print(" ".join(got), flush=True)
sys.stdin.read()
"""


class DriverHold:
    def __init__(self, proc=None, why: str = ""):
        self.proc, self.why = proc, why

    def describe(self) -> str:
        if self.proc is None:
            return self.why
        return f"a helper process held NVML and the CUDA driver open during the runs ({self.why or 'started'})"


class hold_driver:
    """Context manager: with the real driver, a helper process initialises NVML and cuInit and waits
    until the runs are over (its stdin closes, also when this process dies)."""

    def __init__(self, drv: DriverChoice):
        self.drv = drv
        self.hold = DriverHold(None, "")

    def __enter__(self) -> DriverHold:
        if self.drv.chosen != "real":
            return self.hold

        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CUDA_DEVICE_MEMORY_SHARED_CACHE")}
        try:
            self.hold.proc = children.popen([sys.executable, "-c", _HOLD], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        except OSError as exc:
            self.hold.why = f"no helper held the driver ({exc})"
        return self.hold

    def __exit__(self, *exc) -> None:
        p = self.hold.proc
        if p is None:
            return
        if exc[0] is not None:  # interrupted or failed: the helper goes at once, nothing to report
            children.kill_group(p)
            p.wait()
            children.release(p)
            return
        try:
            p.stdin.close()
            out = p.stdout.read().decode("utf-8", "replace").strip()
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            out = "killed after the runs"
        finally:
            children.release(p)
        self.hold.why = out[:120]
