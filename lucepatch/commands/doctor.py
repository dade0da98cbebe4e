"""`lucepatch doctor`: what is present or missing here, with the fix for each, and which verbs need it
(the checks live in lucepatch/services/doctor.py). What a node runs is its own verb, `lucepatch node`
(commands/node.py); `doctor --lib/--image/--pod/--pod-root/--node-report/--hami-version` is its old
spelling, which main.py rewrites with a note. `doctor --checkout P [--family F]`: which line of a series
fits an upstream checkout (services/line_fit.py: Lucebox's 8305b6c and 62880e2 lines).

Exit 0, or 3 when something a verb named with `--for` needs is missing (without `--for`: when git,
which every verb needs, is missing or too old). With --checkout: 0 when a line fits, 1 when none does.
"""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, workspace
from lucepatch.errors import EXIT_ENVIRONMENT
from lucepatch.report import KEY, TEXT, Col


@click.command("doctor")
@click.option("--for", "for_verbs", multiple=True, type=click.Choice(api.DOCTOR_VERBS),
              help="Exit 3 if something this verb needs is missing (repeatable).")
@click.option("--checkout", type=click.Path(file_okay=False), default=None,
              help="An upstream checkout: which line of its series family fits its HEAD (e.g. Lucebox's 8305b6c or "
                   "62880e2 line).")
@click.option("--family", default=None, help="With --checkout: the series family (default: the one whose upstream "
                                             "is a remote of the checkout).")
@json_option
@click.pass_context
def command(ctx, for_verbs, checkout, family, as_json):
    """Show which tools lucepatch can use here (git, cmake, nvcc, nvml.h, docker, GPU/driver, valgrind, quilt);
    with --checkout, which line of a series fits an upstream checkout; what a node runs is `lucepatch node`."""
    if refuse_unused(ctx, "doctor") == "doctor --checkout":
        return _checkout(ctx, Path(checkout).expanduser(), family, as_json)
    items = api.diagnose()
    block = api.blocking(items, list(for_verbs))
    if as_json:
        report.emit_json("doctor", {"items": [i.to_json() for i in items], "for": list(for_verbs),
                                    "blocking": [i.name for i in block], "ok": not block})
    else:
        # the fix of each missing tool is prose too long for a column: whole, under the table
        report.table("lucepatch doctor", [Col("tool", KEY), Col("status", KEY), Col("version", TEXT), Col("detail", TEXT),
                                          Col("needed by", TEXT)],
                     [[i.name, "present" if i.ok else "MISSING", i.version, i.detail,
                       ", ".join(i.needed_by) or "optional"] for i in items],
                     notes=[f"fix {i.name}: {i.remedy}" for i in items if not i.ok])
    for i in block:
        report.progress(f"{i.name} is missing ({i.detail}); needed by {', '.join(v for v in i.needed_by if not for_verbs or v in for_verbs)}: {i.remedy}")
    return EXIT_ENVIRONMENT if block else 0


def _checkout(ctx, src: Path, family: str | None, as_json: bool) -> int:
    ws = workspace(ctx)
    doc = api.which_line(ws, api.family_of_checkout(ws, src, family), src, cache(ctx))
    if as_json:
        report.emit_json("doctor", {"items": [], "for": [], "blocking": [], "ok": doc["fits"] is not None, "checkout": doc})
    report.table(f"lucepatch doctor --checkout {src}: lines of {doc['family']} at {doc['head'][:12]}",
                 [Col("line", KEY), Col("base", KEY), Col("base vs HEAD", TEXT), Col("conflicts at HEAD", TEXT),
                  Col("fits", KEY), Col("why", TEXT)],
                 [[x["target"], x["base"][:12], x["relation"] + (f" ({x['behind']} behind)" if x["behind"] else ""),
                   "-" if x["conflicts"] is None else ", ".join(x["conflicts"]) or "none",
                   "yes" if x["fits"] else "no", x["why"]] for x in doc["lines"]], as_json=as_json)
    report.result(doc["verdict"], as_json=as_json)
    return 0 if doc["fits"] else 1
