"""verify --in-cluster without a cluster: the real Job runner script runs the real reproducer
under the fixture interception library on the simulated driver, exactly as a pod would; its
output is the pod log. `verify --in-cluster --from-logs` must turn those logs into the same
verdict and evidence as a local run. The live path (Jobs on a HAMi node) needs
LUCEPATCH_KUBECONFIG and is not run here."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from lucepatch.k8s import incluster, jobs
from lucepatch.k8s.validate import strict_validate
from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.verify.reproducer import load_reproducer_dir
from lucepatch.verify.runner import compile_reproducer
from test_verify_verdicts import _series, fh, make_ws, pytestmark  # noqa: F401  (fixture + skip rule)

RUNS = 5


def _build(cli, fh, ws) -> dict[str, Path]:
    r = cli("--workspace", ws, "--cache-dir", fh["cache"], "build", "fakehami", "--source", fh["upstream"], "--both",
            "--json")
    assert r.code == 0, r.err
    return {b["variant"]: Path(b["artifacts"]["libvgpu.so"]["path"]) for b in r.json["builds"]}


def _pod_logs(fh, ws, libs: dict[str, Path], out: Path, *, want_sha: dict | None = None) -> Path:
    """Run jobs.RUNNER_SCRIPT like the verify Job's container does; its output is the pod log."""
    repro = load_reproducer_dir(ws / "reproducers" / "async-sched")
    fake = build_fakecuda(fh["cache"] / "fakecuda")
    binary = compile_reproducer(repro, fh["cache"], fake)
    out.mkdir(parents=True, exist_ok=True)
    for s in repro.scenarios:
        for variant, lib in libs.items():
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA_"))}
            env.update(repro.env)
            env.update(LUCEPATCH_LIB=str(lib), LUCEPATCH_VARIANT=variant, LUCEPATCH_RUNS=str(RUNS),
                       LUCEPATCH_RUN_TIMEOUT="30", LUCEPATCH_NODE="gpu-node-1", CUDA_DISABLE_CONTROL="true",
                       LIBCUDA_LOG_LEVEL="2", LD_LIBRARY_PATH=str(fake), TMPDIR=str(out),
                       LUCEPATCH_LIB_SHA256=(want_sha or {}).get(variant) or hashlib.sha256(lib.read_bytes()).hexdigest())
            p = subprocess.run(["sh", "-c", jobs.RUNNER_SCRIPT, "lucepatch-runner", str(binary), s.name], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
            (out / incluster.log_name("async-sched", s.name, variant)).write_text(p.stdout)
    return out


def _verify_from_logs(cli, fh, ws, libs, logs, evidence):
    return cli("--workspace", ws, "--cache-dir", fh["cache"], "verify", "--reproducer", "async-sched",
               "--in-cluster", "--from-logs", logs, "--lib", libs["patched"], "--baseline-lib", libs["baseline"],
               "--runs", RUNS, "--evidence", evidence, "--json")


def test_pod_logs_give_the_same_verdict(cli, fh, tmp_path):
    ws = make_ws(fh, "ws-incluster", _series(""), ["async-sched"])
    libs = _build(cli, fh, ws)
    logs = _pod_logs(fh, ws, libs, tmp_path / "logs")
    r = _verify_from_logs(cli, fh, ws, libs, logs, tmp_path / "ev.json")
    assert r.code == 0, r.err
    doc = r.json["evidence"]
    assert doc["verdict"] == "proven"
    assert doc["execution"]["mode"] == "in-cluster" and doc["execution"]["processes"] == 4 * 2 * RUNS
    assert doc["cluster"]["from_logs"] == str(logs)
    # the driver facts come from what the pods' reproducers reported, not from a flag
    assert doc["driver"]["kind"] == "fake" and doc["driver"]["gpu"].startswith("lucepatch-fakecuda")
    crash = next(s for s in doc["scenarios"] if s["scenario"] == "async-sched:ctxless-async-alloc")
    assert crash["baseline"]["failures"] == RUNS and crash["patched"]["failures"] == 0
    assert json.loads((tmp_path / "ev.json").read_text())["verdict"] == "proven"


def test_truncated_or_refused_pods_are_invalid(cli, fh, tmp_path):
    ws = make_ws(fh, "ws-incluster-bad", _series(""), ["async-sched"])
    libs = _build(cli, fh, ws)
    logs = _pod_logs(fh, ws, libs, tmp_path / "logs")
    victim = logs / incluster.log_name("async-sched", "ctxless-async-alloc", "patched")
    text = victim.read_text()
    victim.write_text(text[: text.rindex("@@lucepatch-run-start")])  # pod killed during its last run
    r = _verify_from_logs(cli, fh, ws, libs, logs, tmp_path / "ev.json")
    assert r.code == 1
    s = next(s for s in r.json["evidence"]["scenarios"] if s["scenario"] == "async-sched:ctxless-async-alloc")
    assert s["verdict"] == "invalid" and s["patched"]["invalid"] == 1
    # a pod whose image holds other bytes than the ones verified here refuses to run at all
    logs2 = _pod_logs(fh, ws, libs, tmp_path / "logs2", want_sha={"patched": "0" * 64})
    r = _verify_from_logs(cli, fh, ws, libs, logs2, tmp_path / "ev2.json")
    assert r.code == 1 and r.json["evidence"]["verdict"] == "invalid"


def test_missing_log_is_a_usage_error(cli, fh, tmp_path):
    ws = make_ws(fh, "ws-incluster-missing", _series(""), ["async-sched"])
    libs = _build(cli, fh, ws)
    (tmp_path / "empty").mkdir()
    r = _verify_from_logs(cli, fh, ws, libs, tmp_path / "empty", tmp_path / "ev.json")
    errors = [l for l in r.err.splitlines() if l.startswith("lucepatch: error:")]
    assert r.code == 2 and len(errors) == 1 and "is missing" in errors[0] and "Traceback" not in r.err


def test_live_needs_a_cluster(cli, fh, tmp_path, monkeypatch):
    monkeypatch.delenv("LUCEPATCH_KUBECONFIG", raising=False)
    ws = make_ws(fh, "ws-incluster-live", _series(""), ["async-sched"])
    libs = _build(cli, fh, ws)
    r = cli("--workspace", ws, "verify", "--reproducer", "async-sched", "--in-cluster", "--image", "x:1",
            "--lib", libs["patched"], "--baseline-lib", libs["baseline"])
    assert r.code == 3 and "LUCEPATCH_KUBECONFIG" in r.err


def test_rendered_jobs_carry_env_lib_and_validate(fh, tmp_path):
    repro = load_reproducer_dir(Path(__file__).resolve().parent.parent / "reproducers" / "async-sched")
    plan = incluster.plan_runs([repro], ["ctxless-async-alloc"], ["baseline", "patched"])
    objs = incluster.render_jobs(plan, {"baseline": "a" * 64, "patched": "b" * 64}, run_id="lp-test", image="reg/v:1",
                                 runs=20, namespace="lucepatch", node="gpu-node-1", gpu_mem_mib=4096, gpu_count=1)
    assert len(objs) == 4  # control + scenario, two variants each
    assert strict_validate([o for _, o in objs]) == []
    (key, job) = next((k, o) for k, o in objs if k == ("async-sched", "ctxless-async-alloc", "patched"))
    c = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LUCEPATCH_LIB"] == "/lucepatch/lib/patched/libvgpu.so" and env["LUCEPATCH_LIB_SHA256"] == "b" * 64
    assert env["CUDA_DISABLE_CONTROL"] == "true" and env["CUDA_DEVICE_MEMORY_LIMIT"] == "1g"
    assert c["command"][-2:] == ["/lucepatch/bin/async-sched", "ctxless-async-alloc"]
    assert c["resources"]["limits"]["nvidia.com/gpumem"] == "4096"
    assert job["metadata"]["labels"][incluster.RUN_ID_LABEL] == "lp-test"
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
