"""`lucepatch render k8s SET`: render cluster manifests (Lucebox, RBAC, verify Jobs, swap DaemonSet).
`lucepatch render helm lucebox --out DIR`: the Lucebox Helm chart (same model as `render k8s lucebox`).
`lucepatch render olares lucebox --out DIR`: the Lucebox Olares app (that chart + OlaresManifest.yaml).
`lucepatch render real-clients --evidence F...`: the "Real clients" table (README, PR body) from evidence."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lucepatch import report
from lucepatch.commands._common import json_option, workspace
from lucepatch.errors import CheckFailed
from lucepatch.k8s import validate, values
from lucepatch.node import driver as drv, report as noderep
from lucepatch.verify.reproducer import list_reproducers

SET_ALIASES = {"daemonset": "hami-core-swap", "swap": "hami-core-swap", "verify-jobs": "verify-job", "job": "verify-job"}


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
    from lucepatch.upstream import real_clients as rc  # lazy: `render real-clients` only, 20 ms

    ws = workspace(ctx)
    hashes = {r.name: r.hash for r in list_reproducers(ws)}
    docs = rc.load([Path(p) for p in paths], target=target_name, repro_hashes=hashes)
    if as_json:
        report.emit_json("render", {"what": "real-clients", "target": target_name, "evidence": list(paths),
                                    "columns": rc.COLUMNS, "rows": rc.rows(docs),
                                    "sources": [rc.source(d) for d in docs]})
    else:
        click.echo(rc.markdown(docs), nl=False)


@command.command("k8s")
@click.argument("manifest_set", metavar="SET",
                type=click.Choice(["lucebox", "rbac", "verify-job", "hami-core-swap", *SET_ALIASES]))
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
    """Render SET: lucebox | rbac | verify-job (both variants) | hami-core-swap (alias daemonset)."""
    from lucepatch.k8s import manifests, values  # lazy: `render k8s` only, 18 ms

    name = SET_ALIASES.get(manifest_set, manifest_set)
    if show_values:
        rows = values.describe(name)
        if as_json:
            report.emit_json("render", {"what": "k8s", "set": name, "values": rows})
        report.table(f"values of {name} (--set KEY=VALUE, --values FILE)",
                     [report.Col("key", report.NAME), report.Col("default", report.TEXT), report.Col("meaning")],
                     [[r["key"], json.dumps(r["default"]), r["doc"]] for r in rows], as_json=as_json)
        return 0
    vals = values.resolve(name, values.load_file(values_file) if values_file else {}, values.parse_set(sets))
    _driver_gate(vals, node_driver, node_report, lucebox=name == "lucebox")
    docs = manifests.render_verify_jobs(vals) if name == "verify-job" else manifests.render(name, vals)
    if validate_versions:
        problems = validate.strict_validate(manifests.to_objects(docs), [v.strip() for v in validate_versions.split(",")])
        if problems:
            raise CheckFailed(f"{len(problems)} schema problem(s), first: {problems[0]}")
        report.progress(f"validated against Kubernetes {validate_versions}")
    written = []
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for d in docs:
            p = Path(out) / d.filename
            p.write_text(d.text, encoding="utf-8")
            written.append(str(p))
            report.progress(f"wrote {p}")
        # `kubectl apply -k DIR` / `kubectl kustomize DIR` take the folder as it is
        k = Path(out) / "kustomization.yaml"
        k.write_text(manifests.kustomization(docs))
        written.append(str(k))
        report.progress(f"wrote {k}")
    if as_json:
        report.emit_json("render", {"what": "k8s", "set": name, "files": written, "objects": manifests.to_objects(docs)})
    elif not out:
        click.echo(manifests.join(docs), nl=False)
    return 0


def _driver_gate(vals: dict, node_driver: str | None, node_report: str | None, *, lucebox: bool,
                 default=None) -> None:
    """Refuse (exit 1) an image whose CUDA the node's driver cannot start; say so when it can."""
    d = noderep.node_driver(node_driver, node_report) or default
    if d is None:
        return
    if not lucebox:
        raise click.UsageError("--node-driver / --node-report apply to the lucebox set (its image_cuda)")
    report.progress(f"node driver: {drv.require(str(vals['image_cuda']), d).message}")


def _chart_options(f):
    f = json_option(f)
    for opt in reversed([
        click.argument("app", metavar="APP", type=click.Choice(["lucebox"])),
        click.option("--out", type=click.Path(file_okay=False), required=True, help="Write the package to OUT/lucebox/."),
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


def _emit(what: str, kind: str, path: Path, files: list[str], as_json: bool, extra: dict | None = None) -> None:
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

    It renders the objects `render k8s lucebox` renders for the same values: `helm template lucebox
    OUT/lucebox --set port=9000` = `lucepatch render k8s lucebox --set port=9000`."""
    from lucepatch.k8s import chart, values  # lazy: `render chart` only, 19 ms

    overrides = [values.load_file(values_file) if values_file else {}, values.parse_set(sets)]
    _driver_gate(values.resolve("lucebox", *overrides), node_driver, node_report, lucebox=True)
    w = chart.render_helm(Path(out), {k: v for o in overrides for k, v in o.items()})
    _emit("helm", "Helm chart", w.path, w.files, as_json)


@command.command("olares")
@_chart_options
def olares(app, out, values_file, sets, node_driver, node_report, as_json):
    """Write the Lucebox Olares app (the Helm chart with Olares values + OlaresManifest.yaml) to OUT/lucebox/.

    OlaresManifest 0.12.0, apiVersion v3, Olares >= 1.12.6, one nvidia accelerator; checked against
    Olares' app lint rules before it is written. The image's CUDA is gated against the oldest driver
    Olares ships (lucepatch/data/cuda_drivers.toml) unless --node-driver / --node-report name the node."""
    from lucepatch.k8s import olares as ol  # lazy: `render olares` only, 19 ms

    overrides = {}
    for o in (values.load_file(values_file) if values_file else {}, values.parse_set(sets)):
        overrides.update(o)
    vals = ol.package_values(overrides)
    _driver_gate(vals, node_driver, node_report, lucebox=True, default=min(drv.platform_drivers("olares")))
    pkg = ol.render_olares(Path(out), overrides)
    report.progress(f"the chart renders with what Olares injects at install: helm lint --strict {pkg.path} "
                    f"-f {pkg.injected}")
    _emit("olares", "Olares app", pkg.path, pkg.files, as_json,
          {"manifest": pkg.manifest, "injected_values": str(pkg.injected)})
