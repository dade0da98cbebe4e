"""`lucepatch doctor`: what is present or missing here, with the fix for each, and which verbs need it
(the checks live in lucepatch/doctor.py).

Exit 0, or 3 when something a verb named with `--for` needs is missing (without `--for`: when git,
which every verb needs, is missing or too old).
"""

from __future__ import annotations

import click

from lucepatch import report
from lucepatch.commands._common import json_option
from lucepatch.doctor import VERBS, blocking, diagnose
from lucepatch.errors import EXIT_ENVIRONMENT


@click.command("doctor")
@click.option("--for", "for_verbs", multiple=True, type=click.Choice(VERBS),
              help="Exit 3 if something this verb needs is missing (repeatable).")
@json_option
def command(for_verbs, as_json):
    """Show which tools lucepatch can use here (git, cmake, nvcc, nvml.h, docker, GPU/driver, valgrind, quilt)."""
    items = diagnose()
    block = blocking(items, list(for_verbs))
    if as_json:
        report.emit_json("doctor", {"items": [i.to_json() for i in items], "for": list(for_verbs),
                                    "blocking": [i.name for i in block], "ok": not block})
    else:
        report.table("lucepatch doctor", ["tool", "status", "version", "detail", "needed by", "fix"],
                     [[i.name, "present" if i.ok else "MISSING", i.version, i.detail,
                       ", ".join(i.needed_by) or "optional", "" if i.ok else i.remedy] for i in items], to_stdout=True)
    for i in block:
        report.progress(f"{i.name} is missing ({i.detail}); needed by {', '.join(v for v in i.needed_by if not for_verbs or v in for_verbs)}: {i.remedy}")
    return EXIT_ENVIRONMENT if block else 0
