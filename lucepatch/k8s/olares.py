"""The Lucebox Olares app: the Helm chart (k8s/chart.py) with Olares values, plus OlaresManifest.yaml,
and the rules Olares' own app lint applies, checked here (`lint`).

Sources of the rules (docs/cluster.md "Olares app" cites them):
- Olares' own checker, `olares-cli chart lint` (beclab/Olares framework/oac): internal/manifest/validate.go
  (olaresManifest.version required, apiVersion v1|v2|v3, metadata name/title 1..30, icon an http(s) URL,
  version semver, entrances 1..10 with name/host patterns, title 1..30, authLevel and openMethod enums,
  unique names; dependency type system|application|middleware; options.shared only with v3; supportArch
  amd64|arm64, no duplicates; v3 envs not named OLARES_USER*), internal/manifest/resources.go (0.12.0:
  spec.accelerator entries, mode enum, mode -> supportArch, GPU memory only on discrete modes, complete
  envelopes, limited >= required, no flat spec.required*/limited* beside them), pipeline.go (0.12.0: no
  template syntax in the manifest), internal/resources/*.go over the helm-rendered objects: limits.go
  (every container's cpu/memory requests and limits, requests <= limits, their sums within the
  envelope; a Deployment/StatefulSet named like the app), workloads.go (workloadReplicas names exactly
  the rendered workloads; spec.replicas follows workloads.<name>.replicaCount, 0 included),
  hostpath.go (no hostPath volume on a RollingUpdate workload), securitycontext.go (no root-equivalent
  securityContext on a non-beclab image), namespace.go (workloads in app-namespace), subpathexpr.go;
  appdata (permission.appData when templates use .Values.userspace.appData);
- beclab/oachecker (folder.go, checker.go): the older library behind the beclab/apps PR bot
  (beclab/check-chart): folder = Chart name = metadata.name ^[a-z0-9]{1,30}$, metadata.version = Chart
  version, Chart.yaml apiVersion/name/version set;
- beclab/Olares docs/developer/develop/package/manifest.md (OlaresManifest 0.12.0): Olares >= 1.12.6,
  apiVersion v3, no template rendering in the manifest, spec.accelerator, workloadReplicas matching
  values.yaml workloads, the 1.12 categories, and the fields deprecated in 0.12.0 ("may be rejected
  during installation": metadata.appid, provider, permission.provider, permission.sysData,
  options.appScope, spec.subCharts, the flat spec resources, OS 1.11 categories);
- beclab/apps#2036 (0.12.0 + v3 required since 1.12.6), beclab/apps llamacppqwen3827bggufv3 (#3541,
  #3669: a v3 llama.cpp app on server-cuda13 images, gpumem requested, workloads.<name>.replicaCount).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.k8s import chart, manifests, values

MANIFEST_VERSION = "0.12.0"
API_VERSION = "v3"
OLARES_MIN = ">=1.12.6-0"
ICON = "https://app.cdn.olares.com/appstore/default/defaulticon.webp"
# Olares admits root init containers only from trusted registries; Olares' own charts use this image
PREPARE_IMAGE = "docker.io/beclab/aboveos-busybox:1.37.0"
# OlaresManifest "categories" accepted by OS 1.12 (manifest.md)
CATEGORIES = {"Creativity", "Productivity_v112", "Developer Tools", "Fun", "Lifestyle", "Utilities_v112", "AI"}
MODES = {"cpu", "nvidia", "nvidia-gb10", "apple-m", "intel", "amd", "intel-gpu", "amd-gpu", "moore-soc"}
MODE_ARCH = {"nvidia": "amd64", "intel": "amd64", "amd": "amd64", "intel-gpu": "amd64", "amd-gpu": "amd64",
             "nvidia-gb10": "arm64", "apple-m": "arm64", "moore-soc": "arm64"}
DISCRETE = {"nvidia", "amd-gpu", "intel-gpu"}
ENVELOPE = ("requiredCpu", "limitedCpu", "requiredMemory", "limitedMemory", "requiredDisk", "limitedDisk")
FLAT = ("requiredCpu", "limitedCpu", "requiredMemory", "limitedMemory", "requiredDisk", "limitedDisk",
        "requiredGpu", "limitedGpu")
# what Olares' app-service injects at install (oachecker resource.go renders with these stand-ins)
INJECTED = {"bfl": {"username": "bfl-username"}, "user": {"zone": "user-zone"},
            "userspace": {"appData": "/olares/userdata/Cache/appdata", "appCache": "/olares/userdata/Cache/appcache",
                          "userData": "/olares/rootfs/userspace/Home"},
            "olaresEnv": {}, "GPU": {"Type": "nvidia"}, "domain": {}, "os": {"appKey": "k", "appSecret": "s"}}

# The package's values over the chart's: what an Olares node wants.
OVERRIDES = {
    "namespace": "",  # the release namespace Olares gives (<app>-shared for v3)
    # HAMi node without VMM hooks in play: the sm120-cuda13-hami profile's image
    "image": values.LUCEBOX_IMAGE.replace(":sm120-cuda13-", ":sm120-cuda13-hami-"),
    "olares_gpu_inject": True,
    "gpu_mem_mib": 22528,  # 22Gi of a 24 GB (Olares One) or 32 GB card: Qwen3.6-27B Q4_K_M + draft + KV
    "model_cache_pvc": False,
    "model_cache_host_path": "{{ .Values.userspace.appData }}/lucebox/models",
    "volume_prepare_image": PREPARE_IMAGE,
    "hf_token_secret": None,  # the token comes from Olares' system env (envs: HF_TOKEN valueFrom)
    "env": {"HF_TOKEN": "{{ .Values.olaresEnv.HF_TOKEN | default \"\" }}",
            "HF_ENDPOINT": "{{ .Values.olaresEnv.HF_ENDPOINT | default \"https://huggingface.co\" }}"},
    "cpu_request": "2",
    "cpu_limit": "8",
    "memory_request": "16Gi",
    "memory_limit": "48Gi",
}
# The vendored line's package: upstream's image, whose entrypoint reads no HF_* (the fetch-models container
# does). No -hami image: upstream's Dockerfile has no build argument for GGML_CUDA_NO_VMM, so the image keeps
# ggml's VMM pool (docs/cluster.md says what that means under HAMi).
VENDORED_OVERRIDES = {
    **{k: v for k, v in OVERRIDES.items() if k not in ("image", "env")},
    "image": values.LUCEBOX_VENDORED_IMAGE,
    "fetch_env": OVERRIDES["env"],
}
PACKAGE_OVERRIDES = {"lucebox": OVERRIDES, "lucebox-vendored": VENDORED_OVERRIDES}
UPSTREAM = {"lucebox": "https://github.com/Luce-Org/lucebox-hub", "lucebox-vendored": "https://github.com/Luce-Org/lucebox"}
BUILT = {"lucebox": "built by lucepatch with its patch series",
         "lucebox-vendored": "built from Luce-Org/lucebox's own Dockerfile with lucepatch's patch series"}


def package_values(overrides: dict, set_name: str = "lucebox") -> dict:
    vals = values.resolve(set_name, PACKAGE_OVERRIDES[set_name], overrides)
    # workloadReplicas' counterpart in values.yaml (app-service sets it; the Deployment follows it)
    return {**vals, "workloads": {vals["name"]: {"replicaCount": int(vals["replicas"])}}}


def _gi(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def manifest(vals: dict, set_name: str = "lucebox") -> dict:
    """OlaresManifest.yaml as data, every field concrete (0.12.0 renders no templates)."""
    if not vals.get("gpu_mem_mib"):
        raise UsageError("an Olares app declares its GPU memory: set gpu_mem_mib (MiB), e.g. 22528")
    if not vals.get("cpu_limit") or not vals.get("memory_limit"):
        raise UsageError("Olares' lint requires cpu and memory limits on every container: set cpu_limit and memory_limit")
    name = vals["name"]
    gpu = _gi(int(vals["gpu_mem_mib"]))
    return {
        "olaresManifest.version": MANIFEST_VERSION,
        "olaresManifest.type": "app",
        "apiVersion": API_VERSION,
        "workloadReplicas": {w: int(s["replicaCount"]) for w, s in vals["workloads"].items()},
        "metadata": {
            "name": name, "title": "Lucebox", "version": chart.CHART_VERSION, "icon": ICON,
            "description": "Lucebox DFlash server: Qwen3.6-27B GGUF with a DFlash draft, OpenAI-compatible API",
            "categories": ["AI"],
        },
        "entrances": [{"name": name, "host": name, "port": int(vals["port"]), "title": "Lucebox API",
                       "icon": ICON, "authLevel": "internal", "openMethod": "window"}],
        "spec": {
            "versionName": chart.app_version(set_name),
            "fullDescription": (
                f"Lucebox's DFlash server (speculative decoding with a DFlash draft) {BUILT[set_name]} "
                "for CUDA 13 and consumer Blackwell (sm_120). The first start downloads the target "
                f"GGUF and the draft into the app's data folder; the API listens on port {vals['port']}."),
            "developer": "Luce-Org",
            "website": UPSTREAM[set_name],
            "sourceCode": UPSTREAM[set_name],
            "submitter": "lucepatch",
            "locale": ["en-US"],
            "supportArch": ["amd64"],
            "onlyAdmin": True,
            "accelerator": [{
                "mode": "nvidia",
                "requiredCpu": str(vals["cpu_request"]), "limitedCpu": str(vals["cpu_limit"]),
                "requiredMemory": str(vals["memory_request"]), "limitedMemory": str(vals["memory_limit"]),
                "requiredDisk": str(vals["model_cache_size"]), "limitedDisk": str(vals["model_cache_size"]),
                "requiredGPUMemory": gpu, "limitedGPUMemory": gpu,
            }],
        },
        "permission": {"appData": True},
        "options": {
            "shared": True,
            "apiTimeout": 0,
            "dependencies": [{"name": "olares", "type": "system", "version": OLARES_MIN}],
        },
        "envs": [
            {"envName": "HF_TOKEN", "required": False, "applyOnChange": True,
             "valueFrom": {"envName": "OLARES_SYSTEM_HUGGINGFACE_TOKEN"}},
            {"envName": "HF_ENDPOINT", "required": False, "applyOnChange": True,
             "valueFrom": {"envName": "OLARES_SYSTEM_HUGGINGFACE_SERVICE"}},
        ],
    }


def manifest_text(doc: dict, set_name: str = "lucebox") -> str:
    import yaml  # lazy: OlaresManifest.yaml only, 174 ms

    head = (f"# Rendered by lucepatch (`lucepatch render olares {set_name}`): OlaresManifest 0.12.0, apiVersion v3.\n"
            "# No template expressions here (0.12.0 renders none); the chart's values carry the rest.\n"
            # quoted, as Olares writes them: a version is a string, never a number
            f"olaresManifest.version: '{doc['olaresManifest.version']}'\n"
            f"olaresManifest.type: {doc['olaresManifest.type']}\n"
            f"apiVersion: '{doc['apiVersion']}'\n")
    rest = {k: v for k, v in doc.items() if k not in ("olaresManifest.version", "olaresManifest.type", "apiVersion")}
    return head + yaml.safe_dump(rest, sort_keys=False, allow_unicode=True, width=100)


@dataclass
class OlaresPackage:
    path: Path
    files: list[str]
    values: dict
    manifest: dict
    injected: Path | None = None  # OUT/<app>.olares-values.json: Olares' install-time values, for helm -f


def render_olares(out: Path, overrides: dict, set_name: str = "lucebox") -> OlaresPackage:
    """The package of one line of the series. It is made and linted in a folder of its own first: a
    package Olares' rules refuse leaves `out` as it was (nothing written before the checks pass)."""
    vals = package_values(overrides, set_name)
    doc = manifest(vals, set_name)
    dest = Path(out) / chart.CHART_NAME
    if dest.exists() and not (dest / "Chart.yaml").is_file():
        raise UsageError(f"{dest} exists and is not a chart: choose another --out")
    with tempfile.TemporaryDirectory(prefix="lucepatch-olares-") as stage:
        staged = chart.write_chart(Path(stage), vals, set_name=set_name, flavour="olares", closed_schema=False, header=(
            f"Lucebox Olares app values (`lucepatch render olares {set_name}`): the chart's values with Olares'.\n"
            "model_cache_host_path and env expand Olares' injected values (tpl); OlaresManifest.yaml is concrete."))
        (staged.path / "OlaresManifest.yaml").write_text(manifest_text(doc, set_name))
        (staged.path / "owners").write_text("lucepatch\n")
        files = sorted(str(p.relative_to(staged.path)) for p in staged.path.rglob("*") if p.is_file())
        problems = lint(staged.path, objects=objects_for(vals, set_name=set_name))
        if problems:
            raise UsageError(f"the Olares package breaks {len(problems)} Olares lint rule(s), first: {problems[0]}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.move(str(staged.path), str(dest))
    # beside the package, not in it: the chart renders only with what Olares injects (userspace, olaresEnv)
    injected = injected_values_file(dest.parent / f"{dest.name}.olares-values.json")
    return OlaresPackage(dest, files, vals, doc, injected)


def objects_for(vals: dict, namespace: str = "app-namespace", set_name: str = "lucebox") -> list[dict]:
    """The objects Olares would install, from the same model (render k8s), with its injected values."""
    resolved = dict(vals)
    resolved["namespace"] = vals["namespace"] or namespace
    for key in ("model_cache_host_path",):
        if resolved.get(key):
            resolved[key] = _expand(resolved[key])
    for key in ("env", "fetch_env"):
        if key in resolved:
            resolved[key] = {k: _expand(v) for k, v in (vals.get(key) or {}).items()}
    resolved = {k: v for k, v in resolved.items() if k in values.SCHEMAS[set_name]}
    objs = manifests.to_objects(manifests.render(set_name, resolved))
    reps = (vals.get("workloads") or {}).get(vals["name"])
    for o in objs:
        if o["kind"] == "Deployment" and reps:
            o["spec"]["replicas"] = int(reps["replicaCount"])
    return objs


def _expand(text: str) -> str:
    """The two template forms the package uses, with Olares' injected stand-ins (helm renders them for real)."""
    text = text.replace("{{ .Values.userspace.appData }}", INJECTED["userspace"]["appData"])
    return re.sub(r'\{\{ \.Values\.olaresEnv\.\w+ \| default "([^"]*)" \}\}', r"\1", text)


# ---------------------------------------------------------------------------------- lint
_QTY = re.compile(r"^(\d+(\.\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SEMVER = re.compile(r"^v?(0|[1-9]\d*)(\.(0|[1-9]\d*)){0,2}(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")  # Masterminds' semver
# 0.12.0's deprecated fields (manifest.md "Deprecated Fields (0.12.0)": apps with them may be rejected)
DEPRECATED = (("metadata", "appid"), ("provider",), ("permission", "provider"), ("permission", "sysData"),
              ("options", "appScope"), ("spec", "subCharts"))
AUTH_LEVELS, OPEN_METHODS = ("", "public", "private", "internal"), ("", "default", "iframe", "window")
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def _get(d: dict, path: tuple):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _is_beclab(image: str) -> bool:
    """securitycontext.go isBeclabImage: "beclab/..." or any registry's ".../beclab/..."."""
    return bool(image) and (image.startswith("beclab/") or "/beclab/" in image)

_SCALE = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(q) -> float:
    m = _QTY.match(str(q).strip())
    if not m:
        raise ValueError(f"{q!r} is not a Kubernetes quantity")
    return float(m.group(1)) * _SCALE[m.group(3)]


def lint(pkg: Path, *, objects: list[dict]) -> list[str]:
    """Olares' app lint rules (see the module doc) over a package folder and the objects it installs.
    Returns the problems, each naming its rule; [] = passes."""
    import yaml  # lazy: the Olares lint only, 174 ms

    p: list[str] = []
    pkg = Path(pkg)
    for f in ("Chart.yaml", "values.yaml", "OlaresManifest.yaml"):
        if not (pkg / f).is_file():
            p.append(f"folder: missing {f}")
    if not (pkg / "templates").is_dir():
        p.append("folder: missing templates/")
    if p:
        return p
    text = (pkg / "OlaresManifest.yaml").read_text()
    if re.search(r"\{\{|\{%", text):
        p.append("manifest 0.12.0: OlaresManifest.yaml must hold no template expressions ({{ }})")
    m = yaml.safe_load(text) or {}
    ch = yaml.safe_load((pkg / "Chart.yaml").read_text()) or {}
    vals = yaml.safe_load((pkg / "values.yaml").read_text()) or {}
    if m.get("olaresManifest.version") != MANIFEST_VERSION:
        p.append(f"olaresManifest.version must be the string '{MANIFEST_VERSION}', not {m.get('olaresManifest.version')!r}")
    if m.get("apiVersion") != API_VERSION:
        p.append(f"apiVersion must be '{API_VERSION}' (v2 apps are not listed from 1.12.6), not {m.get('apiVersion')!r}")
    if m.get("olaresManifest.type") != "app":
        p.append("olaresManifest.type must be app")
    for path in DEPRECATED:
        if _get(m, path) is not None:
            p.append(f"{'.'.join(path)} is deprecated in OlaresManifest 0.12.0 (apps carrying it may be rejected): remove it")
    opts = m.get("options") or {}
    if opts.get("shared") and m.get("apiVersion") != "v3":
        p.append("options.shared=true is only supported for apiVersion=v3")
    if opts.get("shared") and not (m.get("spec") or {}).get("onlyAdmin"):
        p.append("options.shared=true needs spec.onlyAdmin: true (a shared app is installed by the admin)")
    for i, e in enumerate(m.get("envs") or []):
        if str(e.get("envName", "")).startswith("OLARES_USER"):
            p.append(f"envs[{i}].envName must not start with OLARES_USER (v3: map user variables with valueFrom.envName)")
        if not e.get("envName"):
            p.append(f"envs[{i}].envName is required")
    deps = (m.get("options") or {}).get("dependencies") or []
    for d in deps:
        if not d.get("name") or not d.get("version") or d.get("type") not in ("system", "application"):
            p.append(f"options.dependencies: {d} needs name, version and type system|application")
    if {"name": "olares", "type": "system", "version": OLARES_MIN} not in [
            {k: d.get(k) for k in ("name", "type", "version")} for d in deps]:
        p.append(f"options.dependencies must require the olares system {OLARES_MIN} (0.12.0 / v3 need 1.12.6)")
    md = m.get("metadata") or {}
    name = md.get("name", "")
    if not re.fullmatch(r"[a-z][a-z0-9]{0,29}", str(name)):
        p.append(f"metadata.name {name!r} must match ^[a-z][a-z0-9]{{0,29}}$")
    if not (name == ch.get("name") == pkg.name):
        p.append(f"name must be the same in Chart.yaml ({ch.get('name')}), the folder ({pkg.name}) and metadata ({name})")
    for key in ("apiVersion", "name", "version"):
        if not ch.get(key):
            p.append(f"Chart.yaml: {key} is empty")
    if str(md.get("version")) != str(ch.get("version")):
        p.append(f"metadata.version {md.get('version')!r} must equal Chart.yaml version {ch.get('version')!r}")
    for key in ("icon", "description", "title", "version"):
        if not md.get(key):
            p.append(f"metadata.{key} is empty")
    if md.get("version") and not _SEMVER.match(str(md["version"])):
        p.append(f"metadata.version {md['version']!r} must be a valid semantic version (e.g. 1.2.3)")
    if md.get("icon") and not re.match(r"^https?://[^/\s]+", str(md["icon"])):
        p.append("metadata.icon must be a valid http(s) URL")
    if len(str(md.get("title", ""))) > 30:
        p.append("metadata.title is longer than 30 characters")
    cats = md.get("categories") or []
    if not cats or not set(cats) <= CATEGORIES:
        p.append(f"metadata.categories {cats} must be among {sorted(CATEGORIES)}")
    ents = m.get("entrances") or []
    if not 1 <= len(ents) <= 10:
        p.append("entrances: 1 to 10 are required")
    if len({e.get("name") for e in ents}) != len(ents):
        p.append("entrances: names must be unique")
    services = {(o["metadata"]["name"]): [pt["port"] for pt in o["spec"]["ports"]] for o in objects
                if o["kind"] == "Service"}
    for e in ents:
        if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", str(e.get("name", ""))) or len(e["name"]) > 63:
            p.append(f"entrance name {e.get('name')!r} is not [a-z]([-a-z0-9]*[a-z0-9])?")
        if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", str(e.get("host", ""))):
            p.append(f"entrance host {e.get('host')!r} is not [a-z]([-a-z0-9]*[a-z0-9])?")
        if not (isinstance(e.get("port"), int) and 0 < e["port"] <= 65535):
            p.append(f"entrance port {e.get('port')!r} must be 1..65535")
        t = str(e.get("title", ""))
        if not t or len(t) > 30 or not re.fullmatch(r"[a-z0-9A-Z-\s]*", t):
            p.append(f"entrance title {t!r}: 1..30 letters, digits, '-' or spaces")
        if e.get("authLevel", "") not in AUTH_LEVELS:
            p.append(f"entrance authLevel {e.get('authLevel')!r} must be one of public, private, internal")
        if e.get("openMethod", "") not in OPEN_METHODS:
            p.append(f"entrance openMethod {e.get('openMethod')!r} must be one of default, iframe, window")
        if e.get("icon") and not re.match(r"^https?://[^/\s]+", str(e["icon"])):
            p.append(f"entrance {e.get('name')}: icon must be a valid http(s) URL")
        if e.get("port") not in services.get(e.get("host"), []):
            p.append(f"entrance {e.get('name')}: no Service {e.get('host')} with port {e.get('port')} in the chart")
    spec = m.get("spec") or {}
    arch = spec.get("supportArch") or []
    if not arch or not set(arch) <= {"amd64", "arm64"}:
        p.append(f"spec.supportArch {arch} must be a non-empty list of amd64/arm64")
    if len(set(arch)) != len(arch):
        p.append(f"spec.supportArch {arch} lists an architecture twice")
    acc = spec.get("accelerator") or []
    if not acc:
        p.append("spec.accelerator: a GPU app declares its accelerator modes (0.12.0)")
    flat = [k for k in FLAT if k in spec]
    if acc and flat:
        p.append(f"spec.accelerator excludes the flat spec fields {flat}")
    gpu_modes = [a for a in acc if a.get("mode") in DISCRETE and a.get("requiredGPUMemory")]
    if len([a for a in acc if a.get("mode") == "nvidia"]) != 1 or not gpu_modes:
        p.append("spec.accelerator: exactly one nvidia mode with requiredGPUMemory (the one GPU request)")
    for a in acc:
        mode = a.get("mode")
        if mode not in MODES:
            p.append(f"spec.accelerator mode {mode!r} is not one of {sorted(MODES)}")
        if MODE_ARCH.get(mode) and MODE_ARCH[mode] not in arch:
            p.append(f"spec.accelerator mode {mode} needs {MODE_ARCH[mode]} in spec.supportArch")
        if mode not in DISCRETE and ("requiredGPUMemory" in a or "limitedGPUMemory" in a):
            p.append(f"spec.accelerator mode {mode}: GPU memory fields only on {sorted(DISCRETE)}")
        need = ENVELOPE + (("requiredGPUMemory", "limitedGPUMemory") if mode in DISCRETE else ())
        for k in need:
            if k not in a:
                p.append(f"spec.accelerator mode {mode}: missing {k}")
        try:
            for lo, hi in (("requiredCpu", "limitedCpu"), ("requiredMemory", "limitedMemory"),
                           ("requiredDisk", "limitedDisk"), ("requiredGPUMemory", "limitedGPUMemory")):
                if lo in a and hi in a and quantity(a[lo]) > quantity(a[hi]):
                    p.append(f"spec.accelerator mode {mode}: {lo} > {hi}")
        except ValueError as e:
            p.append(f"spec.accelerator mode {mode}: {e}")
    # the objects: workloads, resources, names, namespaces, GPU request
    workloads = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    wr = m.get("workloadReplicas") or {}
    for w in workloads:
        wn = w["metadata"]["name"]
        if wn not in wr:
            p.append(f"workloadReplicas must list {w['kind']} {wn}")
        if ((vals.get("workloads") or {}).get(wn) or {}).get("replicaCount") is None:
            p.append(f"values.yaml must hold workloads.{wn}.replicaCount (workloadReplicas)")
    for wn in sorted(set(wr) - {w["metadata"]["name"] for w in workloads}):
        p.append(f"workloadReplicas entry {wn!r} does not match any rendered Deployment/StatefulSet")
    for o in objects:  # hostpath.go, securitycontext.go, subpathexpr.go: every pod template
        if o["kind"] not in WORKLOAD_KINDS:
            continue
        wn, pod = o["metadata"]["name"], o["spec"]["template"]["spec"]
        strategy = ((o["spec"].get("strategy") or {}).get("type") if o["kind"] == "Deployment"
                    else (o["spec"].get("updateStrategy") or {}).get("type") if o["kind"] == "StatefulSet" else "OnDelete")
        for v in pod.get("volumes") or []:
            if "hostPath" in v and strategy in (None, "", "RollingUpdate"):
                p.append(f"{o['kind']} {wn} can not enable rolling update with hostPath volume {v['name']} "
                         f"({v['hostPath'].get('path')}): set strategy Recreate")
        psc = pod.get("securityContext") or {}
        pod_root = psc.get("runAsUser") == 0 or psc.get("runAsNonRoot") is False
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            if _is_beclab(c.get("image", "")):
                continue
            sc = c.get("securityContext") or {}
            if pod_root or sc.get("privileged") is True or sc.get("runAsUser") == 0 or sc.get("runAsNonRoot") is False:
                p.append(f"non-beclab image {c.get('image')!r} runs with root-equivalent securityContext: "
                         f"{o['kind']} {wn}, container {c['name']}")
            for vm in c.get("volumeMounts") or []:
                if vm.get("subPathExpr"):
                    p.append(f"{o['kind']} {wn}, container {c['name']}: volumeMounts.subPathExpr is not supported")
    if name not in [w["metadata"]["name"] for w in workloads]:
        p.append(f"must have a Deployment/StatefulSet named like the app ({name})")
    for o in objects:  # namespace.go: workloads in the release's; others there or in user-system-*; none: cluster-scoped
        ns = o["metadata"].get("namespace")
        if ns and ns != "app-namespace" and (o["kind"] in WORKLOAD_KINDS or not ns.startswith("user-system-")):
            p.append(f"{o['kind']}/{o['metadata']['name']} is in namespace {ns!r}, not the release's")
    nvidia = next((a for a in acc if a.get("mode") == "nvidia"), {})
    sums = {"requests.cpu": 0.0, "requests.memory": 0.0, "limits.cpu": 0.0, "limits.memory": 0.0}
    gpu_requested = False
    for w in workloads:
        ann = w["metadata"].get("annotations") or {}
        for c in w["spec"]["template"]["spec"]["containers"]:
            res = c.get("resources") or {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for kind, d in (("requests", req), ("limits", lim)):
                for r in ("cpu", "memory"):
                    if r not in d:
                        p.append(f"{w['metadata']['name']}/{c['name']} must set {r} {kind[:-1]}")
                    else:
                        sums[f"{kind}.{r}"] += quantity(d[r])
            for r in ("cpu", "memory"):
                if r in req and r in lim and quantity(req[r]) > quantity(lim[r]):
                    p.append(f"{w['metadata']['name']}/{c['name']}: requests.{r} > limits.{r}")
            if "nvidia.com/gpu" in lim and ann.get("applications.app.bytetrade.io/gpu-inject") == "true":
                gpu_requested = True
    for key, field in (("requests.cpu", "requiredCpu"), ("requests.memory", "requiredMemory"),
                       ("limits.cpu", "limitedCpu"), ("limits.memory", "limitedMemory")):
        if field in nvidia and sums[key] > quantity(nvidia[field]):
            p.append(f"sum of container {key} must be <= the manifest's {field}")
    if not gpu_requested:
        p.append("the Deployment must request nvidia.com/gpu and carry gpu-inject: \"true\" (Olares injects the GPU)")
    uses_appdata = any(".Values.userspace.appData" in f.read_text() for f in (pkg / "templates").glob("*.yaml")) or \
        ".Values.userspace.appData" in (pkg / "values.yaml").read_text()
    if uses_appdata and not (m.get("permission") or {}).get("appData"):
        p.append("permission.appData must be true: the chart uses .Values.userspace.appData")
    return p


def injected_values_file(path: Path) -> Path:
    """Olares' injected values as a file for `helm lint/template -f` (stand-ins, as Olares' checkers render
    with: beclab/oachecker resource.go, framework/oac helmrender)."""
    Path(path).write_text(json.dumps(INJECTED, indent=2) + "\n")
    return Path(path)
