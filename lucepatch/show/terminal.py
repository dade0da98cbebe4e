"""Evidence in the terminal (rich): the verdict table `verify` and `show` print, the provenance and
the per-run strip. Readable at 80 columns: scenario names never truncate (the reproducer prefix is
a heading row when several reproducers ran, and dropped when one did), the reason is the short one
unless `wide` (the full text is always in the evidence)."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from lucepatch.show.model import GLYPHS, VARIANTS, View

VERDICT_STYLE = {"proven": "bold green", "pass": "green", "guarded": "cyan", "not-proven": "yellow",
                 "regression": "bold red", "invalid": "bold red", "skipped": "dim"}


def _title(view: View) -> str:
    d = view.driver
    return f"verify {view.title} — driver {d['kind']} ({d['gpu']}, {d['driver']})"


def verdict_table(view: View, *, wide: bool = False) -> Table:
    # 80 columns: no outer edges, the one-space column rule as the only gap, two-line headers; only "why" wraps
    t = Table(title=_title(view), box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), title_justify="left")
    t.add_column("scenario", no_wrap=True, min_width=max((len(r.name) + 2 * view.grouped for r in view.rows), default=8))
    t.add_column("baseline\nfail", justify="right", no_wrap=True)
    t.add_column("patched\nfail", justify="right", no_wrap=True)
    t.add_column("p", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("why", overflow="fold")
    for rep, rows in view.groups():
        if view.grouped:
            t.add_row(Text(rep, style="bold"), "", "", "", "", "")
        for r in rows:
            t.add_row(("  " if view.grouped else "") + r.name, r.frac("baseline"), r.frac("patched"), r.p_text,
                      Text(r.verdict, style=VERDICT_STYLE.get(r.verdict, "")), r.reason if wide else r.short)
    return t


def provenance_table(view: View) -> Table:
    t = Table(title="provenance", box=None, show_header=False, pad_edge=False, title_justify="left")
    t.add_column("what", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    for k, v in view.provenance:
        t.add_row(k, v)
    return t


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
    parts = [verdict_table(view, wide=wide), provenance_table(view), Text(""), strip_table(view), legend(view)]
    for e in view.fingerprints:
        parts.append(Text(f"{e['scenario']}: baseline failure {e['summary']} {e['url']}".rstrip()))
    for n in view.notes:
        parts.append(Text(f"note: {n}", style="yellow"))
    verdict = Text("verdict: ")
    verdict.append(view.verdict, style=VERDICT_STYLE.get(view.verdict, ""))
    if view.simulated:
        verdict.append(" (simulated driver: not GPU evidence)", style="yellow")
    parts.append(verdict)
    console.print(Group(*parts))
