"""`lucepatch bisect --reproducer R A..B`: the upstream commit where a reproducer's behaviour flips.

Exit codes: 0 found; 1 no flip in the range, or inconclusive (skipped commits hide the flip, an
end of the range cannot be judged), or --record refused because the behaviour broke rather than
got fixed; 2 bad input (range, reproducer, scenario, patch, read-only workspace); 3 environment
(no upstream checkout, no compiler, no GPU with --driver real).
"""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, source_option, workspace


@click.command("bisect")
@click.argument("range_spec", metavar="A..B")
@click.option("--reproducer", "reproducer_name", required=True, help="Reproducer whose behaviour is the predicate.")
@click.option("--scenario", default=None,
              help="Scenario to bisect (default: every non-control scenario; the behaviour passes when all pass).")
@click.option("--target", "target_name", default=None, help="Target (default: the reproducer's).")
@source_option
@click.option("--driver", type=click.Choice(["auto", "real", "fake"]), default="auto", show_default=True,
              help="CUDA driver: the machine's, the simulated one, or real when a GPU answers.")
@click.option("--runs", type=click.IntRange(1, 10000), default=None,
              help="Runs per probed commit (default: the reproducer's default_runs). A commit fails when any run fails.")
@click.option("--record", "record_patch", default=None, metavar="PATCH",
              help="Write Applied-Upstream: <commit> (signal: behaviour + code) into PATCH's trailers when a fix is "
                   "found that holds at REF, and upstream's tree there and at REF holds the patch's code (reverse-apply, "
                   "content or 3-way match, a patch-id or backport not undone since) with no measured still-needed; "
                   "behaviour alone is refused.")
@click.option("--ref", "ref", default=None, metavar="REF",
              help="Check the state found at REF too, a descendant of B (default B): if it is broken again there, the "
                   "commit that broke it is named and --record refuses.")
@json_option
@click.pass_context
def command(ctx, range_spec, reproducer_name, scenario, target_name, source, driver, runs, record_patch, ref, as_json):
    """Find the first upstream commit in A..B (first parent) where R's scenario flips (fixed or broke),
    judged on unpatched upstream (+ Build-Only patches) built in a private clone."""
    refuse_unused(ctx, "bisect")
    ws = workspace(ctx)
    b = api.bisect(ws, cache(ctx), range_spec, reproducer_name, scenario=scenario, target=target_name, source=source,
                   driver=driver, runs=runs, record=record_patch, progress=report.progress, ref=ref)
    doc, t, patch, rc, record_error = b.doc, b.target, b.patch, b.code, b.record_error
    if as_json:
        report.emit_json("bisect", {"bisect": doc})
    rows = [[p["commit"][:12], str(p["index"]), p["state"], p["why"]] for p in doc["probes"]]
    report.table(f"bisect {'+'.join(doc['scenarios'])} over {doc['range']['spec']} — driver {doc['driver'].get('kind')}"
                 f"{' (simulated)' if doc.get('simulated') else ''}, {doc['runs']} run(s) per probe",
                 ["commit", "#", "behaviour", "why"], rows, as_json=as_json)
    if len(doc.get("transitions") or []) > 1:  # not monotone: every flip found, the last one answers
        for tr in doc["transitions"]:
            report.progress(f"  {tr['direction']} at {tr['commit'][:12]} {tr['subject'][:60]}")
    if doc["result"] == api.BISECT_FOUND:
        report.result(f"{doc['direction']} by {doc['first']['commit']} {doc['first']['subject']}{_again(doc)}",
                      as_json=as_json)
        report.progress(doc["reason"])
    else:
        report.progress(f"{doc['result']}: {doc['reason']}")
        for cand in doc["candidates"]:
            report.progress(f"  candidate {cand}")
    if doc.get("recorded"):
        r = doc["recorded"]
        report.progress(f"{t.name}/{r['patch']}: Applied-Upstream: {r['applied_upstream']} (signal {r['signal']})")
    if record_error is not None:
        click.echo(f"lucepatch: error: {record_error}", err=True)
        return record_error.exit_code
    if patch is not None and doc["result"] != api.BISECT_FOUND:
        report.progress(f"nothing recorded in {patch.name}: {doc['reason']}")
    return rc


def _again(doc: dict) -> str:
    """The result line is what a script reads: when REF (--ref) does not hold the state found at the
    range's end, it says so there too, with the commit that changed it back when one was found (issue 41)."""
    at = doc.get("at_ref") or {}
    end = next((p["state"] for p in doc["probes"] if p["commit"] == doc["range"]["new"]), None)
    if not at or at.get("commit") == doc["range"]["new"] or at.get("state") == end:
        return ""
    by = at.get("broken_again_by")
    if at.get("state") not in ("pass", "fail"):  # skipped or flaky at REF: no state to call "again"
        return f"; at REF {at['commit'][:12]}: {at.get('state')} ({at.get('why', '')})"
    again = "broken again" if at["state"] == "fail" else "fixed again"
    return f"; {again} at REF {at['commit'][:12]}" + (f" by {by['commit'][:12]} {by['subject']}" if by else "")
