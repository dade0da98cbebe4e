"""The evidence as one self-contained HTML page (templates/show/evidence.html.j2): verdict table,
per-run strip (inline SVG, one mark per run), first errors, fingerprints, provenance and the
reproducer source — no script, no network, so a maintainer can open it straight from a PR."""

from __future__ import annotations

from pathlib import Path

from lucepatch import __version__
from lucepatch.errors import UsageError
from lucepatch.files import write_atomic
from lucepatch.render import render
from lucepatch.show.model import GLYPHS, VARIANTS, View

CELL = 12  # px per run mark
PER_LINE = 50  # marks per line of a strip: 50 x 12 px fits beside the labels at 1024 px


def html(view: View) -> str:
    seen = {m.outcome for per in view.strips.values() for s in per.values() for m in s.marks}
    legend = [g for o, g in GLYPHS.items() if o in seen] or [GLYPHS["pass"]]
    return render("show/evidence.html.j2", view=view, variants=VARIANTS, legend=legend, cell=CELL,
                  per_line=PER_LINE, version=__version__, schema_version=2)


def write_html(view: View, path: Path) -> Path:
    """Write atomically and world-readable (it goes into PRs)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"--html {path} is a directory; give a file name")
    page = html(view)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, page, mode=0o666)
    except OSError as exc:  # a folder no file can be made in (/proc, a read-only mount, a file as its parent)
        raise UsageError(f"cannot write the page to {path}: {exc.strerror or exc}; give a file in a folder you can write")
