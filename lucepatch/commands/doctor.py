"""`lucepatch doctor`: what is present or missing here, with the fix for each, and which verbs need it
(the checks live in lucepatch/services/doctor.py). What a node runs is its own verb, `lucepatch node`
(commands/node.py); `doctor --lib/--image/--pod/--pod-root/--node-report/--hami-version` is its old
spelling, which main.py rewrites with a note.

Exit 0, or 3 when something a verb named with `--for` needs is missing (without `--for`: when git,
which every verb needs, is missing or too old).
"""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused
from lucepatch.errors import EXIT_ENVIRONMENT
from lucepatch.report import KEY, TEXT, Col


@click.command("doctor")
@click.option("--for", "for_verbs", multiple=True, type=click.Choice(api.DOCTOR_VERBS),
              help="Exit 3 if something this verb needs is missing (repeatable).")
@json_option
@click.pass_context
def command(ctx, for_verbs, as_json):
    """Show which tools lucepatch can use here (git, cmake, nvcc, nvml.h, docker, GPU/driver, valgrind, quilt);
    what a node runs is `lucepatch node`."""
    refuse_unused(ctx, "doctor")
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
