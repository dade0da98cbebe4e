"""`lucepatch show EVIDENCE.json`: the verdict table, the provenance and one glyph per run; `--html`
writes the same as one self-contained page."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import report
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
@json_option
@click.pass_context
def command(ctx, evidence, html_path, wide, as_json):
    """Show what EVIDENCE (from lucepatch verify --evidence) proves: verdicts, what was built from
    which commit, the driver and GPU, and every run of both variants."""
    found = read_document(Path(evidence))
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
