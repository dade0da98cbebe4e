"""Quantitative scenarios end to end without processes (lucepatch/verify/rates.py, issue 38): the rounds
(order rotated, warm-up left out), the rule's looks and its early stop, a run that measured nothing or
cannot run here, the evidence (schema-valid), the verdict table, the page's plots and the PR body's
rates table. The runs are made-up records with known rates: what is checked is what lucepatch does
with them. One run on the simulated driver is in tests/test_sm_limit.py."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from lucepatch.errors import UsageError
from lucepatch.show.model import build_view
from lucepatch.show.page import html
from lucepatch.show.terminal import verdict_parts
from lucepatch.verify import evidence as ev
from lucepatch.verify import rates
from lucepatch.verify.measure import Measure
from lucepatch.verify.reproducer import load_reproducer_dir
from lucepatch.verify.runner import INVALID, PASS, SKIPPED, RunRecord

ROOT = Path(__file__).resolve().parent.parent


REPRO = """
name = "sm-limit"
target = "hami-core"
artifact = "libvgpu.so"
sources = ["r.c"]
[[scenario]]
name = "control"
control = true
[[scenario]]
name = "sm50-eager"
[scenario.measure]
value = "tok_per_s"
per = "bare"
lo = 0.40
hi = 0.60
unit = "x bare"
[[scenario]]
name = "sm50-graph"
[scenario.measure]
value = "tok_per_s"
per = "bare"
lo = 0.40
hi = 0.60
unit = "x bare"
[[scenario]]
name = "tenants-eager"
[scenario.measure]
value = "share_sm30"
lo = 0.20
hi = 0.40
unit = "share"
[[scenario]]
name = "overhead-eager"
regression_guard = true
[scenario.measure]
value = "tok_per_s"
per = "bare"
lo = 0.99
unit = "x bare"
alpha = 0.05
rule = "fixed"
[[scenario]]
name = "blackwell-sm50"
[scenario.measure]
value = "tok_per_s"
per = "bare"
lo = 0.40
hi = 0.60
unit = "x bare"
simulated = true
"""


@pytest.fixture(scope="module")
def repro(tmp_path_factory):
    """A reproducer shaped like reproducers/sm-limit (the same declarations; its program never runs here)."""
    d = tmp_path_factory.mktemp("repros") / "sm-limit"
    d.mkdir()
    (d / "r.c").write_text("int main(void) { return 0; }\n")
    (d / "reproducer.toml").write_text(REPRO)
    return load_reproducer_dir(d)


def fake_run(rates_of: dict, seed: int = 1, outcome: dict | None = None, series: bool = True):
    """A runner whose runs report `rates_of[variant]` x noise (1 %), and `outcome[(variant, round)]`."""
    rng = random.Random(seed)
    calls = []

    def run(binary, repro, scenario, variant, index, preload, driver_env, scratch, **kw):
        calls.append((variant, index))
        o = (outcome or {}).get((variant, index), PASS)
        m = scenario.measure
        value = rates_of[variant] * math.exp(rng.gauss(0, 0.01))
        rec = RunRecord(variant=variant, scenario=scenario.name, index=index, outcome=o, returncode=0, signal=None,
                        duration_s=1.0, reason="needs a Blackwell GPU" if o == SKIPPED else "")
        if o == PASS:
            rec.values = {m.value: value}
            if series:
                rec.series = {m.value: {"step_s": 0.25, "unit": "tok/s", "values": [value] * 4}}
        return rec

    run.calls = calls
    return run


def ctx():
    return rates.RateContext(binaries={}, libs={"baseline": Path("/b.so"), "patched": Path("/p.so")},
                             shas={}, driver_env={})


def test_rounds_rotate_warmup_is_left_out_and_the_rule_stops_early(repro, tmp_path):
    sc = repro.scenario("sm50-graph")
    run = fake_run({"bare": 550.0, "baseline": 548.0, "patched": 290.0})
    o = rates.measure_scenario(repro, sc, ctx(), tmp_path, run=run)
    assert o.verdict == "proven"
    # 1 warm-up round + 4 counted (the first look), each bare, baseline, patched once, rotated
    assert len(o.rounds) == 5 and o.rounds[0]["warmup"] and not o.rounds[1]["warmup"]
    assert [r["order"] for r in o.rounds[:3]] == [["bare", "baseline", "patched"], ["baseline", "patched", "bare"],
                                                  ["patched", "bare", "baseline"]]
    assert len(o.values["patched"]) == 4  # the warm-up round is not counted
    assert run.calls[0] == ("bare", 0) and len(run.calls) == 15
    assert o.looks[-1].patched.estimate == pytest.approx(290 / 550, rel=0.03)
    assert "look 1 of 2" in o.stop_reason


def test_a_baseline_inside_the_bound_is_not_proven_and_a_guard_is_guarded(repro, tmp_path):
    o = rates.measure_scenario(repro, repro.scenario("sm50-eager"), ctx(), tmp_path,
                               run=fake_run({"bare": 550.0, "baseline": 280.0, "patched": 290.0}))
    assert o.verdict == "not-proven" and "already holds" in o.reason
    g = rates.measure_scenario(repro, repro.scenario("overhead-eager"), ctx(), tmp_path,
                               run=fake_run({"bare": 550.0, "baseline": 550.0, "patched": 550.0}))
    assert g.verdict == "guarded"
    # a fixed rule: every round to `rounds`, one look at 95 %
    assert len([r for r in g.rounds if not r["warmup"]]) == 8 and g.looks[0].baseline.confidence == 0.95
    r = rates.measure_scenario(repro, repro.scenario("overhead-eager"), ctx(), tmp_path,
                               run=fake_run({"bare": 550.0, "baseline": 550.0, "patched": 500.0}))
    assert r.verdict == "regression"


def test_a_run_that_measured_nothing_makes_the_scenario_invalid_and_a_skip_skips(repro, tmp_path):
    o = rates.measure_scenario(repro, repro.scenario("sm50-eager"), ctx(), tmp_path,
                               run=fake_run({"bare": 1, "baseline": 1, "patched": 1}, outcome={("patched", 2): INVALID}))
    assert o.verdict == "invalid" and "patched run of round 2 measured nothing" in o.reason
    s = rates.measure_scenario(repro, repro.scenario("blackwell-sm50"), ctx(), tmp_path,
                               run=fake_run({"bare": 1, "baseline": 1, "patched": 1}, outcome={("bare", 0): SKIPPED}))
    assert s.verdict == "skipped" and "Blackwell" in s.reason and len(s.records) == 1
    c = rates.RateContext(binaries={}, libs={}, shas={}, driver_env={}, unmet={"sm-limit:sm50-eager": "no GPU"})
    u = rates.measure_scenario(repro, repro.scenario("sm50-eager"), c, tmp_path, run=fake_run({}))
    assert u.verdict == "skipped" and not u.records


def test_a_value_scenario_is_judged_on_its_values(repro, tmp_path):
    o = rates.measure_scenario(repro, repro.scenario("tenants-eager"), ctx(), tmp_path,
                               run=fake_run({"baseline": 0.47, "patched": 0.31}))
    assert o.verdict == "proven" and o.scenario.measure.variants == ["baseline", "patched"]
    assert o.looks[-1].baseline.method == "mean, t"


def _evidence(outcomes, repro, control_verdict="pass") -> ev.Evidence:
    tally = ev.Tally(runs=5, passed=5, failures=0, failure_rate=0.0, outcomes={"pass": 5})
    doc = ev.Evidence(
        target="hami-core", series=ev.SeriesInfo("1.0", "0" * 64, []), upstream={"url": "u", "base": "a" * 40},
        reproducers=[{"name": repro.name, "hash": repro.hash}], driver={"kind": "fake", "gpu": "lucepatch-fakecuda H200 (simulated)", "version": 13000},
        simulated=True, execution={"mode": "serial"}, run_policy=ev.RunPolicy(rule="sequential", max_runs=8),
        variants={v: ev.VariantInfo(ev.Artifact(f"/{v}.so", "b" * 64), source="file") for v in ("baseline", "patched")},
        scenarios=[ev.ScenarioResult("sm-limit:control", True, control_verdict, tally, tally, reproducer="sm-limit")],
        verdict=control_verdict if control_verdict != "pass" else "not-proven", runs=[], tool={"lucepatch": "t", "created": "now"})
    rates.attach(doc, outcomes, [repro])
    return doc


def test_the_evidence_the_table_the_page_and_the_pr_body_show_the_numbers(repro, tmp_path):
    o = rates.measure_scenario(repro, repro.scenario("sm50-graph"), ctx(), tmp_path,
                               run=fake_run({"bare": 550.0, "baseline": 548.0, "patched": 290.0}))
    t = rates.measure_scenario(repro, repro.scenario("tenants-eager"), ctx(), tmp_path,
                               run=fake_run({"baseline": 0.47, "patched": 0.31}))
    doc = _evidence([o, t], repro)
    assert doc.verdict == "proven"
    data = doc.to_json()
    ev.validate(data)  # the schema knows `measure`, `series` and mode "rate"
    back = ev.Evidence.from_json(data)
    s = back.scenario("sm-limit:sm50-graph")
    assert s.mode == "rate" and s.extra["measure"]["bound"] == {"lo": 0.4, "hi": 0.6}
    assert s.runs_spent == {"bare": 5, "baseline": 5, "patched": 5}
    view = build_view(back)
    text = "\n".join(str(p) for p in verdict_parts(view, 100))
    assert "0.527" in text or "0.528" in text or "0.526" in text  # the patched ratio's estimate, in the table
    assert "must hold [0.4, 0.6] x bare" in text
    page = html(view)
    assert page.count('class="rate intervals"') == 2 and page.count('class="rate series"') == 2
    assert 'data-variant="patched"' in page and 'data-place="inside"' in page
    from lucepatch.upstream.pr import verdict_rows  # lazy: the PR module is a floor above show, 3 ms
    from lucepatch.show.rates import rate_rows
    rows = rate_rows(back)
    assert [r["variant"] for r in rows] == ["baseline", "patched"] * 2
    assert rows[1]["bound"] == "[0.4, 0.6] x bare" and "x bare" in rows[1]["rate"]
    assert all(r["failures"] == "" for r in verdict_rows(back) if r["scenario"].endswith("graph"))


def test_a_failed_control_makes_a_rate_invalid(repro, tmp_path):
    o = rates.measure_scenario(repro, repro.scenario("sm50-graph"), ctx(), tmp_path,
                               run=fake_run({"bare": 550.0, "baseline": 548.0, "patched": 290.0}))
    doc = _evidence([o], repro, control_verdict="invalid")
    assert doc.scenario("sm-limit:sm50-graph").verdict == "invalid"
    assert doc.verdict == "invalid"


@pytest.mark.parametrize("bad,why", [
    ({"lo": 0.4}, "needs value"),
    ({"value": "x", "lo": "a"}, "lo must be a number"),
    ({"value": "x"}, "a bound needs lo, hi or both"),
    ({"value": "x", "lo": 0.6, "hi": 0.4}, "is above hi"),
    ({"value": "x", "lo": 0.4, "per": "baseline"}, "per must be one of bare"),
    ({"value": "x", "lo": 0.4, "rounds": 1}, "rounds must be an integer >= 2"),
    ({"value": "x", "lo": 0.4, "rule": "maybe"}, 'rule must be "sequential" or "fixed"'),
    ({"value": "x", "lo": 0.4, "colour": 1}, "unknown key colour"),
])
def test_a_bad_measure_is_one_line_naming_the_file(bad, why):
    with pytest.raises(UsageError, match=why):
        Measure.from_toml(bad, "reproducers/x/reproducer.toml: scenario s")


def test_a_control_cannot_measure(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "r.c").write_text("int main(){return 0;}\n")
    (d / "reproducer.toml").write_text('target = "hami-core"\nartifact = "libvgpu.so"\nsources = ["r.c"]\n'
                                       '[[scenario]]\nname = "control"\ncontrol = true\n'
                                       '[scenario.measure]\nvalue = "x"\nlo = 1\n')
    with pytest.raises(UsageError, match="a control passes or fails"):
        load_reproducer_dir(d)


def test_runs_and_fixed_apply_and_the_simulated_driver_measures_only_what_says_so(repro, tmp_path):
    c = ctx()
    c.max_runs, c.fixed = 4, True  # verify --fixed --runs 4: 1 warm-up + 3 counted rounds, one look
    o = rates.measure_scenario(repro, repro.scenario("sm50-graph"), c, tmp_path,
                               run=fake_run({"bare": 550.0, "baseline": 548.0, "patched": 290.0}))
    assert len(o.rounds) == 4 and [lk.rounds for lk in o.looks] == [3] and o.measure.rule.looks == [3]
    sim = ctx()
    sim.simulated = True
    s = rates.measure_scenario(repro, repro.scenario("sm50-graph"), sim, tmp_path, run=fake_run({}))
    assert s.verdict == "skipped" and "model of a GPU" in s.reason and not s.records
    b = rates.measure_scenario(repro, repro.scenario("blackwell-sm50"), sim, tmp_path,
                               run=fake_run({"bare": 220.0, "baseline": 219.0, "patched": 113.0}))
    assert b.verdict == "proven"  # `simulated = true`: what the model answers as a GPU does (NVML)
