"""lucepatch.builders.driverless: a GPU host's real libcuda.so.1 makes F6's link pass (ld resolves
libggml-cuda's NEEDED through LD_LIBRARY_PATH); masked, the same link fails as in a devel image.
The shape of the H200 host: the driver on LD_LIBRARY_PATH (/usr/local/nvidia/lib64), not only in
ld.so.cache (docs/lucebox/lucebox-f6-relink.h200.json read 0 undefined symbols)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lucepatch.builders import driverless

sys.path.insert(0, str(Path(__file__).resolve().parent))
import needs  # noqa: E402

pytestmark = pytest.mark.needs("gcc")


def _cc(*args):
    subprocess.run(["cc", *map(str, args)], check=True, capture_output=True)


@pytest.fixture
def host(tmp_path):
    """host/libcuda.so.1 (a 'real driver' on LD_LIBRARY_PATH), build/libgpu.so NEEDing it (the
    F6 baseline: linked privately), build/main.c using libgpu only, stubs/libcuda.so for -L."""
    (tmp_path / "host").mkdir()
    (tmp_path / "build").mkdir()
    (tmp_path / "stubs").mkdir()
    (tmp_path / "drv.c").write_text("int cuMemCreate(void) { return 0; }\n")
    (tmp_path / "gpu.c").write_text("int cuMemCreate(void); int gpu(void) { return cuMemCreate(); }\n")
    (tmp_path / "main.c").write_text("int gpu(void); int main(void) { return gpu(); }\n")
    _cc("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", tmp_path / "host" / "libcuda.so.1", tmp_path / "drv.c")
    _cc("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", tmp_path / "stubs" / "libcuda.so", tmp_path / "drv.c")
    _cc("-shared", "-fPIC", "-Wl,-soname,libgpu.so", "-Wl,--no-as-needed", "-o", tmp_path / "build" / "libgpu.so",
        tmp_path / "gpu.c", f"-L{tmp_path / 'stubs'}", "-lcuda")
    return tmp_path


def test_the_driver_on_ld_library_path_is_found(host):
    env = {"LD_LIBRARY_PATH": f"/nonexistent:{host / 'host'}"}
    assert str(host / "host" / "libcuda.so.1") in driverless.driver_libraries(env)
    assert str(host / "host" / "libcuda.so.1") not in driverless.driver_libraries({"LD_LIBRARY_PATH": ""})


def test_masked_link_fails_like_a_devel_image(host):
    if not driverless.can_mask():
        needs.unavailable("no-tool:", "private mount namespaces (root and unshare from util-linux)")
    link = f"cc -o {host / 'build' / 'app'} {host / 'main.c'} -L{host / 'build'} -lgpu"
    env = dict(os.environ, LD_LIBRARY_PATH=str(host / "host"))
    plain = subprocess.run(["sh", "-c", link], env=env, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr  # the GPU host: ld finds the driver, F6 cannot show
    libs = driverless.driver_libraries(env)
    r = subprocess.run(driverless.masked(link, libs), env=driverless.masked_env(link, env), capture_output=True, text=True)
    assert r.returncode != 0
    assert "libcuda.so.1, needed by" in r.stderr and "undefined reference to `cuMemCreate'" in r.stderr
    # the mask lived in the command's namespace only
    assert (host / "host" / "libcuda.so.1").stat().st_size > 0
    assert subprocess.run(["sh", "-c", link], env=env, capture_output=True).returncode == 0
