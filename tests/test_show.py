"""`lucepatch show` and the verdict table `verify` prints: readable at 80, 100 and 160 columns
(rich Console(width=...)), the per-run strip one glyph per run, the provenance, the HTML page's
self-containment and escaping, and bad input. Evidence: the committed H200 files (real runs with
pass, crash, fail and invalid outcomes), read independently of the renderer for the expectations."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from lucepatch.show import terminal
from lucepatch.show.model import GLYPHS, build_view, short_reason
from lucepatch.verify.evidence import Evidence, ScenarioResult, Tally, load_evidence

REPO = Path(__file__).resolve().parent.parent
ALL = REPO / "docs" / "evidence" / "hami-core-all.h200x2.json"
ONE = REPO / "docs" / "evidence" / "async-sched.h200.json"


def render(renderable, width: int) -> list[str]:
    c = Console(width=width, record=True, color_system=None, force_terminal=False)
    c.print(renderable)
    return [line.rstrip() for line in c.export_text().splitlines()]


def _row_line(lines: list[str], name: str) -> str:
    hits = [l for l in lines if re.match(rf"^\s*{re.escape(name)}\s", l)]
    assert len(hits) == 1, (name, hits)
    return hits[0]


def _block(lines: list[str], rep: str, reps: set[str]) -> list[str]:
    """The rows under reproducer heading `rep`, up to the next heading."""
    start = next(i for i, l in enumerate(lines) if l.strip() == rep)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() in reps), len(lines))
    return lines[start + 1:end]


@pytest.mark.parametrize("width", [80, 100, 160])
@pytest.mark.parametrize("path", [ONE, ALL], ids=["one-reproducer", "six-reproducers"])
def test_verdict_table_fits_and_names_every_scenario(path, width):
    doc = json.loads(path.read_text())
    lines = render(terminal.verdict_table(build_view(load_evidence(path))), width)
    assert all(len(l) <= width for l in lines), [l for l in lines if len(l) > width]
    assert not any("…" in l for l in lines if not l.startswith("verify")), "a cell was truncated"
    reps = {s["scenario"].split(":", 1)[0] for s in doc["scenarios"]}
    for s in doc["scenarios"]:
        rep, name = s["scenario"].split(":", 1)
        # the prefix is never repeated on the rows: dropped for one reproducer, a heading row for several
        assert not any(l.strip().startswith(s["scenario"]) for l in lines)
        line = _row_line(_block(lines, rep, reps) if len(reps) > 1 else lines, name)
        # one line per row, with the tallies and the verdict on it
        assert f"{s['baseline']['failures']}/{s['baseline']['runs']}" in line
        assert f"{s['patched']['failures']}/{s['patched']['runs']}" in line
        assert s["verdict"] in line
    if len(reps) == 1:
        names = [s["scenario"].split(":", 1)[1] for s in doc["scenarios"]]
        assert len(set(names)) == len(names)
        assert all(any(re.match(rf"^{re.escape(n)}\s", l) for l in lines) for n in names)
    else:
        assert all(any(l.strip() == r for l in lines) for r in reps)


def test_short_reason_by_default_full_text_with_wide():
    view = build_view(load_evidence(ALL))
    narrow = "\n".join(render(terminal.verdict_table(view), 80))
    wide = "\n".join(render(terminal.verdict_table(view, wide=True), 200))
    guard_reason = next(s for s in json.loads(ALL.read_text())["scenarios"] if s["verdict"] == "guarded")["reason"]
    assert "passes on both" in narrow and "proves no fix" not in narrow
    assert "control failed" in narrow and "run(s) invalid" in narrow
    assert " ".join(guard_reason.split()[:6]) in " ".join(wide.split())
    assert "some runs could not prove what they loaded" in wide


def _scenario(verdict, b, p, *, control=False, reason="long reason text that only --wide shows"):
    def t(fail, runs, invalid=0, skipped=0):
        return Tally(runs=runs, passed=runs - fail - invalid - skipped, failures=fail, invalid=invalid, skipped=skipped)
    return ScenarioResult(scenario="r:s", control=control, verdict=verdict, baseline=t(*b), patched=t(*p), reason=reason)


@pytest.mark.parametrize("verdict,b,p,control,want", [
    ("proven", (20, 20), (0, 20), False, ""),
    ("pass", (0, 20), (0, 20), True, ""),
    ("guarded", (0, 20), (0, 20), False, "passes on both"),
    ("not-proven", (20, 20), (3, 20), False, "patched still fails 3/20"),
    ("not-proven", (0, 20), (0, 20), False, "baseline never failed"),
    ("not-proven", (2, 3), (0, 3), False, "too few baseline failures"),
    ("regression", (0, 20), (5, 20), False, "patched fails, baseline passes"),
    ("invalid", (1, 20), (0, 20), True, "control failed"),
    ("invalid", (18, 20, 2), (0, 20, 1), False, "3 run(s) invalid"),
])
def test_short_reasons_say_why_in_a_few_words(verdict, b, p, control, want):
    s = _scenario(verdict, b, p, control=control)
    assert short_reason(s) == want
    assert len(short_reason(s)) <= 30


def test_short_reason_keeps_the_runs_hint():
    s = _scenario("not-proven", (3, 3), (0, 3), reason="baseline failures not significant (p=0.05 >= 0.01); with "
                  "--runs 3 the smallest possible p is 0.05 (>= 0.01): proven needs --runs 5 or more, and --runs 10 "
                  "for a patched failure rate below 0.37 at 99 %")
    assert short_reason(s) == "needs --runs 5 or more"


def test_skipped_reason_is_the_machine_reason_clipped():
    s = _scenario("skipped", (0, 0, 0, 20), (0, 0, 0, 20),
                  reason="not run on this machine: needs 2 devices, the machine has 1 (multi-device scenarios)")
    assert short_reason(s).startswith("needs 2 devices") and len(short_reason(s)) <= 28


def test_show_prints_table_provenance_and_one_glyph_per_run(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    doc = json.loads(ALL.read_text())
    r = cli("--workspace", REPO, "show", ALL)
    assert r.code == 0, r.err
    out = r.out.splitlines()
    assert all(len(l.rstrip()) <= 100 for l in out)
    text = r.out
    # provenance: what was built from which commit, the driver, the GPU
    assert doc["variants"]["baseline"]["commit"][:12] in text and doc["variants"]["patched"]["commit"][:12] in text
    assert "NVIDIA H200" in text and "580.159.04" in text and doc["upstream"]["base"][:12] in text
    assert doc["variants"]["patched"]["artifact"]["sha256"][:16] in text
    # the strip: for every scenario, the baseline line then the patched line, one glyph per run in launch order
    runs = {}
    for run in doc["runs"]:
        runs.setdefault((run["scenario"], run["variant"]), []).append(run)
    strip_lines = [l for l in out if re.search(r"\s(baseline|patched)\s+[+Xx!T?\-*]+$", l)]
    assert len(strip_lines) == 2 * len(doc["scenarios"])
    for (s, v), line in zip([(s["scenario"], v) for s in doc["scenarios"] for v in ("baseline", "patched")], strip_lines):
        want = "".join(GLYPHS[x["outcome"]].char for x in sorted(runs[(s, v)], key=lambda x: x["index"]))
        assert line.split()[-1] == want and f" {v} " in line
    assert f"verdict: {doc['verdict']}" in text
    assert r.err == ""  # results only on stdout


def test_show_json_and_html(cli, tmp_path):
    page = tmp_path / "out" / "page.html"
    r = cli("--workspace", REPO, "show", ONE, "--html", page, "--json")
    assert r.code == 0, r.err
    v = r.json["view"]
    assert r.json["verb"] == "show" and v["verdict"] == "proven" and v["driver"]["gpu"] == "NVIDIA H200"
    doc = json.loads(ONE.read_text())
    assert sum(s["runs"] for per in v["strips"].values() for s in per.values()) == len(doc["runs"])
    html = page.read_text()
    assert page.stat().st_mode & 0o044 == 0o044  # world-readable: it goes into PRs
    # self-contained: nothing that a browser would fetch, no script
    for needle in ("<script", "<link", "<img", "@import", "url(", "<iframe", " src="):
        assert needle not in html, needle
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert html.count('class="run ') == len(doc["runs"])
    assert "cuMemAllocAsync" in html  # the reproducer source is on the page
    assert "written to" in r.err and str(page) in r.err


def test_html_escapes_what_the_evidence_says(tmp_path):
    ev = load_evidence(ONE)
    doc = copy.deepcopy(ev.to_json())
    doc["scenarios"][1]["reason"] = "<script>alert(1)</script>"
    doc["scenarios"][1]["baseline"]["first_error"] = "<img src=x onerror=alert(1)>"
    from lucepatch.show.page import html
    page = html(build_view(Evidence.from_json(doc)))
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page


def old_combined(tmp_path: Path) -> Path:
    """Combined evidence as `pr` wrote it before it kept the runs: schema 1, tallies only."""
    doc = json.loads((REPO / "docs" / "examples" / "hami-core-pr" / "evidence.json").read_text())
    doc.pop("runs"), doc.pop("skipped"), doc.pop("run_policy")
    doc["schema_version"] = 1
    path = tmp_path / "old-combined.json"
    path.write_text(json.dumps(doc))
    return path


def test_combined_evidence_keeps_every_run():
    doc = json.loads((REPO / "docs" / "examples" / "hami-core-pr" / "evidence.json").read_text())
    view = build_view(load_evidence(REPO / "docs" / "examples" / "hami-core-pr" / "evidence.json"))
    assert view.glyph_count == len(doc["runs"]) == sum(s[v]["runs"] for s in doc["scenarios"] for v in ("baseline", "patched"))
    assert all(st.ordered for per in view.strips.values() for st in per.values()) and not view.notes


def test_combined_evidence_without_runs_shows_tallies_grouped(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "120")
    src = old_combined(tmp_path)
    r = cli("--workspace", REPO, "show", src)
    assert r.code == 0, r.err
    flat = " ".join(r.out.split())
    assert "grouped by outcome, not in launch order" in flat
    assert "combined 3 verify runs" in flat


@pytest.mark.parametrize("make,code,needle", [
    (lambda d: d / "missing.json", 2, "does not exist"),
    (lambda d: d, 2, "directory"),
    (lambda d: (d / "x.json").write_text("{not json") and d / "x.json", 2, "not JSON"),
    (lambda d: (d / "y.json").write_text('{"kind": "other"}') and d / "y.json", 2, "not lucepatch evidence"),
])
def test_bad_evidence_is_one_line_exit_2(cli, tmp_path, make, code, needle):
    r = cli("show", make(tmp_path))
    assert r.code == code, r.err
    assert len(r.err.strip().splitlines()) == 1 and needle in r.err and "Traceback" not in r.err


def test_html_into_a_directory_is_refused(cli, tmp_path):
    r = cli("--workspace", REPO, "show", ONE, "--html", tmp_path)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())
