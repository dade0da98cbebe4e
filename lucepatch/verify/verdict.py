"""From run records to per-scenario and overall verdicts (docs/design.md "Verdicts").

proven     = controls pass on both variants, the patched build passes every run, and the
             baseline's failures are significant (one-sided Fisher exact, p < 0.01)
regression = the patched build fails where the baseline passes
worse      = both fail, but the patched build crashes or hangs where the baseline only gave a wrong
             value (a failed check, a wrong CUresult, a logged error): in ref-vs-ref mode an upstream
             that made a bug worse (issue 36: 52f33fc's SIGSEGV where 8f3a89c left an allocation
             uncharged); the reason gives both sides' outcomes and first errors
not-proven = anything else that is a valid measurement (baseline did not fail enough, or the
             patched build still fails)
invalid    = some run could not prove what it ran, or a control failed (the environment, not the
             fix, is broken)
guarded    = (regression-guard scenarios only) both variants pass every run: upstream already
             behaves at the baseline and the series keeps it so; counts as success, proves no fix
skipped    = every run of the scenario reported that it cannot run here (e.g. needs 2 GPUs); it is
             listed in the evidence and left out of the overall verdict
not-applicable = the target declares (target.toml [not_applicable], with the reason) that the
             scenario's assumptions do not hold at its base (e.g. an older release line that does
             not account what the scenario checks); not run, listed with the reason, left out of
             the overall verdict — never a pass

The same `judge` decides under the fixed and the sequential rule (lucepatch.verify.rules
enumerates it to bound the errors), on the tallies of whatever runs the rule spent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from lucepatch.verify.evidence import ScenarioResult, Tally
from lucepatch.verify.rules import fmt_theta, theta
from lucepatch.verify.runner import FAILURES, INVALID, PASS, SKIPPED
from lucepatch.verify.stats import ALPHA, fisher_one_sided

PROVEN, NOT_PROVEN, REGRESSION, INVALID_V, WORSE = "proven", "not-proven", "regression", "invalid", "worse"
GUARDED, SKIPPED_V, PASS_V, NOT_APPLICABLE = "guarded", "skipped", "pass", "not-applicable"
_LEFT_OUT = (SKIPPED_V, NOT_APPLICABLE)
CANNOT_LOAD = "cannot load: "  # a run's reason when glibc's loader refused a library (hami_log.loader_reason)
_RANK = {PROVEN: 0, GUARDED: 0, NOT_PROVEN: 1, REGRESSION: 2, WORSE: 2, INVALID_V: 3}
SEVERE = ("crash", "timeout")  # run outcomes worse than a wrong value


def tally(records) -> Tally:
    """Counts of one variant's runs (anything with .outcome, .first_error, .reason, .failed)."""
    c = Counter(r.outcome for r in records)
    n = len(records)
    failures = sum(c[o] for o in FAILURES)
    first = next((r.first_error or r.reason for r in records if r.failed), "") or next(
        (r.reason for r in records if r.outcome == INVALID and (r.reason or "").startswith(CANNOT_LOAD)), "")
    return Tally(runs=n, passed=c[PASS], failures=failures, invalid=c[INVALID], skipped=c[SKIPPED],
                 failure_rate=round(failures / n, 4) if n else None, outcomes=dict(sorted(c.items())),
                 first_error=first)


def judge(base: Tally, pat: Tally, *, control: bool, control_ok: bool, guard: bool = False,
          alpha: float = ALPHA, guard_why: str = "") -> tuple[str, str, float | None]:
    """(verdict, reason, p-value) of one scenario from its two tallies; guard_why: why a guard is one
    here (e.g. the upstream commit that fixed it), named in its `guarded` reason."""
    skipped = base.skipped + pat.skipped
    if skipped and skipped == base.runs + pat.runs:
        return SKIPPED_V, "not run on this machine", None
    if skipped:
        return INVALID_V, f"{skipped} run(s) skipped and the others did not: the machine changed under the runs", None
    if control:
        bad = [(n, t) for n, t in (("baseline", base), ("patched", pat)) if t.invalid or t.failures]
        if not bad:
            return PASS_V, "", None
        unloadable = [(n, t) for n, t in bad if t.first_error.startswith(CANNOT_LOAD)]
        if unloadable:  # the build's library never ran: say so in the loader's words
            return INVALID_V, "; ".join(f"{t.first_error} — the {n} build" for n, t in unloadable), None
        # name the build and the evidence; never guess at a cause that was not measured
        what = "; ".join(f"{n} {t.failures} failed, {t.invalid} invalid of {t.runs}"
                         + (f" (first error: {t.first_error[:120]})" if t.first_error else "") for n, t in bad)
        if len(bad) == 1:
            other = "patched" if bad[0][0] == "baseline" else "baseline"
            return INVALID_V, (f"control failed on the {bad[0][0]} build only ({what}; "
                               f"{_other_side(other, pat if other == 'patched' else base)}): the reproducer's "
                               "assumptions do not hold on that build"), None
        return INVALID_V, f"control failed on both builds ({what}): nothing can be proven with this harness here", None
    p = fisher_one_sided(base.failures, base.passed, pat.failures, pat.passed)
    if base.invalid or pat.invalid:
        unloadable = [(n, t) for n, t in (("baseline", base), ("patched", pat)) if t.first_error.startswith(CANNOT_LOAD)]
        if unloadable:
            return INVALID_V, "; ".join(f"{t.first_error} — the {n} build" for n, t in unloadable), p
        return INVALID_V, "some runs could not prove what they loaded", p
    if not control_ok:
        return INVALID_V, "a control scenario failed", p
    if pat.failures and not base.failures:
        return REGRESSION, "the patched build fails where the baseline passes", p
    if pat.failures and severe(pat) and not severe(base):
        return WORSE, (f"worse on the patched build: {signature(pat)}, where the baseline gave a wrong value: "
                       f"{signature(base)}"), p
    if pat.failures:
        return NOT_PROVEN, "the patched build still fails", p
    bound = f"patched 0/{pat.runs} ⇒ failure rate < {fmt_theta(theta(pat.runs, alpha))} at {100 * (1 - alpha):g} %"
    if guard and not base.failures:
        return GUARDED, (f"regression guard{' (' + guard_why + ')' if guard_why else ''}: both variants pass "
                         f"{base.runs}+{pat.runs} runs "
                         f"(already right at the baseline; proves no fix, guards against a regression; {bound})"), p
    if p >= alpha:
        return NOT_PROVEN, f"baseline failures not significant (p={p:.3g} >= {alpha})", p
    return PROVEN, f"baseline failed {base.failures}/{base.runs}, patched 0/{pat.runs}, p={p:.3g}; {bound}", p


def severe(t: Tally) -> int:
    """How many of the runs crashed or hung."""
    return sum((t.outcomes or {}).get(o, 0) for o in SEVERE)


def signature(t: Tally) -> str:
    """One side's failures as the verdict names them: each failing outcome with its count, and the
    first error (the run's own words: a signal, a check, a HAMi-core log line)."""
    counts = ", ".join(f"{o} {n}/{t.runs}" for o, n in sorted((t.outcomes or {}).items()) if o != "pass")
    return counts + (f" (first error: {t.first_error[:160]})" if t.first_error else "")


def _other_side(name: str, t: Tally) -> str:
    """What the control did on the build it did not fail on — measured, never assumed: under the
    sequential rule the first failure settles a control, so the other build may not have run it."""
    if not t.runs:
        return f"the {name} build never ran it: the first failure settled the control"
    return f"it passes on the {name} build ({t.passed}/{t.runs} runs)"


def scenario_verdict(name: str, control: bool, recs: dict[str, list], control_ok: bool,
                     guard: bool = False, alpha: float = ALPHA, guard_why: str = "") -> ScenarioResult:
    base, pat = tally(recs.get("baseline", [])), tally(recs.get("patched", []))
    verdict, reason, p = judge(base, pat, control=control, control_ok=control_ok, guard=guard, alpha=alpha,
                               guard_why=guard_why)
    if verdict == SKIPPED_V:
        first = next((r.reason for v in recs.values() for r in v if r.outcome == SKIPPED), "")
        reason = f"{reason}: {first}"
    res = ScenarioResult(scenario=name, control=control, verdict=verdict, baseline=base, patched=pat,
                         reason=reason, p_value=p, regression_guard=guard)
    if verdict in (PROVEN, GUARDED):
        res.theta = theta(pat.runs, alpha)
    return res


def _get(s, key):
    return s[key] if isinstance(s, dict) else getattr(s, key)


def overall(scenarios: list) -> str:
    """Worst checked scenario; skipped scenarios are left out. Only guards, nothing proven:
    not-proven (a guard shows no fix). Takes ScenarioResults or their JSON."""
    if any(_get(s, "control") and _get(s, "verdict") not in (PASS_V, *_LEFT_OUT) for s in scenarios):
        return INVALID_V
    checked = [s for s in scenarios if not _get(s, "control") and _get(s, "verdict") not in _LEFT_OUT]
    if not checked:
        return NOT_PROVEN
    worst = max((_get(s, "verdict") for s in checked), key=_RANK.__getitem__)
    if _RANK[worst] > 0:
        return worst
    return PROVEN if any(_get(s, "verdict") == PROVEN for s in checked) else NOT_PROVEN


def not_applicable(scenario: str, control: bool, reason: str, where: str) -> ScenarioResult:
    """The result of a scenario the target declares not applicable at its base (not run)."""
    return ScenarioResult(scenario=scenario, control=control, verdict=NOT_APPLICABLE, baseline=tally([]),
                          patched=tally([]), reason=f"not applicable at this base ({where}): {reason}",
                          regression_guard=False)


def split_not_applicable(repros, scenario_filter, declared: dict) -> tuple[list, list | None]:
    """(reproducers to run, scenario filter) once the declared not-applicable ones are left out.
    A key is a reproducer (all of it, controls included) or `reproducer:scenario`."""
    if not declared:
        return list(repros), scenario_filter
    run = [r for r in repros if r.name not in declared]
    if not any(":" in k for k in declared):
        return run, scenario_filter
    keys = [f"{r.name}:{s.name}" for r in run for s in r.scenarios if not s.control
            and (not scenario_filter or s.name in scenario_filter or f"{r.name}:{s.name}" in scenario_filter)]
    return run, [k for k in keys if k not in declared] or None


def with_upstream_fixes(repros, fixed: dict) -> list:
    """The reproducers with each `reproducer:scenario` of `fixed` (key -> why: the reproducer's
    `fixed_upstream` commit, in the baseline's history) run as a regression guard: upstream fixed it
    at or before the baseline's commit, so both sides passing is `guarded`, not "baseline never
    failed" (issue 36: #217's pool charging at 52f33fc)."""
    if not fixed:
        return list(repros)
    out = []
    for r in repros:
        scen = [replace(s, regression_guard=True, guard_why=fixed[f"{r.name}:{s.name}"])
                if f"{r.name}:{s.name}" in fixed and not s.control else s for s in r.scenarios]
        out.append(replace(r, scenarios=scen) if scen != r.scenarios else r)
    return out


def with_declared_guards(repros, declared: dict) -> list:
    """The reproducers with each `reproducer:scenario` the target declares in [regression_guard] run
    as a regression guard (its reason as `fixed_upstream`): upstream fixed it at this base, so both
    sides passing is `guarded`, the series keeping it fixed (issue 36)."""
    if not declared:
        return list(repros)
    out = []
    for r in repros:
        scen = [replace(s, regression_guard=True, fixed_upstream=declared[f"{r.name}:{s.name}"],
                        guard_why=f"{declared[f'{r.name}:{s.name}']}: target.toml [regression_guard]")
                if f"{r.name}:{s.name}" in declared and not s.control else s for s in r.scenarios]
        out.append(replace(r, scenarios=scen) if scen != r.scenarios else r)
    return out
