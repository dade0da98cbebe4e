"""Read back a table `report.table` printed, as a person reads it: the header rule (──┼──) gives
the column boundaries, a row starts where its first cell is filled, wrapped lines continue the
cells above them, and a marker (↓N) is replaced by the whole value printed under the table."""

from __future__ import annotations

import re

BREAKS = "-_./,:"


def _join(a: str, b: str) -> str:
    if not a or not b:
        return a + b
    return a + b if a[-1] in BREAKS else f"{a} {b}"


def read_tables(out: str) -> list[dict]:
    """Every table in `out`: {"title", "columns", "rows": [{column: cell}], "below": {mark: text}}."""
    lines = out.splitlines()
    tables = []
    for i, rule in enumerate(lines):
        if "┼" not in rule or set(rule.strip()) - {"─", "┼"}:
            continue
        cuts = [m.start() for m in re.finditer("┼", rule)]
        bounds = list(zip([0] + [c + 1 for c in cuts], cuts + [None]))

        def split(line):
            return [line[a:b].strip() for a, b in bounds]

        head_start = i
        while head_start > 0 and "│" in lines[head_start - 1]:
            head_start -= 1
        headers = [""] * len(bounds)
        for line in lines[head_start:i]:
            headers = [_join(h, c) for h, c in zip(headers, split(line))]
        title = lines[head_start - 1].strip() if head_start else ""
        rows, j = [], i + 1
        while j < len(lines) and "│" in lines[j]:
            cells = split(lines[j])
            if cells[0] or not rows:
                rows.append(cells)
            else:
                rows[-1] = [_join(a, b) for a, b in zip(rows[-1], cells)]
            j += 1
        below = {}
        while j < len(lines) and (m := re.match(r"^(↓\d+) (.*)$", lines[j])):
            below[m.group(1)] = m.group(2)
            j += 1
            # prose wrapped at spaces under itself (a path or a sha256 is never broken)
            while j < len(lines) and lines[j].startswith(" " * (len(m.group(1)) + 1)) and lines[j].strip():
                below[m.group(1)] += " " + lines[j].strip()
                j += 1
        resolved = []
        for r in rows:
            row = {}
            for h, c in zip(headers, r):
                if c in below:
                    c = below[c].split(": ", 1)[1]
                row[h] = c
            resolved.append(row)
        tables.append({"title": title, "columns": headers, "rows": resolved, "below": below})
    return tables


def table_lines(out: str) -> list[str]:
    """The lines of `out` that must fit the width: all but a whole value alone on its line (a path,
    a sha256 wider than the console); what goes under a table (`↓N column: value`) wraps at spaces."""
    return [l for l in out.splitlines() if len(l.split()) > 1]


def read_records(out: str, first: str) -> list[dict]:
    """The rows of a table printed as records (too many columns for the console): a line
    `<first column> <value>`, then `  <column>  <value>` lines, values continued under themselves."""
    rows, key = [], None
    for line in out.splitlines():
        if line.startswith(f"{first} ") and not line.startswith("  "):
            rows.append({first: line[len(first) + 1:].strip()})
            key = None
        elif rows and line.startswith("  ") and (m := re.match(r"^  (\S(?:.*?\S)?)\s{2,}(\S.*)$", line)) \
                and not line.startswith("    "):
            key = m.group(1)
            rows[-1][key] = m.group(2).strip()
        elif rows and key and line.startswith("    "):
            rows[-1][key] = _join(rows[-1][key], line.strip())
        else:
            key = None
    return rows


def rows_of(out: str, first: str) -> list[dict]:
    """The rows of every table whose first column is `first`, grid or records."""
    grid = [r for t in read_tables(out) if t["columns"] and t["columns"][0] == first for r in t["rows"]]
    return grid or read_records(out, first)
