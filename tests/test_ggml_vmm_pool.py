"""reproducers/ggml-vmm-pool: ggml-cuda's VMM pool under HAMi-core (issue 28). It needs the real
driver and a ggml build; without them every scenario says why. With LUCEPATCH_GGML_DIR (a ggml
build, CPU-only is enough) the client, built through the workload [build], runs both scenarios on
ggml's CPU backend (graph + CPU reference on sampled columns; the pool check is CUDA's)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from lucepatch.verify.reproducer import load_reproducer_dir, scenario_env
from lucepatch.verify.requirements import unmet

POOL = REPO_ROOT / "reproducers" / "ggml-vmm-pool"


def test_reproducer_declares_the_large_batch_and_needs_the_real_driver(monkeypatch):
    monkeypatch.delenv("LUCEPATCH_GGML_DIR", raising=False)
    r = load_reproducer_dir(POOL)
    assert r.is_workload and r.build is not None and r.requires.driver == "real"
    assert [s.name for s in r.scenarios] == ["control", "vmm-pool-charged"]
    pool = r.scenario("vmm-pool-charged").params["pool_batch"]
    assert (pool.type, pool.default, pool.env, pool.points) == ("int", 65536, "LP_PARAM_POOL_BATCH", (4096, 65536, 262144))
    assert scenario_env(r, r.scenario("vmm-pool-charged"))["LP_PARAM_POOL_BATCH"] == "65536"
    for s in r.scenarios:
        why = unmet(r, s, "fake")
        assert "needs the real CUDA driver" in why and "LUCEPATCH_GGML_DIR" in why


@pytest.mark.needs("g++", "/usr/local/cuda/include/cuda.h")
def test_both_scenarios_run_on_ggmls_cpu_backend(tmp_path):
    gdir = os.environ.get("LUCEPATCH_GGML_DIR")
    if not gdir or not (Path(gdir) / "lib" / "libggml.so").exists():
        pytest.skip("no-upstream: LUCEPATCH_GGML_DIR is not set to a ggml build (lib/ + include/; a CPU-only "
                    "`cmake -DGGML_CUDA=OFF -DBUILD_SHARED_LIBS=ON` of ggml is enough)")
    from lucepatch.native.workload import build_program

    binary = build_program(load_reproducer_dir(POOL), tmp_path) / "ggml_vmm_pool"
    for scenario, batch in (("control", None), ("vmm-pool-charged", "4096")):
        env = {**os.environ, **({"LP_PARAM_POOL_BATCH": batch} if batch else {})}
        r = subprocess.run([str(binary), "--backend", "cpu", scenario], capture_output=True, text=True, timeout=300,
                           env=env)
        ev = [json.loads(l[len("@@lucepatch "):]) for l in r.stdout.splitlines() if l.startswith("@@lucepatch ")]
        checks = [e for e in ev if e["event"] == "check"]
        assert r.returncode == 0 and checks and all(c["ok"] for c in checks), (r.stdout[-2000:], r.stderr[-800:])
        refs = [c["name"] for c in checks if "CPU reference" in c["name"]]
        assert len(refs) == 2 and (batch is None or f"batch {batch}" in refs[1])
        assert ev[-1] == {"event": "done", "scenario": scenario, "ok": True}
    # a declared parameter is always set by the runner: missing, the program refuses (exit 2), no default
    r = subprocess.run([str(binary), "--backend", "cpu", "vmm-pool-charged"], capture_output=True, text=True,
                       timeout=60, env={k: v for k, v in os.environ.items() if k != "LP_PARAM_POOL_BATCH"})
    assert r.returncode == 2 and "LP_PARAM_POOL_BATCH" in r.stderr
