"""The vendored Lucebox line (Luce-Org/lucebox 62880e2) on Kubernetes: `render k8s|helm|olares lucebox-vendored`.

The image is upstream's own (its Dockerfile, built by `build lucebox-vendored --image`), so the pod talks to
upstream's entrypoint (server/scripts/entrypoint.sh): DFLASH_* variables, models under
/opt/lucebox-hub/server/models, no download of its own. Checked here with the real helm and kubectl:

- `helm lint --strict` on the chart and the Olares app; every `helm template ... charts-vendored/lucebox` line of
  docs/cluster.md renders the objects `render k8s lucebox-vendored` renders for the same `--set`, and they
  validate strictly against Kubernetes 1.25-1.37; `kubectl kustomize` takes a `render k8s --out` folder;
- the server container's environment holds only names upstream's entrypoint reads (the list in
  lucepatch/data/lucebox_entrypoint.toml; against the real script where LUCEPATCH_SRC_LUCEBOX_VENDORED or
  LUCEPATCH_SRC_LUCEBOX holds 62880e2), and the real entrypoint, given that environment, starts the server
  on the chart's port, target and draft;
- the fetch-models script calls `hf download` as upstream's README does;
- helm and `render` refuse the same values; the Olares app passes Olares' lint with what helm renders.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import needs
from lucepatch.builders.image import image_profile, image_tag
from lucepatch.k8s import chart, entrypoint, manifests, olares, validate, values
from lucepatch.target import load_target_dir

yaml = pytest.importorskip("yaml")
pytest.importorskip("kubernetes_validate")

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "cluster.md"
K8S_VERSIONS = [f"1.{m}.0" for m in range(25, 38)]
# per docs line, the oldest, a middle and the newest schema (the 8305b6c chart's test covers every version for the
# shared templates; the Olares objects here go through all of them)
K8S_ENDS = ["1.25.0", "1.31.0", "1.37.0"]
SET = "lucebox-vendored"
TEMPLATE_LINE = "helm template lucebox charts-vendored/lucebox"
pytestmark = pytest.mark.needs("helm")


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def _docs_lines(prefix: str) -> list[str]:
    out, fenced = [], False
    for line in DOCS.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced and line.strip().startswith(prefix):
            out.append(line.strip())
    return out


def _objs(text: str) -> list[dict]:
    return sorted((o for o in yaml.safe_load_all(text) if o), key=lambda o: (o["kind"], o["metadata"]["name"]))


def _sets(line: str) -> list[str]:
    args = shlex.split(line)
    return [args[i + 1] for i, a in enumerate(args) if a == "--set"]


def _deployment(objs) -> dict:
    return next(o for o in objs if o["kind"] == "Deployment")


def _render(overrides: dict | None = None) -> list[dict]:
    return manifests.to_objects(manifests.render(SET, values.resolve(SET, overrides or {})))


def _container(objs, name: str) -> dict:
    pod = _deployment(objs)["spec"]["template"]["spec"]
    return next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name)


@pytest.fixture(scope="module")
def charts(tmp_path_factory):
    base = tmp_path_factory.mktemp("charts-vendored")
    helm_chart = chart.render_helm(base / "charts", {}, set_name=SET)
    pkg = olares.render_olares(base / "olares", {}, set_name=SET)
    return {"helm": helm_chart.path, "olares": pkg.path, "injected": pkg.injected}


# ---------------------------------------------------------------------------------- the chart
def test_the_docs_show_the_vendored_packages():
    assert len(_docs_lines(TEMPLATE_LINE)) >= 3
    assert {shlex.split(c)[3] for c in _docs_lines("helm lint") if "-vendored" in c} == {
        "charts-vendored/lucebox", "olares-vendored/lucebox"}
    assert _docs_lines("lucepatch render helm lucebox-vendored --out charts-vendored")
    assert _docs_lines("lucepatch render olares lucebox-vendored --out olares-vendored")


def test_helm_lint_strict(charts):
    helm = needs.tool("helm")
    where = {"charts-vendored/lucebox": charts["helm"], "olares-vendored/lucebox": charts["olares"],
             "olares-vendored/lucebox.olares-values.json": charts["injected"]}
    for cmd in [c for c in _docs_lines("helm lint") if "-vendored" in c]:
        r = _run([helm, *[str(where.get(a, a)) for a in shlex.split(cmd)[1:]]])
        assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, (cmd, r.stdout + r.stderr)
    for line in _docs_lines(TEMPLATE_LINE):
        r = _run([helm, "lint", "--strict", str(charts["helm"]), *[x for s in _sets(line) for x in ("--set", s)]])
        assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, (line, r.stdout + r.stderr)


def test_chart_metadata_names_the_line_and_the_image_build_tags(charts):
    ch = yaml.safe_load((charts["helm"] / "Chart.yaml").read_text())
    target = load_target_dir(REPO / "patches" / SET)
    assert ch["name"] == "lucebox" and ch["version"] == chart.CHART_VERSION and ch["appVersion"] == target.version
    assert ch["annotations"]["lucepatch.dev/line"] == SET and ch["home"] == target.upstream
    # the default image is the tag `build lucebox-vendored --image` gives its default profile, and its CUDA the
    # profile's CUDA_VERSION build argument (the FROM of upstream's Dockerfile)
    pname, profile = image_profile(target, None)
    assert values.LUCEBOX_VENDORED_IMAGE == image_tag(target, pname, None) == ch["annotations"]["lucepatch.dev/image"]
    assert values.LUCEBOX_VENDORED["image_cuda"].default == ".".join(profile["build_args"]["CUDA_VERSION"].split(".")[:2])
    vals = yaml.safe_load((charts["helm"] / "values.yaml").read_text())
    assert vals == {**values.resolve(SET), "namespace": ""}
    schema = json.loads((charts["helm"] / "values.schema.json").read_text())
    assert set(schema["properties"]) == set(values.LUCEBOX_VENDORED) | {"workloads"}
    assert schema["properties"]["dflash"]["propertyNames"] == {"enum": entrypoint.settings()}
    assert (charts["helm"] / "files" / "fetch-models.sh").read_text() == manifests.FETCH_MODELS_SCRIPT
    assert (charts["helm"] / "templates" / "_line.tpl").read_text() == (
        REPO / "lucepatch/templates/helm/lucebox/lines/lucebox-vendored.tpl").read_text()


@pytest.mark.parametrize("line", _docs_lines(TEMPLATE_LINE))
def test_helm_template_renders_what_render_k8s_renders(charts, line):
    helm = needs.tool("helm")
    sets = _sets(line)
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "-n", "lucebox", *[x for s in sets for x in ("--set", s)]])
    assert r.returncode == 0, r.stderr
    from_helm = _objs(r.stdout)
    assert from_helm == _objs(manifests.join(manifests.render(SET, values.resolve(SET, values.parse_set(sets)))))
    assert validate.strict_validate(from_helm, K8S_ENDS) == []
    pod = _deployment(from_helm)["spec"]["template"]["spec"]
    # the old chart's rules hold: non-root pod, fsGroup for a fresh volume, the probes on the server's port
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    server = pod["containers"][0]
    for probe in ("startupProbe", "readinessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}
    env = {e["name"]: e.get("value") for e in server["env"]}
    assert env["DFLASH_PORT"] == str(server["ports"][0]["containerPort"])
    assert all(m["mountPath"] == values.UPSTREAM_MODELS for m in server["volumeMounts"])


def test_a_values_file_number_reaches_the_server_as_written(charts, tmp_path):
    """helm reads a values file's numbers as float64 (1048576 would print as 1.048576e+06): the chart
    writes them as `render k8s` does."""
    helm = needs.tool("helm")
    f = tmp_path / "v.yaml"
    f.write_text("dflash:\n  DFLASH_MAX_CTX: 1048576\n  DFLASH_PREFILL_KEEP: 0.05\n")
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "-n", "lucebox", "-f", str(f)])
    assert r.returncode == 0, r.stderr
    assert _objs(r.stdout) == _objs(manifests.join(manifests.render(SET, values.resolve(SET, values.load_file(f)))))
    env = {e["name"]: e.get("value") for e in _container(_objs(r.stdout), "server")["env"]}
    assert env["DFLASH_MAX_CTX"] == "1048576" and env["DFLASH_PREFILL_KEEP"] == "0.05"


def test_env_and_fetch_env_reach_the_pods_as_written(charts, tmp_path):
    """`env` and `fetch_env` go through lucebox.envString too (they printed 1.048576e+06 through helm and True
    through render): both routes write 1048576 and true."""
    helm = needs.tool("helm")
    f = tmp_path / "v.yaml"
    f.write_text("env:\n  DFLASH27B_KV_TEST: 1048576\nfetch_env:\n  HF_HUB_ETAG_TIMEOUT: 1048576\n")
    sets = ["env.LUCEPATCH_FLAG=true"]
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "-n", "lucebox", "-f", str(f), "--set", sets[0]])
    assert r.returncode == 0, r.stderr
    objs = _objs(r.stdout)
    assert objs == _objs(manifests.join(manifests.render(SET, values.resolve(SET, values.load_file(f),
                                                                                 values.parse_set(sets)))))
    env = {e["name"]: e.get("value") for e in _container(objs, "server")["env"]}
    assert env["DFLASH27B_KV_TEST"] == "1048576" and env["LUCEPATCH_FLAG"] == "true"
    fetch = {e["name"]: e.get("value") for e in _container(objs, "fetch-models")["env"]}
    assert fetch["HF_HUB_ETAG_TIMEOUT"] == "1048576"


def test_kubectl_kustomize_takes_the_rendered_folder(tmp_path, cli):
    kubectl = needs.tool("kubectl")
    assert cli("render", "k8s", SET, "--set", "port=9000", "--out", str(tmp_path / "m")).code == 0
    r = _run([kubectl, "kustomize", str(tmp_path / "m")])
    assert r.returncode == 0, r.stderr
    assert _objs(r.stdout) == _objs(manifests.join(manifests.render(SET, values.resolve(SET, {"port": 9000}))))


BAD = {  # value -> what both helm and render say
    "dflash.DFLASH_MAXCTX=1": "DFLASH_MAXCTX",  # a typo the entrypoint would ignore
    "dflash.DFLASH_VERBOSE=1": "DFLASH_VERBOSE",  # read, defaulted, never used at 62880e2
    "env.DFLASH_PORT=9000": "DFLASH_PORT",  # the chart's (port)
    "fetch_env.HF_HOME=/x": "HF_HOME",
    "model_draft_file=null": "model_draft_repo and model_draft_file go together",
    "model_target_file=null": "model_download_init fetches model_target_file",
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_helm_and_render_refuse_the_same_values(charts, cli, bad):
    helm = needs.tool("helm")
    r = _run([helm, "template", "lucebox", str(charts["helm"]), "--set", bad])
    assert r.returncode != 0 and BAD[bad] in r.stderr, r.stderr
    r = cli("render", "k8s", SET, "--set", bad)
    assert r.code == 2 and BAD[bad] in r.err, r.err


def test_an_entrypoint_setting_in_env_is_pointed_to_dflash(cli):
    r = cli("render", "k8s", SET, "--set", "env.DFLASH_MAX_CTX=32768")
    assert r.code == 2 and "set it as dflash.DFLASH_MAX_CTX" in r.err


# ---------------------------------------------------------------------------------- upstream's entrypoint
def test_the_server_environment_is_what_upstreams_entrypoint_reads():
    """Every setting set, the HAMi override and an extra: the names the chart puts in the server container
    are the entrypoint's (chart and setting roles) and HAMi's CUDA_DEVICE_MEMORY_LIMIT_0, nothing else of
    its own; the fetch container gets only huggingface_hub's."""
    settings = {n: "1" for n in entrypoint.settings()}
    objs = _render({"dflash": settings, "cuda_device_memory_limit": "24000m"})
    names = [e["name"] for e in _container(objs, "server")["env"]]
    assert len(names) == len(set(names))
    assert set(names) == set(entrypoint.names("chart", "setting")) | {"CUDA_DEVICE_MEMORY_LIMIT_0"}
    assert not set(names) & set(entrypoint.names("image", "unused", "host"))
    fetch = [e["name"] for e in _container(objs, "fetch-models")["env"]]
    assert fetch == ["HF_HOME", "HF_TOKEN"]
    # with defaults: the port, the target and the draft, as upstream's README lays the models out
    env = {e["name"]: e["value"] for e in _container(_render(), "server")["env"]}
    assert env == {"DFLASH_PORT": "8080", "DFLASH_TARGET": f"{values.UPSTREAM_MODELS}/Qwen3.6-27B-Q4_K_M.gguf",
                   "DFLASH_DRAFT": f"{values.UPSTREAM_MODELS}/draft"}


def entrypoint_inputs(text: str) -> set[str]:
    """The variables a shell script takes from its environment: read as ${NAME:-...} / ${NAME:=...} where
    the script has not assigned NAME before (NAME="${NAME:-x}" counts as read)."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    firsts: dict[str, tuple[int, str]] = {}
    for m in re.finditer(r"(?:^|[;\s(])(?:local\s+|export\s+)?([A-Za-z_]\w*)=(\S*)", code, re.M):
        firsts.setdefault(m.group(1), (m.start(), m.group(2)))
    out = set()
    for name in set(re.findall(r"\$\{([A-Za-z_]\w*):?[-=]", code)):
        first = firsts.get(name)
        if first is None or first[0] > code.find("${" + name) or "${" + name in first[1]:
            out.add(name)
    return out


def _uses(text: str, name: str) -> int:
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return sum(len(re.findall(rf"\b{name}\b", line)) for line in code)


@pytest.fixture(scope="module")
def upstream_entrypoint() -> str:
    d = entrypoint.data()
    for var in ("LUCEPATCH_SRC_LUCEBOX_VENDORED", "LUCEPATCH_SRC_LUCEBOX"):
        src = os.environ.get(var)
        if src:
            r = _run(["git", "-C", src, "show", f"{d['base']}:{d['source']}"])
            if r.returncode == 0:
                return r.stdout
    pytest.skip(f"no-upstream: neither LUCEPATCH_SRC_LUCEBOX_VENDORED nor LUCEPATCH_SRC_LUCEBOX holds Luce-Org/lucebox "
                f"{d['base'][:7]} ({d['source']})")


def test_the_name_list_is_upstreams(upstream_entrypoint):
    """lucepatch/data/lucebox_entrypoint.toml against the real script: the same names, and each role as the
    script uses it (an unused name appears once, in its default; the others are read again)."""
    text = upstream_entrypoint
    assert entrypoint_inputs(text) == set(entrypoint.names())
    for name in entrypoint.names():
        role = entrypoint.data()["vars"][name]["role"]
        if role == "unused":
            assert _uses(text, name) == 1, name
        elif role == "host":
            assert name.startswith("LUCEBOX_HOST_"), name  # read once, into HOST_INFO
        else:
            assert _uses(text, name) >= 2, name
    # the parser does not just echo the list: it finds a variable a script adds, ignores one it assigns first
    assert entrypoint_inputs(': "${NEW_KNOB:=1}"\nX=1\necho "${X:-2}"\n') == {"NEW_KNOB"}


def _stub(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return path


def test_upstreams_entrypoint_starts_the_server_with_the_rendered_environment(upstream_entrypoint, tmp_path):
    """The real entrypoint, run with the server container's environment (the model folder moved to a scratch
    one), execs the server with the chart's port, target and draft; a setting beats its VRAM autotune, and
    without one the autotune stays. A stand-in dflash_server records its arguments; a stand-in nvidia-smi
    reports a 24 GB card. The only edit to the script: HOST_INFO goes to the scratch folder, not /opt."""
    text = upstream_entrypoint
    host_info = 'local target="/opt/lucebox-hub/HOST_INFO"'
    assert text.count(host_info) == 1
    script = tmp_path / "entrypoint.sh"
    script.write_text(text.replace(host_info, f'local target="{tmp_path}/HOST_INFO"'))
    server_dir = tmp_path / "server"  # stands in for the image's /opt/lucebox-hub/server
    models = server_dir / "models"
    (models / "draft").mkdir(parents=True)
    (models / "Qwen3.6-27B-Q4_K_M.gguf").write_bytes(b"GGUF")
    (models / "draft" / "dflash-draft-3.6-q4_k_m.gguf").write_bytes(b"GGUF")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir / "nvidia-smi", 'case "$*" in *memory.total*) echo 24576;; -L) echo "GPU 0: stand-in";; esac\n')
    argv_file = tmp_path / "argv"
    server = _stub(tmp_path / "dflash_server", f'printf "%s\\n" "$@" > {argv_file}\n')

    def run(dflash: dict) -> list[str]:
        vals = {"port": 9000, "model_cache_mount": str(models), "dflash": dflash}
        env = {e["name"]: e["value"] for e in _container(_render(vals), "server")["env"]}
        image_env = {"DFLASH_DIR": str(server_dir), "DFLASH_SERVER_BIN": str(server), "DFLASH_HOST": "0.0.0.0"}
        r = _run(["bash", str(script)], env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path),
                                             **image_env, **env})
        assert r.returncode == 0, r.stdout + r.stderr
        return argv_file.read_text().splitlines()

    def arg(argv, flag):
        return argv[argv.index(flag) + 1]

    argv = run({"DFLASH_MAX_CTX": 32768, "DFLASH_BUDGET": 16})
    assert argv[0] == str(models / "Qwen3.6-27B-Q4_K_M.gguf")
    assert arg(argv, "--port") == "9000" and arg(argv, "--host") == "0.0.0.0"
    assert arg(argv, "--draft") == str(models / "draft" / "dflash-draft-3.6-q4_k_m.gguf")
    assert arg(argv, "--max-ctx") == "32768" and arg(argv, "--ddtree-budget") == "16"
    assert arg(run({}), "--max-ctx") == "98304"  # the entrypoint's 22-32 GB tier, when the chart sets none


# ---------------------------------------------------------------------------------- fetch-models
def test_fetch_models_calls_hf_download_as_upstreams_readme_does(tmp_path):
    """The init container's script with its rendered arguments, the image's hf replaced by a stand-in:
    `hf download REPO FILE --local-dir server/models/` and the draft into models/draft/ (upstream's README),
    one call without a draft, and a failed download fails the container."""
    calls = tmp_path / "calls"
    hf = _stub(tmp_path / "hf", f'echo "$*" >> {calls}\nexit "${{HF_STUB_RC:-0}}"\n')

    def run(vals, rc=0):
        args = _container(_render(vals), "fetch-models")["args"]
        assert args[:2] == ["bash", "-c"] and args[2] == manifests.FETCH_MODELS_SCRIPT
        assert manifests.FETCH_MODELS_SCRIPT.count(values.UPSTREAM_HF) == 1
        calls.unlink(missing_ok=True)
        r = _run(["bash", "-c", args[2].replace(values.UPSTREAM_HF, str(hf)), *args[3:]],
                 env={"PATH": os.environ["PATH"], "HF_STUB_RC": str(rc)})
        return r, calls.read_text().splitlines() if calls.exists() else []

    r, got = run({})
    m = values.UPSTREAM_MODELS
    assert r.returncode == 0 and got == [
        f"download unsloth/Qwen3.6-27B-GGUF Qwen3.6-27B-Q4_K_M.gguf --local-dir {m}",
        f"download Lucebox/Qwen3.6-27B-DFlash-GGUF dflash-draft-3.6-q4_k_m.gguf --local-dir {m}/draft"], r.stderr
    r, got = run({"model_draft_repo": None, "model_draft_file": None})
    assert r.returncode == 0 and len(got) == 1
    r, got = run({}, rc=1)
    assert r.returncode != 0 and len(got) == 1


# ---------------------------------------------------------------------------------- Olares
def _olares_objects(charts) -> list[dict]:
    helm = needs.tool("helm")
    r = _run([helm, "template", "lucebox", str(charts["olares"]), "-n", "app-namespace", "-f", str(charts["injected"])])
    assert r.returncode == 0, r.stderr
    return _objs(r.stdout)


def test_the_olares_app_passes_the_lint_with_what_helm_renders(charts):
    objs = _olares_objects(charts)
    assert olares.lint(charts["olares"], objects=objs) == []
    pkg_vals = yaml.safe_load((charts["olares"] / "values.yaml").read_text())
    assert objs == _objs(yaml.safe_dump_all(olares.objects_for(pkg_vals, set_name=SET)))
    assert validate.strict_validate(objs, K8S_VERSIONS) == []
    m = yaml.safe_load((charts["olares"] / "OlaresManifest.yaml").read_text())
    assert m["olaresManifest.version"] == "0.12.0" and m["apiVersion"] == "v3" and m["workloadReplicas"] == {"lucebox": 1}
    assert m["spec"]["sourceCode"] == "https://github.com/Luce-Org/lucebox" and m["metadata"]["version"] == chart.CHART_VERSION
    dep = _deployment(objs)
    pod = dep["spec"]["template"]["spec"]
    assert dep["metadata"]["annotations"]["applications.app.bytetrade.io/gpu-inject"] == "true"
    server, fetch = _container(objs, "server"), _container(objs, "fetch-models")
    assert server["image"] == values.LUCEBOX_VENDORED_IMAGE
    assert server["resources"]["limits"]["nvidia.com/gpumem"] == "22528"
    assert pod["volumes"][0]["hostPath"]["path"] == "/olares/userdata/Cache/appdata/lucebox/models"
    assert _container(objs, "prepare-cache")["image"] == olares.PREPARE_IMAGE
    # Olares' Hugging Face token and endpoint go to the container that downloads, not to the server
    assert {e["name"]: e.get("value") for e in fetch["env"]}["HF_ENDPOINT"] == "https://huggingface.co"
    assert not [e for e in server["env"] if e["name"].startswith("HF_")]


def test_the_old_line_keeps_its_own_chart(tmp_path):
    """`render helm lucebox` still writes the 8305b6c line's chart (its image, MODEL_DIR/PORT entrypoint)."""
    w = chart.render_helm(tmp_path, {})
    ch = yaml.safe_load((w.path / "Chart.yaml").read_text())
    assert ch["annotations"]["lucepatch.dev/line"] == "lucebox" and ch["annotations"]["lucepatch.dev/image"] == \
        values.LUCEBOX_IMAGE
    assert not (w.path / "files" / "fetch-models.sh").exists()
    old = load_target_dir(REPO / "patches" / "lucebox")
    assert values.LUCEBOX_IMAGE == image_tag(old, image_profile(old, None)[0], None)
    env = [e["name"] for e in _container(manifests.to_objects(manifests.render("lucebox", values.resolve("lucebox"))),
                                         "server")["env"]]
    assert env[:2] == ["MODEL_DIR", "PORT"]


# ---------------------------------------------------------------------------------- the GPU step
def test_the_gpu_step_runs_the_rendered_server_env_through_upstreams_entrypoint(upstream_entrypoint, tmp_path):
    """tools/gpu_session.sh lbv-chart off the GPU (DRIVER=fake: a stand-in server, said in the JSON): the
    rendered environment through the real entrypoint, as uid 10001 where this runs as root, and GET /health."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ep = tmp_path / "entrypoint.sh"
    ep.write_text(upstream_entrypoint)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "DRIVER": "fake", "LBV_ENTRYPOINT": str(ep),
           "LBV_CHART_PORT": str(port), "PYTHONPATH": str(REPO)}
    r = subprocess.run(["bash", "tools/gpu_session.sh", "lbv-chart"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "out" / "commit" / "chart-entrypoint.fake.json").read_text())
    assert doc["health"]["status"] == 200 and doc["server_is_elf"] is False
    assert doc["uid"] == (10001 if os.getuid() == 0 else os.getuid())
    argv = doc["server_argv"]
    assert argv[argv.index("--port") + 1] == str(port) and argv[argv.index("--max-ctx") + 1] == "512"
    assert set(doc["rendered_env"]) == {"DFLASH_PORT", "DFLASH_TARGET", "DFLASH_MAX_CTX"}
