"""lucepatch.native.elf: the closure walk against glibc's loader, on a layout where `ld.so --list` alone
stops at the absent driver library before it reaches the library that was deleted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lucepatch.builders import probe as P
from lucepatch.builders import standins
from lucepatch.native import elf

sys.path.insert(0, str(Path(__file__).resolve().parent))
import needs  # noqa: E402

pytestmark = pytest.mark.needs("gcc")


def _cc(*args):
    subprocess.run(["cc", *map(str, args)], check=True, capture_output=True)


@pytest.fixture
def layout(tmp_path):
    """app -> libgpu.so -> (libcuda.so.1, libcore.so); RUNPATH $ORIGIN everywhere; no libcuda.so.1."""
    d = tmp_path / "app"
    d.mkdir()
    (tmp_path / "d.c").write_text("int cuMemCreate(void) { return 0; }\n")
    (tmp_path / "c.c").write_text("int core(void) { return 1; }\n")
    (tmp_path / "g.c").write_text("int cuMemCreate(void); int core(void); int gpu(void) { return cuMemCreate() + core(); }\n")
    (tmp_path / "m.c").write_text("int gpu(void); int main(void) { return gpu(); }\n")
    _cc("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", tmp_path / "libcuda.so", tmp_path / "d.c")
    _cc("-shared", "-fPIC", "-Wl,-soname,libcore.so", "-o", d / "libcore.so", tmp_path / "c.c")
    _cc("-shared", "-fPIC", "-Wl,-soname,libgpu.so", "-Wl,--no-as-needed", "-o", d / "libgpu.so", tmp_path / "g.c",
        f"-L{tmp_path}", "-lcuda", f"-L{d}", "-lcore", "-Wl,-rpath,$ORIGIN")
    _cc("-o", d / "app", tmp_path / "m.c", f"-L{d}", "-lgpu", "-Wl,--allow-shlib-undefined", "-Wl,-rpath,$ORIGIN")
    assert elf.dynamic(d / "libgpu.so").needed[:2] == ["libcuda.so.1", "libcore.so"]
    return d


def test_closure_resolves_through_runpath_origin(layout):
    c = elf.resolve_closure([layout / "app"], allowed_missing=["libcuda.so.1"])
    assert c.ok and c.absent_allowed == ["libcuda.so.1"]
    assert c.needed[str(layout / "libgpu.so")]["libcore.so"] == str(layout / "libcore.so")
    assert {"libgpu.so", "libcore.so", "libc.so.6"} <= set(c.to_json()["needed_names"])


def test_deleted_library_behind_the_driver_is_caught(layout, tmp_path):
    os.remove(layout / "libcore.so")
    # the premise: the loader alone gives up at the driver and never mentions libcore.so
    raw = subprocess.run([P._ld_so(), "--list", str(layout / "app")], capture_output=True, text=True)
    assert "libcuda.so.1" in raw.stderr and "libcore.so" not in raw.stdout + raw.stderr
    c = elf.resolve_closure([layout / "app"], allowed_missing=["libcuda.so.1"])
    assert not c.ok and c.missing == {str(layout / "libgpu.so"): ["libcore.so"]}
    assert c.lines() == ["libcore.so => not found (needed by libgpu.so)"]
    # the loader with a stub driver on its path agrees with the walk
    si = standins.make_stand_ins(tmp_path / "cache", {"driver_symbols": ["cuMemCreate"]})
    got = P.loader_list(layout / "app", si, ["libcuda.so.1"])
    assert got["ran"] and got["missing"] == ["libcore.so"]


def test_wrong_machine_candidate_is_skipped(layout, tmp_path):
    """The loader skips a file of the right name built for another machine; so does the walk."""
    data = bytearray((layout / "libcore.so").read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine = EM_AARCH64
    (layout / "libcore.so").write_bytes(bytes(data))
    c = elf.resolve_closure([layout / "app"], allowed_missing=["libcuda.so.1"])
    assert c.missing == {str(layout / "libgpu.so"): ["libcore.so"]}
    si = standins.make_stand_ins(tmp_path / "cache", {"driver_symbols": ["cuMemCreate"]})
    assert P.loader_list(layout / "app", si, ["libcuda.so.1"])["missing"] == ["libcore.so"]


def test_ld_so_conf_includes(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.conf").write_text("/opt/a\n# comment\n")
    (tmp_path / "conf.d" / "b.conf").write_text("/opt/b\n")
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"include {tmp_path}/conf.d/*.conf\n/opt/c\n")
    assert elf.ld_so_conf_dirs(conf) == ["/opt/a", "/opt/b", "/opt/c"]


@pytest.mark.needs("nvcc")
def test_gpu_code_per_fatbin_of_a_shared_library(tmp_path):
    for n, arch in (("a", "75"), ("b", "120")):
        (tmp_path / f"{n}.cu").write_text(f"__global__ void k{n}(float *p) {{ p[0] = {arch}; }}\n")
        subprocess.run(["nvcc", "-c", "-Xcompiler", "-fPIC", f"--generate-code=arch=compute_{arch},code=sm_{arch}",
                        "-o", str(tmp_path / f"{n}.o"), str(tmp_path / f"{n}.cu")], check=True, capture_output=True)
    _cc("-shared", "-o", tmp_path / "libk.so", tmp_path / "a.o", tmp_path / "b.o")
    code = elf.gpu_code(tmp_path / "libk.so")
    # a library's SASS set is the union over the translation units linked in: one fatbin each
    assert code.fatbins == 2 and sorted(code.per_fatbin) == [["sm_120"], ["sm_75"]]
    assert code.sass_numbers() == [75, 120]


def _cxx(*args):
    subprocess.run(["g++", *map(str, args)], check=True, capture_output=True)


@pytest.mark.needs("g++")
def test_two_private_cxx_runtimes_in_one_closure_are_caught(tmp_path):
    """The shape of the ggml build the GPU machine's relocated GCC made (/opt/gcc: no libstdc++.so on
    its link path, so every C++ shared library carried libstdc++.a): two libraries each with their
    own C++ runtime, loaded by one program, aborted at start-up on the H200
    (docs/evidence/ggml-diag-opt-gcc.h200.txt). With the shared runtime the same layout is fine."""
    for name, n in (("a", 1), ("b", 2)):
        (tmp_path / f"{name}.cpp").write_text(
            f'#include <sstream>\nextern "C" int f{name}() {{ std::ostringstream s; s << {n}; return (int)s.str().size(); }}\n')
    (tmp_path / "m.cpp").write_text('extern "C" int fa(); extern "C" int fb();\nint main() { return fa() + fb() - 2; }\n')
    for flavour, extra in (("static", ["-static-libstdc++"]), ("shared", [])):
        d = tmp_path / flavour
        d.mkdir()
        for name in "ab":
            _cxx("-shared", "-fPIC", *extra, f"-Wl,-soname,lib{name}.so", "-o", d / f"lib{name}.so", tmp_path / f"{name}.cpp")
        _cxx("-o", d / "app", tmp_path / "m.cpp", f"-L{d}", "-la", "-lb", "-Wl,-rpath,$ORIGIN")
        roots = [d / "app", d / "liba.so", d / "libb.so"]
        c = elf.resolve_closure(roots)
        if flavour == "static":
            assert [Path(p).name for p in c.cxx_private] == ["liba.so", "libb.so"]
            assert not c.ok and c.cxx_runtime_clash and c.to_json()["cxx_runtime"]["clash"]
            assert any("copies of the C++ runtime" in line and "liba.so, libb.so" in line for line in c.lines())
        else:
            assert c.cxx_private == [] and c.cxx_shared and c.ok and c.lines() == []


@pytest.mark.needs("g++")
def test_a_locale_free_private_runtime_is_seen_too(tmp_path):
    """libstdc++.a brings in only what a library uses: one that only throws carries the support
    runtime (personality, __cxa_throw) and no std::locale, and is still a private copy."""
    (tmp_path / "t.cpp").write_text('#include <stdexcept>\n#include <string>\n'
                                    'extern "C" int ft(int n) { if (n < 0) throw std::runtime_error(std::string("neg")); return n; }\n')
    lib = tmp_path / "libt.so"
    _cxx("-shared", "-fPIC", "-static-libstdc++", "-o", lib, tmp_path / "t.cpp")
    syms = elf.defined_dynamic_symbols(lib)
    assert "_ZNSt6locale7classicEv" not in syms and "__cxa_throw" in syms  # the premise
    assert elf.private_cxx_runtime(lib)
    _cxx("-shared", "-fPIC", "-o", tmp_path / "libs.so", tmp_path / "t.cpp")
    assert not elf.private_cxx_runtime(tmp_path / "libs.so")
