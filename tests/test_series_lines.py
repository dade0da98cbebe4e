"""Several lines of one series (docs/series-engine.md "Lines"): `rebase --line` writes a new
target folder `patches/<family>-<line>` (the family's folder untouched), `--backport` carries
upstream commits first as `Upstream-Status: Backport [<commit>]`; list/status/lint show the lines,
verify --all --target <line> takes the family's reproducers, LUCEPATCH_SRC_<FAMILY> serves every
line; a line's `[not_applicable]` is reported by verify, never run, never a pass. On the carry
fixture (tests/fixtures/carry)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import git
from lucepatch.engine.transaction import snapshot
from test_rebase_session import SLUG, cf, rows, upstream  # noqa: F401 (fixture)

ME = {"GIT_COMMITTER_NAME": "Line Keeper", "GIT_COMMITTER_EMAIL": "keeper@example.invalid"}


@pytest.fixture
def line(upstream, tmp_path, cli, monkeypatch):
    """carry's line v0.9 built with a session: upstream's limit fix backported, add_chunk resolved
    by hand, the async patches skipped (no stream-ordered allocations in 0.9)."""
    for k, v in ME.items():
        monkeypatch.setenv(k, v)
    repo, c = upstream
    ws = cf.workspace(tmp_path, c["base"])
    main_before = snapshot(ws / "patches" / "carry")
    r = cli("--workspace", ws, "rebase", "carry", "--source", repo, "--onto", "v0.9", "--line", "v0.9",
            "--backport", c["u0"], "--json")
    assert r.code == 1, r.err
    assert r.json["target"] == "carry-v0.9" and r.json["session"]["current"] == cf.ADD_CHUNK
    wt = Path(r.json["session"]["worktree"])
    git(wt, "checkout", "HEAD", "--", "src/carry.c")  # v0.9 + the backport, then the fix ported by hand
    cf.port_add_chunk_to_v09(wt)
    rb = lambda *a: cli("--workspace", ws, "rebase", "carry-v0.9", *a)  # noqa: E731
    assert rb("--status").code == 0
    assert rb("--continue").code == 1
    assert rb("--skip", SLUG[cf.ASYNC]).code == 1
    r = rb("--skip", SLUG[cf.FREE], "--json")
    assert r.code == 0, r.err
    return {"ws": ws, "doc": r.json, "c": c, "up": repo, "cli": cli, "main_before": main_before,
            "tdir": ws / "patches" / "carry-v0.9"}


def test_rebase_line_writes_a_new_line_and_leaves_the_family_alone(line):
    ws, doc, c, tdir = line["ws"], line["doc"], line["c"], line["tdir"]
    assert snapshot(ws / "patches" / "carry") == line["main_before"]
    assert doc["bump"] == "new line" and doc["new_version"] == "1.0.0" and doc["direction"] == "back"
    bp = doc["patches"][0]
    assert bp["backport"] == c["u0"] and bp["applies"] == "exact" and bp["action"] == "carried"
    # the backport brings upstream's limit fix, so our own copy of it has nothing left to do
    lim = rows(doc)[cf.LIMIT]
    assert (lim["applies"], lim["action"], lim["signal"]) == ("already-upstream", "absorbed", "3-way")
    toml = (tdir / "target.toml").read_text()
    assert 'name = "carry-v0.9"\nline_of = "carry"\nline = "v0.9"\n' in toml
    assert f'base = "{c["c0"]}"' in toml and 'version = "1.0.0"' in toml
    series = (tdir / "series").read_text().split()
    assert series == ["backport-allocator-count-memory-in-use-against-the-limit.patch", cf.BUILD_PATCH, cf.ADD_CHUNK]
    text = (tdir / series[0]).read_text()
    assert f"Upstream-Status: Backport [{c['u0']}]" in text
    assert "Signed-off-by: Line Keeper <keeper@example.invalid>" in text and "From: Upstream Dev" in text
    # absorbed/: what upstream's code has (the 3-way no-op); dropped/: the person's skips (no code signal)
    assert sorted(p.name for p in (tdir / "absorbed").iterdir()) == [cf.LIMIT]
    assert sorted(p.name for p in (tdir / "dropped").iterdir()) == sorted([cf.ASYNC, cf.FREE])


def test_list_status_lint_and_verify_know_the_lines(line):
    ws, cli, up = line["ws"], line["cli"], line["up"]
    r = cli("--workspace", ws, "list", "--json")
    assert r.json["lines"] == {"carry": ["carry", "carry-v0.9"]}
    by = {t["name"]: t for t in r.json["targets"]}
    assert (by["carry-v0.9"]["family"], by["carry-v0.9"]["line"], by["carry-v0.9"]["line_of"]) == ("carry", "v0.9", "carry")
    assert by["carry"]["line"] == "main" and by["carry"]["line_of"] is None
    r = cli("--workspace", ws, "list")
    assert "line v0.9 of carry" in r.out and "lines" in r.out
    r = cli("--workspace", ws, "lint")
    assert r.code == 0, r.err
    mine = fresh = Path(str(ws) + "-co")
    git(ws.parent, "clone", "-q", "--no-local", str(up), str(fresh))
    git(mine, "checkout", "-q", "--detach", line["c"]["c0"])
    r = cli("--workspace", ws, "status", "carry-v0.9", "--source", mine, "--json")
    assert r.json["line"] == "v0.9" and r.json["line_of"] == "carry"
    r = cli("--workspace", ws, "status", "carry-v0.9", "--source", mine)  # the table is the result: stdout
    assert r.code == 0 and "line v0.9 of carry" in r.out, r.err
    assert cli("--workspace", ws, "check", "carry-v0.9", "--source", up).code == 0
    from lucepatch.verify.service import select
    from lucepatch.workspace import resolve_workspace

    t, repros = select(resolve_workspace(ws), target="carry-v0.9", reproducers=[], run_all=True)
    assert t.name == "carry-v0.9" and [r.name for r in repros] == ["carry"]
    # no --target: the family the reproducers are written for, not one of its lines
    t, repros = select(resolve_workspace(ws), target=None, reproducers=[], run_all=True)
    assert t.name == "carry" and [r.name for r in repros] == ["carry"]


def test_verify_all_without_target_takes_hami_core_and_says_so(cli, monkeypatch):
    """Regression: `verify --all` without --target exited 2 ("name a TARGET") once the workspace had
    more targets than hami-core; it takes the reproducers' target again and names it on stderr. No
    checkout here, so it stops at the source (exit 3) after choosing, before anything is built."""
    from conftest import REPO_ROOT

    for k in [k for k in os.environ if k.startswith("LUCEPATCH_SRC_")]:
        monkeypatch.delenv(k)
    r = cli("--workspace", REPO_ROOT, "verify", "--all")
    assert r.code == 3, r.err
    assert "verify --all: target hami-core (no --target" in r.err
    assert "--target NAME for a line: hami-core-v2.5, hami-core-v2.9" in r.err
    assert "no upstream checkout of hami-core" in r.err and "name a TARGET" not in r.err


def test_the_family_checkout_serves_every_line(line, monkeypatch):
    from lucepatch.workspace import resolve_source as require_source  # what `--source` and the variables resolve with

    monkeypatch.delenv("LUCEPATCH_SRC_CARRY_V0_9", raising=False)
    monkeypatch.setenv("LUCEPATCH_SRC_CARRY", str(line["up"]))
    assert require_source(None, "carry-v0.9", family="carry") == Path(line["up"])
    monkeypatch.delenv("LUCEPATCH_SRC_CARRY")
    with pytest.raises(Exception, match=r"set LUCEPATCH_SRC_CARRY \(it serves every line of carry; "
                                        r"LUCEPATCH_SRC_CARRY_V0_9 overrides it for carry-v0.9 alone\)"):
        require_source(None, "carry-v0.9", family="carry")
    # the line's own variable, when set, wins for that line: a checkout of another repository (a fork)
    other = Path(str(line["up"]) + "-fork")
    monkeypatch.setenv("LUCEPATCH_SRC_CARRY", str(line["up"]))
    monkeypatch.setenv("LUCEPATCH_SRC_CARRY_V0_9", str(other))
    assert require_source(None, "carry-v0.9", family="carry") == other
    assert require_source(None, "carry", family="carry") == Path(line["up"])
    # a leading ~ is expanded where the path enters (an env file's value, an API caller's string)
    monkeypatch.setenv("LUCEPATCH_SRC_CARRY_V0_9", "~/src/carry")
    assert require_source(None, "carry-v0.9", family="carry") == Path.home() / "src" / "carry"
    assert require_source("~/x", "carry") == Path.home() / "x"


def test_line_errors(line):
    ws, cli, tdir = line["ws"], line["cli"], line["tdir"]
    r = cli("--workspace", ws, "rebase", "carry", "--source", line["up"], "--onto", "v0.9", "--line", "v0.9")
    assert r.code == 2 and "exists already" in r.err
    r = cli("--workspace", ws, "rebase", "carry", "--continue", "--line", "x")
    # issue 35's one table of modes: the refusal names the option and the mode that uses it
    assert r.code == 2 and "does not use --line (used by rebase --onto)" in r.err, r.err
    r = cli("--workspace", ws, "rebase", "carry", "--source", line["up"], "--onto", "v0.9", "--line", "Bad Name")
    assert r.code == 2
    r = cli("--workspace", ws, "rebase", "carry", "--source", line["up"], "--onto", "v0.9", "--line", "v1",
            "--build-only", line["c"]["u1"])
    assert r.code == 2 and "not one of the --backport commits" in r.err
    toml = tdir / "target.toml"
    good = toml.read_text()
    toml.write_text(good.replace('line_of = "carry"', 'line_of = "nosuch"'))
    r = cli("--workspace", ws, "lint", "carry-v0.9", "--json")
    assert r.code == 1 and any("line_of 'nosuch'" in f["message"] for f in r.json["findings"])
    toml.write_text(good.replace('line = "v0.9"', 'line = "main"'))
    r = cli("--workspace", ws, "lint", "--json")
    assert r.code == 1 and any("is also line 'main' of carry" in f["message"] for f in r.json["findings"])
    toml.write_text(good)
    bp = tdir / (tdir / "series").read_text().split()[0]
    text = bp.read_text()
    bp.write_text(text.replace(f"Backport [{line['c']['u0']}]", "Backport [the limit fix]"))
    r = cli("--workspace", ws, "lint", "carry-v0.9", "--json")
    assert r.code == 1 and any("names the upstream commit" in f["message"] for f in r.json["findings"])
    # a fix upstream merged after the fetchable history ends is named by its pull request; an issue is not one
    bp.write_text(text.replace(f"Backport [{line['c']['u0']}]", "Backport [https://github.com/Project-HAMi/HAMi-core/pull/322]"))
    assert cli("--workspace", ws, "lint", "carry-v0.9").code == 0
    bp.write_text(text.replace(f"Backport [{line['c']['u0']}]", "Backport [https://github.com/Project-HAMi/HAMi-core/issues/321]"))
    r = cli("--workspace", ws, "lint", "carry-v0.9", "--json")
    assert r.code == 1 and any("the pull request it merged as" in f["message"] for f in r.json["findings"])
    bp.write_text(text)
    assert cli("--workspace", ws, "lint").code == 0


def test_a_line_takes_more_backports_later(line, tmp_path):
    """A session on an existing line (same base) adds a backport: the new file is written, the
    series gets it first, every other patch is carried exactly, version MINOR."""
    ws, cli, tdir = line["ws"], line["cli"], line["tdir"]
    clone = tmp_path / "up2"
    git(tmp_path, "clone", "-q", "--no-local", str(line["up"]), str(clone))
    git(clone, "checkout", "-q", "-b", "cmake-comment", line["c"]["u2"])
    (clone / "CMakeLists.txt").write_text((clone / "CMakeLists.txt").read_text() + "# end of the carry build\n")
    git(clone, "commit", "-q", "-a", "-m", "cmake: mark the end of the file")
    side = git(clone, "rev-parse", "HEAD").strip()
    before = (tdir / "series").read_text().split()
    r = cli("--workspace", ws, "rebase", "carry-v0.9", "--source", clone, "--onto", line["c"]["c0"],
            "--backport", side, "--json")
    assert r.code == 0, r.err
    assert r.json["direction"] == "none" and r.json["bump"] == "minor" and r.json["new_version"] == "1.1.0"
    assert {p["applies"] for p in r.json["patches"][1:] if p["action"] == "carried"} == {"exact"}
    series = (tdir / "series").read_text().split()
    assert series == ["backport-cmake-mark-the-end-of-the-file.patch", *before]
    assert f"Upstream-Status: Backport [{side}]" in (tdir / series[0]).read_text()
    assert cli("--workspace", ws, "lint", "carry-v0.9").code == 0


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("gcc") and os.path.isfile("/usr/local/cuda/include/cuda.h")),
                    reason="no-tool: needs gcc, cmake and /usr/local/cuda/include/cuda.h")
def test_not_applicable_is_reported_never_run_never_a_pass(upstream, tmp_path, cli):
    repo, c = upstream
    ws = cf.workspace(tmp_path, c["base"])
    toml = ws / "patches" / "carry" / "target.toml"
    toml.write_text(toml.read_text().replace("[build]", '[not_applicable]\n"carry:cumulative-limit" = '
                                             '"this base counts nothing against the limit"\n\n[build]', 1))
    assert cli("--workspace", ws, "lint", "carry").code == 0
    r = cli("--workspace", ws, "verify", "--all", "--target", "carry", "--source", repo, "--driver", "fake",
            "--fixed", "--runs", "2", "--json")
    ev = r.json["evidence"]
    sc = {s["scenario"]: s for s in ev["scenarios"]}
    na = sc["carry:cumulative-limit"]
    assert na["verdict"] == "not-applicable" and na["baseline"]["runs"] == na["patched"]["runs"] == 0
    assert "this base counts nothing" in na["reason"] and "[not_applicable]" in na["reason"]
    assert not [x for x in ev["runs"] if x["scenario"] == "carry:cumulative-limit"]
    assert {"scenario": "carry:cumulative-limit", "reason": na["reason"]} in ev["skipped"]
    assert sc["carry:ctxless-alloc"]["patched"]["runs"] == 2
    assert "not applicable at this base" in r.err
    # a control alone cannot be declared away, nor something that does not exist
    toml.write_text(toml.read_text().replace('"carry:cumulative-limit"', '"carry:control"'))
    r = cli("--workspace", ws, "lint", "carry", "--json")
    assert r.code == 1 and any("is a control" in f["message"] for f in r.json["findings"])
    toml.write_text(toml.read_text().replace('"carry:control"', '"nosuch"'))
    r = cli("--workspace", ws, "lint", "carry", "--json")
    assert r.code == 1 and any("no reproducer 'nosuch'" in f["message"] for f in r.json["findings"])
