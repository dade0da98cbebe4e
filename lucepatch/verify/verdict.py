"""From run records to per-scenario and overall verdicts (DESIGN.md "Verdict").

proven     = controls pass on both variants, the patched build passes every run, and the
             baseline's failures are significant (one-sided Fisher exact, p < 0.01)
regression = the patched build fails where the baseline passes
not-proven = anything else that is a valid measurement (baseline did not fail enough, or the
             patched build still fails)
invalid    = some run could not prove what it ran, or a control failed (the environment, not the
             fix, is broken)
"""

from __future__ import annotations

from collections import Counter

from lucepatch.verify.runner import FAILURES, INVALID, PASS, RunRecord
from lucepatch.verify.stats import ALPHA, fisher_one_sided

PROVEN, NOT_PROVEN, REGRESSION, INVALID_V = "proven", "not-proven", "regression", "invalid"
_RANK = {PROVEN: 0, NOT_PROVEN: 1, REGRESSION: 2, INVALID_V: 3}


def tally(records: list[RunRecord]) -> dict:
    c = Counter(r.outcome for r in records)
    n = len(records)
    failures = sum(c[o] for o in FAILURES)
    return {"runs": n, "pass": c[PASS], "failures": failures, "invalid": c[INVALID],
            "failure_rate": round(failures / n, 4) if n else None, "outcomes": dict(sorted(c.items())),
            "first_error": next((r.first_error or r.reason for r in records if r.failed), "")}


def scenario_verdict(name: str, control: bool, recs: dict[str, list[RunRecord]],
                     control_ok: bool) -> dict:
    base, pat = tally(recs.get("baseline", [])), tally(recs.get("patched", []))
    out = {"scenario": name, "control": control, "baseline": base, "patched": pat}
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
    elif p >= ALPHA:
        v, why = NOT_PROVEN, f"baseline failures not significant (p={p:.3g} >= {ALPHA})"
    else:
        v, why = PROVEN, f"baseline failed {base['failures']}/{base['runs']}, patched 0/{pat['runs']}, p={p:.3g}"
    out.update(verdict=v, reason=why)
    return out


def overall(scenarios: list[dict]) -> str:
    checked = [s for s in scenarios if not s["control"]]
    if any(s["control"] and s["verdict"] != "pass" for s in scenarios):
        return INVALID_V
    if not checked:
        return NOT_PROVEN
    return max((s["verdict"] for s in checked), key=_RANK.__getitem__)
