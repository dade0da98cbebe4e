"""Which run to launch next: what the rule still needs, interleaved, numbered in launch order.

Pure bookkeeping, no processes: `session.run_scenarios` launches the jobs `next_jobs` hands out
(never more than there are free slots, so a job handed out is a process started) and reports each
outcome with `complete`; tests drive it with made-up outcomes in shuffled completion orders.

Order: run i of every scenario and variant before run i+1 of any (b0 p0 of each scenario, then b1
p1, ...), so drift on the machine hits both variants alike. A run's `index` is its place in that
order within its scenario and variant, fixed when it is launched: the rule sees counts of completed
runs, and a scenario is finished only when every launched run has completed, so which run finished
first never changes what a scenario ends with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lucepatch.verify.rules import CHECKED, CONTROL, DECIDED, FIXED, FLAKY, GUARD, SEQUENTIAL, SETTLED, Need, Rule, Side
from lucepatch.verify.runner import FAILURES, INVALID, PASS, SKIPPED
from lucepatch.verify.stats import clopper_pearson


@dataclass(frozen=True)
class Job:
    launch: int  # launch order in the whole verification
    key: str  # reproducer:scenario
    variant: str
    index: int  # launch order within (scenario, variant)


@dataclass
class Track:
    key: str
    kind: str  # checked | guard | control
    reproducer: str
    order: int
    launched: dict = field(default_factory=dict)  # variant -> runs launched
    outcomes: dict = field(default_factory=dict)  # variant -> {index: outcome}
    need: Need | None = None
    was_flaky: bool = False
    stopped: str = ""  # why no further run is launched (a control of the reproducer failed)


def kind_of(scenario) -> str:
    return CONTROL if scenario.control else GUARD if scenario.regression_guard else CHECKED


class Scheduler:
    def __init__(self, rule: Rule, scenarios: list[tuple[str, str, str]], variants: list[str]):
        """scenarios: (key, kind, reproducer name) in the order they are reported."""
        if len(variants) != 2 and rule.name != FIXED:
            raise ValueError("the sequential rule compares exactly two variants (baseline, patched)")
        self.rule, self.variants = rule, list(variants)
        self.tracks = {k: Track(k, kind, repro, i, {v: 0 for v in variants}, {v: {} for v in variants})
                       for i, (k, kind, repro) in enumerate(scenarios)}
        self.launches = 0
        self.outstanding: set[Job] = set()
        for t in self.tracks.values():
            self._refresh(t)

    # -- state -------------------------------------------------------------------------------------
    def side(self, t: Track, variant: str) -> Side:
        o = list(t.outcomes[variant].values())
        return Side(runs=len(o), failures=sum(x in FAILURES for x in o), invalid=o.count(INVALID),
                    skipped=o.count(SKIPPED))

    def _refresh(self, t: Track) -> None:
        if t.stopped:
            return
        if len(self.variants) == 2:
            t.need = self.rule.need(t.kind, self.side(t, self.variants[0]), self.side(t, self.variants[1]))
        else:
            t.need = self.rule.need(t.kind, Side(), Side())
        t.was_flaky = t.was_flaky or t.need.mode in (FLAKY, DECIDED)

    def wanted(self, t: Track, variant: str) -> int:
        if t.stopped or t.need is None:
            return t.launched[variant]
        want = t.need.baseline if variant == self.variants[0] or len(self.variants) != 2 else t.need.patched
        return max(t.launched[variant], want)

    # -- driving -----------------------------------------------------------------------------------
    def next_jobs(self, limit: int) -> list[Job]:
        jobs: list[Job] = []
        while len(jobs) < limit:
            best = None
            for t in self.tracks.values():
                for vi, v in enumerate(self.variants):
                    i = t.launched[v]
                    if i < self.wanted(t, v):
                        cand = (i, t.order, vi, t, v)
                        if best is None or cand[:3] < best[:3]:
                            best = cand
            if best is None:
                break
            i, _, _, t, v = best
            t.launched[v] += 1
            job = Job(self.launches, t.key, v, i)
            self.launches += 1
            self.outstanding.add(job)
            jobs.append(job)
        return jobs

    def complete(self, job: Job, outcome: str) -> None:
        self.outstanding.discard(job)
        t = self.tracks[job.key]
        t.outcomes[job.variant][job.index] = outcome
        self._refresh(t)
        if (t.kind == CONTROL and t.need.mode == SETTLED and self.rule.stops_reproducer_on_control_failure
                and any(o in FAILURES or o == INVALID for side in t.outcomes.values() for o in side.values())):
            for other in self.tracks.values():
                if other.reproducer == t.reproducer and other is not t and not other.stopped:
                    other.stopped = (f"stopped: control {t.key} failed ({job.variant} run {job.index}), so nothing "
                                     "of this reproducer can be proven")

    @property
    def finished(self) -> bool:
        return not self.outstanding and not any(
            t.launched[v] < self.wanted(t, v) for t in self.tracks.values() for v in self.variants)

    # -- the account -------------------------------------------------------------------------------
    def summary(self, key: str) -> dict:
        """runs_spent, stop_reason and mode of one scenario, for the evidence."""
        t = self.tracks[key]
        spent = {v: t.launched[v] for v in self.variants}
        if self.rule.name == FIXED:
            return {"runs_spent": spent, "stop_reason": t.need.why, "mode": FIXED}
        why = t.stopped or t.need.why
        if t.need.mode in (FLAKY, DECIDED) and not t.stopped:
            why = f"{why}; first trigger: {self._trigger(t)}"
        mode = SETTLED if t.need.mode == DECIDED and not t.stopped else FLAKY if t.was_flaky else SEQUENTIAL
        out = {"runs_spent": spent, "stop_reason": why, "mode": mode}
        if mode == SETTLED:
            pat = self.side(t, self.variants[1])
            lo, hi = clopper_pearson(pat.failures, pat.runs, self.rule.estimate_confidence)
            out["patched_rate"] = {"failures": pat.failures, "runs": pat.runs, "low": math.floor(lo * 10 ** 4) / 10 ** 4,
                                   "high": math.ceil(hi * 10 ** 4) / 10 ** 4, "confidence": self.rule.estimate_confidence,
                                   "method": "clopper-pearson (two-sided, exact)"}
        return out

    def _trigger(self, t: Track) -> str:
        b, p = self.variants
        cands = []
        for v, bad in ((b, lambda o: o == PASS), (p, lambda o: o in FAILURES)):
            hits = sorted(i for i, o in t.outcomes[v].items() if bad(o))
            if hits:
                cands.append((hits[0], v, t.outcomes[v][hits[0]]))
        if t.kind == GUARD:
            cands = [c for c in cands if c[1] == p] + (
                [(min(i for i, o in t.outcomes[b].items() if o in FAILURES), b, "fail")]
                if any(o in FAILURES for o in t.outcomes[b].values()) and any(o == PASS for o in t.outcomes[b].values())
                else [])
        if not cands:
            return "none recorded"
        i, v, o = min(cands)
        return f"{v} run {i} (launch order) {'passed' if o == PASS else 'failed (' + o + ')'}"


__all__ = ["Job", "Scheduler", "kind_of", "SEQUENTIAL", "FIXED", "FLAKY"]
