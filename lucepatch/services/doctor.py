"""What is present or missing here (`lucepatch doctor`), with the fix for each and which verbs need it.

`blocking(items, verbs)` is what a verb named with `--for` cannot run without (without verbs: git,
which every verb needs, missing or too old).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field

from lucepatch import git
from lucepatch.errors import LucepatchError
from lucepatch.native import toolchain

MIN_GIT = (2, 38)
MIN_DRIVER = 580


@dataclass
class Item:
    name: str
    ok: bool
    version: str = ""
    detail: str = ""
    remedy: str = ""
    needed_by: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "status": "present" if self.ok else "missing", "version": self.version,
                "detail": self.detail, "remedy": "" if self.ok else self.remedy, "needed_by": self.needed_by}


# Which verbs need what (data; `doctor --for VERB` reads it).
NEEDS = {
    "git": ["apply", "check", "status", "export", "rebase", "matrix", "lint", "import", "build", "probe", "verify",
            "bisect", "pr", "mark", "ci"],
    "cmake": ["build", "probe", "verify", "bisect", "ci"],
    "cc": ["build", "probe", "verify", "bisect", "ci"],
    "cuda.h": ["build", "probe", "verify", "bisect", "ci"],
    "nvml.h": ["build", "verify", "bisect", "ci"],
    "nvcc": ["probe"],
    "docker": ["build --image", "inspect"],
    "gpu": ["verify --driver real"],
    "cpplint": ["pr"],
    "valgrind": [],
    "quilt": [],
}


def _run(cmd: list[str], timeout: float = 30) -> tuple[int, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return r.returncode, (r.stdout + r.stderr).strip()


def _vtuple(s: str) -> tuple[int, ...]:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", s)
    return tuple(int(x) for x in m.groups() if x is not None) if m else ()


def check_git() -> Item:
    it = Item("git", False, remedy=f"install git >= {'.'.join(map(str, MIN_GIT))} (apt-get install git; "
                                   "backports or the git-core PPA on older distributions)")
    if not shutil.which("git"):
        it.detail = "not on PATH"
        return it

    v = _vtuple(git.version())
    it.version = ".".join(map(str, v))
    it.ok = v >= MIN_GIT
    it.detail = "merge-tree --write-tree available" if it.ok else f"older than {'.'.join(map(str, MIN_GIT))}: no merge-tree --write-tree"
    return it


def check_cmake() -> Item:
    it = Item("cmake", False, remedy="install cmake (apt-get install cmake, or pip install cmake)")
    if not shutil.which("cmake"):
        it.detail = "not on PATH"
        return it
    _, out = _run(["cmake", "--version"])
    v = _vtuple(out)
    it.version = ".".join(map(str, v))
    it.ok = bool(v)
    if v and v[0] >= 4:
        it.detail = "CMake >= 4: projects declaring cmake_minimum_required < 3.5 need a Build-Only patch or -DCMAKE_POLICY_VERSION_MINIMUM=3.5"
    else:
        it.detail = "CMake < 4"
    return it


def check_cc() -> Item:
    it = Item("cc", False, remedy="install a C compiler (apt-get install gcc)")
    exe = shutil.which("cc") or shutil.which("gcc")
    if not exe:
        it.detail = "no cc/gcc on PATH"
        return it
    _, out = _run([exe, "--version"])
    it.ok, it.version, it.detail = True, (out.splitlines() or [""])[0][:80], exe
    return it


def check_cuda_h() -> Item:
    it = Item("cuda.h", False, remedy="install the CUDA toolkit headers (e.g. apt-get install cuda-cudart-dev-13-0) or set CUDA_HOME")
    try:
        inc = toolchain.cuda_include()
    except LucepatchError as exc:
        it.detail = str(exc)
        return it
    m = re.search(r"#define CUDA_VERSION (\d+)", (inc / "cuda.h").read_text(errors="replace"))
    it.ok, it.detail = True, str(inc)
    if m:
        n = int(m.group(1))
        it.version = f"{n // 1000}.{(n % 1000) // 10}"
    return it


def check_nvml_h() -> Item:
    it = Item("nvml.h", False, remedy="pip install nvidia-nvml-dev (header only) or install the CUDA NVML headers")
    try:
        it.detail = str(toolchain.nvml_include())
        it.ok = True
    except LucepatchError as exc:
        it.detail = str(exc)
    return it


def check_nvcc() -> Item:
    it = Item("nvcc", False, remedy="install the CUDA toolkit (nvcc), e.g. apt-get install cuda-nvcc-13-0, and put it on PATH")
    exe = shutil.which("nvcc")
    if not exe:
        it.detail = "not on PATH"
        return it
    _, out = _run([exe, "--version"])
    m = re.search(r"release (\d+\.\d+)", out)
    it.version = m.group(1) if m else ""
    rc, archs = _run([exe, "--list-gpu-arch"])
    arch_list = [a for a in archs.split() if a.startswith("compute_")] if rc == 0 else []
    it.ok = True
    it.detail = ("archs: " + " ".join(a.removeprefix("compute_") for a in arch_list)) if arch_list else "arch list unavailable"
    return it


def check_docker() -> Item:
    it = Item("docker", False, remedy="start the Docker daemon (systemctl start docker / dockerd) and make its socket "
                                      "reachable (DOCKER_HOST), and pip install 'lucepatch[docker]'")
    try:
        import docker  # optional: the docker extra
        import requests  # optional: the docker extra (the SDK's transport)
    except ImportError:
        it.detail = "the docker Python SDK is not installed"
        return it
    try:
        client = docker.from_env(timeout=5)
        v = client.version()
        it.ok = True
        it.version = str(v.get("Version", ""))
        it.detail = f"daemon API {v.get('ApiVersion', '?')} (min {v.get('MinAPIVersion', '?')})"
        client.close()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:  # no daemon answers
        it.detail = f"no daemon: {str(exc).splitlines()[0][:160]}"
    return it


def check_gpu() -> Item:
    it = Item("gpu", False, remedy=f"an NVIDIA GPU with driver R{MIN_DRIVER}+ (CUDA 13 images); "
                                   "without one, verify runs on the simulated driver (--driver fake)")
    exe = shutil.which("nvidia-smi")
    if not exe:
        it.detail = "nvidia-smi not found"
        return it
    rc, out = _run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"])
    rows = [l.split(",") for l in out.splitlines() if "," in l] if rc == 0 else []
    if not rows:
        it.detail = f"nvidia-smi found no GPU ({out.splitlines()[0][:120] if out else rc})"
        return it
    name, driver = rows[0][0].strip(), rows[0][1].strip()
    it.version = driver
    major = _vtuple(driver)[:1]
    it.ok = bool(major) and major[0] >= MIN_DRIVER
    it.detail = f"{len(rows)} x {name}" + ("" if it.ok else f"; driver older than R{MIN_DRIVER}")
    return it


def _simple(name: str, remedy: str, version_args=("--version",)) -> Item:
    it = Item(name, False, remedy=remedy)
    exe = shutil.which(name)
    if not exe:
        it.detail = "not on PATH"
        return it
    _, out = _run([exe, *version_args])
    it.ok, it.version = True, ".".join(map(str, _vtuple(out)))
    it.detail = exe
    return it


def check_cpplint() -> Item:
    return _simple("cpplint", "pip install cpplint (HAMi-core's PR check)")


def check_valgrind() -> Item:
    return _simple("valgrind", "apt-get install valgrind (memcheck shows HAMi-core's uninitialised reads without poisoning)")


def check_quilt() -> Item:
    return _simple("quilt", "apt-get install quilt (only to import/export quilt patch directories by hand)")


CHECKS = [check_git, check_cmake, check_cc, check_cuda_h, check_nvml_h, check_nvcc, check_docker, check_gpu,
          check_cpplint, check_valgrind, check_quilt]


def diagnose() -> list[Item]:
    items = []
    for fn in CHECKS:
        it = fn()
        it.needed_by = NEEDS.get(it.name, [])
        items.append(it)
    return items


def blocking(items: list[Item], verbs: list[str]) -> list[Item]:
    if not verbs:
        return [i for i in items if i.name == "git" and not i.ok]
    return [i for i in items if not i.ok and any(v in i.needed_by for v in verbs)]


VERBS = sorted({v for vs in NEEDS.values() for v in vs})
