"""`lucepatch apply TARGET --source P`: the series onto lucepatch/<target>/<version> in P."""

from __future__ import annotations

import click

from lucepatch import git, report
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.engine.apply import CONFLICT, WorkArea, apply_series
from lucepatch.errors import EXIT_CHECK_FAILED, UsageError
from lucepatch.target import load_target


def print_outcomes(title: str, result) -> None:
    report.table(title, ["#", "patch", "status", "commit", "detail"],
                 [[i, o.patch.name, o.status + (" (after conflict)" if o.after_conflict and o.status != CONFLICT else ""),
                   (o.commit or "")[:12], o.detail] for i, o in enumerate(result.outcomes, 1)])


@click.command("apply")
@click.argument("target", required=False)
@source_option
@click.option("--partial", is_flag=True, help="Switch to the branch even if some patches conflict.")
@click.option("--force", is_flag=True, help="Replace an existing lucepatch branch of the same version.")
@json_option
@click.pass_context
def command(ctx, target, source, partial, force, as_json):
    """Apply TARGET's series to an upstream checkout, on branch lucepatch/<target>/<version>.

    Work happens in a private clone under the cache; the checkout is switched only at the end and
    only when every patch applied (or --partial)."""
    ws = workspace(ctx)
    t = load_target(ws, target)
    src = require_source(source, t.name)
    repo = git.open_repo(src)
    if git.is_dirty(src):
        raise UsageError(f"checkout {src} has uncommitted changes; commit or stash them before lucepatch apply")
    branch = t.branch_name
    if git.branch_exists(src, branch) and not force:
        raise UsageError(f"branch {branch} already exists in {src}; delete it or pass --force")
    del repo
    report.progress(f"workspace {ws.describe()}; applying {t.name} {t.version} ({len(t.patches)} patches) onto {t.base[:12]}")
    with WorkArea(cache(ctx), f"apply-{t.name}") as work:
        result = apply_series(t, src, t.patches, work)
        conflicts = len(result.conflicts)
        switched = False
        if conflicts == 0 or partial:
            # The only writes to the user's checkout: fetch the finished branch, then switch.
            git.fetch_into(src, work.repo, "HEAD", f"refs/heads/{branch}")
            git.run(src, "checkout", "--quiet", branch)
            switched = True
    if as_json:
        report.emit_json("apply", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "branch": branch, "switched": switched, **result.to_json()})
    print_outcomes(f"apply {t.name} {t.version} onto {result.base[:12]}", result)
    if switched:
        report.progress(f"{src} is now on {branch} ({result.head[:12]})")
    else:
        report.progress(f"{conflicts} patch(es) conflict; {src} left untouched (use --partial to accept fewer)")
    return 0 if conflicts == 0 else EXIT_CHECK_FAILED
