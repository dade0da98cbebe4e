"""Values for the rendered manifests: every key, its default and what it does.

Each manifest set has one schema: ``{key: Value(default, doc)}``. User values (a YAML or JSON
file, ``--values FILE``, or ``--set key=value``) are merged over the defaults; an unknown key is
a usage error naming the known ones, so a typo never renders silently. ``docs/cluster.md``
and ``lucepatch render k8s SET --show-values`` print these tables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lucepatch.errors import EnvironmentMissing, UsageError


@dataclass(frozen=True)
class Value:
    default: Any
    doc: str


COMMON = {
    "namespace": Value("lucepatch", "Namespace every namespaced object is created in."),
    "labels": Value({}, "Extra labels added to every object (dict)."),
}

LUCEBOX = {
    **COMMON,
    "namespace": Value("lucebox", "Namespace of the Deployment, Service and PVC."),
    "name": Value("lucebox", "Name of the Deployment, Service and PVC (prefix)."),
    "image": Value("lucebox:cuda13-sm120", "Lucebox server image (e.g. built by `lucepatch build lucebox --image`)."),
    "image_pull_policy": Value("IfNotPresent", "imagePullPolicy of the server container."),
    "replicas": Value(1, "Deployment replicas (one GPU each)."),
    "gpu_count": Value(1, "`nvidia.com/gpu` limit (HAMi vGPU count)."),
    "gpu_mem_mib": Value(None, "`nvidia.com/gpumem` limit in MiB; null = none requested (Olares then sets "
                               "CUDA_DEVICE_MEMORY_LIMIT_0=0m, see cuda_device_memory_limit)."),
    "gpu_cores": Value(None, "`nvidia.com/gpucores` limit (percent of SMs); null = not requested."),
    "scheduler_name": Value(None, "Pod schedulerName, e.g. `hami-scheduler`; null = cluster default."),
    "olares_gpu_inject": Value(False, "Add the Olares annotation `applications.app.bytetrade.io/gpu-inject: \"true\"`."),
    "cuda_device_memory_limit": Value(None, "Override `CUDA_DEVICE_MEMORY_LIMIT_0` (e.g. `24000m` on a 24 GB card); "
                                            "works around Olares' `0m` when no gpumem is requested."),
    "hf_token_secret": Value("hf-token", "Secret holding the Hugging Face token (HF_TOKEN, needed for gated drafts); "
                                         "null = no token. The Secret is optional at runtime."),
    "hf_token_key": Value("token", "Key inside hf_token_secret."),
    "model_cache_mount": Value("/models", "Where the model cache is mounted in the container (MODEL_DIR)."),
    "model_cache_pvc": Value(True, "Create and mount a PersistentVolumeClaim `<name>-models` for the model cache."),
    "model_cache_size": Value("40Gi", "Size of the model cache PVC (target GGUF ~16 GB + draft)."),
    "model_cache_storage_class": Value(None, "storageClassName of the PVC; null = cluster default."),
    "model_cache_host_path": Value(None, "Use this hostPath for the cache instead of a PVC (single-node boxes)."),
    "port": Value(8080, "Server port (dflash_server listens on 0.0.0.0:8080 once the model is loaded)."),
    "health_path": Value("/health", "HTTP path of the startup and readiness probes."),
    "startup_period_seconds": Value(10, "startupProbe periodSeconds."),
    "model_download_init": Value(True, "Fetch the models in an init container (the image's entrypoint with "
                                       "DOWNLOAD_ONLY=1) so the download is outside the startup probe's budget."),
    "startup_failure_threshold": Value(180, "startupProbe failureThreshold: period x threshold = time allowed for "
                                            "model load + first-boot JIT (default 30 min; the download runs "
                                            "before, in the init container, unless model_download_init is off)."),
    "readiness_period_seconds": Value(10, "readinessProbe periodSeconds."),
    "cpu_request": Value("4", "CPU request."),
    "cpu_limit": Value(None, "CPU limit; null = none."),
    "memory_request": Value("16Gi", "Memory request."),
    "memory_limit": Value("48Gi", "Memory limit."),
    "env": Value({}, "Extra environment variables (dict name -> string)."),
    "node_selector": Value({}, "nodeSelector (dict)."),
    "service_type": Value("ClusterIP", "Service type (ClusterIP, NodePort, LoadBalancer)."),
}

RBAC = {
    **COMMON,
    "service_account": Value("lucepatch", "ServiceAccount lucepatch runs as in-cluster (also bindable to a user)."),
    "create_service_account": Value(True, "Create the ServiceAccount."),
    "swap_namespace": Value("lucepatch-system", "Namespace of the hami-core swap DaemonSet (deploy hami-core)."),
}

VERIFY_JOB = {
    **COMMON,
    "variant": Value("patched", "`baseline` or `patched`: which library this Job preloads."),
    "run_id": Value("manual", "Identifier shared by the Jobs of one `verify --in-cluster` (label lucepatch.dev/run-id)."),
    "reproducer": Value("async-sched", "Reproducer name (folder under reproducers/)."),
    "reproducer_cmd": Value(["/lucepatch/bin/reproducer"], "Command of the reproducer inside the image (list)."),
    "image": Value("lucepatch/reproducers:latest", "Image holding the reproducer binaries (and the libs if lib_image is null)."),
    "lib_image": Value(None, "Image holding the variant's libvgpu.so, copied by an init container; null = in `image`."),
    "lib_path_in_image": Value("/lucepatch/lib/libvgpu.so", "Path of the variant library inside lib_image (or image)."),
    "lib_sha256": Value(None, "Expected sha256 of the variant library; the runner refuses to run on a mismatch."),
    "runs": Value(20, "Runs of the reproducer in this Job (serial: HAMi's host-wide /tmp/vgpulock)."),
    "env": Value({}, "Extra environment of the reproducer (dict), e.g. the reproducer.toml [env] such as "
                     "CUDA_DEVICE_MEMORY_LIMIT; HAMi's own per-pod variables still come from the device plugin."),
    "run_timeout_seconds": Value(120, "Per-run timeout (timeout(1)); a timeout is recorded as returncode 124."),
    "node": Value(None, "Pin to this node (kubernetes.io/hostname); null = any HAMi node."),
    "gpu_count": Value(1, "`nvidia.com/gpu` limit."),
    "gpu_mem_mib": Value(None, "`nvidia.com/gpumem` limit in MiB; null = none."),
    "scheduler_name": Value(None, "schedulerName, e.g. `hami-scheduler`."),
    "ttl_seconds_after_finished": Value(3600, "Job ttlSecondsAfterFinished (cluster deletes it after)."),
    "active_deadline_seconds": Value(3600, "Job activeDeadlineSeconds."),
    "owner": Value(None, "ownerReference dict {apiVersion, kind, name, uid} (e.g. a ConfigMap per verify run) "
                         "so deleting the owner deletes the Jobs; null = none."),
    "service_account": Value(None, "ServiceAccount of the Job's pod; null = the namespace default (the pod needs no API access)."),
}

SWAP = {
    **COMMON,
    "namespace": Value("lucepatch-system", "Namespace of the swap DaemonSet and its ConfigMap."),
    "name": Value("lucepatch-hami-core-swap", "Name of the DaemonSet and ConfigMap."),
    "action": Value("install", "`install` the library or `rollback` to the backed-up original."),
    "image": Value("docker.io/library/buildpack-deps:bookworm",
                   "Image running the swap script: needs bash, coreutils, util-linux (flock) and binutils (nm, objdump)."),
    "lib_image": Value(None, "Image holding the patched library (required for install), copied by an init container "
                             "that needs `cp`."),
    "lib_path_in_image": Value("/lucepatch/lib/libvgpu.so", "Path of the patched library inside lib_image."),
    "lib_sha256": Value(None, "sha256 of the patched library (required for install): the evidence's patched artifact."),
    "host_lib_dir": Value("/usr/local/vgpu", "HAMi's library directory on the node (chart devicePlugin.libPath)."),
    "lib_name": Value("libvgpu.so", "File swapped inside host_lib_dir."),
    "node_selector": Value({"gpu": "on"}, "nodeSelector of the DaemonSet (HAMi labels GPU nodes gpu=on)."),
    "reassert_seconds": Value(0, "If > 0, re-check every N seconds and re-install when the library was overwritten "
                                 "(e.g. by a HAMi device-plugin restart); 0 = install once, then idle."),
    "tolerations": Value([{"operator": "Exists"}], "Tolerations (default: run on every tainted GPU node too)."),
}

SCHEMAS = {"lucebox": LUCEBOX, "rbac": RBAC, "verify-job": VERIFY_JOB, "hami-core-swap": SWAP}


def defaults(schema: dict[str, Value]) -> dict:
    return {k: json.loads(json.dumps(v.default)) for k, v in schema.items()}


def load_file(path: str | Path) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith(".json"):
        data = json.loads(text)
    else:
        try:
            import yaml
        except ModuleNotFoundError:
            raise EnvironmentMissing("PyYAML is needed to read a YAML values file: pip install 'lucepatch[k8s]'")
        data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise UsageError(f"values file {path} must hold a mapping of key: value")
    return data


def parse_set(items: tuple[str, ...] | list[str]) -> dict:
    """``key=value`` pairs; the value is read as JSON when it parses (numbers, true, null, lists)."""
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--set {item!r} must look like key=value")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def resolve(set_name: str, *overrides: dict) -> dict:
    schema = SCHEMAS[set_name]
    values = defaults(schema)
    for ov in overrides:
        for key, val in (ov or {}).items():
            if key not in schema:
                raise UsageError(f"unknown value {key!r} for {set_name}: known are {', '.join(sorted(schema))}")
            values[key] = val
    return values


def describe(set_name: str) -> list[dict]:
    return [{"key": k, "default": v.default, "doc": v.doc} for k, v in SCHEMAS[set_name].items()]
