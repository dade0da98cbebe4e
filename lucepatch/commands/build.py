"""`lucepatch build TARGET [--baseline]`: the target's artifacts, cached by content."""

from __future__ import annotations

import click

from lucepatch import git, report
from lucepatch.build.native import build_variant
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.target import load_target


@click.command("build")
@click.argument("target", required=False)
@source_option
@click.option("--baseline", is_flag=True, help="Build upstream + Build-Only patches instead of the whole series.")
@click.option("--both", is_flag=True, help="Build baseline and patched.")
@click.option("-j", "--jobs", type=int, default=None, help="Parallel build jobs (default: CPU count).")
@json_option
@click.pass_context
def command(ctx, target, source, baseline, both, jobs, as_json):
    """Build TARGET's artifacts (e.g. libvgpu.so) and print their paths and sha256s."""
    ws = workspace(ctx)
    t = load_target(ws, target)
    src = require_source(source, t.name)
    git.open_repo(src)
    variants = ["baseline", "patched"] if both else (["baseline"] if baseline else ["patched"])
    results = [build_variant(t, src, v, cache(ctx), jobs=jobs) for v in variants]
    if as_json:
        report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "builds": [r.to_json() for r in results]})
    rows = []
    for r in results:
        for name, path in r.artifacts.items():
            rows.append([r.variant, name, r.sha256[name], str(path), "cached" if r.cached else "built"])
    report.table(f"build {t.name} {t.version}", ["variant", "artifact", "sha256", "path", ""], rows,
                 to_stdout=not as_json)
    return 0
