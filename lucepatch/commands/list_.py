"""`lucepatch list`: targets, series versions, patches and reproducers of the workspace."""

from __future__ import annotations

import click

from lucepatch import report
from lucepatch.commands._common import json_option, workspace
from lucepatch.target import list_targets, load_target
from lucepatch.verify.reproducer import list_reproducers


@click.command("list")
@json_option
@click.pass_context
def command(ctx, as_json):
    """List targets, their series and patches, and the reproducers."""
    ws = workspace(ctx)
    targets = [load_target(ws, n) for n in list_targets(ws)]
    repros = list_reproducers(ws)
    if as_json:
        report.emit_json("list", {
            "workspace": ws.to_json(),
            "targets": [t.to_json() for t in targets],
            "reproducers": [r.to_json() for r in repros],
        })
        return 0
    report.progress(f"workspace {ws.describe()}")
    for t in targets:
        report.table(
            f"{t.name} {t.version} on {t.base[:12]} ({t.upstream})",
            ["#", "patch", "patch-id", "upstream-status", "reproducer", "build-only"],
            [[i, p.name, p.patch_id[:12], p.trailer("Upstream-Status"),
              ", ".join(f"{r}:{s}" if s else r for r, s in p.reproducers), "yes" if p.build_only else ""]
             for i, p in enumerate(t.patches, 1)],
            to_stdout=True,
        )
    report.table("reproducers", ["name", "kind", "target", "scenarios", "default runs"],
                  [[r.name, r.kind, r.target, ", ".join(s.name for s in r.scenarios), r.default_runs] for r in repros],
                  to_stdout=True)
    return 0
