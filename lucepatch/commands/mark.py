"""`lucepatch mark TARGET PATCH --submitted URL`: record a patch's submission state in its trailers.

Only the `Upstream-Status:` trailer of the patch file changes (added to the trailer block when
absent); the diff, hence the patch id, never does.
"""

from __future__ import annotations

import re

import click

from lucepatch import report, trailers
from lucepatch.commands._common import json_option, workspace
from lucepatch.errors import UsageError
from lucepatch.series import UPSTREAM_STATUS, find_patch, rewrite_patch_file
from lucepatch.target import load_target


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
    if bool(submitted) == bool(status):
        raise UsageError("give exactly one of --submitted URL or --status VALUE")
    if submitted:
        if not re.match(r"^https?://\S+$", submitted):
            raise UsageError(f"--submitted {submitted!r} is not a URL; pass the PR's https:// address")
        status = f"Submitted [{submitted}]"
    if not UPSTREAM_STATUS.match(status):
        raise UsageError(f"Upstream-Status {status!r} is not one of Pending, Submitted [url], Denied, "
                         "Inappropriate [reason], Inactive-Upstream, Backport, Accepted")
    ws = workspace(ctx)
    ws.require_writable("mark")
    t = load_target(ws, target)
    p = find_patch(t.patches, patch, where=f"{t.name}'s series")
    before = p.trailer("Upstream-Status")
    rewrite_patch_file(p, trailers.edit_patch(p.raw, set_=[("Upstream-Status", status)]),
                                check={"Upstream-Status": status})
    if as_json:
        report.emit_json("mark", {"workspace": ws.to_json(), "target": t.name, "patch": p.name,
                                  "before": before, "after": status, "patch_id": p.patch_id})
    report.result(f"{t.name}/{p.name}: Upstream-Status {before or '(none)'} -> {status}", as_json=as_json)
    return 0
