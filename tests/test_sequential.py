"""The sequential verdict rule (issue 13, settling: issue 29): exact error bounds, launch-order
bookkeeping, and what `verify` spends on the fakehami fixture compared with --fixed.

The bounds are computed by lucepatch.verify.bounds in closed form, which these tests check against the
exact enumeration of every launch-order outcome sequence (tests/sequential_reference.py: the code the
closed form replaced), judged by the same `judge` verify uses; they fail if either bound is exceeded.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sequential_reference as ref
from lucepatch.verify.bounds import error_bounds, proof_error, proven_states, shape
from lucepatch.verify.rules import CHECKED, GUARD, FixedRule, SequentialRule, Side, proof_hint, theta
from lucepatch.verify.schedule import Scheduler

ALPHA = 0.01  # the contract (docs/design.md), written out: a changed stats.ALPHA must fail here


# ---- (i) and (ii): exact bounds ----------------------------------------------------------------


@pytest.mark.parametrize("n", [10, 20, 30])
def test_sequential_rule_bounds_both_errors_exactly(n):
    rule = SequentialRule(n)
    assert rule.alpha == ALPHA
    b = error_bounds(rule, grid=200, exact=True)
    assert b["proven_if_no_effect"] <= ALPHA, b  # (i)  P(proven | q_b <= q_p)
    assert b["proven_if_patched_rate_at_least_theta"] <= ALPHA, b  # (ii) P(proven | q_p >= theta)
    assert b["theta"] == rule.theta <= 0.37
    assert rule.policy()["theta"] == rule.theta == 0.3691  # 10 patched passes, rounded up


def test_fixed_rule_bounds_both_errors_exactly():
    rule = FixedRule(20)
    b = error_bounds(rule, grid=200, exact=True)
    assert b["proven_if_no_effect"] <= ALPHA and b["proven_if_patched_rate_at_least_theta"] <= ALPHA
    assert rule.theta == 0.2057


def test_the_bound_check_can_fail():
    # a rule that proves with 5 patched passes cannot claim theta = 0.37: (1 - 0.37)^5 = 0.099
    weak = SequentialRule(20, patched_min_passes=5)
    assert proof_error(weak, Fraction(1), Fraction(37, 100)) > ALPHA
    # a verdict threshold of 10 % lets equal failure rates "prove" a fix 2 % of the time: (i) exceeded
    loose = SequentialRule(20, alpha=0.1)
    assert error_bounds(loose, grid=100)["proven_if_no_effect"] > ALPHA


# ---- the closed form against the enumeration it replaced ---------------------------------------

CLOSED_FORM_RULES = [SequentialRule, lambda n: SequentialRule(n, settle=False), FixedRule]


@pytest.mark.parametrize("make", CLOSED_FORM_RULES, ids=["sequential", "sequential-unsettled", "fixed"])
def test_closed_form_has_the_enumerated_proven_states_for_every_n_up_to_40(make):
    """Every end state judged proven, with the number of launch-order outcome sequences ending there:
    the closed form's O(N) list is the reference's for N = 1..40 (so P(proven) is the same polynomial)."""
    for n in range(1, 41 if make is SequentialRule else 26):  # the default rule to 40, the others to 25
        rule = make(n)
        kinds = (CHECKED, GUARD) if rule.name != "fixed" and n <= 25 else (CHECKED,)
        for kind in kinds:
            assert proven_states(rule, kind) == ref.proven_states(rule, kind), (n, kind)


@pytest.mark.parametrize("n", [1, 4, 5, 6, 9, 10, 11, 20, 40])
def test_closed_form_bounds_are_the_enumerated_ones_to_the_last_bit(n):
    for rule in (SequentialRule(n), FixedRule(n)):
        want = ref.error_bounds(rule)  # exact rational arithmetic, the grid of 400 the runtime used
        got = error_bounds(rule, exact=True, fine=False)
        assert got["proven_if_no_effect"] == want["proven_if_no_effect"], (n, rule.name)
        assert got["proven_if_patched_rate_at_least_theta"] == want["proven_if_patched_rate_at_least_theta"]
        # in floats (the runtime) to 1e-12, and the finer partition only tightens (i)
        fl = error_bounds(rule, fine=False)
        assert fl["proven_if_no_effect"] == pytest.approx(want["proven_if_no_effect"], rel=1e-12, abs=1e-300)
        assert fl["proven_if_patched_rate_at_least_theta"] == pytest.approx(
            want["proven_if_patched_rate_at_least_theta"], rel=1e-12, abs=1e-300)
        assert error_bounds(rule)["proven_if_no_effect"] <= want["proven_if_no_effect"] * (1 + 1e-12)


def test_closed_form_p_proven_is_the_enumerated_one_at_any_rates():
    qs = [Fraction(0), Fraction(1, 7), Fraction(1, 2), Fraction(5, 6), Fraction(1)]
    for rule in (SequentialRule(12), SequentialRule(40), FixedRule(15)):
        for kind in ((CHECKED, GUARD) if rule.name != "fixed" else (CHECKED,)):
            for qb in qs:
                for qp in qs:
                    assert proof_error(rule, qb, qp, kind) == ref.proof_error(rule, qb, qp, kind), (rule.max_runs, kind)


@pytest.mark.parametrize("n", [120, 300, 2000, 10000])
def test_bounds_at_large_runs_stay_below_alpha(n):
    """What the enumeration could not reach (9 s at 120, minutes at 300, hours past 1000): both bounds
    below alpha at any --runs; the partition's steps of 0.02/N near 0 keep (i) meaningful there (a
    uniform 400-step grid alone bounds it by ~1 at N = 10000)."""
    for rule in (SequentialRule(n), FixedRule(n)):
        b = error_bounds(rule)
        assert 0 < b["proven_if_no_effect"] <= 0.0021, b  # sup_lambda e^-lambda P(Pois(lambda) >= 7) ~ 0.0021
        assert b["proven_if_patched_rate_at_least_theta"] <= ALPHA
        # the bracket bounds the diagonal it stands for, here too
        diag = max(proof_error(rule, q, q) for q in (i / (10 * n) for i in range(1, 400)))
        assert diag <= b["proven_if_no_effect"]
    assert shape(SequentialRule(n)).f_min == 7  # 2^-7 < 0.01 <= 2^-6 once N is large


def test_monotone_in_both_rates_which_the_bracket_relies_on():
    for rule in (SequentialRule(20), SequentialRule(300), FixedRule(20)):
        assert shape(rule).monotone
        grid = [Fraction(i, 20) for i in range(21)]
        for qb in grid:
            col = [proof_error(rule, qb, qp) for qp in grid]
            assert all(a >= b for a, b in zip(col, col[1:])), qb  # falls with the patched failure rate
        for qp in grid:
            row = [proof_error(rule, qb, qp) for qb in grid]
            assert all(a <= b for a, b in zip(row, row[1:])), qp  # grows with the baseline failure rate
    # the bracket bounds the diagonal it stands for
    rule = SequentialRule(20)
    diag = max(proof_error(rule, q, q) for q in (Fraction(i, 1000) for i in range(1001)))
    assert diag <= error_bounds(rule, grid=200)["proven_if_no_effect"]


def test_a_shape_without_a_proven_early_stop_is_bounded_term_by_term():
    # alpha below 1/C(15, 5): the early stop (5/5 vs 0/10) is not proven, the run to 20 can be
    strict = SequentialRule(20, alpha=0.0002)
    sh = shape(strict)
    assert not sh.early and sh.f_min is not None and not sh.monotone
    b = error_bounds(strict, grid=200)
    diag = max(proof_error(strict, q, q) for q in (i / 2000 for i in range(2001)))
    assert diag <= b["proven_if_no_effect"] <= 0.0002
    worst = max(proof_error(strict, qb, Fraction(round(strict.theta * 10 ** 4), 10 ** 4))
                for qb in (Fraction(i, 50) for i in range(51)))
    assert worst <= b["proven_if_patched_rate_at_least_theta"]


def test_terminal_states_are_the_two_shapes_of_the_rule():
    rule = SequentialRule(20, settle=False)
    ends = {(nb, np_) for nb, fb, np_, fp, _ in ref.terminal_paths(rule)}
    assert ends == {(5, 10), (20, 20)}
    # early stop only when the baseline failed 5/5 and the patched build passed 10/10
    early = [t for t in ref.terminal_paths(rule) if t[0] == 5]
    assert early == [(5, 5, 10, 0, 1)]
    # the path counts are all 2^(runs) sequences: probabilities sum to one at any rates, settling too
    for r in (rule, SequentialRule(20)):
        for q in (Fraction(1, 3), Fraction(9, 10)):
            total = sum(w * q ** (fb + fp) * (1 - q) ** (nb - fb + np_ - fp)
                        for nb, fb, np_, fp, w in ref.terminal_paths(r))
            assert total == 1


def test_guard_bound_and_guard_shapes():
    rule = SequentialRule(20)
    ends = {(nb, fb, np_) for nb, fb, np_, fp, _ in ref.terminal_paths(rule, GUARD) if nb == 5 and fp == 0}
    assert ends == {(5, 0, 10), (5, 5, 10)}  # all-pass baseline or all-fail baseline stop early
    th = Fraction(3691, 10000)
    assert ref.proof_error(rule, Fraction(0), th, GUARD, verdict="guarded") <= ALPHA
    assert error_bounds(rule, grid=100, kind=GUARD)["proven_if_no_effect"] <= ALPHA


# ---- settling (issue 29): the same decisions, fewer runs ---------------------------------------

VERDICTS = ("proven", "guarded", "not-proven", "regression")


@pytest.mark.parametrize("n", [5, 8, 12, 20])
def test_settling_gives_every_verdict_with_the_probability_the_old_rule_gives_it(n):
    """By exact enumeration of both rules (serial launch order): P(verdict | q_b, q_p) is the same
    polynomial under settling and under the rule before it, for every verdict — so no error of any
    decision (a false proven, a false regression, a missed one) is worse than today's."""
    old, new = SequentialRule(n, settle=False), SequentialRule(n)
    qs = [Fraction(0), Fraction(1, 9), Fraction(1, 2), Fraction(4, 5), Fraction(1)]
    for kind in (CHECKED, GUARD):
        for v in VERDICTS:
            for qb in qs:
                for qp in qs:
                    assert ref.proof_error(new, qb, qp, kind, v) == ref.proof_error(old, qb, qp, kind, v), (kind, v, qb, qp)
        # and it never spends more: the expected runs at every rate are at most the old rule's
        for qb in qs:
            for qp in qs:
                spent = {r: sum(w * qb ** fb * (1 - qb) ** (nb - fb) * qp ** fp * (1 - qp) ** (np_ - fp) * (nb + np_)
                                for nb, fb, np_, fp, w in ref.terminal_paths(r, kind)) for r in (old, new)}
                assert spent[new] <= spent[old], (kind, qb, qp)
    # a checked scenario that passes on both sides every time: 14 + 20 runs instead of 20 + 20 (at N = 20)
    if n == 20:
        both_pass = [(nb, np_) for nb, fb, np_, fp, w in ref.terminal_paths(new, CHECKED) if fb == fp == 0 and nb > 5]
        assert both_pass == [(14, 20)]


def _nb(need):
    return need.baseline, need.patched, need.mode


def test_a_settled_scenario_spends_what_decides_and_what_estimates():
    rule = SequentialRule(20)
    # both fail from the first run: not-proven is settled after one baseline run; the patched build runs
    # until its failure rate's 95 % interval is at most 0.5 wide: 6/6 -> [0.54, 1]
    need = rule.need(CHECKED, Side(1, 1), Side(1, 1))
    assert (need.baseline, need.patched, need.mode) == (1, 6, "decided")
    assert rule.need(CHECKED, Side(1, 1), Side(6, 6)).patched == 6
    # the baseline passes, the patched build fails: the baseline decides regression (runs to 20 or its first
    # failure), its runs in flight doubling: 1 -> 2 -> 4 ... -> 20
    assert _nb(rule.need(CHECKED, Side(0, 0), Side(1, 1)))[:2] == (1, 6)
    assert [rule.need(CHECKED, Side(m, 0), Side(6, 6)).baseline for m in (1, 2, 4, 8, 16)] == [2, 4, 8, 16, 20]
    assert _nb(rule.need(CHECKED, Side(7, 1), Side(6, 6)))[:2] == (7, 6)
    # a mixed patched build needs more runs for the same precision, at most max_runs
    assert rule.need(CHECKED, Side(1, 1), Side(2, 1)).patched == 9
    assert rule.need(CHECKED, Side(1, 1), Side(20, 10)).patched == 20
    # the baseline passed so often that no continuation can be proven: 6/20 vs 0/20 gives p = 0.0101
    assert not rule.proof_reachable(Side(14, 0)) and rule.proof_reachable(Side(13, 0))
    assert _nb(rule.need(CHECKED, Side(15, 1), Side(15, 0))) == (15, 15, "decided")
    assert _nb(rule.need(CHECKED, Side(15, 1), Side(3, 0))) == (15, 6, "decided")
    # both pass every run (a checked scenario whose baseline does not reproduce the bug): once the baseline
    # has passed 14 of 20, proven is out of reach and only a patched failure can still change the verdict
    # (regression): the patched build runs to 20, the baseline waits — until a patched run fails
    assert _nb(rule.need(CHECKED, Side(13, 0), Side(13, 0))) == (20, 20, "flaky")
    assert _nb(rule.need(CHECKED, Side(14, 0), Side(14, 0))) == (14, 20, "decided")
    assert _nb(rule.need(CHECKED, Side(14, 0), Side(15, 1)))[:2] == (20, 15)
    # while proven is still reachable, flaky mode runs to the maximum as before
    assert _nb(rule.need(CHECKED, Side(3, 2), Side(3, 0))) == (20, 20, "flaky")
    # a guard whose baseline passes is what it expects: it is not settled by that
    assert _nb(rule.need(GUARD, Side(3, 0), Side(3, 0))) == (5, 10, "sequential")
    assert _nb(SequentialRule(20, settle=False).need(CHECKED, Side(1, 1), Side(1, 1)))[:2] == (20, 20)


def test_theta_is_rounded_up_and_right():
    assert theta(10) == 0.3691 and (1 - theta(10)) ** 10 <= ALPHA < (1 - 0.3690) ** 10
    assert theta(20) == 0.2057 and theta(5) == 0.6019


def test_runs_hints_name_the_runs_needed():
    assert "proven needs --runs 5 or more" in proof_hint(SequentialRule(3))
    assert "--runs 10 for a patched failure rate below 0.37" in proof_hint(SequentialRule(3))
    assert "--runs 10 or more gives below 0.37" in proof_hint(SequentialRule(5))
    assert proof_hint(SequentialRule(10)) == "" and proof_hint(SequentialRule(20)) == ""
    assert "proven needs --runs 5 or more" in proof_hint(FixedRule(3)) and proof_hint(FixedRule(5)) == ""


# ---- launch order, not completion order -------------------------------------------------------

OUT = st.sampled_from(["pass", "crash", "fail", "timeout"])


def _drive(rule, table: dict, slots: int, rng: random.Random | None):
    """Run the scheduler against a table of outcomes {(key, variant, index): outcome}, completing
    the outstanding jobs in rng's order (None: in launch order, one at a time)."""
    keys = sorted({k for k, _, _ in table})
    kinds = {k: ("control" if k == "r:control" else CHECKED) for k in keys}
    s = Scheduler(rule, [(k, kinds[k], "r") for k in keys], ["baseline", "patched"])
    out = []
    pending = []
    while not s.finished:
        pending += s.next_jobs(slots - len(pending))
        job = pending.pop(rng.randrange(len(pending)) if rng else 0)
        s.complete(job, table[(job.key, job.variant, job.index)])
        out.append(job)
    assert not s.outstanding
    final = {k: {v: sorted(i for j in out for i in [j.index] if j.key == k and j.variant == v)
                 for v in ("baseline", "patched")} for k in keys}
    return final, out, s


def _table(data, n):
    table = {}
    for k in ("r:control", "r:a", "r:b"):
        for v in ("baseline", "patched"):
            for i in range(n):
                table[(k, v, i)] = data.draw(OUT) if k != "r:control" else "pass"
    return table


def _verdicts(rule, table, final) -> dict:
    """Each checked scenario's verdict from the runs it ended with (the very `judge` verify uses)."""
    out = {}
    for k, sides in final.items():
        if k == "r:control":
            continue
        fb, fp = (sum(table[(k, v, i)] != "pass" for i in sides[v]) for v in ("baseline", "patched"))
        out[k] = ref.verdict_of(rule, CHECKED, len(sides["baseline"]), fb, len(sides["patched"]), fp)
    return out


def _no_holes(final, launched):
    for k, sides in final.items():  # indices are 0..n-1 without holes: nothing re-drawn, nothing skipped
        for v, idx in sides.items():
            assert idx == list(range(len(idx)))
    assert [j.launch for j in sorted(launched, key=lambda j: j.launch)] == list(range(len(launched)))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_what_a_scenario_ends_with_does_not_depend_on_completion_order(data):
    """Without settling, the runs themselves: a settled verify stops launching, so it may end with the
    runs it had in flight (next test); this is the rule whose exact enumeration both are judged by."""
    n = data.draw(st.integers(1, 20))
    rule = SequentialRule(n, settle=False)
    table = _table(data, n)
    serial, order, _ = _drive(rule, table, 1, None)
    slots = data.draw(st.integers(1, 16))
    seed = data.draw(st.integers(0, 10 ** 6))
    shuffled, launched, s = _drive(rule, table, slots, random.Random(seed))
    assert shuffled == serial
    _no_holes(shuffled, launched)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_settling_verify_decides_what_the_old_rule_decides_in_any_completion_order(data):
    """Settling, on any outcome table, with any number of slots and any completion order: every
    scenario's verdict is the one the rule without settling gives on the same table (so every error
    probability is unchanged, pathwise), its runs are a launch-order prefix, it spends at least what a
    serial verify spends and never more than the old rule, and it ends only where the rule stops."""
    n = data.draw(st.integers(1, 20))
    old, new = SequentialRule(n, settle=False), SequentialRule(n)
    table = _table(data, n)
    before, _, _ = _drive(old, table, 1, None)
    serial, _, _ = _drive(new, table, 1, None)
    slots = data.draw(st.integers(1, 16))
    shuffled, launched, s = _drive(new, table, slots, random.Random(data.draw(st.integers(0, 10 ** 6))))
    assert _verdicts(new, table, shuffled) == _verdicts(new, table, serial) == _verdicts(old, table, before)
    _no_holes(shuffled, launched)
    for k, sides in shuffled.items():
        for v in sides:
            assert len(serial[k][v]) <= len(sides[v]) <= len(before[k][v]), (k, v)
        t = s.tracks[k]
        assert all(t.launched[v] >= s.wanted(t, v) for v in sides)


def test_variants_and_scenarios_interleave_run_by_run():
    rule = SequentialRule(20)
    s = Scheduler(rule, [("r:control", "control", "r"), ("r:a", CHECKED, "r")], ["baseline", "patched"])
    jobs = s.next_jobs(8)
    assert [(j.key, j.variant[0], j.index) for j in jobs] == [
        ("r:control", "b", 0), ("r:control", "p", 0), ("r:a", "b", 0), ("r:a", "p", 0),
        ("r:control", "b", 1), ("r:control", "p", 1), ("r:a", "b", 1), ("r:a", "p", 1)]


def test_a_crash_completing_first_does_not_stop_the_baseline_early():
    # five baseline runs launched; runs 0, 1, 3, 4 crash (fast) and complete before run 2, a pass
    rule = SequentialRule(20)
    s = Scheduler(rule, [("r:a", CHECKED, "r")], ["baseline", "patched"])
    jobs = {(j.variant, j.index): j for j in s.next_jobs(15)}
    for i in (0, 1, 3, 4):
        s.complete(jobs[("baseline", i)], "crash")
    for i in range(10):
        s.complete(jobs[("patched", i)], "pass")
    assert not s.finished  # run 2 is still out: nothing is decided on completion order
    s.complete(jobs[("baseline", 2)], "pass")
    more = s.next_jobs(100)
    assert len(more) == 2 * 20 - 15 and s.summary("r:a")["mode"] == "flaky"
    for j in more:
        s.complete(j, "pass")
    sm = s.summary("r:a")
    assert sm["runs_spent"] == {"baseline": 20, "patched": 20}
    assert "baseline run 2 (launch order) passed" in sm["stop_reason"]


def test_an_invalid_run_settles_the_scenario_and_is_never_redrawn():
    rule = SequentialRule(20)
    s = Scheduler(rule, [("r:a", CHECKED, "r")], ["baseline", "patched"])
    first = s.next_jobs(2)
    s.complete(first[0], "crash")
    s.complete(first[1], "invalid")
    assert s.next_jobs(100) == [] and s.finished
    sm = s.summary("r:a")
    assert sm["runs_spent"] == {"baseline": 1, "patched": 1} and "never re-drawn" in sm["stop_reason"]


def test_a_failing_control_stops_its_reproducer_only():
    rule = SequentialRule(20)
    s = Scheduler(rule, [("r:control", "control", "r"), ("r:a", CHECKED, "r"), ("q:a", CHECKED, "q")],
                  ["baseline", "patched"])
    jobs = s.next_jobs(2)
    s.complete(jobs[0], "fail")
    s.complete(jobs[1], "pass")
    rest = s.next_jobs(100)
    assert {j.key for j in rest} == {"q:a"}
    assert "control r:control failed" in s.summary("r:a")["stop_reason"]


def test_fixed_rule_keeps_todays_plan():
    s = Scheduler(FixedRule(3), [("r:control", "control", "r"), ("r:a", CHECKED, "r")], ["baseline", "patched"])
    jobs = s.next_jobs(100)
    assert [(j.index, j.key, j.variant) for j in jobs] == [
        (i, k, v) for i in range(3) for k in ("r:control", "r:a") for v in ("baseline", "patched")]
    for j in jobs:
        s.complete(j, "fail")  # a failing control changes nothing under --fixed
    assert s.finished and s.summary("r:a") == {"runs_spent": {"baseline": 3, "patched": 3},
                                                "stop_reason": "fixed number of runs (3 per variant)", "mode": "fixed"}


def test_side_counts():
    assert Side(runs=5, failures=2, invalid=1, skipped=0).passed == 2
