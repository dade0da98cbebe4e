"""`lucepatch lint [TARGET]`: series and patch-file checks (lucepatch/services/lint.py), no upstream checkout needed.

Errors (exit 1): series <-> files mismatch, unparseable patch or diff, missing/invalid
`Upstream-Status`, missing `Signed-off-by`, unknown `Reproducer:`/`Probe:`, bad `Build-Only`,
whitespace errors in added lines, unsafe paths, malformed rows of compatible_hami.toml (no
source, no `unknown`, a vendor's HAMi mapped to an upstream commit). Warnings: a `Pending` patch older than
--pending-days (default 90), a file not in format-patch form.
"""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused, workspace
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("lint")
@click.argument("target", required=False)
@click.option("--pending-days", type=click.IntRange(min=0), default=90, show_default=True,
              help="Warn when a Pending patch is older than this many days.")
@click.option("--strict", is_flag=True, help="Treat warnings as errors.")
@json_option
@click.pass_context
def command(ctx, target, pending_days, strict, as_json):
    """Check series files, patch headers, trailers, whitespace and paths."""
    refuse_unused(ctx, "lint")
    ws = workspace(ctx)
    findings = api.lint(ws, target, pending_days=pending_days)
    names = findings.targets
    errors = [f for f in findings if f.level == api.LINT_ERROR or strict]
    if as_json:
        report.emit_json("lint", {"workspace": ws.to_json(), "targets": names,
                                   "errors": len(errors), "warnings": len(findings) - len(errors),
                                   "findings": [f.to_json() for f in findings]})
    if findings:
        report.table(f"lint ({ws.path})", ["level", "target", "patch", "check", "message"],
                     [[f.level, f.target, f.patch, f.check, f.message] for f in findings], as_json=as_json)
    report.result(f"lint: {len(names)} target(s), {len(errors)} error(s), {len(findings) - len(errors)} warning(s)",
                  as_json=as_json)
    return EXIT_CHECK_FAILED if errors else 0
