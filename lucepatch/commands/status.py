"""`lucepatch status TARGET --source P`: each patch at P's HEAD — applied, not applied, already
upstream (with the signal that says so) or conflicting — and each [[submodule]] sub-target's at its
own checkout's HEAD (engine/status.py). Nothing in P is written."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, fetch_option, json_option, load_checked, refuse_unused, source_option
from lucepatch.errors import EXIT_CHECK_FAILED

# how a not-applied patch would go on (the engine's words are its outcome names, which read as
# "applied" beside "not-applied"; the JSON keeps them)
WOULD = {"applied": "exactly", "applied-3way": "with a 3-way merge"}


@click.command("status")
@click.argument("target", required=False)
@source_option
@fetch_option
@click.option("--behaviour", is_flag=True,
              help="Also judge each patch by behaviour at HEAD with the retirement rule of `verify --retire` "
                   "(builds and runs the reproducers, or reads the report verify --retire HEAD saved); a patch reads "
                   "already-upstream (signal behaviour) only when superseded with a code signal, a retire-candidate "
                   "(behaviour alone) never.")
@json_option
@click.pass_context
def command(ctx, target, source, fetch, behaviour, as_json):
    """Per patch at the checkout's HEAD: applied / not-applied / already-upstream (signal) / conflicts."""
    refuse_unused(ctx, "status")
    ws, t = load_checked(ctx, target)
    src = api.source(t, source)
    doc = api.status(t, src, cache(ctx), ws, fetch=fetch, behaviour=behaviour)
    if as_json:
        report.emit_json("status", {"workspace": ws.to_json(), "target": t.name, "version": t.version, "line": t.line,
                                     "line_of": t.line_of, **doc})
    line = f", line {t.line} of {t.line_of}" if t.line_of else ""
    for d in [doc, *doc.get("submodules", [])]:
        pl = d.get("place") or {}
        where = ("" if "path" not in d else f"folder {pl['at']}/ ({d['name']}, in the superproject) "
                 if pl.get("layout") == "folder" else f"{d['name']} (absent: {pl['declared']}) "
                 if pl.get("layout") == "absent" else f"submodule {pl.get('at', d['path'])} ")
        report.table(f"status {where}{t.name} {t.version} at {d['head'][:12]} (base {d['base'][:12]}{line})",
                     ["#", "patch", "status", "signal / would apply", "commit", "detail"],
                     [[i, r["name"], r["status"], r["signal"] or WOULD.get(r["would"], r["would"] or ""),
                       (r["commit"] or "")[:12], r["detail"]] for i, r in enumerate(d["patches"], 1)], as_json=as_json)
    return EXIT_CHECK_FAILED if api.has_conflicts(doc) else 0
