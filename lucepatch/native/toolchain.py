"""Finding the tools and headers a build needs, with a one-line remedy when one is missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from lucepatch.errors import EnvironmentMissing
from lucepatch.files import sha256_file


def cuda_home() -> Path:
    for cand in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if cand and (Path(cand) / "include" / "cuda.h").is_file():
            return Path(cand)
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(nvcc).resolve().parent.parent
        if (home / "include" / "cuda.h").is_file():
            return home
    raise EnvironmentMissing("cuda.h not found: install the CUDA toolkit headers or set CUDA_HOME")


def cuda_include() -> Path:
    return cuda_home() / "include"


def nvml_include() -> Path:
    """nvml.h: the toolkit's, else the PyPI wheel nvidia-nvml-dev (header only)."""
    cands = [cuda_include(), Path("/usr/include")]
    spec = importlib.util.find_spec("nvidia")
    if spec and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            cands += sorted(Path(root).glob("*/include"), reverse=True) + [Path(root) / "include"]
    for c in cands:
        if (c / "nvml.h").is_file():
            return c
    raise EnvironmentMissing("nvml.h not found: pip install nvidia-nvml-dev (header only) or install the CUDA NVML headers")


def require(tool: str, remedy: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise EnvironmentMissing(f"{tool} not found: {remedy}")
    return path


@lru_cache(maxsize=None)
def version_line(tool: str) -> str:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    lines = [l for l in out.splitlines() if l.strip()]
    return lines[0] if lines else "unknown"


def c_compiler() -> str:
    """The C compiler CMake will pick: $CC when set, else cc on PATH."""
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc) or cc


def fingerprint(needs: list[str]) -> dict:
    """What the compiler side of a build depends on (part of the build cache key): the cmake and
    compiler versions and where the compiler lives, and the CUDA and NVML headers in use — always
    when present, not only when the target declares them (a header it includes unannounced still
    changes the bytes)."""
    cc = c_compiler()
    fp = {"cmake": version_line("cmake"), "cc": version_line(cc), "cc_path": os.path.realpath(cc)}
    for name, find in (("cuda.h", cuda_include), ("nvml.h", nvml_include)):
        try:
            fp[name] = sha256_file(find() / name)
        except EnvironmentMissing:
            if name in needs:
                raise
    return fp
