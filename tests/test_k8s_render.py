"""Rendered manifests: strict schema validation on pinned Kubernetes versions + client models."""

from __future__ import annotations

import json

import pytest

from lucepatch.errors import UsageError
from lucepatch.k8s import jobs, manifests, swap, values, validate

pytest.importorskip("yaml")
pytest.importorskip("kubernetes")
pytest.importorskip("kubernetes_validate")

SHA = "ab" * 32
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "lucepatch-run-r1", "uid": "0d6c1a2e-1111-2222-3333-444455556666"}

CASES = {
    "lucebox-defaults": ("lucebox", {}),
    "lucebox-olares": ("lucebox", {"olares_gpu_inject": True, "gpu_mem_mib": 23000, "gpu_cores": 100,
                                   "cuda_device_memory_limit": "24000m", "scheduler_name": "hami-scheduler",
                                   "model_cache_storage_class": "local-path", "cpu_limit": "8",
                                   "env": {"LUCE_LOG": "1"}, "node_selector": {"gpu": "on"},
                                   "labels": {"team": "ml"}, "service_type": "NodePort"}),
    "lucebox-hostpath-no-token": ("lucebox", {"model_cache_host_path": "/var/lib/models", "hf_token_secret": None,
                                              "memory_limit": None}),
    "lucebox-emptydir": ("lucebox", {"model_cache_pvc": False}),
    "rbac": ("rbac", {}),
    "rbac-no-sa": ("rbac", {"create_service_account": False, "namespace": "ml"}),
    "swap-install": ("hami-core-swap", {"lib_image": "registry.local/hami-core-fix:1", "lib_sha256": SHA,
                                        "reassert_seconds": 60}),
    "swap-rollback": ("hami-core-swap", {"action": "rollback"}),
    "verify-init-container": ("verify-job", {"run_id": "2026-07-01T12:00Z", "lib_image": "registry.local/lib:1",
                                             "lib_sha256": SHA, "node": "gpu-node-1", "gpu_mem_mib": 4000,
                                             "scheduler_name": "hami-scheduler", "owner": OWNER,
                                             "service_account": "lucepatch"}),
    "verify-image-lib": ("verify-job", {"run_id": "r2", "variant": "baseline"}),
    "bench-defaults": ("bench-job", {}),
    "bench-torch-one-node": ("bench-job", {"workload": "decode-torch", "tenants": None, "modes": ["graph"],
                                           "sm_limits": [30, 50], "node": "gpu-node-1", "scheduler_name": "hami-scheduler",
                                           "host_lib_dir": "/var/lib/hami/vgpu"}),
}


def _objects(set_name, overrides):
    vals = values.resolve(set_name, overrides)
    docs = manifests.render_verify_jobs(vals) if set_name == "verify-job" else manifests.render(set_name, vals)
    return manifests.to_objects(docs)


ALL = {case: _objects(*spec) for case, spec in CASES.items()}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("version", [f"1.{m}.0" for m in range(25, 38)])  # what kubernetes-validate 1.37 ships
def test_strict_schema(case, version):
    assert validate.strict_validate(ALL[case], [version]) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_builds_client_models(case):
    models = validate.build_models(ALL[case])
    assert len(models) == len(ALL[case])


def test_validation_can_fail():
    dep = next(o for o in ALL["lucebox-defaults"] if o["kind"] == "Deployment")
    bad = json.loads(json.dumps(dep))
    bad["spec"]["template"]["spec"]["containers"][0]["startupprobe"] = {}
    assert validate.strict_validate([bad], ["1.31.0"])
    with pytest.raises(Exception):
        validate.build_models([bad])
    bad2 = json.loads(json.dumps(dep))
    bad2["spec"]["replicas"] = "one"
    assert validate.strict_validate([bad2], ["1.29.0"])


def _by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def test_lucebox_content():
    d = _by_kind(ALL["lucebox-olares"], "Deployment")[0]
    pod = d["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"applications.app.bytetrade.io/gpu-inject": "true"}
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["resources"]["limits"]["nvidia.com/gpumem"] == "23000"
    env = {e["name"]: e for e in c["env"]}
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"]["value"] == "24000m"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token", "optional": True}
    assert c["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 1800
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["ports"][0]["containerPort"] == 8080
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    assert d["metadata"]["labels"]["team"] == "ml"
    dflt = _by_kind(ALL["lucebox-defaults"], "Deployment")[0]["spec"]["template"]
    (init,) = dflt["spec"]["initContainers"]  # the download runs before the server's startup probe
    assert {"name": "DOWNLOAD_ONLY", "value": "1"} in init["env"]
    assert init["image"] == dflt["spec"]["containers"][0]["image"]
    assert init["volumeMounts"] == dflt["spec"]["containers"][0]["volumeMounts"]
    assert "annotations" not in dflt["metadata"]
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in {e["name"] for e in dflt["spec"]["containers"][0]["env"]}
    assert dflt["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "lucebox-models"
    assert _by_kind(ALL["lucebox-hostpath-no-token"], "PersistentVolumeClaim") == []
    svc = _by_kind(ALL["lucebox-defaults"], "Service")[0]
    assert set(svc["spec"]["selector"].items()) <= set(dflt["metadata"]["labels"].items())


def test_rbac_is_minimal():
    objs = ALL["rbac"]
    cr = _by_kind(objs, "ClusterRole")[0]
    assert cr["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    for role in _by_kind(objs, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert "secrets" not in rule["resources"]


def test_verify_jobs():
    objs = ALL["verify-init-container"]
    assert [o["metadata"]["labels"]["lucepatch.dev/variant"] for o in objs] == ["baseline", "patched"]
    names = [o["metadata"]["name"] for o in objs]
    assert len(set(names)) == 2 and all(len(n) <= 63 for n in names)
    job = objs[1]
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600
    assert job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["ownerReferences"][0]["uid"] == OWNER["uid"]
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1"}
    assert pod["initContainers"][0]["image"] == "registry.local/lib:1"
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CUDA_DISABLE_CONTROL"] == "true"
    assert env["LUCEPATCH_LIB"] == "/lucepatch/variant/libvgpu.so"
    assert env["LUCEPATCH_LIB_SHA256"] == SHA
    assert c["command"][:3] == ["sh", "-c", jobs.RUNNER_SCRIPT]
    assert c["command"][4:] == ["/lucepatch/bin/reproducer"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
    img = ALL["verify-image-lib"][0]["spec"]["template"]["spec"]
    assert "initContainers" not in img and "serviceAccountName" not in img


def test_swap_daemonset_carries_the_script():
    cm = _by_kind(ALL["swap-install"], "ConfigMap")[0]
    assert cm["data"]["hami-core-swap.sh"] == swap.script_text()
    ds = _by_kind(ALL["swap-install"], "DaemonSet")[0]
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["securityContext"]["privileged"] is True
    host = next(v for v in pod["volumes"] if v["name"] == "host-lib-dir")
    assert host["hostPath"] == {"path": "/usr/local/vgpu", "type": "Directory"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SWAP_SHA256"] == SHA and env["SWAP_ACTION"] == "install"
    assert pod["initContainers"][0]["image"] == "registry.local/hami-core-fix:1"
    rb = _by_kind(ALL["swap-rollback"], "DaemonSet")[0]["spec"]["template"]["spec"]
    assert "initContainers" not in rb


def test_swap_install_requires_lib_and_sha():
    with pytest.raises(UsageError):
        manifests.render("hami-core-swap", values.resolve("hami-core-swap", {"lib_image": "x"}))
    with pytest.raises(UsageError):
        manifests.render("hami-core-swap", values.resolve("hami-core-swap", {"lib_sha256": SHA}))


def test_unknown_value_rejected():
    with pytest.raises(UsageError, match="unknown value 'gpu_mem'"):
        values.resolve("lucebox", {"gpu_mem": 1})


def test_hostile_values_cannot_inject_yaml():
    objs = _objects("lucebox", {"name": "x", "image": 'evil"\nkind: Secret', "env": {"A": "b\n---\nkind: Secret"}})
    assert [o["kind"] for o in objs] == ["PersistentVolumeClaim", "Deployment", "Service"]
    c = _by_kind(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == 'evil"\nkind: Secret'


def test_every_value_documented():
    for name, schema in values.SCHEMAS.items():
        for key, v in schema.items():
            assert v.doc and len(v.doc) > 10, (name, key)


def test_cli_render_out_json_and_values(tmp_path, capsys):
    from lucepatch.main import main

    vf = tmp_path / "v.yaml"
    vf.write_text("gpu_mem_mib: 23000\nolares_gpu_inject: true\n")
    assert main(["render", "k8s", "lucebox", "--values", str(vf), "--set", "cuda_device_memory_limit=24000m",
                 "--out", str(tmp_path / "out"), "--json", "--validate", "1.29,1.31"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and (tmp_path / "out" / "lucebox.yaml").is_file()
    dep = next(o for o in doc["objects"] if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "24000m"
    assert main(["render", "k8s", "verify-job", "--set", "run_id=r9", "--out", str(tmp_path / "jobs")]) == 0
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == ["kustomization.yaml", "verify-job-baseline.yaml",
                                                                 "verify-job-patched.yaml"]
    assert main(["render", "k8s", "daemonset", "--show-values", "--json"]) == 0
    keys = {r["key"] for r in json.loads(capsys.readouterr().out)["values"]}
    assert {"host_lib_dir", "lib_sha256", "reassert_seconds"} <= keys
    assert main(["render", "k8s", "lucebox", "--set", "nope=1"]) == 2


def test_bench_job_runs_the_bench_on_the_nodes_library():
    job = ALL["bench-torch-one-node"][0]
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"][:4] == ["lucepatch", "bench", "--lib", "/lucepatch/node-vgpu/libvgpu.so"]
    assert c["command"][c["command"].index("--workload") + 1] == "decode-torch"
    assert "--no-tenants" in c["command"] and c["command"].count("--sm-limit") == 2
    assert {e["name"]: e["value"] for e in c["env"]}["CUDA_DISABLE_CONTROL"] == "true"
    assert pod["volumes"][0]["hostPath"]["path"] == "/var/lib/hami/vgpu"
    assert c["volumeMounts"][0]["readOnly"] is True
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1"}


@pytest.mark.parametrize("bad,why", [({"workload": "llama"}, "workload must be"), ({"sm_limits": [100]}, "1..99"),
                                     ({"tenants": [30]}, "two integers"), ({"lib_name": "../x.so"}, "file name"),
                                     ({"modes": []}, "modes must be")])
def test_bench_job_refuses_what_bench_would(bad, why):
    with pytest.raises(UsageError, match=why):
        manifests.render("bench-job", values.resolve("bench-job", bad))
