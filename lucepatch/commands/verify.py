"""`lucepatch verify --reproducer R`: baseline vs patched runs, verdict, evidence."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import git, report
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.errors import EXIT_CHECK_FAILED
from lucepatch.node.report import load_node_report
from lucepatch.show.model import build_view
from lucepatch.show.terminal import print_parts, verdict_parts
from lucepatch.target import family_lines, load_target
from lucepatch.upstream import coverage, retire
from lucepatch.verify.evidence import write_evidence
from lucepatch.verify.progress import clock
from lucepatch.verify.node import node_section
from lucepatch.verify.service import VerifyRequest, run_verify, select


def _retire(ctx, ws, target_name, source, ref, driver, runs, as_json, coverage_map, reproducer_names) -> int:
    if not target_name and reproducer_names:  # the target is the reproducers' (as verify --reproducer R)
        target_name = select(ws, reproducers=list(reproducer_names))[0].name
    t = load_target(ws, target_name)
    src = require_source(source, t.name, family=t.family)
    git.open_repo(src)
    names = list(reproducer_names) or None
    if coverage_map:  # the map alone, at REF or at the pinned base
        m, left_out = retire.coverage_map_at(t, src, ref or t.base, cache(ctx), driver, workspace=ws,
                                             reproducers=names)
        doc = {**m.to_json(), "left_out": left_out, "cached": m.cached}
        kind, (title, columns, rows), rc = "verify-coverage-map", coverage.format_coverage_map(m), 0
    else:
        doc = retire.retire_report(t, src, ref, cache(ctx), driver, runs, workspace=ws, reproducers=names)
        doc["saved"] = str(retire.save_report(doc, t, cache(ctx), ws))  # what a rebase session's `needed` reads
        kind, (title, columns, rows), rc = "verify-retire", retire.format_retire_table(doc), retire.retire_exit_code(doc)
    if as_json:
        report.emit_json(kind, {"workspace": ws.to_json(), **doc})
    report.table(title, columns, rows, as_json=as_json)
    if not coverage_map and not as_json:
        for line in retire.review_lines(doc):  # what a reviewer of each candidate reads (all of it in --json)
            report.progress(line)
    return rc


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
              help="Parallel runs (default: one per CPU, at most 6, when each run can get a private mount namespace "
                   "for /tmp/vgpulock, i.e. as root with unshare; serial otherwise). --jobs 1 forces serial.")
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
              help="What a node runs (doctor --pod ... --save-report): --baseline-lib must be its library's bytes; "
                   "the evidence records the node.")
@click.option("--wide", is_flag=True, help="Full verdict reasons under the table (the evidence always has them).")
@click.option("--quiet", is_flag=True, help="No progress on stderr: only the table (or --json) and the verdict line.")
@json_option
@click.pass_context
def command(ctx, reproducer_names, run_all, scenarios, target_name, source, driver, runs, fixed, lib, baseline_lib,
            baseline_ref, patched_ref, jobs, retire_ref, coverage_map, in_cluster, kubeconfig, kube_context, namespace, node,
            gpu_mem, image, from_logs, save_logs, evidence_path, node_report, wide, quiet, as_json):
    """Run reproducers against the baseline and the patched build and decide whether the fix is proven."""
    if quiet:
        report.set_quiet(True)
    ws = workspace(ctx)
    if retire_ref or coverage_map:
        return _retire(ctx, ws, target_name, source, retire_ref, driver, runs, as_json, coverage_map, reproducer_names)
    t, repros = select(ws, target=target_name, reproducers=list(reproducer_names), run_all=run_all)
    if run_all and not target_name:
        lines = family_lines(ws, t.name)
        report.progress(f"verify --all: target {t.name} (no --target; the target the workspace's reproducers are "
                        f"written for" + (f"; --target {lines[0]} for its line" if len(lines) == 1 else
                                          f"; --target NAME for a line: {', '.join(lines)}" if lines else "") + ")")
    backend = None
    if in_cluster or from_logs:
        from lucepatch.k8s.incluster import ClusterBackend  # lazy: --in-cluster only, 16 ms

        backend = ClusterBackend(image=image, kubeconfig=kubeconfig, context=kube_context, namespace=namespace,
                                 node=node, gpu_mem_mib=gpu_mem, from_logs=Path(from_logs) if from_logs else None,
                                 save_logs=Path(save_logs) if save_logs else None)
    src = require_source(source, t.name, family=t.family) if not lib else None
    req = VerifyRequest(workspace=ws, target=t, reproducers=repros, source=src, driver=driver, runs=runs, fixed=fixed,
                        scenarios=list(scenarios), lib=Path(lib) if lib else None, baseline_ref=baseline_ref,
                        baseline_lib=Path(baseline_lib) if baseline_lib else None, patched_ref=patched_ref,
                        jobs=jobs, backend=backend, evidence=Path(evidence_path) if evidence_path else None)
    node_doc, notes = None, []
    if node_report:
        node_doc, notes = node_section(load_node_report(node_report), baseline_lib=req.baseline_lib, lib=req.lib,
                                   where=f"--node-report {node_report}")
        for n in notes:
            report.progress(n)
    ev = run_verify(req, cache(ctx))
    if node_doc is not None:
        ev.extra["node"] = node_doc
    if evidence_path:
        write_evidence(evidence_path, ev)
    if as_json:
        report.emit_json("verify", {"evidence_path": evidence_path, "evidence": ev.to_json()})
    else:
        console = report.out()
        print_parts(console, verdict_parts(build_view(ev), console.width, wide=wide))
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
                    + f"; {ex['processes']} runs in {clock(ex['wall_s'])}"
                    + (f"; evidence written to {evidence_path}" if evidence_path else ""), final=True)
    return 0 if ev.verdict == "proven" else EXIT_CHECK_FAILED
