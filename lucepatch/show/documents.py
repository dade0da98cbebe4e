"""Which document `show` was given: every JSON document lucepatch writes that a person reads —
evidence (schema 1/2, also wrapped in `verify --json`), the retirement report of `verify --retire`
(schema 2, also as `--json` prints it) and the coverage map of `verify --coverage-map` (schema 2)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.files import data_schema

EVIDENCE, RETIRE, COVERAGE = "lucepatch-evidence", "lucepatch-retire", "lucepatch-coverage-map"
READS = "evidence (lucepatch verify --evidence, --json), a retirement report (verify --retire) or a coverage map " \
        "(verify --coverage-map)"


@dataclass
class Document:
    kind: str  # EVIDENCE | RETIRE | COVERAGE
    doc: dict  # the document itself (a `verify --json` wrapper removed)


def read_document(path: Path) -> Document:
    """The document at `path` and its kind; a file that is none of them is one clear line."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist; pass the file lucepatch verify --evidence wrote")
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory; pass the file lucepatch verify --evidence wrote")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not JSON ({exc})")
    if isinstance(doc, dict) and doc.get("verb") == "verify" and isinstance(doc.get("evidence"), dict):
        doc = doc["evidence"]  # what `verify --json` printed
    kind = doc.get("kind", EVIDENCE if "verdict" in doc else None) if isinstance(doc, dict) else None
    if kind in (RETIRE, COVERAGE):
        if doc.get("schema_version") != 2:
            raise UsageError(f"{path} is a {kind} document of schema_version {doc.get('schema_version')}; "
                             "this lucepatch reads schema_version 2")
        _check(doc, kind, path)
        return Document(kind, doc)
    if kind == EVIDENCE:
        return Document(EVIDENCE, doc)
    raise UsageError(f"{path} is not lucepatch evidence, nor another document lucepatch show reads: give {READS}")


def _check(doc: dict, kind: str, path: Path) -> None:
    """A retirement report is checked against its schema (lucepatch/data/retire.schema.json)."""
    if kind != RETIRE:
        return
    import jsonschema  # lazy: jsonschema, 36 ms

    try:
        jsonschema.validate(doc, data_schema("retire"))
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise UsageError(f"{path} is not a valid retirement report: {where}: {exc.message}")
