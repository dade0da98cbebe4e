"""The output rule (docs/design.md "Output and exit codes"), for every verb: results — tables,
reports, what the user ran the verb to see — on stdout; progress, notes and hints on stderr;
`--json` replaces the human result on stdout with one document (schema_version + verb).

rich is imported on first use only (it costs more start-up time than applying a whole series):
a progress line to a non-terminal is written as the same text without it."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap

SCHEMA_VERSION = 1


class _Console:
    """rich's Console for stderr, made on first use. Progress for people goes to stderr, so a
    result on stdout can be redirected or parsed alone."""

    _real = None

    def _get(self):
        if _Console._real is None:
            from rich.console import Console  # lazy: rich, 22 ms

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


class _TrimmedLines:
    """stdout for a result that is not going to a terminal (a pipe, a log, a file): every line
    without the spaces rich pads table cells and titles with, so the text diffs, greps and reads
    back as it looks; nothing else is changed (no colour is written there)."""

    def __init__(self, f):
        self.f, self._line = f, ""

    def write(self, text: str) -> int:
        *done, self._line = (self._line + text).split("\n")
        if done:
            self.f.write("".join(line.rstrip() + "\n" for line in done))
        return len(text)

    def flush(self) -> None:
        if self._line:  # a print that did not end its line: the rest of the line may follow
            self.f.write(self._line)
            self._line = ""
        self.f.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self.f, name)


def out():
    """The console for results on stdout: the terminal's width, $COLUMNS, else 200 (logs, pipes);
    off a terminal its lines carry no trailing spaces."""
    from rich.console import Console  # lazy: rich, 22 ms

    term = sys.stdout.isatty()
    tty = term or bool(os.environ.get("COLUMNS"))
    return Console(file=sys.stdout if term else _TrimmedLines(sys.stdout), highlight=False,
                   width=None if tty else 200)


QUIET = False  # --quiet: progress and notes are not printed, only a verb's final line and errors


def set_quiet(on: bool) -> None:
    global QUIET
    QUIET = bool(on)


def err_console():
    """rich's Console on stderr (a progress bar draws on it)."""
    return err._get()


def rich_progress_wanted() -> bool:
    """A live progress bar: only on a terminal, and not under --quiet."""
    return _rich_wanted() and not QUIET


def progress(msg: str, *, final: bool = False) -> None:
    """A line of progress, a note or a hint on stderr; under --quiet only a `final` one (the line
    that says how a verb ended)."""
    if QUIET and not final:
        return
    # messages are text, never markup: "pip install 'lucepatch[docker]'" must print as written
    if not _rich_wanted():
        sys.stderr.write(f"lucepatch: {msg}\n")
        sys.stderr.flush()
        return
    from rich.text import Text  # lazy: rich, 22 ms

    err.print(Text.assemble(("lucepatch:", "dim"), " ", str(msg)))


def emit_json(verb: str, payload: dict) -> None:
    doc = {"schema_version": SCHEMA_VERSION, "verb": verb, **payload}
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


# ---- tables ---------------------------------------------------------------------------------
#
# A table fits the console (the terminal, $COLUMNS, else 200) and nothing a user needs next is
# cut (docs/design.md "Output and exit codes"): every column has a kind that says how its cells
# may bend. Widths are decided here, not by rich, so a cell is never ended with "…":
#   key    short (a number, a status, a 12-digit commit): always its full width, never wrapped
#   name   an identifier (a patch, a target, a scenario): wraps after - _ . / , : and is read back
#          by joining its lines
#   text   prose (a detail, a fix, a reason): wraps at spaces, a long name like a name; a cell with
#          a path, a URL, an option or a commit wider than the column goes under the table whole
#   value  what the next command takes (a sha256, a path, a URL): never broken; a cell wider than
#          its column shows a marker (↓1) and is printed whole under the table

KEY, NAME, TEXT, VALUE = "key", "name", "text", "value"
GAP = 3  # " │ " between two columns (box.MINIMAL without edges)
FLOOR = {NAME: 16, TEXT: 18, VALUE: 8}  # the narrowest a column is made before cells go under
DEFAULT_KIND = {  # the columns the verbs print, by header; any other header is text
    **dict.fromkeys(["#", "patch-id", "version", "base", "commit", "commits", "status", "applies", "action",
                     "build-only", "variant", "level", "check", "step", "kind", "default runs", "line", "cells",
                     "behaviour", "time", "id"], KEY),
    **dict.fromkeys(["patch", "target", "scenario", "scenarios", "name", "reproducer", "artifact", "series",
                     "probe", "label", "submodule at"], NAME),
    **dict.fromkeys(["sha256", "path", "url", "log", "file", "conflicts"], VALUE),
}


class Col:
    """One column: its header, its kind (KEY/NAME/TEXT/VALUE) and how it is justified."""

    __slots__ = ("name", "kind", "justify")

    def __init__(self, name: str, kind: str | None = None, justify: str = "left"):
        self.name, self.kind, self.justify = name, kind or DEFAULT_KIND.get(name, TEXT), justify


def _col(c) -> Col:
    return c if isinstance(c, Col) else Col(str(c))


_BREAKS = re.compile(r"[^-_./,:]*[-_./,:]|[^-_./,:]+$")


def _break_name(word: str, width: int) -> list[str]:
    """`word` in lines of at most `width`, broken after - _ . / , : where it can be, else folded."""
    parts = _BREAKS.findall(word) or [word]
    lines, cur = [], ""
    for part in parts:
        while len(part) > width:  # no break point close enough: fold
            if cur:
                lines.append(cur)
                cur = ""
            lines.append(part[:width])
            part = part[width:]
        if len(cur) + len(part) > width:
            lines.append(cur)
            cur = part
        else:
            cur += part
    if cur or not lines:
        lines.append(cur)
    return lines


def _copied(word: str) -> bool:
    """A word a user copies into the next command: a path, a URL, an option, a commit or a sha256."""
    return "/" in word or word.lstrip("(").startswith("-") or bool(re.fullmatch(r"\(?[0-9a-f]{12,}\W*", word))


def _wrap_text(text: str, width: int, *, names: bool = False) -> list[str] | None:
    """`text` in lines of at most `width`, broken at spaces; a word wider than `width` is broken
    like a name, unless (in prose, not `names`) it is one a user copies: then the answer is None
    (the cell goes under the table, whole)."""
    out = []
    for para in text.split("\n"):
        line = ""
        for word in para.split():
            if len(word) > width:
                if not names and _copied(word):
                    return None
                if line:
                    out.append(line)
                *full, line = _break_name(word, width)
                out += full
            elif line and len(line) + 1 + len(word) > width:
                out.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        out.append(line)
    return out


def _natural(text: str) -> int:
    return max((len(x) for x in text.split("\n")), default=0)


def _header_floor(name: str) -> int:
    """The narrowest a header folds to: at spaces and after hyphens ("upstream-" / "status")."""
    return max((len(x) for w in name.split() for x in _BREAKS.findall(w)), default=1)


def _header_lines(name: str, width: int) -> str:
    return "\n".join(_wrap_text(name, width) or [x for w in name.split() for x in _break_name(w, width)])


def _shrink(width: list[int], floor: list[int], which: list[int], room: int) -> None:
    """Take one character at a time from the widest of `which` until the columns fit `room`."""
    while sum(width) > room:
        can = [i for i in which if width[i] > floor[i]]
        if not can:
            return
        width[max(can, key=lambda i: width[i])] -= 1


def _widths(cols: list[Col], cells: list[list[str]], total: int) -> list[int]:
    """Each column's width so the table fits `total` characters: every column its natural width
    when they fit; else, in this order: value columns collapse (their long cells go under the
    table), widest first, while the rest could not fit; key columns fold their headers; name and text columns shrink, widest
    first, to a readable floor, then to the narrowest their header allows."""
    n = len(cols)
    body = [max([0] + [_natural(r[i]) for r in cells]) for i in range(n)]
    nat = [max(len(c.name), body[i]) for i, c in enumerate(cols)]
    head = [_header_floor(c.name) for c in cols]
    key_floor = [max(body[i], head[i]) for i in range(n)]
    soft = [key_floor[i] if c.kind == KEY else min(key_floor[i], max(head[i], FLOOR[c.kind])) for i, c in enumerate(cols)]
    # a name is never folded inside a piece between its break points (allocations-) if it can be helped
    piece = [max([len(x) for r in cells for w in r[i].split() for x in _BREAKS.findall(w)] + [1])
             if c.kind == NAME else 6 for i, c in enumerate(cols)]
    hard = [key_floor[i] if c.kind == KEY else min(key_floor[i], max(head[i], min(piece[i], 14), 6))
            for i, c in enumerate(cols)]
    room = total - GAP * (n - 1)
    width = list(nat)
    for i in sorted((i for i, c in enumerate(cols) if c.kind == VALUE), key=lambda i: -nat[i]):
        if sum(width[j] if cols[j].kind == VALUE else soft[j] for j in range(n)) <= room:
            break
        width[i] = soft[i]
    flex = [i for i, c in enumerate(cols) if c.kind in (NAME, TEXT)]
    if sum(width) > room:  # a two-line header costs one line; a wide one costs every row
        width = [key_floor[i] if c.kind == KEY else width[i] for i, c in enumerate(cols)]
    _shrink(width, soft, flex, room)
    _shrink(width, hard, flex, room)
    if sum(width) > room:  # cannot fit even folded: `table` prints each row as a record instead
        return []
    spare = room - sum(width)  # given back to collapsed value columns, where more of their cells then fit
    for i in range(n):
        if spare > 0 and cols[i].kind == VALUE and width[i] < nat[i]:
            fits = [len(r[i]) for r in cells if width[i] < len(r[i]) <= width[i] + spare]
            if fits:
                spare -= max(fits) - width[i]
                width[i] = max(fits)
    return width


def layout(columns: list, rows: list[list], total: int) -> tuple[list[Col], list[int], list[list[str]], list[tuple[str, str]]]:
    """The cells as they print at `total` characters: (columns, widths, cells with their line
    breaks, [(marker, 'column: whole value')] for what goes under the table). A column empty in
    every row is left out when the table would not fit with it: it says nothing."""
    cols = [_col(c) for c in columns]
    cells = [["" if v is None else str(v) for v in r] + [""] * (len(cols) - len(r)) for r in rows]
    natural = sum(max([len(c.name)] + [_natural(r[i]) for r in cells]) for i, c in enumerate(cols))
    if cells and natural + GAP * (len(cols) - 1) > total:
        keep = [i for i in range(len(cols)) if any(r[i].strip() for r in cells)] or [0]
        cols, cells = [cols[i] for i in keep], [[r[i] for i in keep] for r in cells]
    widths = _widths(cols, cells, total)
    if not widths:
        return cols, [], cells, []
    below: list[tuple[str, str]] = []
    shown = []
    for r in cells:
        line = []
        for c, w, v in zip(cols, widths, r):
            lines: list[str] | None
            if c.kind == KEY:
                lines = v.split("\n")
            elif c.kind == NAME:
                lines = _wrap_text(v, w, names=True)
            elif c.kind == TEXT:
                lines = _wrap_text(v, w)
            else:
                lines = v.split("\n") if _natural(v) <= w else None
            if lines is None:  # goes under the table, whole
                mark = f"↓{len(below) + 1}"
                below.append((mark, f"{c.name}: {v}"))
                lines = [mark]
            line.append("\n".join(lines))
        shown.append(line)
    return cols, widths, shown, below


def wrap(text: str, width: int, indent: str = "    ", first: str = "") -> str:
    """Prose at `width` (the whole line: `first` and `indent` included) with a hanging indent; a word
    wider than the line (a path, a command) is never broken."""
    return "\n".join(textwrap.fill(" ".join(para.split()), width=max(20, width), subsequent_indent=indent,
                                    initial_indent=first if i == 0 else "", break_long_words=False,
                                    break_on_hyphens=False)
                      for i, para in enumerate(text.split("\n")))


def table(title: str, columns: list, rows: list[list], *, as_json: bool = False, notes: list[str] = ()) -> None:
    """A result table on stdout; nothing under --json (the JSON document carries the same rows).
    `columns` are header strings (their kind from DEFAULT_KIND, else text) or Col; `notes` print
    under the table, wrapped at spaces (a fix, a hint: text the table has no room for)."""
    if as_json:
        return
    from rich.text import Text  # lazy: rich, 22 ms

    console = out()
    cols, widths, cells, below = layout(columns, rows, console.width)
    console.print(Text(title, style="bold"), soft_wrap=False)
    if not widths:
        _records(console, cols, cells)
    else:
        _grid(console, cols, widths, cells, below)
    for note in notes:
        console.print(Text(wrap(note, console.width)), soft_wrap=True)


def _records(console, cols: list[Col], cells: list[list[str]]) -> None:
    """Too many columns for the console: one block per row, `column  value` per line (values
    wrapped at spaces, a path or a sha256 whole on a line of its own)."""
    from rich.text import Text  # lazy: rich, 22 ms

    kw = max(len(c.name) for c in cols[1:]) if len(cols) > 1 else 0
    for r in cells:
        console.print(Text(f"{cols[0].name} {r[0]}".strip(), style="bold"), soft_wrap=True)
        for c, v in zip(cols[1:], r[1:]):
            if v:  # continued under itself; the line is the console's width, the key included
                console.print(Text(wrap(v, console.width, " " * (kw + 4), first=f"  {c.name:<{kw}}  ")),
                              soft_wrap=True)


def _grid(console, cols: list[Col], widths: list[int], cells: list[list[str]], below) -> None:
    from rich import box  # lazy: rich, 22 ms
    from rich.table import Table  # lazy: rich, 22 ms
    from rich.text import Text  # lazy: rich, 22 ms

    t = Table(box=box.MINIMAL, show_edge=False, pad_edge=False, padding=(0, 1), header_style="bold")
    for c, w in zip(cols, widths):
        t.add_column(Text(_header_lines(c.name, w)), width=w, no_wrap=True, justify=c.justify, overflow="ignore")
    for r in cells:
        t.add_row(*[Text(v) for v in r])  # cells are text, not markup
    console.print(t)
    for mark, text in below:  # prose wraps at spaces under itself; a sha256 or a path is never broken
        console.print(Text(wrap(text, console.width, " " * (len(mark) + 1), first=f"{mark} ")), soft_wrap=True)


def result(msg: str, *, as_json: bool = False) -> None:
    """One line of a result (not progress) on stdout; nothing under --json."""
    if not as_json:
        out().print(msg, markup=False, highlight=False, soft_wrap=True)
