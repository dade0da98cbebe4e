"""The evidence page in a real browser: Debian's headless chromium, network off (its own network
namespace as root, DevTools offline emulation on top), a 1024 px viewport.

Checked on the DOM and the layout, against the evidence file read independently of the renderer:
every scenario row and its verdict is visible (a non-zero box inside the viewport's width), nothing
overflows 1024 px, the per-run strip has exactly one mark per run and variant in launch order, and
the page makes no request but its own file. The full-page screenshot is kept (under $CI_LOG_DIR in
CI) and checked against the layout: the overall verdict badge's pixels carry its colour.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import browser
import needs

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = {
    # the real H200 run of every reproducer: pass, crash, fail and invalid runs, six reproducers
    "h200-all": REPO / "docs" / "evidence" / "hami-core-all.h200x2.json",
    # one reproducer: scenario names shown without the prefix
    "h200-async-sched": REPO / "docs" / "evidence" / "async-sched.h200.json",
    # what `pr` writes: three runs combined per reproducer, scrubbed
    "pr-example": REPO / "docs" / "examples" / "hami-core-pr" / "evidence.json",
}
VERDICT_RGB = {"invalid": (0xCF, 0x22, 0x2E), "proven": (0x1A, 0x7F, 0x37)}

CHECKS_JS = r"""
(() => {
  const vw = document.documentElement.clientWidth;  // the viewport less its scrollbar
  const box = e => { const r = e.getBoundingClientRect(); return {x: r.left, y: r.top + scrollY, w: r.width, h: r.height, right: r.right}; };
  const visible = e => { const s = getComputedStyle(e); return s.display !== 'none' && s.visibility !== 'hidden' && +s.opacity > 0; };
  const rows = [...document.querySelectorAll('#verdicts tr.scenario')].map(tr => ({
    scenario: tr.dataset.scenario, name: tr.querySelector('td.name').textContent.trim(),
    verdict: tr.querySelector('td.verdict').textContent.trim(), box: box(tr),
    verdictBox: box(tr.querySelector('td.verdict .badge')), visible: visible(tr) && visible(tr.querySelector('td.verdict .badge')),
  }));
  const strips = [...document.querySelectorAll('svg.strip')].map(s => ({
    scenario: s.dataset.scenario, variant: s.dataset.variant, ordered: s.dataset.ordered,
    outcomes: [...s.querySelectorAll('rect.run')].map(r => r.dataset.outcome), box: box(s),
  }));
  const overflow = [...document.querySelectorAll('body *')]
    .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.right > vw + 0.5; })
    .map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className.baseVal + e.className);
  return {vw, scrollWidth: document.documentElement.scrollWidth, rows, strips, overflow,
          runMarks: document.querySelectorAll('svg.strip rect.run').length,
          badge: box(document.getElementById('overall-verdict')),
          badgeText: document.getElementById('overall-verdict').textContent.trim(),
          scripts: document.scripts.length, sources: document.querySelectorAll('details.reproducer pre').length};
})()
"""


@pytest.fixture(scope="module")
def chromium():
    needs.require("chromium")
    with browser.Chromium() as b:
        yield b


def _artifact_dir(tmp_path: Path) -> Path:
    d = Path(os.environ["CI_LOG_DIR"]) if os.environ.get("CI_LOG_DIR") else tmp_path
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.mark.parametrize("name", sorted(EVIDENCE))
def test_evidence_page_in_a_headless_browser(chromium, cli, tmp_path, name):
    src = EVIDENCE[name]
    page_file = tmp_path / f"{name}.html"
    r = cli("--workspace", REPO, "show", src, "--html", page_file)
    assert r.code == 0, r.err
    doc = json.loads(src.read_text())

    page = chromium.open(page_file, width=1024)
    got = page.evaluate(CHECKS_JS)
    png = page.screenshot()
    shot = _artifact_dir(tmp_path) / f"evidence-page-{name}-1024.png"
    shot.write_bytes(png)

    # no request but the page itself, in a browser that had no network to begin with
    assert [q["request"]["url"] for q in page.requests] == [page_file.resolve().as_uri()]
    assert got["scripts"] == 0

    # every scenario row and verdict visible, in the evidence's order and words
    assert [row["scenario"] for row in got["rows"]] == [s["scenario"] for s in doc["scenarios"]]
    for row, s in zip(got["rows"], doc["scenarios"]):
        assert row["visible"], row
        assert row["verdict"] == s["verdict"], row
        assert row["box"]["w"] > 0 and row["box"]["h"] > 0 and row["box"]["right"] <= got["vw"], row
        assert row["verdictBox"]["w"] > 0 and row["verdictBox"]["h"] > 0 and row["verdictBox"]["right"] <= got["vw"], row
        assert s["scenario"].endswith(row["name"].replace(" (control)", ""))
    names = [row["name"] for row in got["rows"]]
    if len(doc["reproducers"]) == 1:
        assert not any(":" in n for n in names) and len(set(names)) == len(names)
    # nothing wider than the viewport
    assert got["scrollWidth"] <= got["vw"] <= 1024, got["overflow"]
    assert got["overflow"] == []

    # the strip: exactly one mark per run and variant, each in launch order with its outcome
    runs = {}
    for run in doc["runs"]:
        runs.setdefault((run["scenario"], run["variant"]), []).append(run)
    expected_total = sum(s[v]["runs"] for s in doc["scenarios"] for v in ("baseline", "patched"))
    assert got["runMarks"] == expected_total == len(doc["runs"])
    assert len(got["strips"]) == 2 * len(doc["scenarios"])
    for st in got["strips"]:
        want = [x["outcome"] for x in sorted(runs[(st["scenario"], st["variant"])], key=lambda x: x["index"])]
        assert st["outcomes"] == want and st["ordered"] == "yes", st["scenario"]
        assert 0 < st["box"]["w"] and st["box"]["x"] + st["box"]["w"] <= got["vw"]

    # the reproducer source is on the page
    assert got["sources"] >= 1

    # the screenshot shows the page the DOM describes: 1024 px wide, as tall as the layout, and the
    # overall verdict badge in its colour
    width, height, rows = browser.png_rgb(png, max_rows=int(got["badge"]["y"] + got["badge"]["h"]) + 2)
    assert got["vw"] <= width <= 1024 and height >= got["strips"][-1]["box"]["y"]
    assert got["badgeText"] == doc["verdict"]
    want_rgb = VERDICT_RGB[doc["verdict"]]
    b = got["badge"]
    pixels = [tuple(rows[y][3 * x:3 * x + 3]) for y in range(int(b["y"]), int(b["y"] + b["h"]))
              for x in range(int(b["x"]), int(b["x"] + b["w"]))]
    assert any(all(abs(p[i] - want_rgb[i]) <= 24 for i in range(3)) for p in pixels), \
        f"no {want_rgb} pixel in the verdict badge of {shot}"


def test_the_page_pr_wrote_for_the_hami_core_example(chromium):
    """docs/examples/hami-core-pr/evidence.html as `lucepatch pr` wrote it (scrubbed paths and all)."""
    example = REPO / "docs" / "examples" / "hami-core-pr"
    doc = json.loads((example / "evidence.json").read_text())
    got = chromium.open(example / "evidence.html", width=1024).evaluate(CHECKS_JS)
    assert got["overflow"] == [] and got["scrollWidth"] <= got["vw"]
    assert [r["verdict"] for r in got["rows"]] == [s["verdict"] for s in doc["scenarios"]]
    assert all(r["visible"] and r["box"]["w"] > 0 for r in got["rows"])
    assert got["runMarks"] == len(doc["runs"]) == sum(s[v]["runs"] for s in doc["scenarios"] for v in ("baseline", "patched"))


def test_combined_pr_evidence_page_marks_unordered_strips(chromium, cli, tmp_path):
    """Old combined evidence kept only tallies: the page still shows one mark per run and says the
    order is not recorded."""
    from test_show import old_combined
    src = old_combined(tmp_path)
    page_file = tmp_path / "pr-example.html"
    assert cli("--workspace", REPO, "show", src, "--html", page_file).code == 0
    doc = json.loads(src.read_text())
    got = chromium.open(page_file, width=1024).evaluate(CHECKS_JS)
    assert got["runMarks"] == sum(s[v]["runs"] for s in doc["scenarios"] for v in ("baseline", "patched"))
    assert {st["ordered"] for st in got["strips"]} == {"no"}
    assert got["overflow"] == [] and all(row["visible"] for row in got["rows"])


def test_browser_helper_counts_subresource_requests(chromium, tmp_path):
    """The request counter is not blind: a page that loads a second (local) file shows that request."""
    (tmp_path / "pixel.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>')
    page_file = tmp_path / "loads.html"
    page_file.write_text('<!DOCTYPE html><html><body><img src="pixel.svg"><p>hi</p></body></html>')
    urls = [q["request"]["url"] for q in chromium.open(page_file).requests]
    assert urls == [page_file.resolve().as_uri(), (tmp_path / "pixel.svg").resolve().as_uri()]
