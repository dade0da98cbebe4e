"""`lucepatch verify --reproducer R`: baseline vs patched runs, verdict, evidence."""

from __future__ import annotations

import os
from pathlib import Path

import click

from lucepatch import git, report
from lucepatch.builders.native import build_variant
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.errors import EXIT_CHECK_FAILED, UsageError
from lucepatch.target import load_target
from lucepatch.upstream.fingerprints import match_fingerprint
from lucepatch.upstream.retire import format_retire_table, retire_exit_code, retire_report
from lucepatch.k8s import incluster
from lucepatch.verify.driver import DriverChoice, choose_driver
from lucepatch.verify.evidence import write_evidence
from lucepatch.verify.reproducer import list_reproducers, load_reproducer
from lucepatch.verify.session import Execution, Variant, build_evidence, plan_execution, run_matrix, variant_from_file


def _series_variants(t, src, cache_dir, baseline_ref, patched_ref):
    out = []
    for name in ("baseline", "patched"):
        ref = baseline_ref if name == "baseline" else patched_ref
        if ref:  # ref-vs-ref: upstream at each ref (+ Build-Only patches), no series
            b = build_variant(t, src, "baseline", cache_dir, base=ref)
            prov = {"from": "ref", "ref": ref, "commit": b.commit, "base": b.base, "tree": b.tree, "patches": b.patches}
        else:
            b = build_variant(t, src, name, cache_dir)
            prov = {"from": "series", "commit": b.commit, "base": b.base, "tree": b.tree, "patches": b.patches,
                    "build_key": b.key}
        out.append(Variant(name, b.artifacts[next(iter(b.artifacts))], prov))
    return out


def attach_fingerprints(doc: dict, records) -> None:
    """Name the known upstream issue each scenario's baseline failure matches (crash fingerprints)."""
    for s in doc["scenarios"]:
        failing = [r for r in records if r.scenario == s["scenario"] and r.variant == "baseline" and r.failed]
        for r in failing[:1]:
            fp = match_fingerprint(r.signal, "\n".join([r.first_error, r.log_tail]))
            if fp and fp.get("issue"):
                s["fingerprint"] = {k: fp[k] for k in ("issue", "url", "summary", "score") if k in fp}


def _retire(ctx, ws, target_name, source, ref, driver, runs, as_json) -> int:
    t = load_target(ws, target_name)
    src = require_source(source, t.name)
    git.open_repo(src)
    doc = retire_report(t, src, ref, cache(ctx), driver, runs, workspace=ws)
    if as_json:
        report.emit_json("verify-retire", {"workspace": ws.to_json(), **doc})
    title, columns, rows = format_retire_table(doc)
    report.table(title, columns, rows, to_stdout=not as_json)
    return retire_exit_code(doc)


@click.command("verify")
@click.option("--reproducer", "reproducer_names", multiple=True, help="Reproducer to run (repeatable).")
@click.option("--all", "run_all", is_flag=True, help="Every reproducer of the target.")
@click.option("--scenario", "scenarios", multiple=True, help="Only these scenarios (controls always run).")
@click.option("--target", "target_name", default=None, help="Target (default: the reproducer's).")
@source_option
@click.option("--driver", type=click.Choice(["auto", "real", "fake"]), default="auto", show_default=True,
              help="CUDA driver: the machine's, the simulated one, or real when a GPU answers.")
@click.option("--runs", type=click.IntRange(1, 10000), default=None, help="Runs per variant and scenario (default: the reproducer's).")
@click.option("--lib", "lib", default=None, help="Verify these bytes as the patched library (skip building).")
@click.option("--baseline-lib", default=None, help="These bytes as the baseline library.")
@click.option("--baseline-ref", default=None, help="Upstream ref as the baseline (ref-vs-ref, no series).")
@click.option("--patched-ref", default=None, help="Upstream ref as the 'patched' side (ref-vs-ref).")
@click.option("--jobs", type=click.IntRange(1, 256), default=None,
              help="Parallel runs (default: one per CPU when each run can get a private mount namespace "
                   "for /tmp/vgpulock, i.e. as root with unshare; serial otherwise). --jobs 1 forces serial.")
@click.option("--retire", "retire_ref", default=None, metavar="REF",
              help="Retirement by behaviour at upstream REF: run each patch's scenarios on unpatched and patched "
                   "upstream and name patches upstream made unnecessary or ineffective.")
@click.option("--in-cluster", is_flag=True, help="Run the reproducers as Jobs on a HAMi node (see docs/cluster.md).")
@click.option("--kubeconfig", default=None, help="Kubeconfig for --in-cluster (default: $LUCEPATCH_KUBECONFIG).")
@click.option("--context", "kube_context", default=None, help="Kubeconfig context for --in-cluster.")
@click.option("--namespace", default="lucepatch", show_default=True, help="Namespace of the verify Jobs.")
@click.option("--node", default=None, help="Pin the Jobs to this node.")
@click.option("--gpu-mem", type=int, default=None, help="nvidia.com/gpumem (MiB) requested by each Job.")
@click.option("--image", default=None, help="Image with /lucepatch/bin/<reproducer> and /lucepatch/lib/<variant>/libvgpu.so.")
@click.option("--from-logs", type=click.Path(file_okay=False), default=None,
              help="Re-evaluate recorded pod logs (<reproducer>.<scenario>.<variant>.log) instead of running.")
@click.option("--save-logs", type=click.Path(file_okay=False), default=None, help="Keep the fetched pod logs here.")
@click.option("--evidence", "evidence_path", type=click.Path(dir_okay=False), default=None, help="Write the evidence JSON here.")
@json_option
@click.pass_context
def command(ctx, reproducer_names, run_all, scenarios, target_name, source, driver, runs, lib, baseline_lib,
            baseline_ref, patched_ref, jobs, retire_ref, in_cluster, kubeconfig, kube_context, namespace, node,
            gpu_mem, image, from_logs, save_logs, evidence_path, as_json):
    """Run reproducers against the baseline and the patched build and decide whether the fix is proven."""
    ws = workspace(ctx)
    if retire_ref:
        return _retire(ctx, ws, target_name, source, retire_ref, driver, runs, as_json)
    if run_all and reproducer_names:
        raise UsageError("give --reproducer or --all, not both")
    if not run_all and not reproducer_names:
        raise UsageError("name a reproducer (--reproducer async-sched) or pass --all")
    if bool(lib) != bool(baseline_lib):
        raise UsageError("--lib and --baseline-lib go together")
    if bool(baseline_ref) != bool(patched_ref):
        raise UsageError("--baseline-ref and --patched-ref go together")
    if lib and baseline_ref:
        raise UsageError("--lib/--baseline-lib and --baseline-ref/--patched-ref exclude each other")
    if run_all:
        t = load_target(ws, target_name)
        repros = [r for r in list_reproducers(ws) if r.target == t.name]
    else:
        repros = [load_reproducer(ws, n) for n in reproducer_names]
        t = load_target(ws, target_name or repros[0].target)
    if not repros:
        raise UsageError(f"no reproducer targets {t.name} in workspace {ws.path}")
    artifacts = {r.artifact for r in repros}
    if len(artifacts) != 1 or any(r.target != t.name for r in repros):
        raise UsageError("the chosen reproducers need different targets or artifacts; verify them separately")
    c = cache(ctx)
    if from_logs:
        in_cluster = True
    if in_cluster:
        # The node's driver runs the reproducers; what it was is read back from the pod logs.
        drv = DriverChoice(requested="in-cluster", chosen="real", env={}, fake_dir=None, note="the node's driver")
        if not from_logs:
            if kubeconfig:
                os.environ["LUCEPATCH_KUBECONFIG"] = kubeconfig
            incluster.require_cluster()
            if not image:
                raise UsageError("--in-cluster needs --image (the reproducers and both libraries; docs/cluster.md)")
    else:
        drv = choose_driver(driver, c)
    report.progress(f"workspace {ws.describe()}; driver {drv.chosen} ({drv.note or drv.requested})")
    if lib:
        variants = [variant_from_file("baseline", baseline_lib), variant_from_file("patched", lib)]
        upstream_base = None
    else:
        src = require_source(source, t.name)
        git.open_repo(src)
        variants = _series_variants(t, src, c, baseline_ref, patched_ref)
        upstream_base = variants[0].provenance.get("base")
    n = runs or max(r.default_runs for r in repros)
    cluster = None
    if in_cluster:
        plan = incluster.plan_runs(repros, list(scenarios) or None, [v.name for v in variants])
        shas = {v.name: v.sha256 for v in variants}
        ex = Execution("in-cluster", 1, "pod", "one Job per scenario and variant, runs serial inside each pod")
        if from_logs:
            records = incluster.from_logs(Path(from_logs), plan, shas, n)
            cluster = {"from_logs": str(from_logs)}
        else:
            records, cluster = incluster.run_live(plan, shas, n, image=image, namespace=namespace, node=node,
                                                  gpu_mem_mib=gpu_mem, context=kube_context,
                                                  save_logs=Path(save_logs) if save_logs else None)
        ex.processes = len(records)
    else:
        ex = plan_execution(jobs)
        report.progress(f"execution: {ex.mode}" + (f", {ex.jobs} jobs" if ex.mode == "parallel" else "") + f" ({ex.why})")
        records = run_matrix(repros, variants, n, drv, c, list(scenarios) or None, execution=ex)
    doc = build_evidence(t, repros, variants, records, drv, n, ws.to_json(), upstream_base, execution=ex)
    if cluster is not None:
        doc["cluster"] = cluster
    attach_fingerprints(doc, records)
    if evidence_path:
        write_evidence(evidence_path, doc)
    if as_json:
        report.emit_json("verify", {"evidence_path": evidence_path, "evidence": doc})
    d = doc["driver"]
    report.table(
        f"verify {', '.join(r.name for r in repros)} on {t.name} — driver {d.get('kind')} "
        f"({d.get('gpu')}, driver {d.get('version')})",
        ["scenario", "baseline fail", "patched fail", "p-value", "verdict", "why"],
        [[s["scenario"] + (" (control)" if s["control"] else " (guard)" if s.get("regression_guard") else ""),
          f"{s['baseline']['failures']}/{s['baseline']['runs']}", f"{s['patched']['failures']}/{s['patched']['runs']}",
          "" if s["p_value"] is None else f"{s['p_value']:.3g}", s["verdict"], s.get("reason", "")]
         for s in doc["scenarios"]], to_stdout=not as_json)
    ex_doc = doc["execution"]
    report.progress(f"{ex_doc['processes']} processes in {ex_doc['wall_s']:.1f}s, {ex_doc['mode']}"
                    + (f" x{ex_doc['jobs']}" if ex_doc["mode"] == "parallel" else ""))
    for s in doc["scenarios"]:
        if s.get("fingerprint"):
            report.progress(f"baseline failure of {s['scenario']} {s['fingerprint']['summary']} ({s['fingerprint'].get('url', '')})")
    for sk in doc["skipped"]:
        report.progress(f"skipped: {sk['scenario']}: {sk['reason']}")
    report.progress(f"verdict: {doc['verdict']}" + (" (simulated driver)" if doc.get("simulated") else "")
                    + (f"; evidence written to {evidence_path}" if evidence_path else ""))
    return 0 if doc["verdict"] == "proven" else EXIT_CHECK_FAILED
