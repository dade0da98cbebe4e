"""The retirement rule's decisions, one by one, on stand-in builds (no compiler, no runs: < 2 s).

What the fixtures in test_retire*.py measure end to end is decided here: judge_patch (add-one,
leave-one-out, the positive control, coverage), judge_conflict (blame by coverage), the input
sweep, the joint check (blame by coverage), the one judgement (engine/retirement.py: superseded
needs a code signal), the saved report and the hooks. tools/mutate.py runs this file against
mutants of upstream/retire.py, upstream/behaviour.py and verify/verdict.py.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from lucepatch.engine import needed, retirement
from lucepatch.upstream import retire as rt
from lucepatch.upstream import retire_report
from lucepatch.upstream.behaviour import (B_FAIL, B_INVALID, B_MIXED, B_PASS, B_SKIPPED, B_UNBUILT, DIFFERENT,
                                          IDENTICAL, INCONCLUSIVE, Comparison, Lab, OnBuild, _check_diff, _state,
                                          describe_signature, outcome_class, signature)
from lucepatch.verify.reproducer import Param, Scenario
from lucepatch.verify.runner import RunRecord

PASS = ("pass", ())
CRASH = ("crash (SIGSEGV)", ())
ERR = ("clean error", (("cuMemAlloc", "CUDA_ERROR_INVALID_CONTEXT", "CUDA_SUCCESS"),))
OK_ERR = ("pass", (("cuMemAlloc", "CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_CONTEXT"),))


class B:
    """A build stand-in: what Lab and the rule read of a behaviour.Build."""

    def __init__(self, name, patches=()):
        self.name, self.variant, self.error, self.key, self.patches = name, object(), "", name, tuple(patches)


def _ob(build, scenario, sigs, **kw):
    sigs = [(s, 10) if isinstance(s, tuple) and isinstance(s[0], str) and not isinstance(s[1], int) else s
            for s in sigs]
    return OnBuild(build, scenario, runs=sum(n for _, n in sigs) + kw.pop("extra", 0), signatures=Counter(dict(sigs)),
                   **kw)


def lab_of(table: dict, *, failing_controls=(), skipped_controls=()) -> Lab:
    """A Lab over {(build name, scenario name): [(signature, n)] or an OnBuild}; every build's
    control passes unless named."""
    lab = Lab.__new__(Lab)
    lab.repros = {"r": SimpleNamespace(name="r", controls=[SimpleNamespace(name="control")])}
    lab.results, lab.builds, lab.records = {}, {}, []
    lab._id = lambda b: b.name
    builds = sorted({b for b, _ in table})
    lab.builds = {(b,): B(b) for b in builds}
    for (b, s), v in table.items():
        lab.results[(b, f"r:{s}")] = v if isinstance(v, OnBuild) else _ob(b, f"r:{s}", v)
    for b in builds:
        sig = [(CRASH, 10)] if b in failing_controls else [(PASS, 10)]
        lab.results[(b, "r:control")] = _ob(b, "r:control", sig, **({"skipped": 10} if b in skipped_controls else {}))
    return lab


def cx(letter, *, add=None, loo=None, full=None, bare=None, conflicts=()):
    commit = letter * 40
    return rt.Context(commit, commit[:12], list(conflicts), full=full, bare=bare,
                      add_one={"p": add} if add else {}, leave_one_out={"p": loo} if loo else {})


P = SimpleNamespace(name="p")


def world(ref_add, ref_loo, base_add, base_loo, **kw):
    """(lab, ref context, base context) for one patch p and one scenario r:s."""
    names = ["ref-bare", "ref-bare+p", "ref-series-p", "ref-series", "base-bare", "base-bare+p", "base-series-p",
             "base-series"]
    vals = [*ref_add, *ref_loo, *base_add, *base_loo]
    lab = lab_of({(n, "s"): v for n, v in zip(names, vals)}, **kw)
    b = {n: B(n) for n in names}
    ref = cx("a", add=(b["ref-bare"], b["ref-bare+p"]), loo=(b["ref-series-p"], b["ref-series"]))
    base = cx("b", add=(b["base-bare"], b["base-bare+p"]), loo=(b["base-series-p"], b["base-series"]))
    return lab, ref, base


def judged(*pairs, unreached=(), scen=("r:s",), **kw):
    lab, ref, base = world(*pairs, **kw)
    return rt.judge_patch(lab, P, list(scen), ref, base, list(unreached), rt.make_blame(lab, base.commit, ref.commit))


FIXED_AT_BASE = ([(CRASH, 10)], [(PASS, 10)])  # the patch made the difference at the base


# ---- judge_patch ------------------------------------------------------------------------------


def test_identical_at_ref_and_a_difference_at_the_base_is_a_candidate_never_superseded():
    v = judged(([(PASS, 10)], [(PASS, 10)]), ([(PASS, 10)], [(PASS, 10)]), FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.RETIRE_CANDIDATE and v.scenario == "r:s"
    assert v.reason.startswith("identical with and without it at aaaaaaaaaaaa on r:s (1 scenario(s)")
    assert "at the base it made a difference on r:s" in v.reason
    assert [(d["at"], d["pair"], d["kind"]) for d in v.details] == [
        ("ref", "add-one", IDENTICAL), ("ref", "leave-one-out", IDENTICAL),
        ("base", "add-one", DIFFERENT), ("base", "leave-one-out", DIFFERENT)]


@pytest.mark.parametrize("where", ["add", "loo"])
def test_an_inconclusive_comparison_at_ref_is_never_ignored(where):
    """A mixed side at REF (one pair) makes the patch inconclusive: ignoring it would let a needed
    patch through as a candidate (a mutant tools/mutate.py must kill)."""
    mixed = ([(CRASH, 5), (PASS, 5)], [(PASS, 10)])
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(mixed if where == "add" else same, same if where == "add" else mixed, FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.INCONCLUSIVE and v.scenario == "r:s"
    assert v.reason.startswith(("add-one" if where == "add" else "leave-one-out") + " at aaaaaaaaaaaa: r:s: ")
    assert "mixed: 5x crash (SIGSEGV), 5x pass" in v.reason


def test_a_failing_control_at_ref_is_inconclusive_and_names_the_builds():
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(same, same, FIXED_AT_BASE, FIXED_AT_BASE, failing_controls={"ref-bare+p"})
    assert v.status == rt.INCONCLUSIVE
    assert "control r:control on ref-bare+p" in v.reason and "the control fails on ref-bare+p" in v.reason
    assert "and passes on" in v.reason and "assumptions do not hold" in v.reason
    assert "lucepatch bisect --reproducer r --scenario control bbbbbbbbbbbb..aaaaaaaaaaaa" in v.reason


def test_the_bug_back_at_ref_is_no_longer_effective():
    """Identical at REF, but both sides fail where the patch made it pass at the base: the bug is
    back, the patch no longer fixes it (the check a mutant switching it off must not survive)."""
    same_crash = ([(CRASH, 10)], [(CRASH, 10)])
    v = judged(same_crash, same_crash, FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.NO_LONGER_EFFECTIVE and v.scenario == "r:s"
    assert "at the base it made crash (SIGSEGV) (10/10) pass" in v.reason
    assert "at aaaaaaaaaaaa crash (SIGSEGV) (10/10) with and without it" in v.reason


def test_a_difference_at_ref_keeps_it_needed_and_a_reverse_one_is_a_regression():
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(([(CRASH, 10)], [(PASS, 10)]), same, FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.STILL_NEEDED and v.reason.startswith("add-one at aaaaaaaaaaaa: r:s: crash (SIGSEGV) on ref-bare")
    v = judged(same, ([(ERR, 10)], [(OK_ERR, 10)]), FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.STILL_NEEDED and v.reason.startswith("leave-one-out at aaaaaaaaaaaa")
    v = judged(([(PASS, 10)], [(CRASH, 10)]), same, FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.REGRESSION and "passes without it and fails with it" in v.reason
    # a helping difference outweighs a regressing one
    v = judged(([(PASS, 10)], [(CRASH, 10)]), ([(CRASH, 10)], [(PASS, 10)]), FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.STILL_NEEDED and v.reason.startswith("leave-one-out")


def test_no_difference_at_the_base_is_untestable():
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(same, same, same, same)
    assert v.status == rt.UNTESTABLE and v.reason.startswith("no scenario distinguishes it at the base bbbbbbbbbbbb")
    assert "not measurable" not in v.reason
    v = judged(same, same, ([(CRASH, 5), (PASS, 5)], [(PASS, 10)]), same)
    assert v.status == rt.UNTESTABLE and "not measurable there: r:s:" in v.reason


def test_code_no_scenario_ran_is_untestable_and_no_scenario_at_all_too():
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(same, same, FIXED_AT_BASE, FIXED_AT_BASE, unreached=["src/x.c:10", "src/x.c:11", "src/x.c:12", "src/x.c:13"])
    assert v.status == rt.UNTESTABLE and v.reason.startswith("src/x.c:10, src/x.c:11, src/x.c:12 … (at aaaaaaaaaaaa")
    v = judged(same, same, FIXED_AT_BASE, FIXED_AT_BASE, unreached=["src/x.c:10"])
    assert v.reason.startswith("src/x.c:10 (at") and "reached by no scenario" in v.reason
    v = judged(same, same, FIXED_AT_BASE, FIXED_AT_BASE, scen=())
    assert v.status == rt.UNTESTABLE and v.reason.startswith("no scenario reaches it")


def test_the_no_longer_effective_check_needs_a_pass_at_the_base():
    # at the base the patch changed one failure into another (no pass): not "no longer effective"
    same_crash = ([(CRASH, 10)], [(CRASH, 10)])
    err_to_crash = ([(ERR, 10)], [(CRASH, 10)])
    v = judged(same_crash, same_crash, err_to_crash, err_to_crash)
    assert v.status == rt.RETIRE_CANDIDATE


# ---- judge_conflict: blame by coverage ----------------------------------------------------------


class Cov:
    def __init__(self, hit):
        self.hit = hit

    def executed_by(self, scenario):
        return self.hit.get(scenario)


def conflict(bare, full, cov=None, base=FIXED_AT_BASE):
    lab = lab_of({("base-bare", "s"): base[0], ("base-bare+p", "s"): base[1], ("ref-bare", "s"): bare,
                  ("ref-series", "s"): full})
    ref = cx("a", full=B("ref-series", ["q"]), bare=B("ref-bare"), conflicts=["p"])
    basecx = cx("b", add=(B("base-bare"), B("base-bare+p")), bare=B("base-bare"))
    return rt.judge_conflict(lab, P, ["r:s"], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit), cov)


def test_a_conflicting_patch_is_needed_when_ref_without_it_still_fails():
    v = conflict([(CRASH, 10)], [(CRASH, 10)])
    assert v.status == rt.STILL_NEEDED and v.scenario == "r:s" and "rebase it" in v.reason
    assert "without it, on ref-bare, r:s: crash (SIGSEGV) (10/10)" in v.reason


def test_a_failure_only_without_the_rest_of_the_series_is_blamed_on_whose_hunks_ran():
    """REF + Build-Only fails, REF + the rest of the series passes: the failure belongs to the
    patches whose hunks the scenario executed (q), not to the one that does not apply."""
    v = conflict([(CRASH, 10)], [(PASS, 10)], Cov({"r:s": ["q"]}))
    assert v.status == rt.CONFLICT
    assert "r:s fails on ref-bare (crash (SIGSEGV) (10/10)) but passes on ref-series without it: its runs executed " \
           "the hunks of q (coverage map)" in v.reason
    v = conflict([(CRASH, 10)], [(PASS, 10)], Cov({"r:s": []}))
    assert "executed none of q' hunks (coverage map): upstream's code" in v.reason
    v = conflict([(CRASH, 10)], [(PASS, 10)], Cov({}))
    assert "the coverage map has no complete run of r:s" in v.reason
    v = conflict([(CRASH, 10)], [(PASS, 10)], None)
    assert "no coverage map to attribute it" in v.reason


def test_a_conflicting_patch_upstream_made_unnecessary_or_never_measured_is_a_conflict():
    v = conflict([(PASS, 10)], [(PASS, 10)])
    assert v.status == rt.CONFLICT and "already behaves as it did with it at the base on r:s" in v.reason
    assert "fails on" not in v.reason
    v = conflict([(PASS, 10)], [(PASS, 10)], base=([(PASS, 10)], [(PASS, 10)]))
    assert v.status == rt.CONFLICT and v.reason.endswith("no scenario distinguished it at the base")


# ---- the joint check: blame by coverage ---------------------------------------------------------


class JointLab:
    """Removing x and y together crashes r:s; either alone changes nothing."""

    def build(self, name, commit, patches):
        return B(name, patches)

    def measure_plan(self, plan):  # the rule batches the joint builds' runs first; compare answers here
        self.planned = [*getattr(self, "planned", []), plan]

    def compare(self, without, with_, s):
        gone = {"x", "y"} - set(without.patches)
        kind = DIFFERENT if gone == {"x", "y"} else IDENTICAL
        return Comparison(kind, s, _ob("a", s, [(PASS, 10)]), _ob("b", s, [(PASS, 10)]), "crash (SIGSEGV) -> pass")


def _joint(cov):
    full = B("ref+series", ("a", "x", "y"))
    c = rt.Context("c" * 40, "cccccccccccc", [], full=full)
    judge = SimpleNamespace(order=["a", "x", "y"])
    rows = [{"name": n, "status": rt.RETIRE_CANDIDATE if n in "xy" else rt.STILL_NEEDED, "reason": "", "needed": ""}
            for n in ("a", "x", "y")]
    repros = {"r": SimpleNamespace(checked=[SimpleNamespace(name="s")])}
    rt._joint(JointLab(), judge, c, rows, repros, cov)
    return {r["name"]: r for r in rows}


def test_the_joint_check_blames_the_patch_whose_hunks_the_failing_scenario_ran():
    # by series order alone y would be kept (blamed); the failing scenario ran x's hunks: x is kept
    by = _joint(Cov({"r:s": ["a", "x"]}))
    assert by["x"]["status"] == rt.STILL_NEEDED and by["y"]["status"] == rt.RETIRE_CANDIDATE
    assert by["x"]["needed"] == "still-needed" and by["x"]["scenario"] == "r:s"
    assert by["x"]["reason"].startswith("joint check at cccccccccccc: removing it with y changes r:s")
    assert by["x"]["reason"].endswith("its runs executed the hunks of x (coverage map)")
    assert "joint check: cccccccccccc+series without y behaves as the whole series on all 1" in by["y"]["reason"]
    # no map: series order decides, and the reason says the map could not
    by = _joint(None)
    assert by["y"]["status"] == rt.STILL_NEEDED and by["x"]["status"] == rt.RETIRE_CANDIDATE
    assert by["y"]["reason"].endswith("no coverage map to attribute it")


def test_the_joint_check_keeps_every_candidate_when_removing_them_all_changes_nothing():
    class Same(JointLab):
        def compare(self, without, with_, s):
            return Comparison(IDENTICAL, s, _ob("a", s, [(PASS, 10)]), _ob("b", s, [(PASS, 10)]), "")
    full = B("ref+series", ("x", "y"))
    c = rt.Context("c" * 40, "cccccccccccc", [], full=full)
    rows = [{"name": n, "status": rt.RETIRE_CANDIDATE, "reason": "", "needed": ""} for n in ("x", "y")]
    rt._joint(Same(), SimpleNamespace(order=["x", "y"]), c, rows, {"r": SimpleNamespace(checked=[SimpleNamespace(name="s")])})
    assert [r["status"] for r in rows] == [rt.RETIRE_CANDIDATE] * 2
    assert all("without x, y behaves as the whole series" in r["reason"] for r in rows)


def _skipped(build, scenario):
    return _ob(build, scenario, [], skipped=10, extra=10, why="needs the real CUDA driver")


def test_a_scenario_not_run_on_either_build_is_no_evidence_in_the_joint_check():
    """Issue 41: removing x changes nothing on r:s; r:w ran on neither build. Before, "skipped on
    both builds" counted as a change and kept x still-needed with a false reason."""
    class Skips(JointLab):
        def compare(self, without, with_, s):
            if s == "r:w":
                return Comparison(INCONCLUSIVE, s, _skipped("a", s), _skipped("b", s), "not run on either build (x)")
            return Comparison(IDENTICAL, s, _ob("a", s, [(PASS, 10)]), _ob("b", s, [(PASS, 10)]), "")
    full = B("ref+series", ("x",))
    c = rt.Context("c" * 40, "cccccccccccc", [], full=full)
    rows = [{"name": "x", "status": rt.RETIRE_CANDIDATE, "reason": "", "needed": ""}]
    repros = {"r": SimpleNamespace(checked=[SimpleNamespace(name="s"), SimpleNamespace(name="w")])}
    rt._joint(Skips(), SimpleNamespace(order=["x"]), c, rows, repros)
    assert rows[0]["status"] == rt.RETIRE_CANDIDATE
    assert rows[0]["reason"].endswith("behaves as the whole series on all 1 scenario(s) that ran "
                                      "(1 not run on either build, not counted: r:w)")


def test_a_scenario_not_run_on_either_build_is_not_counted_by_judge_patch():
    same, gone = ([(PASS, 10)], [(PASS, 10)]), None
    lab, ref, base = world(same, same, FIXED_AT_BASE, FIXED_AT_BASE)
    for b in ("ref-bare", "ref-bare+p", "ref-series-p", "ref-series", "base-bare", "base-bare+p", "base-series-p",
              "base-series"):
        lab.results[(b, "r:w")] = _skipped(b, "r:w")
    v = rt.judge_patch(lab, P, ["r:s", "r:w"], ref, base, [], rt.make_blame(lab, base.commit, ref.commit))
    assert v.status == rt.RETIRE_CANDIDATE and v.reason.startswith("identical with and without it at aaaaaaaaaaaa "
                                                                   "on r:s (1 scenario(s)")
    assert v.reason.endswith("; not run on either build, not counted: r:w") and gone is None
    # nothing that reaches it ran: inconclusive, and said so
    v = rt.judge_patch(lab, P, ["r:w"], ref, base, [], rt.make_blame(lab, base.commit, ref.commit))
    assert v.status == rt.INCONCLUSIVE and "every scenario that reaches it was not run on either build: r:w" in v.reason


# ---- the input sweep ----------------------------------------------------------------------------


class SweepLab:
    def __init__(self, kinds):
        self.kinds, self.measured = kinds, []

    def measure_point(self, builds, key, pname, point):
        self.measured.append((key, pname, point))
        return f"{key}@{pname}={point}"

    def compare(self, without, with_, at):
        kind, wo, wi = self.kinds[at]
        return Comparison(kind, at, _ob(without.name, at, wo), _ob(with_.name, at, wi), f"{kind} at {at}")


def _sweep(kinds, status=rt.RETIRE_CANDIDATE):
    part = Param("part", "bytes", 600, "LP_PARAM_PART", points=(600, 100, 50))
    s = Scenario("s", params={"part": part})
    repros = {"r": SimpleNamespace(scenario=lambda name: s)}
    c = cx("a", add=(B("ref-bare"), B("ref-bare+p")), loo=(B("ref-series-p"), B("ref-series")))
    row = {"name": "p", "status": status, "judged": ["r:s"], "reason": "identical", "needed": "retire-candidate"}
    lab = SweepLab(kinds)
    rt._sweep(lab, c, [row], repros)
    return row, lab


CRASH10, PASS10 = [(CRASH, 10)], [(PASS, 10)]


def test_the_sweep_runs_every_declared_point_but_the_default_and_keeps_a_partial_fix_needed():
    row, lab = _sweep({"r:s@part=100": (DIFFERENT, CRASH10, PASS10), "r:s@part=50": (IDENTICAL, PASS10, PASS10)})
    assert lab.measured == [("r:s", "part", 100), ("r:s", "part", 50)]
    assert row["status"] == rt.STILL_NEEDED and row["needed"] == "still-needed" and row["scenario"] == "r:s@part=100"
    assert row["reason"].startswith("input sweep, add-one at aaaaaaaaaaaa: r:s@part=100: different at r:s@part=100")
    assert "upstream behaves alike only on part of the inputs (identical)" in row["reason"]
    assert len(row["sweep"]) == 4


def test_the_sweep_only_adds_evidence_to_a_candidate():
    row, _ = _sweep({"r:s@part=100": (IDENTICAL, PASS10, PASS10), "r:s@part=50": (IDENTICAL, PASS10, PASS10)})
    assert row["status"] == rt.RETIRE_CANDIDATE and row["reason"] == "identical; input sweep: identical at 2 more point(s)"
    row, _ = _sweep({"r:s@part=100": (INCONCLUSIVE, CRASH10, PASS10), "r:s@part=50": (IDENTICAL, PASS10, PASS10)})
    assert row["status"] == rt.RETIRE_CANDIDATE
    assert row["reason"].startswith("identical; input sweep: 2 of 4 comparison(s) identical, r:s@part=100 not judged")
    row, _ = _sweep({"r:s@part=100": (DIFFERENT, PASS10, CRASH10), "r:s@part=50": (IDENTICAL, PASS10, PASS10)})
    assert row["status"] == rt.REGRESSION and "passes without it and fails with it" in row["reason"]
    row, lab = _sweep({}, status=rt.STILL_NEEDED)  # only candidates are swept
    assert lab.measured == [] and "sweep" not in row


# ---- the one judgement ----------------------------------------------------------------------------


CODE = {"signal": "patch-id", "commit": "c" * 40, "detail": "upstream commit ccc has patch-id ppp"}


@pytest.mark.parametrize("behaviour,code,want", [
    (rt.RETIRE_CANDIDATE, CODE, rt.SUPERSEDED),
    (rt.RETIRE_CANDIDATE, None, rt.RETIRE_CANDIDATE),
    (rt.SUPERSEDED, None, rt.RETIRE_CANDIDATE),  # behaviour claiming more than it can
    (rt.SUPERSEDED, {"signal": "behaviour"}, rt.RETIRE_CANDIDATE),  # not a code signal
    (rt.STILL_NEEDED, CODE, rt.STILL_NEEDED),
    (rt.UNTESTABLE, CODE, rt.UNTESTABLE),
    (rt.INCONCLUSIVE, {"signal": "3-way"}, rt.INCONCLUSIVE),
])
def test_superseded_needs_behaviour_and_a_code_signal(behaviour, code, want):
    assert retirement.decide(behaviour, code) == want


@pytest.mark.parametrize("sig", list(retirement.CODE_SIGNALS))
def test_every_code_signal_counts_and_nothing_else(sig):
    assert retirement.is_code_signal({"signal": sig}) and retirement.is_code_signal(SimpleNamespace(signal=sig))
    assert not retirement.is_code_signal({"signal": "behaviour"}) and not retirement.is_code_signal(None)
    assert not retirement.is_code_signal({})


def test_only_superseded_with_a_code_signal_under_the_invariant_may_drop():
    J, INV = needed.Judgement, retirement.INVARIANT
    assert retirement.may_drop(J("superseded", code_signal=CODE, invariant=INV))
    assert not retirement.may_drop(J("superseded", code_signal=None, invariant=INV))
    assert not retirement.may_drop(J("superseded", code_signal=CODE, invariant=None))
    # a report from invariant 1: its code signal may be a patch-id upstream since reverted (issue 39)
    assert INV == 2 and not retirement.may_drop(J("superseded", code_signal=CODE, invariant=1))
    assert not retirement.may_drop(J("retire-candidate", code_signal=CODE, invariant=INV))
    assert not retirement.may_drop(J("still-needed", code_signal=CODE, invariant=INV))


def test_decide_writes_what_decided_into_the_reason():
    row = {"status": rt.RETIRE_CANDIDATE, "reason": "identical", "code_signal": CODE}
    rt._decide(row)
    assert row["status"] == rt.SUPERSEDED and row["needed"] == "superseded"
    assert row["reason"] == "code: upstream commit ccc has patch-id ppp (patch-id); behaviour: identical"
    row = {"status": rt.RETIRE_CANDIDATE, "reason": "identical", "code_signal": None}
    rt._decide(row)
    assert row["status"] == rt.RETIRE_CANDIDATE and row["needed"] == "retire-candidate"
    assert row["reason"].startswith("behaviour alone — no code signal") and row["reason"].endswith("; identical")
    row = {"status": rt.STILL_NEEDED, "reason": "add-one", "code_signal": CODE}
    rt._decide(row)
    assert row["status"] == rt.STILL_NEEDED and row["reason"] == ("kept: upstream has the lines (patch-id cccccccccccc) but "
                                                                   "behaviour at REF still needs it: add-one")
    row = {"status": rt.UNTESTABLE, "reason": "no scenario", "code_signal": CODE}
    rt._decide(row)
    assert row == {"status": rt.UNTESTABLE, "reason": "no scenario", "code_signal": CODE, "needed": "untestable"}


# ---- the report: exit code, table, the hooks, the saved report ----------------------------------


def _doc(rows, invariant=retirement.INVARIANT, commit="c" * 40):
    doc = {"upstream": {"ref": "main", "commit": commit, "base": "b" * 40}, "target": "t", "driver": {"kind": "fake"},
           "simulated": True, "runs": 10, "patches": rows, "still_failing": [], "reproducers": [{"name": "r", "hash": "h"}]}
    if invariant is not None:
        doc["invariant"] = invariant
    return doc


def _r(name, status, code=None, **kw):
    return {"name": name, "status": status, "needed": rt.NEEDED[status], "reason": f"{status} because", "applies": True,
            "scenario": kw.pop("scenario", None), "code_signal": code, **kw}


def test_exit_code_fails_only_on_what_stopped_working_or_could_not_be_judged():
    for st in (rt.NO_LONGER_EFFECTIVE, rt.INCONCLUSIVE, rt.REGRESSION):
        assert rt.retire_exit_code(_doc([_r("a", rt.STILL_NEEDED), _r("b", st)])) == 1
    ok = [rt.SUPERSEDED, rt.RETIRE_CANDIDATE, rt.STILL_NEEDED, rt.UNTESTABLE, rt.CONFLICT, rt.NOT_JUDGED]
    assert rt.retire_exit_code(_doc([_r(s, s) for s in ok])) == 0


def test_the_table_names_candidates_as_needing_review_and_shows_code_signals():
    doc = _doc([_r("a", rt.RETIRE_CANDIDATE), _r("b", rt.SUPERSEDED, CODE), _r("c", rt.STILL_NEEDED, CODE),
                _r("d", rt.CONFLICT, applies=False), _r("e", rt.STILL_NEEDED, applies=False)])
    doc["still_failing"] = [{"scenario": "r:s", "behaviour": "crash", "build": "x"}]
    title, _, rows = rt.format_retire_table(doc)
    assert title.startswith("retire check of t at main (cccccccccccc, base bbbbbbbbbbbb) — driver fake (simulated)")
    # one name per state (issue 36 item 5): `conflict`, never "conflict (does not apply)"
    assert [r[1] for r in rows] == ["retire-candidate (needs review)", "superseded", "still-needed", "conflict",
                                    "still-needed (does not apply)", "still failing"]
    assert rows[1][3] == "superseded because" and rows[2][3] == "still-needed because [code: patch-id]"
    assert rows[5] == ["(no patch)", "still failing", "r:s", "crash on x"]
    assert rt.NEEDED[rt.CONFLICT] == needed.CONFLICT == "conflict"


def test_review_lines_say_what_to_read_for_each_candidate():
    rv = {"question": "does upstream fix it?", "hunks": [{"file": "src/x.c", "line": 3, "header": "int f(void)"}],
          "ref_functions": [{"file": "src/x.c", "text": "3: int f(void) {\n4: }"},
                            {"file": "src/y.c", "missing": "gone"}],
          "runs": [{"scenario": "r:s", "pair": "add-one", "with": "b: pass (10/10)"}]}
    lines = rt.review_lines(_doc([_r("a", rt.RETIRE_CANDIDATE, review=rv), _r("b", rt.STILL_NEEDED, review=rv)]))
    assert lines == ["a: retire-candidate (needs review) — does upstream fix it?",
                     "  its hunks: src/x.c:3 int f(void)",
                     "  cccccccccccc's version: src/x.c (3: int f(void) { …); src/y.c: gone",
                     "  runs: 1 comparison(s), e.g. r:s add-one: b: pass (10/10)"]


def test_the_hooks_answer_upstream_has_it_only_for_superseded_with_a_code_signal_under_the_invariant():
    t, ref = SimpleNamespace(name="t"), "c" * 40
    doc = _doc([_r("a", rt.SUPERSEDED, CODE), _r("b", rt.RETIRE_CANDIDATE), _r("c", rt.STILL_NEEDED),
                _r("d", rt.SUPERSEDED), _r("e", rt.INCONCLUSIVE)])
    hook = rt.report_hook(doc)
    ans = {n: hook(t, SimpleNamespace(name=n), None, ref) for n in "abcde"}
    assert ans == {"a": True, "b": None, "c": False, "d": None, "e": None}
    assert hook.code_signal(SimpleNamespace(name="a"), ref) == CODE
    assert hook.code_signal(SimpleNamespace(name="b"), ref) is None
    assert hook(t, SimpleNamespace(name="a"), None, "d" * 40) is None  # another commit: the report says nothing
    assert hook.code_signal(SimpleNamespace(name="a"), "d" * 40) is None
    assert hook(t, SimpleNamespace(name="zz"), None, ref) is None
    assert hook.detail(SimpleNamespace(name="a"), ref) == "superseded at cccccccccccc: superseded because"
    old = rt.report_hook(_doc(doc["patches"], invariant=None))
    assert old(t, SimpleNamespace(name="a"), None, ref) is None  # made before the invariant


def test_the_upstreamed_detector_needs_the_hooks_code_signal(tmp_path):
    from lucepatch.engine import upstreamed

    p = SimpleNamespace(name="a", patch_id="0" * 40, diff=b"", reproducers=[])

    def says_yes(target, patch, source, ref):
        return True

    says_yes.code_signal = lambda patch, ref: None
    upstreamed.register_behaviour_hook(says_yes)
    try:
        hit = upstreamed.behaviour_says(p, target=None, source=None, ref="c" * 40)
        assert hit is None  # behaviour alone is never "already upstream"
        says_yes.code_signal = lambda patch, ref: {"signal": "3-way", "commit": "d" * 40}
        hit = upstreamed.behaviour_says(p, target=None, source=None, ref="c" * 40)
        assert hit.signal == "behaviour" and hit.commit == "d" * 40 and "code signal 3-way" in hit.detail
    finally:
        upstreamed.unregister_behaviour_hook(says_yes)


def _target(tmp_path, series="s1"):
    rdir = tmp_path / "ws" / "reproducers" / "r"
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / "r.c").write_text("int main(void) { return 0; }\n")
    (rdir / "reproducer.toml").write_text('target = "t"\nartifact = "libvgpu.so"\nsources = ["r.c"]\n\n'
                                          '[[scenario]]\nname = "control"\ncontrol = true\n\n[[scenario]]\nname = "s"\n')
    tdir = tmp_path / "ws" / "patches" / "t"
    tdir.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(name="t", family="t", series_hash=series, dir=tdir,
                           patches=[SimpleNamespace(name="a"), SimpleNamespace(name="b")])


def test_saved_reports_are_found_by_content_with_unchanged_reproducers(tmp_path):
    t = _target(tmp_path)
    h = rt.target_reproducers(t)[0].hash
    commit = "c" * 40
    doc = _doc([_r("a", rt.SUPERSEDED, CODE), _r("b", rt.RETIRE_CANDIDATE)])
    doc["reproducers"] = [{"name": "r", "hash": h}]
    cache = tmp_path / "cache"
    path = rt.save_report(doc, t, cache)
    assert path.parent.name == rt.content_key(t, commit) and json.loads(path.read_text()) == doc
    # a staged copy of the same content elsewhere finds it (its reproducers named by folder)
    staged = SimpleNamespace(name="t", family="t", series_hash="s1", dir=tmp_path / "elsewhere" / "patches" / "t",
                             patches=t.patches)
    assert rt.load_saved(staged, commit, cache) is None  # no reproducers beside the staged copy
    assert rt.load_saved(staged, commit, cache, reproducers=tmp_path / "ws" / "reproducers") == doc
    assert rt.load_saved(_target(tmp_path, "s2"), commit, cache) is None  # other content
    assert rt.load_saved(t, "d" * 40, cache) is None
    # the larger set of reproducers wins; a report whose reproducer changed is stale
    small = {**doc, "reproducers": []}
    rt.save_report(small, t, cache)
    assert rt.load_saved(t, commit, cache) == doc
    (tmp_path / "ws" / "reproducers" / "r" / "r.c").write_text("int main(void) { return 1; }\n")
    assert rt.load_saved(t, commit, cache) is None
    (path.parent / "torn.json").write_text("{")
    assert rt.load_saved(t, commit, cache) is None


def test_the_rebase_judge_reads_the_report_and_downgrades_what_the_invariant_does_not_accept(tmp_path, monkeypatch):
    t = _target(tmp_path)
    monkeypatch.setattr(rt.git, "try_resolve", lambda source, ref: ref)
    h = rt.target_reproducers(t)[0].hash
    commit = "c" * 40
    for inv in (retirement.INVARIANT, 1, None):
        doc = _doc([_r("a", rt.SUPERSEDED, CODE, scenario="r:s"), _r("b", rt.RETIRE_CANDIDATE)], invariant=inv)
        doc["reproducers"] = [{"name": "r", "hash": h}]
        cache = tmp_path / f"cache{inv}"
        rt.save_report(doc, t, cache)
        j = rt.judge(t, tmp_path, commit, t.patches, cache=cache)
        assert j["b"].needed == "retire-candidate" and j["b"].driver == "fake"
        if inv == retirement.INVARIANT:
            assert j["a"].needed == "superseded" and j["a"].code_signal == CODE and retirement.may_drop(j["a"])
            assert j["a"].scenario == "r:s" and j["a"].reason == "superseded: superseded because"
        else:
            assert j["a"].needed == "retire-candidate" and not retirement.may_drop(j["a"])
    j = rt.judge(t, tmp_path, commit, t.patches, cache=tmp_path / "none")
    assert {x.needed for x in j.values()} == {"not-judged"} and "verify --retire" in j["a"].reason


def test_declared_scenarios_problems_and_unselected_reproducers():
    r = SimpleNamespace(name="r", checked=[SimpleNamespace(name="s1"), SimpleNamespace(name="s2")],
                        scenario=lambda n: {"s1": SimpleNamespace(name="s1", control=False),
                                            "c": SimpleNamespace(name="c", control=True)}[n])
    pt = [SimpleNamespace(name="all", reproducers=[("r", "")]), SimpleNamespace(name="one", reproducers=[("r", "s1")]),
          SimpleNamespace(name="ctl", reproducers=[("r", "c")]), SimpleNamespace(name="gone", reproducers=[("x", "")]),
          SimpleNamespace(name="other", reproducers=[("o", "s")])]
    t = SimpleNamespace(name="t", patches=pt)
    decl, problems, unselected = rt.declared(t, {"r": r}, {"r", "o"})
    assert decl == {"all": ["r:s1", "r:s2"], "one": ["r:s1"], "ctl": [], "gone": [], "other": []}
    assert problems == {"ctl": "r:c is a control scenario; a patch names the behaviour it fixes",
                        "gone": "Reproducer: x names no reproducer of t; fix the trailer"}
    assert unselected == {"other": ["o"]}


def test_select_reproducers():
    t = SimpleNamespace(name="t")
    rs = [SimpleNamespace(name="a"), SimpleNamespace(name="b")]
    assert rt.select_reproducers(rs, None, t) == rs and rt.select_reproducers(rs, ["b", "b"], t) == [rs[1]]
    with pytest.raises(rt.UsageError, match="--reproducer c: not a reproducer of t; it has a, b"):
        rt.select_reproducers(rs, ["c"], t)


# ---- behaviour: signatures, states, comparisons ------------------------------------------------


def _rec(outcome, checks=(), signal=None):
    return RunRecord(variant="v", scenario="r:s", index=0, outcome=outcome, returncode=0, signal=signal, duration_s=0,
                     checks=list(checks))


def test_outcome_classes():
    bad_cu = {"name": "a", "expected": "CUDA_SUCCESS", "got": "CUDA_ERROR_INVALID_VALUE", "ok": False}
    bad_n = {"name": "a", "expected": "1", "got": "2", "ok": False}
    assert outcome_class(_rec("pass")) == "pass"
    assert outcome_class(_rec("crash", signal="SIGSEGV")) == "crash (SIGSEGV)"
    assert outcome_class(_rec("crash")) == "crash (signal)"
    assert outcome_class(_rec("timeout")) == "hang"
    assert outcome_class(_rec("fail-log")) == "logged error"
    assert outcome_class(_rec("fail", [bad_cu])) == "clean error"
    assert outcome_class(_rec("fail", [dict(bad_cu, got="cudaErrorInvalidValue")])) == "clean error"
    assert outcome_class(_rec("fail", [bad_n])) == "accounting mismatch"
    assert outcome_class(_rec("fail", [dict(bad_n, ok=True)])) == "failed exit"
    assert outcome_class(_rec("invalid")) == "invalid" and outcome_class(_rec("skipped")) == "skipped"
    assert signature(_rec("fail", [bad_n])) == ("accounting mismatch", (("a", "1", "2"),))
    assert describe_signature(("accounting mismatch", (("a", "1", "1"), ("b", "1", "2")))) == \
        "accounting mismatch: b: expected 1, got 2"
    assert describe_signature(("pass", (("a", "1", "2"),))) == "pass"
    assert describe_signature(("crash (SIGSEGV)", (("a", "1", "1"),))) == "crash (SIGSEGV)"


def test_states_of_a_scenario_on_a_build():
    assert _ob("b", "r:s", [(PASS, 10)]).state == B_PASS and _ob("b", "r:s", [(PASS, 10)]).passes
    assert _ob("b", "r:s", [(CRASH, 10)]).state == B_FAIL
    assert _ob("b", "r:s", [(CRASH, 5), (PASS, 5)]).state == B_MIXED
    assert _ob("b", "r:s", [], skipped=10, extra=10).state == B_SKIPPED
    assert _ob("b", "r:s", [(PASS, 9)], skipped=1, extra=1).state == B_INVALID
    assert _ob("b", "r:s", [(PASS, 9)], invalid=1, extra=1).state == B_INVALID
    assert _ob("b", "r:s", []).state == B_INVALID  # no run at all
    assert OnBuild("b", "r:s", built=False, why="cmake failed").state == B_UNBUILT
    assert OnBuild("b", "r:s", built=False, why="cmake failed").describe() == "not built (cmake failed)"
    assert _ob("b", "r:s", [], skipped=10, extra=10, why="2 GPUs").describe() == "skipped (2 GPUs)"
    assert _ob("b", "r:s", [(PASS, 9)], invalid=1, extra=1).describe() == "invalid (1 invalid, 0 skipped of 10)"
    assert _ob("b", "r:s", [(CRASH, 6), (PASS, 4)]).describe() == "mixed: 6x crash (SIGSEGV), 4x pass"
    assert _ob("b", "r:s", [(ERR, 10)]).describe() == \
        "clean error: cuMemAlloc: expected CUDA_ERROR_INVALID_CONTEXT, got CUDA_SUCCESS (10/10)"
    assert _ob("b", "r:s", [(PASS, 9)], invalid=1, extra=1).uniform is None
    assert _ob("b", "r:s", [(PASS, 10)]).to_json() == {"build": "b", "state": "pass", "runs": 10,
                                                       "summary": "pass (10/10)", "first_error": ""}


def test_the_check_that_differs_is_named():
    a = _ob("a", "r:s", [(("clean error", (("x", "1", "2"),)), 10)])
    b = _ob("b", "r:s", [(("clean error", (("x", "1", "3"),)), 10)])
    assert _check_diff(a, b) == "check 'x': got 2 on a, 3 on b (expected 1)"
    c = _ob("c", "r:s", [(("clean error", (("y", "1", "2"),)), 10)])
    assert _check_diff(a, c) == "check 'x' on a, 'y' on c"
    d = _ob("d", "r:s", [(("clean error", (("x", "1", "2"), ("z", "0", "1"))), 10)])
    assert _check_diff(a, d) == "only d gets to check 'z' (1)" and _check_diff(d, a) == "only d gets to check 'z' (1)"
    assert _check_diff(a, a) == "the check results differ"


def test_compare_kinds_and_why():
    def cmp(wo, wi, **kw):
        lab = lab_of({("w", "s"): wo, ("x", "s"): wi}, **kw)
        return lab.compare(B("w"), B("x"), "r:s")
    c = cmp([(CRASH, 10)], [(PASS, 10)])
    assert c.kind == DIFFERENT and c.why == "crash (SIGSEGV) on w -> pass on x"
    c = cmp([(("clean error", (("x", "1", "2"),)), 10)], [(("clean error", (("x", "1", "3"),)), 10)])
    assert c.kind == DIFFERENT and c.why == "clean error on both, but check 'x': got 2 on w, 3 on x (expected 1)"
    c = cmp([(PASS, 10)], [(PASS, 10)])
    assert c.kind == IDENTICAL and c.why == "pass (10/10) on both"
    c = cmp(_ob("w", "r:s", [], skipped=10, extra=10, why="2 GPUs"), _ob("x", "r:s", [], skipped=10, extra=10))
    assert c.kind == INCONCLUSIVE and c.why == "not run on either build (2 GPUs)" and c.not_run
    c = cmp([(PASS, 10)], _ob("x", "r:s", [], skipped=10, extra=10, why="2 GPUs"))
    assert c.kind == INCONCLUSIVE and c.why == "x: skipped (2 GPUs)"
    c = cmp([(PASS, 10)], [(PASS, 10)], failing_controls={"w"})
    assert c.kind == INCONCLUSIVE and c.why.startswith("control r:control on w: crash (SIGSEGV)")
    c = cmp([(PASS, 10)], [(PASS, 10)], failing_controls={"x"})
    assert c.kind == INCONCLUSIVE and c.why.startswith("control r:control on x")
    # a control that cannot run here does not make the comparison inconclusive
    c = cmp([(CRASH, 10)], [(PASS, 10)], skipped_controls={"w", "x"})
    assert c.kind == DIFFERENT
    assert c.to_json()["without"]["state"] == "fail" and c.to_json()["kind"] == "different"


def test_the_state_of_a_probe():
    from lucepatch.verify.runner import FAIL, INVALID, PASS as P_, SKIPPED

    assert _state([])[0] == B_INVALID
    assert _state([_rec(P_)] * 3)[0] == B_PASS
    assert _state([_rec(P_), _rec(FAIL)])[0] == B_FAIL
    assert _state([_rec(SKIPPED)] * 2)[0] == B_SKIPPED
    assert _state([_rec(P_), _rec(SKIPPED)])[0] == B_INVALID
    assert _state([_rec(P_), _rec(INVALID)])[0] == B_INVALID
    _, t = _state([_rec(P_), _rec(FAIL)])
    assert t["runs"] == 2 and t["failures"] == 1


# ---- what the mutation run (tools/mutate.py) showed untested -----------------------------------


def test_a_patch_judged_by_leave_one_out_alone_and_at_the_pin():
    """No add-one pair (its text needs the whole series) and base == REF (the pin): only the pairs
    there are compared, each once, and no bisect is suggested between a commit and itself."""
    lab = lab_of({("s-p", "s"): [(CRASH, 10)], ("s", "s"): [(PASS, 10)]})
    c = rt.Context("a" * 40, "aaaaaaaaaaaa", [], leave_one_out={"p": (B("s-p"), B("s"))})
    v = rt.judge_patch(lab, P, ["r:s"], c, c, [], rt.make_blame(lab, c.commit, c.commit))
    assert v.status == rt.STILL_NEEDED and v.reason.startswith("leave-one-out at aaaaaaaaaaaa")
    assert [(d["at"], d["pair"]) for d in v.details] == [("ref", "leave-one-out")]
    lab = lab_of({("s-p", "s"): [(PASS, 10)], ("s", "s"): [(PASS, 10)]}, failing_controls={"s"})
    v = rt.judge_patch(lab, P, ["r:s"], c, c, [], rt.make_blame(lab, c.commit, c.commit))
    assert v.status == rt.INCONCLUSIVE and "first bad commit" not in v.reason
    assert "the control fails on s and passes on s-p: the reproducer's assumptions" in v.reason


def test_blame_names_exactly_where_the_control_fails_and_passes():
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(same, same, FIXED_AT_BASE, FIXED_AT_BASE, failing_controls={"ref-bare+p"})
    assert ("the control fails on ref-bare+p and passes on base-bare, base-bare+p, base-series …: the reproducer's "
            "assumptions do not hold on the failing build(s)") in v.reason
    v = judged(same, same, FIXED_AT_BASE, FIXED_AT_BASE, failing_controls={
        "ref-bare+p", "ref-bare", "ref-series", "ref-series-p", "base-bare", "base-series"})
    assert "the control fails on base-bare, base-series, ref-bare, ref-bare+p, ref-series, ref-series-p and passes " \
           "on base-bare+p, base-series-p: the reproducer" in v.reason
    v = judged(same, same, FIXED_AT_BASE, FIXED_AT_BASE, failing_controls={
        "ref-bare+p", "ref-bare", "ref-series", "ref-series-p", "base-bare", "base-series", "base-bare+p",
        "base-series-p"})
    assert "passes on" not in v.reason and "assumptions" not in v.reason
    # an unbuilt build has no control result to pass: never listed as passing
    lab, ref, base = world(same, same, FIXED_AT_BASE, FIXED_AT_BASE, failing_controls={"ref-bare+p"})
    lab.builds[("gone",)] = SimpleNamespace(name="gone", variant=None, key=None)
    lab.results[("unbuilt:gone", "r:control")] = _ob("gone", "r:control", [(PASS, 10)])
    v = rt.judge_patch(lab, P, ["r:s"], ref, base, [], rt.make_blame(lab, base.commit, ref.commit))
    assert "gone" not in v.reason
    # a comparison that is not about a control is reported as it is
    v = judged(([(CRASH, 5), (PASS, 5)], [(PASS, 10)]), same, FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.reason == "add-one at aaaaaaaaaaaa: r:s: ref-bare: mixed: 5x crash (SIGSEGV), 5x pass"


def test_changing_one_failure_into_another_at_ref_keeps_it_needed():
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(([(ERR, 10)], [(CRASH, 10)]), same, FIXED_AT_BASE, FIXED_AT_BASE)
    assert v.status == rt.STILL_NEEDED and "clean error: cuMemAlloc" in v.reason


def test_the_bug_back_is_found_on_the_pair_and_scenario_that_showed_the_fix():
    """The base showed the fix on leave-one-out of s2 only: REF's answer is read from that very pair
    and scenario (where it fails on both sides), not from another that passes."""
    names = {"ref-bare": {"s1": PASS, "s2": PASS}, "ref-bare+p": {"s1": PASS, "s2": PASS},
             "ref-series-p": {"s1": PASS, "s2": CRASH}, "ref-series": {"s1": PASS, "s2": CRASH},
             "base-bare": {"s1": PASS, "s2": PASS}, "base-bare+p": {"s1": PASS, "s2": PASS},
             "base-series-p": {"s1": PASS, "s2": CRASH}, "base-series": {"s1": PASS, "s2": PASS}}
    lab = lab_of({(b, s): [(sig, 10)] for b, per in names.items() for s, sig in per.items()})
    b = {n: B(n) for n in names}
    ref = cx("a", add=(b["ref-bare"], b["ref-bare+p"]), loo=(b["ref-series-p"], b["ref-series"]))
    base = cx("b", add=(b["base-bare"], b["base-bare+p"]), loo=(b["base-series-p"], b["base-series"]))
    v = rt.judge_patch(lab, P, ["r:s1", "r:s2"], ref, base, [], rt.make_blame(lab, base.commit, ref.commit))
    assert v.status == rt.NO_LONGER_EFFECTIVE and v.scenario == "r:s2"


def test_a_conflicting_patch_counts_only_what_it_fixed_at_the_base_once():
    # at the base the patch turned one failure into another: not a fix
    v = conflict([(PASS, 10)], [(PASS, 10)], base=([(ERR, 10)], [(CRASH, 10)]))
    assert v.status == rt.CONFLICT and v.reason.endswith("no scenario distinguished it at the base")
    # both base pairs show the fix: the scenario is judged once
    lab = lab_of({("bb", "s"): [(CRASH, 10)], ("bb+p", "s"): [(PASS, 10)], ("bs-p", "s"): [(CRASH, 10)],
                  ("bs", "s"): [(PASS, 10)], ("ref-bare", "s"): [(CRASH, 10)], ("ref-series", "s"): [(CRASH, 10)]})
    ref = cx("a", full=B("ref-series", ["q"]), bare=B("ref-bare"), conflicts=["p"])
    basecx = cx("b", add=(B("bb"), B("bb+p")), loo=(B("bs-p"), B("bs")))
    v = rt.judge_conflict(lab, P, ["r:s"], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit))
    assert v.status == rt.STILL_NEEDED and v.reason.count("r:s") == 1
    assert [(d["at"], d["pair"]) for d in v.details] == [("base", "add-one"), ("base", "leave-one-out"),
                                                        ("ref", "bare"), ("ref", "series")]


def test_a_pass_on_ref_plus_series_counts_only_with_its_control_passing():
    lab = lab_of({("base-bare", "s"): [(CRASH, 10)], ("base-bare+p", "s"): [(PASS, 10)],
                  ("ref-bare", "s"): [(CRASH, 10)], ("ref-series", "s"): [(PASS, 10)]}, failing_controls={"ref-series"})
    ref = cx("a", full=B("ref-series", ["q"]), bare=B("ref-bare"), conflicts=["p"])
    basecx = cx("b", add=(B("base-bare"), B("base-bare+p")))
    v = rt.judge_conflict(lab, P, ["r:s"], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit), Cov({}))
    assert v.status == rt.STILL_NEEDED


def test_many_scenarios_still_failing_are_counted_not_listed():
    scen = [f"s{i}" for i in range(7)]
    table = {}
    for s in scen:
        table.update({("base-bare", s): [(CRASH, 10)], ("base-bare+p", s): [(PASS, 10)],
                      ("ref-bare", s): [(CRASH, 10)], ("ref-series", s): [(CRASH, 10)]})
    lab = lab_of(table)
    ref = cx("a", full=B("ref-series", ["q"]), bare=B("ref-bare"), conflicts=["p"])
    basecx = cx("b", add=(B("base-bare"), B("base-bare+p")))
    v = rt.judge_conflict(lab, P, [f"r:{s}" for s in scen], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit))
    assert v.status == rt.STILL_NEEDED
    assert "; r:s1: crash (SIGSEGV) (10/10); r:s2: crash (SIGSEGV) (10/10); r:s3: crash (SIGSEGV) (10/10); +3 more" \
        in v.reason and "r:s4" not in v.reason
    v = rt.judge_conflict(lab, P, [f"r:{s}" for s in scen[:4]], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit))
    assert "more" not in v.reason and "r:s3: crash" in v.reason


def test_the_joint_check_leaves_non_candidates_and_conflicting_patches_alone():
    built = []

    class Lab2(JointLab):
        def build(self, name, commit, patches):
            built.append(tuple(patches))
            return B(name, patches)

    full = B("ref+series", ("a", "x", "y"))
    c = rt.Context("c" * 40, "cccccccccccc", ["z"], full=full)
    rows = [{"name": n, "status": rt.RETIRE_CANDIDATE if n in "xy" else rt.STILL_NEEDED, "reason": f"{n}'s", "needed": ""}
            for n in ("a", "x", "y", "z")]
    rt._joint(Lab2(), SimpleNamespace(order=["a", "x", "y", "z"]), c, rows,
              {"r": SimpleNamespace(checked=[SimpleNamespace(name="s")])})
    assert all("z" not in b for b in built)  # z does not apply at REF: never in a build there
    assert rows[0] == {"name": "a", "status": rt.STILL_NEEDED, "reason": "a's", "needed": ""}
    assert rows[3] == {"name": "z", "status": rt.STILL_NEEDED, "reason": "z's", "needed": ""}
    assert rows[2]["reason"] == ("joint check at cccccccccccc: removing it with x changes r:s (crash (SIGSEGV) -> "
                                 "pass) although alone it changes nothing there; no coverage map to attribute it")


def test_the_joint_check_keeps_the_whole_set_when_removing_it_whole_is_fine():
    """Removing x and y together (not all three) changes r:s; removing all three does not: the set
    that was measured whole is kept whole (the greedy search would have split it)."""
    class Odd(JointLab):
        def compare(self, without, with_, s):
            gone = {"x", "y", "w"} - set(without.patches)
            kind = DIFFERENT if gone == {"x", "y"} else IDENTICAL
            return Comparison(kind, s, _ob("a", s, [(PASS, 10)]), _ob("b", s, [(PASS, 10)]), "")
    c = rt.Context("c" * 40, "cccccccccccc", [], full=B("ref+series", ("x", "y", "w")))
    rows = [{"name": n, "status": rt.RETIRE_CANDIDATE, "reason": "", "needed": ""} for n in ("x", "y", "w")]
    rt._joint(Odd(), SimpleNamespace(order=["x", "y", "w"]), c, rows,
              {"r": SimpleNamespace(checked=[SimpleNamespace(name="s")])})
    assert [r["status"] for r in rows] == [rt.RETIRE_CANDIDATE] * 3


def test_the_sweep_counts_one_failure_turned_into_another_as_needed_and_adds_nothing_without_points():
    err10 = [(ERR, 10)]
    row, _ = _sweep({"r:s@part=100": (DIFFERENT, err10, CRASH10), "r:s@part=50": (IDENTICAL, PASS10, PASS10)})
    assert row["status"] == rt.STILL_NEEDED
    s = Scenario("s")  # no parameters, no points
    c = cx("a", add=(B("ref-bare"), B("ref-bare+p")))
    row = {"name": "p", "status": rt.RETIRE_CANDIDATE, "judged": ["r:s"], "reason": "identical", "needed": ""}
    rt._sweep(SweepLab({}), c, [row], {"r": SimpleNamespace(scenario=lambda name: s)})
    assert row["reason"] == "identical" and row["sweep"] == [] and row["status"] == rt.RETIRE_CANDIDATE


def test_decide_leaves_a_still_needed_reason_alone_without_a_code_signal():
    row = {"status": rt.STILL_NEEDED, "reason": "add-one", "code_signal": None}
    rt._decide(row)
    assert row == {"status": rt.STILL_NEEDED, "reason": "add-one", "code_signal": None, "needed": "still-needed"}


def test_the_table_of_a_real_driver_report_and_the_scenario_that_decided():
    doc = _doc([_r("a", rt.STILL_NEEDED, scenario="r:s")])
    doc.update(simulated=False, driver={"kind": "real"})
    title, _, rows = rt.format_retire_table(doc)
    assert title.endswith("— driver real, 10 runs per side") and rows[0][2] == "r:s"


def test_review_lines_skip_a_candidate_without_review_material():
    assert rt.review_lines(_doc([_r("a", rt.RETIRE_CANDIDATE)])) == []


def test_the_largest_unchanged_set_of_reproducers_wins(tmp_path):
    t = _target(tmp_path)
    r2 = tmp_path / "ws" / "reproducers" / "r2"
    r2.mkdir()
    (r2 / "r.c").write_text("int main(void) { return 0; }\n")
    toml = (tmp_path / "ws" / "reproducers" / "r" / "reproducer.toml").read_text()
    cache, commit = tmp_path / "cache", "c" * 40
    # the file of the larger report must sort first, so that "the last one read" would be the smaller
    for i in range(200):
        (r2 / "reproducer.toml").write_text(toml + f"# {i}\n")
        hashes = {r.name: r.hash for r in rt.target_reproducers(t)}
        big = [{"name": "r", "hash": hashes["r"]}, {"name": "r2", "hash": hashes["r2"]}]
        small = [{"name": "r", "hash": hashes["r"]}]
        if retire_report._reproducers_key(big) < retire_report._reproducers_key(small):
            break
    for used in (big, small):
        rt.save_report({**_doc([_r("a", rt.STILL_NEEDED)]), "reproducers": used}, t, cache)
    assert rt.load_saved(t, commit, cache)["reproducers"] == big


def test_the_rebase_judge_resolves_the_ref_and_says_which_driver_decided(tmp_path, monkeypatch):
    t = _target(tmp_path)
    h = rt.target_reproducers(t)[0].hash
    commit = "c" * 40
    monkeypatch.setattr(rt.git, "try_resolve", lambda source, ref: commit if ref in ("HEAD", commit) else None)
    for kind, want in (("real", "real"), ("fake", "fake"), ("mixed", None)):
        doc = _doc([_r("a", rt.STILL_NEEDED), _r("b", rt.INCONCLUSIVE)])
        doc.update(reproducers=[{"name": "r", "hash": h}], driver={"kind": kind})
        cache = tmp_path / f"cache-{kind}"
        rt.save_report(doc, t, cache)
        j = rt.judge(t, tmp_path, "HEAD", t.patches, cache=cache)  # HEAD: resolved to the commit
        assert j["a"].needed == "still-needed" and j["a"].driver == want
        assert j["b"].needed == "inconclusive"


def test_lab_keys_builds_by_their_build_key_and_measures_what_it_lacks():
    lab = Lab.__new__(Lab)
    built = SimpleNamespace(name="x", variant=SimpleNamespace(provenance={"build_key": "k1"}), key="k1")
    unbuilt = SimpleNamespace(name="y", variant=None, key=None)
    assert lab._id(built) == "k1" and lab._id(unbuilt) == "unbuilt:y"
    lab.results = {}

    def measure(builds, scenarios):
        for b in builds:
            for s in scenarios:
                lab.results[(lab._id(b), s)] = _ob(b.name, s, [(PASS, 10)])
    lab.measure = measure
    assert lab.on(built, "r:s").state == B_PASS and ("k1", "r:s") in lab.results


def test_one_skipped_side_is_named_as_that_side():
    lab = lab_of({("w", "s"): _ob("w", "r:s", [], skipped=10, extra=10, why="2 GPUs"), ("x", "s"): [(PASS, 10)]})
    c = lab.compare(B("w"), B("x"), "r:s")
    assert c.kind == INCONCLUSIVE and c.why == "w: skipped (2 GPUs)"


def test_the_coverage_map_says_whose_hunks_a_scenario_ran_and_skipped_scenarios_reach_nothing():
    from lucepatch.upstream.coverage import CoverageMap, Hunk, format_coverage_map

    hunks = {"x": [Hunk("x", 0, "src/a.c", 10, [11], [10, 11]), Hunk("x", 1, "src/a.c", 40, [41], [40, 41])],
             "y": [Hunk("y", 0, "src/b.c", 5, [6], [5, 6])]}
    scen = {"r:ran-x": {"complete": True, "outcome": "pass", "why": "", "hunks": ["x#1"], "lines": ["x#1:41"]},
            "r:ran-both": {"complete": True, "outcome": "pass", "why": "", "hunks": ["y#0", "x#0"], "lines": []},
            "r:crashed": {"complete": False, "outcome": "crash", "why": "no coverage written", "hunks": [], "lines": []},
            "w:needs-gpu": {"complete": False, "skipped": True, "outcome": "skipped", "why": "needs the real CUDA driver",
                            "hunks": [], "lines": []}}
    m = CoverageMap("c" * 40, {"name": "cov"}, hunks, scen, {"x#0": [11], "x#1": [41], "y#0": [6]})
    assert m.executed_by("r:ran-x") == ["x"] and m.executed_by("r:ran-both") == ["y", "x"]
    assert m.executed_by("r:crashed") is None and m.executed_by("w:needs-gpu") is None
    assert m.executed_by("r:unknown") is None
    # a crashed run reaches every patch (conservatively); a skipped one reaches nothing
    assert m.reaching("x") == ["r:ran-x", "r:ran-both", "r:crashed"]
    assert m.reaching("y") == ["r:ran-both", "r:crashed"]
    assert m.incomplete == ["r:crashed"] and m.skipped == ["w:needs-gpu"]
    assert m.unreached("x") == ["src/a.c:11"] and m.unreached("y") == ["src/b.c:6"]
    rows = format_coverage_map(m)[2]
    assert ["(skipped)", "", "w:needs-gpu", "needs the real CUDA driver"] in rows
    assert ["(incomplete)", "", "r:crashed", "no coverage written"] in rows


# ---- issue 36: REF measured as it is, or nothing said about it --------------------------------------

UNBUILT = OnBuild("ref-bare", "r:s", built=False, why="hami-core aaaaaaaaaaaa+build-only: aaaaaaaaaaaa does not build here")


def test_a_conflicting_patch_is_never_said_to_behave_at_ref_when_ref_was_not_built():
    """issue 36: REF + Build-Only not built (0 runs) used to give `conflict`, "without it REF already
    behaves as it did with it at the base" — a statement nothing measured."""
    v = conflict(UNBUILT, [(PASS, 10)])
    assert v.status == rt.INCONCLUSIVE and v.scenario == "r:s"
    assert "already behaves" not in v.reason and "not measured at aaaaaaaaaaaa without it: r:s: ref-bare: not built" in v.reason
    # a failing control on REF + Build-Only measures nothing either
    lab = lab_of({("base-bare", "s"): FIXED_AT_BASE[0], ("base-bare+p", "s"): FIXED_AT_BASE[1],
                  ("ref-bare", "s"): [(PASS, 10)], ("ref-series", "s"): [(PASS, 10)]}, failing_controls={"ref-bare"})
    ref = cx("a", full=B("ref-series", ["q"]), bare=B("ref-bare"), conflicts=["p"])
    basecx = cx("b", add=(B("base-bare"), B("base-bare+p")))
    v = rt.judge_conflict(lab, P, ["r:s"], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit))
    assert v.status == rt.INCONCLUSIVE and "control r:control on ref-bare" in v.reason


def _commit_of(name):
    return ("a" if name.startswith("ref") else "b") * 40


def doc_of(lab, rows, still=()):
    """A retire report as _doc writes it, from a stand-in Lab (what check_reasons reads)."""
    names = sorted({ob.build for ob in lab.results.values()} | {b.name for b in lab.builds.values()})
    return {"upstream": {"commit": "a" * 40, "base": "b" * 40},
            "builds": [{"name": n, "ref": _commit_of(n), "commit": _commit_of(n), "build_key": n, "built": True}
                       for n in names],
            "measured": [{"build_key": k, "scenario": s, **ob.to_json()} for (k, s), ob in lab.results.items()],
            "patches": rows, "still_failing": list(still)}


def _row_of(v, judged=("r:s",)):
    return {"name": "p", "status": v.status, "reason": v.reason, "judged": list(judged), "scenarios": v.details}


OUTCOMES = {"pass": [(PASS, 10)], "crash": [(CRASH, 10)], "err": [(ERR, 10)], "mixed": [(CRASH, 5), (PASS, 5)],
            "unbuilt": None}


@pytest.mark.parametrize("bare", sorted(OUTCOMES))
@pytest.mark.parametrize("full", ["pass", "crash", "unbuilt"])
@pytest.mark.parametrize("at_base", ["fixed", "same"])
def test_every_conflict_reason_names_runs_the_report_holds(bare, full, at_base):
    """The invariant (issue 36): whatever REF did — or was never built to do —, the reason of a
    patch that does not apply names only runs that exist in the report."""
    def ob(kind, name):
        return OnBuild(name, "r:s", built=False, why="not built: does not build here") if kind == "unbuilt" \
            else OUTCOMES[kind]
    base = FIXED_AT_BASE if at_base == "fixed" else ([(PASS, 10)], [(PASS, 10)])
    lab = lab_of({("base-bare", "s"): base[0], ("base-bare+p", "s"): base[1], ("ref-bare", "s"): ob(bare, "ref-bare"),
                  ("ref-series", "s"): ob(full, "ref-series")})
    ref = cx("a", full=B("ref-series", ["q"]), bare=B("ref-bare"), conflicts=["p"])
    basecx = cx("b", add=(B("base-bare"), B("base-bare+p")))
    v = rt.judge_conflict(lab, P, ["r:s"], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit), Cov({"r:s": ["q"]}))
    assert retire_report.check_reasons(doc_of(lab, [_row_of(v)])) == [], v.reason
    if bare == "unbuilt":
        assert v.status in (rt.INCONCLUSIVE, rt.CONFLICT) and "behaves" not in v.reason


@pytest.mark.parametrize("ref_add", ["pass", "crash", "mixed", "unbuilt"])
@pytest.mark.parametrize("base_add", ["fixed", "same", "unbuilt"])
def test_every_judged_reason_names_runs_the_report_holds(ref_add, base_add):
    def pair(kind):
        if kind == "unbuilt":
            return (OnBuild("x", "r:s", built=False, why="not built"), [(PASS, 10)])
        if kind == "fixed":
            return FIXED_AT_BASE
        if kind == "same":
            return ([(PASS, 10)], [(PASS, 10)])
        return (OUTCOMES[kind], [(PASS, 10)])
    names = ["ref-bare", "ref-bare+p", "ref-series-p", "ref-series", "base-bare", "base-bare+p", "base-series-p",
             "base-series"]
    vals = [*pair(ref_add), *pair(ref_add), *pair(base_add), *pair(base_add)]
    table = {}
    for n, v in zip(names, vals):
        table[(n, "s")] = OnBuild(n, "r:s", built=False, why="not built") if isinstance(v, OnBuild) else v
    lab = lab_of(table)
    b = {n: B(n) for n in names}
    ref = cx("a", add=(b["ref-bare"], b["ref-bare+p"]), loo=(b["ref-series-p"], b["ref-series"]))
    basecx = cx("b", add=(b["base-bare"], b["base-bare+p"]), loo=(b["base-series-p"], b["base-series"]))
    v = rt.judge_patch(lab, P, ["r:s"], ref, basecx, [], rt.make_blame(lab, basecx.commit, ref.commit))
    assert retire_report.check_reasons(doc_of(lab, [_row_of(v)])) == [], v.reason


def test_the_invariant_check_names_a_reason_without_runs():
    """check_reasons catches what issue 36 found: a statement about REF with REF never built."""
    lab = lab_of({("base-bare", "s"): FIXED_AT_BASE[0], ("base-bare+p", "s"): FIXED_AT_BASE[1], ("ref-bare", "s"): UNBUILT,
                  ("ref-series", "s"): [(PASS, 10)]})
    bad = {"name": "p", "status": rt.CONFLICT, "judged": ["r:s"], "scenarios": [],
           "reason": "does not apply at aaaaaaaaaaaa; without it REF already behaves as it did with it at the base on "
                     "r:t — rebase it to judge add-one and leave-one-out"}
    lab.results.pop(("ref-series", "r:s"))
    found = retire_report.check_reasons(doc_of(lab, [bad]))
    assert found and "r:t, which never ran" in found[0]
    bad["reason"] = bad["reason"].replace("r:t", "r:s")
    found = retire_report.check_reasons(doc_of(lab, [bad]))
    assert found == ["p: says how aaaaaaaaaaaa behaves on r:s with no run of it there: 'without it REF already behaves "
                     "as it did with it at the base on r:s'"]
    # a build named without runs, a bisect commit without probes, a still-failing line without runs
    bad["reason"] = "add-one at aaaaaaaaaaaa: r:s: pass on ref-bare -> crash on ghost"
    doc = doc_of(lab, [bad])
    doc["builds"].append({"name": "ghost", "ref": "a" * 40, "commit": "a" * 40, "build_key": None, "built": False})
    assert any("names build ghost" in f for f in retire_report.check_reasons(doc))
    bad["reason"] = "identical with and without it on r:s; upstream fixed it in 0123456789ab (a subject)"
    assert any("0123456789ab" in f for f in retire_report.check_reasons(doc_of(lab, [bad])))
    bad["applied_upstream"] = {"commit": "0123456789ab" * 3, "probes": [{"commit": "0123456789ab" * 3,
                                                                        "scenarios": {"s": {"behaviour": "pass"}}}]}
    assert retire_report.check_reasons(doc_of(lab, [bad])) == []
    assert retire_report.check_reasons(doc_of(lab, [], still=[{"scenario": "r:s", "build": "ref-series"}])) == \
        ["still failing r:s on ref-series: no runs of it in the report"]
    # what was not measured is said, not checked
    bad["reason"] = "not measured: REF does not build: hami-core aaaaaaaaaaaa+build-only: …"
    assert retire_report.check_reasons(doc_of(lab, [bad])) == []


def test_the_measurement_plan_runs_on_each_build_only_what_is_compared_there():
    """issue 36 (item 7): every scenario ran on every build (most of a retire's 1187 s at 52f33fc);
    now REF + series runs every checked scenario, each pair its patch's, REF's bare and series builds
    also those of the patches that do not apply there — and nothing else."""
    b = {n: B(n) for n in ["ref-bare", "ref-bare+p", "ref-series-p", "ref-series", "base-bare", "base-bare+p",
                           "base-series-p", "base-series"]}
    ref = rt.Context("a" * 40, "a" * 12, ["q"], full=b["ref-series"], bare=b["ref-bare"],
                     add_one={"p": (b["ref-bare"], b["ref-bare+p"])}, leave_one_out={"p": (b["ref-series-p"], b["ref-series"])})
    base = rt.Context("b" * 40, "b" * 12, [], full=b["base-series"], bare=b["base-bare"],
                      add_one={"p": (b["base-bare"], b["base-bare+p"]), "q": (b["base-bare"], b["base-bare+p"])},
                      leave_one_out={"p": (b["base-series-p"], b["base-series"])})
    repros = {"r": SimpleNamespace(checked=[SimpleNamespace(name=n) for n in ("s", "t", "u", "v")])}
    plan = rt.measurement_plan(ref, base, {"p": ["r:s"], "q": ["r:t"], "x": []}, repros)
    got = {k.name: sorted(v) for k, v in plan}
    assert len(got) == len(plan)  # one entry per build
    assert got == {"ref-series": ["r:s", "r:t", "r:u", "r:v"], "ref-bare": ["r:s", "r:t"], "ref-bare+p": ["r:s"],
                   "ref-series-p": ["r:s"], "base-bare": ["r:s", "r:t"], "base-bare+p": ["r:s", "r:t"],
                   "base-series-p": ["r:s"], "base-series": ["r:s"]}


# ---- issue 36: an upstream that made a bug worse ------------------------------------------------

WRONG = ("accounting mismatch", (("charged", "67108864", "0"),))


def test_a_conflicting_patch_whose_bug_upstream_made_worse_says_so_with_both_sides():
    """At the base, without the patch: a wrong value (uncharged); at REF without it: SIGSEGV."""
    v = conflict([(CRASH, 10)], [(CRASH, 10)], base=([(WRONG, 10)], [(PASS, 10)]))
    assert v.status == rt.WORSE_UPSTREAM and retire_report.NEEDED[v.status] == "still-needed"
    assert ("upstream made r:s worse: without it, base-bare: accounting mismatch: charged: expected 67108864, got 0 "
            "(10/10) at the base, ref-bare: crash (SIGSEGV) (10/10) at aaaaaaaaaaaa") in v.reason
    # a crash at the base too: still needed, not "made worse"
    assert conflict([(CRASH, 10)], [(CRASH, 10)]).status == rt.STILL_NEEDED


def test_a_patch_whose_bug_upstream_made_worse_at_ref_says_so():
    v = judged(([(CRASH, 10)], [(PASS, 10)]), ([(CRASH, 10)], [(PASS, 10)]), ([(WRONG, 10)], [(PASS, 10)]),
               ([(WRONG, 10)], [(PASS, 10)]))
    assert v.status == rt.WORSE_UPSTREAM
    assert "upstream made it worse: without it, base-bare: accounting mismatch" in v.reason
    assert "ref-bare: crash (SIGSEGV) (10/10) at aaaaaaaaaaaa" in v.reason
    lab, ref, base = world(([(CRASH, 10)], [(PASS, 10)]), ([(CRASH, 10)], [(PASS, 10)]), ([(WRONG, 10)], [(PASS, 10)]),
                           ([(WRONG, 10)], [(PASS, 10)]))
    assert retire_report.check_reasons(doc_of(lab, [_row_of(v)])) == []
    # the same failure at both: needed, as before
    assert judged(([(CRASH, 10)], [(PASS, 10)]), ([(CRASH, 10)], [(PASS, 10)]), FIXED_AT_BASE,
                  FIXED_AT_BASE).status == rt.STILL_NEEDED


def test_the_report_lists_what_upstream_made_worse_and_the_table_shows_it():
    lab = lab_of({("base-bare", "s"): [(WRONG, 10)], ("ref-bare", "s"): [(CRASH, 10)],
                  ("base-bare", "t"): [(WRONG, 10)], ("ref-bare", "t"): [(WRONG, 10)],
                  ("base-bare", "u"): [(PASS, 10)], ("ref-bare", "u"): [(CRASH, 10)]})
    got = retire_report.made_worse_of(lab, {"base": B("base-bare"), "ref": B("ref-bare")})
    assert [(w["scenario"], w["base"]["summary"], w["ref"]["summary"]) for w in got] == [
        ("r:s", "accounting mismatch: charged: expected 67108864, got 0 (10/10)", "crash (SIGSEGV) (10/10)")]
    doc = {"upstream": {"ref": "REF", "commit": "a" * 40, "base": "b" * 40}, "target": "t", "driver": {"kind": "fake"},
           "simulated": True, "runs": 10, "patches": [], "made_worse": got}
    _, _, rows = retire_report.format_retire_table(doc)
    assert rows == [["(upstream)", "made worse", "r:s", "accounting mismatch: charged: expected 67108864, got 0 (10/10) "
                                                         "on base-bare -> crash (SIGSEGV) (10/10) on ref-bare"]]
    assert retire_report.SHOWN[rt.WORSE_UPSTREAM] == "still-needed (upstream made it worse)"


def test_measuring_one_reproducers_scenarios_runs_no_other_reproducers_controls(monkeypatch):
    """issue 36 (item 7): the plan measures each build's own scenarios; a control of a reproducer none
    of them belongs to judges nothing there (it ran on all 37 builds of a retire at 52f33fc: 22
    reproducers' controls x 10 runs each, most of the runs)."""
    lab = Lab.__new__(Lab)
    lab.repros = {n: SimpleNamespace(name=n, scenarios=[Scenario("control", True), Scenario("s")]) for n in ("r", "q")}
    lab.results, lab.records, lab.runs = {}, [], 10
    lab._id = lambda b: b.name
    ran = []
    monkeypatch.setattr("lucepatch.upstream.behaviour.run_scenarios",
                        lambda repros, variants, rule, drv, cache, names, execution: ran.append(
                            (repros[0].name, sorted(names))) or SimpleNamespace(records=[]))
    lab.execution = SimpleNamespace(mode="serial", jobs=1, isolation="none", why="")
    lab.driver, lab.cache = None, None
    b = B("b")
    b.variant = SimpleNamespace(lib="x", provenance={})
    lab.measure([b], ["r:s"])
    assert ran == [("r", ["control", "s"])]


def test_prebuild_makes_the_planned_builds_with_the_names_one_by_one_would_give(monkeypatch):
    """issue 36 (item 7): a planning pass notes the builds, prebuild makes them two at a time; the
    builds and their names are those the pass one by one makes, so reports read the same."""
    import threading

    seen, both = [], threading.Barrier(2, timeout=10)

    def fake(target, source, cache, artifact, specs):
        [spec] = specs
        seen.append(spec.name)
        if spec.name.startswith("x"):
            both.wait()  # the two x builds only finish when both run at once: two workers
        return [SimpleNamespace(provenance={"build_key": spec.name + "-key"}, lib="lib")]

    monkeypatch.setattr("lucepatch.upstream.behaviour.build_variants", fake)
    lab = Lab.__new__(Lab)
    lab.builds, lab.target, lab.source, lab.cache, lab.artifact = {}, None, None, None, "libvgpu.so"
    lab.planning = {}
    for name, ref, patches in (("x", "r", ("a",)), ("x", "r", ("b",)), ("y", "s", ("a",)), ("x", "r", ("a",))):
        assert lab.build(name, ref, patches).variant is None  # planned, nothing built
    assert seen == [] and len(lab.planning) == 3
    planned, lab.planning = lab.planning, None
    lab.prebuild(planned, 2)
    assert sorted(seen) == ["x", "x'", "y"]
    assert [lab.build(n, r, p).name for n, r, p in (("x", "r", ("a",)), ("x", "r", ("b",)), ("y", "s", ("a",)))] == \
        ["x", "x'", "y"]
    assert sorted(seen) == ["x", "x'", "y"]  # the pass after finds them made


def test_worse_upstream_compares_the_same_pair_and_scenario_at_the_base():
    """The base side of "made worse" is the comparison of the same pair and scenario: here add-one
    differs at the base by a crash (not a wrong value), leave-one-out by a wrong value."""
    same = ([(PASS, 10)], [(PASS, 10)])
    v = judged(same, ([(CRASH, 10)], [(PASS, 10)]), FIXED_AT_BASE, ([(WRONG, 10)], [(PASS, 10)]))
    assert v.status == rt.WORSE_UPSTREAM and v.reason.startswith("leave-one-out at aaaaaaaaaaaa: r:s:")
    assert "base-series-p: accounting mismatch" in v.reason


def test_the_invariant_check_reads_each_claim_where_it_is_made():
    lab = lab_of({("ref-bare", "s"): [(PASS, 10)], ("ref-series", "s"): [(CRASH, 10)]})
    row = {"name": "p", "status": rt.STILL_NEEDED, "judged": ["r:s"], "scenarios": [],
           "reason": "add-one at aaaaaaaaaaaa: r:s: pass (10/10) on ref-bare"}
    assert retire_report.check_reasons(doc_of(lab, [row])) == []  # REF's claim, REF's runs: no base run needed
    # a still-failing line backed by its runs is fine
    assert retire_report.check_reasons(doc_of(lab, [], still=[{"scenario": "r:s", "build": "ref-series"}])) == []
    # a not-measured reason is an absence even where a clause names a build (a build's own error text)
    row["reason"] = ("not measured: REF does not build: t aaaaaaaaaaaa+build-only: p does not apply at aaaaaaaaaaaa; "
                     "as shipped: ghost failed: refused")
    doc = doc_of(lab, [row])
    doc["builds"].append({"name": "ghost", "ref": "a" * 40, "commit": "a" * 40, "build_key": None, "built": False})
    assert retire_report.check_reasons(doc) == []


def test_a_patch_its_own_scenario_shows_needed_is_judged_on_it_alone():
    """issue 36 (item 7): the map adds every scenario that executes P's code (60 of 113 for a patch in
    HAMi-core's init path); P's own Reproducer: scenario changing for the better at REF decides, and
    only it is compared (and so measured); when it does not decide, every scenario is compared."""
    names = ["ref-bare", "ref-bare+p", "ref-series-p", "ref-series", "base-bare", "base-bare+p", "base-series-p",
             "base-series"]
    fixed, same = ([(CRASH, 10)], [(PASS, 10)]), ([(PASS, 10)], [(PASS, 10)])
    table = {}
    for s, ref_pairs in (("d", fixed), ("o", same)):
        for n, v in zip(names, [*ref_pairs, *ref_pairs, *FIXED_AT_BASE, *FIXED_AT_BASE]):
            table[(n, s)] = v
    lab = lab_of(table)
    b = {n: B(n) for n in names}
    ref = cx("a", add=(b["ref-bare"], b["ref-bare+p"]), loo=(b["ref-series-p"], b["ref-series"]))
    base = cx("b", add=(b["base-bare"], b["base-bare+p"]), loo=(b["base-series-p"], b["base-series"]))
    blame = rt.make_blame(lab, base.commit, ref.commit)
    assert rt.first_tier(["r:d", "r:o"], ["r:d"]) == ["r:d"] and rt.first_tier(["r:d"], ["r:d"]) == []
    v = rt.judge_patch(lab, P, ["r:d", "r:o"], ref, base, [], blame, ["r:d"])
    assert v.status == rt.STILL_NEEDED and v.scenario == "r:d"
    assert {d["scenario"] for d in v.details} == {"r:d"}
    # its own scenario changes nothing at REF: every scenario compared (o decides, as without tiers)
    v = rt.judge_patch(lab, P, ["r:d", "r:o"], ref, base, [], blame, ["r:o"])
    assert v.status == rt.STILL_NEEDED and v.scenario == "r:d" and {d["scenario"] for d in v.details} == {"r:d", "r:o"}
    assert rt.needed_by_declared(lab, P, ["r:d", "r:o"], ref, base, ["r:o"]) is None


def test_made_worse_of_a_conflicting_patch_compares_upstream_at_both_commits():
    """The base side is upstream + Build-Only, like REF's: REF without P crashes where the base without P
    but with the rest of the series gave a wrong value is no upstream change (the base bare crashes too)."""
    lab = lab_of({("base-series-p", "s"): [(WRONG, 10)], ("base-series", "s"): [(PASS, 10)],
                  ("base-bare", "s"): [(CRASH, 10)], ("ref-bare", "s"): [(CRASH, 10)], ("ref-series", "s"): [(CRASH, 10)]})
    ref = cx("a", full=B("ref-series", ["q"]), bare=B("ref-bare"), conflicts=["p"])
    basecx = cx("b", loo=(B("base-series-p"), B("base-series")), bare=B("base-bare"))
    v = rt.judge_conflict(lab, P, ["r:s"], ref, basecx, rt.make_blame(lab, basecx.commit, ref.commit))
    assert v.status == rt.STILL_NEEDED
