"""`lucepatch build TARGET --profile P`: the native superproject build on the cudaproj fixture (CUDA
parts on, nvcc, no GPU): payload, sha256, SASS per library and object against the profile, the
closure, the cache, and the baseline failing at its F1 compile in seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lucepatch.builders import standins
from lucepatch.builders import superbuild as S
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "cudaproj"))
import make_fixture  # noqa: E402


pytestmark = pytest.mark.needs("cmake", "ninja", "nvcc", "gcc")


@pytest.fixture
def fx(tmp_path):
    f = make_fixture.make(tmp_path)
    toml = f["tdir"] / "target.toml"
    text = toml.read_text().replace('targets = ["cudaproj_server"]\nbinaries = ["cudaproj_server"]',
                                    'targets = ["cudaproj_server", "kern", "gpu_app"]\n'
                                    'binaries = ["cudaproj_server", "gpu_app"]\nshare = ["src"]')
    toml.write_text(text)
    # the devel-image layout of the probes (stubs/libcuda.so only): what a driver-less builder has
    f["si"] = standins.make_stand_ins(tmp_path / "cache", {"driver_symbols": ["cuMemCreate"]})
    return f


def test_patched_build_payload_sass_closure_and_cache(fx, tmp_path):
    t = load_target_dir(fx["tdir"])
    b = S.build_superproject(t, fx["upstream"], "test", tmp_path / "cache", extra_cmake_args=fx["si"].cmake_args())
    assert b.ok, b.failure
    assert {"bin/cudaproj_server", "bin/gpu_app", "lib/libkern.so", "lib/libgpu.so", "lib/libcore.so",
            "src/server.c"} <= set(b.files)
    assert all(len(s) == 64 for s in b.files.values())
    lib = b.sass["libraries"]["lib/libkern.so"]
    assert lib["sass"] == ["sm_75"] and not lib["missing"] and not lib["unexpected"] and lib["fatbins"] >= 1
    assert b.sass["expected"] == ["sm_75"] and b.sass["ok"]
    assert b.sass["objects"]["kern"] == {"sm_75": 1}  # read per object of the build tree
    assert any("sm_75" in flags for flags in b.arch_flags["kern"])
    assert b.closure["ok"] and b.closure["absent_allowed"] == ["libcuda.so.1"]
    assert b.steps_total >= 6 and b.steps_done == b.steps_total
    again = S.build_superproject(t, fx["upstream"], "test", tmp_path / "cache", extra_cmake_args=fx["si"].cmake_args())
    assert again.cached and again.key == b.key and again.files == b.files


def test_baseline_fails_at_f1_and_arch_override_is_checked(fx, tmp_path):
    t = load_target_dir(fx["tdir"])
    base = S.build_superproject(t, fx["upstream"], "test", tmp_path / "cache", variant="baseline",
                                extra_cmake_args=fx["si"].cmake_args())
    assert not base.ok and base.failure["phase"] == "build"
    assert "Unsupported gpu architecture 'compute_60'" in base.failure["first_error"]
    assert base.steps_done < base.steps_total and Path(base.log).is_file()


def test_cli_build_profile_table_and_summary(fx, tmp_path, cli):
    summary = tmp_path / "summary.json"
    args = ["--workspace", fx["ws"], "--cache-dir", tmp_path / "cache", "build", "cudaproj", "--source", fx["upstream"],
            "--profile", "test", "--summary", summary]
    from lucepatch.native.toolchain import cuda_home
    r = cli(*args)
    if (cuda_home() / "lib64" / "stubs" / "libcuda.so").is_file():  # a full toolkit
        assert r.code == 0, r.out + r.err
        doc = json.loads(summary.read_text())
        assert doc["builds"][0]["ok"] and "lib/libkern.so" in r.out and "sm_75" in r.out
    else:
        # a PyPI-only toolkit has no stubs/libcuda.so, so no CUDA::cuda_driver: one clear configure failure
        assert r.code == 1 and "FAILED" in r.out and "configure" in r.out
        assert "CUDA::cuda_driver" in r.out
        assert not json.loads(summary.read_text())["builds"][0]["ok"]


def test_dropping_the_driver_fix_in_a_kept_tree_fails_the_relink_in_seconds(fx, tmp_path):
    """The fixture's F6-like fix reverted in the kept patched build tree: only links re-run, and
    they fail with the undefined driver symbol where no libcuda.so.1 exists (a devel image)."""
    t = load_target_dir(fx["tdir"])
    b = S.build_superproject(t, fx["upstream"], "test", tmp_path / "cache", keep_build=True,
                             extra_cmake_args=fx["si"].cmake_args())
    assert b.ok and Path(b.build_dir, "CMakeCache.txt").is_file() and Path(b.source_root, "CMakeLists.txt").is_file()
    f6 = fx["tdir"] / "fix-cmake-propagate-the-driver-dependency.patch"
    assert f6.is_file(), sorted(p.name for p in fx["tdir"].iterdir())
    out = S.relink_dropping(Path(b.build_dir), Path(b.source_root), f6, ["gpu_app"])
    assert out["rc"] != 0 and out["undefined"] == ["cuMemCreate"], out
    assert "libcuda.so.1, needed by libgpu.so" in out["not_found_warning"]
    # re-configure + what the changed usage requirements touch (gpu_app.c loses the CUDA include
    # dir it inherited): the CUDA and core objects are not compiled again
    rebuilt = [l for l in out["log_tail"] if "Building" in l]
    assert rebuilt and not any("kern.cu" in l or "core.c" in l for l in rebuilt), rebuilt
    # the fix is back in place: the same tree links again
    again = subprocess.run(["cmake", "--build", b.build_dir, "--target", "gpu_app"], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-500:]


def test_the_compilers_cmake_picks_are_part_of_the_key(tmp_path, monkeypatch):
    """Two wrappers of one GCC version (the GPU machine's /opt/gcc links libstdc++ statically,
    /usr/bin/g++ shared) must not share a cached build: where CC/CXX live is in the fingerprint."""
    from lucepatch.builders import superbuild as SB

    real = shutil.which("g++") or shutil.which("c++")
    wrapper = tmp_path / "g++"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", real)
    a = SB._fingerprint([])
    monkeypatch.setenv("CXX", str(wrapper))
    b = SB._fingerprint([])
    assert a["CXX"][1] == b["CXX"][1]  # the same compiler version ...
    assert a["CXX"][0] != b["CXX"][0] and a != b  # ... but another build
    # unset, CMake takes PATH's c++: that one is keyed, by where it lives
    monkeypatch.delenv("CXX")
    assert SB._fingerprint([])["CXX"][0] == os.path.realpath(shutil.which("c++"))
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    (tmp_path / "c++").symlink_to(wrapper)
    assert SB._fingerprint([])["CXX"][0] == str(wrapper)
    # a launcher in front is not the compiler
    monkeypatch.setenv("CXX", f"ccache {real}")
    assert SB._fingerprint([])["CXX"][:2] == a["CXX"][:2]


def test_the_relink_reverts_the_fix_inside_another_repository(fx, tmp_path):
    """A cache inside some git repository (a checkout, or a machine whose / is one): git apply in
    the kept copy (no .git) must still revert the fix, not skip its paths as outside the folder."""
    enclosing = tmp_path / "enclosing"
    enclosing.mkdir()
    subprocess.run(["git", "init", "-q", str(enclosing)], check=True)
    t = load_target_dir(fx["tdir"])
    b = S.build_superproject(t, fx["upstream"], "test", enclosing / "cache", keep_build=True,
                             extra_cmake_args=fx["si"].cmake_args())
    assert b.ok and Path(b.source_root).is_relative_to(enclosing)
    f6 = fx["tdir"] / "fix-cmake-propagate-the-driver-dependency.patch"
    # what the unguarded call did there: exit 0, nothing reverted
    probe = subprocess.run(["git", "apply", "-R", "--check", str(f6)], cwd=b.source_root, capture_output=True, text=True)
    assert probe.returncode == 0
    out = S.relink_dropping(Path(b.build_dir), Path(b.source_root), f6, ["gpu_app"])
    assert out["rc"] != 0 and out["undefined"] == ["cuMemCreate"], out
    # and the fix is back
    again = subprocess.run(["cmake", "--build", b.build_dir, "--target", "gpu_app"], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-500:]
