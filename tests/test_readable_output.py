"""Output a person can read (docs/design.md "Output and exit codes"), verb by verb, at 60, 80 and
200 columns ($COLUMNS, and piped without it: 200): no line wider than the console but a whole value
printed under a table, and every value the next step needs — a full sha256, a full path, a patch
name, a fix, a reason — found unbroken when the table is read back as a person reads it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import commit_all, git, write
from tables import read_tables, rows_of, table_lines
from test_json_schemas import check

REPO = Path(__file__).resolve().parent.parent
WIDTHS = [60, 80, None]  # None: piped, no $COLUMNS (200)
BUILD = ('[build]\nsystem = "cmake"\nconfigure_args = []\ntargets = ["lib"]\n\n'
         '[build.artifacts]\n"libtoy.so" = "libtoy.so"\n')
CMAKE = ('cmake_minimum_required(VERSION 3.10)\nproject(toy C)\n'
         'add_library(lib SHARED src/a.c src/b.c)\nset_target_properties(lib PROPERTIES OUTPUT_NAME toy)\n')
LONG = "fix-allocator-charge-stream-ordered-allocations-to-the-streams-device-not-the-current-one"


def at(monkeypatch, width):
    if width is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(width))
    return width or 200


def fits(out: str, width: int) -> None:
    wide = [l for l in table_lines(out) if len(l.rstrip()) > width]
    assert not wide, "\n".join(wide)
    assert "…" not in out, out


def cells(out: str, column: str) -> list[str]:
    return [r[column] for t in read_tables(out) if column in t["columns"] for r in t["rows"]]


@pytest.fixture
def long_toy(toy):
    """The toy target with a patch name as long as HAMi-core's, and a cmake build."""
    tdir = toy["ws"] / "patches" / "toy"
    first = (tdir / "series").read_text().splitlines()[0]
    (tdir / first).rename(tdir / f"{LONG}.patch")
    (tdir / "series").write_text((tdir / "series").read_text().replace(first, f"{LONG}.patch"))
    return toy


@pytest.mark.parametrize("width", WIDTHS)
def test_list_status_check_keep_every_patch_name_whole(cli, long_toy, monkeypatch, width):
    w = at(monkeypatch, width)
    ws, up = long_toy["ws"], long_toy["upstream"]
    for args in (["list"], ["status", "toy", "--source", up], ["check", "toy", "--source", up]):
        r = cli("--workspace", ws, *args)
        assert r.code == 0, r.err
        fits(r.out, w)
        names = cells(r.out, "patch")
        assert f"{LONG}.patch" in names and "fix-b-return-twenty.patch" in names, (args, r.out)


@pytest.mark.needs("cmake", "gcc")
@pytest.mark.parametrize("width", WIDTHS)
def test_build_prints_the_full_sha256_and_path_deploy_needs(cli, toy, monkeypatch, width):
    up = toy["upstream"]
    write(up, "CMakeLists.txt", CMAKE)
    base = commit_all(up, "a library")
    t = toy["ws"] / "patches" / "toy" / "target.toml"
    t.write_text(t.read_text().replace(toy["base"], base) + "\n" + BUILD)
    w = at(monkeypatch, width)
    r = cli("--workspace", toy["ws"], "build", "toy", "--source", up, "--both")
    assert r.code == 0, r.err
    fits(r.out, w)
    doc = cli("--workspace", toy["ws"], "build", "toy", "--source", up, "--both", "--json").json
    check("build", doc)
    (table,) = read_tables(r.out)
    for b in doc["builds"]:
        a = b["artifacts"]["libtoy.so"]
        row = next(x for x in table["rows"] if x["variant"] == b["variant"])
        assert row["sha256"] == a["sha256"] and row["path"] == a["path"]  # whole, in the cell or under it
        assert any(a["path"] in l for l in r.out.splitlines())  # on one line: copied as printed
        assert any(a["sha256"] in l for l in r.out.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_fix_text_is_whole(cli, monkeypatch, tmp_path, width):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # docker is missing: it has a fix
    w = at(monkeypatch, width)
    r = cli("doctor")
    fits(r.out, w)
    items = cli("doctor", "--json").json["items"]
    flat = " ".join(r.out.split())
    for i in items:
        if i["status"] == "missing":
            assert f"fix {i['name']}: {' '.join(i['remedy'].split())}" in flat, (i, r.out)
    rows = {x["tool"]: x for x in read_tables(r.out)[0]["rows"]}
    assert set(rows) == {i["name"] for i in items}
    # prose: every character, in order (a line break is where a space was, or inside a long word)
    assert all("".join(rows[i["name"]]["detail"].split()) == "".join(i["detail"].split()) for i in items)


@pytest.mark.parametrize("width", WIDTHS)
def test_rebase_dry_run_names_the_conflicting_file(cli, toy, monkeypatch, width):
    up = toy["upstream"]
    write(up, "src/b.c", "int b(void) {\n    return 2 + 0;\n}\n")  # fix-b's context is gone
    head = commit_all(up, "upstream rewrites b")
    w = at(monkeypatch, width)
    r = cli("--workspace", toy["ws"], "rebase", "toy", "--source", up, "--onto", head, "--dry-run")
    assert r.code == 1, r.err
    fits(r.out, w)
    rows = {x["patch"]: x for x in rows_of(r.out, "#")}
    assert rows["fix-b-return-twenty.patch"]["conflicts"] == "src/b.c", r.out
    assert "fix-b-return-twenty.patch" in r.err or "conflict" in r.err


@pytest.mark.parametrize("width", WIDTHS)
def test_matrix_and_lint_fit(cli, toy, monkeypatch, width):
    up, base = toy["upstream"], toy["base"]
    write(up, "src/c.c", "int c;\n")
    head = commit_all(up, "upstream moves on, with a subject long enough to need its column wrapped at 60")
    w = at(monkeypatch, width)
    r = cli("--workspace", toy["ws"], "matrix", "toy", "--source", up, "--range", f"{base}..{head}")
    assert r.code == 0, r.err
    fits(r.out, w)
    assert head[:10] in " ".join(cells(r.out, "commits"))
    r = cli("--workspace", toy["ws"], "lint", "toy")
    fits(r.out, w)


# ---- verify and show: the verdict table -----------------------------------------------------------

@pytest.fixture(scope="module")
def verified(tmp_path_factory, fh):
    """One verify run on the simulated driver with a skipped reproducer, its evidence kept."""
    from test_verify_verdicts import _series, make_ws

    def one_device(_r, text):
        return text.replace('LUCEPATCH_FAKECUDA_DEVICES = "2"', 'LUCEPATCH_FAKECUDA_DEVICES = "1"')

    ws = make_ws(fh, "ws-readable", _series(""), ["async-sched", "multi-device"], toml_edit=one_device)
    ev = tmp_path_factory.mktemp("readable") / "ev.json"
    from lucepatch.main import main

    assert main(["--workspace", str(ws), "--cache-dir", str(fh["cache"]), "verify", "--all", "--source",
                 str(fh["upstream"]), "--driver", "fake", "--fixed", "--runs", "3", "--evidence", str(ev),
                 "--quiet"]) in (0, 1)
    return {"ws": ws, "ev": ev, "doc": json.loads(ev.read_text()), "fh": fh}


from test_verify_verdicts import fh  # noqa: E402,F401  (the module's fakehami upstream, built once)


@pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")
@pytest.mark.parametrize("width", WIDTHS)
def test_verdict_table_skipped_rows_show_the_reason_not_counts(cli, verified, monkeypatch, width):
    w = at(monkeypatch, width)
    r = cli("--workspace", verified["ws"], "show", verified["ev"])
    assert r.code == 0, r.err
    fits(r.out, w)
    doc = verified["doc"]
    skipped = [s for s in doc["scenarios"] if s["verdict"] == "skipped"]
    assert skipped
    lines = r.out.splitlines()
    reps = {s["scenario"].split(":", 1)[0] for s in doc["scenarios"]}
    for rep in {s["scenario"].split(":", 1)[0] for s in skipped}:  # every scenario of multi-device is skipped
        start = next(i for i, l in enumerate(lines) if l.strip() == rep)  # its heading in the verdict table
        block = []
        for l in lines[start + 1:]:
            if l.strip() in reps or not l.startswith("  "):
                break
            block.append(l)
        assert sum("skipped" in l for l in block) == sum(s["scenario"].startswith(rep + ":") for s in skipped)
        assert not any(re.search(r"\d+/\d+", l) for l in block), block  # no "0/1": no run happened
    flat = " ".join(r.out.split())
    for reason in {s["reason"] for s in skipped}:  # the whole reason, under the table
        assert " ".join(reason.split()) in flat


@pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")
@pytest.mark.parametrize("width", [60, 80])
def test_show_wide_puts_full_reasons_under_the_table(cli, monkeypatch, width):
    at(monkeypatch, width)
    ev = REPO / "docs" / "evidence" / "hami-core-all.h200x2.json"
    r = cli("--workspace", REPO, "show", ev, "--wide")
    assert r.code == 0, r.err
    fits(r.out, width)
    doc = json.loads(ev.read_text())
    flat = " ".join(r.out.split())
    assert all(" ".join(f"{s['scenario']}: {s['reason']}".split()) in flat for s in doc["scenarios"] if s["reason"])
    # 28 scenarios: a page, not a column of single words (1836 lines at 80 before)
    assert len(r.out.splitlines()) < 220


def test_show_provenance_keeps_sha256_and_paths_whole(cli, monkeypatch):
    at(monkeypatch, 60)
    ev = REPO / "docs" / "evidence" / "async-sched.h200.json"
    doc = json.loads(ev.read_text())
    r = cli("--workspace", REPO, "show", ev)
    lines = [l.strip() for l in r.out.splitlines()]
    for v in ("baseline", "patched"):
        a = doc["variants"][v]["artifact"]
        assert a["sha256"] in lines and a["path"] in lines  # each alone on its line, unbroken


# ---- progress -------------------------------------------------------------------------------------

def test_progress_line_fits_80_columns_for_any_count():
    from lucepatch.verify.progress import final_line, line

    for done, bound, open_, n, s in [(0, 40, 4, 4, 0.1), (95, 1376, 34, 50, 5), (999_998, 999_999, 999, 999, 359_999)]:
        text = "lucepatch: " + line(done, bound, open_, n, s)
        assert len(text) <= 80, text
        assert len("lucepatch: " + final_line(done, n, s, processes=done - 1)) <= 80
    assert line(120, 220, 12, 50, 42) == "runs 120/≤220, 12/50 scenarios open, 0:42, ETA ≤0:35"


def test_progress_is_one_short_line_per_interval_and_a_bar_on_a_terminal(monkeypatch, capsys):
    import io

    from rich.console import Console

    from lucepatch import report
    from lucepatch.verify import progress

    p = progress.RunProgress(3, 12, interval=0)
    for i in range(1, 7):
        p.update(i, 12, 3)
    p.close()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 7 and all(len(l) <= 80 for l in err)
    assert err[0].startswith("lucepatch: runs 1/≤12, 3/3 scenarios open") and "runs 6 done" in err[-1]

    buf = io.StringIO()
    monkeypatch.setattr(report, "rich_progress_wanted", lambda: True)
    monkeypatch.setattr(report, "err_console", lambda: Console(file=buf, force_terminal=True, width=80))
    with progress.RunProgress(3, 12) as bar:
        bar.update(6, 12, 2)
        bar._bar.refresh()
    assert "━" in buf.getvalue() and "6/12" in buf.getvalue()  # a bar, drawn on the terminal


@pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")
def test_verify_progress_names_no_reproducer_and_quiet_leaves_the_verdict_line(cli, verified, monkeypatch):
    fh = verified["fh"]
    args = ["--workspace", verified["ws"], "--cache-dir", fh["cache"], "verify", "--all", "--source", fh["upstream"],
            "--driver", "fake", "--fixed", "--runs", "3"]
    for width in (60, 80):  # verify prints the same table show does, at the console's width
        at(monkeypatch, width)
        fits(cli(*args, "--quiet").out, width)
    at(monkeypatch, None)
    r = cli(*args)
    assert all(len(l) <= 80 for l in r.err.splitlines() if l.startswith("lucepatch: runs")), r.err
    assert not [l for l in r.err.splitlines() if "async-sched, multi-device" in l], r.err
    check("verify", cli(*args, "--json").json)
    q = cli(*args, "--quiet")
    assert q.out == r.out  # the result is the same
    assert len(q.err.splitlines()) == 1 and q.err.startswith("lucepatch: verdict:"), q.err
    assert cli("--quiet", *args).err.startswith("lucepatch: verdict:")


# ---- issue 30 audit: what was still cut, padded or squeezed ---------------------------------------

V25 = REPO / "docs" / "evidence" / "hami-core-v2.5-all.h200.json"  # proven, guarded, skipped, not-applicable rows


def test_a_reason_under_the_table_wraps_at_spaces_and_keeps_its_path_whole(capsys, monkeypatch):
    """rebase --dry-run, show of a coverage map: prose with a path goes under the table; it wraps at
    spaces to the console (it was one line of 100-240 characters), and the path is never broken."""
    from lucepatch import report

    at(monkeypatch, 60)
    path = "/srv/upstream/hami-core/src/multiprocess/multiprocess_memory_limit.c"
    detail = (f"Applied patch to {path} with conflicts; the hunk at line 281 no longer matches the new "
              "accounting code, rebase it by hand")
    report.table("rebase", ["patch", "detail"], [["fix-a.patch", detail], ["fix-b.patch", "applies"]])
    out = capsys.readouterr().out
    assert [l for l in out.splitlines() if len(l) > 60] == [f"   {path}"]  # only the path, alone, whole
    fits(out, 60)
    (t,) = read_tables(out)
    assert t["rows"][0]["detail"] == detail


def test_a_record_continues_its_value_at_the_full_width(capsys, monkeypatch):
    """Too many columns for 60: one record per row; a value continued under itself used the width
    less its key twice (lines of ~25 characters in 60)."""
    from lucepatch import report

    at(monkeypatch, 60)
    words = " ".join(f"word{i}" for i in range(60))
    cols = ["patch", "status", "decided by", "why", "upstream", "reproducer", "more", "again"]
    report.table("t", cols, [["fix-a.patch", "still-needed", "r:s", words, "x" * 30, "y" * 30, "z" * 30, "w" * 30]])
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("  why"))
    block = [lines[start]]
    for l in lines[start + 1:]:
        if not l.startswith("    "):
            break
        block.append(l)
    assert all(len(l) <= 60 for l in block)
    for a, b in zip(block, block[1:]):  # no line ends where the next word would still have fit
        assert len(a) + 1 + len(b.split()[0]) > 60, (a, b)
    assert " ".join(" ".join(block).split()[1:]) == words


@pytest.mark.parametrize("args", [["list"], ["show", str(V25)], ["lint"]], ids=["list", "show", "lint"])
def test_piped_output_has_no_trailing_spaces(cli, monkeypatch, args):
    """rich pads every cell and title to its width: piped, each table row ended in spaces (grep,
    diff and a log reader see them)."""
    for width in (80, None):
        at(monkeypatch, width)
        r = cli("--workspace", REPO, *args)
        assert r.code == 0, r.err
        padded = [l for l in r.out.splitlines() if l != l.rstrip()]
        assert not padded, padded[:5]


def test_verdict_table_title_wraps_at_the_console_not_the_table(cli, monkeypatch):
    at(monkeypatch, None)
    r = cli("--workspace", REPO, "show", str(V25))
    doc = json.loads(V25.read_text())
    first = r.out.splitlines()[0]
    assert first.startswith("verify ") and doc["driver"]["gpu"] in first and first.endswith(")"), first


@pytest.mark.parametrize("width", [60, 80, None])
def test_verdict_table_names_and_reasons_share_the_room(cli, monkeypatch, width):
    """At 80 the reason took its longest text's width first and names broke into 6-letter pieces
    ("async-" / "accounting" as a heading); now names keep their width up to what the reason needs
    at least, and below that the p column makes room (p is then said in the reason)."""
    w = at(monkeypatch, width)
    doc = json.loads(V25.read_text())
    r = cli("--workspace", REPO, "show", str(V25))
    lines = r.out.splitlines()
    assert all(len(l) <= w for l in lines if len(l.split()) > 1), [l for l in lines if len(l) > w]
    table = lines[:next(i for i, l in enumerate(lines) if l.startswith("provenance"))]
    reps = {s["scenario"].split(":")[0] for s in doc["scenarios"]}
    if w >= 80:  # every heading on one line
        assert all(any(l.strip() == rep for l in table) for rep in reps)
    for s in doc["scenarios"]:
        name = s["scenario"].split(":", 1)[1]
        if len(name) <= (11 if w < 80 else 22):  # a name that short is never wrapped
            assert any(re.match(rf"^  {re.escape(name)}\s", l) for l in table), name
    proven = [s for s in doc["scenarios"] if s["verdict"] == "proven"]
    assert "0.00033" in "\n".join(table) and proven
    if w < 80:
        assert "p=0.00033" in "\n".join(table)


@pytest.mark.parametrize("width", [60, 80, None])
def test_not_applicable_and_skipped_rows_show_no_counts(cli, monkeypatch, width):
    at(monkeypatch, width)
    doc = json.loads(V25.read_text())
    r = cli("--workspace", REPO, "show", str(V25))
    lines = r.out.splitlines()
    quiet = [s for s in doc["scenarios"] if s["verdict"] in ("skipped", "not-applicable")]
    assert {s["verdict"] for s in quiet} == {"skipped", "not-applicable"}
    for s in quiet:
        rep, name = s["scenario"].split(":", 1)
        start = next(i for i, l in enumerate(lines) if l.strip() == rep)
        row = next(l for l in lines[start:] if re.match(rf"^  {re.escape(name[:12])}", l))
        assert not re.search(r"\d+/\d+", row), row
    # each reason once, whole, under the table
    flat = " ".join(r.out.split())
    for s in quiet:
        assert " ".join(s["reason"].split()) in flat


def test_pr_table_and_html_page_give_a_skipped_row_its_reason_not_counts(tmp_path):
    """The PR body's before/after table printed "1 0 0.00" for a scenario that never ran (and a
    skipped scenario with no patched run, as the sequential rule leaves it, crashed `pr`)."""
    from lucepatch.show.model import build_view
    from lucepatch.show.page import html
    from lucepatch.upstream.pr import verdict_rows
    from lucepatch.verify.evidence import Evidence

    doc = json.loads(V25.read_text())
    sk = next(s for s in doc["scenarios"] if s["verdict"] == "skipped")
    sk["patched"] = {**sk["patched"], "runs": 0, "passed": 0, "skipped": 0, "failure_rate": None, "outcomes": {}}
    ev = Evidence.from_json(doc)
    rows = [r for r in verdict_rows(ev) if r["scenario"] == sk["scenario"]]
    assert len(rows) == 1 and rows[0]["runs"] == rows[0]["failures"] == rows[0]["failure rate"] == ""
    assert rows[0]["verdict"].startswith("skipped (needs 2")
    na = [r for r in verdict_rows(ev) if r["verdict"].startswith("not-applicable")]
    assert na and all(r["runs"] == "" for r in na)
    page = html(build_view(ev))
    row = re.search(rf'<tr class="scenario" data-scenario="{re.escape(sk["scenario"])}".*?</tr>', page, re.S).group(0)
    assert not re.search(r">\d+/\d+<", row), row
