"""Values for the rendered manifests: every key, its default, its type and range, and what it does.

Each manifest set has one model: ``{key: Value(default, doc, type, minimum=, maximum=, enum=)}``,
and one JSON schema made from it (``schema``): the Helm chart's values.schema.json is that schema, so
helm and ``render`` check a value the same way. User values (a YAML or JSON file, ``--values FILE``,
or ``--set key=value``) are merged over the defaults and the result is checked against the schema
before anything is rendered or written: an unknown key, a wrong type or a value out of range is one
usage error naming every bad value. ``docs/cluster.md`` and ``lucepatch render k8s SET --show-values``
print these tables.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from lucepatch.errors import UsageError
from lucepatch.k8s import entrypoint


@dataclass(frozen=True)
class Value:
    default: Any
    doc: str
    # JSON-schema type(s) of the value (the Helm chart's values.schema.json is generated from these);
    # None = inferred from the default
    type: str | tuple[str, ...] | None = None
    minimum: int | None = None  # the range a number must be in (schema minimum / maximum)
    maximum: int | None = None
    enum: tuple | None = None  # the only values it takes

    def json_type(self) -> str | list[str]:
        if self.type is not None:
            return self.type if isinstance(self.type, str) else list(self.type)
        return {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object",
                list: "array"}.get(type(self.default), "string")

    def json_schema(self) -> dict:
        out = {"type": self.json_type(), "description": self.doc}
        out |= {k: v for k, v in (("minimum", self.minimum), ("maximum", self.maximum)) if v is not None}
        if self.enum is not None:
            out["enum"] = list(self.enum) + ([None] if "null" in out["type"] else [])
        return out


# a Kubernetes quantity ("4", 4, "500m", "16Gi") or null; `--set cpu_limit=8` arrives as a number
QUANTITY = ("string", "number", "null")
# The image `build lucebox --image` makes with its default profile (lucepatch/lucebox:<profile>-<series
# version>, builders/image.py image_tag); tests/test_helm_chart.py keeps the two equal.
LUCEBOX_IMAGE = "lucepatch/lucebox:sm120-cuda13-1.0.0"


COMMON = {
    "namespace": Value("lucepatch", "Namespace every namespaced object is created in."),
    "labels": Value({}, "Extra labels added to every object (dict)."),
}

LUCEBOX = {
    **COMMON,
    "namespace": Value("lucebox", "Namespace of the Deployment, Service and PVC (the Helm chart: empty = the release's)."),
    "name": Value("lucebox", "Name of the Deployment, Service and PVC (prefix)."),
    "image": Value(LUCEBOX_IMAGE, "Lucebox server image: the tag `lucepatch build lucebox --image` makes "
                                  "(lucepatch/lucebox:<profile>-<series version>)."),
    "image_cuda": Value("13.0", "CUDA runtime version of the image (the profile's base, label "
                                "org.lucepatch.cuda-version): `--node-driver` refuses an image the node's driver "
                                "cannot start (lucepatch/data/cuda_drivers.toml)."),
    "image_pull_policy": Value("IfNotPresent", "imagePullPolicy of the server container.",
                               enum=("Always", "IfNotPresent", "Never")),
    "replicas": Value(1, "Deployment replicas (one GPU each).", minimum=0),
    "gpu_count": Value(1, "`nvidia.com/gpu` limit (HAMi vGPU count).", minimum=1),
    "gpu_mem_mib": Value(None, "`nvidia.com/gpumem` limit in MiB; null = none requested (Olares then sets "
                               "CUDA_DEVICE_MEMORY_LIMIT_0=0m, see cuda_device_memory_limit).", ("integer", "null"),
                         minimum=1),
    "gpu_cores": Value(None, "`nvidia.com/gpucores` limit (percent of SMs); null = not requested.", ("integer", "null"),
                       minimum=0, maximum=100),
    "scheduler_name": Value(None, "Pod schedulerName, e.g. `hami-scheduler`; null = cluster default.", ("string", "null")),
    "olares_gpu_inject": Value(False, "Add the Olares annotation `applications.app.bytetrade.io/gpu-inject: \"true\"` "
                                      "(on the Deployment, where Olares' app-service webhook reads it, and its pods)."),
    "cuda_device_memory_limit": Value(None, "Override `CUDA_DEVICE_MEMORY_LIMIT_0` (e.g. `24000m` on a 24 GB card); "
                                            "works around Olares' `0m` when no gpumem is requested.", ("string", "null")),
    "hf_token_secret": Value("hf-token", "Secret holding the Hugging Face token (HF_TOKEN, needed for gated drafts); "
                                         "null = no token. The Secret is optional at runtime.", ("string", "null")),
    "hf_token_key": Value("token", "Key inside hf_token_secret."),
    "model_cache_mount": Value("/models", "Where the model cache is mounted in the container (MODEL_DIR)."),
    "model_cache_pvc": Value(True, "Create and mount a PersistentVolumeClaim `<name>-models` for the model cache."),
    "model_cache_size": Value("40Gi", "Size of the model cache PVC (target GGUF ~16 GB + draft)."),
    "model_cache_storage_class": Value(None, "storageClassName of the PVC; null = cluster default.", ("string", "null")),
    "model_cache_host_path": Value(None, "Use this hostPath for the cache instead of a PVC (single-node boxes). A "
                                         "root-owned DirectoryOrCreate folder is made writable for run_as_user by the "
                                         "`prepare-cache` init container (fsGroup does not apply to hostPath). The "
                                         "Helm chart expands templates in it (tpl), e.g. Olares' "
                                         "`{{ .Values.userspace.appData }}/lucebox`.", ("string", "null")),
    "volume_prepare_image": Value(None, "Image of the root `prepare-cache` init container (needs sh, find, chown, chmod); "
                                        "null = the server image. Olares admits root init containers only from "
                                        "trusted registries: its package uses docker.io/beclab/aboveos-busybox.",
                                  ("string", "null")),
    "run_as_user": Value(10001, "Pod runAsUser: the image's user (profile `uid`, default 10001).", minimum=0),
    "run_as_group": Value(10001, "Pod runAsGroup: the image's group.", minimum=0),
    "fs_group": Value(10001, "Pod fsGroup: a fresh PVC / emptyDir is group-owned and writable by it "
                             "(fsGroupChangePolicy OnRootMismatch); null = none.", ("integer", "null"), minimum=0),
    "port": Value(8080, "Server port: the container port, the probes, the Service and the PORT the entrypoint passes "
                        "to dflash_server (`--port $PORT`).", minimum=1, maximum=65535),
    "health_path": Value("/health", "HTTP path of the startup and readiness probes."),
    "startup_period_seconds": Value(10, "startupProbe periodSeconds.", minimum=1),
    "model_download_init": Value(True, "Fetch the models in an init container (the image's entrypoint with "
                                       "DOWNLOAD_ONLY=1) so the download is outside the startup probe's budget."),
    "startup_failure_threshold": Value(180, "startupProbe failureThreshold: period x threshold = time allowed for "
                                            "model load + first-boot JIT (default 30 min; the download runs "
                                            "before, in the init container, unless model_download_init is off).",
                                      minimum=1),
    "readiness_period_seconds": Value(10, "readinessProbe periodSeconds.", minimum=1),
    "cpu_request": Value("4", "CPU request.", QUANTITY),
    "cpu_limit": Value(None, "CPU limit; null = none.", QUANTITY),
    "memory_request": Value("16Gi", "Memory request.", QUANTITY),
    "memory_limit": Value("48Gi", "Memory limit.", QUANTITY),
    "env": Value({}, "Extra environment variables (dict name -> string); the Helm chart expands templates in "
                     "them (tpl), e.g. Olares' `{{ .Values.olaresEnv.HF_TOKEN }}`."),
    "node_selector": Value({}, "nodeSelector (dict)."),
    "service_type": Value("ClusterIP", "Service type (ClusterIP, NodePort, LoadBalancer).",
                          enum=("ClusterIP", "NodePort", "LoadBalancer")),
}

# The vendored line (Luce-Org/lucebox 62880e2): the image is upstream's own Dockerfile built by `build
# lucebox-vendored --image` (builders/image.py build_upstream_image), so the pod speaks to upstream's entrypoint
# (server/scripts/entrypoint.sh): DFLASH_* variables (k8s/entrypoint.py), models under its $DFLASH_DIR/models.
LUCEBOX_VENDORED_IMAGE = "lucepatch/lucebox-vendored:sm120-cuda13-1.0.0"
UPSTREAM_MODELS = "/opt/lucebox-hub/server/models"  # $DFLASH_DIR/models, the Dockerfile's VOLUME
# The image's own Hugging Face CLI: huggingface-hub 1.16.1 (uv.lock) in the venv its Dockerfile syncs
UPSTREAM_HF = "/opt/lucebox-hub/.venv/bin/hf"

LUCEBOX_VENDORED = {
    **LUCEBOX,
    "image": Value(LUCEBOX_VENDORED_IMAGE, "Lucebox server image: the tag `lucepatch build lucebox-vendored --image` "
                                           "makes from upstream's own Dockerfile (lucepatch/lucebox-vendored:<profile>-"
                                           "<series version>); its ENTRYPOINT is upstream's server/scripts/entrypoint.sh."),
    "hf_token_secret": Value("hf-token", "Secret holding the Hugging Face token (HF_TOKEN of the fetch-models container "
                                         "only: the server reads none); null = no token. Optional at runtime.",
                             ("string", "null")),
    "model_cache_mount": Value(UPSTREAM_MODELS, "Where the model cache is mounted: upstream's $DFLASH_DIR/models (the "
                                                "image's VOLUME). DFLASH_TARGET and DFLASH_DRAFT point inside it."),
    "model_download_init": Value(True, "Fetch the models before the server starts, in an init container running the "
                                       "image's own `hf download` (upstream's entrypoint fetches nothing and stops when "
                                       "no target is there), outside the startup probe's budget. Off: put the files in "
                                       "the cache yourself (upstream's README: `hf download ... --local-dir "
                                       "server/models/`)."),
    "run_as_user": Value(10001, "Pod runAsUser. Upstream's image declares no USER; its host wrapper runs it as the "
                                "host's uid and its Dockerfile makes the venv and /opt/lucebox-hub world-readable for "
                                "that. The pod runs it as this non-root uid.", minimum=0),
    "port": Value(8080, "Server port: the container port, the probes, the Service and DFLASH_PORT, which upstream's "
                        "entrypoint passes to dflash_server (`--port \"$DFLASH_PORT\"`).", minimum=1, maximum=65535),
    "health_path": Value("/health", "HTTP path of the startup and readiness probes (dflash_server answers GET /health, "
                                    "server/src/server/http_server.cpp)."),
    "env": Value({}, "Extra environment of the server container (dict name -> string), e.g. the server's own "
                     "DFLASH27B_KV_* (upstream server/docs/ENVIRONMENT.md); the entrypoint's variables go in `dflash`, "
                     "or are the chart's. The Helm chart expands templates in them (tpl)."),
    "model_target_repo": Value("unsloth/Qwen3.6-27B-GGUF", "Hugging Face repository of the target GGUF (upstream's "
                                                           "README, Quick Start With Docker)."),
    "model_target_file": Value("Qwen3.6-27B-Q4_K_M.gguf", "The target GGUF in that repository, fetched to "
                                                          "<model_cache_mount>/<file>; the server gets DFLASH_TARGET="
                                                          "that path. null = DFLASH_TARGET unset: the entrypoint takes "
                                                          "the one .gguf of 5 GB or more under " + UPSTREAM_MODELS +
                                                          " (nothing is fetched).", ("string", "null")),
    "model_draft_repo": Value("Lucebox/Qwen3.6-27B-DFlash-GGUF", "Hugging Face repository of the DFlash draft "
                                                                 "(upstream's README); null = no draft (the server "
                                                                 "runs target-only, slower).", ("string", "null")),
    "model_draft_file": Value("dflash-draft-3.6-q4_k_m.gguf", "The draft file, fetched to <model_cache_mount>/draft/; "
                                                              "the server gets DFLASH_DRAFT=<model_cache_mount>/draft "
                                                              "(the entrypoint picks the draft of the target's family "
                                                              "there).", ("string", "null")),
    "dflash": Value({}, "Upstream's entrypoint settings (dict NAME -> value), e.g. `DFLASH_MAX_CTX: 32768`, "
                        "`DFLASH_BUDGET: 16`: only the names it turns into server arguments (lucepatch/data/"
                        "lucebox_entrypoint.toml, role setting). Unset ones keep its defaults and its VRAM-tiered "
                        "autotune (nvidia-smi's memory.total)."),
    "fetch_env": Value({}, "Extra environment of the fetch-models container (dict), e.g. huggingface_hub's "
                           "HF_ENDPOINT; the Helm chart expands templates in them (tpl)."),
}

# The static copier `build hami-core --image` puts in its FROM scratch library image (builders/image.py
# LIB_COPIER_PATH; the image has no shell and no cp). tests/test_k8s_lib_image.py runs it for real.
LIB_COPIER = "/lucepatch/bin/lucepatch-copy"
LIB_COPY_DOC = ("Command (list) the init container runs as `COMMAND SRC DST` to take the library out of the image: "
                "the static copier `lucepatch build hami-core --image` ships; [\"cp\"] for an image with coreutils.")

RBAC = {
    **COMMON,
    "service_account": Value("lucepatch", "ServiceAccount lucepatch runs as in-cluster (also bindable to a user)."),
    "create_service_account": Value(True, "Create the ServiceAccount."),
    "swap_namespace": Value("lucepatch-system", "Namespace of the hami-core swap DaemonSet (deploy hami-core)."),
}

VERIFY_JOB = {
    **COMMON,
    "variant": Value("patched", "`baseline` or `patched`: which library this Job preloads.",
                     enum=("baseline", "patched")),
    "run_id": Value("manual", "Identifier shared by the Jobs of one `verify --in-cluster` (label lucepatch.dev/run-id)."),
    "reproducer": Value("async-sched", "Reproducer name (folder under reproducers/)."),
    "reproducer_cmd": Value(["/lucepatch/bin/reproducer"], "Command of the reproducer inside the image (list)."),
    "image": Value("lucepatch/reproducers:latest", "Image holding the reproducer binaries (and the libs if lib_image is null)."),
    "lib_image": Value(None, "Image holding the variant's libvgpu.so, copied by an init container; null = in `image`.",
                       ("string", "null")),
    "lib_path_in_image": Value("/lucepatch/lib/libvgpu.so", "Path of the variant library inside lib_image (or image)."),
    "lib_copy_command": Value([LIB_COPIER], LIB_COPY_DOC),
    "lib_sha256": Value(None, "Expected sha256 of the variant library; the runner refuses to run on a mismatch.",
                        ("string", "null")),
    "runs": Value(20, "Runs of the reproducer in this Job (serial: HAMi's host-wide /tmp/vgpulock).", minimum=1),
    "env": Value({}, "Extra environment of the reproducer (dict), e.g. the reproducer.toml [env] such as "
                     "CUDA_DEVICE_MEMORY_LIMIT; HAMi's own per-pod variables still come from the device plugin."),
    "run_timeout_seconds": Value(120, "Per-run timeout (timeout(1)); a timeout is recorded as returncode 124.",
                                 minimum=1),
    "node": Value(None, "Pin to this node (kubernetes.io/hostname); null = any HAMi node.", ("string", "null")),
    "gpu_count": Value(1, "`nvidia.com/gpu` limit.", minimum=1),
    "gpu_mem_mib": Value(None, "`nvidia.com/gpumem` limit in MiB; null = none.", ("integer", "null"), minimum=1),
    "scheduler_name": Value(None, "schedulerName, e.g. `hami-scheduler`.", ("string", "null")),
    "ttl_seconds_after_finished": Value(3600, "Job ttlSecondsAfterFinished (cluster deletes it after).", minimum=0),
    "active_deadline_seconds": Value(3600, "Job activeDeadlineSeconds.", minimum=1),
    "owner": Value(None, "ownerReference dict {apiVersion, kind, name, uid} (e.g. a ConfigMap per verify run) "
                         "so deleting the owner deletes the Jobs; null = none.", ("object", "null")),
    "service_account": Value(None, "ServiceAccount of the Job's pod; null = the namespace default (the pod needs no API "
                                   "access).", ("string", "null")),
}

SWAP = {
    **COMMON,
    "namespace": Value("lucepatch-system", "Namespace of the swap DaemonSet and its ConfigMap."),
    "name": Value("lucepatch-hami-core-swap", "Name of the DaemonSet and ConfigMap."),
    "action": Value("install", "`install` the library or `rollback` to the backed-up original.",
                    enum=("install", "rollback")),
    "image": Value("docker.io/library/buildpack-deps:bookworm",
                   "Image running the swap script: needs bash, coreutils, util-linux (flock) and binutils (nm, objdump)."),
    "lib_image": Value(None, "Image holding the patched library (required for install), copied out by an init "
                             "container running lib_copy_command.", ("string", "null")),
    "lib_path_in_image": Value("/lucepatch/lib/libvgpu.so", "Path of the patched library inside lib_image (where "
                                                            "`lucepatch build hami-core --image` puts it)."),
    "lib_copy_command": Value([LIB_COPIER], LIB_COPY_DOC),
    "lib_sha256": Value(None, "sha256 of the patched library (required for install): the evidence's patched artifact.",
                        ("string", "null")),
    "host_lib_dir": Value("/usr/local/vgpu", "HAMi's library directory on the node (chart devicePlugin.libPath)."),
    "lib_name": Value("libvgpu.so", "File swapped inside host_lib_dir."),
    "node_selector": Value({"gpu": "on"}, "nodeSelector of the DaemonSet (HAMi labels GPU nodes gpu=on)."),
    "reassert_seconds": Value(0, "If > 0, re-check every N seconds and re-install when the library was overwritten "
                                 "(e.g. by a HAMi device-plugin restart); 0 = install once, then idle.", minimum=0),
    "tolerations": Value([{"operator": "Exists"}], "Tolerations (default: run on every tainted GPU node too)."),
}

BENCH_JOB = {
    **COMMON,
    "name": Value("lucepatch-bench", "Name of the Job."),
    "image": Value("lucepatch/bench:latest", "Image with lucepatch installed (and PyTorch for workload decode-torch); "
                                             "the bench compiles its driver-API workload with the image's cc."),
    "host_lib_dir": Value("/usr/local/vgpu", "HAMi's library directory on the node (chart devicePlugin.libPath), "
                                             "mounted read-only at /lucepatch/node-vgpu."),
    "lib_name": Value("libvgpu.so", "The library inside host_lib_dir the bench measures."),
    "workload": Value("decode-c", "`decode-c` (driver API, no PyTorch) or `decode-torch` (PyTorch, bf16)."),
    "modes": Value(["eager", "graph"], "Launch modes (list): eager, graph."),
    "sm_limits": Value([50], "CUDA_DEVICE_SM_LIMIT values to check (list of 1..99)."),
    "tenants": Value([30, 70], "Two SM limits for two tenants in two regions at once; null = no tenant check.",
                     ("array", "null")),
    "memory_limit": Value("60g", "CUDA_DEVICE_MEMORY_LIMIT of every run with the layer."),
    "rounds": Value(6, "Counted rounds per configuration (each: one bare run, one with the layer)."),
    "node": Value(None, "Pin to this node (kubernetes.io/hostname); null = any GPU node.", ("string", "null")),
    "gpu_count": Value(1, "`nvidia.com/gpu` limit."),
    "scheduler_name": Value(None, "schedulerName, e.g. `hami-scheduler`.", ("string", "null")),
    "env": Value({}, "Extra environment of the bench (dict)."),
    "ttl_seconds_after_finished": Value(86400, "Job ttlSecondsAfterFinished (the cluster deletes it after)."),
    "active_deadline_seconds": Value(3600, "Job activeDeadlineSeconds."),
}

SCHEMAS = {"lucebox": LUCEBOX, "lucebox-vendored": LUCEBOX_VENDORED, "rbac": RBAC, "verify-job": VERIFY_JOB,
           "hami-core-swap": SWAP, "bench-job": BENCH_JOB}


# dict values: what their entries may be (helm's --set a.b=1 makes a number, hence numbers in env)
ENTRIES = {"labels": {"type": "string"}, "env": {"type": ["string", "number", "boolean"]},
           "node_selector": {"type": ["string", "number", "boolean"]}, "dflash": {"type": ["string", "number"]},
           "fetch_env": {"type": ["string", "number"]}}
# the sets of the Lucebox server, one per line of the series: the 8305b6c line's image and entrypoint are
# lucepatch's (rendered Dockerfile), the vendored line's are upstream's
LUCEBOX_SETS = ("lucebox", "lucebox-vendored")


def schema(set_name: str, *, closed: bool = True) -> dict:
    """The JSON schema of a set's values: the Helm chart's values.schema.json (lucebox) and what
    `resolve` checks every set's values against. `closed`: no keys beyond the model (Olares' package
    leaves it open for the values Olares injects)."""
    props = {k: v.json_schema() for k, v in SCHEMAS[set_name].items()}
    for k, entries in ENTRIES.items():
        if k in props and isinstance(SCHEMAS[set_name][k].default, dict):
            props[k]["additionalProperties"] = entries
    if "dflash" in props:  # only what upstream's entrypoint reads as a setting (k8s/entrypoint.py)
        props["dflash"]["propertyNames"] = {"enum": entrypoint.settings()}
        # the rest of its names are the chart's or the image's: not in the free env (helm refuses them too)
        props["env"]["propertyNames"] = {"not": {"enum": entrypoint.names()}}
        props["fetch_env"]["propertyNames"] = {"not": {"enum": ["HF_HOME"]}}
    if set_name in LUCEBOX_SETS:
        props["workloads"] = {"type": "object", "description": "Olares: workloads.<name>.replicaCount (OlaresManifest "
                                                                "workloadReplicas) overrides replicas."}
    return {"$schema": "https://json-schema.org/draft-07/schema#", "title": f"{set_name} values",
            "type": "object", "properties": props, "additionalProperties": not closed}


def check(set_name: str, vals: dict) -> None:
    """Every value against the set's schema (the one helm reads from values.schema.json): UsageError
    naming each bad value, as `helm template` refuses them."""
    import jsonschema  # lazy: the values' schema check, 716 ms (a loaded 2-core machine)

    errors = sorted(jsonschema.Draft7Validator(schema(set_name)).iter_errors(vals), key=lambda e: list(e.path))
    if errors:
        bad = "; ".join(f"{'.'.join(str(p) for p in e.path) or '(values)'}: {e.message}" for e in errors)
        raise UsageError(f"values refused by the {set_name} schema (values.schema.json, as helm checks it): {bad}")


def defaults(schema: dict[str, Value]) -> dict:
    return {k: json.loads(json.dumps(v.default)) for k, v in schema.items()}


def load_file(path: str | Path) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith(".json"):
        data = json.loads(text)
    else:
        import yaml  # lazy: a YAML values file only, 174 ms

        data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise UsageError(f"values file {path} must hold a mapping of key: value")
    return data


def _go_float(f: float) -> str:
    """A float64 as Go's fmt %v prints it (sprig's toString in the chart): the shortest digits that read back
    the same, in %e form when the decimal exponent is below -4 or 6 and above (1.2345675e+06, 1e-05)."""
    if f != f or f in (float("inf"), float("-inf")):
        return "NaN" if f != f else ("+Inf" if f > 0 else "-Inf")
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    sign, digits, exp = Decimal(repr(f)).normalize().as_tuple()  # repr: the shortest round-trip digits, as Go's
    ds = "".join(map(str, digits))
    dp = len(ds) + exp  # where the decimal point falls in the digits
    neg = "-" if sign else ""
    x = dp - 1
    if x < -4 or x >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"
    if dp <= 0:
        return f"{neg}0.{'0' * -dp}{ds}"
    return neg + (ds[:dp] + "0" * (dp - len(ds)) + ("." + ds[dp:] if len(ds) > dp else ""))


def env_string(value) -> str:
    """A setting (an `env`, `dflash` or `fetch_env` entry) as the Helm chart writes it (lucebox.envString in
    templates/helm/lucebox/templates/_helpers.tpl), so render and helm give the same pods: true/false; a whole
    number as an integer (helm reads a values file's numbers as float64, whose %v is 1.048576e+06 for 1048576);
    another float as Go prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value == value and abs(value) < 2 ** 63 and value == int(value):
            return str(int(value))
        return _go_float(value)
    return str(value)


def _set_value(raw: str):
    """A --set value as helm's strvals types it: true/false/null in any case, an integer without a leading zero,
    else the text itself (helm keeps 1.0 or 13.10 as text); JSON lists and objects are read as JSON."""
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "null":
        return None
    if raw == "0" or (re.fullmatch(r"[+-]?[1-9][0-9]*", raw) and -2 ** 63 <= int(raw) < 2 ** 63):
        return int(raw)
    if raw.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def parse_set(items: tuple[str, ...] | list[str]) -> dict:
    """``key=value`` pairs; the value typed as ``helm --set`` types it (_set_value), lists and objects as JSON.

    ``labels.team=ml`` sets one key of a dict value, as ``helm --set`` does, so the same ``--set``
    arguments render the same objects through ``render k8s`` and through the Helm chart."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--set {item!r} must look like key=value")
        key, raw = item.split("=", 1)
        val = _set_value(raw)
        *parents, leaf = [k.strip() for k in key.split(".")]
        node = out
        for k in parents:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise UsageError(f"--set {item!r}: {k} is not a mapping")
        node[leaf] = val
    return out


def resolve(set_name: str, *overrides: dict) -> dict:
    schema = SCHEMAS[set_name]
    values = defaults(schema)
    for ov in overrides:
        for key, val in (ov or {}).items():
            if key not in schema:
                raise UsageError(f"unknown value {key!r} for {set_name}: known are {', '.join(sorted(schema))}")
            if schema[key].json_type() == "string" and isinstance(val, (int, float)) and not isinstance(val, bool):
                val = str(val)  # a string value given as a number (--set image_cuda=13.0), as Helm keeps it
            if isinstance(val, dict) and isinstance(values.get(key), dict) and set_name in LUCEBOX_SETS:
                values[key] = {**values[key], **val}  # as Helm merges maps: --set labels.a=1 adds a key
            else:
                values[key] = val
    if "dflash" in schema and isinstance(values.get("env"), dict) and entrypoint.clash(values["env"]):
        raise UsageError(entrypoint.clash(values["env"]))  # before the schema's check: this says where it goes
    check(set_name, values)
    return values


def describe(set_name: str) -> list[dict]:
    return [{"key": k, "default": v.default, "doc": v.doc} for k, v in SCHEMAS[set_name].items()]
