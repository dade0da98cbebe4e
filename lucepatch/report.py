"""The output rule (docs/design.md "Output and exit codes"), for every verb: results — tables,
reports, what the user ran the verb to see — on stdout; progress, notes and hints on stderr;
`--json` replaces the human result on stdout with one document (schema_version + verb).

rich is imported on first use only (it costs more start-up time than applying a whole series):
a progress line to a non-terminal is written as the same text without it."""

from __future__ import annotations

import json
import os
import sys

SCHEMA_VERSION = 1


class _Console:
    """rich's Console for stderr, made on first use. Progress for people goes to stderr, so a
    result on stdout can be redirected or parsed alone."""

    _real = None

    def _get(self):
        if _Console._real is None:
            from rich.console import Console

            _Console._real = Console(stderr=True, highlight=False, soft_wrap=True,
                                     width=None if sys.stderr.isatty() else 200)
        return _Console._real

    def print(self, *objects, markup: bool = True, highlight: bool = False, **kw) -> None:
        if not markup and not _rich_wanted() and all(isinstance(o, str) for o in objects) and not kw:
            sys.stderr.write(" ".join(objects) + "\n")
            sys.stderr.flush()
            return
        self._get().print(*objects, markup=markup, highlight=highlight, **kw)

    def __getattr__(self, name):
        return getattr(self._get(), name)


err = _Console()


def _rich_wanted() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def out():
    """The console for results on stdout: the terminal's width, $COLUMNS, else 200 (logs, pipes)."""
    from rich.console import Console

    tty = sys.stdout.isatty() or bool(os.environ.get("COLUMNS"))
    return Console(highlight=False, width=None if tty else 200)


def progress(msg: str) -> None:
    # messages are text, never markup: "pip install 'lucepatch[docker]'" must print as written
    if not _rich_wanted():
        sys.stderr.write(f"lucepatch: {msg}\n")
        sys.stderr.flush()
        return
    from rich.text import Text

    err.print(Text.assemble(("lucepatch:", "dim"), " ", str(msg)))


def emit_json(verb: str, payload: dict) -> None:
    doc = {"schema_version": SCHEMA_VERSION, "verb": verb, **payload}
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


IDENTIFIER_COLUMNS = {"patch", "target", "line"}


def table(title: str, columns: list[str], rows: list[list], *, as_json: bool = False) -> None:
    """A result table on stdout; nothing under --json (the JSON document carries the same rows)."""
    if as_json:
        return
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title), show_lines=False)
    for c in columns:
        # names are identifiers: at 80 columns a patch name wraps, never ends in "…" (rows
        # of one series share long prefixes and would read alike)
        t.add_column(escape(c), overflow="fold" if c in IDENTIFIER_COLUMNS else "ellipsis")
    for r in rows:
        t.add_row(*[Text("" if v is None else str(v)) for v in r])  # cells are text, not markup
    out().print(t)


def result(msg: str, *, as_json: bool = False) -> None:
    """One line of a result (not progress) on stdout; nothing under --json."""
    if not as_json:
        out().print(msg, markup=False, highlight=False, soft_wrap=True)
