"""Statistics and verdict rules, on hand-built tables and recorded run outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucepatch.verify.reproducer import Reproducer, Scenario
from lucepatch.verify.runner import classify
from lucepatch.verify.stats import fisher_one_sided
from lucepatch.verify.evidence import ScenarioResult, Tally
from lucepatch.verify.verdict import overall, scenario_verdict


@pytest.mark.parametrize("table,expected", [
    ((20, 0, 0, 20), 7.254444551924844e-12),  # values from scipy.stats.fisher_exact(alternative="greater")
    ((3, 2, 0, 5), 0.08333333333333333),
    ((5, 15, 1, 19), 0.09088209088209087),
    ((4, 1, 0, 5), 0.023809523809523808),
    ((0, 20, 0, 20), 1.0),
])
def test_fisher_matches_scipy(table, expected):
    assert fisher_one_sided(*table) == pytest.approx(expected, rel=1e-9)


REPRO = Reproducer(name="r", dir=Path("."), common_dir=Path("."), target="t", artifact="libvgpu.so",
                   load_marker="Initialized", timeout_s=5, default_runs=3, description="", sources=[],
                   libs=[], env={}, scenarios=[Scenario("control", True), Scenario("bug")])
LIB = Path("/x/libvgpu.so")
LOADED = ('@@lucepatch {"event":"loaded","preload":[{"path":"/x/libvgpu.so","sha256":"aa"}],'
          '"libcuda":{"path":"/y/libcuda.so.1","sha256":"bb"}}\n'
          '@@lucepatch {"event":"driver","version":13000,"device_count":1,"gpu":"NVIDIA H200"}\n')


def _c(rc, stdout, stderr="[HAMI-core Msg(1:2:libvgpu.c:911)]: Initialized\n", timed_out=False, sha="aa"):
    return classify(REPRO, REPRO.scenarios[1], "baseline", 0, rc, timed_out, 0.1, stdout, stderr, LIB, sha)


def test_classify_pass():
    assert _c(0, LOADED + '@@lucepatch {"event":"done","scenario":"bug","ok":true}\n').outcome == "pass"


def test_classify_crash_after_illegal_device():
    r = _c(-11, LOADED, "Initialized\n[HAMI-core ERROR (pid:1 thread=2 multiprocess_memory_limit.c:1271)]: Illegal device id: 2139062143\n")
    assert (r.outcome, r.signal) == ("crash", "SIGSEGV")
    assert "Illegal device id: 2139062143" in r.first_error


def test_classify_logged_garbage_device_is_failure_even_with_exit_0():
    r = _c(0, LOADED + '@@lucepatch {"event":"done","scenario":"bug","ok":true}\n', "Initialized\nIllegal device id: 7\n")
    assert r.outcome == "fail-log"


def test_classify_wrong_cuda_result():
    out = LOADED + ('@@lucepatch {"event":"check","name":"sync-alloc","expected":"CUDA_ERROR_INVALID_CONTEXT",'
                    '"got":"CUDA_SUCCESS","ok":false}\n@@lucepatch {"event":"done","scenario":"bug","ok":false}\n')
    r = _c(1, out)
    assert r.outcome == "fail" and "expected CUDA_ERROR_INVALID_CONTEXT" in r.first_error


def test_a_failed_check_names_the_failure_before_a_benign_error_line():
    """HAMi's `Device 0 OOM` line (a limit the scenario expects to be enforced: a note) comes before the
    check that failed; the check is what decided the run, so it is the reason. A decisive line still wins."""
    out = LOADED + ('@@lucepatch {"event":"check","name":"exits with a non-zero status","expected":"exit status > 0",'
                    '"got":"exit status 0","ok":false}\n@@lucepatch {"event":"done","scenario":"bug","ok":false}\n')
    oom = "Initialized\n[HAMI-core ERROR (pid:1 thread=2 allocator.c:53)]: Device 0 OOM 67108864 / 33554432\n"
    r = _c(1, out, oom)
    assert r.outcome == "fail" and r.reason == "check exits with a non-zero status: expected exit status > 0, got exit status 0"
    r = _c(1, out, oom + "[HAMI-core ERROR (pid:1 thread=2 x.c:1)]: Illegal device id: 7\n")
    assert "Illegal device id: 7" in r.first_error
    r = _c(1, LOADED + '@@lucepatch {"event":"done","scenario":"bug","ok":false}\n', oom)  # no check failed
    assert "Device 0 OOM" in r.first_error


@pytest.mark.parametrize("stdout,stderr,sha,why", [
    ('@@lucepatch {"event":"done","ok":true}\n', "Initialized\n", "aa", "no load report"),
    (LOADED.replace("/x/libvgpu.so", "/x/other.so") + '@@lucepatch {"event":"done","ok":true}\n', "Initialized\n", "aa", "not mapped"),
    (LOADED + '@@lucepatch {"event":"done","ok":true}\n', "no marker here\n", "aa", "load marker"),
    (LOADED + '@@lucepatch {"event":"done","ok":true}\n', "Initialized\n", "cc", "sha256 differs"),
])
def test_classify_unproven_load_is_invalid_never_pass(stdout, stderr, sha, why):
    r = _c(0, stdout, stderr, sha=sha)
    assert r.outcome == "invalid" and why in r.reason


def _recs(outcomes):
    class R:  # minimal RunRecord stand-in with the fields tally() reads
        def __init__(self, o):
            self.outcome, self.first_error, self.reason = o, "", ""

        @property
        def failed(self):
            return self.outcome in ("fail", "fail-log", "crash", "timeout")
    return [R(o) for o in outcomes]


def test_verdicts():
    ok = scenario_verdict("r:bug", False, {"baseline": _recs(["crash"] * 5), "patched": _recs(["pass"] * 5)}, True)
    assert ok.verdict == "proven" and ok.p_value < 0.01
    few = scenario_verdict("r:bug", False, {"baseline": _recs(["crash"] * 3 + ["pass"] * 2), "patched": _recs(["pass"] * 5)}, True)
    assert few.verdict == "not-proven"
    still = scenario_verdict("r:bug", False, {"baseline": _recs(["crash"] * 5), "patched": _recs(["crash"] + ["pass"] * 4)}, True)
    assert still.verdict == "not-proven"
    reg = scenario_verdict("r:bug", False, {"baseline": _recs(["pass"] * 5), "patched": _recs(["fail"] * 5)}, True)
    assert reg.verdict == "regression"
    inv = scenario_verdict("r:bug", False, {"baseline": _recs(["crash"] * 4 + ["invalid"]), "patched": _recs(["pass"] * 5)}, True)
    assert inv.verdict == "invalid"
    ctrl = scenario_verdict("r:control", True, {"baseline": _recs(["pass"] * 5), "patched": _recs(["fail"] + ["pass"] * 4)}, True)
    assert ctrl.verdict == "invalid"
    assert overall([ctrl, ok]) == "invalid"
    assert overall([ok, few]) == "not-proven"
    assert overall([ok, reg, few]) == "regression"
    assert overall([{"control": True, "verdict": "pass"}, ok]) == "proven"


def test_significance_threshold_is_one_percent():
    # 4/5 vs 0/5: p = 0.0238, significant at 5 % but not at 1 %; ALPHA = 0.05 would call it proven
    near = scenario_verdict("r:bug", False, {"baseline": _recs(["crash"] * 4 + ["pass"]), "patched": _recs(["pass"] * 5)}, True)
    assert 0.01 < near.p_value < 0.05
    assert near.verdict == "not-proven" and "p=0.0238 >= 0.01" in near.reason
    # and the smallest table that is significant at 1 % (5/5 vs 0/5, p = 1/252) is proven
    five = scenario_verdict("r:bug", False, {"baseline": _recs(["crash"] * 5), "patched": _recs(["pass"] * 5)}, True)
    assert five.p_value == pytest.approx(1 / 252) and five.verdict == "proven"
    assert "patched 0/5 ⇒ failure rate < 0.61 at 99 %" in five.reason


def test_typed_results_round_trip_through_the_schema_types():
    ok = scenario_verdict("r:bug", False, {"baseline": _recs(["crash"] * 5), "patched": _recs(["pass"] * 10)}, True)
    assert isinstance(ok, ScenarioResult) and isinstance(ok.baseline, Tally)
    assert ok.baseline.failures == 5 and ok.patched.passed == 10 and ok.theta == 0.3691
    again = ScenarioResult.from_json(ok.to_json())
    assert again.to_json() == ok.to_json() and again.to_json()["patched"]["pass"] == 10


def test_a_failing_control_names_the_build_and_the_runs_never_a_guess():
    one = scenario_verdict("r:control", True, {"baseline": _recs(["pass"] * 5), "patched": _recs(["fail"] + ["pass"] * 4)}, True)
    assert one.verdict == "invalid" and one.reason.startswith("control failed on the patched build only")
    assert "patched 1 failed, 0 invalid of 5" in one.reason and "passes on the baseline build" in one.reason
    assert "environment" not in one.reason
    both = scenario_verdict("r:control", True, {"baseline": _recs(["crash"] * 5), "patched": _recs(["crash"] * 5)}, True)
    assert both.reason.startswith("control failed on both builds (baseline 5 failed")


def test_a_control_settled_on_one_build_never_claims_it_passed_on_the_other():
    """The sequential rule settles a control at its first failure: the other build may never have
    run it, and the reason must say that rather than "it passes on the patched build" (issue 26)."""
    early = scenario_verdict("r:control", True, {"baseline": _recs(["crash"]), "patched": []}, True)
    assert early.verdict == "invalid" and early.reason.startswith("control failed on the baseline build only")
    assert "passes on the patched build" not in early.reason
    assert "the patched build never ran it" in early.reason
    some = scenario_verdict("r:control", True, {"baseline": _recs(["crash"]), "patched": _recs(["pass"] * 2)}, True)
    assert "it passes on the patched build (2/2 runs)" in some.reason
    other_way = scenario_verdict("r:control", True, {"baseline": [], "patched": _recs(["fail"])}, True)
    assert "the baseline build never ran it" in other_way.reason


# ---- judge(), case by case (what tools/mutate.py showed the tests above leave open) -------------

from lucepatch.verify.verdict import judge, not_applicable, tally  # noqa: E402


def T(passed=0, failures=0, invalid=0, skipped=0, first_error=""):
    n = passed + failures + invalid + skipped
    return Tally(runs=n, passed=passed, failures=failures, invalid=invalid, skipped=skipped, first_error=first_error)


CANNOT = "cannot load: /x/libvgpu.so: version `GLIBC_2.38' not found"


@pytest.mark.parametrize("base,pat,kw,verdict,reason", [
    (T(skipped=5), T(skipped=5), {}, "skipped", "not run on this machine"),
    (T(skipped=5), T(skipped=5), {"control": True}, "skipped", "not run on this machine"),
    (T(skipped=2, failures=3), T(passed=5), {}, "invalid",
     "2 run(s) skipped and the others did not: the machine changed under the runs"),
    (T(passed=5), T(passed=5), {"control": True}, "pass", ""),
    (T(invalid=1, passed=4, first_error=CANNOT), T(passed=5), {"control": True}, "invalid",
     f"{CANNOT} — the baseline build"),
    (T(failures=1, passed=4, first_error="SIGSEGV in oom_check"), T(passed=5), {"control": True}, "invalid",
     "control failed on the baseline build only (baseline 1 failed, 0 invalid of 5 (first error: SIGSEGV in "
     "oom_check); it passes on the patched build (5/5 runs)): the reproducer's assumptions do not hold on that build"),
    (T(failures=5), T(passed=5), {"control": True}, "invalid",
     "control failed on the baseline build only (baseline 5 failed, 0 invalid of 5; it passes on the patched build "
     "(5/5 runs)): the reproducer's assumptions do not hold on that build"),
    (T(failures=5), T(invalid=1, passed=4), {}, "invalid", "some runs could not prove what they loaded"),
    (T(failures=5), T(invalid=1, passed=4, first_error=CANNOT), {}, "invalid", f"{CANNOT} — the patched build"),
    (T(invalid=1, failures=4), T(passed=5), {}, "invalid", "some runs could not prove what they loaded"),
    (T(failures=5), T(passed=5), {"control_ok": False}, "invalid", "a control scenario failed"),
    (T(passed=5), T(failures=5), {}, "regression", "the patched build fails where the baseline passes"),
    (T(failures=5), T(failures=1, passed=4), {}, "not-proven", "the patched build still fails"),
    (T(passed=5), T(passed=5), {"guard": True}, "guarded",
     "regression guard: both variants pass 5+5 runs (already right at the baseline; proves no fix, guards against a "
     "regression; patched 0/5 ⇒ failure rate < 0.61 at 99 %)"),
    (T(passed=5), T(passed=5), {}, "not-proven", "baseline failures not significant (p=1 >= 0.01)"),
    (T(failures=5), T(passed=5), {"guard": True}, "proven",
     "baseline failed 5/5, patched 0/5, p=0.00397; patched 0/5 ⇒ failure rate < 0.61 at 99 %"),
])
def test_judge_case_by_case(base, pat, kw, verdict, reason):
    args = {"control": False, "control_ok": True, **kw}
    v, why, p = judge(base, pat, **args)
    assert (v, why) == (verdict, reason)
    assert (p is None) == (verdict in ("skipped", "pass") or args["control"] or "skipped" in why)


def test_tally_counts_and_the_first_error():
    class R:
        def __init__(self, outcome, first_error="", reason=""):
            self.outcome, self.first_error, self.reason = outcome, first_error, reason

        @property
        def failed(self):
            return self.outcome in ("fail", "fail-log", "crash", "timeout")

    t = tally([R("pass"), R("crash", "", "SIGSEGV at 0x0"), R("fail", "check x: got 2"), R("invalid", "", "no marker")])
    assert (t.runs, t.passed, t.failures, t.invalid, t.skipped) == (4, 1, 2, 1, 0)
    assert t.failure_rate == 0.5 and t.outcomes == {"crash": 1, "fail": 1, "invalid": 1, "pass": 1}
    assert t.first_error == "SIGSEGV at 0x0"  # a failed run's first error, else its reason
    assert tally([R("pass"), R("fail", "check x: got 2")]).first_error == "check x: got 2"
    # no failed run: the loader's refusal of an invalid run is the first error; another invalid reason is not
    assert tally([R("invalid", "", CANNOT), R("pass")]).first_error == CANNOT
    assert tally([R("invalid", "", "no marker"), R("pass", "", CANNOT)]).first_error == ""
    assert tally([R("pass", "", CANNOT)]).first_error == ""
    assert tally([R("invalid", "", None)]).first_error == ""
    assert tally([]).failure_rate is None and tally([]).runs == 0


def test_scenario_verdict_names_why_it_was_skipped_and_bounds_only_proofs():
    class R:
        def __init__(self, outcome, reason=""):
            self.outcome, self.first_error, self.reason = outcome, "", reason

        @property
        def failed(self):
            return self.outcome == "crash"

    sk = scenario_verdict("r:s", False, {"baseline": [R("skipped", "needs 2 GPUs")], "patched": [R("skipped", "x")]}, True)
    assert sk.verdict == "skipped" and sk.reason == "not run on this machine: needs 2 GPUs" and sk.theta is None
    ok = scenario_verdict("r:s", False, {"baseline": [R("crash")] * 5, "patched": [R("pass")] * 5}, True)
    assert ok.theta == 0.6019 and "skipped" not in ok.reason
    guard = scenario_verdict("r:s", False, {"baseline": [R("pass")] * 5, "patched": [R("pass")] * 5}, True, guard=True)
    assert guard.verdict == "guarded" and guard.theta == 0.6019 and guard.regression_guard is True
    bad = scenario_verdict("r:s", False, {"baseline": [R("crash")] * 5, "patched": [R("crash")] * 5}, True)
    assert bad.theta is None and bad.reason == "the patched build still fails"


def test_overall_on_the_edges():
    P_ = {"control": False, "verdict": "proven"}
    G = {"control": False, "verdict": "guarded"}
    assert overall([]) == "not-proven" and overall([{"control": False, "verdict": "skipped"}]) == "not-proven"
    assert overall([G]) == "not-proven"  # only guards: nothing proven
    assert overall([G, P_]) == "proven"
    assert overall([{"control": True, "verdict": "skipped"}, P_]) == "proven"
    assert overall([{"control": True, "verdict": "invalid"}, P_]) == "invalid"
    assert overall([P_, {"control": False, "verdict": "not-applicable"}]) == "proven"


def test_not_applicable_is_never_a_pass():
    r = not_applicable("r:s", False, "the line does not account it", "target.toml [not_applicable]")
    assert r.verdict == "not-applicable" and r.regression_guard is False and r.control is False
    assert r.reason == "not applicable at this base (target.toml [not_applicable]): the line does not account it"
    assert r.baseline.runs == 0 and r.patched.runs == 0
    assert overall([r]) == "not-proven"


def test_a_scenario_the_rule_stopped_before_any_run_is_not_skipped():
    """Under the sequential rule a failed control stops its reproducer's other scenarios before
    they run: no run at all is no evidence of "cannot run here" — the verdict is invalid."""
    v, why, _ = judge(T(), T(), control=False, control_ok=False)
    assert (v, why) == ("invalid", "a control scenario failed")


# ---- worse (issue 36): a crash where the baseline gave a wrong value ------------------------------

def W(outcomes: dict, first_error=""):
    n = sum(outcomes.values())
    fails = sum(v for k, v in outcomes.items() if k != "pass")
    return Tally(runs=n, passed=outcomes.get("pass", 0), failures=fails, outcomes=dict(outcomes), first_error=first_error)


def test_a_crash_where_the_baseline_gave_a_wrong_value_is_worse_with_both_signatures():
    """52f33fc against 8f3a89c (ref-vs-ref): the context-less pool allocation crashes after
    `Illegal device id` where 8f3a89c left it uncharged. Before: "not-proven — the patched build
    still fails"."""
    base = W({"fail": 1}, "check charged: expected 67108864, got 0")
    pat = W({"crash": 6}, "Illegal device id: 2139062143")
    v, why, _ = judge(base, pat, control=False, control_ok=True)
    assert v == "worse"
    assert why == ("worse on the patched build: crash 6/6 (first error: Illegal device id: 2139062143), where the "
                   "baseline gave a wrong value: fail 1/1 (first error: check charged: expected 67108864, got 0)")
    assert judge(W({"fail-log": 2, "pass": 3}), W({"timeout": 1, "fail": 5}), control=False, control_ok=True)[0] == "worse"
    # the same failure on both sides, a crash on both, or a milder patched side: not worse
    for b, p in ((W({"fail": 1}), W({"fail": 6})), (W({"crash": 1}), W({"crash": 6})), (W({"crash": 1}), W({"fail": 6})),
                 (W({"crash": 1, "fail": 1}), W({"crash": 6}))):
        assert judge(b, p, control=False, control_ok=True)[0] == "not-proven"
    # a baseline that never failed: a regression, as before
    assert judge(W({"pass": 5}), W({"crash": 6}), control=False, control_ok=True)[0] == "regression"


def test_worse_fails_the_overall_verdict_like_a_regression():
    assert overall([{"control": False, "verdict": "proven"}, {"control": False, "verdict": "worse"}]) == "worse"
    assert overall([{"control": False, "verdict": "worse"}, {"control": True, "verdict": "invalid"}]) == "invalid"
    assert overall([{"control": False, "verdict": "not-proven"}, {"control": False, "verdict": "worse"}]) == "worse"


def test_a_declared_regression_guard_runs_as_a_guard():
    """target.toml [regression_guard] (issue 36): what upstream fixed at a line's base is guarded there,
    so a PR's evidence on that line is not "not-proven" for it."""
    from lucepatch.verify.verdict import with_declared_guards
    [r] = with_declared_guards([REPRO], {"r:bug": "upstream fixed it in 9ce21cc (#217)"})
    bug = r.scenario("bug")
    assert bug.regression_guard and bug.fixed_upstream == "upstream fixed it in 9ce21cc (#217)"
    assert not r.scenario("control").regression_guard and not REPRO.scenario("bug").regression_guard
    assert r.hash == REPRO.hash and with_declared_guards([REPRO], {}) == [REPRO]
    # a control cannot be declared a guard: it stays a control
    [c] = with_declared_guards([REPRO], {"r:control": "x"})
    assert not c.scenario("control").regression_guard


def test_a_scenario_upstream_fixed_at_or_before_the_baseline_runs_as_a_guard(tmp_path):
    """reproducer.toml `fixed_upstream` (issue 36: #217's 9e1b0c3 is in 52f33fc): where the commit is
    the baseline's or one of its ancestors, the scenario is a regression guard and its `guarded`
    verdict names the commit and the runs; a baseline before it, or a commit the checkout lacks,
    keeps it a checked scenario (judged as a fix), the latter said in a progress line."""
    from dataclasses import replace

    from conftest import git
    from lucepatch.verify.service import fixed_at
    from lucepatch.verify.verdict import with_upstream_fixes

    git(tmp_path, "init", "-q", "-b", "main")
    commits = []
    for n in ("old", "fix", "base"):
        (tmp_path / "f").write_text(n)
        git(tmp_path, "add", "f")
        git(tmp_path, "commit", "-q", "-m", n)
        commits.append(git(tmp_path, "rev-parse", "HEAD").strip())
    old, fix, base = commits
    repro = replace(REPRO, scenarios=[Scenario("control", True, fixed_upstream=fix[:7]),
                                      Scenario("bug", fixed_upstream=fix[:7]), Scenario("other")])
    said = []
    assert fixed_at(tmp_path, [repro], base, said.append) == {
        "r:bug": f"fixed upstream by {fix[:12]}, an ancestor of the baseline's {base[:12]}"}  # never the control
    assert fixed_at(tmp_path, [repro], fix, said.append) == {"r:bug": f"fixed upstream by {fix[:12]}, the baseline's commit"}
    assert fixed_at(tmp_path, [repro], old, said.append) == {}  # before the fix: the scenario proves it
    assert len(said) == 2 and all("fixed upstream at or before the baseline's" in s for s in said)
    lacking = replace(repro, scenarios=[Scenario("bug", fixed_upstream="deadbee")])
    assert fixed_at(tmp_path, [lacking], base, said.append) == {}
    assert "r:bug: fixed_upstream deadbee is not in" in said[-1] and "judged as a fix" in said[-1]

    assert with_upstream_fixes([repro], {}) == [repro]  # nothing fixed upstream: the reproducers as they are
    [r] = with_upstream_fixes([repro], fixed_at(tmp_path, [repro], base, said.append))
    bug = r.scenario("bug")
    assert bug.regression_guard and not r.scenario("other").regression_guard and not r.scenario("control").regression_guard
    v, why, _ = judge(T(passed=14), T(passed=20), control=False, control_ok=True, guard=True, guard_why=bug.guard_why)
    assert v == "guarded" and why.startswith(
        f"regression guard (fixed upstream by {fix[:12]}, an ancestor of the baseline's {base[:12]}): "
        "both variants pass 14+20 runs")
    # a baseline that fails it anyway is judged like any other scenario (here: proven)
    assert judge(T(failures=5), T(passed=5), control=False, control_ok=True, guard=True, guard_why=bug.guard_why)[0] == "proven"
