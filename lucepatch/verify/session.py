"""One verification: variants × scenarios × runs, then verdicts and the evidence document."""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import report
from lucepatch.files import sha256_file
from lucepatch.errors import UsageError
from lucepatch.target import Target
from lucepatch.verify import evidence as ev
from lucepatch.verify.driver import DriverChoice, classify_driver
from lucepatch.verify.reproducer import Reproducer
from lucepatch.verify.runner import INVALID, SKIPPED, RunRecord, compile_reproducer, namespace_isolation, run_once
from lucepatch.verify.verdict import overall, scenario_verdict


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
    with open(p, "rb") as f:
        if f.read(4) != b"\x7fELF":
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

    def to_json(self) -> dict:
        return {"mode": self.mode, "jobs": self.jobs, "isolation": self.isolation, "why": self.why,
                "wall_s": round(self.wall_s, 3), "processes": self.processes}


def plan_execution(jobs: int | None) -> Execution:
    """Parallel only where every run gets a private mount namespace (HAMi-core's host-wide
    /tmp/vgpulock flock would otherwise serialise or hang them, docs/field-notes.md §3)."""
    ok, why = namespace_isolation()
    if jobs == 1:
        return Execution("serial", 1, "namespace" if ok else "none", "--jobs 1")
    if not ok:
        return Execution("serial", 1, "none", why)
    n = jobs or max(1, min(os.cpu_count() or 1, 16))
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


def run_matrix(repros: list[Reproducer], variants: list[Variant], runs: int, driver: DriverChoice,
               cache: Path, scenario_filter: list[str] | None = None, jobs: int | None = None,
               execution: Execution | None = None) -> list[RunRecord]:
    ex = execution or plan_execution(jobs)
    records: list[RunRecord] = []
    shas = {v.name: v.sha256 for v in variants}
    check_scenarios(repros, scenario_filter)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lucepatch-runs-") as scratch:
        for repro in repros:
            binary = compile_reproducer(repro, cache, driver.fake_dir)
            scenarios = [s for s in repro.scenarios if s.control or not scenario_filter
                         or s.name in scenario_filter or f"{repro.name}:{s.name}" in scenario_filter]
            total = len(scenarios) * len(variants) * runs
            report.progress(f"{repro.name}: {len(scenarios)} scenario(s) x {len(variants)} variant(s) x {runs} run(s) "
                            f"= {total} processes, driver {driver.chosen}, {ex.mode}"
                            + (f" ({ex.jobs} jobs, private /tmp/vgpulock each)" if ex.mode == "parallel" else ""))
            # Interleave variants run by run so drift on the machine hits both alike.
            plan = [(i, s, v) for i in range(runs) for s in scenarios for v in variants]

            def one(job, _repro=repro, _binary=binary):
                i, s, v = job
                rec = run_once(_binary, _repro, s, v.name, i, v.lib, driver.env, Path(scratch),
                               expected_sha256=shas[v.name], isolate=ex.isolation == "namespace")
                rec.scenario = f"{_repro.name}:{s.name}"
                return rec

            step = max(1, len(scenarios) * len(variants))
            if ex.mode == "parallel":
                with ThreadPoolExecutor(max_workers=ex.jobs) as pool:
                    for k, rec in enumerate(pool.map(one, plan), 1):
                        records.append(rec)
                        if k % (step * max(1, runs // 5)) == 0 or k == total:
                            report.progress(f"  {repro.name}: {k}/{total} runs")
            else:
                for k, job in enumerate(plan, 1):
                    records.append(one(job))
                    if k % step == 0:
                        report.progress(f"  {repro.name}: {k}/{total} runs")
    ex.wall_s += time.monotonic() - start
    ex.processes += len(records)
    return records


def derive_driver(records: list[RunRecord], driver: DriverChoice) -> dict:
    """Driver facts from what the runs mapped and reported — never from the --driver flag."""
    seen = {}
    for r in records:
        if r.outcome == INVALID or not r.libcuda:
            continue
        d = r.driver or {}
        key = (r.libcuda.get("sha256"), d.get("version"), d.get("gpu"))
        seen.setdefault(key, {"libcuda": r.libcuda, "version": d.get("version"), "gpu": d.get("gpu"),
                              "device_count": d.get("device_count")})
    if not seen:
        return {"kind": "unknown", "requested": driver.requested}
    if len(seen) > 1:
        return {"kind": "mixed", "requested": driver.requested, "seen": list(seen.values())}
    info = next(iter(seen.values()))
    info["kind"] = classify_driver(info["libcuda"].get("sha256"), info.get("gpu"), driver.fake_dir)
    info["requested"] = driver.requested
    return info


def build_evidence(target: Target, repros: list[Reproducer], variants: list[Variant], records: list[RunRecord],
                   driver: DriverChoice, runs: int, workspace: dict, upstream_base: str | None,
                   execution: Execution | None = None, policy: ev.RunPolicy | None = None) -> ev.Evidence:
    """The typed evidence of one verification (validated against the schema when written)."""
    policy = policy or ev.RunPolicy(rule="fixed", max_runs=runs)
    scenarios = []
    for repro in repros:
        names = [s for s in repro.scenarios]
        ctrl_ok = True
        per = []
        for s in names:
            key = f"{repro.name}:{s.name}"
            recs = {v.name: [r for r in records if r.scenario == key and r.variant == v.name] for v in variants}
            if not any(recs.values()):
                continue
            sv = scenario_verdict(key, s.control, recs, True, guard=s.regression_guard)
            if s.control and sv["verdict"] != "pass":
                ctrl_ok = False
            per.append((s, recs, sv))
        for s, recs, sv in per:
            if not s.control and not ctrl_ok:
                sv = scenario_verdict(f"{repro.name}:{s.name}", False, recs, False, guard=s.regression_guard)
            sv["reproducer"] = repro.name
            sv["description"] = s.description
            if policy.rule == "fixed":
                sv.setdefault("runs_spent", {v: sv[v]["runs"] for v in ("baseline", "patched")})
                sv.setdefault("stop_reason", "fixed number of runs")
                sv.setdefault("mode", "fixed")
            if s.fixed_upstream:
                sv["fixed_upstream"] = s.fixed_upstream
            if s.min_devices > 1:
                sv["min_devices"] = s.min_devices
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
        "reproducers": [{"name": r.name, "hash": r.hash} for r in repros],
        "driver": drv,
        "simulated": drv.get("kind") == "fake",
        "execution": {**(execution.to_json() if execution else {"mode": "serial"}),
                      "runs_per_variant": runs, "interleaved": True,
                      "region_file": "fresh per run, deleted after", "core_dumps": "off",
                      "timeout": "process group killed (SIGKILL)"},
        "run_policy": policy.to_json(),
        "skipped": [{"scenario": sv["scenario"], "reason": sv["reason"]} for sv in scenarios if sv["verdict"] == "skipped"],
        "variants": {v.name: {**v.provenance, "artifact": {"path": str(v.lib), "sha256": v.sha256}} for v in variants},
        "scenarios": scenarios,
        "verdict": verdict,
        "runs": [{k: v for k, v in r.to_json().items() if k not in ("log_tail", "checks")}
                 | ({"log_tail": r.log_tail} if r.outcome not in ("pass", SKIPPED) else {}) for r in records],
    })
