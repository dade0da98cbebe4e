"""One verification: variants × scenarios × runs, then verdicts and the evidence document."""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import report
from lucepatch.errors import UsageError
from lucepatch.faults import pause
from lucepatch.files import sha256_file
from lucepatch.native import elf
from lucepatch.native.launch import build_isolate
from lucepatch.native.workload import build_program, build_reporter, workload_env
from lucepatch.target import Target
from lucepatch.verify import bindshim
from lucepatch.verify.rates import RateContext, RateOutcome, is_rate, run_rate_scenarios
from lucepatch.verify import evidence as ev
from lucepatch.verify.bounds import error_bounds
from lucepatch.verify.driver import DriverChoice, classify_driver
from lucepatch.verify.progress import RunProgress
from lucepatch.verify.reproducer import Reproducer
from lucepatch.verify.requirements import device_count, unmet
from lucepatch.verify.rules import FixedRule, Rule, proof_hint
from lucepatch.verify.runner import INVALID, SKIPPED, RunRecord, compile_reproducer, namespace_isolation, run_once
from lucepatch.verify.schedule import Job, Scheduler, kind_of
from lucepatch.verify.verdict import NOT_PROVEN, not_applicable as na_result, overall, scenario_verdict


@dataclass
class Variant:
    name: str  # baseline | patched
    lib: Path
    provenance: dict = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return sha256_file(self.lib)


def variant_from_file(name: str, path: str | Path) -> Variant:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--{'baseline-lib' if name == 'baseline' else 'lib'} {p} is not a file")
    if not elf.is_elf(p):
        raise UsageError(f"{p} is not an ELF shared library")
    return Variant(name, p.resolve(), {"from": "file", "path": str(p.resolve())})


@dataclass
class Execution:
    """How the runs were executed; recorded verbatim in the evidence."""
    mode: str  # parallel | serial
    jobs: int
    isolation: str  # namespace | none
    why: str
    wall_s: float = 0.0
    processes: int = 0
    launcher: str = ""  # how an isolated run is started (lucepatch-isolate, or unshare+sh+mount)
    bind_now: bool = True  # LD_BIND_NOW=1 from the runner: no re-exec in the reproducer
    driver_held: str = ""  # real driver: what kept it open during the runs (lucepatch.verify.driver)
    phases: dict = field(default_factory=dict)  # seconds per step of the verification

    def to_json(self) -> dict:
        out = {"mode": self.mode, "jobs": self.jobs, "isolation": self.isolation, "why": self.why,
               "wall_s": round(self.wall_s, 3), "processes": self.processes}
        if self.launcher:
            out["launcher"] = self.launcher
        out["bind_now"] = self.bind_now
        if self.driver_held:
            out["driver_held"] = self.driver_held
        if self.phases:
            out["phases"] = {k: round(v, 3) for k, v in self.phases.items()}
        return out


DEFAULT_MAX_JOBS = 6
DEFAULT_MAX_JOBS_WORKLOADS = 8


def plan_execution(jobs: int | None, workloads: bool = False) -> Execution:
    """Parallel only where every run gets a private mount namespace (HAMi-core's host-wide
    /tmp/vgpulock flock would otherwise serialise or hang them, docs/field-notes.md §3).
    `workloads`: the runs include workload reproducers (Python, PyTorch), which raise the default."""
    ok, why = namespace_isolation()
    if jobs == 1:
        return Execution("serial", 1, "namespace" if ok else "none", "--jobs 1")
    if not ok:
        return Execution("serial", 1, "none", why)
    # at most 6 by default: each run creates CUDA contexts (HAMi-core's init makes and drops one, then the
    # program makes its own) and asks NVML for the device's processes, and the driver serialises both, so
    # runs beyond what keeps it busy only queue and contend, and fewer leave it idle. The main job warm on
    # one H200 (16 cores), one machine: x3 31.1 s, x4 27.9/27.3, x6 24.7/24.2, x8 27.2/25.4, x10 27.0,
    # x12 27.4; another: x4 22.0, x5 22.2/20.8, x6 21.5/20.8, x7 19.3/21.4 (docs/evidence/main-job-jobs.h200.log)
    # A workload's process spends most of its seconds in Python's start-up and PyTorch's import, on the
    # CPU, not in the driver, so more slots overlap them: PR #188's 50 scenarios (156 of 441 processes
    # PyTorch's) took 264.3 s at x6 and 222.4 s at x8 on one H200, same 441 processes and verdicts
    # (docs/evidence/hami-core-pr188-old50-{r2,x8}.h200.log), while the C-only main job stays at 6.
    cap = DEFAULT_MAX_JOBS_WORKLOADS if workloads else DEFAULT_MAX_JOBS
    n = jobs or max(1, min(os.cpu_count() or 1, cap))
    if n == 1:
        return Execution("serial", 1, "namespace", "one CPU")
    return Execution("parallel", n, "namespace", why)


def check_scenarios(repros: list[Reproducer], scenario_filter: list[str] | None) -> None:
    """Every --scenario names a scenario of these reproducers (bare or reproducer:scenario)."""
    if not scenario_filter:
        return
    known = {s.name for r in repros for s in r.scenarios} | {f"{r.name}:{s.name}" for r in repros for s in r.scenarios}
    unknown = [f for f in scenario_filter if f not in known]
    if unknown:
        valid = ", ".join(f"{r.name}:{s.name}" for r in repros for s in r.scenarios if not s.control)
        raise UsageError(f"--scenario {', '.join(unknown)}: no such scenario; valid: {valid}")


@dataclass
class Runs:
    """What run_scenarios did: every run record (in launch order) and the account of each scenario."""
    records: list[RunRecord]
    spend: dict  # reproducer:scenario -> {"runs_spent", "stop_reason", "mode"}
    rule: Rule
    rates: list[RateOutcome] = field(default_factory=list)  # the quantitative scenarios (lucepatch.verify.rates)


def _selected(repros: list[Reproducer], scenario_filter: list[str] | None) -> list[tuple[Reproducer, object]]:
    return [(r, s) for r in repros for s in r.scenarios if s.control or not scenario_filter
            or s.name in scenario_filter or f"{r.name}:{s.name}" in scenario_filter]


def _bind_shims(repros: list[Reproducer], variants: list[Variant], cache: Path) -> dict[str, Path]:
    """Per variant, the bind shim its library needs under the C reproducers' LD_BIND_NOW=1 (a function it
    binds lazily that this glibc lacks: lucepatch.verify.bindshim), said once on stderr."""
    if all(r.is_workload for r in repros):
        return {}
    out = {}
    for v in variants:
        shim, refs = bindshim.for_library(cache, v.lib)
        if shim is not None:
            out[v.name] = shim
            report.progress(f"{v.name}: {Path(v.lib).name} binds {', '.join(str(r) for r in refs)} lazily and this glibc "
                            f"does not export it: the C reproducers bind every symbol at start, so their runs preload "
                            f"{shim.name} after it (in each run's preload list); a call to it ends the run, as it would "
                            "end a pod's process")
    return out


def run_scenarios(repros: list[Reproducer], variants: list[Variant], rule: Rule, driver: DriverChoice, cache: Path,
                  scenario_filter: list[str] | None = None, jobs: int | None = None,
                  execution: Execution | None = None) -> Runs:
    """Run every selected scenario (controls always) on every variant, as many times as `rule` needs.

    Never more processes at once than execution slots, and a job is handed out only when a slot is
    free, so every job handed out is a process started and every started process is waited for and
    tallied (an invalid run is never replaced). Variants and scenarios are interleaved run by run."""
    ex = execution or plan_execution(jobs)
    check_scenarios(repros, scenario_filter)
    binaries = {r.name: None if r.is_workload else compile_reproducer(r, cache, driver.fake_dir) for r in repros}
    reporter = build_reporter(cache)
    everything = _selected(repros, scenario_filter)
    # quantitative scenarios are measured after these, one at a time (lucepatch.verify.rates)
    selected = [(r, s) for r, s in everything if not is_rate(s)]
    rate_selected = [(r, s) for r, s in everything if is_rate(s)]
    by_key = {f"{r.name}:{s.name}": (r, s) for r, s in selected}
    unmet = requirements(everything, driver)
    for r in repros:  # a workload's [build], only where some scenario can run (else every one is skipped)
        if r.is_workload and r.build is not None and any(not unmet.get(f"{rr.name}:{s.name}")
                                                         for rr, s in everything if rr is r):
            binaries[r.name] = build_program(r, cache)
    sched = Scheduler(rule, [(k, kind_of(s), r.name) for k, (r, s) in by_key.items()], [v.name for v in variants])
    libs = {v.name: v for v in variants}
    shas = {v.name: v.sha256 for v in variants}
    shims = _bind_shims(repros, variants, cache)
    slots = ex.jobs if ex.mode == "parallel" else 1
    launcher = None
    if ex.isolation == "namespace" and ex.launcher != "unshare+sh+mount":
        launcher = build_isolate(cache)
        ex.launcher = "lucepatch-isolate (one exec: unshare, private tmpfs on /tmp/vgpulock, no core dumps)"
    how = f"{rule.max_runs} runs" if rule.name == "fixed" else f"≤{rule.max_runs} runs"  # ≤: the sequential rule
    report.progress(f"{len(selected)} scenario(s) of {len(repros)} reproducer(s), {how} per variant, "
                    + (f"{ex.jobs} jobs" if ex.mode == "parallel" else "serial"))
    records: list[RunRecord] = []
    pause("verify-runs")  # test-only (lucepatch.faults): the runs are about to start
    start = time.monotonic()
    # the progress bar (a terminal) is stopped however the loop ends: Ctrl-C leaves the terminal as it was
    with tempfile.TemporaryDirectory(prefix="lucepatch-runs-") as scratch, RunProgress(len(by_key), _bound(sched)) as shown:

        def one(job: Job) -> RunRecord:
            r, s = by_key[job.key]
            v = libs[job.variant]
            if unmet.get(job.key):  # never run, never passed: skipped with the reason
                rec = RunRecord(variant=v.name, scenario=job.key, index=job.index, outcome=SKIPPED, returncode=None,
                                signal=None, duration_s=0.0, reason=unmet[job.key])
            else:
                rec = run_once(binaries[r.name], r, s, v.name, job.index, v.lib, driver.env, Path(scratch),
                               expected_sha256=shas[v.name], isolate=ex.isolation == "namespace", launcher=launcher,
                               bind_now=ex.bind_now, reporter=reporter, bind_shim=shims.get(v.name))
            rec.scenario, rec.launch = job.key, job.launch
            return rec

        def done(job: Job, rec: RunRecord) -> None:
            sched.complete(job, rec.outcome)
            records.append(rec)
            shown.update(len(records), _bound(sched), sum(1 for k in by_key if not _settled(sched, k)))

        if slots == 1:  # serial: in this thread (run_once's preexec_fn must not race other threads)
            while not sched.finished:
                for job in sched.next_jobs(1):
                    done(job, one(job))
        else:
            with ThreadPoolExecutor(max_workers=slots) as pool:
                running: dict = {}
                try:
                    while True:
                        for job in sched.next_jobs(slots - len(running)):
                            running[pool.submit(one, job)] = job
                        if not running:
                            break
                        finished, _ = wait(running, return_when=FIRST_COMPLETED)
                        for f in finished:
                            done(running.pop(f), f.result())
                except BaseException:
                    # interrupted (the signal handler killed the runs in flight: lucepatch.children) or a
                    # bug: start nothing more, and let the workers return before the scratch folder goes
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
        shown.close()
    rates: list[RateOutcome] = []
    if rate_selected:
        ctx = RateContext(binaries=binaries, libs={v.name: v.lib for v in variants}, shas=shas, driver_env=driver.env,
                          isolate=ex.isolation == "namespace", launcher=launcher, bind_now=ex.bind_now,
                          reporter=reporter, shims=shims, unmet=unmet, simulated=driver.chosen == "fake",
                          max_runs=rule.max_runs, fixed=rule.name == "fixed")
        rates = run_rate_scenarios(rate_selected, ctx, launch0=len(records))
    ex.wall_s += time.monotonic() - start
    # a scenario skipped for an unmet requirement started no process
    ex.processes += sum(1 for r in records + [r for o in rates for r in o.records]
                        if not (r.outcome == SKIPPED and r.returncode is None and r.duration_s == 0))
    records.sort(key=lambda r: r.launch)
    return Runs(records, {k: sched.summary(k) for k in by_key}, rule, rates)


def requirements(selected: list, driver: DriverChoice) -> dict[str, str]:
    """reproducer:scenario -> why a scenario cannot run on this machine ("" when it can): a workload's
    `requires`, and every scenario's `min_devices` (a C reproducer's too: one that needs the GPUs
    CUDA_VISIBLE_DEVICES=1,0 names finds no device on a 1-GPU machine, before it can prove what it
    loaded, so its runs would be invalid, not skipped). The GPUs are counted once, only when some
    scenario needs more than one."""
    devices = device_count(driver.env) if any(s.min_devices > 1 for _, s in selected) else None
    return {f"{r.name}:{s.name}": unmet(r, s, driver.chosen, devices=devices,
                                        pythonpath=workload_env(r, s).get("PYTHONPATH", "") if r.is_workload else "")
            for r, s in selected}


def _bound(sched: Scheduler) -> int:
    """The most runs the verification can still take: a settled scenario's runs, the rule's
    maximum for the others (the sequential rule usually stops well before it)."""
    return sum(t.launched[v] if t.stopped or _settled(sched, t.key) else max(sched.wanted(t, v), sched.rule.max_runs)
               for t in sched.tracks.values() for v in sched.variants)


def _settled(sched: Scheduler, key: str) -> bool:
    t = sched.tracks[key]
    return all(t.launched[v] >= sched.wanted(t, v) for v in sched.variants) and not any(
        j.key == key for j in sched.outstanding)


def run_matrix(repros: list[Reproducer], variants: list[Variant], runs: int, driver: DriverChoice,
               cache: Path, scenario_filter: list[str] | None = None, jobs: int | None = None,
               execution: Execution | None = None) -> list[RunRecord]:
    """Every selected scenario `runs` times per variant (the fixed rule: retirement, bisect)."""
    return run_scenarios(repros, variants, FixedRule(runs), driver, cache, scenario_filter, jobs, execution).records


def derive_driver(records: list[RunRecord], driver: DriverChoice) -> dict:
    """Driver facts from what the runs mapped and reported — never from the --driver flag.

    Runs are grouped by the mapped libcuda; a run without a driver report (a crash the preloaded
    reporter proved, a program that prints nothing) adds its libcuda, not an unknown driver."""
    seen: dict = {}
    conflict = False
    for r in records:
        if r.outcome == INVALID or not r.libcuda:
            continue
        d = r.driver or {}
        info = seen.setdefault(r.libcuda.get("sha256"), {"libcuda": r.libcuda, "version": None, "gpu": None,
                                                          "device_count": None})
        if not d:
            continue
        if info["gpu"] is None:
            info.update(version=d.get("version"), gpu=d.get("gpu"), device_count=d.get("device_count"))
        elif (info["version"], info["gpu"]) != (d.get("version"), d.get("gpu")):
            conflict = True
    if not seen:
        return {"kind": "unknown", "requested": driver.requested}
    if len(seen) > 1 or conflict:
        return {"kind": "mixed", "requested": driver.requested, "seen": list(seen.values())}
    info = next(iter(seen.values()))
    info["kind"] = classify_driver(info["libcuda"].get("sha256"), info.get("gpu"), driver.fake_dir)
    info["requested"] = driver.requested
    return info


def build_evidence(target: Target, repros: list[Reproducer], variants: list[Variant], records: list[RunRecord],
                   driver: DriverChoice, runs: int, workspace: dict, upstream_base: str | None,
                   execution: Execution | None = None, policy: ev.RunPolicy | None = None,
                   spend: dict | None = None, rule: Rule | None = None,
                   not_applicable: dict | None = None) -> ev.Evidence:
    """The typed evidence of one verification (validated against the schema when written).

    rule/spend: the rule the runs were spent under and run_scenarios' account per scenario
    (default: the fixed rule with `runs`). not_applicable: {reproducer or reproducer:scenario:
    reason} the target declares; those scenarios were not run and are recorded with the reason."""
    rule = rule or FixedRule(runs)
    if policy is None:
        policy = ev.RunPolicy.from_json({**rule.policy(), "bounds": error_bounds(rule)})
    hint = proof_hint(rule)
    scenarios: list[ev.ScenarioResult] = []
    for repro in repros:
        ctrl_ok = True
        per = []
        for s in repro.scenarios:
            if is_rate(s):  # judged on its rates (lucepatch.verify.rates.attach), not on pass/fail tallies
                continue
            key = f"{repro.name}:{s.name}"
            recs = {v.name: [r for r in records if r.scenario == key and r.variant == v.name] for v in variants}
            if not any(recs.values()) and key not in (spend or {}):
                continue  # not selected (a stopped scenario with no run is still reported)
            sv = scenario_verdict(key, s.control, recs, True, guard=s.regression_guard, alpha=rule.alpha,
                                  guard_why=s.guard_why)
            if s.control and sv.verdict != "pass":
                ctrl_ok = False
            per.append((s, recs, sv))
        for s, recs, sv in per:
            key = f"{repro.name}:{s.name}"
            if not s.control and not ctrl_ok:
                sv = scenario_verdict(key, False, recs, False, guard=s.regression_guard, alpha=rule.alpha,
                                      guard_why=s.guard_why)
            sv.reproducer = repro.name
            sv.description = s.description
            acct = (spend or {}).get(key) or {"runs_spent": {v: len(recs[v]) for v in recs},
                                             "stop_reason": f"fixed number of runs ({runs} per variant)",
                                             "mode": "fixed"}
            sv.runs_spent, sv.stop_reason, sv.mode = dict(acct["runs_spent"]), acct["stop_reason"], acct["mode"]
            if acct.get("patched_rate"):
                sv.extra["patched_rate"] = acct["patched_rate"]
            if hint and sv.verdict == NOT_PROVEN and sv.reason.startswith("baseline failures not significant"):
                sv.reason += f"; {hint}"
            if s.fixed_upstream:
                sv.extra["fixed_upstream"] = s.fixed_upstream
            if s.min_devices > 1:
                sv.extra["min_devices"] = s.min_devices
            scenarios.append(sv)
    na, where = not_applicable or {}, f"target.toml [not_applicable] of {target.name}"
    for repro in repros:
        for s in repro.scenarios:
            why = na.get(repro.name) or na.get(f"{repro.name}:{s.name}")
            if why:
                sv = na_result(f"{repro.name}:{s.name}", s.control, why, where)
                sv.reproducer, sv.description = repro.name, s.description
                scenarios.append(sv)
    drv = derive_driver(records, driver)
    verdict = overall(scenarios)
    if drv["kind"] in ("unknown", "mixed") and verdict != "invalid":
        verdict = "invalid"
    return ev.Evidence.from_json({
        "schema_version": ev.SCHEMA_VERSION,
        "kind": "lucepatch-evidence",
        "tool": ev.tool_info(),
        "workspace": workspace,
        "target": target.name,
        "series": {"version": target.version, "series_hash": target.series_hash,
                   "patch_ids": [p.patch_id for p in target.patches],
                   "patches": [{"name": p.name, "patch_id": p.patch_id, "build_only": p.build_only}
                               for p in target.patches]},
        "upstream": {"url": target.upstream, "base": upstream_base or target.base},
        "reproducers": [{"name": r.name, "hash": r.hash, "kind": r.kind,
                         **({"build": r.build.to_json()} if getattr(r, "build", None) else {})} for r in repros],
        "driver": drv,
        "simulated": drv.get("kind") == "fake",
        "execution": {**(execution.to_json() if execution else {"mode": "serial"}),
                      "runs_per_variant": runs, "interleaved": True,
                      "region_file": "fresh per run, deleted after", "core_dumps": "off",
                      "timeout": "process group killed (SIGKILL)",
                      "reporter": "liblp_reporter.so preloaded after the library under test: the call path of a "
                                  "fatal signal; the load proof at exit for load_proof = preload workloads"},
        "run_policy": policy.to_json(),
        "skipped": [{"scenario": sv.scenario, "reason": sv.reason} for sv in scenarios
                    if sv.verdict in ("skipped", "not-applicable")],
        "variants": {v.name: {**v.provenance, "artifact": {"path": str(v.lib), "sha256": v.sha256}} for v in variants},
        "scenarios": [sv.to_json() for sv in scenarios],
        "verdict": verdict,
        "runs": [{k: v for k, v in r.to_json().items() if k not in ("log_tail", "checks", "hami_log")}
                 | ({"log_tail": r.log_tail} if r.outcome not in ("pass", SKIPPED) else {})
                 | ({"hami_log": r.hami_log} if r.hami_log and r.outcome not in ("pass", SKIPPED) else {})
                 for r in records],
    })
