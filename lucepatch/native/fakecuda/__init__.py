"""fakecuda: a simulated CUDA driver (libcuda.so.1 + libnvidia-ml.so.1) for GPU-less machines.

The C sources next to this file model the driver semantics HAMi-core's bug family depends on
(docs/field-notes.md §3): per-thread context stack, cuCtxGetDevice -> 201 with the output untouched on a
context-less thread, stream-ordered calls served through the stream's context, memory pools, VMM,
CUDA_VISIBLE_DEVICES (CUDA's numbering, not NVML's), cuMemGetInfo_v2 with NULL outputs, managed memory
and the pointer-attribute queries, what a stream capture forbids and its graph memory nodes (each
documented at its code in fakecuda.c); and the GPU's time
(fakegpu.c, included by fakecuda.c): kernels, CUDA graphs, stream capture, events, the per-process
SM utilisation NVML reports, a Blackwell generation, a machine shared by the processes of one run. The build
directory doubles as a link-time stub directory (libcuda.so / libnvidia-ml.so symlinks).
"""

from __future__ import annotations

import pathlib

from lucepatch.native import compiling, toolchain

FAKE_DEVICE_NAME_PREFIX = "lucepatch-fakecuda"

_HERE = pathlib.Path(__file__).resolve().parent
_SOURCES = ("fakecuda.c", "fakegpu.c", "fakenvml.c", "fakecuda_common.h")
_CFLAGS = ["-shared", "-fPIC", "-O1", "-g", "-Wl,-Bsymbolic", "-pthread"]


def build_fakecuda(out_dir: pathlib.Path) -> pathlib.Path:
    """Build (once per sources + flags + compiler + headers) and return the directory holding the
    fake driver libs; it doubles as a link-time stub directory (libcuda.so / libnvidia-ml.so)."""
    cuda_inc, nvml_inc = toolchain.cuda_include(), toolchain.nvml_include()
    cc = compiling.cc()
    unit = compiling.Unit(
        what="the simulated driver (fakecuda)",
        steps=[
            [cc, *_CFLAGS, f"-I{cuda_inc}", f"-I{_HERE}", "-Wl,-soname,libcuda.so.1",
             "-o", "{out}/libcuda.so.1", str(_HERE / "fakecuda.c")],
            # libnvidia-ml needs fakecuda's context state; it links to it (found next to itself).
            [cc, *_CFLAGS, f"-I{nvml_inc}", f"-I{_HERE}", "-Wl,-soname,libnvidia-ml.so.1",
             "-o", "{out}/libnvidia-ml.so.1", str(_HERE / "fakenvml.c"), "-L{out}", "-l:libcuda.so.1",
             "-Wl,-rpath,$ORIGIN"],
        ],
        outputs=["libcuda.so.1", "libnvidia-ml.so.1", "libcuda.so", "libnvidia-ml.so"],
        inputs=[_HERE / n for n in _SOURCES],
        headers=[cuda_inc / "cuda.h", nvml_inc / "nvml.h"],
        links={"libcuda.so": "libcuda.so.1", "libnvidia-ml.so": "libnvidia-ml.so.1"},
    )
    return compiling.build_cached(unit, pathlib.Path(out_dir), compiler=cc)
