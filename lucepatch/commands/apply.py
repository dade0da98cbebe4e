"""`lucepatch apply TARGET --source P`: the series onto lucepatch/<target>/<version> in P."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, fetch_option, json_option, load_checked, print_outcomes, refuse_unused, source_option
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("apply")
@click.argument("target", required=False)
@source_option
@click.option("--partial", is_flag=True, help="Switch to the branch even if some patches conflict.")
@click.option("--force", is_flag=True, help="Replace an existing lucepatch branch of the same version.")
@click.option("--stash", is_flag=True, help="Carry uncommitted changes across the switch (git stash push/pop).")
@fetch_option
@json_option
@click.pass_context
def command(ctx, target, source, partial, force, stash, fetch, as_json):
    """Apply TARGET's series to an upstream checkout, on branch lucepatch/<target>/<version>.

    Work happens in a private clone under the cache; the checkout is switched only at the end and
    only when every patch applied (or --partial)."""
    refuse_unused(ctx, "apply")
    ws, t = load_checked(ctx, target)
    src = api.source(t, source)
    applied = api.apply(t, src, cache(ctx), partial=partial, force=force, stash=stash, fetch=fetch)
    result, branch, switched, info = applied.result, applied.branch, applied.switched, applied.stash
    conflicts = len(result.all_conflicts)
    if as_json:
        report.emit_json("apply", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "branch": branch, "switched": switched, "stash": info, **result.to_json()})
    report.progress(f"workspace {ws.describe()}; {t.name} {t.version} ({len(t.patches)} patches) onto {result.base[:12]}")
    print_outcomes(f"apply {t.name} {t.version} onto {result.base[:12]}", result, as_json=as_json)
    if switched:
        report.progress(f"{src} is now on {branch} ({result.head[:12]})")
        for st, r in result.subs:
            report.progress(f"{src / st.path} is now on {branch} ({r.head[:12]})")
        if info["stashed"]:
            report.progress("your uncommitted changes were restored" if info["restored"] else
                            "your uncommitted changes conflict with the series; they are kept in `git stash list`")
    else:
        report.progress(f"{conflicts} patch(es) conflict; {src} left untouched (use --partial to accept fewer)")
    return 0 if conflicts == 0 else EXIT_CHECK_FAILED
