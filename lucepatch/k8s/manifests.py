"""Render the cluster manifests from jinja2 templates (lucepatch/templates/k8s/*.yaml.j2).

Sets: ``lucebox`` (Deployment, Service, PVC; the 8305b6c line's image), ``lucebox-vendored`` (the same
objects for the vendored line's image: upstream's entrypoint and its DFLASH_* variables), ``rbac`` (what
lucepatch itself needs), ``verify-job`` (one Job per variant), ``hami-core-swap`` (ConfigMap + privileged
DaemonSet), ``bench-job`` (`lucepatch bench` against the node's own libvgpu.so, issue 38).
Every scalar is emitted through the ``q`` filter (JSON, which is valid YAML), so values can
never break the document structure. Rendering needs only jinja2; ``to_objects`` parses with PyYAML.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import jinja2

from lucepatch.errors import UsageError
from lucepatch.k8s import entrypoint, jobs, swap, values

SETS = ("lucebox", "lucebox-vendored", "rbac", "verify-job", "hami-core-swap", "bench-job")
VARIANTS = ("baseline", "patched")

# The lucebox `prepare-cache` init container (root): make a hostPath cache folder the image user's.
# busybox sh/find/chown/chmod suffice (Olares' trusted busybox image runs it there).
PREPARE_CACHE_SCRIPT = r"""
set -eu
d="$CACHE_DIR"
mkdir -p "$d"
find "$d" -xdev ! -user "$CACHE_UID" -exec chown "$CACHE_UID:$CACHE_GID" {} +
chmod u+rwx "$d"
echo "prepare-cache: $d is owned by $CACHE_UID:$CACHE_GID"
""".strip() + "\n"

# The lucebox-vendored `fetch-models` init container: upstream's entrypoint passes a command it does not know
# to exec, so `bash -c` runs here with the image's own `hf` (its venv); the values arrive as arguments
# ($1 folder, $2/$3 target repository and file, $4/$5 draft repository and file, empty = no draft). `hf
# download --local-dir` resumes a partial file and skips a complete one.
FETCH_MODELS_SCRIPT = r"""
set -eu
hf={hf}
"$hf" download "$2" "$3" --local-dir "$1"
if [ -n "$4" ]; then
  "$hf" download "$4" "$5" --local-dir "$1/draft"
fi
echo "fetch-models: $1/$3 present${{4:+, draft $1/draft/$5}}"
""".strip().format(hf=values.UPSTREAM_HF) + "\n"

# The DaemonSet container: run the swap once, print its exit code, then idle (or re-assert).
SWAP_LOOP = r"""
run_swap() {
  if [ "$SWAP_ACTION" = install ]; then
    bash /lucepatch/bin/hami-core-swap.sh install --dir /host/vgpu --name "$SWAP_NAME" \
      --lib /lucepatch/new/libvgpu.so --sha256 "$SWAP_SHA256"
  else
    bash /lucepatch/bin/hami-core-swap.sh rollback --dir /host/vgpu --name "$SWAP_NAME"
  fi
}
run_swap; echo "@@lucepatch-swap-exit $?"
trap 'exit 0' TERM INT
while :; do
  if [ "$SWAP_ACTION" = install ] && [ "${SWAP_REASSERT_SECONDS:-0}" -gt 0 ]; then
    sleep "$SWAP_REASSERT_SECONDS" & wait $!
    run_swap | grep -v '"outcome":"noop"'
  else
    sleep 3600 & wait $!
  fi
done
""".strip() + "\n"


@dataclass
class Rendered:
    set_name: str
    filename: str
    text: str


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("lucepatch", "templates/k8s"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = lambda x: json.dumps(x, ensure_ascii=False)
    env.filters["envstr"] = values.env_string  # an env entry as the Helm chart writes it (lucebox.envString)
    return env


_DNS = re.compile(r"[^a-z0-9-]+")


def dns_label(text: str, limit: int = 63) -> str:
    out = _DNS.sub("-", str(text).lower()).strip("-")[:limit].strip("-")
    if not out:
        raise UsageError(f"{text!r} gives an empty Kubernetes name: use letters and digits")
    return out


def _check(set_name: str, v: dict) -> None:
    if set_name in ("verify-job", "hami-core-swap"):
        cmd = v["lib_copy_command"]
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) and a for a in cmd):
            raise UsageError("lib_copy_command must be a non-empty list of strings, e.g. [\"/lucepatch/bin/lucepatch-copy\"]")
    if set_name == "verify-job":
        if v["variant"] not in VARIANTS:
            raise UsageError(f"variant must be baseline or patched, not {v['variant']!r}")
        if not isinstance(v["reproducer_cmd"], list) or not v["reproducer_cmd"]:
            raise UsageError("reproducer_cmd must be a non-empty list (the reproducer's argv)")
        if int(v["runs"]) < 1:
            raise UsageError("runs must be at least 1")
        if v["owner"] is not None and not all(k in v["owner"] for k in ("apiVersion", "kind", "name", "uid")):
            raise UsageError("owner needs apiVersion, kind, name and uid")
    if set_name == "hami-core-swap":
        if v["action"] not in ("install", "rollback"):
            raise UsageError(f"action must be install or rollback, not {v['action']!r}")
        if v["action"] == "install":
            if not v["lib_image"]:
                raise UsageError("lib_image is required to install: the image holding the patched libvgpu.so")
            if not re.fullmatch(r"[0-9a-f]{64}", str(v["lib_sha256"] or "")):
                raise UsageError("lib_sha256 must be the 64-hex sha256 of the patched library (from the evidence)")
        if "/" in v["lib_name"]:
            raise UsageError("lib_name must be a file name inside host_lib_dir")
    if set_name in values.LUCEBOX_SETS:
        if int(v["gpu_count"]) < 1:
            raise UsageError("gpu_count must be at least 1")
    if set_name == "lucebox-vendored":
        _check_vendored(v)
    if set_name == "bench-job":
        bench_command(v)  # refuses what `lucepatch bench` would refuse


def _check_vendored(v: dict) -> None:
    """What the schema cannot say about the vendored line: the entrypoint's names only through `dflash`
    (or the chart's own values), a fetch that has something to fetch, a target the entrypoint finds."""
    why = entrypoint.clash(v["env"])
    if why:
        raise UsageError(why)
    fetch_owned = {"HF_HOME"} | ({"HF_TOKEN"} if v["hf_token_secret"] else set())
    if set(v["fetch_env"]) & fetch_owned:
        raise UsageError(f"fetch_env.{sorted(set(v['fetch_env']) & fetch_owned)[0]} is set by the chart "
                         "(HF_HOME: the cache's own folder; HF_TOKEN: from hf_token_secret, or set that to null)")
    if (v["model_draft_repo"] is None) != (v["model_draft_file"] is None):
        raise UsageError("model_draft_repo and model_draft_file go together: both, or both null (no draft)")
    if v["model_download_init"] and not v["model_target_file"]:
        raise UsageError("model_download_init fetches model_target_file from model_target_repo: name the file, "
                         "or set model_download_init=false and put the target in the cache yourself")
    if not v["model_target_file"] and v["model_cache_mount"] != values.UPSTREAM_MODELS:
        raise UsageError(f"with model_target_file null the entrypoint looks for a target under {values.UPSTREAM_MODELS} "
                         f"only, not under model_cache_mount {v['model_cache_mount']}: name the file")


def render(set_name: str, vals: dict) -> list[Rendered]:
    """Render one set with resolved values (see values.resolve)."""
    if set_name not in SETS:
        raise UsageError(f"unknown manifest set {set_name!r}: choose one of {', '.join(SETS)}")
    vals = dict(vals)
    _check(set_name, vals)
    env = _env()
    common_labels = dict(vals.get("labels") or {})

    def labels(base: dict) -> dict:
        return {**common_labels, **base}

    ctx = {"v": vals, "labels": labels}
    if set_name == "verify-job":
        ctx["runner"] = jobs.RUNNER_SCRIPT
        ctx["job_name"] = job_name(vals["run_id"], vals["variant"])
        # label values: <= 63 chars, alphanumeric ends
        for key in ("run_id", "reproducer"):
            vals[key] = dns_label(vals[key])
    if set_name in values.LUCEBOX_SETS:
        ctx["prepare_script"] = PREPARE_CACHE_SCRIPT
        ctx["fetch_script"] = FETCH_MODELS_SCRIPT
        ctx["line"] = set_name  # templates/k8s/lucebox-lines/<set>.j2: what differs between the lines' images
    if set_name == "hami-core-swap":
        ctx["script"] = swap.script_text()
        ctx["loop"] = SWAP_LOOP
    if set_name == "bench-job":
        vals["name"] = dns_label(vals["name"])
        ctx["bench_cmd"] = bench_command(vals)
    tmpl = {"lucebox": "lucebox.yaml.j2", "lucebox-vendored": "lucebox.yaml.j2", "rbac": "rbac.yaml.j2",
            "verify-job": "verify-job.yaml.j2", "hami-core-swap": "hami-core-swap.yaml.j2",
            "bench-job": "bench-job.yaml.j2"}[set_name]
    text = env.get_template(tmpl).render(**ctx).strip() + "\n"
    fname = f"{set_name}-{vals['variant']}.yaml" if set_name == "verify-job" else f"{set_name}.yaml"
    return [Rendered(set_name, fname, text)]


def bench_command(v: dict) -> list[str]:
    """The bench Job's command: `lucepatch bench` on the node's library, the document on stdout."""
    if v["workload"] not in ("decode-c", "decode-torch"):
        raise UsageError(f"workload must be decode-c or decode-torch, not {v['workload']!r}")
    modes = list(v["modes"] or [])
    if not modes or any(m not in ("eager", "graph") for m in modes):
        raise UsageError("modes must be a non-empty list of eager, graph")
    limits = list(v["sm_limits"] or [])
    if any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 99 for n in limits):
        raise UsageError("sm_limits must be a list of integers 1..99")
    tenants = v["tenants"]
    if tenants is not None and (len(tenants) != 2 or any(not isinstance(n, int) or not 1 <= n <= 99 for n in tenants)):
        raise UsageError("tenants must be two integers 1..99, or null")
    if "/" in v["lib_name"]:
        raise UsageError("lib_name must be a file name inside host_lib_dir")
    if int(v["rounds"]) < 2 or int(v["gpu_count"]) < 1:
        raise UsageError("rounds must be at least 2 and gpu_count at least 1")
    cmd = ["lucepatch", "bench", "--lib", f"/lucepatch/node-vgpu/{v['lib_name']}", "--workload", v["workload"],
           "--driver", "real", "--rounds", str(int(v["rounds"])), "--memory-limit", str(v["memory_limit"]), "--json"]
    for m in modes:
        cmd += ["--mode", m]
    for n in limits:
        cmd += ["--sm-limit", str(n)]
    cmd += ["--tenants", f"{tenants[0]},{tenants[1]}"] if tenants else ["--no-tenants"]
    return cmd


def job_name(run_id: str, variant: str) -> str:
    return dns_label(f"lucepatch-verify-{dns_label(run_id, 40)}-{variant}")


def render_verify_jobs(vals: dict) -> list[Rendered]:
    """Both variants' Jobs (baseline and patched) from one set of values."""
    out = []
    for variant in VARIANTS:
        out += render("verify-job", {**vals, "variant": variant})
    return out


def to_objects(docs: list[Rendered]) -> list[dict]:
    import yaml  # lazy: YAML parsing, only where manifests are read back, 174 ms

    objs = []
    for d in docs:
        objs += [o for o in yaml.safe_load_all(d.text) if o]
    return objs


def join(docs: list[Rendered]) -> str:
    return "---\n".join(d.text for d in docs)


def kustomization(docs: list[Rendered]) -> str:
    """kustomization.yaml listing the rendered files, so `kubectl apply -k DIR` applies the folder."""
    lines = ["# Written by `lucepatch render k8s --out`: kubectl kustomize / kubectl apply -k this folder.",
             "apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", "resources:"]
    return "\n".join(lines + [f"  - {d.filename}" for d in docs]) + "\n"
