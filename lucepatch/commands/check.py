"""`lucepatch check TARGET --source P`: apply's verdicts, nothing touched."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, fetch_option, json_option, load_checked, print_outcomes, refuse_unused, source_option
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("check")
@click.argument("target", required=False)
@source_option
@click.option("--onto", default=None, help="Check against this upstream ref instead of the pinned base.")
@fetch_option
@json_option
@click.pass_context
def command(ctx, target, source, onto, fetch, as_json):
    """Report, patch by patch, whether TARGET's series applies; the checkout is not touched."""
    refuse_unused(ctx, "check")
    ws, t = load_checked(ctx, target)
    src = api.source(t, source)
    result = api.check(t, src, cache(ctx), onto=onto, fetch=fetch)
    if as_json:
        report.emit_json("check", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "onto": onto or t.base, **result.to_json()})
    print_outcomes(f"check {t.name} {t.version} onto {result.base[:12]}", result, as_json=as_json)
    return EXIT_CHECK_FAILED if result.all_conflicts else 0
