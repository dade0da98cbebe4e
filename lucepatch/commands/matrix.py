"""`lucepatch matrix TARGET --source P --range A..B`: per upstream commit x patch, no checkouts."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, load_checked, refuse_unused, source_option


@click.command("matrix")
@click.argument("target", required=False)
@source_option
@click.option("--range", "rev_range", required=True, metavar="A..B", help="Upstream commits to evaluate (a git range; every commit unless --first-parent).")
@click.option("--independent", is_flag=True, help="Each patch alone on each commit (default: cumulative in series order).")
@click.option("--first-parent", is_flag=True, help="Only the first-parent chain of the range (default: every commit).")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Parallel workers (default: CPU count).")
@click.option("--newest-compatible", is_flag=True, help="Print only the newest commit where no patch conflicts.")
@json_option
@click.pass_context
def command(ctx, target, source, rev_range, independent, first_parent, jobs, newest_compatible, as_json):
    """Which patches apply (exact / 3-way / already upstream / conflict) at every commit of A..B."""
    refuse_unused(ctx, "matrix")
    ws, t = load_checked(ctx, target)
    src = api.source(t, source)
    res, subs, elapsed = api.matrix(t, src, cache(ctx), rev_range, independent=independent, first_parent=first_parent,
                                jobs=jobs)
    newest = res.newest_compatible
    if as_json:
        report.emit_json("matrix", {
            "workspace": ws.to_json(), "target": t.name, "version": t.version, "range": rev_range,
            "mode": "independent" if independent else "cumulative", "patches": [p.name for p in t.patches],
            "commits": [{"commit": c, "subject": s, "cells": row, "compatible": res.compatible(i)}
                        for i, (c, s, row) in enumerate(zip(res.commits, res.subjects, res.cells))],
            "distinct_states": res.states, "evaluation": res.stats, "newest_compatible": newest,
            "seconds": round(elapsed, 3), **({"submodules": [m.to_json() for m in subs]} if subs else {})})
    if newest_compatible:
        report.result(newest or "", as_json=as_json)
        report.progress(f"newest commit of {rev_range} where the series applies: {newest or 'none'}")
        return 0 if newest else 1
    # compress runs of identical rows for people
    rows = []
    i = 0
    while i < len(res.commits):
        j = i
        while j + 1 < len(res.commits) and res.cells[j + 1] == res.cells[i]:
            j += 1
        span = res.commits[i][:10] + (f"..{res.commits[j][:10]} ({j - i + 1})" if j > i else "")
        rows.append([span, " ".join(api.MATRIX_SYMBOL[c] for c in res.cells[i]), res.subjects[j][:60]])
        i = j + 1
    report.table(f"matrix {t.name} {t.version} over {rev_range} ({len(res.commits)} commits, {res.states} distinct "
                 f"states, {elapsed:.2f}s; A=applied 3=3-way U=already upstream X=conflict; patches "
                 f"{', '.join(str(k) for k in range(1, len(t.patches) + 1))})",
                 ["commits", "cells", "last subject"], rows, as_json=as_json)
    if any(api.MATRIX_SYMBOL[c] == "U" for row in res.cells for c in row):
        report.progress("U is by code alone (the one judge on each commit's tree; matrix reads no retire report: "
                        "behaviour not measured); status and check --onto C decide with the report saved at C")
    for m in subs:
        spans: list[list] = []
        for c, link, cells, pl in zip(m.commits, m.links, m.cells, m.places or [None] * len(m.commits)):
            link = link or (f"folder {pl.path}/" if pl is not None and pl.kind == "folder" else link)
            if spans and spans[-1][1] == link:
                spans[-1][0][1], spans[-1][3] = c, spans[-1][3] + 1
            else:
                spans.append([[c, c], link, cells, 1])
        report.table(f"  sub-target {m.sub.label} ({m.sub.path}) where each superproject commit holds it: the "
                     "submodule commit it pins, or its folder (- = absent, or not in that checkout)",
                     ["commits", "submodule at", "cells"],
                     [[a[:10] + (f"..{b[:10]} ({n})" if n > 1 else ""), (link or "-") if (link or "").startswith("folder") else (link or "-")[:10],
                       " ".join(api.MATRIX_SYMBOL[x] for x in cells) if cells else "-"] for (a, b), link, cells, n in spans], as_json=as_json)
    report.result(f"newest compatible: {newest or 'none'}", as_json=as_json)
    return 0
