"""From run records to per-scenario and overall verdicts (docs/design.md "Verdicts").

proven     = controls pass on both variants, the patched build passes every run, and the
             baseline's failures are significant (one-sided Fisher exact, p < 0.01)
regression = the patched build fails where the baseline passes
not-proven = anything else that is a valid measurement (baseline did not fail enough, or the
             patched build still fails)
invalid    = some run could not prove what it ran, or a control failed (the environment, not the
             fix, is broken)
guarded    = (regression-guard scenarios only) both variants pass every run: upstream already
             behaves at the baseline and the series keeps it so; counts as success, proves no fix
skipped    = every run of the scenario reported that it cannot run here (e.g. needs 2 GPUs); it is
             listed in the evidence and left out of the overall verdict
"""

from __future__ import annotations

from collections import Counter

from lucepatch.verify.runner import FAILURES, INVALID, PASS, SKIPPED, RunRecord
from lucepatch.verify.stats import ALPHA, fisher_one_sided

PROVEN, NOT_PROVEN, REGRESSION, INVALID_V = "proven", "not-proven", "regression", "invalid"
GUARDED, SKIPPED_V = "guarded", "skipped"
_RANK = {PROVEN: 0, GUARDED: 0, NOT_PROVEN: 1, REGRESSION: 2, INVALID_V: 3}


def tally(records: list[RunRecord]) -> dict:
    c = Counter(r.outcome for r in records)
    n = len(records)
    failures = sum(c[o] for o in FAILURES)
    return {"runs": n, "pass": c[PASS], "failures": failures, "invalid": c[INVALID], "skipped": c[SKIPPED],
            "failure_rate": round(failures / n, 4) if n else None, "outcomes": dict(sorted(c.items())),
            "first_error": next((r.first_error or r.reason for r in records if r.failed), "")}


def scenario_verdict(name: str, control: bool, recs: dict[str, list[RunRecord]],
                     control_ok: bool, guard: bool = False) -> dict:
    base, pat = tally(recs.get("baseline", [])), tally(recs.get("patched", []))
    out = {"scenario": name, "control": control, "regression_guard": guard, "baseline": base, "patched": pat}
    skipped = base["skipped"] + pat["skipped"]
    if skipped and skipped == base["runs"] + pat["runs"]:
        first = next((r.reason for v in recs.values() for r in v if r.outcome == SKIPPED), "")
        out.update(verdict=SKIPPED_V, p_value=None, reason=f"not run on this machine: {first}")
        return out
    if skipped:
        out.update(verdict=INVALID_V, p_value=None,
                   reason=f"{skipped} run(s) skipped and the others did not: the machine changed under the runs")
        return out
    if control:
        ok = base["invalid"] == 0 and pat["invalid"] == 0 and base["failures"] == 0 and pat["failures"] == 0
        out.update(verdict="pass" if ok else INVALID_V, p_value=None,
                   reason="" if ok else "control failed: the environment or the harness is broken, not the fix")
        return out
    p = fisher_one_sided(base["failures"], base["pass"], pat["failures"], pat["pass"])
    out["p_value"] = p
    if base["invalid"] or pat["invalid"]:
        v, why = INVALID_V, "some runs could not prove what they loaded"
    elif not control_ok:
        v, why = INVALID_V, "a control scenario failed"
    elif pat["failures"] and not base["failures"]:
        v, why = REGRESSION, "the patched build fails where the baseline passes"
    elif pat["failures"]:
        v, why = NOT_PROVEN, "the patched build still fails"
    elif guard and not base["failures"]:
        v, why = GUARDED, (f"regression guard: both variants pass {base['runs']}+{pat['runs']} runs "
                           "(already right at the baseline; proves no fix, guards against a regression)")
    elif p >= ALPHA:
        v, why = NOT_PROVEN, f"baseline failures not significant (p={p:.3g} >= {ALPHA})"
    else:
        v, why = PROVEN, f"baseline failed {base['failures']}/{base['runs']}, patched 0/{pat['runs']}, p={p:.3g}"
    out.update(verdict=v, reason=why)
    return out


def overall(scenarios: list[dict]) -> str:
    """Worst checked scenario; skipped scenarios are left out. Only guards, nothing proven:
    not-proven (a guard shows no fix)."""
    if any(s["control"] and s["verdict"] not in ("pass", SKIPPED_V) for s in scenarios):
        return INVALID_V
    checked = [s for s in scenarios if not s["control"] and s["verdict"] != SKIPPED_V]
    if not checked:
        return NOT_PROVEN
    worst = max((s["verdict"] for s in checked), key=_RANK.__getitem__)
    if _RANK[worst] > 0:
        return worst
    return PROVEN if any(s["verdict"] == PROVEN for s in checked) else NOT_PROVEN
