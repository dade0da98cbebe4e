"""`lucepatch mark TARGET PATCH --submitted URL`: record a patch's submission state in its trailers.

Only the `Upstream-Status:` trailer of the patch file changes (added to the trailer block when
absent); the diff, hence the patch id, never does.
"""

from __future__ import annotations

import re

import click

from lucepatch import report
from lucepatch.commands._common import json_option, workspace
from lucepatch.errors import UsageError
from lucepatch.series import UPSTREAM_STATUS, parse_patch
from lucepatch.target import load_target


def set_upstream_status(raw: bytes, status: str) -> bytes:
    text = raw.decode("utf-8", errors="surrogateescape")
    m = re.search(r"^---\n|^diff --git ", text, re.M)
    if not m:
        raise UsageError("the patch has no message/diff separator; regenerate it with git format-patch")
    head, tail = text[: m.start()], text[m.start():]
    if re.search(r"^Upstream-Status:.*$", head, re.M):
        head = re.sub(r"^Upstream-Status:.*$", f"Upstream-Status: {status}", head, count=1, flags=re.M)
    else:
        body = head.rstrip("\n")
        last = body.split("\n\n")[-1].strip().split("\n")
        is_trailers = bool(last) and all(re.match(r"^[A-Za-z0-9][A-Za-z0-9-]*:\s", l) for l in last) \
            and not last[0].startswith(("From ", "Subject:"))
        head = body + ("\n" if is_trailers else "\n\n") + f"Upstream-Status: {status}\n"
        if not tail.startswith("---"):
            head += "---\n"
    return (head + tail).encode("utf-8", errors="surrogateescape")


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
    by = {p.name: p for p in t.patches} | {p.slug: p for p in t.patches}
    if patch not in by:
        raise UsageError(f"{patch} is not in {t.name}'s series; lucepatch list {t.name} shows the names")
    p = by[patch]
    before = p.trailer("Upstream-Status")
    new_raw = set_upstream_status(p.raw, status)
    p.path.write_bytes(new_raw)
    after = parse_patch(p.path, p.name)
    if after.patch_id != p.patch_id or after.trailer("Upstream-Status") != status:
        p.path.write_bytes(p.raw)
        raise UsageError(f"could not set Upstream-Status in {p.path} without changing its diff; edit it by hand")
    if as_json:
        report.emit_json("mark", {"workspace": ws.to_json(), "target": t.name, "patch": p.name,
                                  "before": before, "after": status, "patch_id": p.patch_id})
    report.progress(f"{t.name}/{p.name}: Upstream-Status {before or '(none)'} -> {status}")
    return 0
