"""Quantitative scenarios on the runner (issue 38; docs/design.md "Quantitative scenarios"): rounds of
runs, one at a time, the rule's looks, the verdict, and what the evidence records of them.

A round runs every variant once — `bare` (no library preloaded) when the measure is a ratio to it, then
the baseline and the patched build — in an order rotated each round, each run a fresh process with a
fresh region file (lucepatch/verify/runner.py). Nothing else runs meanwhile: the binary scenarios'
slots are all done before the first rate is measured, and the rate scenarios run one after another.
The first `warmup_rounds` rounds are recorded and left out of the statistic. After each counted round
the rule (rate_stats.RateRule) may look; it stops at the first final look.

A run that does not pass (a crash, a failed check, a run that could not prove what it loaded) or that
reports no value measured nothing: the scenario is `invalid` with that run named, never judged on the
others. A run that reports it cannot run here makes the scenario `skipped`.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import report
from lucepatch.verify import evidence as ev
from lucepatch.verify.rate_stats import Look, look_at
from lucepatch.verify.reproducer import Reproducer, Scenario
from lucepatch.verify.runner import INVALID, PASS, SKIPPED, RunRecord, run_once
from lucepatch.verify.verdict import INVALID_V, SKIPPED_V, overall, tally

MODE = "rate"


@dataclass
class RateOutcome:
    """One quantitative scenario's runs and verdict."""
    key: str
    scenario: Scenario
    records: list[RunRecord] = field(default_factory=list)
    measure: object = None  # the Measure as run (verify's --runs and --fixed applied)
    values: dict = field(default_factory=dict)  # variant -> [value per counted round]
    looks: list[Look] = field(default_factory=list)
    rounds: list[dict] = field(default_factory=list)  # {round, order, warmup, values}
    verdict: str = ""
    reason: str = ""
    stop_reason: str = ""


def is_rate(scenario: Scenario) -> bool:
    return scenario.measure is not None


def order_of(variants: list[str], rnd: int) -> list[str]:
    """Round `rnd`'s order: the variants rotated by rnd, so each takes each place in turn."""
    k = rnd % len(variants)
    return variants[k:] + variants[:k]


@dataclass
class RateContext:
    """What a run needs beyond its scenario (the same as a binary scenario's, lucepatch.verify.session)."""
    binaries: dict  # reproducer name -> compiled program (C) or the workload's build folder
    libs: dict  # variant -> library path (baseline, patched)
    shas: dict  # variant -> sha256
    driver_env: dict
    isolate: bool = False
    launcher: Path | None = None
    bind_now: bool = True
    reporter: Path | None = None
    shims: dict = field(default_factory=dict)
    unmet: dict = field(default_factory=dict)  # reproducer:scenario -> why it cannot run here
    simulated: bool = False  # the runs meet the simulated driver
    max_runs: int | None = None  # verify's --runs: runs per variant, warm-up included
    fixed: bool = False  # verify's --fixed


def measure_scenario(repro: Reproducer, scenario: Scenario, ctx: RateContext, scratch: Path, launch0: int = 0,
                     run=run_once) -> RateOutcome:
    """Every round the rule needs of one quantitative scenario (`run`: the runner, replaced in tests)."""
    m = scenario.measure.within(ctx.max_runs, ctx.fixed)
    key = f"{repro.name}:{scenario.name}"
    out = RateOutcome(key, scenario, values={v: [] for v in m.variants}, measure=m)
    rule = m.rule
    if ctx.unmet.get(key):
        out.verdict, out.reason = SKIPPED_V, f"not run on this machine: {ctx.unmet[key]}"
        out.stop_reason = "not run: its requirements are not met here"
        return out
    if ctx.simulated and not m.simulated:
        out.verdict = SKIPPED_V
        out.reason = ("not run on this machine: a rate a GPU has to give; on the simulated driver it would measure "
                      "lucepatch's model of a GPU (verify it with --driver real; tests/test_sm_limit.py runs it on "
                      "the model)")
        out.stop_reason = "not run: the simulated driver"
        return out
    last = m.warmup_rounds + rule.looks[-1]
    launch = launch0
    for rnd in range(last):
        warm = rnd < m.warmup_rounds
        order = order_of(m.variants, rnd)
        got = {}
        for v in order:
            rec = run(ctx.binaries.get(repro.name), repro, scenario, v, rnd, ctx.libs.get(v), ctx.driver_env, scratch,
                      expected_sha256=ctx.shas.get(v), isolate=ctx.isolate, launcher=ctx.launcher,
                      bind_now=ctx.bind_now, reporter=ctx.reporter, bind_shim=ctx.shims.get(v))
            rec.scenario, rec.launch = key, launch
            launch += 1
            out.records.append(rec)
            if rec.outcome == SKIPPED:
                out.verdict, out.reason = SKIPPED_V, f"not run on this machine: {rec.reason}"
                out.stop_reason = f"{v} run {rnd} reported it cannot run here"
                return out
            value = rec.values.get(m.value)
            if rec.outcome != PASS or not _number(value):
                why = rec.reason or rec.first_error or rec.outcome
                if rec.outcome == PASS:
                    why = f"it reported no number for {m.value!r}"
                out.verdict = INVALID_V
                out.reason = (f"the {v} run of round {rnd} measured nothing ({rec.outcome}: {why[:200]}); a rate is "
                              "judged only on runs that measured it")
                out.stop_reason = f"{v} run {rnd} did not measure"
                return out
            got[v] = float(value)
        out.rounds.append({"round": rnd, "order": order, "warmup": warm, "values": got})
        report.progress(f"{key}: round {rnd}{' (warm-up, not counted)' if warm else ''}: "
                        + ", ".join(f"{v} {got[v]:.4g}" for v in m.variants))
        if warm:
            continue
        for v in m.variants:
            out.values[v].append(got[v])
        look = look_at(rule, m.bound, out.values["baseline"], out.values["patched"],
                       out.values.get(m.per) if m.per else None, guard=scenario.regression_guard,
                       what="ratio" if m.per else "value", unit=m.unit)
        if look is None:
            continue
        out.looks.append(look)
        if look.decision.final:
            out.verdict, out.reason = look.decision.verdict, look.decision.reason
            n = len(rule.looks)
            out.stop_reason = (f"{'decided' if look.rounds < rule.looks[-1] else 'the last look'} after {look.rounds} "
                               f"counted round(s) (+{m.warmup_rounds} warm-up), look {len(out.looks)} of {n}")
            return out
    raise AssertionError("the rule's last look is always final")  # pragma: no cover — rate_stats.decide


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def not_measured(selected: list[tuple[Reproducer, Scenario]], why: str) -> list[RateOutcome]:
    """Quantitative scenarios this verification does not measure (a backend's pods run one scenario
    each, in parallel: no rate measured there would be the scenario's alone), skipped with `why`."""
    return [RateOutcome(f"{r.name}:{s.name}", s, values={v: [] for v in s.measure.variants}, verdict=SKIPPED_V,
                        reason=f"not run on this machine: {why}", stop_reason="not run")
            for r, s in selected if is_rate(s)]


def run_rate_scenarios(selected: list[tuple[Reproducer, Scenario]], ctx: RateContext, *, launch0: int = 0,
                       run=run_once) -> list[RateOutcome]:
    """Every selected quantitative scenario, one after another, in a scratch folder of their own."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="lucepatch-rates-") as scratch:
        for repro, sc in selected:
            m = sc.measure.within(ctx.max_runs, ctx.fixed)
            report.progress(f"{repro.name}:{sc.name}: measuring {m.value} — rounds of "
                            f"{', '.join(m.variants)}, {m.warmup_rounds} warm-up, looks after {m.rule.looks}")
            o = measure_scenario(repro, sc, ctx, Path(scratch), launch0, run=run)
            launch0 += len(o.records)
            outcomes.append(o)
            report.progress(f"{o.key}: {o.verdict} ({o.stop_reason})")
    return outcomes


# ---- into the evidence --------------------------------------------------------------------------

def scenario_result(o: RateOutcome, repro: Reproducer, control_ok: bool) -> ev.ScenarioResult:
    """The ScenarioResult of a quantitative scenario; its numbers ride in `measure`."""
    m = o.measure or o.scenario.measure
    recs = {v: [r for r in o.records if r.variant == v] for v in m.variants}
    verdict, reason = o.verdict, o.reason
    if verdict not in (SKIPPED_V, INVALID_V) and not control_ok:
        verdict, reason = INVALID_V, f"a control scenario failed (the rates measured: {reason})"
    res = ev.ScenarioResult(scenario=o.key, control=False, verdict=verdict, baseline=tally(recs.get("baseline", [])),
                            patched=tally(recs.get("patched", [])), reason=reason, p_value=None,
                            regression_guard=o.scenario.regression_guard)
    res.reproducer, res.description = repro.name, o.scenario.description
    res.runs_spent = {v: len(r) for v, r in recs.items()}
    res.stop_reason, res.mode = o.stop_reason, MODE
    final = o.looks[-1] if o.looks else None
    res.extra["measure"] = {
        **m.to_json(),
        "rate_rule": m.rule.to_json(),
        "variants": m.variants,
        "rounds": o.rounds,
        "looks": [lk.to_json() for lk in o.looks],
        **({"baseline": final.baseline.to_json(), "patched": final.patched.to_json()} if final else {}),
    }
    return res


def attach(evidence: ev.Evidence, outcomes: list[RateOutcome], repros: list[Reproducer]) -> None:
    """Put the quantitative scenarios' results and runs into `evidence` (after each reproducer's other
    scenarios, in reproducer order) and recompute the overall verdict."""
    if not outcomes:
        return
    by_key = {o.key: o for o in outcomes}
    ordered = []
    for repro in repros:
        own = [s for s in evidence.scenarios if (s.reproducer or s.scenario.split(":")[0]) == repro.name]
        control_ok = all(s.verdict in ("pass", "skipped", "not-applicable") for s in own if s.control)
        ordered += own
        ordered += [scenario_result(by_key[f"{repro.name}:{s.name}"], repro, control_ok)
                    for s in repro.scenarios if f"{repro.name}:{s.name}" in by_key]
    evidence.scenarios = ordered
    for o in outcomes:
        evidence.runs.extend(_run_json(r) for r in o.records)
    evidence.skipped = [{"scenario": s.scenario, "reason": s.reason} for s in ordered
                        if s.verdict in ("skipped", "not-applicable")]
    if evidence.driver_kind not in ("unknown", "mixed"):  # a driver no run could name stays invalid
        evidence.verdict = overall(ordered)
    evidence.run_policy.extra["rates"] = {
        "note": ("quantitative scenarios: rounds of one run per variant (order rotated each round), one run at a "
                 "time with nothing else running, a fresh region file per run, warm-up rounds left out; the "
                 "interval of the rate (t on log ratios to the same round's bare run, or on the values) at "
                 "1 - alpha/K two-sided for K looks; proven = the baseline's interval outside the bound and the "
                 "patched build's inside (docs/design.md \"Quantitative scenarios\")")}


def _run_json(r: RunRecord) -> dict:
    d = {k: v for k, v in r.to_json().items() if k not in ("log_tail", "checks", "hami_log")}
    if r.outcome not in (PASS, SKIPPED):
        d["log_tail"] = r.log_tail
    if r.outcome == INVALID and r.hami_log:
        d["hami_log"] = r.hami_log
    return d
