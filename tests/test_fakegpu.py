"""The simulated GPU's time (lucepatch/native/fakecuda/fakegpu.c, issue 38) against the rules its header
states: kernels occupy the device for their modelled duration, asynchronously, one at a time across
processes; graphs (captured, nested, conditional, updated) run their kernels; NVML's per-process SM
utilisation is the share of time a process's kernels ran; the Blackwell generation answers
NOT_SUPPORTED to nvmlDeviceGetProcessUtilization and serves nvmlDeviceGetProcessesUtilizationInfo.
tests/fakecuda/gpu_time.c is the probe. Timing assertions leave room for a loaded 2-core machine:
sleeps overshoot, never undershoot, so lower bounds are tight and upper bounds loose."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lucepatch.native import toolchain
from lucepatch.native.fakecuda import build_fakecuda

ROOT = Path(__file__).resolve().parent.parent
CUDA_INC = "/usr/local/cuda/include"
BW = 3840.0  # bytes per ns, the hopper generation's sustained bandwidth (fakegpu.c)
FIXED = 2000  # ns per kernel
NOT_READY, CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED, ILLEGAL_STATE = 600, 900, 901, 401
NVML_NOT_SUPPORTED, NVML_INSUFFICIENT_SIZE, NVML_VERSION_MISMATCH = 3, 7, 25

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not os.path.isfile(f"{CUDA_INC}/cuda.h"),
                                reason="no-tool: needs gcc and /usr/local/cuda/include/cuda.h")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    d = tmp_path_factory.mktemp("fakegpu")
    stubs = build_fakecuda(d / "fakecuda")
    exe = d / "gpu_time"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(ROOT / "tests/fakecuda/gpu_time.c"), f"-I{CUDA_INC}",
                    f"-I{toolchain.nvml_include()}", f"-L{stubs}", "-lcuda", "-lnvidia-ml",
                    f"-Wl,-rpath,{stubs}"], check=True)

    def run(*args, env=None, background=False):
        e = {k: v for k, v in os.environ.items() if not k.startswith("LUCEPATCH_FAKECUDA")}
        e.update(env or {})
        cmd = [str(exe), *map(str, args)]
        if background:
            return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, text=True)
        r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return parse(r.stdout)

    return run


def parse(out: str) -> dict:
    got: dict = {}
    for line in out.splitlines():
        key, _, rest = line.partition(" ")
        got.setdefault(key, []).append(rest)
    return {k: (v[0] if len(v) == 1 else v) for k, v in got.items()}


def kernel_ns(nbytes: int) -> float:
    return FIXED + nbytes / BW


def test_launches_are_asynchronous_and_take_their_modelled_time(probe):
    nbytes = 3_840_000_000  # 1 ms + 2 µs per kernel
    got = probe("eager", 200, nbytes)
    want = 200 * kernel_ns(nbytes)
    assert int(got["launch_ns"]) < want / 4  # the host thread ran ahead of the device
    assert int(got["query"]) == NOT_READY and int(got["query_after"]) == 0
    assert want <= int(got["elapsed_ns"]) < want * 1.5


def test_a_captured_graph_records_kernels_and_replays_them(probe):
    nbytes = 1_920_000_000
    got = probe("graph", 24, nbytes, 10)
    assert int(got["capturing"]) == 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE
    assert int(got["nodes"]) == 24
    assert int(got["capture_ns"]) < 24 * kernel_ns(nbytes) / 4  # capturing runs nothing
    want = 240 * kernel_ns(nbytes)
    assert want <= int(got["elapsed_ns"]) < want * 1.5


def test_a_synchronize_inside_a_capture_is_refused_and_invalidates_it(probe):
    got = probe("capture-sync")
    assert int(got["sync"]) == CAPTURE_UNSUPPORTED
    assert int(got["status"]) == 2  # CU_STREAM_CAPTURE_STATUS_INVALIDATED
    assert int(got["end"]) == CAPTURE_INVALIDATED and got["graph_null"] == "1"
    assert int(got["legacy"]) == CAPTURE_UNSUPPORTED


def test_child_graphs_and_conditional_bodies_run_their_kernels(probe):
    nbytes = 19_200_000_000  # 5 ms: a loaded machine's late wake-up is small beside 250 ms
    got = probe("nested", nbytes)
    assert int(got["top_nodes"]) == 5 and int(got["child_type"]) == 4 and int(got["child_nodes"]) == 2
    # per launch: 1 + child 2 + IF(1) 1 + IF(0) 0 + WHILE(1) once 1 = 5 kernels; 10 launches
    want = 50 * kernel_ns(nbytes)
    assert want <= int(got["elapsed_ns"]) < want * 1.4


def test_an_executable_follows_its_own_parameters_and_updates(probe):
    nbytes = 19_200_000_000  # 5 ms per kernel, 20 per run
    got = probe("update", nbytes)
    base, set_, graph_only, updated = (int(got[k]) for k in ("base_ns", "set_ns", "graph_only_ns", "updated_ns"))
    assert 20 * kernel_ns(nbytes) <= base < 20 * kernel_ns(nbytes) * 1.4
    assert 20 * kernel_ns(2 * nbytes) <= set_ < 20 * kernel_ns(2 * nbytes) * 1.4
    assert 20 * kernel_ns(2 * nbytes) <= graph_only < 20 * kernel_ns(2 * nbytes) * 1.4
    assert int(got["update"]) == 0
    assert 20 * kernel_ns(3 * nbytes) <= updated < 20 * kernel_ns(3 * nbytes) * 1.4
    rc, result = map(int, got["update_topology"].split())
    assert rc == 910 and result == 2  # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, ..._TOPOLOGY_CHANGED


@pytest.mark.parametrize("pct", [30, 70])
def test_nvml_reports_the_share_of_time_the_process_kept_the_device_busy(probe, pct):
    got = probe("util", pct, 1300)
    size_rc, size_n = map(int, got["size_query"].split())
    assert size_rc == NVML_INSUFFICIENT_SIZE and size_n == 1
    assert int(got["result"]) == 0 and int(got["count"]) == 1
    pid, util, mine = map(int, got["sample"].split())
    assert mine == 1
    # the probe's own account of its kernels in NVML's window (a loaded machine's sleeps overshoot, so the
    # duty cycle itself is only approximate): the two clocks agree within the window's edges
    assert abs(util - int(got["expected"])) <= 3
    assert util <= pct + 3


def test_blackwell_answers_not_supported_and_serves_the_newer_call(probe):
    hopper = probe("gen")
    assert hopper["sm"] == "132" and int(hopper["process_utilization"]) == 0
    got = probe("gen", env={"LUCEPATCH_FAKECUDA_GENERATION": "blackwell"})
    assert "Blackwell" in got["name"] and got["sm"] == "188" and got["threads"] == "1536"
    assert int(got["process_utilization"]) == NVML_NOT_SUPPORTED
    rc, n = map(int, got["info_size"].split())
    assert rc == NVML_INSUFFICIENT_SIZE and n == 1
    rc, n, util = map(int, got["info"].split())
    assert rc == 0 and n == 1 and util > 0
    assert int(got["info_version"]) == NVML_VERSION_MISMATCH


def test_an_unknown_generation_is_refused(probe, tmp_path):
    with pytest.raises(AssertionError, match="names no simulated generation"):
        probe("gen", env={"LUCEPATCH_FAKECUDA_GENERATION": "volta"})


def test_two_processes_on_one_machine_share_the_device(probe, tmp_path):
    machine = {"LUCEPATCH_FAKECUDA_MACHINE": str(tmp_path / "machine")}
    nbytes, ms = 3_840_000_000, 1200
    alone = int(probe("tenant", ms, nbytes)["kernels"])
    a = probe("tenant", ms, nbytes, env=machine, background=True)
    b = probe("tenant", ms, nbytes, env=machine, background=True)
    ga, gb = parse(a.communicate(timeout=60)[0]), parse(b.communicate(timeout=60)[0])
    ka, kb = int(ga["kernels"]), int(gb["kernels"])
    # one kernel at a time across processes: together about what one did alone, split about evenly
    assert 0.8 * alone <= ka + kb <= 1.15 * alone
    assert 0.3 <= ka / (ka + kb) <= 0.7
    # each sees the other in NVML's process list while both hold a context
    assert any(g["procs"] == "0 2" for g in (ga, gb))


@pytest.mark.needs("nvcc")
def test_the_committed_ptx_is_what_nvcc_makes_of_the_kernel():
    """reproducers/sm-limit/lp_kernels_ptx.h comes from lp_kernels.cu (tools/gen_lp_kernels.py). Another nvcc
    release may schedule the code differently: then only the kernel's entry and parameters must agree."""
    import importlib.util  # lazy: tools/ is not a package, 1 ms
    spec = importlib.util.spec_from_file_location("gen_lp_kernels", ROOT / "tools/gen_lp_kernels.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh = gen.header()
    committed = (ROOT / "reproducers/sm-limit/lp_kernels_ptx.h").read_text()

    def release(text):
        return next((l for l in text.splitlines() if "Cuda compilation tools" in l), "")

    def signature(text):
        return [l.strip() for l in text.splitlines() if ".entry" in l or ".param" in l]

    assert signature(committed) and signature(fresh) == signature(committed)
    if release(fresh) == release(committed):
        assert fresh == committed, "run python3 tools/gen_lp_kernels.py and commit lp_kernels_ptx.h"
