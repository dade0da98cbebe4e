"""`lucepatch mark TARGET PATCH --submitted URL`: record a patch's submission state in its trailers.

Only the `Upstream-Status:` trailer of the patch file changes (added to the trailer block when
absent); the diff, hence the patch id, never does.
"""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused, workspace


@click.command("mark")
@click.argument("target")
@click.argument("patch")
@click.option("--submitted", metavar="URL", default=None, help="Submitted upstream at URL (Upstream-Status: Submitted [URL]).")
@click.option("--status", "status", default=None,
              help="Any Upstream-Status value: Pending, Denied, Inactive-Upstream, Inappropriate [reason], Backport, Accepted.")
@json_option
@click.pass_context
def command(ctx, target, patch, submitted, status, as_json):
    """Set PATCH's Upstream-Status (e.g. after opening its PR)."""
    refuse_unused(ctx, "mark")
    ws = workspace(ctx)
    m = api.mark(ws, target, patch, submitted=submitted, status=status)
    t, p, before, status = m.target, m.patch, m.before, m.after
    if as_json:
        report.emit_json("mark", {"workspace": ws.to_json(), "target": t.name, "patch": p.name,
                                  "before": before, "after": status, "patch_id": p.patch_id})
    report.result(f"{t.name}/{p.name}: Upstream-Status {before or '(none)'} -> {status}", as_json=as_json)
    return 0
