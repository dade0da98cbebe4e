"""fakecuda (simulated driver), the async-sched reproducer and the fakehami fixture.

Everything is built in tmp dirs; the whole module takes a few seconds on 2 cores (the optional
real HAMi-core build, enabled by LUCEPATCH_SRC_HAMI_CORE, takes about a minute more).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import uuid

import pytest

import needs

from lucepatch.errors import EnvironmentMissing
from lucepatch.native import fakecuda
from lucepatch.native.fakecuda import FAKE_DEVICE_NAME_PREFIX, build_fakecuda

ROOT = pathlib.Path(__file__).resolve().parents[1]
REPRO = ROOT / "reproducers" / "async-sched"
FAKEHAMI = ROOT / "tests" / "fixtures" / "fakehami"
CUDA_INC = "/usr/local/cuda/include"

pytestmark = pytest.mark.needs("gcc", f"{CUDA_INC}/cuda.h")

SCENARIOS = ["control", "ctxless-async-alloc", "ctxless-async-free", "ctxless-sync-alloc"]


# ---- builds (once per module) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fakedir(tmp_path_factory) -> pathlib.Path:
    return build_fakecuda(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture(scope="module")
def repro_bin(tmp_path_factory, fakedir) -> pathlib.Path:
    # exactly the runner's compile line
    out = tmp_path_factory.mktemp("repro") / "async_sched"
    subprocess.run(
        ["gcc", "-O1", "-g", "-o", str(out), str(REPRO / "async_sched.c"), f"-I{CUDA_INC}",
         "-I", str(ROOT / "reproducers" / "common"), f"-L{fakedir}", "-lcuda", "-lpthread"],
        check=True,
    )
    return out


def _build_fakehami(src: pathlib.Path, build: pathlib.Path) -> pathlib.Path:
    subprocess.run(["cmake", "-S", str(src), "-B", str(build)], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "vgpu"], check=True, capture_output=True)
    lib = build / "libvgpu.so"
    assert lib.is_file()
    return lib


def _patched_copy(tmp: pathlib.Path, patches: list[pathlib.Path]) -> pathlib.Path:
    src = tmp / "src-tree"
    shutil.copytree(FAKEHAMI, src, ignore=shutil.ignore_patterns("patches", "build"))
    for p in patches:
        subprocess.run(["git", "apply", str(p)], cwd=src, check=True, capture_output=True)
    return src


@pytest.fixture(scope="module")
def hami_libs(tmp_path_factory) -> dict[str, pathlib.Path]:
    needs.require("cmake")
    series_dir = FAKEHAMI / "patches"
    series = [series_dir / line.strip() for line in (series_dir / "series").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    variants = {"baseline": [], "fixed": series, "bad": [series_dir / "bad" / "0001-fix-allocator-noop.patch"]}
    libs = {}
    for name, patches in variants.items():
        tmp = tmp_path_factory.mktemp(f"fakehami-{name}")
        libs[name] = _build_fakehami(_patched_copy(tmp, patches), tmp / "build")
    return libs


# ---- running ------------------------------------------------------------------------------------


def _run(bin_, scenario, fakedir, preload=None, extra_env=None, timeout=30):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA_"))}
    env.update(LD_LIBRARY_PATH=str(fakedir), CUDA_DEVICE_MEMORY_LIMIT="1g", LIBCUDA_LOG_LEVEL="2")
    if preload:
        env["LD_PRELOAD"] = str(preload)
    env.update(extra_env or {})
    proc = subprocess.run([str(bin_), scenario], env=env, capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
              if line.startswith("@@lucepatch ")]
    return proc, events


def _event(events, kind):
    found = [e for e in events if e["event"] == kind]
    return found[0] if found else None


# ---- the simulated driver alone -----------------------------------------------------------------

CTX_PROBE = r"""
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
static CUstream s;
static void *helper(void *a) {
    CUdevice dev = -999;
    CUdeviceptr p = 0;
    CUcontext c = (CUcontext)0x1;
    int r1 = cuCtxGetDevice(&dev);
    printf("ctxless-getdevice %d %d\n", r1, dev);
    cuCtxGetCurrent(&c);
    printf("ctxless-current %p\n", (void *)c);
    printf("ctxless-alloc %d\n", cuMemAlloc(&p, 1 << 20));
    printf("ctxless-async-default %d\n", cuMemAllocAsync(&p, 1 << 20, 0));
    int r2 = cuMemAllocAsync(&p, 1 << 20, s);
    printf("ctxless-async-stream %d %d\n", r2, p != 0);
    printf("ctxless-freeasync-stream %d\n", cuMemFreeAsync(p, s));
    CUdevice sd = -1;
    int r3 = cuStreamGetDevice(s, &sd);
    printf("ctxless-streamdevice %d %d\n", r3, sd);
    return a;
}
int main(void) {
    CUdevice dev = -999;
    CUcontext ctx;
    char name[128];
    int n = 0;
    printf("pre-init %d\n", cuCtxGetDevice(&dev));
    cuInit(0);
    cuDeviceGetCount(&n);
    cuDeviceGetName(name, sizeof name, 0);
    printf("count %d\nname %s\n", n, name);
    cuDevicePrimaryCtxRetain(&ctx, 1);
    cuCtxSetCurrent(ctx);
    int r = cuCtxGetDevice(&dev);
    printf("main-getdevice %d %d\n", r, dev);
    cuStreamCreate(&s, 0);
    pthread_t t;
    pthread_create(&t, 0, helper, 0);
    pthread_join(t, 0);
    return 0;
}
"""


def test_fake_alone_ctxless_semantics(tmp_path, fakedir):
    src = tmp_path / "probe.c"
    src.write_text(CTX_PROBE)
    exe = tmp_path / "probe"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(exe), str(src), f"-I{CUDA_INC}", f"-L{fakedir}",
                    "-lcuda", "-lpthread"], check=True)
    out = subprocess.run([str(exe)], env={"LD_LIBRARY_PATH": str(fakedir)}, capture_output=True,
                         text=True, check=True, timeout=10).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["pre-init"] == "3"  # CUDA_ERROR_NOT_INITIALIZED before cuInit
    assert lines["count"] == "2"
    assert lines["name"].startswith(FAKE_DEVICE_NAME_PREFIX)
    assert lines["main-getdevice"] == "0 1"  # primary context of device 1, current on main
    assert lines["ctxless-getdevice"] == "201 -999"  # 201 and *device untouched
    assert lines["ctxless-current"] in ("(nil)", "0")
    assert lines["ctxless-alloc"] == "201"
    assert lines["ctxless-async-default"] == "201"  # default stream needs the thread's context
    assert lines["ctxless-async-stream"] == "0 1"  # explicit stream carries its context
    assert lines["ctxless-freeasync-stream"] == "0"
    assert lines["ctxless-streamdevice"] == "0 1"


def test_build_is_cached_and_is_a_stub_dir(tmp_path, fakedir):
    assert (fakedir / "libcuda.so").resolve() == (fakedir / "libcuda.so.1").resolve()
    assert (fakedir / "libnvidia-ml.so").resolve() == (fakedir / "libnvidia-ml.so.1").resolve()
    soname = subprocess.run(["objdump", "-p", str(fakedir / "libcuda.so.1")], capture_output=True,
                            text=True).stdout
    assert "SONAME               libcuda.so.1" in soname
    again = build_fakecuda(fakedir.parent)
    assert again == fakedir


def test_build_without_gcc(tmp_path, monkeypatch):
    from lucepatch.native import compiling

    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    monkeypatch.setattr(compiling.toolchain.shutil, "which", lambda name: None)
    with pytest.raises(EnvironmentMissing, match=r"gcc not found: install a C compiler \(apt-get install gcc\)"):
        build_fakecuda(tmp_path)


# ---- the reproducer, bare and under fakehami ----------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_reproducer_bare_driver_passes(repro_bin, fakedir, scenario):
    proc, events = _run(repro_bin, scenario, fakedir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _event(events, "done") == {"event": "done", "scenario": scenario, "ok": True}
    drv = _event(events, "driver")
    assert drv["version"] == 13000 and drv["device_count"] == 2
    assert drv["gpu"].startswith(FAKE_DEVICE_NAME_PREFIX)


def test_reproducer_usage_error(repro_bin, fakedir):
    proc, _ = _run(repro_bin, "no-such-scenario", fakedir)
    assert proc.returncode == 2


@pytest.mark.parametrize("variant", ["baseline", "fixed"])
def test_control_passes_under_fakehami(repro_bin, fakedir, hami_libs, variant):
    proc, events = _run(repro_bin, "control", fakedir, preload=hami_libs[variant])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Initialized" in proc.stderr
    assert all(e["ok"] for e in events if e["event"] == "check")


def test_baseline_crashes_on_ctxless_async_alloc(repro_bin, fakedir, hami_libs):
    proc, events = _run(repro_bin, "ctxless-async-alloc", fakedir, preload=hami_libs["baseline"])
    assert proc.returncode == -signal.SIGSEGV, proc.stdout + proc.stderr
    assert "Initialized" in proc.stderr
    assert "Illegal device id: 2139062143" in proc.stderr  # the 0x7f7f7f7f poison word
    assert _event(events, "done") is None


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixed_passes_every_scenario(repro_bin, fakedir, hami_libs, scenario):
    proc, events = _run(repro_bin, scenario, fakedir, preload=hami_libs["fixed"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Illegal device id" not in proc.stderr
    assert _event(events, "done")["ok"] is True


def test_bad_fix_still_fails(repro_bin, fakedir, hami_libs):
    proc, _ = _run(repro_bin, "ctxless-async-alloc", fakedir, preload=hami_libs["bad"])
    assert proc.returncode != 0
    assert "Illegal device id" in proc.stderr


def test_sync_alloc_check_reports_201(repro_bin, fakedir, hami_libs):
    proc, events = _run(repro_bin, "ctxless-sync-alloc", fakedir, preload=hami_libs["fixed"])
    check = _event(events, "check")
    assert check["expected"] == check["got"] == "CUDA_ERROR_INVALID_CONTEXT"


def test_missing_preload_is_visible(repro_bin, fakedir, tmp_path):
    proc, events = _run(repro_bin, "ctxless-async-alloc", fakedir, preload=tmp_path / "nope" / "libvgpu.so")
    assert "Initialized" not in proc.stderr
    loaded = _event(events, "loaded")
    assert loaded["preload"] == []  # the runner calls this run invalid
    assert loaded["libcuda"]["path"] == str((fakedir / "libcuda.so.1").resolve())


def test_loaded_event_hashes(repro_bin, fakedir, hami_libs):
    proc, events = _run(repro_bin, "control", fakedir, preload=hami_libs["baseline"])
    loaded = _event(events, "loaded")
    assert len(loaded["preload"]) == 1
    entry = loaded["preload"][0]
    lib = hami_libs["baseline"].resolve()
    assert entry["path"] == str(lib)
    assert entry["sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()
    libcuda = (fakedir / "libcuda.so.1").resolve()
    assert loaded["libcuda"] == {"path": str(libcuda), "sha256": hashlib.sha256(libcuda.read_bytes()).hexdigest()}


def test_sha256_of_empty_and_multiblock(tmp_path, fakedir):
    # lp_report.h's SHA-256 against hashlib on lengths around the padding boundaries
    prog = tmp_path / "sha.c"
    prog.write_text('#include "lp_report.h"\nint main(int c, char **v) { char h[65]; '
                    'lp_sha256_file(v[1], h); puts(h); return 0; }\n')
    exe = tmp_path / "sha"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(prog), f"-I{CUDA_INC}",
                    "-I", str(ROOT / "reproducers" / "common")], check=True)
    for n in (0, 1, 55, 56, 63, 64, 65, 200_003):
        f = tmp_path / f"d{n}"
        f.write_bytes(bytes((i * 7 + 3) & 0xFF for i in range(n)))
        got = subprocess.run([str(exe), str(f)], capture_output=True, text=True, check=True).stdout.strip()
        assert got == hashlib.sha256(f.read_bytes()).hexdigest(), n


# ---- real HAMi-core (opt-in) -----------------------------------------------------------------


def _nvml_include() -> pathlib.Path | None:
    try:
        from lucepatch.native import toolchain

        return toolchain.nvml_include()
    except EnvironmentMissing:
        return None


def test_real_hami_core_baseline_crashes(tmp_path, repro_bin, fakedir):
    src = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
    if not src:
        pytest.skip("no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
    nvml = _nvml_include()
    if nvml is None or shutil.which("cmake") is None or shutil.which("make") is None:
        pytest.skip("no-tool: needs cmake, make and nvml.h (pip install nvidia-nvml-dev; apt-get install cmake make)")
    build = tmp_path / "hami-build"
    subprocess.run(
        ["cmake", "-S", src, "-B", str(build), "-DCMAKE_POLICY_VERSION_MINIMUM=3.5", "-DCMAKE_BUILD_TYPE=Debug",
         "-DDLSYM_HOOK_ENABLE=1", "-DMULTIPROCESS_LIMIT_ENABLE=1", "-DHOOK_MEMINFO_ENABLE=1",
         "-DHOOK_NVML_ENABLE=1", f"-DCMAKE_C_FLAGS=-I{nvml}", f"-DCMAKE_SHARED_LINKER_FLAGS=-L{fakedir}",
         f"-DCMAKE_EXE_LINKER_FLAGS=-L{fakedir}"],
        check=True, capture_output=True)
    subprocess.run(["make", "-C", str(build), f"-j{os.cpu_count() or 2}", "vgpu"], check=True, capture_output=True)
    lib = build / "libvgpu.so"
    results = {}
    for scenario in ("control", "ctxless-async-alloc"):
        cache = pathlib.Path("/tmp") / f"lucepatch-test-{uuid.uuid4().hex}.cache"
        try:
            proc, events = _run(repro_bin, scenario, fakedir, preload=lib,
                                extra_env={"CUDA_DEVICE_MEMORY_SHARED_CACHE": str(cache)}, timeout=60)
        finally:
            cache.unlink(missing_ok=True)
        assert "Initialized" in proc.stderr, proc.stderr
        results[scenario] = proc
    assert results["control"].returncode == 0, results["control"].stderr
    crash = results["ctxless-async-alloc"]
    assert crash.returncode == -signal.SIGSEGV, crash.stderr
    assert "Illegal device id" in crash.stderr
