"""How many runs a scenario gets: the fixed rule and the sequential rule, and the exact error of
`proven` under each.

fixed       every scenario runs `max_runs` per variant (what `verify --fixed` and every retirement
            equivalence check use).
sequential  spend runs only while the verdict is open (issue 13):
              checked scenario  the baseline may stop after `baseline_stop_after` (5) failures in a
                                row from its first run, the patched build needs `patched_min_passes`
                                (10) passing runs; a baseline pass or a patched failure switches the
                                scenario to *flaky* mode: both variants run to `max_runs`, and it stays
                                flaky (sticky, as syzbot's bisection does);
              regression guard  the same, except that a baseline that passes every run is what a
                                guard expects: only a *mixed* baseline (passes and failures) or a
                                patched failure goes flaky;
              control           `control_runs` (5) per variant; the first failure settles it (invalid)
                                and stops every scenario of that reproducer;
              any scenario      an invalid run settles it (invalid; never silently re-drawn), a skipped
                                run settles it (skipped, or invalid if the variants disagree).

A rule is a pure function of the *completed* runs' counts, and the scheduler
(lucepatch.verify.schedule) launches only what the rule needs and waits for every launched run, so
the runs a scenario ends with do not depend on which run finished first (a SIGSEGV finishes sooner
than a pass): the early stop happens only when all of the first 5 + 10 runs are in, and any run past
them exists only because one of those switched the scenario to flaky mode.

`proof_error` enumerates every launch-order outcome sequence the rule can produce (grouped by
counts: runs are i.i.d., so a sequence's probability depends only on its counts) and gives the exact
P(proven) for baseline/patched failure rates (q_b, q_p); `error_bounds` turns that into the two
bounds the evidence records:
  (i)  P(proven | q_b <= q_p)  <= alpha   (no effect, or the patch makes it worse)
  (ii) P(proven | q_p >= theta) <= alpha  (patched 0/n  =>  failure rate < theta at 1 - alpha)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

from lucepatch.verify.stats import ALPHA, fisher_one_sided

CHECKED, GUARD, CONTROL = "checked", "guard", "control"
FIXED, SEQUENTIAL, FLAKY, SETTLED = "fixed", "sequential", "flaky", "settled"


def theta(n_pass: int, alpha: float = ALPHA) -> float:
    """The failure rate a patched 0/n rules out at confidence 1 - alpha, rounded *up* to 4 decimals
    (so that "failure rate < theta" stays true for the printed number): (1 - theta)^n <= alpha."""
    if n_pass <= 0:
        return 1.0
    exact = 1.0 - alpha ** (1.0 / n_pass)
    return min(1.0, math.ceil(exact * 10 ** 4 - 1e-9) / 10 ** 4)


def fmt_theta(t: float) -> str:
    """theta for people: two decimals, rounded up (a claim "rate < theta" must not shrink)."""
    return f"{math.ceil(t * 100 - 1e-9) / 100:.2f}"


@dataclass(frozen=True)
class Side:
    """Completed runs of one variant of one scenario."""
    runs: int = 0
    failures: int = 0
    invalid: int = 0
    skipped: int = 0

    @property
    def passed(self) -> int:
        return self.runs - self.failures - self.invalid - self.skipped


@dataclass(frozen=True)
class Need:
    """Total runs (launched, not extra) each variant needs now; `mode` and `why` describe the state."""
    baseline: int
    patched: int
    mode: str
    why: str


class _Rule:
    """Rules compare and hash by their parameters (the exact-error tables are cached per rule)."""

    def _key(self) -> tuple:
        return (type(self).__name__, *sorted(vars(self).items()))

    def __eq__(self, other) -> bool:
        return isinstance(other, _Rule) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class FixedRule(_Rule):
    name = FIXED
    stops_reproducer_on_control_failure = False

    def __init__(self, max_runs: int, alpha: float = ALPHA):
        self.max_runs, self.alpha = int(max_runs), alpha

    def need(self, kind: str, base: Side, pat: Side) -> Need:
        n = self.max_runs
        return Need(n, n, FIXED, f"fixed number of runs ({n} per variant)")

    @property
    def theta(self) -> float:
        return theta(self.max_runs, self.alpha)

    def min_runs_for_proof(self) -> int:
        n = 1
        while fisher_one_sided(n, 0, 0, n) >= self.alpha:
            n += 1
        return n

    def policy(self) -> dict:
        return {"rule": FIXED, "max_runs": self.max_runs, "alpha": self.alpha, "theta": self.theta,
                "baseline_stop_after": None, "patched_min_passes": None, "order": "launch",
                "note": f"every scenario runs {self.max_runs} times per variant, interleaved"}


class SequentialRule(_Rule):
    name = SEQUENTIAL
    stops_reproducer_on_control_failure = True

    def __init__(self, max_runs: int, alpha: float = ALPHA, baseline_stop_after: int = 5,
                 patched_min_passes: int = 10, control_runs: int = 5):
        self.max_runs, self.alpha = int(max_runs), alpha
        self.stop_after = min(baseline_stop_after, self.max_runs)
        self.min_passes = min(patched_min_passes, self.max_runs)
        self.control_runs = min(control_runs, self.max_runs)
        self._asked = (baseline_stop_after, patched_min_passes, control_runs)

    def need(self, kind: str, base: Side, pat: Side) -> Need:
        n = self.max_runs
        for side, label in ((base, "baseline"), (pat, "patched")):
            if side.invalid:
                return Need(0, 0, SETTLED, f"a {label} run was invalid: settled invalid (an invalid run is never re-drawn)")
            if side.skipped:
                return Need(0, 0, SETTLED, f"a {label} run reported it cannot run here: settled skipped")
        if kind == CONTROL:
            if base.failures or pat.failures:
                return Need(0, 0, SETTLED, "the control failed: settled invalid, and nothing of this reproducer can be proven")
            c = self.control_runs
            return Need(c, c, SEQUENTIAL, f"control passed {c}+{c} runs")
        mixed_base = base.passed > 0 and (kind != GUARD or base.failures > 0)
        if mixed_base or pat.failures:
            why = ("a baseline run passed" if kind != GUARD else "the baseline both passed and failed") if mixed_base \
                else "a patched run failed"
            return Need(n, n, FLAKY, f"flaky mode ({why}): both variants ran to the maximum, {n} runs")
        b, p = self.stop_after, self.min_passes
        if kind == GUARD and base.passed:
            return Need(b, p, SEQUENTIAL, f"regression guard: the baseline passed {b}/{b}, the patched build {p}/{p}")
        return Need(b, p, SEQUENTIAL, f"the baseline failed {b}/{b} in a row, the patched build passed {p}/{p}")

    @property
    def theta(self) -> float:
        """The theta every `proven` under this rule guarantees: proven needs >= min_passes patched passes."""
        return theta(self.min_passes, self.alpha)

    def min_runs_for_proof(self) -> int:
        """The smallest --runs with which `proven` is reachable at all under this rule."""
        stop, minp = self._asked[0], self._asked[1]
        n = 1
        while fisher_one_sided(min(stop, n), 0, 0, min(minp, n)) >= self.alpha:
            n += 1
        return n

    def min_runs_for_theta(self, target: float = 0.37) -> int:
        n = 1
        while theta(n, self.alpha) > target:
            n += 1
        return max(n, self._asked[1])

    def policy(self) -> dict:
        return {"rule": SEQUENTIAL, "max_runs": self.max_runs, "alpha": self.alpha, "theta": self.theta,
                "baseline_stop_after": self.stop_after, "patched_min_passes": self.min_passes,
                "control_runs": self.control_runs, "order": "launch",
                "note": (f"the baseline may stop after {self.stop_after} failures in a row, the patched build needs "
                         f"{self.min_passes} passes; a baseline pass or a patched failure runs the scenario to "
                         f"{self.max_runs} (flaky, sticky); controls {self.control_runs} per variant; runs counted in "
                         "launch order, every launched run tallied")}


Rule = FixedRule | SequentialRule


def proof_hint(rule: Rule) -> str:
    """Why this --runs cannot give `proven` (or cannot give theta <= 0.37), and the runs needed; '' if it can."""
    n = rule.max_runs
    need = rule.min_runs_for_proof()
    if n < need:
        if rule.name == FIXED:
            best = fisher_one_sided(n, 0, 0, n)
            return (f"with --fixed --runs {n} the smallest possible p is {best:.3g} (>= {rule.alpha}): "
                    f"proven needs --runs {need} or more")
        best = fisher_one_sided(min(rule._asked[0], n), 0, 0, min(rule._asked[1], n))
        return (f"with --runs {n} the smallest possible p is {best:.3g} (>= {rule.alpha}): proven needs --runs {need} "
                f"or more, and --runs {rule.min_runs_for_theta()} for a patched failure rate below 0.37 at 99 %")
    if rule.name == SEQUENTIAL and rule.theta > 0.37:
        return (f"with --runs {n} a proof shows only a patched failure rate below {rule.theta:.2f}; "
                f"--runs {rule.min_runs_for_theta()} or more gives below 0.37 at 99 %")
    return ""


# ---- the exact error of `proven` under a rule --------------------------------------------------


def _next_variant(nb: int, np_: int, need: Need) -> str | None:
    """The scheduler's interleaving: b0, p0, b1, p1, ... among the runs still needed."""
    wants_b, wants_p = nb < need.baseline, np_ < need.patched
    if wants_b and (nb <= np_ or not wants_p):
        return "baseline"
    if wants_p:
        return "patched"
    return None


@lru_cache(maxsize=32)
def terminal_paths(rule: Rule, kind: str = CHECKED) -> tuple[tuple[int, int, int, int, int], ...]:
    """Every state the rule can stop in, as (baseline runs, baseline failures, patched runs, patched
    failures, number of launch-order outcome sequences that end there). Controls assumed passing,
    no invalid or skipped runs (the cases where `proven` is possible at all)."""
    frontier = {(0, 0, 0, 0): 1}
    done: dict[tuple[int, int, int, int], int] = {}
    while frontier:
        nxt: dict[tuple[int, int, int, int], int] = {}
        for (nb, fb, np_, fp), ways in frontier.items():
            need = rule.need(kind, Side(nb, fb), Side(np_, fp))
            v = _next_variant(nb, np_, need)
            if v is None:
                done[(nb, fb, np_, fp)] = done.get((nb, fb, np_, fp), 0) + ways
                continue
            for failed in (0, 1):
                s = (nb + 1, fb + failed, np_, fp) if v == "baseline" else (nb, fb, np_ + 1, fp + failed)
                nxt[s] = nxt.get(s, 0) + ways
        frontier = nxt
    return tuple((*k, w) for k, w in sorted(done.items()))


@lru_cache(maxsize=64)
def proven_states(rule: Rule, kind: str = CHECKED, verdict: str = "proven") -> tuple:
    """The terminal states (with their path counts) whose verdict — computed by the very function
    `verify` uses — is `verdict`."""
    from lucepatch.verify.evidence import Tally
    from lucepatch.verify.verdict import judge

    out = []
    for nb, fb, np_, fp, ways in terminal_paths(rule, kind):
        v = judge(Tally(runs=nb, passed=nb - fb, failures=fb), Tally(runs=np_, passed=np_ - fp, failures=fp),
                  control=False, control_ok=True, guard=kind == GUARD, alpha=rule.alpha)[0]
        if v == verdict:
            out.append((nb, fb, np_, fp, ways))
    return tuple(out)


def proof_error(rule: Rule, q_base, q_patched, kind: str = CHECKED, verdict: str = "proven"):
    """P(verdict) when every baseline run fails with probability q_base and every patched run with
    q_patched, independently. Exact when given Fractions."""
    total = 0
    for nb, fb, np_, fp, ways in proven_states(rule, kind, verdict):
        total += ways * q_base ** fb * (1 - q_base) ** (nb - fb) * q_patched ** fp * (1 - q_patched) ** (np_ - fp)
    return total


def stored_error_bounds(rule: Rule, folder: Path) -> dict:
    """error_bounds(rule), kept in `folder` between runs: the enumeration costs ~0.2 s of CPU that would
    compete with verify's start-up (builds, the first launches) in every run. Keyed by the rule's
    parameters and this module's bytes, so a changed rule or a changed computation is enumerated again."""
    import hashlib
    import json

    from lucepatch.files import write_atomic

    key = hashlib.sha256(repr(rule._key()).encode() + b"\0" + Path(__file__).read_bytes()).hexdigest()[:24]
    path = folder / f"{key}.json"
    try:
        got = json.loads(path.read_text())
        if isinstance(got, dict) and set(got) >= {"proven_if_no_effect", "proven_if_patched_rate_at_least_theta"}:
            return got
    except (OSError, ValueError):
        pass
    got = error_bounds(rule)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(got, sort_keys=True))
    except OSError:  # an unwritable cache costs the enumeration next time, nothing else
        pass
    return got


@lru_cache(maxsize=32)
def error_bounds(rule: Rule, grid: int = 400, kind: str = CHECKED, exact: bool = True) -> dict:
    """Upper bounds of the two errors, from the exact P(proven) on a grid of failure rates
    (exact=True: in rational arithmetic; else in floats, relative error ~1e-15).

    P(proven) grows with q_b and falls with q_p (checked on the grid by the tests), so
    (i)  sup over q_b <= q_p is sup over q_b = q_p = q, and on [q_i, q_i+1] it is at most
         P(q_b = q_i+1, q_p = q_i): the maximum of those brackets bounds it rigorously;
    (ii) sup over q_p >= theta, any q_b, is P(q_b = 1, q_p = theta).
    """
    num = Fraction if exact else (lambda a, b=1: a / b)
    qs = [num(i, grid) for i in range(grid + 1)]
    no_effect = max(proof_error(rule, qs[i + 1], qs[i], kind) for i in range(grid))
    # theta as recorded (4 decimals, rounded up)
    at_theta = proof_error(rule, num(1), num(round(rule.theta * 10 ** 4), 10 ** 4), kind)
    return {"method": "exact enumeration of every launch-order outcome sequence the rule can produce",
            "proven_if_no_effect": float(no_effect), "proven_if_patched_rate_at_least_theta": float(at_theta),
            "theta": rule.theta}
