"""`lucepatch verify --reproducer R`: baseline vs patched runs, verdict, evidence."""

from __future__ import annotations


import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, source_option, workspace
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("verify")
@click.option("--reproducer", "reproducer_names", multiple=True, help="Reproducer to run (repeatable).")
@click.option("--all", "run_all", is_flag=True, help="Every reproducer of the target.")
@click.option("--scenario", "scenarios", multiple=True, help="Only these scenarios (controls always run).")
@click.option("--target", "target_name", default=None, help="Target (default: the reproducer's).")
@source_option
@click.option("--driver", type=click.Choice(["auto", "real", "fake"]), default="auto", show_default=True,
              help="CUDA driver: the machine's, the simulated one, or real when a GPU answers.")
@click.option("--runs", type=click.IntRange(1, 10000), default=None,
              help="Most runs per variant and scenario (default: the reproducer's, 20). The sequential rule stops "
                   "a scenario once its verdict is settled (baseline 5 failures in a row, patched 10 passes).")
@click.option("--fixed", is_flag=True, help="Run every scenario exactly --runs times per variant (no early stop).")
@click.option("--lib", "lib", default=None, help="Verify these bytes as the patched library (skip building).")
@click.option("--baseline-lib", default=None, help="These bytes as the baseline library.")
@click.option("--baseline-ref", default=None, help="Upstream ref as the baseline (ref-vs-ref, no series).")
@click.option("--patched-ref", default=None, help="Upstream ref as the 'patched' side (ref-vs-ref).")
@click.option("--jobs", type=click.IntRange(1, 256), default=None,
              help="Parallel runs (default: one per CPU, at most 6, or 8 when workload reproducers run, when each run "
                   "can get a private mount namespace for /tmp/vgpulock, i.e. as root with unshare; serial otherwise). "
                   "--jobs 1 forces serial.")
@click.option("--retire", "retire_ref", default=None, metavar="REF",
              help="Retirement by behaviour at upstream REF: add-one, leave-one-out, a positive control at the base, "
                   "coverage, an input sweep and a joint check per patch (superseded only with a code signal that "
                   "upstream has the change; behaviour alone: retire-candidate, needs review / still-needed / "
                   "untestable / inconclusive). --reproducer R judges with R only.")
@click.option("--coverage-map", is_flag=True,
              help="Show which scenarios execute which patch hunks (gcc --coverage on the configured driver), at "
                   "--retire REF or at the pinned base.")
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
@click.option("--node-report", type=click.Path(dir_okay=False), default=None,
              help="What a node runs (node --pod ... --save-report): --baseline-lib must be its library's bytes; "
                   "the evidence records the node.")
@click.option("--wide", is_flag=True, help="Full verdict reasons under the table (the evidence always has them).")
@json_option
@click.pass_context
def command(ctx, reproducer_names, run_all, scenarios, target_name, source, driver, runs, fixed, lib, baseline_lib,
            baseline_ref, patched_ref, jobs, retire_ref, coverage_map, in_cluster, kubeconfig, kube_context, namespace, node,
            gpu_mem, image, from_logs, save_logs, evidence_path, node_report, wide, as_json):
    """Run reproducers against the baseline and the patched build and decide whether the fix is proven."""
    refuse_unused(ctx, "verify")
    ws = workspace(ctx)
    if retire_ref or coverage_map:
        j = api.retire_or_map(ws, cache(ctx), target=target_name, source=source, ref=retire_ref, driver=driver,
                              runs=runs, coverage_map=coverage_map, reproducers=list(reproducer_names))
        if as_json:
            report.emit_json(j.kind, {"workspace": ws.to_json(), **j.doc})
        report.table(*j.table, as_json=as_json)
        if not as_json:
            for line in j.review:  # what a reviewer of each candidate reads (all of it in --json)
                report.progress(line)
        return j.code
    t, repros, note = api.selection(ws, target=target_name, reproducers=list(reproducer_names), run_all=run_all)
    if note:
        report.progress(note)
    backend = api.cluster_backend(in_cluster=in_cluster, from_logs=from_logs, image=image, kubeconfig=kubeconfig,
                                    context=kube_context, namespace=namespace, node=node, gpu_mem_mib=gpu_mem,
                                    save_logs=save_logs)
    ev = api.verify(ws, t, repros, cache=cache(ctx), progress=report.progress, source=source, lib=lib,
                    baseline_lib=baseline_lib, evidence=evidence_path, node_report=node_report, driver=driver,
                    runs=runs, fixed=fixed, scenarios=list(scenarios), baseline_ref=baseline_ref,
                    patched_ref=patched_ref, jobs=jobs, backend=backend)
    if as_json:
        report.emit_json("verify", {"evidence_path": evidence_path, "evidence": ev.to_json()})
    else:
        api.print_verdicts(report.out(), ev, wide=wide)
    ex = ev.execution
    report.progress(f"{ex['processes']} processes in {ex['wall_s']:.1f}s, {ex['mode']}"
                    + (f" x{ex['jobs']}" if ex["mode"] == "parallel" else ""))
    for s in ev.scenarios:
        if s.fingerprint:
            # the address is in the evidence and in `show`: the line names it and fits
            report.progress(f"{s.scenario}: baseline {s.fingerprint['summary']}")
    if ev.skipped and not as_json:  # each reason is under the table, whole (and in the evidence)
        report.progress(f"{len(ev.skipped)} scenario(s) skipped; why is under the table")
    elif ev.skipped:  # no table: each distinct reason once, with the scenarios it skipped
        by: dict[str, list[str]] = {}
        for sk in ev.skipped:
            by.setdefault(sk["reason"], []).append(sk["scenario"])
        for reason, scs in by.items():
            report.progress(f"skipped {', '.join(scs) if len(scs) <= 2 else f'{len(scs)} scenarios'}: {reason}")
    report.progress(f"verdict: {ev.verdict}" + (" (simulated driver)" if ev.simulated else "")
                    + f"; {ex['processes']} runs in {api.clock(ex['wall_s'])}"
                    + (f"; evidence written to {evidence_path}" if evidence_path else ""), final=True)
    return 0 if ev.verdict == "proven" else EXIT_CHECK_FAILED
