"""`lucepatch render k8s SET`: render cluster manifests (Lucebox, RBAC, verify Jobs, swap DaemonSet).
`lucepatch render helm lucebox|lucebox-vendored --out DIR`: the Lucebox Helm chart of that line (same model as
`render k8s` of the same name).
`lucepatch render olares lucebox|lucebox-vendored --out DIR`: the Lucebox Olares app (that chart + OlaresManifest.yaml).
`lucepatch render real-clients --evidence F...`: the "Real clients" table (docs/evidence.md, PR body) from evidence."""

from __future__ import annotations

import json

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused, workspace


@click.group("render")
def command():
    """Render files lucepatch produces for other tools (Kubernetes manifests, the real-clients table)."""


@command.command("real-clients")
@click.option("--evidence", "paths", type=click.Path(dir_okay=False), multiple=True, required=True,
              help="Real-driver evidence of workload reproducers (repeatable), in the order of the table.")
@click.option("--target", "target_name", default="hami-core", show_default=True)
@json_option
@click.pass_context
def real_clients(ctx, paths, target_name, as_json):
    """Print the "Real clients" markdown table (what PyTorch, NCCL and vLLM's patterns did) from evidence."""
    refuse_unused(ctx, "render real-clients")
    ws = workspace(ctx)
    t = api.real_clients(ws, list(paths), target_name)
    if as_json:
        report.emit_json("render", {"what": "real-clients", "target": target_name, "evidence": list(paths),
                                    "columns": t["columns"], "rows": t["rows"], "sources": t["sources"]})
    else:
        click.echo(t["markdown"], nl=False)


@command.command("k8s")
@click.argument("manifest_set", metavar="SET",
                type=click.Choice(api.K8S_SETS))
@click.option("--values", "values_file", type=click.Path(dir_okay=False), default=None,
              help="YAML or JSON file of values (see --show-values).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one value (JSON-parsed).")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Write <set>.yaml files here.")
@click.option("--show-values", is_flag=True, help="List every value with its default and meaning.")
@click.option("--validate", "validate_versions", default=None, metavar="V1,V2",
              help="Also validate strictly against these Kubernetes versions (needs kubernetes-validate).")
@json_option
@click.option("--node-driver", default=None, metavar="VER",
              help="lucebox: refuse an image (image_cuda) the node's NVIDIA driver (e.g. 595.84) cannot start.")
@click.option("--node-report", default=None, type=click.Path(dir_okay=False),
              help="lucebox: the node report JSON (driver_version) to check image_cuda against.")
def k8s(manifest_set, values_file, sets, out, show_values, validate_versions, as_json, node_driver, node_report):
    """Render SET: lucebox | lucebox-vendored | rbac | verify-job (both variants) | hami-core-swap (alias daemonset)."""
    refuse_unused(click.get_current_context(), "render k8s")
    name = api.K8S_SET_ALIASES.get(manifest_set, manifest_set)
    if show_values:
        rows = api.set_values(name)
        if as_json:
            report.emit_json("render", {"what": "k8s", "set": name, "values": rows})
        report.table(f"values of {name} (--set KEY=VALUE, --values FILE)",
                     [report.Col("key", report.NAME), report.Col("default", report.TEXT), report.Col("meaning")],
                     [[r["key"], json.dumps(r["default"]), r["doc"]] for r in rows], as_json=as_json)
        return 0
    r = api.render_set(name, values_file=values_file, sets=sets, node_driver=node_driver, node_report=node_report,
                           validate_versions=validate_versions, out=out)
    if as_json:
        report.emit_json("render", {"what": "k8s", "set": name, "files": r.written, "objects": r.objects})
    elif not out:
        click.echo(r.text, nl=False)
    return 0


def _chart_options(f):
    f = json_option(f)
    for opt in reversed([
        click.argument("app", metavar="APP", type=click.Choice(api.LUCEBOX_APPS)),
        click.option("--out", type=click.Path(file_okay=False), required=True,
                     help="Write the package to OUT/lucebox/ (the chart's name for either line)."),
        click.option("--values", "values_file", type=click.Path(dir_okay=False), default=None,
                     help="YAML or JSON file of values (render k8s lucebox --show-values)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one value (JSON-parsed)."),
        click.option("--node-driver", default=None, metavar="VER",
                     help="Refuse an image (image_cuda) the node's NVIDIA driver cannot start."),
        click.option("--node-report", default=None, type=click.Path(dir_okay=False),
                     help="The node report JSON (driver_version) to check image_cuda against."),
    ]):
        f = opt(f)
    return f


def _emit(what: str, kind: str, path, files: list[str], as_json: bool, extra: dict | None = None) -> None:
    if as_json:
        report.emit_json("render", {"what": what, "path": str(path), "files": files, **(extra or {})})
    else:
        for f in files:
            click.echo(str(path / f))
    report.progress(f"wrote the {kind} to {path} ({len(files)} files)", final=True)


@command.command("helm")
@_chart_options
def helm(app, out, values_file, sets, node_driver, node_report, as_json):
    """Write the Lucebox Helm chart (Chart.yaml v2, values.yaml, values.schema.json, templates) to OUT/lucebox/.

    APP is the line: lucebox (8305b6c, lucepatch's image) or lucebox-vendored (62880e2, upstream's image
    and entrypoint). It renders the objects `render k8s APP` renders for the same values: `helm template
    lucebox OUT/lucebox --set port=9000` = `lucepatch render k8s APP --set port=9000`."""
    refuse_unused(click.get_current_context(), "render helm")
    w = api.render_helm(out, values_file=values_file, sets=sets, node_driver=node_driver, node_report=node_report,
                        app=app)
    _emit("helm", "Helm chart", w.path, w.files, as_json)


@command.command("olares")
@_chart_options
def olares(app, out, values_file, sets, node_driver, node_report, as_json):
    """Write the Lucebox Olares app (the Helm chart with Olares values + OlaresManifest.yaml) to OUT/lucebox/.

    APP is the line (lucebox or lucebox-vendored), as for `render helm`. OlaresManifest 0.12.0, apiVersion v3, Olares >= 1.12.6, one nvidia accelerator; checked against
    Olares' app lint rules before it is written. The image's CUDA is gated against the oldest driver
    Olares ships (lucepatch/data/cuda_drivers.toml) unless --node-driver / --node-report name the node."""
    refuse_unused(click.get_current_context(), "render olares")
    pkg = api.render_olares(out, values_file=values_file, sets=sets, node_driver=node_driver, node_report=node_report,
                            app=app)
    report.progress(f"the chart renders with what Olares injects at install: helm lint --strict {pkg.path} "
                    f"-f {pkg.injected}")
    _emit("olares", "Olares app", pkg.path, pkg.files, as_json,
          {"manifest": pkg.manifest, "injected_values": str(pkg.injected)})
