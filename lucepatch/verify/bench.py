"""What the vGPU layer costs a node's workload, and whether its limits hold (issue 38; HAMi#904,
website#415): `lucepatch bench`'s measurement, on the machine it runs on.

One library (the node's libvgpu.so, or any build) against the bare driver, on a decode-like workload
(the sm-limit reproducer's driver-API loop, or torch-decode's PyTorch loop), in configurations:

  memory-only     the layer with a memory limit only: its cost, judged against "at most 1 %"
  sm-<N>          CUDA_DEVICE_SM_LIMIT=N: the throughput against N % of bare, within +-10 points
  tenants-<A>-<B> two tenants at once, each in its own region, at SM A and B: A's share, within
                  +-10 points of A / (A + B)

each in eager launches and/or CUDA graphs. The method is verify's for quantitative scenarios
(docs/bench.md, docs/design.md "Quantitative scenarios"): rounds of one run per variant (bare, then
the layer; order alternating), one run at a time, a fresh region file per run, warm-up rounds left
out, the t interval of the ratio to the same round's bare run (or of the share) at 1 - alpha two-sided,
and the answer per configuration: `holds` when the interval lies inside the expectation, `does not
hold` when it lies outside, `undecided` when it straddles it (more rounds narrow it).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from lucepatch import report
from lucepatch.errors import UsageError
from lucepatch.native.launch import build_isolate
from lucepatch.native.workload import build_program, build_reporter
from lucepatch.verify.driver import DriverChoice
from lucepatch.verify.measure import Measure
from lucepatch.verify.rate_stats import INSIDE, OUTSIDE, Bound, interval_of
from lucepatch.verify.rates import order_of
from lucepatch.verify.reproducer import Reproducer, Scenario
from lucepatch.verify.runner import PASS, RunRecord, compile_reproducer, namespace_isolation, run_once

WORKLOADS = {"decode-c": "sm-limit", "decode-torch": "torch-decode"}
ANSWER = {INSIDE: "holds", OUTSIDE: "does not hold"}
TOLERANCE = 0.10  # +-10 points: what issue 38 asks of a limit


@dataclass(frozen=True)
class Config:
    """One configuration of the layer: its environment, what it measures and what it should give."""
    name: str
    mode: str  # eager | graph
    env: dict
    measure: Measure
    expect: str  # in words, for the report


@dataclass
class BenchRequest:
    lib: Path
    workload: str = "decode-c"
    modes: tuple[str, ...] = ("eager", "graph")
    sm_limits: tuple[int, ...] = (50,)
    tenants: tuple[int, int] | None = (30, 70)
    memory_limit: str = "60g"
    rounds: int = 6
    warmup_rounds: int = 1
    alpha: float = 0.05
    driver: str = "auto"
    warmup_ms: int | None = None  # each run's own warm-up and measured time (default: the workload's)
    measure_ms: int | None = None


@dataclass
class ConfigResult:
    config: Config
    rounds: list[dict] = field(default_factory=list)
    interval: dict | None = None
    answer: str = ""  # holds | does not hold | undecided | could not measure | not run here
    why: str = ""
    series: dict = field(default_factory=dict)  # variant -> {name: series} of the last counted run
    driver: dict = field(default_factory=dict)  # what the runs reported: version, device count, GPU

    def to_json(self) -> dict:
        c = self.config
        return {"name": c.name, "mode": c.mode, "env": c.env, "measure": c.measure.to_json(), "expect": c.expect,
                "rounds": self.rounds, "interval": self.interval, "answer": self.answer, "why": self.why,
                "series": self.series}


def configs(req: BenchRequest) -> list[Config]:
    if req.rounds < 2:
        raise UsageError("--rounds must be at least 2 (an interval needs two rounds)")
    if not 0 < req.alpha < 0.5:
        raise UsageError("--alpha must be in (0, 0.5)")
    for n in req.sm_limits:
        if not 1 <= n <= 99:
            raise UsageError(f"--sm-limit {n}: a limit is 1..99 (100 is no limit: that is memory-only)")
    if req.tenants is not None and (len(req.tenants) != 2 or not all(1 <= t <= 99 for t in req.tenants)):
        raise UsageError("--tenants takes two SM limits, A,B, each 1..99")
    bad = [m for m in req.modes if m not in ("eager", "graph")]
    if bad or not req.modes:
        raise UsageError(f"--mode takes eager, graph or both, not {', '.join(bad) or 'nothing'}")
    common = dict(rounds=req.rounds, min_rounds=req.rounds, warmup_rounds=req.warmup_rounds, alpha=req.alpha,
                  sequential=False, simulated=True)
    out = []
    for mode in req.modes:
        base = {"LP_MODE": mode, "CUDA_DEVICE_MEMORY_LIMIT": req.memory_limit}
        out.append(Config(f"memory-only-{mode}", mode, base,
                           Measure("tok_per_s", Bound(lo=1 - 0.01), per="bare", unit="x bare", **common),
                           "the layer costs at most 1 % of the bare throughput"))
        for n in req.sm_limits:
            lo, hi = max(0.0, n / 100 - TOLERANCE), min(1.0, n / 100 + TOLERANCE)
            out.append(Config(f"sm-{n}-{mode}", mode, {**base, "CUDA_DEVICE_SM_LIMIT": str(n)},
                              Measure("tok_per_s", Bound(lo, hi), per="bare", unit="x bare", **common),
                              f"CUDA_DEVICE_SM_LIMIT={n} gives {n} % of the bare throughput, +-10 points"))
        if req.tenants is not None:
            a, b = req.tenants
            share = a / (a + b)
            out.append(Config(f"tenants-{a}-{b}-{mode}", mode, {**base, "LP_TENANTS": f"{a},{b}"},
                              Measure(f"share_sm{a}", Bound(max(0.0, share - TOLERANCE), min(1.0, share + TOLERANCE)),
                                      unit="share", **common),
                              f"two tenants in two regions at SM {a}/{b}: the {a}-tenant's share is "
                              f"{100 * share:.0f} %, +-10 points"))
    return out


def _scenario(repro: Reproducer, cfg: Config) -> Scenario:
    """The reproducer's measuring scenario for this configuration: its parameters, the config's environment."""
    proto = next((s for s in repro.scenarios if s.measure is not None and s.name.startswith("sm50")), None)
    if proto is None:
        raise UsageError(f"reproducer {repro.name} has no measuring scenario to run the bench with")
    return replace(proto, name=cfg.name, env=dict(cfg.env), measure=cfg.measure, ranks=2 if "LP_TENANTS" in cfg.env else 1,
                   description=cfg.expect)


@dataclass
class Bench:
    """What the runs need (compiled once)."""
    repro: Reproducer
    binary: Path | None
    reporter: Path
    launcher: Path | None
    isolate: bool
    driver: DriverChoice
    lib: Path
    sha256: str
    params: dict = field(default_factory=dict)  # the workload's warmup_ms / measure_ms, when given


def prepare(repro: Reproducer, req: BenchRequest, driver: DriverChoice, cache: Path, sha256: str) -> Bench:
    binary = build_program(repro, cache) if repro.is_workload and repro.build else (
        None if repro.is_workload else compile_reproducer(repro, cache, driver.fake_dir))
    ok, _ = namespace_isolation()
    params = {k: v for k, v in (("warmup_ms", req.warmup_ms), ("measure_ms", req.measure_ms)) if v is not None}
    return Bench(repro, binary, build_reporter(cache), build_isolate(cache) if ok else None, ok, driver,
                 Path(req.lib), sha256, params)


def measure_config(b: Bench, cfg: Config, scratch: Path, run=run_once) -> ConfigResult:
    """Every round of one configuration: bare and the layer, alternating first place."""
    sc = _scenario(b.repro, cfg)
    m = cfg.measure
    res = ConfigResult(cfg)
    variants = ["bare", "layer"] if m.per else ["layer"]
    values: dict[str, list[float]] = {v: [] for v in variants}
    last: dict[str, RunRecord] = {}
    for rnd in range(m.warmup_rounds + m.rounds):
        got = {}
        for v in order_of(variants, rnd):
            rec = run(b.binary, b.repro, sc, v, rnd, b.lib if v == "layer" else None, b.driver.env, scratch,
                      expected_sha256=b.sha256 if v == "layer" else None, isolate=b.isolate, launcher=b.launcher,
                      reporter=b.reporter, params=b.params or None)
            value = rec.values.get(m.value)
            if rec.outcome == "skipped":
                res.answer, res.why = "not run here", rec.reason
                return res
            if rec.outcome != PASS or not isinstance(value, (int, float)) or value <= 0:
                res.answer = "could not measure"
                res.why = f"the {v} run of round {rnd}: {rec.outcome} ({(rec.reason or rec.first_error or 'no value')[:200]})"
                return res
            got[v] = float(value)
            res.driver = rec.driver or res.driver
            if rnd >= m.warmup_rounds:
                last[v] = rec
        res.rounds.append({"round": rnd, "warmup": rnd < m.warmup_rounds, "values": got})
        report.progress(f"bench {cfg.name}: round {rnd}{' (warm-up)' if rnd < m.warmup_rounds else ''}: "
                        + ", ".join(f"{k} {x:.4g}" for k, x in got.items()))
        if rnd >= m.warmup_rounds:
            for v in variants:
                values[v].append(got[v])
    iv = interval_of(values["layer"], values.get("bare"), 1 - m.alpha)
    res.interval = iv.to_json()
    place = m.bound.place(iv)
    res.answer = ANSWER.get(place, "undecided")
    res.why = (f"{iv.estimate:.4g} [{iv.low:.4g}, {iv.high:.4g}] {m.unit} ({100 * (1 - m.alpha):g} % interval, "
               f"{iv.n} rounds); expected {m.bound.text(m.unit)}")
    res.series = {v: r.series for v, r in last.items() if r.series}
    return res


def run_bench(b: Bench, cfgs: list[Config], run=run_once) -> list[ConfigResult]:
    out = []
    with tempfile.TemporaryDirectory(prefix="lucepatch-bench-") as scratch:
        for cfg in cfgs:
            out.append(measure_config(b, cfg, Path(scratch), run=run))
    return out
