"""Stand-ins: a CUDA devel-image layout for configure and link on a machine without a GPU driver
(the driver's stub library, cuBLAS stand-ins where the toolkit has none, a nlohmann_json package
config where none is installed, objects for links, and a driver/ folder for the loader's
cross-check), built once per content key through lucepatch.native.compiling. Probes (builders/probe.py)
link against them; the image build (builders/image.py) checks its closure with them."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import EnvironmentMissing
from lucepatch.native import compiling, toolchain


@dataclass
class StandIns:
    """A CUDA devel-image layout for configure and link on a driver-less box.

    cuda/lib64/stubs/libcuda.so (SONAME libcuda.so.1, no libcuda.so.1 file: the devel-image
    layout), cuBLAS stand-ins where the toolkit has none, a nlohmann_json package config where none
    is installed (configure only: no probe compiles the C++ that uses it), objects for links, and
    driver/ with libcuda.so.1 + libnvidia-ml.so.1 stubs for the loader cross-check (never on a
    link path: they would hide F6).
    """
    root: Path
    driver_symbols: list[str]
    presets: dict[str, str] = field(default_factory=dict)
    nlohmann: Path | None = None

    @property
    def stubs(self) -> Path:
        return self.root / "cuda" / "lib64" / "stubs"

    @property
    def driver(self) -> Path:
        return self.root / "driver"

    @property
    def src(self) -> Path:
        return self.root / "src"

    def cmake_args(self) -> list[str]:
        return [f"-D{k}={v}" for k, v in self.presets.items()]


def _stand_in_unit(syms: list[str], work: Path) -> compiling.Unit:
    work.mkdir(parents=True, exist_ok=True)
    texts = {
        "driver.c": "".join(f"int {s}(void) {{ return 0; }}\n" for s in syms),
        "cublas.c": "int lucepatch_cublas_stand_in(void) { return 0; }\n",
        "empty.c": "static int lucepatch_probe_empty_tu __attribute__((unused));\n",
        "main.c": "int main(void) { return 0; }\n",
        "uses_driver.c": "".join(f"extern int {s}(void);\n" for s in syms)
        + "int lucepatch_uses_driver(void) { return 0" + "".join(f" + {s}()" for s in syms) + "; }\n",
        "nvml.c": "int nvmlInit_v2(void) { return 0; }\n",
    }
    for name, text in texts.items():
        if not (work / name).is_file() or (work / name).read_text() != text:
            (work / name).write_text(text)
    src = {n: str(work / n) for n in texts}
    so = lambda soname, out, c: ["{cc}", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", "{out}/" + out, src[c]]  # noqa: E731
    steps = [["mkdir", "-p", "{out}/cuda/lib64/stubs", "{out}/src", "{out}/driver"],
             so("libcuda.so.1", "cuda/lib64/stubs/libcuda.so", "driver.c"),
             so("libcublas.so.13", "cuda/lib64/libcublas.so.13", "cublas.c"),
             so("libcublasLt.so.13", "cuda/lib64/libcublasLt.so.13", "cublas.c"),
             so("libcuda.so.1", "driver/libcuda.so.1", "driver.c"),
             so("libnvidia-ml.so.1", "driver/libnvidia-ml.so.1", "nvml.c")]
    steps += [["{cc}", "-c", "-fPIC", "-o", f"{{out}}/src/{n}.o", src[f"{n}.c"]] for n in ("empty", "main", "uses_driver")]
    return compiling.Unit(what="probe stand-ins", steps=steps,
                          outputs=["cuda/lib64/stubs/libcuda.so", "cuda/lib64/libcublas.so", "driver/libcuda.so.1",
                                   "src/empty.o", "src/main.o", "src/uses_driver.o"],
                          inputs=[work / n for n in texts],
                          links={"cuda/lib64/libcublas.so": "libcublas.so.13",
                                 "cuda/lib64/libcublasLt.so": "libcublasLt.so.13"})


def _nlohmann_stand_in(cache: Path) -> Path:
    d = cache / "probe-standins" / "nlohmann_json-v1"
    if (d / "nlohmann_jsonConfigVersion.cmake").is_file():
        return d
    tmp = Path(tempfile.mkdtemp(prefix=".nlohmann-", dir=d.parent if d.parent.is_dir() else None))
    (tmp / "nlohmann_jsonConfig.cmake").write_text(
        "# lucepatch probe stand-in: an interface target only (probes compile no JSON-using TU)\n"
        "if(NOT TARGET nlohmann_json::nlohmann_json)\n"
        "  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)\nendif()\n")
    (tmp / "nlohmann_jsonConfigVersion.cmake").write_text(
        "set(PACKAGE_VERSION 3.11.3)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\nset(PACKAGE_VERSION_EXACT FALSE)\n")
    tmp.chmod(0o755)
    try:
        os.rename(tmp, d)
    except OSError:  # a concurrent run made the same folder
        shutil.rmtree(tmp, ignore_errors=True)
    return d


def make_stand_ins(cache: Path, cfg: dict) -> StandIns:
    """The stand-in layout, built once per content key through lucepatch.native.compiling."""
    syms = list(cfg.get("driver_symbols") or ["cuMemCreate"])
    cache = Path(cache)
    (cache / "probe-standins").mkdir(parents=True, exist_ok=True)
    unit = _stand_in_unit(syms, cache / "probe-standins" / "src" / hashlib.sha256("\n".join(syms).encode()).hexdigest()[:12])
    cc_path = compiling.cc()
    unit.steps = [[a.replace("{cc}", cc_path) for a in step] for step in unit.steps]
    root = compiling.build_cached(unit, cache / "probe-standins", compiler=cc_path)
    si = StandIns(root, syms)
    cuda = root / "cuda" / "lib64"
    home = None
    try:
        home = toolchain.cuda_home()
    except EnvironmentMissing:
        pass
    libdirs = [home / d for d in ("lib64", "lib", "targets/x86_64-linux/lib")] if home else []
    if not any((d / "stubs" / "libcuda.so").is_file() for d in libdirs):
        si.presets["CUDA_cuda_driver_LIBRARY"] = str(cuda / "stubs" / "libcuda.so")
    for lib in ("cublas", "cublasLt"):
        if not any((d / f"lib{lib}.so").is_file() for d in libdirs):
            si.presets[f"CUDA_{lib}_LIBRARY"] = str(cuda / f"lib{lib}.so")
    if not _has_nlohmann():
        si.nlohmann = _nlohmann_stand_in(cache)
        si.presets["nlohmann_json_DIR"] = str(si.nlohmann)
    return si


def _has_nlohmann() -> bool:
    for base in ("/usr/share/cmake", "/usr/lib/cmake", "/usr/local/share/cmake", "/usr/lib/x86_64-linux-gnu/cmake"):
        if (Path(base) / "nlohmann_json" / "nlohmann_jsonConfig.cmake").is_file():
            return True
    return False
