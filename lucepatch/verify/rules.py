"""How many runs a scenario gets: the fixed rule and the sequential rule (the exact error of `proven`
under each is lucepatch.verify.bounds).

fixed       every scenario runs `max_runs` per variant (what `verify --fixed` and every retirement
            equivalence check use).
sequential  spend runs only while the verdict is open (issue 13, settling: issue 29):
              checked scenario  the baseline may stop after `baseline_stop_after` (5) failures in a
                                row from its first run, the patched build needs `patched_min_passes`
                                (10) passing runs; a baseline pass or a patched failure switches the
                                scenario to *flaky* mode: both variants may run to `max_runs`, and it
                                stays flaky (sticky, as syzbot's bisection does) — until it *settles*;
              regression guard  the same, except that a baseline that passes every run is what a
                                guard expects: only a *mixed* baseline (passes and failures) or a
                                patched failure goes flaky;
              settled           once no continuation to `max_runs` can end `proven` (the patched build
                                failed, or the baseline passed too often for Fisher's p to fall below
                                alpha even if every later baseline run failed), the verdict is one of
                                not-proven / regression, and regression needs a baseline that never
                                fails: the baseline runs until its first failure (then not-proven is
                                settled) or `max_runs` (regression), and the patched build only until its
                                failure rate's two-sided `estimate_confidence` (95 %) Clopper-Pearson
                                interval is at most `estimate_width` (0.5) wide, or `max_runs`. A checked
                                scenario that passed on both sides so far (its baseline does not reproduce
                                the bug) can still end regression once proven is out of reach — only
                                through a patched failure: the patched build runs to `max_runs`, the
                                baseline waits until one comes (14 + 20 runs at N = 20, not 20 + 20). Every
                                outcome sequence thus gets the verdict the flaky run to `max_runs` gives
                                it, so every error probability is the old rule's (tests/test_sequential.py
                                proves it by enumeration); `settle=False` is that old rule;
              control           `control_runs` (5) per variant; the first failure settles it (invalid)
                                and stops every scenario of that reproducer;
              any scenario      an invalid run settles it (invalid; never silently re-drawn), a skipped
                                run settles it (skipped, or invalid if the variants disagree).

A rule is a pure function of the *completed* runs' counts, and the scheduler
(lucepatch.verify.schedule) launches only what the rule needs and waits for every launched run.
Without settling the runs a scenario ends with do not depend on which run finished first (a SIGSEGV
finishes sooner than a pass): the early stop happens only when all of the first 5 + 10 runs are in,
and any run past them exists only because one of those switched the scenario to flaky mode. A
settling scenario stops launching once it settles; runs launched before that (in parallel, waiting
for the settling one) are still waited for and tallied — so it can end with more runs than a serial
verify, never with another verdict, and never with more than the old rule.

Both errors of `proven` (lucepatch.verify.bounds, recorded as run_policy.bounds):
  (i)  P(proven | q_b <= q_p)  <= alpha   (no effect, or the patch makes it worse)
  (ii) P(proven | q_p >= theta) <= alpha  (patched 0/n  =>  failure rate < theta at 1 - alpha)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lucepatch.verify.stats import ALPHA, clopper_pearson, fisher_one_sided

CHECKED, GUARD, CONTROL = "checked", "guard", "control"
FIXED, SEQUENTIAL, FLAKY, SETTLED = "fixed", "sequential", "flaky", "settled"
# a scenario whose verdict can no longer change: only the runs that decide not-proven vs regression
# and those that estimate the patched failure rate are still spent (evidence mode "settled")
DECIDED = "decided"


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
                 patched_min_passes: int = 10, control_runs: int = 5, settle: bool = True,
                 estimate_width: float = 0.5, estimate_confidence: float = 0.95):
        self.max_runs, self.alpha = int(max_runs), alpha
        self.stop_after = min(baseline_stop_after, self.max_runs)
        self.min_passes = min(patched_min_passes, self.max_runs)
        self.control_runs = min(control_runs, self.max_runs)
        self._asked = (baseline_stop_after, patched_min_passes, control_runs)
        self.settle = settle
        self.estimate_width, self.estimate_confidence = estimate_width, estimate_confidence

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
            decided = self._decided(base, pat) if self.settle else None
            if decided is not None:
                return decided
            why = ("a baseline run passed" if kind != GUARD else "the baseline both passed and failed") if mixed_base \
                else "a patched run failed"
            return Need(n, n, FLAKY, f"flaky mode ({why}): both variants ran to the maximum, {n} runs")
        b, p = self.stop_after, self.min_passes
        if kind == GUARD and base.passed:
            return Need(b, p, SEQUENTIAL, f"regression guard: the baseline passed {b}/{b}, the patched build {p}/{p}")
        return Need(b, p, SEQUENTIAL, f"the baseline failed {b}/{b} in a row, the patched build passed {p}/{p}")

    # ---- settling (issue 29) -------------------------------------------------------------------
    def proof_reachable(self, base: Side) -> bool:
        """Can some continuation to max_runs still end `proven`? Its best case: every later baseline run
        fails and every patched run passes (Fisher's p falls with both)."""
        n = self.max_runs
        return fisher_one_sided(base.failures + (n - base.runs), base.passed, 0, n) < self.alpha

    def _decided(self, base: Side, pat: Side) -> Need | None:
        """The Need of a scenario whose verdict can no longer be `proven` (None while it still can)."""
        n = self.max_runs
        if not pat.failures and self.proof_reachable(base):
            return None
        if not pat.failures and not base.failures:
            # both passed every run and proven is out of reach: the verdict is not-proven unless a patched run
            # still fails (regression, if the baseline then never fails). Only the patched build's runs can
            # show that, so it runs to N; the baseline's runs matter only once a patched run has failed (the
            # branch below), so it waits — the 6 baseline runs the flaky run to N spent after its 14th pass at
            # N = 20 decided nothing
            return Need(base.runs, n, DECIDED,
                        f"settled: the baseline passed {base.runs}/{base.runs}, so proven is impossible; the patched "
                        f"build runs to {n} (a failure there is a regression if the baseline then never fails), the "
                        f"baseline waits until one does")
        est = self.estimate_runs(pat)
        rate = self.estimate_text(pat, est)
        if pat.failures and not base.failures:
            # every baseline run so far passed: one failure settles not-proven, so the runs in flight double
            # (1, 2, 4, ...) instead of all N at once — a baseline that fails soon costs few runs launched in
            # vain, one that never fails still reaches N in log2(N) rounds
            return Need(min(n, max(1, 2 * base.runs)), est, DECIDED,
                        f"settled: the patched build failed, so proven is impossible; the baseline runs until its first "
                        f"failure (not-proven) or {n} runs (regression); {rate}")
        if pat.failures:
            return Need(base.runs, est, DECIDED, f"settled not-proven: the patched build and the baseline both failed "
                                                 f"(no run can change that); {rate}")
        return Need(base.runs, est, DECIDED, f"settled not-proven: the baseline passed {base.passed} of {base.runs}, so "
                                             f"even failing every run to {n} gives p >= {self.alpha}; {rate}")

    def estimate_done(self, failures: int, runs: int) -> bool:
        lo, hi = clopper_pearson(failures, runs, self.estimate_confidence)
        return hi - lo <= self.estimate_width + 1e-12

    def estimate_runs(self, pat: Side) -> int:
        """The patched runs the failure-rate estimate needs in every case: the fewest m >= pat.runs for
        which some outcome of the runs still to come gives an interval at most estimate_width wide
        (so all of them are needed, whatever they show), at most max_runs."""
        k, m = pat.failures, pat.runs
        for total in range(m, self.max_runs + 1):
            if any(self.estimate_done(k + x, total) for x in range(total - m + 1)):
                return total
        return self.max_runs

    def estimate_text(self, pat: Side, est: int) -> str:
        pct = f"{100 * self.estimate_confidence:g} %"
        if pat.runs >= est:
            lo, hi = clopper_pearson(pat.failures, pat.runs, self.estimate_confidence)
            return (f"patched failure rate {pat.failures}/{pat.runs}, in [{math.floor(lo * 100) / 100:.2f}, "
                    f"{math.ceil(hi * 100) / 100:.2f}] at {pct}")
        return (f"the patched build runs until its failure rate's {pct} interval is at most {self.estimate_width:g} "
                f"wide (or {self.max_runs} runs)")

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
        out = {"rule": SEQUENTIAL, "max_runs": self.max_runs, "alpha": self.alpha, "theta": self.theta,
               "baseline_stop_after": self.stop_after, "patched_min_passes": self.min_passes,
               "control_runs": self.control_runs, "order": "launch",
               "note": (f"the baseline may stop after {self.stop_after} failures in a row, the patched build needs "
                        f"{self.min_passes} passes; a baseline pass or a patched failure runs the scenario to "
                        f"{self.max_runs} (flaky, sticky)"
                        + (" until it settles (proven no longer reachable): then the baseline runs until its first "
                           f"failure or {self.max_runs} (not-proven or regression), the patched build until its failure "
                           f"rate's {100 * self.estimate_confidence:g} % Clopper-Pearson interval is at most "
                           f"{self.estimate_width:g} wide" if self.settle else "")
                        + f"; controls {self.control_runs} per variant; runs counted in launch order, every launched "
                          "run tallied")}
        if self.settle:
            out["settle"] = {
                "when": "no continuation to max_runs can end proven: a patched run failed, or the baseline passed so "
                        "often that failing every later run leaves Fisher's p >= alpha",
                "baseline": "runs until its first failure (not-proven settled) or max_runs (regression)",
                "patched": {"interval": "clopper-pearson", "confidence": self.estimate_confidence,
                            "max_width": self.estimate_width,
                            "runs": "until the failure rate's interval is at most max_width wide, or max_runs"},
                "errors": "every outcome sequence gets the verdict the run to max_runs gives it: every error "
                          "probability equals the rule without settling (tests/test_sequential.py, by enumeration)"}
        return out


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
