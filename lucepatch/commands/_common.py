"""Options, resolution and tables shared by the verbs (the library is reached through lucepatch.api only)."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import api, report

json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON document (with schema_version) on stdout.")
source_option = click.option("--source", type=click.Path(), default=None,
                             help="Upstream git checkout of the target (never modified except by `apply`).")


def workspace(ctx: click.Context):
    return api.open_workspace(ctx.obj.get("workspace") if ctx.obj else None)


def cache(ctx: click.Context) -> Path:
    return api.cache_dir(ctx.obj.get("cache_dir") if ctx.obj else None)


def load_checked(ctx, target):
    """(workspace, target) with every patch parsed before any output; an open (or interrupted)
    rebase session of the target is noted, with how to resume or abort it."""
    ws = workspace(ctx)
    t, line = api.load_checked(ws, target, cache(ctx))
    if line:
        report.err.print(f"lucepatch: note: {line}", markup=False, highlight=False)
    return ws, t


def print_outcomes(title: str, result, *, as_json: bool = False) -> None:
    """One table per sub-target: the target's, then each submodule's (result.subs)."""
    for head, r in [(title, result)] + [(f"  submodule {st.path} ({st.label}) onto {r.base[:12]}", r)
                                        for st, r in result.subs]:
        report.table(head, ["#", "patch", "status", "commit", "detail"],
                     [[i, o.patch.name, o.status + (" (after conflict)" if o.after_conflict and o.status != api.CONFLICT else ""),
                       (o.commit or "")[:12], o.detail] for i, o in enumerate(r.outcomes, 1)], as_json=as_json)
