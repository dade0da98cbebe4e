"""`lucepatch rebase TARGET --source P --onto REF`: carry the series to REF, move absorbed patches
to absorbed/ (Applied-Upstream + signal), report conflicts patch by patch, bump the version and
show `git range-diff`. The workspace is written only when nothing conflicts (and not with --dry-run)."""

from __future__ import annotations

import click

from lucepatch import report
from lucepatch.commands._common import cache, json_option, require_source, source_option
from lucepatch.commands.apply import load_checked
from lucepatch.engine import checkout as co
from lucepatch.engine.apply import WorkArea, install_sigterm_handler
from lucepatch.engine.rebase import plan_rebase, write_plan
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("rebase")
@click.argument("target", required=False)
@source_option
@click.option("--onto", required=True, help="Upstream ref to carry the series to.")
@click.option("--dry-run", is_flag=True, help="Report only; write nothing.")
@click.option("--fetch", is_flag=True, help="Allow a `git fetch` when the base commit is not in the checkout.")
@json_option
@click.pass_context
def command(ctx, target, source, onto, dry_run, fetch, as_json):
    """Carry TARGET's series from its base to --onto REF."""
    install_sigterm_handler()
    ws, t = load_checked(ctx, target)
    if not dry_run:
        ws.require_writable("rebase")
    src = require_source(source, t.name)
    co.open_checkout(src)
    with WorkArea(cache(ctx), f"rebase-{t.name}") as work:
        plan = plan_rebase(t, src, onto, work, fetch=fetch)
    written = False
    if not plan.conflicts and not dry_run:
        write_plan(t, plan)
        written = True
    if as_json:
        report.emit_json("rebase", {"workspace": ws.to_json(), "target": t.name, "written": written, **plan.to_json()})
    report.table(f"rebase {t.name} {plan.old_version} -> {plan.new_version} ({plan.bump}) from {plan.base[:12]} onto "
                 f"{plan.onto[:12]}", ["#", "patch", "action", "status", "signal", "commit", "detail"],
                 [[i, r.name, r.action, r.status, r.signal or "", (r.commit or "")[:12], r.detail]
                  for i, r in enumerate(plan.rows, 1)])
    if plan.range_diff:
        report.err.print(plan.range_diff.rstrip(), markup=False, highlight=False)
    if plan.conflicts:
        report.progress(f"{len(plan.conflicts)} patch(es) conflict on {plan.onto[:12]}: "
                        f"{', '.join(r.name for r in plan.conflicts)}; nothing written")
        return EXIT_CHECK_FAILED
    report.progress("dry run: nothing written" if dry_run else f"{t.dir} now on {plan.onto[:12]}, version {plan.new_version}")
    return 0
