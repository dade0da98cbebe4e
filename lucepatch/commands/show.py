"""`lucepatch show EVIDENCE.json`: the verdict table, the provenance and one glyph per run; `--html`
writes the same as one self-contained page."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused, workspace

REPORT = "show (a retirement report or a coverage map)"  # the mode a document's kind picks (verb_modes.toml)
SERVERS = "show (several server runs side by side)"  # the mode several EVIDENCE files pick


@click.command("show")
@click.argument("evidence", type=click.Path(dir_okay=False), nargs=-1, required=True)
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write one self-contained HTML page (no network, inline CSS/SVG) to this file.")
@click.option("--wide", is_flag=True, help="The full verdict reasons, not the short ones.")
@click.option("--recipe", "recipe_of", type=click.Choice(["baseline", "patched"]), default=None,
              help="Print only that variant's recorded build recipe as sh (set SRC and BUILD, then run it): "
                   "the commands that rebuild the same bytes from a plain `git am` of the series.")
@click.option("--artifact", "artifact_of", type=click.Choice(["baseline", "patched"]), default=None,
              help="Print only the path of that variant's library as recorded (e.g. for --baseline-lib).")
@json_option
@click.pass_context
def command(ctx, evidence, html_path, wide, recipe_of, artifact_of, as_json):
    """Show what EVIDENCE (from lucepatch verify --evidence) proves: verdicts, what was built from
    which commit, the driver and GPU, and every run of both variants. Several EVIDENCE files of server
    runs (verify --reproducer serve: one per line and server build) print side by side: does the server
    run under the library, is its memory charged, is its limit enforced."""
    if len(evidence) > 1:
        refuse_unused(ctx, "show", chosen=SERVERS)
        return _servers(list(evidence), as_json)
    evidence = evidence[0]
    found = api.read_document(evidence)
    refuse_unused(ctx, "show", chosen=None if found.kind == api.EVIDENCE else REPORT)
    if recipe_of or artifact_of:
        click.echo(api.one_field(found, evidence, recipe_of, artifact_of), nl=False)
        return 0
    if found.kind != api.EVIDENCE:
        return _report(found, evidence, as_json)
    view = api.evidence_view(found, evidence, workspace(ctx))
    if html_path:
        api.write_html(view, html_path)
    if as_json:
        report.emit_json("show", {"evidence_path": evidence, "kind": found.kind, "html": html_path,
                                  "view": view.to_json()})
    else:
        api.print_view(view, report.out(), wide=wide)
    if html_path:
        report.progress(f"evidence page written to {html_path} ({view.glyph_count} runs, "
                        f"{len(view.rows)} scenarios; open it in any browser, it loads nothing)")
    return 0


def _servers(paths: list[str], as_json: bool) -> int:
    """Several server runs (reproducers/serve): one row per line, server build and variant."""
    title, columns, rows, views = api.server_matrix(paths)
    if as_json:
        report.emit_json("show", {"evidence_paths": paths, "kind": "server-matrix",
                                  "servers": [v.to_json() for v in views]})
    report.table(title, columns, rows, as_json=as_json)
    return 0


def _report(found, path: str, as_json: bool) -> int:
    """A retirement report or a coverage map: the table `verify --retire` / `--coverage-map` printed
    (--html, --wide, --recipe, --artifact read evidence: the mode's table refuses them)."""
    title, columns, rows = api.report_table(found)
    if as_json:
        report.emit_json("show", {"evidence_path": path, "kind": found.kind, "document": found.doc})
    report.table(title, columns, rows, as_json=as_json)
    return 0
