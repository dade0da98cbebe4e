"""The statistics of a quantitative scenario (issue 38): a rate measured on continuous data — a
throughput, a share between tenants, a per-call cost — against the bound it must hold.

Design (docs/design.md "Quantitative scenarios"):

- Runs come in **rounds**: one run of every variant per round, the order rotated from round to round
  (bare, baseline, patched; then baseline, patched, bare; ...), so drift on the machine (clocks, heat,
  a neighbour) falls on every variant alike. The first `warmup_rounds` rounds are run and recorded but
  left out of the statistic (cold caches, clocks ramping, the first compile of a kernel).
- A scenario measures either a **ratio** to a reference variant (throughput under the library ÷ bare
  throughput of the same round: paired, so slow drift cancels) or a **value** each run measures by
  itself (the 30-tenant's share of a pair running at once). A ratio is judged on the log scale: the
  mean of the per-round log ratios, a Student t interval, exponentiated — the interval of the geometric
  mean ratio, which is what "0.5 × bare" means when runs are multiplicatively noisy. A value gets the
  t interval of its arithmetic mean.
- A **bound** [lo, hi] (either end may be open) is what must hold. With the interval at confidence
  1 − α/K two-sided (K: the looks the sequential rule may take, below):
    inside   lo ≤ low and high ≤ hi      (the rate is within the bound, at significance)
    outside  high < lo or low > hi      (the rate misses the bound, at significance)
  proven     = baseline outside and patched inside
  guarded    = (a regression guard) both inside — nothing to fix, and the series keeps it so
  regression = baseline inside and patched outside
  not-proven = anything else (the baseline already holds the bound, or an interval is undecided)
- The **sequential rule** looks at the data only after the rounds in `looks(min_rounds, max_rounds)`
  (min_rounds, then doubling, and max_rounds), and stops at the first look where each variant's
  interval is decided (inside or outside); at the last look it decides with what it has. Each look's
  interval has confidence 1 − α/K, so by Bonferroni P(some look's interval misses the true value) ≤ α:
  `proven` needs the baseline's interval to exclude the bound, which a baseline truly inside it does
  with probability ≤ α over all looks together; `inside` for a patched build truly outside it, ≤ α/2.
  K = 1 (the fixed rule: every round to max_rounds) gives the plain 1 − α interval.

The t interval is exact for normally distributed per-round (log) values and approximate otherwise;
tests/test_rate_stats.py checks the t quantiles against published tables, the intervals' coverage
and the rule's error by simulation, and the decisions on random data with hypothesis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

ALPHA = 0.01
INSIDE, OUTSIDE, UNDECIDED = "inside", "outside", "undecided"


# ---- Student t -----------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError("df must be >= 1")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t (bisection on the CDF to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


# ---- intervals ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval at `confidence` from `n` rounds."""
    estimate: float
    low: float
    high: float
    confidence: float
    n: int
    method: str  # "geometric-mean ratio, t on log ratios" | "mean, t"

    def to_json(self) -> dict:
        return {"estimate": _r(self.estimate), "low": _r(self.low), "high": _r(self.high),
                "confidence": _r(self.confidence), "n": self.n, "method": self.method}


def _r(x: float) -> float:
    return x if math.isinf(x) else round(x, 6)


def _t_interval(xs: list[float], confidence: float) -> tuple[float, float, float]:
    n = len(xs)
    m = math.fsum(xs) / n
    if n < 2:
        return m, -math.inf, math.inf
    s = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))
    half = t_quantile(1.0 - (1.0 - confidence) / 2, n - 1) * s / math.sqrt(n)
    return m, m - half, m + half


def mean_interval(values: list[float], confidence: float) -> Interval:
    """The t interval of the mean of values each run measured by itself (a share)."""
    if not values:
        raise ValueError("no values")
    m, lo, hi = _t_interval(list(values), confidence)
    return Interval(m, lo, hi, confidence, len(values), "mean, t")


def ratio_interval(num: list[float], den: list[float], confidence: float) -> Interval:
    """The interval of the geometric-mean ratio num/den from paired rounds (t on the log ratios)."""
    if len(num) != len(den) or not num:
        raise ValueError("ratios need paired, non-empty rounds")
    if any(x <= 0 for x in (*num, *den)):
        raise ValueError("a ratio needs positive rates")
    logs = [math.log(a) - math.log(b) for a, b in zip(num, den)]
    m, lo, hi = _t_interval(logs, confidence)
    return Interval(math.exp(m), math.exp(lo) if lo > -math.inf else 0.0, math.exp(hi) if hi < math.inf else math.inf,
                    confidence, len(num), "geometric-mean ratio, t on log ratios")


# ---- the bound -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bound:
    """What must hold: lo <= rate <= hi (None: that end is open)."""
    lo: float | None = None
    hi: float | None = None

    def __post_init__(self):
        if self.lo is None and self.hi is None:
            raise ValueError("a bound needs lo, hi or both")
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise ValueError(f"bound lo {self.lo} is above hi {self.hi}")

    def place(self, iv: Interval) -> str:
        """inside / outside / undecided, for this interval."""
        lo = -math.inf if self.lo is None else self.lo
        hi = math.inf if self.hi is None else self.hi
        if lo <= iv.low and iv.high <= hi:
            return INSIDE
        if iv.high < lo or iv.low > hi:
            return OUTSIDE
        return UNDECIDED

    def contains(self, x: float) -> bool:
        return (self.lo is None or self.lo <= x) and (self.hi is None or x <= self.hi)

    def text(self, unit: str = "") -> str:
        u = f" {unit}" if unit else ""
        if self.lo is None:
            return f"≤ {self.hi:g}{u}"
        if self.hi is None:
            return f"≥ {self.lo:g}{u}"
        return f"[{self.lo:g}, {self.hi:g}]{u}"

    def to_json(self) -> dict:
        return {"lo": self.lo, "hi": self.hi}


# ---- the rule --------------------------------------------------------------------------------------
def looks(min_rounds: int, max_rounds: int) -> list[int]:
    """The round counts (after warm-up) at which the sequential rule looks: min_rounds, doubling, and
    max_rounds. Few looks keep the Bonferroni split of alpha (and so the intervals) narrow."""
    if min_rounds < 2 or max_rounds < min_rounds:
        raise ValueError("a look needs min_rounds >= 2 and max_rounds >= min_rounds")
    out, n = [], min_rounds
    while n < max_rounds:
        out.append(n)
        n *= 2
    out.append(max_rounds)
    return out


@dataclass(frozen=True)
class RateRule:
    """How many rounds a quantitative scenario gets and at which confidence its intervals are drawn."""
    max_rounds: int
    min_rounds: int = 4
    alpha: float = ALPHA
    sequential: bool = True

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must be in (0, 1)")
        looks(self.min_rounds, self.max_rounds)  # validates

    @property
    def looks(self) -> list[int]:
        return looks(self.min_rounds, self.max_rounds) if self.sequential else [self.max_rounds]

    @property
    def confidence(self) -> float:
        """Each look's two-sided confidence: 1 - alpha/K (Bonferroni over the K looks)."""
        return 1.0 - self.alpha / len(self.looks)

    def to_json(self) -> dict:
        return {"rule": "sequential" if self.sequential else "fixed", "max_rounds": self.max_rounds,
                "min_rounds": self.min_rounds if self.sequential else self.max_rounds, "alpha": self.alpha,
                "looks": self.looks, "confidence": _r(self.confidence),
                "note": ("each look's interval at 1 - alpha/K two-sided (K looks, Bonferroni): P(any look's interval "
                         "misses the true rate) <= alpha; proven needs the baseline's interval outside the bound and "
                         "the patched build's inside")}


@dataclass
class Decision:
    verdict: str  # proven | guarded | regression | not-proven
    reason: str
    baseline: str  # inside | outside | undecided
    patched: str
    final: bool  # the rule may stop here


def decide(base: Interval, pat: Interval, bound: Bound, *, guard: bool, last: bool, what: str = "rate",
           unit: str = "") -> Decision:
    """The verdict of one look: `last` (no further look) turns an undecided interval into not-proven."""
    b, p = bound.place(base), bound.place(pat)
    btxt = f"baseline {what} {fmt_interval(base)}"
    ptxt = f"patched {what} {fmt_interval(pat)}"
    must = f"the bound {bound.text(unit)}"
    if b == OUTSIDE and p == INSIDE:
        return Decision("proven", f"{btxt} misses {must}; {ptxt} holds it", b, p, True)
    if b == INSIDE and p == INSIDE:
        if guard:
            return Decision("guarded", f"both hold {must}: {btxt}, {ptxt} (proves no fix, guards the bound)", b, p, True)
        return Decision("not-proven", f"the baseline already holds {must} ({btxt}); {ptxt}", b, p, True)
    if b == INSIDE and p == OUTSIDE:
        return Decision("regression", f"the patched build misses {must} where the baseline holds it: {btxt}, {ptxt}",
                        b, p, True)
    if p == OUTSIDE:
        return Decision("not-proven", f"the patched build misses {must} too: {ptxt}; {btxt}", b, p, True)
    final = last or (b != UNDECIDED and p != UNDECIDED)
    undecided = [n for n, pl in (("baseline", b), ("patched", p)) if pl == UNDECIDED]
    return Decision("not-proven", f"{' and '.join(undecided)} interval straddles {must}"
                    + (" after the last round" if last else "") + f": {btxt}, {ptxt}", b, p, final)


def fmt_interval(iv: Interval) -> str:
    lo = "-inf" if math.isinf(iv.low) else f"{iv.low:.4g}"
    hi = "inf" if math.isinf(iv.high) else f"{iv.high:.4g}"
    return f"{iv.estimate:.4g} [{lo}, {hi}] ({100 * iv.confidence:.3g} %, n={iv.n})"


@dataclass
class Look:
    """What the rule saw at one look (recorded in the evidence)."""
    rounds: int
    baseline: Interval
    patched: Interval
    decision: Decision
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"rounds": self.rounds, "baseline": self.baseline.to_json(), "patched": self.patched.to_json(),
                "verdict": self.decision.verdict, "baseline_place": self.decision.baseline,
                "patched_place": self.decision.patched, "final": self.decision.final}


def interval_of(values: list[float], reference: list[float] | None, confidence: float) -> Interval:
    """A variant's interval: the ratio to the reference variant's paired rounds, or its own mean."""
    return ratio_interval(values, reference, confidence) if reference is not None else mean_interval(values, confidence)


def look_at(rule: RateRule, bound: Bound, base: list[float], pat: list[float], ref: list[float] | None = None, *,
            guard: bool = False, what: str = "rate", unit: str = "") -> Look | None:
    """The look after len(base) counted rounds (None when that is not one of the rule's looks).
    base/pat (and ref, for a ratio) are the counted rounds' values in round order, warm-up excluded."""
    n = len(base)
    if len(pat) != n or (ref is not None and len(ref) != n):
        raise ValueError("every variant needs one value per counted round")
    if n not in rule.looks:
        return None
    c = rule.confidence
    bi, pi = interval_of(base, ref, c), interval_of(pat, ref, c)
    return Look(n, bi, pi, decide(bi, pi, bound, guard=guard, last=n == rule.looks[-1], what=what, unit=unit))
