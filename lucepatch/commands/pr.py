"""`lucepatch pr TARGET --out DIR`: a PR directory a maintainer can trust."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import git, report
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.target import load_target
from lucepatch.upstream.pr import prepare_pr
from lucepatch.verify.reproducer import list_reproducers


@click.command("pr")
@click.argument("target", required=False)
@source_option
@click.option("--out", "out_dir", required=True, type=click.Path(), help="New directory for the PR files.")
@click.option("--evidence", "evidence_path", type=click.Path(), default=None, help="Evidence JSON from lucepatch verify.")
@click.option("--no-evidence", is_flag=True, help="Write the PR without evidence (the body says so).")
@click.option("--patches", "patch_names", default=None, help="Comma-separated subset of the series.")
@click.option("--upstream-ref", default=None, help="Upstream ref to base the PR on (default: the pinned base).")
@click.option("--signoff", is_flag=True, help="Add Signed-off-by from your git config to patches lacking one.")
@click.option("--draft", is_flag=True, help="Mark the PR payload as a draft.")
@json_option
@click.pass_context
def command(ctx, target, source, out_dir, evidence_path, no_evidence, patch_names, upstream_ref, signoff, draft, as_json):
    """Write DIR/*.patch (with base-commit), DIR/pr-body.md and DIR/pr.json for TARGET's series."""
    ws = workspace(ctx)
    t = load_target(ws, target)
    src = require_source(source, t.name)
    git.open_repo(src)
    hashes = {r.name: r.hash for r in list_reproducers(ws)}
    res = prepare_pr(t, src, cache(ctx), Path(out_dir), patch_names=patch_names.split(",") if patch_names else None,
                     upstream_ref=upstream_ref, signoff=signoff,
                     evidence_path=Path(evidence_path) if evidence_path else None, no_evidence=no_evidence,
                     draft=draft, repro_hashes=hashes)
    if as_json:
        report.emit_json("pr", {"workspace": ws.to_json(), "target": t.name, **res.to_json()})
    report.progress(f"PR for {t.name} {t.version}: branch {res.branch} on {res.base[:12]}; files in {res.out_dir}")
    for f in res.files:
        report.progress(f"  {f.name}")
    return 0
