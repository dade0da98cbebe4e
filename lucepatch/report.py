"""Output: JSON on stdout (one schema per verb, always with schema_version), humans on stderr."""

from __future__ import annotations

import json
import os
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

SCHEMA_VERSION = 1

# Progress and tables for people go to stderr, so stdout stays machine-readable.
err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 200)


def out() -> Console:
    """The console for results on stdout: the terminal's width, $COLUMNS, else 200 (logs, pipes)."""
    tty = sys.stdout.isatty() or bool(os.environ.get("COLUMNS"))
    return Console(highlight=False, width=None if tty else 200)


def progress(msg: str) -> None:
    err.print(f"[dim]lucepatch:[/dim] {escape(msg)}")  # messages are text ("[not_applicable]"), not markup


def emit_json(verb: str, payload: dict) -> None:
    doc = {"schema_version": SCHEMA_VERSION, "verb": verb, **payload}
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def table(title: str, columns: list[str], rows: list[list], *, to_stdout: bool = False) -> None:
    # cells are data (trailers like "Submitted [url]", "[serves]"), never rich markup
    t = Table(title=escape(title), show_lines=False)
    for c in columns:
        t.add_column(escape(c))
    for r in rows:
        t.add_row(*["" if v is None else escape(str(v)) for v in r])
    if to_stdout:
        Console(highlight=False, width=None if sys.stdout.isatty() else 200).print(t)
    else:
        err.print(t)
