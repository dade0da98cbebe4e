"""The exact error of `proven` under a rule, in closed form: constant time in `--runs`.

`proven` can end a scenario in two places only (docs/design.md "Verdicts", how runs are spent):

  early   the sequential stop: the baseline failed its first b runs, the patched build passed its
          first p (b = baseline_stop_after, p = patched_min_passes) — one outcome sequence;
  to N    both variants ran to N = max_runs, the patched build passed all N, and the baseline's f
          failures are significant: f >= f_min, the smallest f `judge` calls proven at (N, f, N, 0)
          (Fisher's p at patched 0/N is C(N, f) / C(2N, f), which falls with f, so the proven f are
          exactly f >= f_min). The baseline sequences that end there are all C(N, f) with f failures
          less those that stopped early: C(N-b, f-b) whose first b runs failed, and for a regression
          guard also C(N-b, f) whose first b runs passed (a guard stops there, `guarded`).

Summed over f those are binomial tails, T(n, k, q) = P(Bin(n, q) >= k), each the complement of at
most k terms:

    P(proven | q_b, q_p) = [early proven] q_b^b (1-q_p)^p
                           + (1-q_p)^N (T(N, f_min, q_b) - q_b^b T(N-b, f_min-b, q_b)
                                        - [guard] (1-q_b)^b T(N-b, f_min, q_b))

The fixed rule is the second line without the subtractions. Settling (rules.SequentialRule, issue 29)
never stops a scenario that can still end `proven`, so these are its states too.
tests/test_sequential.py checks the states and their path counts against the exact enumeration of
every launch-order outcome sequence (tests/sequential_reference.py, the code this replaced) for every
N <= 40, and the bounds equal to the last bit.

The verdict of each end state is decided by `judge` itself (the function verify uses), not re-derived.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from lucepatch.verify.evidence import Tally
from lucepatch.verify.rules import CHECKED, FIXED, GUARD, Rule
from lucepatch.verify.verdict import PROVEN, judge

METHOD = ("closed form over the rule's proven end states (the early stop; both variants at max_runs with the "
          "baseline's failures significant) through binomial tails, equal to the exact enumeration of every "
          "launch-order outcome sequence the rule can produce")


@dataclass(frozen=True)
class ProofShape:
    """Where `proven` can end under a rule, for one kind of scenario."""
    n: int  # max_runs
    b: int  # baseline runs of the early stop (0: the rule has none)
    p: int  # patched runs of the early stop
    early: bool  # the early stop is judged proven
    f_min: int | None  # smallest proven baseline failure count at (N, f, N, 0); None: none is
    guard: bool

    @property
    def monotone(self) -> bool:
        """P(proven) grows with q_b and falls with q_p. The proven event is [first b baseline runs fail
        and first p patched pass] or [all N patched pass and >= f_min baseline failures] (a guard:
        and not its first b baseline runs all passing), both monotone, when the early stop is proven
        or there is none; without it the second part excludes the first-b-failed sequences and
        is not monotone in q_b (only with parameters verify never uses: alpha < 1/C(b+p, b))."""
        return self.early or self.b == 0 or self.f_min is None


def _is_proven(rule: Rule, kind: str, nb: int, fb: int, np_: int, fp: int) -> bool:
    return judge(Tally(runs=nb, passed=nb - fb, failures=fb), Tally(runs=np_, passed=np_ - fp, failures=fp),
                 control=False, control_ok=True, guard=kind == GUARD, alpha=rule.alpha)[0] == PROVEN


@lru_cache(maxsize=64)
def shape(rule: Rule, kind: str = CHECKED) -> ProofShape:
    n = rule.max_runs
    b, p = (0, 0) if rule.name == FIXED else (rule.stop_after, rule.min_passes)
    early = b > 0 and _is_proven(rule, kind, b, b, p, 0)
    # judge's p at patched 0/N falls with f, so the first proven f starts the proven range; f_min ~ 7
    # for alpha = 0.01 at any N (p ~ 2^-f), so this loop is short
    f_min = next((f for f in range(1, n + 1) if _is_proven(rule, kind, n, f, n, 0)), None)
    return ProofShape(n, b, p, early, f_min, kind == GUARD and b > 0)


def _comb(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def proven_states(rule: Rule, kind: str = CHECKED) -> tuple[tuple[int, int, int, int, int], ...]:
    """(baseline runs, baseline failures, patched runs, patched failures, launch-order sequences ending
    there) of every end state judged proven — O(N); the form the reference enumeration gives."""
    sh = shape(rule, kind)
    out: dict[tuple[int, int, int, int], int] = {}
    if sh.early:
        out[(sh.b, sh.b, sh.p, 0)] = 1
    if sh.f_min is not None:
        n, b = sh.n, sh.b
        for f in range(sh.f_min, n + 1):
            ways = _comb(n, f)
            if b:
                ways -= _comb(n - b, f - b) + (_comb(n - b, f) if sh.guard else 0)
            if ways:
                out[(n, f, n, 0)] = out.get((n, f, n, 0), 0) + ways
    return tuple((*k, w) for k, w in sorted(out.items()) if w)


@lru_cache(maxsize=4096)
def _log_comb(n: int, k: int) -> float:
    return math.log(math.comb(n, k))


def _tail(n: int, k: int, q):
    """P(Bin(n, q) >= k): exact for Fractions, else in floats (terms in log space, no overflow at any n)."""
    exact = isinstance(q, (Fraction, int))
    one = Fraction(1) if exact else 1.0
    if k <= 0:
        return one
    if k > n:
        return 0 * one
    low = k <= n - k + 1  # sum the shorter side
    js = range(0, k) if low else range(k, n + 1)
    if exact:
        s = sum(math.comb(n, j) * q ** j * (1 - q) ** (n - j) for j in js)
        return one - s if low else s
    if q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    lq, l1q = math.log(q), math.log1p(-q)
    s = math.fsum(math.exp(_log_comb(n, j) + j * lq + (n - j) * l1q) for j in js)
    return max(0.0, 1.0 - s) if low else min(1.0, s)


def _flaky_part(sh: ProofShape, q):
    """P(the baseline part of a proven end at N) for baseline failure rate q: the tail less the sequences
    that stopped early."""
    n, b, f = sh.n, sh.b, sh.f_min
    s = _tail(n, f, q)
    if b:
        s -= q ** b * _tail(n - b, f - b, q)
        if sh.guard:
            s -= (1 - q) ** b * _tail(n - b, f, q)
    return s


def proof_error(rule: Rule, q_base, q_patched, kind: str = CHECKED):
    """P(proven) when every baseline run fails with probability q_base and every patched run with
    q_patched, independently. Exact when given Fractions; O(f_min) terms at any max_runs."""
    sh = shape(rule, kind)
    total = 0 * q_base
    if sh.early:
        total += q_base ** sh.b * (1 - q_patched) ** sh.p
    if sh.f_min is not None:
        total += (1 - q_patched) ** sh.n * _flaky_part(sh, q_base)
    return total


def _bracket(rule: Rule, sh: ProofShape, lo, hi, kind: str):
    """An upper bound of P(proven) on the diagonal q_b = q_p = q over [lo, hi]."""
    if sh.monotone:
        return proof_error(rule, hi, lo, kind)
    # term by term, every binomial tail growing with q: the early term is 0 here (not monotone = not proven)
    n, b, f = sh.n, sh.b, sh.f_min
    s = _tail(n, f, hi) - lo ** b * _tail(n - b, f - b, lo)
    if sh.guard:
        s -= (1 - hi) ** b * _tail(n - b, f, lo)
    return (1 - lo) ** n * s


def _partition(n: int, grid: int, fine: bool, num) -> list:
    """The points of the bracket partition: `grid` equal steps on [0, 1] and, when `fine`, steps of
    0.02/N up to q = 40/N. A uniform grid alone is too coarse once N outgrows it: the part that ends
    at N peaks at q ~ 4/N (e^-Nq P(Pois(Nq) >= f_min)), so a bracket [0, 1/400] at N = 10000 would
    bound it by P(q_b = 1/400, q_p = 0) ~ 1. Past 40/N every patched run passing costs < e^-40."""
    pts = {num(i, grid) for i in range(grid + 1)}
    if fine:
        steps = 2000  # lambda = N q in steps of 0.02 up to 40
        pts |= {num(j, 50 * n) for j in range(min(steps, 50 * n) + 1)}
    return sorted(pts)


@lru_cache(maxsize=64)
def error_bounds(rule: Rule, grid: int = 400, kind: str = CHECKED, exact: bool = False, fine: bool = True) -> dict:
    """Upper bounds of the two errors of `proven` (exact=True: in rational arithmetic; else in floats,
    relative error ~1e-12), in milliseconds at any max_runs:

    (i)  sup P(proven) over q_b <= q_p: P falls with q_p, so the sup is on the diagonal q_b = q_p, and
         on [q_i, q_i+1] it is at most P(q_b = q_i+1, q_p = q_i) (P grows with q_b); the largest of
         those brackets over a partition of [0, 1] bounds it rigorously (fine=False: the 400 equal
         steps the enumeration used, the same number to the last bit; fine=True adds steps of 0.02/N
         near 0, which only tightens it and keeps it meaningful at large N);
    (ii) sup P(proven) over q_p >= theta (theta as recorded: 4 decimals, rounded up), any q_b:
         P(q_b = 1, q_p = theta).
    """
    sh = shape(rule, kind)
    num = Fraction if exact else (lambda a, b=1: a / b)
    qs = _partition(sh.n, grid, fine, num)
    no_effect = max(_bracket(rule, sh, lo, hi, kind) for lo, hi in zip(qs, qs[1:]))
    th = num(round(rule.theta * 10 ** 4), 10 ** 4)
    # not monotone in q_b: bounded by P(every patched run passes) = (1 - theta)^N
    at_theta = proof_error(rule, num(1), th, kind) if sh.monotone else (1 - th) ** sh.n
    return {"method": METHOD, "proven_if_no_effect": float(no_effect),
            "proven_if_patched_rate_at_least_theta": float(at_theta), "theta": rule.theta}
