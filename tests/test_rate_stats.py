"""The statistics of quantitative scenarios (lucepatch/verify/rate_stats.py, issue 38): the t quantiles
against published tables, the intervals' coverage and the sequential rule's error by simulation, the
decisions' logic on random intervals (hypothesis)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lucepatch.verify import rate_stats as rs


@pytest.mark.parametrize("p,df,want", [
    (0.975, 1, 12.7062047), (0.975, 2, 4.30265273), (0.975, 4, 2.77644511), (0.995, 9, 3.24983554),
    (0.975, 30, 2.04227246), (0.9975, 7, 4.02933718), (0.995, 3, 5.84090931), (0.95, 100, 1.66023433),
])
def test_t_quantile_matches_the_tables(p, df, want):
    assert rs.t_quantile(p, df) == pytest.approx(want, rel=1e-7)
    assert rs.t_quantile(1 - p, df) == pytest.approx(-want, rel=1e-7)
    assert rs.t_cdf(want, df) == pytest.approx(p, abs=1e-9)


def test_ratio_interval_is_the_exponentiated_log_interval():
    num, den = [50.0, 52.0, 49.0, 51.0], [100.0, 101.0, 99.0, 100.0]
    iv = rs.ratio_interval(num, den, 0.95)
    logs = [math.log(a / b) for a, b in zip(num, den)]
    m = sum(logs) / 4
    s = math.sqrt(sum((x - m) ** 2 for x in logs) / 3)
    half = 3.18244631 * s / 2  # t_{0.975, 3}
    assert iv.estimate == pytest.approx(math.exp(m))
    assert (iv.low, iv.high) == (pytest.approx(math.exp(m - half)), pytest.approx(math.exp(m + half)))
    with pytest.raises(ValueError):
        rs.ratio_interval([1.0, 0.0], [1.0, 1.0], 0.95)
    with pytest.raises(ValueError):
        rs.ratio_interval([1.0], [1.0, 2.0], 0.95)


def test_intervals_cover_at_their_confidence():
    """Normal log ratios, n = 5 rounds: the 95 % interval covers the true ratio 95 % of the time."""
    rng = random.Random(38)
    true, trials, hits = 0.5, 4000, 0
    for _ in range(trials):
        den = [rng.gauss(400, 5) for _ in range(5)]
        num = [d * true * math.exp(rng.gauss(0, 0.03)) for d in den]
        iv = rs.ratio_interval(num, den, 0.95)
        hits += iv.low <= true <= iv.high
    # binomial sd at 0.95 and 4000 trials is 0.0034: 4 sd either side
    assert abs(hits / trials - 0.95) < 0.014


def test_looks_double_and_end_at_the_maximum():
    assert rs.looks(3, 12) == [3, 6, 12]
    assert rs.looks(4, 10) == [4, 8, 10]
    assert rs.looks(5, 5) == [5]
    with pytest.raises(ValueError):
        rs.looks(1, 4)
    rule = rs.RateRule(max_rounds=12, min_rounds=3)
    assert rule.confidence == pytest.approx(1 - 0.01 / 3)
    assert rs.RateRule(max_rounds=12, sequential=False).looks == [12]


def _run_rule(rule, bound, rng, base_true, pat_true, sd, guard=False):
    base, pat, ref = [], [], []
    for n in range(1, rule.max_rounds + 1):
        bare = rng.gauss(400, 4)
        ref.append(bare)
        base.append(bare * base_true * math.exp(rng.gauss(0, sd)))
        pat.append(bare * pat_true * math.exp(rng.gauss(0, sd)))
        look = rs.look_at(rule, bound, base, pat, ref, guard=guard)
        if look is not None and look.decision.final:
            return look
    raise AssertionError("the rule never stopped")


@pytest.mark.parametrize("base_true", [0.4, 0.6, 0.5])
def test_sequential_rule_proves_with_error_at_most_alpha(base_true):
    """A baseline truly inside the bound (0.4 and 0.6 are its edges, where a false 'outside' is likeliest)
    is called proven in at most alpha of the verifications, all looks together."""
    rule, bound, rng = rs.RateRule(max_rounds=12, min_rounds=3, alpha=0.05), rs.Bound(0.4, 0.6), random.Random(7)
    trials = 3000
    proven = sum(_run_rule(rule, bound, rng, base_true, 0.5, 0.05).decision.verdict == "proven" for _ in range(trials))
    # alpha = 0.05 (a larger alpha than verify's, so the simulation can see it): binomial sd 0.004
    assert proven / trials <= 0.05 + 0.012


def test_sequential_rule_stops_early_when_it_can():
    # n = 4 rounds, 3 looks: t_{1 - 0.01/6, 3} = 7.45, so a 1 % noise gives a +-3.7 % interval
    rule, bound, rng = rs.RateRule(max_rounds=12, min_rounds=4), rs.Bound(0.4, 0.6), random.Random(3)
    looks = [_run_rule(rule, bound, rng, 0.8, 0.5, 0.01) for _ in range(50)]
    assert all(l.decision.verdict == "proven" for l in looks)
    assert all(l.rounds == 4 for l in looks)
    noisy = [_run_rule(rule, bound, rng, 0.8, 0.5, 0.2) for _ in range(50)]
    assert max(l.rounds for l in noisy) > 3  # noise costs rounds


def test_guard_and_regression():
    rule, bound, rng = rs.RateRule(max_rounds=8, min_rounds=4), rs.Bound(lo=0.99), random.Random(5)
    assert _run_rule(rule, bound, rng, 1.0, 1.0, 0.002, guard=True).decision.verdict == "guarded"
    assert _run_rule(rule, bound, rng, 1.0, 1.0, 0.002).decision.verdict == "not-proven"
    assert _run_rule(rule, bound, rng, 1.0, 0.9, 0.002, guard=True).decision.verdict == "regression"


_ends = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(a=_ends, b=_ends, c=_ends, d=_ends, lo=st.one_of(st.none(), _ends), hi=st.one_of(st.none(), _ends),
       guard=st.booleans(), last=st.booleans())
def test_decide_follows_the_places(a, b, c, d, lo, hi, guard, last):
    if lo is None and hi is None or (lo is not None and hi is not None and lo > hi):
        return
    bound = rs.Bound(lo, hi)
    base = rs.Interval((a + b) / 2, min(a, b), max(a, b), 0.99, 5, "t")
    pat = rs.Interval((c + d) / 2, min(c, d), max(c, d), 0.99, 5, "t")
    dec = rs.decide(base, pat, bound, guard=guard, last=last)
    bp, pp = bound.place(base), bound.place(pat)
    assert (dec.verdict == "proven") == (bp == rs.OUTSIDE and pp == rs.INSIDE)
    assert (dec.verdict == "guarded") == (guard and bp == pp == rs.INSIDE)
    assert (dec.verdict == "regression") == (bp == rs.INSIDE and pp == rs.OUTSIDE)
    if last:
        assert dec.final
    # inside and outside exclude each other, and an interval wholly in the bound's span is inside
    for iv, place in ((base, bp), (pat, pp)):
        if place == rs.INSIDE:
            assert bound.contains(iv.low) and bound.contains(iv.high)
        if place == rs.OUTSIDE:
            assert not bound.contains(iv.low) and not bound.contains(iv.high)
