"""`lucepatch show EVIDENCE.json`: the verdict table, the provenance and one glyph per run; `--html`
writes the same as one self-contained page."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import report
from lucepatch.builders.reproducible import shell_from_json
from lucepatch.commands._common import json_option, workspace
from lucepatch.show import terminal
from lucepatch.show.model import build_view
from lucepatch.show.page import write_html
from lucepatch.errors import UsageError
from lucepatch.show.documents import EVIDENCE, RETIRE, read_document
from lucepatch.verify.evidence import Evidence, load_evidence, upgrade_and_validate


@click.command("show")
@click.argument("evidence", type=click.Path(dir_okay=False))
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
    which commit, the driver and GPU, and every run of both variants."""
    found = read_document(Path(evidence))
    if recipe_of or artifact_of:
        return _one_field(found, evidence, recipe_of, artifact_of)
    if found.kind != EVIDENCE:
        return _report(found, evidence, html_path, as_json)
    ev = load_evidence(Path(evidence)) if "verb" not in found.doc else Evidence.from_json(
        upgrade_and_validate(found.doc, evidence))
    view = build_view(ev, workspace(ctx))
    if html_path:
        write_html(view, Path(html_path))
    if as_json:
        report.emit_json("show", {"evidence_path": evidence, "kind": found.kind, "html": html_path,
                                  "view": view.to_json()})
    else:
        terminal.show(view, report.out(), wide=wide)
    if html_path:
        report.progress(f"evidence page written to {html_path} ({view.glyph_count} runs, "
                        f"{len(view.rows)} scenarios; open it in any browser, it loads nothing)")
    return 0


def _one_field(found, path: str, recipe_of: str | None, artifact_of: str | None) -> int:
    """One recorded field for a script: the recipe as sh, or an artifact's path."""
    if recipe_of and artifact_of:
        raise UsageError("give --recipe or --artifact, not both")
    if found.kind != EVIDENCE:
        raise UsageError(f"--recipe and --artifact read evidence; {path} is a {found.kind} document")
    name = recipe_of or artifact_of
    v = (found.doc.get("variants") or {}).get(name) or {}
    if recipe_of:
        if not v.get("recipe"):
            raise UsageError(f"{path}: the {name} variant records no recipe (it was given as --lib/--baseline-lib bytes, "
                             "not built by lucepatch)")
        click.echo(shell_from_json(v["recipe"]), nl=False)  # a file's content, byte for byte
    else:
        art = (v.get("artifact") or {}).get("path")
        if not art:
            raise UsageError(f"{path}: the {name} variant records no artifact path")
        click.echo(art)
    return 0


def _report(found, path: str, html_path, as_json: bool) -> int:
    """A retirement report or a coverage map: the table `verify --retire` / `--coverage-map` printed."""
    if html_path:
        raise UsageError(f"--html writes the page of evidence; {path} is a {found.kind} document")
    if found.kind == RETIRE:
        from lucepatch.upstream.retire import format_retire_table  # lazy: retirement reports only, 48 ms

        title, columns, rows = format_retire_table(found.doc)
    else:
        from lucepatch.upstream.coverage import CoverageMap, format_coverage_map  # lazy: coverage maps only, 30 ms

        title, columns, rows = format_coverage_map(CoverageMap.from_json(found.doc))
    if as_json:
        report.emit_json("show", {"evidence_path": path, "kind": found.kind, "document": found.doc})
    report.table(title, columns, rows, as_json=as_json)
    return 0
