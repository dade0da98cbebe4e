"""`lucepatch cluster status`: per node, the installed libvgpu.so sha256 vs the deployed fix."""

from __future__ import annotations

import json

import click


@click.group("cluster")
def command():
    """Inspect what lucepatch put on a cluster (needs LUCEPATCH_KUBECONFIG)."""


@command.command("status")
@click.option("--namespace", default="lucepatch-system", show_default=True, help="Namespace of the swap DaemonSet.")
@click.option("--name", default="lucepatch-hami-core-swap", show_default=True, help="Name of the swap DaemonSet.")
@click.option("--context", default=None, help="kubeconfig context.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document (schema_version 1) on stdout.")
def status(namespace, name, context, as_json):
    """Per node: current library sha256 vs the expected one (drift = overwritten, e.g. by a HAMi update)."""
    from lucepatch.k8s import client

    api = client.load(context)
    ds = api.AppsV1Api().read_namespaced_daemon_set(name, namespace)
    expected = (ds.metadata.annotations or {}).get("lucepatch.dev/lib-sha256") or None
    logs = client.swap_pod_logs(namespace, context=context, wait_s=0)
    rows = client.swap_status_rows(expected, logs)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "expected_sha256": expected, "nodes": rows}, indent=2))
    else:
        for r in rows:
            click.echo(f"{r['node']:30} {r['state']:8} {r['current_sha256'] or '-'}")
    return 0 if rows and all(r["state"] == "ok" for r in rows) else 1
