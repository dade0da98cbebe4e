"""`lucepatch pr TARGET --out DIR`: a PR directory a maintainer can trust."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, source_option, workspace


@click.command("pr")
@click.argument("target", required=False)
@source_option
@click.option("--out", "out_dir", required=True, type=click.Path(), help="New directory for the PR files.")
@click.option("--evidence", "evidence_paths", type=click.Path(), multiple=True,
              help="Evidence JSON from lucepatch verify; repeat to combine runs (per reproducer, the newest current run counts).")
@click.option("--no-evidence", is_flag=True, help="Write the PR without evidence (the body says so).")
@click.option("--real-clients", "real_clients", type=click.Path(dir_okay=False), multiple=True,
              help="Real-driver evidence of workload reproducers (torch-clients): adds the \"Real clients\" table.")
@click.option("--patches", "patch_names", default=None, help="Comma-separated subset of the series (kept in series order).")
@click.option("--upstream-ref", default=None, help="Upstream ref to base the PR on (default: the pinned base).")
@click.option("--signoff", is_flag=True, help="Add Signed-off-by from your git config (user.name/user.email); never invented.")
@click.option("--draft", is_flag=True, help="Mark the PR payload as a draft.")
@click.option("--push", "push", default=None, metavar="REMOTE",
              help="Push the PR branch to REMOTE (a remote of --source, a URL or a path). Without it nothing leaves the machine.")
@click.option("--branch", default=None, metavar="NAME", help="Branch name for the PR (default lucepatch/pr/<target>/<version>).")
@click.option("--revise", type=click.Path(file_okay=False), default=None, metavar="PREV_DIR",
              help="Make the next revision of the PR directory PREV_DIR (v2, v3...) with a range-diff section.")
@click.option("--template", default=None, help="PR body template (default: the upstream's, e.g. hami, lucebox, llamacpp, generic).")
@click.option("--ai-use", default=None, metavar="TEXT",
              help="Your AI-use disclosure (required by llama.cpp-family upstreams; HAMi's AI Disclosure section is left for you to fill without it).")
@click.option("--messages", "messages", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Your own commit messages, DIR/<patch>.txt each, for upstreams that take no generated ones (HAMi); "
                   "without it those commits carry a placeholder you must replace.")
@json_option
@click.pass_context
def command(ctx, target, source, out_dir, evidence_paths, no_evidence, real_clients, patch_names, upstream_ref,
            signoff, draft, push, branch, revise, template, ai_use, messages, as_json):
    """Write DIR/*.patch (with base-commit), DIR/pr-body.md and DIR/pr.json for TARGET's series.

    The upstream's own checks (e.g. HAMi-core: DCO, cpplint --linelength=120 on touched lines,
    hack/check_cuda_hook_consistency.py) run first; any failure refuses the PR (exit 1). For an
    upstream that takes no generated commit messages (HAMi) lucepatch writes none: each commit carries
    a placeholder until --messages DIR gives yours, and a placeholder is never pushed.
    """
    refuse_unused(ctx, "pr")
    ws = workspace(ctx)
    t = api.target(ws, target)
    src = api.source(t, source)
    res = api.write_pr(ws, t, src, cache(ctx), Path(out_dir), patches=patch_names.split(",") if patch_names else None,
                       evidence=[Path(e) for e in evidence_paths], no_evidence=no_evidence, upstream_ref=upstream_ref,
                       signoff=signoff, draft=draft, template=template, push=push, branch=branch,
                       revise=Path(revise) if revise else None, ai_use=ai_use,
                       real_clients=[Path(p) for p in real_clients], messages=Path(messages) if messages else None)
    if as_json:
        report.emit_json("pr", {"workspace": ws.to_json(), "target": t.name, **res.to_json()})
    report.progress(f"workspace {ws.describe()}")
    lines = [f"  check {c.name}: {'skipped — ' if c.skipped else ('ok — ' if c.ok else 'FAILED — ')}{c.summary}"
             for c in res.checks]
    lines.append(f"PR v{res.revision} for {t.name} {t.version}: branch {res.branch} on {res.base[:12]} "
                 f"(template {res.template}); files in {res.out_dir}")
    lines += [f"  {f.name}" for f in res.files]
    if res.placeholder_messages:
        lines.append(f"commit messages: {len(res.placeholder_messages)} placeholder(s) — this upstream takes no generated "
                     "commit messages and lucepatch wrote none for you to sign; write yours (--messages DIR with "
                     f"{res.placeholder_messages[0][:-6]}.txt, ...; or git rebase -i) before opening the PR")
    if res.template == "hami" and not res.ai_disclosure_given:
        lines.append("AI Disclosure: left for you to fill truthfully in pr-body.md (or pass --ai-use TEXT)")
    if res.pushed:
        lines.append(f"pushed: {res.pushed}")
    report.result("\n".join(lines), as_json=as_json)
    if not res.pushed:  # a hint, not the result
        report.progress("nothing was pushed (use --push REMOTE --branch NAME)")
    return 0
