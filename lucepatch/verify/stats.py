"""The significance test behind `proven`: one-sided Fisher exact test on a 2x2 table.

H1: the baseline fails more often than the patched build. Exact hypergeometric tail, so it is
valid for the small run counts a GPU budget allows (no normal approximation).
"""

from __future__ import annotations

from math import comb

ALPHA = 0.01


def fisher_one_sided(base_fail: int, base_pass: int, patched_fail: int, patched_pass: int) -> float:
    """P(X >= base_fail) where X ~ Hypergeometric(N, K=fails, n=baseline runs)."""
    n_base = base_fail + base_pass
    fails = base_fail + patched_fail
    total = n_base + patched_fail + patched_pass
    if total == 0:
        return 1.0
    denom = comb(total, n_base)
    tail = sum(comb(fails, x) * comb(total - fails, n_base - x)
               for x in range(base_fail, min(fails, n_base) + 1))
    return tail / denom
