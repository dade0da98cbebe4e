"""`lucepatch deploy hami-core`: gate a patched libvgpu.so on its evidence, then swap it on the nodes."""

from __future__ import annotations

import json

import click

from lucepatch.errors import CheckFailed, UsageError

PLACEHOLDER_IMAGE = "REPLACE-ME/hami-core-lib:TAG"


@click.group("deploy")
def command():
    """Roll a proven fix out to a cluster (needs LUCEPATCH_KUBECONFIG unless --dry-run)."""


@command.command("hami-core")
@click.option("--lib", type=click.Path(dir_okay=False), default=None, help="The patched libvgpu.so (the bytes verify ran).")
@click.option("--evidence", type=click.Path(dir_okay=False), default=None, help="evidence.json from `lucepatch verify`.")
@click.option("--lib-image", default=None, help="Image holding --lib at --lib-path (copied to the node by an init container).")
@click.option("--lib-path", default="/lucepatch/lib/libvgpu.so", show_default=True, help="Path of the library in --lib-image.")
@click.option("--installed", type=click.Path(dir_okay=False), default=None,
              help="A copy of a node's current libvgpu.so, for the symbol and shared-region gates.")
@click.option("--hami-version", "hami_versions", multiple=True, help="HAMi version of the nodes (e.g. v2.8.3); repeatable.")
@click.option("--values", "values_file", type=click.Path(dir_okay=False), default=None, help="Values for the DaemonSet.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one DaemonSet value.")
@click.option("--rollback", is_flag=True, help="Restore each node's backed-up original library.")
@click.option("--watch", "reassert", type=int, default=0, metavar="SECONDS",
              help="Re-assert the fix every SECONDS (a HAMi restart overwrites it); 0 = once.")
@click.option("--dry-run", is_flag=True, help="Check the gates and print the manifests; touch no cluster.")
@click.option("--context", default=None, help="kubeconfig context.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document (schema_version 1) on stdout.")
def hami_core(lib, evidence, lib_image, lib_path, installed, hami_versions, values_file, sets, rollback, reassert,
              dry_run, context, as_json):
    """Install (or --rollback) a patched libvgpu.so on every HAMi node through a privileged DaemonSet."""
    from lucepatch.k8s import client, gates, manifests, swap, values

    live = not dry_run
    if live and not client.kubeconfig_path():
        raise UsageError("no cluster: set LUCEPATCH_KUBECONFIG, or pass --dry-run to only check and print")
    overrides = {"action": "rollback" if rollback else "install", "reassert_seconds": reassert}
    report = {"schema_version": 1, "action": overrides["action"], "dry_run": dry_run, "gates": [], "nodes": []}
    if not rollback:
        if not lib or not evidence:
            raise UsageError("deploy hami-core needs --lib FILE and --evidence FILE (or --rollback)")
        gl = gates.run_gates(lib, evidence, installed=installed, hami_versions=hami_versions, live=live)
        report["gates"] = [g.to_dict() for g in gl]
        for g in gl:
            mark = {True: "ok  ", False: "FAIL", None: "skip"}[g.ok]
            click.echo(f"gate {mark} {g.name}: {g.message}", err=True)
        if not gates.passed(gl, live):
            report["result"] = "refused"
            if as_json:
                click.echo(json.dumps(report, indent=2))
            failed = [g.name for g in gl if g.ok is False] or [g.name for g in gl if g.ok is None]
            raise CheckFailed(f"deploy refused by gate(s) {', '.join(failed)}: fix them, nothing was deployed")
        if not lib_image and live:
            raise UsageError("--lib-image is required: an image holding the patched library at --lib-path")
        overrides.update(lib_image=lib_image or PLACEHOLDER_IMAGE, lib_path_in_image=lib_path,
                         lib_sha256=swap.sha256_file(lib))
    vals = values.resolve("hami-core-swap", values.load_file(values_file) if values_file else {},
                          values.parse_set(sets), overrides)
    docs = manifests.render("hami-core-swap", vals)
    if dry_run:
        report["result"] = "dry-run"
        report["objects"] = manifests.to_objects(docs) if as_json else None
        if as_json:
            click.echo(json.dumps(report, indent=2))
        else:
            click.echo(manifests.join(docs), nl=False)
        return 0
    objs = manifests.to_objects(docs)
    for line in client.apply(objs, context=context):
        click.echo(line, err=True)
    logs = client.swap_pod_logs(vals["namespace"], context=context)
    rows = client.swap_status_rows(vals["lib_sha256"] if not rollback else None, logs)
    report["nodes"] = rows
    bad = [r for r in rows if r["outcome"] not in ("installed", "noop", "rolled-back")]
    report["result"] = "failed" if bad or not rows else "ok"
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for r in rows:
            click.echo(f"{r['node']:30} {r['outcome']:12} {r['current_sha256'] or '-'}  {r['message']}")
    if not rows:
        raise CheckFailed("no swap pod reported: check the DaemonSet's nodeSelector (kubectl get ds -n "
                          f"{vals['namespace']})")
    return 1 if bad else 0


