"""`lucepatch deploy hami-core`: gate a patched libvgpu.so on its evidence, then swap it on the nodes."""

from __future__ import annotations

import click

from lucepatch import api, report as out
from lucepatch.commands._common import json_option, refuse_unused
from lucepatch.errors import CheckFailed


@click.group("deploy")
def command():
    """Roll a proven fix out to a cluster (needs LUCEPATCH_KUBECONFIG unless --dry-run)."""


@command.command("hami-core")
@click.option("--lib", type=click.Path(dir_okay=False), default=None, help="The patched libvgpu.so (the bytes verify ran).")
@click.option("--evidence", type=click.Path(dir_okay=False), default=None, help="evidence.json from `lucepatch verify`.")
@click.option("--lib-image", default=None, help="Image holding --lib at --lib-path (copied to the node by an init container).")
@click.option("--lib-path", default="/lucepatch/lib/libvgpu.so", show_default=True, help="Path of the library in --lib-image.")
@click.option("--installed", type=click.Path(dir_okay=False), default=None,
              help="A copy of a node's current libvgpu.so, for the symbol, shared-region and line gates.")
@click.option("--node-report", type=click.Path(dir_okay=False), default=None,
              help="A node report (node --pod NAME --save-report FILE): the nodes' library, its pods' glibc.")
@click.option("--hami-version", "hami_versions", multiple=True, help="HAMi version of the nodes (e.g. v2.8.3); repeatable.")
@click.option("--values", "values_file", type=click.Path(dir_okay=False), default=None, help="Values for the DaemonSet.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one DaemonSet value.")
@click.option("--rollback", is_flag=True, help="Restore each node's backed-up original library.")
@click.option("--watch", "reassert", type=int, default=0, metavar="SECONDS",
              help="Re-assert the fix every SECONDS (a HAMi restart overwrites it); 0 = once.")
@click.option("--dry-run", is_flag=True, help="Check the gates and print the manifests; touch no cluster.")
@click.option("--context", default=None, help="kubeconfig context.")
@json_option
def hami_core(lib, evidence, lib_image, lib_path, installed, node_report, hami_versions, values_file, sets, rollback,
              reassert, dry_run, context, as_json):
    """Install (or --rollback) a patched libvgpu.so on every HAMi node through a privileged DaemonSet."""
    refuse_unused(click.get_current_context(), "deploy hami-core")
    # the gates are progress on stderr as they run; with --dry-run they are also the result: on
    # stdout, in the JSON document or (printed once, not twice) as comments above the manifests
    seen = []

    def gate_line(g):
        seen.append(f"gate {({True: 'ok  ', False: 'FAIL', None: 'skip'}[g.ok])} {g.name}: {g.message}")
        if not dry_run or as_json:
            out.progress(seen[-1])

    def gate_report():
        # YAML comments: `deploy --dry-run | kubectl apply -f -` still reads the manifests after them
        if dry_run and not as_json and seen:
            click.echo("".join(f"# {line}\n" for line in seen), nl=False)

    def refused(doc):
        if as_json:
            out.emit_json("deploy", _doc(doc))
        gate_report()

    d = api.deploy_hami_core(
        as_objects=as_json, lib=lib, evidence=evidence, lib_image=lib_image, lib_path=lib_path, installed=installed, node_report=node_report,
        hami_versions=hami_versions, values_file=values_file, sets=sets, rollback=rollback, reassert=reassert,
        dry_run=dry_run, context=context, on_gate=gate_line, on_refused=refused, on_apply=out.progress)
    doc, namespace = d.doc, d.namespace
    if dry_run:
        doc["objects"] = d.objects
        if as_json:
            out.emit_json("deploy", _doc(doc))
        else:
            gate_report()
            click.echo(d.manifests, nl=False)
        return 0
    rows = doc["nodes"]
    if as_json:
        out.emit_json("deploy", _doc(doc))
    out.table(f"deploy hami-core: {doc['action']} ({doc['result']})",
              [out.Col("node", out.NAME), out.Col("outcome", out.KEY), out.Col("current sha256", out.VALUE),
               out.Col("message", out.TEXT)],
              [[r["node"], r["outcome"], r["current_sha256"] or "-", r["message"]] for r in rows], as_json=as_json)
    if not rows:
        raise CheckFailed(f"no swap pod reported: check the DaemonSet's nodeSelector (kubectl get ds -n {namespace})")
    return 1 if doc["result"] == "failed" else 0


def _doc(doc: dict) -> dict:
    """The deploy report as a --json document (report.emit_json adds schema_version and verb)."""
    return {k: v for k, v in doc.items() if k != "schema_version"}
