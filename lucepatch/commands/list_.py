"""`lucepatch list`: targets, series versions, patches and reproducers of the workspace."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused, workspace


@click.command("list")
@json_option
@click.pass_context
def command(ctx, as_json):
    """List targets, their series and patches, and the reproducers."""
    refuse_unused(ctx, "list")
    ws = workspace(ctx)
    targets, repros = api.listing(ws)
    if as_json:
        report.emit_json("list", {
            "workspace": ws.to_json(),
            "lines": {t.family: [o.name for o in targets if o.family == t.family] for t in targets},
            "targets": [t.to_json() for t in targets],
            "reproducers": [r.to_json() for r in repros],
        })
        return 0
    report.progress(f"workspace {ws.describe()}")
    families = {}
    for t in targets:
        families.setdefault(t.family, []).append(t)
    if any(len(v) > 1 for v in families.values()):
        report.table("lines", ["series", "line", "target", "version", "base", "serves"],
                     [[f, t.line, t.name, t.version, t.base[:12], _serves(t)] for f, ts in families.items()
                      for t in sorted(ts, key=lambda t: (t.line_of is not None, t.name))])
    # each submodule series is listed under its superproject, as its own table
    for t in [x for tt in targets for x in (tt, *tt.sub_targets())]:
        where = f"submodule {t.raw['path']}, " if t.raw.get("series_dir") else ""
        report.table(
            f"{t.name} {t.version} on {t.base[:12]} ({where}{t.upstream})"
            + (f" — line {t.line} of {t.line_of}" if t.line_of else ""),
            ["#", "patch", "patch-id", "upstream-status", "reproducer", "build-only"],
            [[i, p.name, p.patch_id[:12], p.trailer("Upstream-Status"),
              ", ".join(f"{r}:{s}" if s else r for r, s in p.reproducers), "yes" if p.build_only else ""]
             for i, p in enumerate(t.patches, 1)],
        )
    report.table("reproducers", ["name", "kind", "target", "scenarios", "default runs"],
                  [[r.name, r.kind, r.target, ", ".join(s.name for s in r.scenarios), r.default_runs] for r in repros])
    return 0


def _serves(t) -> str:
    sv = t.serves or {}
    hami = sv.get("hami") or []
    return (f"HAMi {hami[0]}..{hami[-1]}" if len(hami) > 1 else f"HAMi {hami[0]}" if hami else "") + \
        (f" (shared region {sv['shrreg']})" if sv.get("shrreg") else "")
