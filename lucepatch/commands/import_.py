"""`lucepatch import TARGET FROM`: bring patches into a target's series (lucepatch/engine/importer.py).

FROM is one of:
- a directory of `git format-patch` files (or one mbox file of them): files already in
  `--zero-commit` format-patch form are copied byte for byte, so export(import(x)) == x;
- a quilt directory (a `series` file, plain or git diffs with DEP-3 headers): each patch is applied
  in order on the target's base (`--source`), committed with its DEP-3 header block kept as the
  message (Author:/From: as author, a fixed date) and re-emitted with format-patch — normalised
  once; importing or exporting the result again changes no byte;
- `--from-branch A..B --source P`: the commits A..B of P (lucepatch's own trailers removed).

New patches are appended to the series (`--replace` replaces it); a patch whose patch-id is
already in the series is skipped and reported.
"""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, source_option, workspace


@click.command("import")
@click.argument("target")
@click.argument("from_path", metavar="FROM", required=False, type=click.Path())
@click.option("--from-branch", "from_branch", default=None, metavar="A..B", help="Import the commits A..B of --source.")
@source_option
@click.option("--base", default=None, help="Create the target with this base commit if it does not exist.")
@click.option("--upstream", "upstream_url", default=None, help="Upstream URL when creating the target.")
@click.option("--replace", is_flag=True, help="Replace the series instead of appending to it.")
@json_option
@click.pass_context
def command(ctx, target, from_path, from_branch, source, base, upstream_url, replace, as_json):
    """Import patches into TARGET from a quilt folder, a format-patch/mbox folder or file, or a branch."""
    refuse_unused(ctx, "import")
    ws = workspace(ctx)
    res = api.import_patches(ws, target, cache(ctx), from_path=from_path, from_branch=from_branch, source=source,
                              base=base, upstream_url=upstream_url, replace=replace)
    if as_json:
        report.emit_json("import", {"workspace": ws.to_json(), "target": target, "from": from_path or from_branch,
                                     "kind": res.kind, "created": res.created,
                                     "patches": [{"name": n, "action": a} for n, _, a in res.plan]})
    report.table(f"import {res.kind} into {res.dir}", ["#", "patch", "action"],
                 [[i, n, a] for i, (n, _, a) in enumerate(res.plan, 1)], as_json=as_json)
    return 0
