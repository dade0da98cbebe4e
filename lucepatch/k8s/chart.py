"""The Lucebox Helm chart and the Olares app package, written from the same model as `render k8s`.

One chart per line of the Lucebox series, both named `lucebox` (Olares wants the folder, the chart and
the app to share one name): `lucebox` (8305b6c, lucepatch's image) and `lucebox-vendored` (62880e2,
upstream's image and entrypoint). The templates are shared; what differs between the lines' images
(how the models are fetched, the server's environment) is templates/helm/lucebox/lines/<set>.tpl,
written into the chart as templates/_line.tpl.

One model per line: the values schema (k8s/values.py LUCEBOX / LUCEBOX_VENDORED: key, default,
meaning, JSON type). From it:
- values.yaml: every value with its meaning as a comment (today's defaults, or a package's overrides);
- values.schema.json: the types, and no other keys (Helm validates `--set` and -f against it), so a
  typo fails `helm template` the way it fails `render k8s`;
- templates/*.yaml (lucepatch/templates/helm/lucebox/): Go templates that render, for the same values,
  the objects `render k8s lucebox` renders (tests/test_helm_chart.py runs `helm template` and
  compares; the prepare-cache and fetch-models scripts are the same text, shipped under files/).

The Olares package (k8s/olares.py) is this chart with Olares values plus its OlaresManifest.yaml.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2

from lucepatch import __version__
from lucepatch.errors import UsageError
from lucepatch.k8s import manifests, values

CHART_NAME = "lucebox"
# The chart's own version: bump it when the templates change (Olares requires metadata.version to equal it).
# 1.1.0: the line's part in templates/_line.tpl, the vendored line's chart.
CHART_VERSION = "1.1.0"
CHART_SRC = Path(__file__).resolve().parent.parent / "templates" / "helm" / "lucebox"
DESCRIPTION = "Lucebox DFlash server (speculative decoding, GGUF target + DFlash draft) on a HAMi/NVIDIA GPU node"


@dataclass(frozen=True)
class Line:
    """What the chart of one line of the series says about itself."""
    image: str  # the default image; appVersion is its series version
    upstream: str  # Chart.yaml home / sources
    description: str
    files: tuple[tuple[str, str], ...]  # files/<name>: text the templates read with .Files.Get


LINES = {
    "lucebox": Line(values.LUCEBOX_IMAGE, "https://github.com/Luce-Org/lucebox-hub", DESCRIPTION,
                    (("prepare-cache.sh", manifests.PREPARE_CACHE_SCRIPT),)),
    "lucebox-vendored": Line(values.LUCEBOX_VENDORED_IMAGE, "https://github.com/Luce-Org/lucebox",
                             DESCRIPTION + ": upstream's own image and entrypoint (Luce-Org/lucebox, llama.cpp vendored)",
                             (("prepare-cache.sh", manifests.PREPARE_CACHE_SCRIPT),
                              ("fetch-models.sh", manifests.FETCH_MODELS_SCRIPT))),
}


def app_version(set_name: str = "lucebox") -> str:
    """The Lucebox series version the line's default image carries (lucepatch/<target>:<profile>-<version>)."""
    m = re.search(r"-(\d+\.\d+\.\d+)$", LINES[set_name].image)
    return m.group(1) if m else "0.0.0"


@dataclass
class WrittenChart:
    path: Path
    files: list[str]
    values: dict


def values_schema(closed: bool = True, set_name: str = "lucebox") -> dict:
    """values.schema.json: the model's schema (values.schema), the one `render` checks values against.
    `closed`: no keys beyond the model (Olares injects its own values — userspace, bfl, GPU,
    olaresEnv... — so its package leaves the schema open)."""
    return {**values.schema(set_name, closed=closed), "title": "Lucebox chart values"}


def values_yaml(vals: dict, header: str, set_name: str = "lucebox") -> str:
    """values.yaml: each key, its meaning as a comment, its value (JSON, which is YAML)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for key, spec in values.SCHEMAS[set_name].items():
        lines.append("")
        for chunk in _wrap(spec.doc, 96):
            lines.append(f"# {chunk}")
        lines.append(f"{key}: {json.dumps(vals[key], ensure_ascii=False)}")
    for key in sorted(set(vals) - set(values.SCHEMAS[set_name])):  # a package's extra values (Olares: workloads)
        lines.append("")
        lines.append(f"{key}: {json.dumps(vals[key], ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    out, cur = [], ""
    for word in text.split():
        if cur and len(cur) + 1 + len(word) > width:
            out.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return out + ([cur] if cur else [])


def write_chart(out: Path, vals: dict, *, set_name: str = "lucebox", flavour: str = "helm", closed_schema: bool = True,
                header: str | None = None) -> WrittenChart:
    """Write the chart of one line to out/lucebox/ (the folder name is the chart's, as helm and Olares expect)."""
    manifests._check(set_name, vals)  # the same refusals as `render k8s`
    line = LINES[set_name]
    dest = Path(out) / CHART_NAME
    if dest.exists() and not (dest / "Chart.yaml").is_file():
        raise UsageError(f"{dest} exists and is not a chart: choose another --out")
    tmp = dest.with_name(dest.name + ".lucepatch-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "templates").mkdir(parents=True)
    for f in sorted((CHART_SRC / "templates").iterdir()):
        shutil.copyfile(f, tmp / "templates" / f.name)
    shutil.copyfile(CHART_SRC / "lines" / f"{set_name}.tpl", tmp / "templates" / "_line.tpl")
    (tmp / "files").mkdir()
    for name, text in line.files:
        (tmp / "files" / name).write_text(text)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
    chart = env.from_string((CHART_SRC / "Chart.yaml.j2").read_text()).render(
        lucepatch_version=__version__, flavour=flavour, name=CHART_NAME, description=line.description,
        chart_version=CHART_VERSION, app_version=app_version(set_name), image=vals["image"], line=set_name,
        upstream=line.upstream)
    (tmp / "Chart.yaml").write_text(chart)
    (tmp / "values.yaml").write_text(values_yaml(vals, header or (
        f"Lucebox chart values (lucepatch {__version__}, `lucepatch render {flavour} {set_name}`).\n"
        f"The same values as `lucepatch render k8s {set_name}` (--show-values); `helm template` renders the same "
        "objects."), set_name))
    (tmp / "values.schema.json").write_text(json.dumps(values_schema(closed_schema, set_name), indent=2) + "\n")
    (tmp / ".helmignore").write_text("*.tgz\n.DS_Store\n*.lucepatch-tmp\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    return WrittenChart(dest, files, vals)


def render_helm(out: Path, overrides: dict, set_name: str = "lucebox") -> WrittenChart:
    """The chart of one line with these values; its namespace is the release's (`helm install -n NS`)
    unless the values name one (`--set namespace=...`): values.yaml leaves it empty (templates/_helpers.tpl)."""
    vals = values.resolve(set_name, overrides)
    if "namespace" not in overrides:
        vals["namespace"] = ""
    return write_chart(out, vals, set_name=set_name)
