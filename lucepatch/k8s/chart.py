"""The Lucebox Helm chart and the Olares app package, written from the same model as `render k8s`.

One model: the values schema (k8s/values.py LUCEBOX: key, default, meaning, JSON type). From it:
- values.yaml: every value with its meaning as a comment (today's defaults, or a package's overrides);
- values.schema.json: the types, and no other keys (Helm validates `--set` and -f against it), so a
  typo fails `helm template` the way it fails `render k8s`;
- templates/*.yaml (lucepatch/templates/helm/lucebox/): Go templates that render, for the same values,
  the objects `render k8s lucebox` renders (tests/test_helm_chart.py runs `helm template` and
  compares; the prepare-cache script is the same text, shipped as files/prepare-cache.sh).

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
CHART_VERSION = "1.0.0"
CHART_SRC = Path(__file__).resolve().parent.parent / "templates" / "helm" / "lucebox"
DESCRIPTION = "Lucebox DFlash server (speculative decoding, GGUF target + DFlash draft) on a HAMi/NVIDIA GPU node"


def app_version() -> str:
    """The Lucebox series version the default image carries (lucepatch/lucebox:<profile>-<version>)."""
    m = re.search(r"-(\d+\.\d+\.\d+)$", values.LUCEBOX_IMAGE)
    return m.group(1) if m else "0.0.0"


@dataclass
class WrittenChart:
    path: Path
    files: list[str]
    values: dict


def values_schema(closed: bool = True) -> dict:
    """values.schema.json: the model's schema (values.schema), the one `render` checks values against.
    `closed`: no keys beyond the model (Olares injects its own values — userspace, bfl, GPU,
    olaresEnv... — so its package leaves the schema open)."""
    return {**values.schema("lucebox", closed=closed), "title": "Lucebox chart values"}


def values_yaml(vals: dict, header: str) -> str:
    """values.yaml: each key, its meaning as a comment, its value (JSON, which is YAML)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for key, spec in values.LUCEBOX.items():
        lines.append("")
        for chunk in _wrap(spec.doc, 96):
            lines.append(f"# {chunk}")
        lines.append(f"{key}: {json.dumps(vals[key], ensure_ascii=False)}")
    for key in sorted(set(vals) - set(values.LUCEBOX)):  # a package's extra values (Olares: workloads)
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


def write_chart(out: Path, vals: dict, *, flavour: str = "helm", closed_schema: bool = True,
                header: str | None = None) -> WrittenChart:
    """Write the chart to out/lucebox/ (the folder name is the chart's, as helm and Olares expect)."""
    manifests._check("lucebox", vals)  # the same refusals as `render k8s`
    dest = Path(out) / CHART_NAME
    if dest.exists() and not (dest / "Chart.yaml").is_file():
        raise UsageError(f"{dest} exists and is not a chart: choose another --out")
    tmp = dest.with_name(dest.name + ".lucepatch-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "templates").mkdir(parents=True)
    for f in sorted((CHART_SRC / "templates").iterdir()):
        shutil.copyfile(f, tmp / "templates" / f.name)
    (tmp / "files").mkdir()
    (tmp / "files" / "prepare-cache.sh").write_text(manifests.PREPARE_CACHE_SCRIPT)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
    chart = env.from_string((CHART_SRC / "Chart.yaml.j2").read_text()).render(
        lucepatch_version=__version__, flavour=flavour, name=CHART_NAME, description=DESCRIPTION,
        chart_version=CHART_VERSION, app_version=app_version(), image=vals["image"])
    (tmp / "Chart.yaml").write_text(chart)
    (tmp / "values.yaml").write_text(values_yaml(vals, header or (
        f"Lucebox chart values (lucepatch {__version__}, `lucepatch render {flavour} lucebox`).\n"
        "The same values as `lucepatch render k8s lucebox` (--show-values); `helm template` renders the same objects.")))
    (tmp / "values.schema.json").write_text(json.dumps(values_schema(closed_schema), indent=2) + "\n")
    (tmp / ".helmignore").write_text("*.tgz\n.DS_Store\n*.lucepatch-tmp\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    return WrittenChart(dest, files, vals)


def render_helm(out: Path, overrides: dict) -> WrittenChart:
    """The chart with these values; its namespace is the release's (`helm install -n NS`) unless the
    values name one (`--set namespace=...`): values.yaml leaves it empty (templates/_helpers.tpl)."""
    vals = values.resolve("lucebox", overrides)
    if "namespace" not in overrides:
        vals["namespace"] = ""
    return write_chart(out, vals)
