"""`show` as a service: which document a file is, evidence as the viewer's model (terminal table,
HTML page), a retirement report or a coverage map as the table its verb printed, one recorded
field (a variant's recipe as sh, its library's path) for a script."""

from __future__ import annotations

from pathlib import Path

from lucepatch.builders.reproducible import shell_from_json
from lucepatch.errors import UsageError
from lucepatch.show.documents import EVIDENCE, RETIRE, Document, read_document
from lucepatch.show import server
from lucepatch.show.model import View, build_view
# the page and the terminal view are the viewer's own functions: the use case itself
from lucepatch.show.page import write_html
from lucepatch.show.terminal import show as print_view
from lucepatch.verify.evidence import Evidence, load_evidence, upgrade_and_validate

__all__ = ["EVIDENCE", "RETIRE", "read_document", "evidence_view", "write_html", "print_view", "one_field",
           "report_table", "server_matrix"]


def evidence_view(found: Document, path: str, ws) -> View:
    """Evidence (a file, or what `verify --json` printed) as the viewer's model."""
    ev = load_evidence(Path(path)) if "verb" not in found.doc else Evidence.from_json(
        upgrade_and_validate(found.doc, path))
    return build_view(ev, ws)


def server_matrix(paths: list[str]) -> tuple[str, list[str], list[list[str]], list]:
    """Several server evidences side by side (reproducers/serve: one per line and server build): (title, columns,
    rows, the views). Each file must be evidence with the server scenarios; one line naming the first that is not."""
    views = []
    for path in paths:
        found = read_document(Path(path))
        if found.kind != EVIDENCE:
            raise UsageError(f"{path} is a {found.kind} document; several files are shown side by side only when each "
                             "is the evidence of a server run (verify --reproducer serve)")
        ev = load_evidence(Path(path)) if "verb" not in found.doc else Evidence.from_json(upgrade_and_validate(found.doc, path))
        sv = server.server_view(ev)
        if sv is None:
            raise UsageError(f"{path} has no server scenarios (serve:*): several files are shown side by side only "
                             "for server runs; show it alone")
        views.append(sv)
    title = "the server under the library, per line and build (reproducers/serve)"
    return title, list(server.COLUMNS), server.matrix(views), views


def one_field(found: Document, path: str, recipe_of: str | None, artifact_of: str | None) -> str:
    """One recorded field for a script: a variant's recipe as sh, or its artifact's path."""
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
        return shell_from_json(v["recipe"])  # a file's content, byte for byte
    art = (v.get("artifact") or {}).get("path")
    if not art:
        raise UsageError(f"{path}: the {name} variant records no artifact path")
    return art + "\n"


def report_table(found: Document) -> tuple[str, list, list]:
    """A retirement report or a coverage map: the table `verify --retire` / `--coverage-map` printed."""
    if found.kind == RETIRE:
        from lucepatch.upstream.retire import format_retire_table  # lazy: retirement reports only, 48 ms

        return format_retire_table(found.doc)
    from lucepatch.upstream.coverage import CoverageMap, format_coverage_map  # lazy: coverage maps only, 30 ms

    return format_coverage_map(CoverageMap.from_json(found.doc))
