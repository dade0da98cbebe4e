"""The significance test behind `proven`: one-sided Fisher exact test on a 2x2 table.

H1: the baseline fails more often than the patched build. Exact hypergeometric tail, so it is
valid for the small run counts a GPU budget allows (no normal approximation).

And the interval a settled scenario's patched failure rate is reported with: the exact
(Clopper-Pearson) binomial interval, which covers the rate with at least its confidence at any n.
"""

from __future__ import annotations

import math
from functools import lru_cache
from math import comb

ALPHA = 0.01


def fisher_one_sided(base_fail: int, base_pass: int, patched_fail: int, patched_pass: int) -> float:
    """P(X >= base_fail) where X ~ Hypergeometric(N, K=fails, n=baseline runs)."""
    n_base = base_fail + base_pass
    fails = base_fail + patched_fail
    total = n_base + patched_fail + patched_pass
    if total == 0:
        return 1.0
    denom = _comb(total, n_base)
    tail = sum(comb(fails, x) * comb(total - fails, n_base - x)
               for x in range(base_fail, min(fails, n_base) + 1))
    return tail / denom


@lru_cache(maxsize=64)
def _comb(n: int, k: int) -> int:
    # the denominator is C(2N, N) for every state a rule's bounds judge at N (thousands of digits at
    # --runs 10000): computed once per N
    return comb(n, k)


def _binom_cdf(k: int, n: int, q: float) -> float:
    """P(Bin(n, q) <= k), in floats (n is a few dozen runs here)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return math.fsum(comb(n, j) * q ** j * (1 - q) ** (n - j) for j in range(k + 1))


@lru_cache(maxsize=4096)
def clopper_pearson(failures: int, runs: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a failure rate from `failures` of `runs`: the rates q for which
    neither tail of Bin(runs, q) at `failures` is below (1 - confidence)/2. Bisection to 1e-12."""
    if runs <= 0:
        return 0.0, 1.0
    tail = (1.0 - confidence) / 2

    def solve(f, want_low: bool) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if f(mid) > tail:
                lo, hi = (lo, mid) if want_low else (mid, hi)
            else:
                lo, hi = (mid, hi) if want_low else (lo, mid)
        return (lo + hi) / 2

    # lower: P(X >= failures | q) = tail (grows with q); upper: P(X <= failures | q) = tail (falls with q)
    low = 0.0 if failures == 0 else solve(lambda q: 1.0 - _binom_cdf(failures - 1, runs, q), True)
    high = 1.0 if failures == runs else solve(lambda q: _binom_cdf(failures, runs, q), False)
    return low, high
