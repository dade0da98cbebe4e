"""`bisect` does not assume that a fix, once made, stays made (issue 41).

The search and what it records are checked on real git histories (tests/fixtures/absorb: upstream
takes a patch and reverts it; takes, reverts and fixes again) with the behaviour of each commit
given by a table instead of a build: a probe is a build and N runs, and what is under test here is
where the search looks, what it reports and when it refuses to record. The same history built and
run on the simulated driver is in test_bisect.py (take, revert, refix)."""

from __future__ import annotations

import importlib.util

import jsonschema
import pytest

from conftest import FIXTURES, make_target
from lucepatch.errors import CheckFailed
from lucepatch.target import load_target
from lucepatch.upstream import bisect as B
from lucepatch.verify.reproducer import Reproducer, Scenario
from lucepatch.workspace import resolve_workspace

_spec = importlib.util.spec_from_file_location("absorb_fixture", FIXTURES / "absorb" / "fixture.py")
af = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(af)

P, F, S, FL = B.GOOD_PASS, B.BAD_FAIL, B.SKIP, B.FLAKY


# ---- the search alone --------------------------------------------------------------------------


def _search(states, touching=()):
    probed = []

    def at(i):
        probed.append(i)
        return B.Probe(str(i), i, states[i])

    s = B.Search(len(states), at, lambda trans: list(touching))
    s.known.update({0: states[0], len(states) - 1: states[-1]})
    s.tried |= {0, len(states) - 1}
    return s.run(), s, probed


def test_take_revert_refix_reports_every_transition():
    # 0 base fails, 2 takes the fix, 4 reverts it, 6 fixes it again; 2, 4, 6 touch the fix's file
    pairs, s, probed = _search([F, F, P, P, F, F, P], touching=(2, 4, 6))
    assert pairs == [(1, 2), (3, 4), (5, 6)]
    assert sorted(set(probed)) == [1, 2, 3, 4, 5]


def test_a_monotone_flip_costs_a_binary_search_only():
    pairs, s, probed = _search([F] * 9 + [P] * 7)
    assert pairs == [(8, 9)] and len(set(probed)) <= 4


def test_take_then_revert_is_found_only_where_the_files_say_to_look():
    states = [F, F, P, P, F, F]
    assert _search(states)[0] == []  # the ends agree; nothing says where to look
    pairs, s, _ = _search(states, touching=(2, 4))
    assert pairs == [(1, 2), (3, 4)]


def test_a_flaky_commit_between_two_states_is_a_span_not_a_transition():
    pairs, _, _ = _search([F, FL, P])
    assert pairs == [(0, 2)]


def test_the_suspect_budget_is_counted():
    states = [F] + [P] * 30
    s = B.Search(len(states), lambda i: B.Probe(str(i), i, states[i]), lambda t: list(range(1, 31)), limit=5)
    s.known.update({0: F, 30: P})
    s.tried |= {0, 30}
    s.run()
    assert s.unprobed > 0 and len(s.tried) <= 2 + 5 + 5


# ---- the whole bisect on real histories, behaviour from a table --------------------------------


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    return af.build(tmp_path_factory.mktemp("bisect-flips"))


def _repro(tmp):
    (tmp / "r").mkdir(exist_ok=True)
    return Reproducer(name="lim", dir=tmp / "r", common_dir=tmp / "r", target="lim", artifact="libvgpu.so",
                      load_marker="Initialized", timeout_s=10, default_runs=10, description="", sources=[], libs=[],
                      env={}, scenarios=[Scenario("count-in-use")])


def _run(monkeypatch, up, tmp_path, branch, states, *, patch=False, ref=None):
    repo = up["repo"]
    commits = af.git(repo, "rev-list", "--first-parent", "--reverse", f"{up['c']['base']}..{branch}").split()
    table = dict(zip([up["c"]["base"]] + commits, states))

    def probe(target, source, repro, scenarios, commit, index, runs, drv, cache, records):
        st = table[commit]
        why = {P: "passes 10/10", F: "count-in-use fails 10/10", FL: "count-in-use flaky: fails 3/10"}[st]
        return B.Probe(commit, index, st, why)

    monkeypatch.setattr(B, "_probe", probe)
    ws = tmp_path / "ws"
    make_target(ws, "lim", up["c"]["base"], up["pfiles"])
    t = load_target(resolve_workspace(ws), "lim")
    p = next(x for x in t.patches if x.name == af.LIMIT_PATCH) if patch else None
    doc = B.bisect_behaviour(t, repo, f"{up['c']['base']}..{branch}", _repro(tmp_path), tmp_path / "cache", "fake", 10,
                             "count-in-use", patch=p, ref=ref)
    jsonschema.validate(doc, B.BISECT_SCHEMA)
    return doc, t, p, commits


def test_bisect_take_revert_refix_names_every_transition_and_the_last_fix(monkeypatch, up, tmp_path):
    c = up["c"]
    # base fails; the take passes; the revert fails; the different fix fails too (it does not fix
    # this scenario) -> the ends agree
    doc, t, p, commits = _run(monkeypatch, up, tmp_path, "take-revert-refix", [F, P, F, F], patch=True)
    assert commits == [c["trr_take"], c["trr_revert"], c["trr_ref"]]
    assert doc["result"] == B.NO_FLIP
    assert [(x["commit"], x["direction"]) for x in doc["transitions"]] == [(c["trr_take"], "fixed"),
                                                                          (c["trr_revert"], "broke")]
    assert "flipped in between and back: fixed at" in doc["reason"] and "4 of 4 commits probed" in doc["reason"]


def test_bisect_never_reports_a_fix_that_was_reverted(monkeypatch, up, tmp_path):
    """The issue's case: taken, reverted, then fixed another way. Before: `fixed by <the take>` after
    a binary search that never probed the revert, and Applied-Upstream: <the take> recorded."""
    c = up["c"]
    doc, t, p, commits = _run(monkeypatch, up, tmp_path, "take-revert-refix", [F, P, F, P], patch=False)
    assert doc["result"] == B.FOUND and doc["first"]["commit"] == c["trr_ref"]
    assert [x["direction"] for x in doc["transitions"]] == ["fixed", "broke", "fixed"]
    assert "not monotone, 3 transitions" in doc["reason"]
    assert doc["at_ref"] == {"commit": c["trr_ref"], "state": P}
    # with --record: the last fix has none of the patch's code (a different text) -> refused
    doc, t, p, _ = _run(monkeypatch, up, tmp_path, "take-revert-refix", [F, P, F, P], patch=True)
    with pytest.raises(CheckFailed, match="has none of the patch's code"):
        B.record_applied_upstream(p, doc, target=t, source=up["repo"], cache=tmp_path / "cache")
    assert "Applied-Upstream" not in p.path.read_text()


def test_record_refuses_when_broken_again_at_ref_and_names_the_commit(monkeypatch, up, tmp_path):
    c = up["c"]
    # range base..take (fixed by the take), REF = the branch's end, where the revert broke it again
    repo = up["repo"]
    commits = af.git(repo, "rev-list", "--first-parent", "--reverse", f"{c['base']}..take-revert-refix").split()
    table = {c["base"]: F, commits[0]: P, commits[1]: F, commits[2]: F}
    monkeypatch.setattr(B, "_probe", lambda target, source, repro, scen, commit, index, *a: B.Probe(
        commit, index, table[commit], "x"))
    ws = tmp_path / "ws"
    make_target(ws, "lim", c["base"], up["pfiles"])
    t = load_target(resolve_workspace(ws), "lim")
    p = next(x for x in t.patches if x.name == af.LIMIT_PATCH)
    doc = B.bisect_behaviour(t, repo, f"{c['base']}..{c['trr_take']}", _repro(tmp_path), tmp_path / "cache", "fake", 10,
                             "count-in-use", patch=p, ref=c["trr_ref"])
    assert doc["result"] == B.FOUND and doc["first"]["commit"] == c["trr_take"]
    assert doc["at_ref"]["state"] == F and doc["at_ref"]["broken_again_by"]["commit"] == c["trr_revert"]
    assert f"broken again by {c['trr_revert'][:12]}" in doc["reason"]
    with pytest.raises(CheckFailed, match=f"broken again at REF {c['trr_ref'][:12]}, by {c['trr_revert'][:12]}"):
        B.record_applied_upstream(p, doc, target=t, source=repo, cache=tmp_path / "cache")
    assert "Applied-Upstream" not in p.path.read_text()


def test_an_exact_take_that_holds_is_recorded(monkeypatch, up, tmp_path):
    c = up["c"]
    doc, t, p, commits = _run(monkeypatch, up, tmp_path, "exact-take", [F, P, P], patch=True)
    assert doc["result"] == B.FOUND and doc["first"]["commit"] == c["et_take"] and len(doc["transitions"]) == 1
    rec = B.record_applied_upstream(p, doc, target=t, source=up["repo"], cache=tmp_path / "cache")
    assert rec["applied_upstream"] == c["et_take"] and rec["code_signal"]["signal"] == "patch-id"
    assert f"Applied-Upstream: {c['et_take']}" in p.path.read_text()


def test_a_flaky_end_is_inconclusive_and_a_flaky_middle_is_named(monkeypatch, up, tmp_path):
    doc, *_ = _run(monkeypatch, up, tmp_path, "exact-take", [FL, P, P])
    assert doc["result"] == B.INCONCLUSIVE and "flaky: fails 3/10" in doc["reason"]
    c = up["c"]
    doc, *_ = _run(monkeypatch, up, tmp_path, "take-revert", [F, FL, F, P])
    # a flaky commit whose neighbours pin the flip elsewhere hides nothing, and is named
    assert doc["result"] == B.FOUND and [x["commit"] for x in doc["transitions"]] == [c["tr_ref"]]
    assert f"flaky at {c['tr_take'][:12]} (stepped around)" in doc["reason"]
    doc, *_ = _run(monkeypatch, up, tmp_path, "take-revert", [F, F, FL, P])
    # ... one between the two states hides where the flip is: no commit is named
    assert doc["result"] == B.INCONCLUSIVE and doc["first"] is None
    assert doc["candidates"] == [c["tr_revert"], c["tr_ref"]]
    doc, *_ = _run(monkeypatch, up, tmp_path, "exact-take", [F, FL, P])
    assert doc["result"] == B.INCONCLUSIVE and "skipped or flaky" in doc["reason"]
