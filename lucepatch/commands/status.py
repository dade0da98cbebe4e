"""`lucepatch status TARGET --source P`: each patch at P's HEAD — applied, not applied, already
upstream (with the signal that says so) or conflicting. Nothing in P is written."""

from __future__ import annotations

import click

from lucepatch import git, report
from lucepatch.commands._common import cache, json_option, require_source, source_option
from lucepatch.commands.apply import load_checked
from lucepatch.engine import checkout as co
from lucepatch.engine import upstreamed
from lucepatch.engine.apply import (CONFLICT, WorkArea, applied_patch_ids, open_engine,
                                    resolve_base)
from lucepatch.errors import EXIT_CHECK_FAILED

APPLIED = "applied"
NOT_APPLIED = "not-applied"
UPSTREAM = "already-upstream"
CONFLICTS = "conflicts"
# how a not-applied patch would go on (the engine's words are its outcome names, which read as
# "applied" beside "not-applied"; the JSON keeps them)
WOULD = {"applied": "exactly", "applied-3way": "with a 3-way merge"}


def compute_status(t, src, work, head: str, base: str) -> list[dict]:
    applied = applied_patch_ids(src, base, head)
    up_ids = upstreamed.upstream_patch_ids(src, base, head)
    engine, files = open_engine(src, t.patches, work, head)
    reader = upstreamed.tree_reader(work.repo, head)
    rows = []
    for p, f in zip(t.patches, files):
        row = {"name": p.name, "subject": p.subject, "patch_id": p.patch_id, "status": None,
               "signal": None, "commit": None, "would": None, "detail": ""}
        if p.patch_id in applied:
            row.update(status=APPLIED, commit=applied[p.patch_id], detail="Patch-Id trailer reachable from HEAD")
        else:
            hit = upstreamed.detect(p, f, repo=work.repo, ref=head, upstream_ids=up_ids,
                                    reverse_check=engine.check_reverse, read_file=reader, target=t, source=src)
            if hit:
                row.update(status=UPSTREAM, signal=hit.signal, commit=hit.commit, detail=hit.detail)
        rows.append(row)
    # what is neither applied nor upstream: would it apply at HEAD (cumulatively, in series order)?
    for row, p, f in zip(rows, t.patches, files):
        if row["status"] is not None:
            continue
        status, detail = engine.apply(f, name=str(p.path))
        if status == CONFLICT:
            row.update(status=CONFLICTS, detail=detail)
        elif status == "already-upstream":
            row.update(status=UPSTREAM, signal="3-way", detail=detail)
        else:
            row.update(status=NOT_APPLIED, would=status)
    return rows


@click.command("status")
@click.argument("target", required=False)
@source_option
@click.option("--fetch", is_flag=True, help="Allow a `git fetch` when the base commit is not in the checkout.")
@click.option("--behaviour", is_flag=True,
              help="Also judge each patch by behaviour at HEAD with the retirement rule of `verify --retire` "
                   "(builds and runs the reproducers); a superseded patch reads already-upstream (signal behaviour).")
@json_option
@click.pass_context
def command(ctx, target, source, fetch, behaviour, as_json):
    """Per patch at the checkout's HEAD: applied / not-applied / already-upstream (signal) / conflicts."""
    ws, t = load_checked(ctx, target)
    src = require_source(source, t.name, family=t.family)
    co.open_checkout(src)
    base = resolve_base(src, t.base, t.name, fetch=fetch)
    head = git.resolve_commit(src, "HEAD", what="HEAD", remedy="the checkout has no commits")
    hook = judged = None
    if behaviour:
        from lucepatch.upstream import retire

        judged = retire.load_saved(t, head, cache(ctx), ws)  # `verify --retire HEAD` already judged it
        if judged is None:
            judged = retire.retire_report(t, src, head, cache(ctx), "auto", workspace=ws)
            retire.save_report(judged, t, cache(ctx), ws)
        upstreamed.register_behaviour_hook(hook := retire.report_hook(judged))
    try:
        with WorkArea(cache(ctx), f"status-{t.name}") as work:
            rows = compute_status(t, src, work, head, base)
    finally:
        if hook:
            upstreamed.unregister_behaviour_hook(hook)
    for r in rows if judged else []:
        b = next(p for p in judged["patches"] if p["name"] == r["name"])
        r["behaviour"] = {k: b[k] for k in ("status", "needed", "scenario", "reason")}
        r["detail"] = (r["detail"] + "; " if r["detail"] else "") + f"behaviour: {b['status']} ({b['scenario'] or '-'})"
    if as_json:
        report.emit_json("status", {"workspace": ws.to_json(), "target": t.name, "version": t.version, "line": t.line,
                                     "line_of": t.line_of, "base": base, "head": head,
                                     "branch": git.current_branch(src), "patches": rows})
    line = f", line {t.line} of {t.line_of}" if t.line_of else ""
    report.table(f"status {t.name} {t.version} at {head[:12]} (base {base[:12]}{line})",
                 ["#", "patch", "status", "signal / would apply", "commit", "detail"],
                 [[i, r["name"], r["status"], r["signal"] or WOULD.get(r["would"], r["would"] or ""),
                   (r["commit"] or "")[:12], r["detail"]] for i, r in enumerate(rows, 1)], as_json=as_json)
    return EXIT_CHECK_FAILED if any(r["status"] == CONFLICTS for r in rows) else 0
