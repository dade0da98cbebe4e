"""fakecuda: a simulated CUDA driver (libcuda.so.1 + libnvidia-ml.so.1) for GPU-less machines.

The C sources next to this file model the driver semantics HAMi-core's bug family depends on
(FIELD-NOTES §3): per-thread context stack, cuCtxGetDevice -> 201 with the output untouched on a
context-less thread, stream-ordered calls served through the stream's context. The build
directory doubles as a link-time stub directory (libcuda.so / libnvidia-ml.so symlinks).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

from lucepatch.errors import EnvironmentMissing

FAKE_DEVICE_NAME_PREFIX = "lucepatch-fakecuda"

_HERE = pathlib.Path(__file__).resolve().parent
_SOURCES = ("fakecuda.c", "fakenvml.c", "fakecuda_common.h")
_CFLAGS = ["-shared", "-fPIC", "-O1", "-g", "-Wl,-Bsymbolic", "-pthread"]


def _cuda_include() -> pathlib.Path:
    for cand in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if cand and (pathlib.Path(cand) / "include" / "cuda.h").is_file():
            return pathlib.Path(cand) / "include"
    raise EnvironmentMissing("cuda.h not found: install the CUDA toolkit headers or set CUDA_HOME")


def _nvml_include() -> pathlib.Path:
    for cand in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if cand and (pathlib.Path(cand) / "include" / "nvml.h").is_file():
            return pathlib.Path(cand) / "include"
    try:
        import nvidia  # the nvidia-nvml-dev wheel ships nvml.h (header only)

        for base in nvidia.__path__:
            for sub in ("cu13", "cu12", "nvml"):
                inc = pathlib.Path(base) / sub / "include"
                if (inc / "nvml.h").is_file():
                    return inc
    except ImportError:
        pass
    raise EnvironmentMissing("nvml.h not found: pip install nvidia-nvml-dev (header only)")


def _digest() -> str:
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update(name.encode() + b"\0")
        h.update((_HERE / name).read_bytes())
    h.update(" ".join(_CFLAGS).encode())
    return h.hexdigest()[:16]


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"fakecuda build failed: {' '.join(cmd)}\n{proc.stderr}")


def build_fakecuda(out_dir: pathlib.Path) -> pathlib.Path:
    """Build (once per source hash) and return the directory holding the fake driver libs."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise EnvironmentMissing("no C compiler: install gcc")
    out_dir = pathlib.Path(out_dir)
    final = out_dir / _digest()
    if (final / "libcuda.so.1").is_file() and (final / "libnvidia-ml.so.1").is_file():
        return final
    out_dir.mkdir(parents=True, exist_ok=True)
    cuda_inc, nvml_inc = _cuda_include(), _nvml_include()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".fakecuda-", dir=out_dir))
    tmp.chmod(0o755)  # mkdtemp makes it private; the libs are shared with other users/containers
    try:
        _run([gcc, *_CFLAGS, f"-I{cuda_inc}", f"-I{_HERE}", "-Wl,-soname,libcuda.so.1",
              "-o", str(tmp / "libcuda.so.1"), str(_HERE / "fakecuda.c")])
        # libnvidia-ml needs fakecuda's context state; it links to it (found next to itself).
        _run([gcc, *_CFLAGS, f"-I{nvml_inc}", f"-I{_HERE}", "-Wl,-soname,libnvidia-ml.so.1",
              "-o", str(tmp / "libnvidia-ml.so.1"), str(_HERE / "fakenvml.c"),
              f"-L{tmp}", "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"])
        os.symlink("libcuda.so.1", tmp / "libcuda.so")
        os.symlink("libnvidia-ml.so.1", tmp / "libnvidia-ml.so")
        try:
            os.rename(tmp, final)
        except OSError:
            # a concurrent build won the race; its result is identical
            if not (final / "libcuda.so.1").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
