"""One output rule for every verb (docs/design.md "Output and exit codes"): the result — table or
report — on stdout, progress and hints on stderr, and `--json` replaces the result on stdout with one
document (schema_version + verb) while nothing table-like reaches either stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import commit_all, git, write
from tables import read_tables

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "docs" / "evidence" / "async-sched.h200.json"
TABLE_CHARS = set("┃│┏┓└┘━─┡┩")


def _verbs(toy) -> dict[str, tuple[list, str]]:
    """verb -> (arguments, a string its human result must show)."""
    ws, up, base = toy["ws"], toy["upstream"], toy["base"]
    write(up, "src/c.c", "int c;\n")
    head = commit_all(up, "upstream moves on")
    w = ["--workspace", ws]
    return {
        "list": ([*w, "list"], "fix-a-return-ten.patch"),
        "status": ([*w, "status", "toy", "--source", up], "not-applied"),
        "check": ([*w, "check", "toy", "--source", up], "applied"),
        "lint": ([*w, "lint", "toy"], "lint"),
        "matrix": ([*w, "matrix", "toy", "--source", up, "--range", f"{base}..{head}"], head[:10]),
        "rebase": ([*w, "rebase", "toy", "--source", up, "--onto", head, "--dry-run"], "fix-b-return-twenty.patch"),
        "mark": ([*w, "mark", "toy", "fix-a-return-ten.patch", "--status", "Denied"], "Upstream-Status Pending -> Denied"),
        "apply": ([*w, "apply", "toy", "--source", up], "applied"),
        "show": (["show", EVIDENCE], "ctxless-async-alloc"),
        "doctor": (["doctor"], "git"),
    }


VERBS = ["list", "status", "check", "lint", "matrix", "rebase", "mark", "apply", "show", "doctor"]


@pytest.mark.parametrize("verb", VERBS)
def test_result_on_stdout_progress_on_stderr(cli, toy, verb, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    args, shows = _verbs(toy)[verb]
    r = cli(*args)
    assert r.code in (0, 1, 3), r.err  # doctor exits 3 when something is missing; the rule holds anyway
    assert shows in r.out, (verb, r.out, r.err)
    assert not TABLE_CHARS & set(r.err), f"{verb} printed a table on stderr:\n{r.err}"
    for line in r.err.splitlines():
        assert line.startswith("lucepatch:") or not line.strip(), f"{verb}: stray stderr line {line!r}"


@pytest.mark.parametrize("verb", VERBS)
def test_json_replaces_the_result(cli, toy, verb):
    args, shows = _verbs(toy)[verb]
    r = cli(*args, "--json")
    doc = json.loads(r.out)  # stdout is one document, nothing else
    assert doc["schema_version"] >= 1 and doc["verb"] == verb
    assert not TABLE_CHARS & set(r.out + r.err)
    assert shows not in r.err


def test_status_names_how_a_patch_would_apply(cli, toy):
    r = cli("--workspace", toy["ws"], "status", "toy", "--source", toy["upstream"])
    rows = [l for l in r.out.splitlines() if ".patch" in l]
    assert rows and all("not-applied" in l and "exactly" in l for l in rows)
    assert not any(l.count("applied") > 1 for l in rows)  # not "applied" beside "not-applied"
    assert git(toy["upstream"], "status", "--porcelain") == ""


def test_patch_names_wrap_at_80_columns_and_are_never_cut(capsys, monkeypatch):
    # a series' patch names share long prefixes ("fix-allocator-…"): cut with an ellipsis at 80
    # columns every row read alike (the rebase table); they wrap in their cell instead
    from lucepatch import report

    monkeypatch.setenv("COLUMNS", "80")
    names = ["fix-allocator-add-chunk-must-not-use-a-device-from-a-failed-cuctxgetdevice",
             "fix-allocator-charge-stream-ordered-allocations-to-the-streams-device"]
    report.table("rebase", ["#", "patch", "applies", "signal", "needed", "action", "detail"],
                 [[i, n, "conflict", "", "not-judged", "stopped", "resolve it in the work tree and continue"]
                  for i, n in enumerate(names, 1)])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines and all(len(line) <= 80 for line in lines)
    (t,) = read_tables(out)
    cells = {r["#"]: r["patch"] for r in t["rows"]}
    assert cells == {"1": names[0], "2": names[1]}
    assert "…" not in out
