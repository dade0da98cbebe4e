"""`lucepatch export TARGET --source P`: patch files from the lucepatch branch, byte-stable
(lucepatch/engine/export.py): unchanged patches keep their bytes; changed and new commits are
written in `git format-patch --zero-commit` form; patches that left the branch are removed.
"""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, source_option, workspace
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("export")
@click.argument("target", required=False)
@source_option
@click.option("--branch", default=None, help="Branch to export (default lucepatch/<target>/<version>).")
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if export would change a file.")
@json_option
@click.pass_context
def command(ctx, target, source, branch, check_only, as_json):
    """Write TARGET's patch files from the commits of its lucepatch branch (base..branch)."""
    refuse_unused(ctx, "export")
    ws = workspace(ctx)
    t, res = api.export(ws, target, source, cache(ctx), branch=branch, write=not check_only)
    plan, removed = res.plan, res.removed
    if as_json:
        report.emit_json("export", {"workspace": ws.to_json(), "target": t.name, "branch": res.branch,
                                     "head": res.head, "check": check_only, "series_changed": res.series_changed,
                                     "patches": [{"name": n, "action": a} for n, _, a in plan], "removed": removed})
    report.table(f"export {t.name} from {res.branch} ({res.head[:12]}) into {t.dir}", ["#", "patch", "action"],
                 [[i, n, a] for i, (n, _, a) in enumerate(plan, 1)] + [["-", n, "removed"] for n in removed],
                 as_json=as_json)
    if check_only and (res.changed or res.series_changed):
        report.progress(f"export would change {len(res.changed) or 'the series'}; run lucepatch export")
        return EXIT_CHECK_FAILED
    return 0
