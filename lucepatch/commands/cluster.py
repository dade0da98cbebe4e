"""`lucepatch cluster status`: per node, the installed libvgpu.so sha256 vs the deployed fix."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused


@click.group("cluster")
def command():
    """Inspect what lucepatch put on a cluster (needs LUCEPATCH_KUBECONFIG)."""


@command.command("status")
@click.option("--namespace", default="lucepatch-system", show_default=True, help="Namespace of the swap DaemonSet.")
@click.option("--name", default="lucepatch-hami-core-swap", show_default=True, help="Name of the swap DaemonSet.")
@click.option("--context", default=None, help="kubeconfig context.")
@json_option
def status(namespace, name, context, as_json):
    """Per node: current library sha256 vs the expected one (drift = overwritten, e.g. by a HAMi update)."""
    refuse_unused(click.get_current_context(), "cluster status")
    expected, rows = api.cluster_status(namespace, name, context)
    if as_json:
        report.emit_json("cluster", {"expected_sha256": expected, "nodes": rows})
    report.table(f"cluster status: {namespace}/{name}, expected sha256 {expected or 'unknown'}",
                 [report.Col("node", report.NAME), report.Col("state", report.KEY),
                  report.Col("current sha256", report.VALUE)],
                 [[r["node"], r["state"], r["current_sha256"] or "-"] for r in rows], as_json=as_json)
    return 0 if rows and all(r["state"] == "ok" for r in rows) else 1
