"""Evidence in the terminal (rich): the verdict table `verify` and `show` print, the provenance and
the per-run strip. Readable at 80 columns: scenario names never truncate (the reproducer prefix is
a heading row when several reproducers ran, and dropped when one did), the reason is the short one
unless `wide` (the full text is always in the evidence)."""

from __future__ import annotations

import textwrap

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lucepatch.report import _BREAKS, _wrap_text, wrap
from lucepatch.show.model import GLYPHS, VARIANTS, View

VERDICT_STYLE = {"proven": "bold green", "pass": "green", "guarded": "cyan", "not-proven": "yellow",
                 "regression": "bold red", "worse": "bold red", "invalid": "bold red", "skipped": "dim"}


NAME_MIN, WHY_MIN = 20, 14  # below these the p column gives its room to them (its value moves into "why")
_NO_COUNTS = ("skipped", "not-applicable")  # nothing ran: no counts, only the reason


def _name_lines(name: str, first: int, rest: int) -> list[str]:
    """`name` broken after - _ . / , : — the first line at most `first` wide, the others `rest`."""
    lines, cur, width = [], "", first
    for part in _BREAKS.findall(name) or [name]:
        while len(cur) + len(part) > width:
            if cur:
                lines.append(cur)
                cur, width = "", rest
                continue
            lines.append(part[:width])  # a piece wider than the line: folded
            part, width = part[width:], rest
        cur += part
    return lines + [cur] if cur or not lines else lines


def _why(r, with_p: bool) -> str:
    if not with_p or not r.p_text or r.verdict in _NO_COUNTS or r.p_text == "1":
        return r.short
    return f"{r.short}; p={r.p_text}" if r.short else f"p={r.p_text}"


def _title(view: View) -> str:
    d = view.driver
    return f"verify {view.title} — driver {d['kind']} ({d['gpu']}, {d['driver']})"


def _rows_table(view: View, width: int) -> Table:
    """The verdict table. Scenario names and the short reasons share what the counts leave: both at
    their full width when they fit; else the reason keeps WHY_MIN (it wraps at spaces) and names
    wrap after hyphens; when even that does not fit, the p column goes and p is said in the reason.
    A skipped or not-applicable row has no counts (nothing ran), only the reason."""
    indent = "  " if view.grouped else ""
    verdict_w = max([len(r.verdict) for r in view.rows] + [7])
    fixed = 8 + 7 + verdict_w  # "baseline", "patched" and the verdict: never narrower
    p_w = max([len(r.p_text) for r in view.rows] + [1])
    names = max([len(indent + r.name) for r in view.rows] + [len(x) for x, _ in view.groups()] + [8])
    show_p = True
    room = width - fixed - p_w - 5  # six columns, five one-space gaps
    why = max([len(_why(r, False)) for r in view.rows] + [3])
    if names + why > room and min(names, NAME_MIN) + min(why, WHY_MIN) > room:
        show_p, room = False, width - fixed - 4
        why = max([len(_why(r, True)) for r in view.rows] + [3])
    if names + why <= room:
        name_w, why_w = names, why
    else:
        name_w = max(min(names, room - min(why, WHY_MIN)), min(names, 12))
        why_w = max(room - name_w, 3)
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0))
    t.add_column("scenario", no_wrap=True, width=name_w)
    t.add_column("baseline\nfail", justify="right", no_wrap=True)
    t.add_column("patched\nfail", justify="right", no_wrap=True)
    if show_p:
        t.add_column("p", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("why", overflow="fold", width=why_w)
    for rep, rows in view.groups():
        if view.grouped:
            t.add_row(Text("\n".join(_name_lines(rep, name_w, name_w)), style="bold"), *[""] * (4 + show_p))
        for r in rows:
            name = indent + r.name
            if len(name) > name_w:  # wraps after hyphens, continued under itself
                first, *rest = _name_lines(r.name, name_w - len(indent), name_w - len(indent) - 2)
                name = "\n".join([indent + first] + [indent + "  " + x for x in rest])
            ran = r.verdict not in _NO_COUNTS
            cells = [name, r.frac("baseline") if ran else "", r.frac("patched") if ran else ""]
            if show_p:
                cells.append(r.p_text if ran else "")
            t.add_row(*cells, Text(r.verdict, style=VERDICT_STYLE.get(r.verdict, "")),
                      Text("\n".join(_wrap_why(_why(r, not show_p), why_w))))
    return t


def _wrap_why(text: str, width: int) -> list[str]:
    return _wrap_text(text, width, names=True) or [text]


def _below(view: View, width: int, *, wide: bool) -> list[Text]:
    """What the table's short reasons leave out, whole, under it: every skip reason once (with the
    scenarios it applies to), and with `wide` every scenario's full reason."""
    out: list[Text] = []
    skipped: dict[tuple[str, str], list[str]] = {}
    unloadable: dict[str, list[str]] = {}  # the loader's line with its cause (the row keeps the line only)
    for r in view.rows:
        if r.verdict in _NO_COUNTS and not wide:
            skipped.setdefault((r.verdict, r.reason), []).append(r.scenario)
        elif r.verdict == "invalid" and r.reason.startswith("cannot load: ") and " (cause: " in r.reason and not wide:
            reason, _, which = r.reason.partition(" — ")  # "... — the baseline build"
            unloadable.setdefault(f"{which}: {reason}" if which else reason, []).append(r.scenario)
    for (verdict, reason), scs in skipped.items():
        reps = sorted({sc.partition(":")[0] for sc in scs})
        what = (f"{', '.join(reps)}: {len(scs)} scenario(s)" if len(reps) == 1 and len(scs) > 1 else ", ".join(scs))
        out.append(Text(wrap(f"{verdict.replace('-', ' ')} {what}: {reason}", width), style="dim", no_wrap=True))
    for reason, scs in unloadable.items():
        out.append(Text(wrap(f"{len(scs)} scenario(s), {reason}", width), no_wrap=True))
    for v in view.rates:  # the rates the table's cells abbreviate: estimates, intervals, the bound
        if v.marks:
            out.append(Text(wrap(v.summary, width), no_wrap=True))
    if wide:
        for r in view.rows:
            if r.reason:
                out.append(Text(wrap(f"{r.scenario}: {r.reason}", width), no_wrap=True))
    return out


def verdict_parts(view: View, width: int, *, wide: bool = False) -> list:
    """The title (wrapped at `width`, not at the table's), the verdict table at `width`, then (whole)
    what its short reasons leave out."""
    return [Text(wrap(_title(view), width), style="bold", no_wrap=True), _rows_table(view, width),
            *_below(view, width, wide=wide)]


class _VerdictTable:
    """The table sized to the console it prints on, then what its reasons leave out."""

    def __init__(self, view: View, wide: bool):
        self.view, self.wide = view, wide

    def __rich_console__(self, console, options):
        yield from verdict_parts(self.view, options.max_width, wide=self.wide)


def print_parts(console: Console, parts: list) -> None:
    """Each part on its own; text already wrapped here (no_wrap) is printed as it is (soft wrap),
    so a path or a sha256 longer than the console stays whole instead of being cropped or folded."""
    for p in parts:
        console.print(p, soft_wrap=isinstance(p, Text) and bool(p.no_wrap))


def verdict_table(view: View, *, wide: bool = False) -> _VerdictTable:
    # 80 columns: no outer edges, the one-space column rule as the only gap, two-line headers
    return _VerdictTable(view, wide)


def provenance_parts(view: View, width: int) -> list[Text]:
    """What was built from which commit, on which driver: one `what  value` per line, the value
    wrapped at spaces under itself; a path or a sha256 is never broken (it is copied as printed):
    wider than the value column, it gets a line of its own from column 2."""
    rows = view.provenance
    kw = max([len(k) for k, _ in rows] + [4])
    room = max(20, width - kw - 2)
    out = [Text("provenance", style="italic")]
    for k, v in rows:
        lines = textwrap.wrap(" ".join(v.split()), width=room, break_long_words=False, break_on_hyphens=False) or [""]
        shown = []
        for n, line in enumerate(lines):
            if len(line) > room:
                if n == 0:
                    shown.append(k)
                shown.append("  " + line)
            else:
                shown.append((f"{k:<{kw}}  " if n == 0 else " " * (kw + 2)) + line)
        text = Text("\n".join(shown), no_wrap=True)
        text.stylize("bold", 0, len(k))
        out.append(text)
    return out


def strip_text(marks) -> Text:
    out = Text(no_wrap=False, overflow="fold")
    for m in marks:
        g = m.glyph
        out.append(g.char, style=g.style)
    return out


def strip_table(view: View) -> Table:
    """One glyph per run: baseline above, patched below, per scenario."""
    t = Table(title="runs (one glyph per run, in launch order)", box=None, show_header=False, pad_edge=False,
              title_justify="left")
    t.add_column("scenario", no_wrap=True)
    t.add_column("variant", no_wrap=True, style="dim")
    t.add_column("runs", overflow="fold")
    for rep, rows in view.groups():
        if view.grouped:
            t.add_row(Text(rep, style="bold"), "", "")
        for r in rows:
            for i, v in enumerate(VARIANTS):
                st = view.strips[r.scenario][v]
                name = (("  " if view.grouped else "") + r.name) if i == 0 else ""
                t.add_row(name, v, strip_text(st.marks) if st.marks else Text("(no runs)", style="dim"))
    return t


def legend(view: View) -> Text:
    seen = {m.outcome for per in view.strips.values() for s in per.values() for m in s.marks}
    out = Text("legend: ", style="dim")
    for outcome, g in GLYPHS.items():
        if outcome in seen:
            out.append(g.char, style=g.style)
            out.append(f" {g.label}  ", style="dim")
    return out


SERVER_FIELDS = (("starts and answers", "runs_text"), ("memory charged", "charged_text"),
                 ("limit enforced", "limit_text"), ("after exit", "after_text"))


def server_parts(view: View, width: int) -> list[Text]:
    """A server reproducer's evidence (reproducers/serve): per variant, does the server run under the library,
    is it charged what it reserved, is its limit enforced, is anything left charged after it exits."""
    sv = view.server
    if sv is None:
        return []
    head = f"server under the library: {sv.spec}" + (f" ({sv.build})" if sv.build else "")
    if sv.binary_sha256:
        head += f", binary sha256 {sv.binary_sha256[:12]}"
    out = [Text(""), Text(wrap(head, width), style="bold", no_wrap=True)]
    kw = max(len(k) for k, _ in SERVER_FIELDS)
    for side in sv.sides:
        out.append(Text(f"  {side.variant} ({side.library})", style="italic", no_wrap=True))
        for label, attr in SERVER_FIELDS:
            lines = textwrap.wrap(getattr(side, attr), width=max(20, width - kw - 6), break_long_words=False) or [""]
            text = "\n".join((f"    {label:<{kw}}  " if i == 0 else " " * (kw + 6)) + ln for i, ln in enumerate(lines))
            out.append(Text(text, no_wrap=True))
    return out


def show(view: View, console: Console, *, wide: bool = False) -> None:
    parts = [*verdict_parts(view, console.width, wide=wide), *server_parts(view, console.width),
             *provenance_parts(view, console.width), Text(""), strip_table(view), legend(view)]
    for e in view.fingerprints:
        parts.append(Text(wrap(f"{e['scenario']}: baseline failure {e['summary']} {e['url']}".rstrip(), console.width),
                          no_wrap=True))
    for n in view.notes:
        parts.append(Text(f"note: {n}", style="yellow"))
    verdict = Text("verdict: ")
    verdict.append(view.verdict, style=VERDICT_STYLE.get(view.verdict, ""))
    if view.simulated:
        verdict.append(" (simulated driver: not GPU evidence)", style="yellow")
    parts.append(verdict)
    print_parts(console, parts)
