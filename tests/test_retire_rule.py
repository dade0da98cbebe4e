"""Retirement by behaviour (issue 11) on the minihami fixture, simulated driver: the verdict of every
patch at the pin, at an upstream that fixed one behaviour as a patch does (behaviour alone: a
retire-candidate, issue 26), and at an
upstream with a PR #188-style "fix" (success without doing the work); the coverage map; the wiring
(verify --retire, --coverage-map, status --behaviour, a rebase session's judge).

The series (tests/fixtures/minihami/fixture.py): B Build-Only; R the cuMemAlloc root fix; D the
defence-in-depth accessor bounds check; P1/P2 two independent fixes of the same cuStreamSynchronize
crash; U the unlimited-total fix. cuMemGetInfo_v2 has the same bug and no patch covers it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES
from lucepatch.engine import retirement
from lucepatch.target import load_target
from lucepatch.upstream import retire as rt
from lucepatch.upstream.behaviour import DIFFERENT, IDENTICAL, INCONCLUSIVE, Lab, OnBuild
from lucepatch.upstream.coverage import CoverageMap, format_coverage_map
from lucepatch.workspace import resolve_workspace

_spec = importlib.util.spec_from_file_location("minihami_fixture", FIXTURES / "minihami" / "fixture.py")
mh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mh)
B, R, D, P1, P2, U = mh.SERIES


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("minihami-retire")
    repo, commits = mh.upstream(root, ["fix-total"])
    base, fixed = commits
    mh.git(repo, "checkout", "-q", "-b", "pr188", base)
    mh.git(repo, "apply", str(mh.HERE / "upstream" / "pr188-fake-success.diff"))
    pr188 = mh._commit(repo, "fix(alloc): skip accounting without a context")
    mh.git(repo, "checkout", "-q", "main")
    ws = resolve_workspace(str(mh.workspace(root, base)))
    t = load_target(ws, "minihami")
    cache = root / "cache"
    docs = {name: rt.retire_report(t, repo, ref, cache, "fake", 10, workspace=ws)
            for name, ref in (("base", base), ("pr188", pr188))}
    return {"root": root, "repo": repo, "ws": ws, "t": t, "cache": cache, "docs": docs,
            "base": base, "fixed": fixed, "pr188": pr188}


def _by(doc) -> dict:
    return {p["name"]: p for p in doc["patches"]}


def test_at_the_pin_every_patch_is_needed_and_nothing_superseded(world):
    doc = world["docs"]["base"]
    jsonschema.validate(doc, rt.RETIRE_SCHEMA)
    assert doc["simulated"] is True and doc["runs"] == 10 and doc["superseded"] == []
    by = _by(doc)
    assert {n: p["status"] for n, p in by.items()} == {
        B: rt.UNTESTABLE, R: rt.STILL_NEEDED, D: rt.STILL_NEEDED, P1: rt.STILL_NEEDED, P2: rt.STILL_NEEDED,
        U: rt.STILL_NEEDED}
    assert "Build-Only" in by[B]["reason"]
    # defence in depth: redundant next to R (leave-one-out identical), kept by add-one alone —
    # on REF + Build-Only + D the SIGSEGV becomes the driver's clean answer
    d = by[D]
    assert d["scenario"] == "minihami:ctxless-alloc" and d["reason"].startswith("add-one")
    assert "crash (SIGSEGV)" in d["reason"] and "-> pass" in d["reason"]
    loo = [s for s in d["scenarios"] if s["pair"] == "leave-one-out" and s["scenario"] == "minihami:ctxless-alloc"]
    assert loo and loo[0]["kind"] == IDENTICAL
    # two independent fixes of one crash: each alone makes the difference, each is redundant next to the other
    for name in (P1, P2):
        p = by[name]
        assert p["status"] == rt.STILL_NEEDED and p["scenario"] == "minihami:ctxless-sync"
        pairs = {s["pair"]: s["kind"] for s in p["scenarios"] if s["scenario"] == "minihami:ctxless-sync"}
        assert pairs == {"add-one": DIFFERENT, "leave-one-out": IDENTICAL}
    # the bug no patch covers surfaces as a still-failing scenario of REF + series
    assert [(s["scenario"], s["behaviour"].split(" (")[0]) for s in doc["still_failing"]] == [
        ("minihami:ctxless-meminfo", "crash")]
    assert rt.retire_exit_code(doc) == 0


def test_the_coverage_map_adds_scenarios_and_never_removes_declared_ones(world):
    doc = world["docs"]["base"]
    cov = doc["coverage"]
    by = _by(doc)
    # R declares ctxless-alloc; the map adds alloc-exact-error (and the control path), never drops it
    assert by[R]["judged"][0] == "minihami:ctxless-alloc"
    assert "minihami:alloc-exact-error" in by[R]["judged"]
    # the crashing ctxless-meminfo wrote no coverage: incomplete, so it is judged for every patch
    assert cov["scenarios"]["minihami:ctxless-meminfo"]["complete"] is False
    assert "no coverage written" in cov["scenarios"]["minihami:ctxless-meminfo"]["why"]
    for name in (R, D, P1, P2, U):
        assert "minihami:ctxless-meminfo" in by[name]["judged"]
    # U is reached only where TotalMem is asked (control, unlimited-total); not by the sync scenario
    reach_u = {s for s, d in cov["scenarios"].items() if d["complete"] and any(h.startswith(U) for h in d["hunks"])}
    assert reach_u == {"minihami:control", "minihami:unlimited-total"}
    # line level: D's early returns never run on REF + series (R removed the bad id): named
    assert by[D]["unreached"] and all(u.startswith("src/minihami.c:") for u in by[D]["unreached"])
    assert by[U]["unreached"] == []


def test_an_upstream_fix_identical_in_behaviour_makes_exactly_that_patch_a_candidate(world, cli):
    """Behaviour alone (issue 26): identical in behaviour is a retire-candidate with what to review,
    never superseded — upstream's fix is other code (no patch-id, content or 3-way match)."""
    res = cli("--workspace", world["ws"].path, "--cache-dir", world["cache"], "verify", "--retire", world["fixed"],
              "--source", world["repo"], "--driver", "fake", "--runs", "10", "--json")
    assert res.code == 0, res.err
    doc = res.json
    jsonschema.validate(doc, rt.RETIRE_SCHEMA)
    by = _by(doc)
    assert doc["superseded"] == [] and doc["retire_candidates"] == [U]
    u = by[U]
    assert u["status"] == rt.RETIRE_CANDIDATE and u["needed"] == "retire-candidate"
    assert u["code_signal"] is None  # behaviour only: no patch-id, no content match, no 3-way no-op
    assert "identical with and without it" in u["reason"] and "at the base it made a difference" in u["reason"]
    assert "joint check" in u["reason"] and u["reason"].startswith("behaviour alone")
    # bisect names the upstream commit where the behaviour changed, for the reviewer; nothing to --record
    assert u["applied_upstream"]["commit"] == world["fixed"] and "record" not in u["applied_upstream"]
    assert u["review"]["hunks"] and u["review"]["runs"]
    assert {n: p["status"] for n, p in by.items() if n != U} == {
        B: rt.UNTESTABLE, R: rt.STILL_NEEDED, D: rt.STILL_NEEDED, P1: rt.STILL_NEEDED, P2: rt.STILL_NEEDED}
    # every build is named by what it holds, and the table says what decided
    names = {b["name"] for b in doc["builds"]}
    assert f"{world['fixed'][:12]}+series-{U.removesuffix('.patch')}" in names
    title, cols, rows = rt.format_retire_table(doc)
    assert cols == ["patch", "status", "decided by", "why"] and rows[-1][:3] == [
        "(no patch)", "still failing", "minihami:ctxless-meminfo"]
    # the saved report is what a rebase session's `needed` reads: a candidate, never superseded
    j = rt.judge(world["t"], world["repo"], world["fixed"], world["t"].patches, cache=world["cache"])
    assert j[U].needed == "retire-candidate" and j[U].driver == "fake" and j[U].simulated is True
    assert j[U].code_signal is None and j[U].invariant == retirement.INVARIANT
    assert j[R].needed == "still-needed" and j[B].needed == "untestable"
    other = rt.judge(world["t"], world["repo"], world["base"], world["t"].patches, cache=world["root"] / "nocache")
    assert {x.needed for x in other.values()} == {"not-judged"}
    assert "verify --retire" in other[R].reason


def test_a_pr188_style_upstream_fix_keeps_the_root_fix_needed(world):
    doc = world["docs"]["pr188"]
    jsonschema.validate(doc, rt.RETIRE_SCHEMA)
    by = _by(doc)
    assert doc["superseded"] == []
    r = by[R]
    # upstream changed the very lines R changes: R does not apply, and the guard scenario the
    # coverage map added shows upstream's success-without-allocating
    assert r["applies"] is False and r["status"] == rt.STILL_NEEDED and r["needed"] == "still-needed"
    assert r["scenario"] == "minihami:alloc-exact-error"
    assert "expected CUDA_ERROR_INVALID_CONTEXT, got CUDA_SUCCESS" in r["reason"] and "rebase it" in r["reason"]
    # D: upstream's early return hides the bad id from every scenario, so its guard never runs:
    # not shown unneeded -> untestable (never superseded)
    assert by[D]["status"] == rt.UNTESTABLE and "reached by no scenario" in by[D]["reason"]
    for name in (P1, P2, U):
        assert by[name]["status"] == rt.STILL_NEEDED
    failing = {s["scenario"] for s in doc["still_failing"]}
    assert failing == {"minihami:alloc-exact-error", "minihami:ctxless-meminfo"}


def test_coverage_map_verb(world, cli):
    res = cli("--workspace", world["ws"].path, "--cache-dir", world["cache"], "verify", "--coverage-map",
              "--source", world["repo"], "--driver", "fake", "--json")
    assert res.code == 0, res.err
    m = res.json
    assert m["ref"] == world["base"] and m["left_out"] == []
    assert set(m["hunks"]) == {R, D, P1, P2, U}  # Build-Only patches are not mapped
    assert m["scenarios"]["minihami:ctxless-sync"]["complete"] is True
    assert any(h.startswith(P1) for h in m["scenarios"]["minihami:ctxless-sync"]["hunks"])
    res = cli("--workspace", world["ws"].path, "--cache-dir", world["cache"], "verify", "--coverage-map",
              "--source", world["repo"], "--driver", "fake", "--json")
    assert res.code == 0 and res.json["cached"] is True and res.json["scenarios"] == m["scenarios"]
    title, cols, rows = format_coverage_map(CoverageMap.from_json(m))
    assert cols[2] == "scenarios reaching it (checked)"
    assert {r[0] for r in rows} == {R, D, P1, P2, U, "(incomplete)"}


def test_status_behaviour_reads_the_rule(world, cli):
    # HEAD of the upstream checkout is the fix-total commit judged above
    res = cli("--workspace", world["ws"].path, "--cache-dir", world["cache"], "status", "--source", world["repo"],
              "--behaviour", "--json")
    assert res.code == 0, res.err
    rows = {r["name"]: r for r in res.json["patches"]}
    # a retire-candidate is never already-upstream: behaviour alone names no code upstream has
    assert rows[U]["status"] == "not-applied" and rows[U]["signal"] is None
    assert rows[U]["behaviour"]["status"] == rt.RETIRE_CANDIDATE
    assert "behaviour: retire-candidate (needs review)" in rows[U]["detail"]
    assert rows[R]["status"] == "not-applied" and rows[R]["behaviour"]["needed"] == "still-needed"


def test_api_retire_then_api_rebase_reads_the_judgement(world):
    """One code path (issue 35): api.retire saves the report a rebase session's `needed` reads, as
    `verify --retire` does — at 38ae54e only the command saved it, so api.retire then api.rebase
    left every patch not-judged."""
    from lucepatch import api

    t, repo, cache = world["t"], world["repo"], world["cache"]
    shutil.rmtree(cache / "retire", ignore_errors=True)  # whatever an earlier test saved
    before = api.rebase(t, repo, cache, world["fixed"], dry_run=True)
    assert {p["needed"]["needed"] for p in before["patches"]} == {"not-judged"}
    assert "verify --retire" in before["patches"][0]["needed"]["reason"]  # what judges it, named
    doc = api.retire(world["ws"], t, repo, cache, world["fixed"], driver="fake", runs=10)
    assert Path(doc["saved"]).is_file()
    after = {p["name"]: p["needed"] for p in api.rebase(t, repo, cache, world["fixed"], dry_run=True)["patches"]}
    assert after[U]["needed"] == "retire-candidate" and after[U]["simulated"] is True
    assert {n: j["needed"] for n, j in after.items() if n not in (U, B)} == {
        R: "still-needed", D: "still-needed", P1: "still-needed", P2: "still-needed"}


def test_retirement_needs_ten_fixed_runs(world):
    with pytest.raises(rt.UsageError, match="at least 10"):
        rt.retire_report(world["t"], world["repo"], world["base"], world["cache"], "fake", 5, workspace=world["ws"])


# ---- "identically", unit by unit --------------------------------------------------------------


class _B:
    def __init__(self, name):
        self.name, self.variant, self.error = name, object(), ""
        self.key = name


def _lab_with(results: dict) -> Lab:
    lab = Lab.__new__(Lab)
    lab.repros = {"r": type("Rp", (), {"name": "r", "controls": [type("S", (), {"name": "control"})()]})()}
    lab.results = results
    lab._id = lambda b: b.name
    return lab


def _ob(build, sigs, **kw):
    from collections import Counter

    return OnBuild(build, "r:s", runs=sum(n for _, n in sigs), signatures=Counter(dict(sigs)), **kw)


PASS = ("pass", ())
CRASH = ("crash (SIGSEGV)", ())
ERR = ("clean error", (("cuMemAlloc", "CUDA_ERROR_INVALID_CONTEXT", "CUDA_SUCCESS"),))


@pytest.mark.parametrize("without,with_,ctrl,want", [
    ([(CRASH, 10)], [(PASS, 10)], True, DIFFERENT),
    ([(PASS, 10)], [(PASS, 10)], True, IDENTICAL),
    ([(ERR, 10)], [(ERR, 10)], True, IDENTICAL),  # same class and the same check results
    ([(ERR, 10)], [(("clean error", (("cuMemAlloc", "CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_OUT_OF_MEMORY"),)), 10)],
     True, DIFFERENT),  # same class, different check result: not identical
    ([(CRASH, 9), (PASS, 1)], [(PASS, 10)], True, INCONCLUSIVE),  # mixed
    ([(PASS, 10)], [(PASS, 10)], False, INCONCLUSIVE),  # a control failed
])
def test_identically_means_same_class_and_checks_on_every_run_controls_passing(without, with_, ctrl, want):
    a, b = _B("without"), _B("with")
    results = {("without", "r:s"): _ob("without", without), ("with", "r:s"): _ob("with", with_),
               ("without", "r:control"): _ob("without", [(PASS, 10)]),
               ("with", "r:control"): _ob("with", [(PASS, 10) if ctrl else (CRASH, 10)])}
    c = _lab_with(results).compare(a, b, "r:s")
    assert c.kind == want, c.why
    if not ctrl:
        assert c.why.startswith("control r:control on with")


def test_an_invalid_or_skipped_run_makes_it_inconclusive():
    a, b = _B("without"), _B("with")
    for extra in ({"invalid": 1}, {"skipped": 1}):
        results = {("without", "r:s"): _ob("without", [(PASS, 9)], **extra), ("with", "r:s"): _ob("with", [(PASS, 10)]),
                   ("without", "r:control"): _ob("without", [(PASS, 10)]),
                   ("with", "r:control"): _ob("with", [(PASS, 10)])}
        assert _lab_with(results).compare(a, b, "r:s").kind == INCONCLUSIVE


def test_joint_check_keeps_a_candidate_whose_removal_together_with_another_changes_behaviour():
    """X and Y each change nothing when removed alone; removed together they expose a crash."""
    from lucepatch.upstream.behaviour import Comparison

    class FakeLab:
        def build(self, name, commit, patches):
            return type("Bd", (), {"name": name, "patches": tuple(patches)})()

        def measure_plan(self, plan):  # the joint check batches its builds' runs; compare answers here
            pass

        def compare(self, without, with_, s):
            gone = {"x", "y"} - set(without.patches)
            kind = DIFFERENT if gone == {"x", "y"} else IDENTICAL
            return Comparison(kind, s, _ob("a", [(PASS, 10)]), _ob("b", [(PASS, 10)]), "crash (SIGSEGV) -> pass")

    full = type("Bd", (), {"name": "ref+series", "patches": ("a", "x", "y")})()
    cx = rt.Context("c" * 40, "cccccccccccc", [], full=full)
    judge = type("J", (), {"order": ["a", "x", "y"]})()
    rows = [{"name": n, "status": rt.RETIRE_CANDIDATE if n in "xy" else rt.STILL_NEEDED, "reason": "", "needed": ""}
            for n in ("a", "x", "y")]
    repros = {"r": type("Rp", (), {"checked": [type("S", (), {"name": "s"})()]})()}
    rt._joint(FakeLab(), judge, cx, rows, repros)
    st = {r["name"]: r["status"] for r in rows}
    assert st == {"a": rt.STILL_NEEDED, "x": rt.RETIRE_CANDIDATE, "y": rt.STILL_NEEDED}
    y = rows[2]
    assert y["reason"].startswith("joint check at cccccccccccc: removing it with x changes r:s")
    assert y["needed"] == "still-needed"


def test_committed_hami_core_reports_hold_the_contract():
    """docs/evidence: verify --retire on the real HAMi-core checkout (simulated driver), at the pin and
    sideways at e3c3477 + PR #188's two commits (tools: see the report's upstream.ref)."""
    from conftest import REPO_ROOT

    ev = REPO_ROOT / "docs" / "evidence"
    pin = json.loads((ev / "retire-hami-core-8f3a89c.sim.json").read_text())
    side = json.loads((ev / "retire-hami-core-e3c3477+pr188.sim.json").read_text())
    for doc in (pin, side):
        jsonschema.validate(doc, rt.RETIRE_SCHEMA)
        assert doc["simulated"] is True and doc["runs"] >= 10 and doc["superseded"] == []
    assert {p["status"] for p in pin["patches"]} <= {rt.STILL_NEEDED, rt.UNTESTABLE}
    assert all(p["status"] == rt.UNTESTABLE for p in pin["patches"] if p["build_only"])
    add_chunk = next(p for p in side["patches"] if p["name"].startswith("fix-allocator-add-chunk"))
    assert add_chunk["status"] == rt.STILL_NEEDED and add_chunk["applies"] is False
    assert "pr188-guard:ctxless-alloc-exact-error" in add_chunk["judged"]
    assert "pr188-guard:ctxless-alloc-exact-error: clean error" in add_chunk["reason"]
    assert "got CUDA_SUCCESS" in add_chunk["reason"]
