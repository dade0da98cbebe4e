"""Evidence in the terminal (rich): the verdict table `verify` and `show` print, the provenance and
the per-run strip. Readable at 80 columns: scenario names never truncate (the reproducer prefix is
a heading row when several reproducers ran, and dropped when one did), the reason is the short one
unless `wide` (the full text is always in the evidence)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lucepatch.report import wrap
from lucepatch.show.model import GLYPHS, VARIANTS, View

VERDICT_STYLE = {"proven": "bold green", "pass": "green", "guarded": "cyan", "not-proven": "yellow",
                 "regression": "bold red", "invalid": "bold red", "skipped": "dim"}


def _title(view: View) -> str:
    d = view.driver
    return f"verify {view.title} — driver {d['kind']} ({d['gpu']}, {d['driver']})"


def _rows_table(view: View, width: int) -> Table:
    """The verdict table. The reason column gets the width its longest short reason needs; when
    the table is wider than the console, scenario names wrap after hyphens first, then the
    reason wraps at spaces. A skipped row has no counts (nothing ran), only the reason."""
    from lucepatch.report import _break_name, _wrap_text

    indent = "  " if view.grouped else ""
    keys = 8 + 7 + max([len(r.p_text) for r in view.rows] + [1]) + max([len(r.verdict) for r in view.rows] + [7])
    names = max([len(indent + r.name) for r in view.rows] + [len(x) for x, _ in view.groups()] + [8])
    why = max([len(r.short) for r in view.rows] + [3])
    room = width - keys - 5  # five one-space gaps
    name_w = max(min(names, room - why), min(names, 12))
    why_w = max(room - name_w, 3)
    t = Table(title=_title(view), box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), title_justify="left")
    t.add_column("scenario", no_wrap=True, width=name_w)
    t.add_column("baseline\nfail", justify="right", no_wrap=True)
    t.add_column("patched\nfail", justify="right", no_wrap=True)
    t.add_column("p", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("why", overflow="fold", width=min(why, why_w) if why <= why_w else why_w)
    for rep, rows in view.groups():
        if view.grouped:
            t.add_row(Text("\n".join(_break_name(rep, name_w)), style="bold"), "", "", "", "", "")
        for r in rows:
            name = indent + r.name
            if len(name) > name_w:  # wraps after hyphens, continued under itself
                first, *rest = _wrap_text(r.name, name_w - len(indent), names=True)
                rest = _wrap_text(" ".join(rest), name_w - len(indent) - 2, names=True) if rest else []
                name = "\n".join([indent + first] + [indent + "  " + x for x in rest])
            ran = r.verdict != "skipped"  # a skipped row shows no counts: no baseline run happened
            t.add_row(name, r.frac("baseline") if ran else "", r.frac("patched") if ran else "",
                      r.p_text if ran else "", Text(r.verdict, style=VERDICT_STYLE.get(r.verdict, "")), r.short)
    return t


def _below(view: View, width: int, *, wide: bool) -> list[Text]:
    """What the table's short reasons leave out, whole, under it: every skip reason once (with the
    scenarios it applies to), and with `wide` every scenario's full reason."""
    out: list[Text] = []
    skipped: dict[str, list[str]] = {}
    for r in view.rows:
        if r.verdict == "skipped" and not wide:
            skipped.setdefault(r.reason, []).append(r.scenario)
    for reason, scs in skipped.items():
        reps = sorted({sc.partition(":")[0] for sc in scs})
        what = (f"{', '.join(reps)}: {len(scs)} scenario(s)" if len(reps) == 1 and len(scs) > 1 else ", ".join(scs))
        out.append(Text(wrap(f"skipped {what}: {reason}", width), style="dim", no_wrap=True))
    if wide:
        for r in view.rows:
            if r.reason:
                out.append(Text(wrap(f"{r.scenario}: {r.reason}", width), no_wrap=True))
    return out


def verdict_parts(view: View, width: int, *, wide: bool = False) -> list:
    """The verdict table at `width`, then (whole) what its short reasons leave out."""
    return [_rows_table(view, width), *_below(view, width, wide=wide)]


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
    import textwrap

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


def show(view: View, console: Console, *, wide: bool = False) -> None:
    parts = [*verdict_parts(view, console.width, wide=wide), *provenance_parts(view, console.width), Text(""),
             strip_table(view), legend(view)]
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
