"""`lucepatch ci [TARGET|--all]`: the gate (lucepatch/services/gate/).

Per target: lint -> check on the pinned base -> canary check on --upstream-head REF -> build ->
verify every scenario the series names (`Reproducer:` trailers) -> probes (when the target has
probes.toml). Reports: JUnit XML (--junit), JSON (--json), markdown appended to
$GITHUB_STEP_SUMMARY when set (and --markdown FILE).

Exit 0 only when every gated target's pinned-base gate passes; a failing canary warns (exit 0)
unless --strict. `--all` gates the targets that have a checkout (one variable per upstream repository:
$LUCEPATCH_SRC_HAMI_CORE serves hami-core and every line of it; $LUCEPATCH_SRC_<LINE> overrides it for
one line) and reports the others as skipped (JUnit <skipped>, markdown); they fail the gate only with
--strict, and a run that gated nothing exits 1. A target whose checkout lacks its pinned base fails
(one line: the `git fetch` that brings it), and so does a line left without a checkout while another
target of its repository is gated: a line never goes ungated silently. Results are cached under <cache>/ci/<key>.json, key = sha256 of every input (series and
target.toml bytes, reproducer hashes, upstream commits, driver kind and version, runs, lucepatch
version); --no-cache re-runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused, workspace


@click.command("ci")
@click.argument("target", required=False)
@click.option("--all", "all_targets", is_flag=True, help="Every target of the workspace.")
@click.option("--source", type=click.Path(), default=None,
              help="Upstream checkout (one target only; otherwise $LUCEPATCH_SRC_<REPOSITORY>, e.g. "
                   "LUCEPATCH_SRC_HAMI_CORE for hami-core and its lines).")
@click.option("--upstream-head", default=None, metavar="REF", help="Canary: also check the series on this upstream ref.")
@click.option("--strict", is_flag=True, help="A failing canary, or (with --all) a target without a checkout, fails the gate.")
@click.option("--driver", type=click.Choice(["auto", "real", "fake"]), default="auto", show_default=True)
@click.option("--runs", type=click.IntRange(1, 10000), default=5, show_default=True, help="Runs per variant and scenario.")
@click.option("--no-cache", is_flag=True, help="Re-run everything even when no input changed.")
@click.option("--no-probes", is_flag=True, help="Skip compile/link probes.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None, help="Write JUnit XML here.")
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False), default=None, help="Write the markdown summary here.")
@click.option("--evidence-dir", type=click.Path(file_okay=False), default=None, help="Write verify evidence here.")
@json_option
@click.pass_context
def command(ctx, target, all_targets, source, upstream_head, strict, driver, runs, no_cache, no_probes, junit_path,
            md_path, evidence_dir, as_json):
    """The gate: lint, check on the pinned base, canary on --upstream-head, build, verify, probes."""
    refuse_unused(ctx, "ci")
    ws = workspace(ctx)
    cache_dir = ctx.obj.get("cache_dir") if ctx.obj else None  # resolved by the gate once the arguments are checked
    names, results, code = api.gate_all(ws, target, cache_dir, all_targets=all_targets, source=source, strict=strict,
                                    upstream_head=upstream_head, driver=driver, runs=runs, use_cache=not no_cache,
                                    evidence_dir=Path(evidence_dir) if evidence_dir else None, probes=not no_probes,
                                    progress=report.progress)
    api.write_gate_reports(results, code, strict=strict, junit_path=junit_path, md_path=md_path)
    if as_json:
        report.emit_json("ci", {"workspace": ws.to_json(), "exit_code": code, "strict": strict,
                                "upstream_head": upstream_head, "targets": [r.to_json() for r in results]})
    for r in results:
        report.table(f"ci {r.target}: " + (f"skipped — {r.skipped}" if r.skipped else
                                           f"gate {r.gate}, canary {r.canary}{' (cached: no input changed)' if r.cached else ''}"),
                     ["step", "status", "detail"], [[s.name, s.status, s.detail] for s in r.steps], as_json=as_json)
        if r.canary == api.GATE_WARN:
            report.progress(f"warning: {r.target}: the canary on {upstream_head} failed"
                            + ("" if strict else " (not gating; pass --strict to gate on it)"))
    gated = sum(1 for r in results if not r.skipped)
    if not gated:
        report.progress("ci: no target was gated (no checkout for any): exit 1")
    report.result(f"ci: {'gate passed' if code == 0 else 'gate FAILED'} ({gated} of {len(results)} target(s) gated)",
                  as_json=as_json)
    return code
