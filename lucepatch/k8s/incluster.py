"""`verify --in-cluster`: the same verification, with the runs executed as Jobs on a HAMi node.

One Job per reproducer scenario and variant (manifests: templates/k8s/verify-job.yaml.j2), each
running the reproducer `runs` times under jobs.RUNNER_SCRIPT with LD_PRELOAD of that variant's
library and CUDA_DISABLE_CONTROL=true, so the node's own HAMi library is not in play. Pod logs are
parsed back (jobs.parse_job_log) and every run goes through the same classifier as a local run
(runner.classify): the reproducer's in-pod load report must name the preloaded library with the
sha256 of the bytes verified here, and HAMi's marker must be in the log, or the run is invalid.

Image layout the Jobs expect (`--image`; docs/cluster.md has a Dockerfile for it):
    /lucepatch/bin/<reproducer>             the compiled reproducers
    /lucepatch/lib/<variant>/libvgpu.so     the baseline and patched libraries

`--from-logs DIR` re-evaluates recorded pod logs (<reproducer>.<scenario>.<variant>.log) without a
cluster; `--save-logs DIR` keeps what a live run fetched, in that layout.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from lucepatch import report
from lucepatch.errors import CheckFailed, EnvironmentMissing, UsageError
from lucepatch.k8s import client as kclient
from lucepatch.k8s import jobs, manifests, values
from lucepatch.verify.reproducer import Reproducer, Scenario, scenario_env
from lucepatch.verify.driver import DriverChoice
from lucepatch.verify.runner import INVALID, RunRecord, classify
from lucepatch.verify.session import Execution

BIN_DIR = "/lucepatch/bin"
LIB_PATH = "/lucepatch/lib/{variant}/libvgpu.so"
RUN_ID_LABEL = "lucepatch.dev/verify-run"  # one verify --in-cluster; run-id names each Job pair


def log_name(repro: str, scenario: str, variant: str) -> str:
    return f"{repro}.{scenario}.{variant}.log"


def records_from_log(text: str, repro: Reproducer, scenario: Scenario, variant: str,
                     expected_sha256: str | None, runs: int) -> list[RunRecord]:
    """One RunRecord per run the Job was asked for; runs missing from the log are invalid."""
    jl = jobs.parse_job_log(text)
    lib = Path(LIB_PATH.format(variant=variant))
    out: list[RunRecord] = []
    if jl.error:
        for i in range(runs):
            out.append(RunRecord(variant, f"{repro.name}:{scenario.name}", i, INVALID, None, None, 0.0,
                                 reason=f"the Job refused to run: {jl.error}"))
        return out
    by_run = {r.run: r for r in jl.runs}
    for i in range(1, runs + 1):
        r = by_run.get(i)
        if r is None or not r.finished:
            out.append(RunRecord(variant, f"{repro.name}:{scenario.name}", i - 1, INVALID, None, None, 0.0,
                                 reason="run missing from the pod log (pod killed or log truncated)"))
            continue
        stdout = "\n".join(jobs.EVENT + json.dumps(e) for e in r.events) + "\n"
        stderr = "\n".join(r.log_lines) + "\n" + r.stderr_tail
        rec = classify(repro, scenario, variant, i - 1, None if r.timed_out else r.returncode, r.timed_out, 0.0,
                       stdout, stderr, lib, expected_sha256)
        rec.scenario = f"{repro.name}:{scenario.name}"
        out.append(rec)
    return out


def job_values(repro: Reproducer, scenario: Scenario, variant: str, *, run_id: str, image: str, runs: int,
               lib_sha256: str, namespace: str, node: str | None, gpu_mem_mib: int | None, gpu_count: int) -> dict:
    return values.resolve("verify-job", {
        "namespace": namespace, "variant": variant, "run_id": f"{run_id}-{scenario.name}",
        "reproducer": repro.name, "reproducer_cmd": [f"{BIN_DIR}/{repro.name}", scenario.name],
        "image": image, "lib_path_in_image": LIB_PATH.format(variant=variant), "lib_sha256": lib_sha256,
        "runs": runs, "run_timeout_seconds": int(repro.timeout_s), "node": node, "gpu_mem_mib": gpu_mem_mib,
        "gpu_count": gpu_count, "env": scenario_env(repro, scenario),
        "labels": {RUN_ID_LABEL: run_id},
    })


def render_jobs(plan: list[tuple[Reproducer, Scenario, str]], shas: dict[str, str], **kw) -> list[tuple[tuple, dict]]:
    out = []
    for repro, scenario, variant in plan:
        vals = job_values(repro, scenario, variant, lib_sha256=shas[variant], **kw)
        for obj in manifests.to_objects(manifests.render("verify-job", vals)):
            out.append(((repro.name, scenario.name, variant), obj))
    return out


def plan_runs(repros: list[Reproducer], scenario_filter: list[str] | None, variants: list[str]):
    workloads = [r.name for r in repros if r.is_workload]
    if workloads:
        # the verify image carries compiled reproducers only; a workload needs its interpreter and packages
        raise UsageError(f"--in-cluster runs C reproducers; {', '.join(workloads)} "
                         f"{'is a workload' if len(workloads) == 1 else 'are workloads'} (kind = \"workload\"): "
                         "verify it on the node itself with --driver real")
    plan = []
    for repro in repros:
        for s in repro.scenarios:
            if s.measure is not None:  # a rate is measured one run at a time on the node, not per pod
                continue
            if s.control or not scenario_filter or s.name in scenario_filter:
                plan += [(repro, s, v) for v in variants]
    return plan


def from_logs(log_dir: Path, plan, shas: dict[str, str], runs: int) -> list[RunRecord]:
    records = []
    for repro, s, v in plan:
        f = Path(log_dir) / log_name(repro.name, s.name, v)
        if not f.is_file():
            raise UsageError(f"--from-logs {log_dir}: {f.name} is missing (one log per reproducer, scenario and variant)")
        records += records_from_log(f.read_text(errors="replace"), repro, s, v, shas[v], runs)
    return records


def run_live(plan, shas: dict[str, str], runs: int, *, image: str, namespace: str, node: str | None,
             gpu_mem_mib: int | None, context: str | None, save_logs: Path | None,
             kubeconfig: str | None = None, wait_s: float = 3600) -> tuple[list[RunRecord], dict]:
    """Create the Jobs, wait, fetch the logs; delete the Jobs if interrupted (Ctrl-C, SIGTERM)."""
    run_id = f"lp-{uuid.uuid4().hex[:8]}"
    gpu_count = max(s.min_devices for _, s, _ in plan)
    objs = render_jobs(plan, shas, run_id=run_id, image=image, runs=runs, namespace=namespace, node=node,
                       gpu_mem_mib=gpu_mem_mib, gpu_count=gpu_count)
    k = kclient.load(context, kubeconfig)
    batch, core = k.BatchV1Api(), k.CoreV1Api()
    report.progress(f"in-cluster run {run_id}: {len(objs)} Jobs in namespace {namespace}")
    try:
        kclient.apply([o for _, o in objs], context, kubeconfig)
        logs, nodes = {}, set()
        deadline = time.monotonic() + wait_s
        for key, obj in objs:
            name = obj["metadata"]["name"]
            while True:
                st = batch.read_namespaced_job_status(name, namespace).status
                if (st.succeeded or 0) + (st.failed or 0) > 0:
                    break
                if time.monotonic() > deadline:
                    raise CheckFailed(f"Job {name} did not finish within {wait_s:.0f}s")
                time.sleep(5)
            pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
            if not pods:
                raise CheckFailed(f"Job {name} has no pod to read logs from")
            logs[key] = core.read_namespaced_pod_log(pods[0].metadata.name, namespace)
            if pods[0].spec.node_name:
                nodes.add(pods[0].spec.node_name)
    except BaseException:  # Ctrl-C, SIGTERM, or a failure: leave no Jobs behind
        cleanup(batch, namespace, run_id)
        raise
    records = []
    for (rname, sname, variant), text in logs.items():
        if save_logs:
            Path(save_logs).mkdir(parents=True, exist_ok=True)
            (Path(save_logs) / log_name(rname, sname, variant)).write_text(text)
        repro, scenario = next((r, s) for r, s, v in plan if r.name == rname and s.name == sname)
        records += records_from_log(text, repro, scenario, variant, shas[variant], runs)
    return records, {"run_id": run_id, "namespace": namespace, "nodes": [node_facts(core, n) for n in sorted(nodes)]}


def cleanup(batch, namespace: str, run_id: str) -> None:
    from kubernetes.client.rest import ApiException  # optional: the k8s extra
    from urllib3.exceptions import HTTPError  # optional: the k8s extra (the kubernetes client's transport)

    try:
        batch.delete_collection_namespaced_job(namespace, label_selector=f"{RUN_ID_LABEL}={run_id}",
                                               propagation_policy="Background")
        report.progress(f"deleted the Jobs of {run_id}")
    except (ApiException, HTTPError, OSError) as exc:  # the API would not delete them: say how, go on unwinding
        report.progress(f"could not delete the Jobs of {run_id} ({type(exc).__name__}); "
                        f"kubectl delete jobs -n {namespace} -l {RUN_ID_LABEL}={run_id}")


def node_facts(core, name: str) -> dict:
    """GPU model, driver and HAMi version as the cluster labels them (HAMi/NVIDIA GPU feature discovery)."""
    labels = core.read_node(name).metadata.labels or {}
    pick = lambda *keys: next((labels[k] for k in keys if k in labels), None)  # noqa: E731
    return {"node": name, "gpu": pick("nvidia.com/gpu.product"), "driver": pick("nvidia.com/cuda.driver-version.full",
            "nvidia.com/cuda.driver.major"), "hami_version": pick("hami.io/version", "hami.io/node-hami-version"),
            "labels": {k: v for k, v in labels.items() if k.startswith(("nvidia.com/", "hami.io/"))}}


def require_cluster(kubeconfig: str | None = None) -> None:
    if not kclient.kubeconfig_path(kubeconfig):
        raise EnvironmentMissing("--in-cluster needs a cluster: set LUCEPATCH_KUBECONFIG (or --kubeconfig), "
                                 "or re-evaluate recorded pod logs with --from-logs DIR")


@dataclass
class ClusterBackend:
    """`verify --in-cluster`: the runs as Jobs on a HAMi node (docs/cluster.md), or re-read from
    recorded pod logs (`from_logs`); the backend verify's service runs them through
    (lucepatch.verify.service.Backend)."""
    image: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "lucepatch"
    node: str | None = None
    gpu_mem_mib: int | None = None
    from_logs: Path | None = None
    save_logs: Path | None = None

    def check(self) -> None:
        if self.from_logs is None:
            require_cluster(self.kubeconfig)
            if not self.image:
                raise UsageError("--in-cluster needs --image (the reproducers and both libraries; docs/cluster.md)")

    def driver(self) -> DriverChoice:
        return DriverChoice(requested="in-cluster", chosen="real", env={}, fake_dir=None, note="the node's driver")

    def run(self, repros, scenario_filter, variants, runs: int) -> tuple[list[RunRecord], Execution, dict]:
        plan = plan_runs(repros, scenario_filter, [v.name for v in variants])
        shas = {v.name: v.sha256 for v in variants}
        ex = Execution("in-cluster", 1, "pod", "one Job per scenario and variant, runs serial inside each pod")
        if self.from_logs is not None:
            records = from_logs(Path(self.from_logs), plan, shas, runs)
            extra = {"from_logs": str(self.from_logs)}
        else:
            records, extra = run_live(plan, shas, runs, image=self.image, namespace=self.namespace, node=self.node,
                                      gpu_mem_mib=self.gpu_mem_mib, context=self.context, kubeconfig=self.kubeconfig,
                                      save_logs=self.save_logs)
        ex.processes = len(records)
        return records, ex, extra
