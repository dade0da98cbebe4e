"""`deploy hami-core` as a service: gate a patched libvgpu.so on its evidence (k8s/gates.py), render
the swap DaemonSet (k8s/manifests.py), apply it and read each node's outcome from the swap pods.

`deploy_hami_core` returns the report document (schema_version 1) the command prints; a refusal
raises CheckFailed after `on_refused(report)` so the caller can still print why."""

from __future__ import annotations

from lucepatch.errors import CheckFailed, UsageError
from lucepatch.files import sha256_file
from lucepatch.k8s import client, gates, manifests, values

PLACEHOLDER_IMAGE = "REPLACE-ME/hami-core-lib:TAG"


def deploy_hami_core(*, lib=None, evidence=None, lib_image=None, lib_path="/lucepatch/lib/libvgpu.so", installed=None,
                     node_report=None,
                     hami_versions=(), values_file=None, sets=(), rollback=False, reassert=0, dry_run=False,
                     context=None, on_gate=lambda g: None, on_refused=lambda report: None,
                     on_apply=lambda line: None) -> tuple[dict, list, str]:
    """(report, rendered documents, namespace). Live runs fill report["nodes"] and report["result"]."""
    live = not dry_run
    if live and not client.kubeconfig_path():
        raise UsageError("no cluster: set LUCEPATCH_KUBECONFIG, or pass --dry-run to only check and print")
    overrides = {"action": "rollback" if rollback else "install", "reassert_seconds": reassert}
    report = {"schema_version": 1, "action": overrides["action"], "dry_run": dry_run, "gates": [], "nodes": []}
    if not rollback:
        if not lib or not evidence:
            raise UsageError("deploy hami-core needs --lib FILE and --evidence FILE (or --rollback)")
        gl = gates.run_gates(lib, evidence, installed=installed, hami_versions=hami_versions, live=live,
                             node_report=node_report)
        report["gates"] = [g.to_dict() for g in gl]
        for g in gl:
            on_gate(g)
        if not gates.passed(gl, live):
            report["result"] = "refused"
            on_refused(report)
            failed = [g.name for g in gl if g.ok is False] or [g.name for g in gl if g.ok is None]
            raise CheckFailed(f"deploy refused by gate(s) {', '.join(failed)}: fix them, nothing was deployed")
        if not lib_image and live:
            raise UsageError("--lib-image is required: an image holding the patched library at --lib-path")
        overrides.update(lib_image=lib_image or PLACEHOLDER_IMAGE, lib_path_in_image=lib_path,
                         lib_sha256=sha256_file(lib))
    vals = values.resolve("hami-core-swap", values.load_file(values_file) if values_file else {},
                          values.parse_set(sets), overrides)
    docs = manifests.render("hami-core-swap", vals)
    if dry_run:
        report["result"] = "dry-run"
        return report, docs, vals["namespace"]
    for line in client.apply(manifests.to_objects(docs), context=context):
        on_apply(line)
    logs = client.swap_pod_logs(vals["namespace"], context=context)
    rows = client.swap_status_rows(vals["lib_sha256"] if not rollback else None, logs)
    report["nodes"] = rows
    bad = [r for r in rows if r["outcome"] not in ("installed", "noop", "rolled-back")]
    report["result"] = "failed" if bad or not rows else "ok"
    return report, docs, vals["namespace"]
