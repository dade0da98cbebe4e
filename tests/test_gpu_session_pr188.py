"""tools/gpu_session.sh pr188-bundle / pr188-all (issue 29): PR #188 on e3c3477 against e3c3477, ref-vs-ref,
as a reviewer runs it — every reproducer, or a subset (PR188_REPROS, less PR188_EXCLUDE). PR188_REPROS=old50
is the like-for-like set of the 474 s H200 run: the 50 scenarios of the reproducers before issue 28."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = (REPO / "tools" / "gpu_session.sh").read_text()
SRC = Path(os.environ.get("LUCEPATCH_SRC_HAMI_CORE", REPO / ".upstream/hami-core"))
sys.path.insert(0, str(REPO / "tools"))
from scenario_set import selection  # noqa: E402

# the 50 scenarios of the 474 s run (`git show e6a7d8f^:reproducers/<r>/reproducer.toml`, before issue 28)
OLD50 = {
    "async-accounting": ["control", "async-free-releases-the-charge", "async-cycles-do-not-drift"],
    "async-sched": ["control", "ctxless-async-alloc", "ctxless-async-free", "ctxless-sync-alloc"],
    "ctypes-clients": ["control", "threadpool-async-alloc", "threadpool-async-free", "threadpool-sync-alloc"],
    "ggml-client": ["main-thread", "worker-thread", "two-workers"],
    "llama-vmm": ["control", "host-numa-create", "ctxless-device", "device-create"],
    "multi-device": ["control", "stream-device", "free-recorded-device"],
    "pool-alloc": ["control", "pool-charged", "over-limit", "ctxless-pool-alloc", "default-pool", "cross-device"],
    "pr188-guard": ["control", "ctxless-alloc-exact-error", "ctxless-alloc-valid-residue"],
    "shared-region": ["control", "ctxless-free-other-process", "ctxless-free-wrong-device"],
    "torch-clients": ["driver", "torch-init", "threadpool-async-alloc", "threadpool-default-alloc",
                      "nccl-allreduce-default", "nccl-allreduce-expandable", "nccl-allreduce-async", "main-thread-alloc",
                      "vllm-async-output", "expandable-segments", "cuda-graph", "cuda-graph-async",
                      "two-rank-threads-async", "two-rank-threads-default"],
    "zero-limit": ["control", "zero-means-unlimited", "zero-overrides-fallback"],
}


def _old50_from_script() -> tuple[list[str], list[str]]:
    step = SCRIPT.split("    pr188-all)")[1].split(";;")[0]
    m = re.search(r'PR188_REPROS="(.*?)"', step, re.S)
    ex = re.search(r"PR188_EXCLUDE=\$\{PR188_EXCLUDE-(.*?)\}", step)
    assert m and ex
    return m.group(1).replace("\\\n", " ").split(), ex.group(1).split()


def test_old50_is_the_fifty_scenarios_of_the_474_s_run():
    names, exclude = _old50_from_script()
    assert names == list(OLD50)
    args, covered = selection(names, exclude)
    assert sorted(covered) == sorted(f"{r}:{s}" for r, ss in OLD50.items() for s in ss)
    assert len(covered) == 50
    # a --scenario for every checked scenario (controls always run), none for the one left out
    assert "--scenario" in args and "llama-vmm:main-device" not in args and "async-sched:control" not in args


def test_a_selection_names_an_unknown_scenario_or_a_control_as_an_error():
    r = subprocess.run([sys.executable, "tools/scenario_set.py", "--exclude", "llama-vmm:nope", "llama-vmm"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "llama-vmm:nope: no such scenario" in r.stderr
    r = subprocess.run([sys.executable, "tools/scenario_set.py", "--exclude", "llama-vmm:control", "llama-vmm"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode != 0 and "control always runs" in r.stderr
    r = subprocess.run([sys.executable, "tools/scenario_set.py", "no-such-reproducer"], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "no reproducer 'no-such-reproducer'" in r.stderr


def _has(ref: str) -> bool:
    return (SRC / ".git").exists() and subprocess.run(["git", "-C", str(SRC), "rev-parse", "-q", "--verify", ref],
                                                      capture_output=True).returncode == 0


@pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")
def test_the_steps_run_a_subset_of_pr188_ref_vs_ref_on_the_simulated_driver(tmp_path):
    if not (_has("e3c3477^{commit}") and _has("69ed0029b2ebfe2238ab6ab4b62c723a9e536320^{commit}")):
        pytest.skip("no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout with e3c3477 and PR #188's "
                    "head (refs/pull/188/head)")
    out = tmp_path / "out"
    env = {**os.environ, "DRIVER": "fake", "OUT": str(out), "SRC": str(SRC), "LUCEPATCH_CACHE": str(tmp_path / "cache"),
           "PR188_BUNDLE": str(tmp_path / "pr188.bundle"), "PR188_CLONE": str(tmp_path / "clone"),
           "PR188_REPROS": "llama-vmm pr188-guard", "PR188_EXCLUDE": "llama-vmm:main-device", "PR188_JOBS": "2"}
    r = subprocess.run(["bash", "tools/gpu_session.sh", "pr188-bundle", "pr188-all"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "pr188.bundle").is_file() and not (tmp_path / "clone-pick").exists()
    doc = json.loads((out / "commit" / "hami-core-pr188-subset.fake.json").read_text())
    got = {s["scenario"]: (s["verdict"], s["runs_spent"]["baseline"], s["runs_spent"]["patched"])
           for s in doc["scenarios"]}
    assert "llama-vmm:main-device" not in got and len(got) == 4 + 3
    # PR #188 is the HOST_NUMA cuMemCreate fix (#187): proven at the early stop; its own guard shows the
    # regression it was reviewed for (a baseline that never fails in 20, the patched build failing), and a
    # scenario both sides fail stops at the runs that decide and estimate — not 20 + 20
    assert got["llama-vmm:host-numa-create"] == ("proven", 5, 10)
    assert got["pr188-guard:ctxless-alloc-valid-residue"] == ("regression", 20, 6)
    assert got["pr188-guard:ctxless-alloc-exact-error"] == ("not-proven", 1, 6)
    assert doc["verdict"] == "regression"
    log = (out / "commit" / "hami-core-pr188-subset.fake.log").read_text()
    assert re.search(r"pr188-subset wall: [\d.]+ s", log)
