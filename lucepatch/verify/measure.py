"""What a quantitative scenario measures and the bound it must hold (reproducer.toml
`[scenario.measure]`, issue 38; docs/design.md "Quantitative scenarios").

    [scenario.measure]
    value = "tok_per_s"     # the `value` event each run reports (its number)
    per = "bare"            # optional: judge the ratio to the same round's run without any preloaded library
    lo = 0.40               # the bound: lo <= rate <= hi (either may be left out: an open end)
    hi = 0.60
    unit = "x bare"         # how the rate reads in tables and plots
    rounds = 8              # most counted rounds (each: one run of every variant, order rotated)
    min_rounds = 4          # the sequential rule's first look
    warmup_rounds = 1       # rounds run and recorded but not counted
    alpha = 0.01            # the error of `proven` over every look (rate_stats.RateRule)
    rule = "sequential"     # or "fixed": every round to `rounds`, one look
    simulated = false       # measured on the simulated driver too (default: only on a real GPU)

`verify --runs N` caps the runs per variant (warm-up rounds included), `--fixed` makes the rule fixed.
A rate the GPU has to give is not measured on the simulated driver by default: there it would measure
lucepatch's model of a GPU (fakecuda/fakegpu.c), which tests/test_sm_limit.py exercises on purpose; a
scenario about what the model answers exactly as a GPU does (an NVML answer) says `simulated = true`.

A scenario with a measure is judged by lucepatch/verify/rate_stats.py on the numbers its runs report,
not by pass/fail counts; its runs go one at a time with nothing else running (a rate measured beside
another run measures the other run too).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lucepatch.errors import UsageError
from lucepatch.verify.rate_stats import Bound, RateRule

MEASURE_KEYS = ("value", "per", "lo", "hi", "unit", "rounds", "min_rounds", "warmup_rounds", "alpha", "rule",
                "simulated")
REFERENCES = ("bare",)  # what `per` may name: the run with no library preloaded


@dataclass(frozen=True)
class Measure:
    value: str
    bound: Bound
    per: str | None = None
    unit: str = ""
    rounds: int = 8
    min_rounds: int = 4
    warmup_rounds: int = 1
    alpha: float = 0.01
    sequential: bool = True
    simulated: bool = False

    def within(self, max_runs: int | None, fixed: bool) -> "Measure":
        """This measure under verify's --runs (runs per variant, warm-up included) and --fixed."""
        rounds = self.rounds
        if max_runs is not None:
            rounds = max(2, min(rounds, max_runs - self.warmup_rounds))
        return replace(self, rounds=rounds, min_rounds=min(self.min_rounds, rounds),
                       sequential=self.sequential and not fixed)

    @property
    def rule(self) -> RateRule:
        return RateRule(max_rounds=self.rounds, min_rounds=min(self.min_rounds, self.rounds), alpha=self.alpha,
                        sequential=self.sequential)

    @property
    def variants(self) -> list[str]:
        """The variants of one round, in the first round's order (later rounds rotate it)."""
        return ([self.per] if self.per else []) + ["baseline", "patched"]

    def to_json(self) -> dict:
        out = {"value": self.value, "bound": self.bound.to_json(), "unit": self.unit, "rounds": self.rounds,
               "min_rounds": self.min_rounds, "warmup_rounds": self.warmup_rounds, "alpha": self.alpha,
               "rule": "sequential" if self.sequential else "fixed", "simulated": self.simulated}
        if self.per:
            out["per"] = self.per
        return out

    @classmethod
    def from_toml(cls, d, where: str) -> "Measure":
        where = f"{where} [scenario.measure]"
        if not isinstance(d, dict):
            raise UsageError(f"{where} must be a table (value, lo/hi, ...)")
        unknown = sorted(set(d) - set(MEASURE_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown key {', '.join(unknown)}; known: {', '.join(MEASURE_KEYS)}")
        value = d.get("value")
        if not isinstance(value, str) or not value:
            raise UsageError(f"{where} needs value, the name of the value event each run reports")
        per = d.get("per")
        if per is not None and per not in REFERENCES:
            raise UsageError(f"{where}: per must be one of {', '.join(REFERENCES)}, not {per!r}")
        ends = {}
        for k in ("lo", "hi"):
            if k in d:
                if isinstance(d[k], bool) or not isinstance(d[k], (int, float)):
                    raise UsageError(f"{where}: {k} must be a number, not {d[k]!r}")
                ends[k] = float(d[k])
        try:
            bound = Bound(ends.get("lo"), ends.get("hi"))
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
        ints = {}
        for k, default, least in (("rounds", 8, 2), ("min_rounds", 4, 2), ("warmup_rounds", 1, 0)):
            v = d.get(k, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise UsageError(f"{where}: {k} must be an integer >= {least}, not {v!r}")
            ints[k] = v
        alpha = d.get("alpha", 0.01)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
            raise UsageError(f"{where}: alpha must be a number in (0, 0.5), not {alpha!r}")
        rule = d.get("rule", "sequential")
        if rule not in ("sequential", "fixed"):
            raise UsageError(f'{where}: rule must be "sequential" or "fixed", not {rule!r}')
        unit = d.get("unit", "")
        if not isinstance(unit, str):
            raise UsageError(f"{where}: unit must be a string")
        simulated = d.get("simulated", False)
        if not isinstance(simulated, bool):
            raise UsageError(f"{where}: simulated must be true or false")
        return cls(value=value, bound=bound, per=per, unit=unit, rounds=ints["rounds"],
                   min_rounds=min(ints["min_rounds"], ints["rounds"]), warmup_rounds=ints["warmup_rounds"],
                   alpha=float(alpha), sequential=rule == "sequential", simulated=simulated)
