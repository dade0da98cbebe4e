"""`lucepatch render k8s SET`: render cluster manifests (Lucebox, RBAC, verify Jobs, swap DaemonSet).
`lucepatch render real-clients --evidence F...`: the "Real clients" table (README, PR body) from evidence."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lucepatch import report
from lucepatch.commands._common import json_option
from lucepatch.errors import CheckFailed

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
    from lucepatch.commands._common import workspace
    from lucepatch.upstream import real_clients as rc
    from lucepatch.verify.reproducer import list_reproducers

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
def k8s(manifest_set, values_file, sets, out, show_values, validate_versions, as_json):
    """Render SET: lucebox | rbac | verify-job (both variants) | hami-core-swap (alias daemonset)."""
    from lucepatch.k8s import manifests, values

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
    docs = manifests.render_verify_jobs(vals) if name == "verify-job" else manifests.render(name, vals)
    if validate_versions:
        from lucepatch.k8s import validate

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
    if as_json:
        report.emit_json("render", {"what": "k8s", "set": name, "files": written, "objects": manifests.to_objects(docs)})
    elif not out:
        click.echo(manifests.join(docs), nl=False)
    return 0
