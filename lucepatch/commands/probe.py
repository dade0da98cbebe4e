"""`lucepatch probe TARGET --profile P [--baseline|--both]`: prove each build fix by artifact content."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, source_option, workspace
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("probe")
@click.argument("target", required=False)
@source_option
@click.option("--profile", default=None, help="Build profile from target.toml (default: the first one).")
@click.option("--baseline", is_flag=True, help="Probe upstream + Build-Only patches: each probe must fail with its declared signature.")
@click.option("--both", is_flag=True, help="Probe baseline and patched.")
@click.option("--only", multiple=True, help="Run only this probe (name or fix id, e.g. F6); repeatable.")
@json_option
@click.pass_context
def command(ctx, target, source, profile, baseline, both, only, as_json):
    """Compile/link probes proving TARGET's build fixes (minutes, not a full build)."""
    refuse_unused(ctx, "probe")
    ws = workspace(ctx)
    t = api.target(ws, target)
    src = api.source(t, source)
    variants = ["baseline", "patched"] if both else (["baseline"] if baseline else ["patched"])
    runs = api.probe(t, src, variants, cache(ctx), profile=profile, only=list(only))
    ok = all(r.ok for r in runs)
    if as_json:
        report.emit_json("probe", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "ok": ok, "runs": [r.to_json() for r in runs]})
    rows = []
    for run in runs:
        for r in run.results:
            verdict = "not applicable" if r.status == "n/a" else ("proven" if r.as_declared else "NOT PROVEN") if r.variant == "patched" else \
                ("fails as declared" if r.as_declared else ("UNEXPECTED PASS" if r.status == "pass" else "fails differently"))
            shown = r.first_error if r.variant == "baseline" and r.first_error else r.detail
            rows.append([r.spec.fix, r.spec.name, r.variant, r.status, verdict, "substituted" if r.substituted else "",
                         f"{r.seconds:.1f}s", str(r.error_count), shown[:140]])
    title = f"probe {t.name} {t.version} profile {runs[0].profile}: " + \
        ", ".join(f"{r.variant} {r.seconds:.0f}s" for r in runs)
    report.table(title, ["fix", "probe", "variant", "status", "verdict", "TU", "time", "errors", "first error / evidence"],
                 rows, as_json=as_json)
    return 0 if ok else EXIT_CHECK_FAILED
