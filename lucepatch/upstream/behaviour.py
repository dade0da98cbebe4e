"""What a scenario does on a build, measured: the evidence retirement and bisect decide on.

A run's *signature* is its outcome class (pass / crash (signal) / hang / clean error / accounting
mismatch / logged error / failed exit) together with every check it reported (name, expected,
got). A scenario on a build is *uniform* when all its N runs share one signature. Two builds behave
**identically** on a scenario when both are uniform with the same signature and their reproducer's
controls pass uniformly on both; a mixed, invalid or skipped run, a failing control or a build that
could not be made makes the comparison **inconclusive**; otherwise they are **different**.

`Lab` makes builds (through lucepatch.verify.service.build_variants, each under its own name) and
measures scenarios on them with the fixed rule, N runs per build and scenario, each (build,
scenario) once per Lab however many comparisons use it.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from lucepatch import report
from lucepatch.errors import CheckFailed
from lucepatch.target import Target
from lucepatch.verify.driver import DriverChoice, choose_driver
from lucepatch.verify.reproducer import Reproducer
from lucepatch.verify.rules import FixedRule
from lucepatch.verify.runner import CRASH, FAIL, FAILURES, FAIL_LOG, INVALID, PASS, SKIPPED, TIMEOUT, RunRecord
from lucepatch.verify.service import VariantSpec, build_variants
from lucepatch.verify.session import Execution, Variant, derive_driver, plan_execution, run_matrix, run_scenarios
from lucepatch.verify.verdict import tally

IDENTICAL, DIFFERENT, INCONCLUSIVE = "identical", "different", "inconclusive"
# a scenario skipped on both builds of a pair: no evidence of a change, nor of no change (issue 41) —
# never counted either way, and every reason says so in these words
NOT_RUN = "not run on either build"

# Behaviour of one scenario on one build (bisect's vocabulary, and Behaviour.behaviour)
B_PASS, B_FAIL, B_INVALID, B_SKIPPED, B_UNBUILT, B_MIXED = "pass", "fail", "invalid", "skipped", "not-built", "mixed"

_CURESULT = ("CUDA_", "cudaError")


def outcome_class(rec: RunRecord) -> str:
    """pass / crash (SIGSEGV) / hang / clean error / accounting mismatch / logged error / failed exit."""
    if rec.outcome == PASS:
        return "pass"
    if rec.outcome == CRASH:
        return f"crash ({rec.signal or 'signal'})"
    if rec.outcome == TIMEOUT:
        return "hang"
    if rec.outcome == FAIL_LOG:
        return "logged error"
    if rec.outcome == FAIL:
        bad = [c for c in rec.checks if not c.get("ok")]
        if bad:
            got = str(bad[0].get("got", ""))
            return "clean error" if got.startswith(_CURESULT) else "accounting mismatch"
        return "failed exit"
    return rec.outcome  # invalid / skipped


def severe_class(cls: str) -> bool:
    """A crash (any signal) or a hang: worse than a wrong value (issue 36, "made worse")."""
    return cls.startswith("crash") or cls == "hang"


def made_worse(before: "OnBuild", after: "OnBuild") -> bool:
    """`after` crashes or hangs where `before` only gave a wrong value (both measured)."""
    return before.wrong_value_only and after.state in (B_FAIL, B_MIXED) and after.severe > 0


def signature(rec: RunRecord) -> tuple:
    return (outcome_class(rec), tuple((str(c.get("name")), str(c.get("expected")), str(c.get("got")))
                                      for c in rec.checks))


def describe_signature(sig: tuple) -> str:
    cls, checks = sig
    bad = next(((n, e, g) for n, e, g in checks if e != g), None)
    if cls == "pass" or bad is None:
        return cls
    n, e, g = bad
    return f"{cls}: {n}: expected {e}, got {g}"


@dataclass
class OnBuild:
    """One scenario's N runs on one build."""
    build: str
    scenario: str
    runs: int = 0
    signatures: Counter = field(default_factory=Counter)
    invalid: int = 0
    skipped: int = 0
    first_error: str = ""
    built: bool = True
    why: str = ""  # not built / skipped reason

    @property
    def uniform(self) -> tuple | None:
        if not self.built or self.invalid or self.skipped or len(self.signatures) != 1:
            return None
        return next(iter(self.signatures))

    @property
    def state(self) -> str:
        if not self.built:
            return B_UNBUILT
        if self.runs and self.skipped == self.runs:
            return B_SKIPPED
        if self.invalid or self.skipped or not self.runs:
            return B_INVALID
        if len(self.signatures) > 1:
            return B_MIXED
        return B_PASS if self.uniform[0] == "pass" else B_FAIL

    @property
    def passes(self) -> bool:
        return self.state == B_PASS

    @property
    def severe(self) -> int:
        """Runs that crashed or hung (worse than any wrong value)."""
        return sum(n for sig, n in self.signatures.items() if severe_class(sig[0]))

    @property
    def wrong_value_only(self) -> bool:
        """Every run measured failed, none by crashing or hanging: a wrong value, a clean error, a
        logged error."""
        return self.state == B_FAIL and not self.severe

    def describe(self) -> str:
        st = self.state
        if st == B_UNBUILT:
            return f"not built ({self.why})"
        if st == B_SKIPPED:
            return f"skipped ({self.why})"
        if st == B_INVALID:
            return f"invalid ({self.invalid} invalid, {self.skipped} skipped of {self.runs})"
        if st == B_MIXED:
            return "mixed: " + ", ".join(f"{n}x {describe_signature(s)}" for s, n in self.signatures.most_common())
        return f"{describe_signature(self.uniform)} ({self.runs}/{self.runs})"

    def to_json(self) -> dict:
        return {"build": self.build, "state": self.state, "runs": self.runs, "summary": self.describe(),
                "first_error": self.first_error}


def _check_diff(a: OnBuild, b: OnBuild) -> str:
    ca, cb = a.uniform[1], b.uniform[1]
    for i in range(max(len(ca), len(cb))):
        x = ca[i] if i < len(ca) else None
        y = cb[i] if i < len(cb) else None
        if x != y:
            if x is None:
                return f"only {b.build} gets to check {y[0]!r} ({y[2]})"
            if y is None:
                return f"only {a.build} gets to check {x[0]!r} ({x[2]})"
            if x[0] != y[0]:
                return f"check {x[0]!r} on {a.build}, {y[0]!r} on {b.build}"
            return f"check {x[0]!r}: got {x[2]} on {a.build}, {y[2]} on {b.build} (expected {x[1]})"
    return "the check results differ"


@dataclass
class Comparison:
    kind: str  # identical | different | inconclusive
    scenario: str
    without: OnBuild
    with_: OnBuild
    why: str = ""

    @property
    def not_run(self) -> bool:
        """Skipped on both builds: it says nothing either way (NOT_RUN)."""
        return self.kind == INCONCLUSIVE and self.without.state == B_SKIPPED and self.with_.state == B_SKIPPED

    def to_json(self) -> dict:
        return {"kind": self.kind, "scenario": self.scenario, "why": self.why,
                "without": self.without.to_json(), "with": self.with_.to_json()}


@dataclass
class Build:
    name: str
    ref: str
    patches: tuple[str, ...]
    variant: Variant | None = None
    error: str = ""
    coverage: dict | None = None

    @property
    def key(self) -> str | None:
        return self.variant.provenance.get("build_key") if self.variant else None

    def to_json(self) -> dict:
        p = self.variant.provenance if self.variant else {}
        return {"name": self.name, "ref": self.ref, "patches": list(self.patches), "built": self.variant is not None,
                "commit": p.get("commit"), "tree": p.get("tree"), "build_key": p.get("build_key"),
                "artifact_sha256": self.variant.sha256 if self.variant else None,
                **({"applied": p["patches"]} if "patches" in p else {}),
                **({"carried": p["carried"]} if p.get("carried") else {}),
                **({"error": self.error} if self.error else {})}


class Lab:
    """Builds and fixed-N measurements for one judgement; every (build, scenario) measured once."""

    planning: dict | None = None  # during a planning pass: {build key: name} of what it would build (prebuild)

    def __init__(self, target: Target, source: Path, cache: Path, driver: DriverChoice | str,
                 reproducers: list[Reproducer], runs: int, jobs: int | None = None):
        self.target, self.source, self.cache = target, Path(source), Path(cache)
        self.driver = driver if isinstance(driver, DriverChoice) else choose_driver(driver, self.cache)
        self.repros = {r.name: r for r in reproducers}
        self.runs = runs
        self.execution = plan_execution(jobs)
        self.builds: dict[tuple, Build] = {}
        self.results: dict[tuple[str, str], OnBuild] = {}  # (build key or name, reproducer:scenario)
        self.records: list[RunRecord] = []
        self.artifact = next(iter(self.repros.values())).artifact if self.repros else None

    # -- builds --------------------------------------------------------------------------------
    def build(self, name: str, ref: str, patches: list[str] | tuple[str, ...], coverage: bool = False) -> Build:
        key = (ref, tuple(patches), coverage)
        if self.planning is not None and key not in self.builds:  # a planning pass: noted, nothing built
            self.planning.setdefault(key, name)
            return Build(name, ref, tuple(patches), error="planned, not built yet")
        if key not in self.builds:
            self.builds[key] = self._make(self._free_name(name), key)
        return self.builds[key]

    def _free_name(self, name: str, also=()) -> str:
        taken = {x.name for x in self.builds.values()} | set(also)
        while name in taken:  # names are what runs and reports are keyed by: never two alike
            name += "'"
        return name

    def _make(self, name: str, key: tuple) -> Build:
        ref, patches, coverage = key
        b = Build(name, ref, patches)
        try:
            [v] = build_variants(self.target, self.source, self.cache, self.artifact,
                                 specs=[VariantSpec(name, patches, ref, coverage)])
            b.variant, b.coverage = v, v.provenance.get("coverage")
        except CheckFailed as exc:
            b.error = str(exc)
        return b

    def prebuild(self, planned: dict, workers: int = 2) -> None:
        """Make the builds a planning pass noted ({key: name}), `workers` at a time, named as the pass
        that follows would name them one by one (issue 36: a build is mostly one configure and one
        link, single-threaded; two at once keep both cores of a small machine busy). Each build has
        its own work area and staging folder and publishes by rename (builders/native.py)."""
        todo, names = [], []
        for key, name in planned.items():
            if key not in self.builds:
                names.append(self._free_name(name, names))
                todo.append((names[-1], key))
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for (name, key), b in zip(todo, pool.map(lambda t: self._make(*t), todo)):
                self.builds[key] = b

    def _id(self, b: Build) -> str:
        return b.key or f"unbuilt:{b.name}"

    # -- measurements ----------------------------------------------------------------------------
    def measure(self, builds: list[Build], scenarios: list[str] | None = None) -> None:
        """Run `scenarios` (reproducer:scenario; default every scenario of every reproducer, controls
        always — of the reproducers `scenarios` names, when it names some) N times on every build that
        has not run them yet."""
        todo: dict[str, dict[str, list[Build]]] = {}
        named = {k.split(":", 1)[0] for k in scenarios} if scenarios is not None else None
        for b in builds:
            for rname, r in self.repros.items():
                if named is not None and rname not in named:
                    continue  # another reproducer's controls judge none of these scenarios
                for s in r.scenarios:
                    key = f"{rname}:{s.name}"
                    if scenarios is not None and key not in scenarios and not s.control:
                        continue
                    if (self._id(b), key) in self.results:
                        continue
                    if b.variant is None:
                        self.results[(self._id(b), key)] = OnBuild(b.name, key, built=False, why=b.error[:200])
                        continue
                    todo.setdefault(rname, {}).setdefault(key, [])
                    if b not in todo[rname][key]:
                        todo[rname][key].append(b)
        for rname, per in todo.items():
            repro = self.repros[rname]
            blds = list({id(b): b for bs in per.values() for b in bs}.values())
            names = [k.split(":", 1)[1] for k in per]  # controls come along anyway
            variants = [Variant(b.name, b.variant.lib, b.variant.provenance) for b in blds]
            report.progress(f"measuring {rname}: {len(per)} scenario(s) on {len(blds)} build(s), {self.runs} runs each")
            ex = Execution(self.execution.mode, self.execution.jobs, self.execution.isolation, self.execution.why)
            res = run_scenarios([repro], variants, FixedRule(self.runs), self.driver, self.cache, names,
                                execution=ex)
            self.records += res.records
            for b in blds:
                for key in per:
                    if b not in per[key]:
                        continue
                    recs = [r for r in res.records if r.variant == b.name and r.scenario == key]
                    self.results[(self._id(b), key)] = self._on_build(b, key, recs)

    def measure_plan(self, plan) -> None:
        """Run each build's own scenarios ([(Build, reproducer:scenario keys)]; controls always): one
        batch per reproducer and set of scenarios, so no build runs a scenario nothing compares on
        it (issue 36: every scenario on every build was most of a retirement's runs). What a later
        comparison needs beyond the plan is measured when it asks (`on`)."""
        groups: dict[tuple[str, frozenset], list[Build]] = {}
        for b, keys in plan:
            per: dict[str, set[str]] = {}
            for k in keys:
                per.setdefault(k.split(":", 1)[0], set()).add(k)
            for rname, ks in per.items():
                if rname in self.repros:
                    groups.setdefault((rname, frozenset(ks)), []).append(b)
        for (rname, ks), blds in sorted(groups.items(), key=lambda g: (g[0][0], sorted(g[0][1]))):
            self.measure(list({id(b): b for b in blds}.values()), sorted(ks))

    def measure_point(self, builds: list[Build], scenario: str, param: str, value) -> str:
        """Run `scenario` (reproducer:scenario) with its declared parameter `param` at `value` (the
        others at their defaults) N times on every build that has not run it; returns the key its
        results are kept under (`reproducer:scenario@param=value`) for compare(). An input sweep."""
        rname, sname = scenario.split(":", 1)
        repro = self.repros[rname]
        s = repro.scenario(sname)
        v = s.params[param].check(value, f"{scenario} parameter {param}")
        key = f"{scenario}@{param}={v}"
        # the same program and scenario name, the parameter's default moved to the point: the runner
        # sets every declared parameter, so the program reads the point (nothing else changes)
        moved = replace(s, params={**s.params, param: replace(s.params[param], default=v)})
        at_point = replace(repro, scenarios=[moved if x is s else x for x in repro.scenarios])
        todo = []
        for b in builds:
            if (self._id(b), key) in self.results:
                continue
            if b.variant is None:
                self.results[(self._id(b), key)] = OnBuild(b.name, key, built=False, why=b.error[:200])
                continue
            todo.append(b)
        if not todo:
            return key
        report.progress(f"sweep {key}: on {len(todo)} build(s), {self.runs} runs each")
        ex = Execution(self.execution.mode, self.execution.jobs, self.execution.isolation, self.execution.why)
        res = run_scenarios([at_point], [Variant(b.name, b.variant.lib, b.variant.provenance) for b in todo],
                            FixedRule(self.runs), self.driver, self.cache, [sname], execution=ex)
        self.records += res.records
        for b in todo:
            recs = [r for r in res.records if r.variant == b.name and r.scenario == scenario]
            self.results[(self._id(b), key)] = self._on_build(b, key, recs)
        return key

    def _on_build(self, b: Build, key: str, recs: list[RunRecord]) -> OnBuild:
        return OnBuild(b.name, key, runs=len(recs), signatures=Counter(
            signature(r) for r in recs if r.outcome not in (INVALID, SKIPPED)),
            invalid=sum(r.outcome == INVALID for r in recs), skipped=sum(r.outcome == SKIPPED for r in recs),
            first_error=tally(recs).first_error[:200],
            why=next((r.reason for r in recs if r.outcome in (SKIPPED, INVALID)), "")[:200])

    def on(self, b: Build, scenario: str) -> OnBuild:
        if (self._id(b), scenario) not in self.results:
            self.measure([b], [scenario])
        return self.results[(self._id(b), scenario)]

    def controls_ok(self, b: Build, scenario: str) -> tuple[bool, str]:
        """Do the controls of `scenario`'s reproducer pass uniformly on b? (and why not)"""
        repro = self.repros[scenario.split(":", 1)[0]]  # a sweep key (r:s@p=v) is judged by r's controls
        for c in repro.controls:
            ob = self.on(b, f"{repro.name}:{c.name}")
            if ob.state == B_SKIPPED:
                continue
            if not ob.passes:
                return False, f"control {repro.name}:{c.name} on {b.name}: {ob.describe()}"
        return True, ""

    def compare(self, without: Build, with_: Build, scenario: str) -> Comparison:
        a, b = self.on(without, scenario), self.on(with_, scenario)
        for bld in (without, with_):
            ok, why = self.controls_ok(bld, scenario)
            if not ok:
                return Comparison(INCONCLUSIVE, scenario, a, b, why)
        if a.state == B_SKIPPED and b.state == B_SKIPPED:
            return Comparison(INCONCLUSIVE, scenario, a, b, f"{NOT_RUN} ({a.why})")
        for ob in (a, b):
            if ob.uniform is None:
                return Comparison(INCONCLUSIVE, scenario, a, b, f"{ob.build}: {ob.describe()}")
        if a.uniform == b.uniform:
            return Comparison(IDENTICAL, scenario, a, b, f"{a.describe()} on both")
        if a.uniform[0] == b.uniform[0]:  # same class: say which check result differs
            return Comparison(DIFFERENT, scenario, a, b, f"{a.uniform[0]} on both, but {_check_diff(a, b)}")
        return Comparison(DIFFERENT, scenario, a, b,
                          f"{describe_signature(a.uniform)} on {a.build} -> {describe_signature(b.uniform)} on {b.build}")

    def driver_doc(self) -> dict:
        return derive_driver(self.records, self.driver) if self.records else {"kind": self.driver.chosen,
                                                                              "requested": self.driver.requested}


# ---- bisect's predicate (one build, pass/fail) -----------------------------------------------


@dataclass
class Behaviour:
    """What one scenario did on one build, with the health of its reproducer's controls."""
    behaviour: str  # pass | fail | invalid | skipped | not-built
    control_ok: bool | None
    tally: dict | None = None
    why: str = ""

    def to_json(self) -> dict:
        out = {"behaviour": self.behaviour, "control_ok": self.control_ok, "tally": self.tally}
        if self.why:
            out["why"] = self.why
        return out


def _state(records: list[RunRecord]) -> tuple[str, dict]:
    t = tally(records).to_json()
    if not records:
        return B_INVALID, t
    if t["skipped"] == t["runs"]:
        return B_SKIPPED, t
    if t["invalid"] or t["skipped"]:
        return B_INVALID, t
    return (B_FAIL if t["failures"] else B_PASS), t


def measure_behaviour(repro: Reproducer, scenarios: list[str], variants: list[Variant], runs: int,
                      driver: DriverChoice, cache: Path) -> tuple[dict[tuple[str, str], Behaviour], list[RunRecord]]:
    """Run `scenarios` (names, controls always added) of `repro` on every variant, fixed N.

    Returns {(variant name, scenario name): Behaviour} and the raw run records. A scenario
    "fails" when any run fails and "passes" only when every run passes; controls must pass on the
    same variant for either to count (otherwise control_ok is False)."""
    checked = [s for s in scenarios if not repro.scenario(s).control]
    records = run_matrix([repro], variants, runs, driver, cache, checked or None)
    out: dict[tuple[str, str], Behaviour] = {}
    for v in variants:
        ctrl_ok = True
        for c in repro.controls:
            st, _ = _state([r for r in records if r.variant == v.name and r.scenario == f"{repro.name}:{c.name}"])
            if st not in (B_PASS, B_SKIPPED):
                ctrl_ok = False
        for s in checked:
            recs = [r for r in records if r.variant == v.name and r.scenario == f"{repro.name}:{s}"]
            st, t = _state(recs)
            why = next((r.first_error or r.reason for r in recs if r.outcome in FAILURES or r.outcome == INVALID), "")
            out[(v.name, s)] = Behaviour(st, ctrl_ok, {k: t[k] for k in ("runs", "pass", "failures", "invalid", "skipped",
                                                                          "failure_rate", "outcomes")}, why[:200])
    return out, records


def resolve_driver(driver: DriverChoice | str, cache: Path) -> DriverChoice:
    return driver if isinstance(driver, DriverChoice) else choose_driver(driver, cache)
