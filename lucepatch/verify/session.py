"""One verification: variants × scenarios × runs, then verdicts and the evidence document."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import report
from lucepatch.build.toolchain import file_sha256
from lucepatch.errors import UsageError
from lucepatch.target import Target
from lucepatch.verify import evidence as ev
from lucepatch.verify.driver import DriverChoice, classify_driver
from lucepatch.verify.reproducer import Reproducer
from lucepatch.verify.runner import INVALID, RunRecord, compile_reproducer, run_once
from lucepatch.verify.verdict import overall, scenario_verdict


@dataclass
class Variant:
    name: str  # baseline | patched
    lib: Path
    provenance: dict = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return file_sha256(self.lib)


def variant_from_file(name: str, path: str | Path) -> Variant:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--{'baseline-lib' if name == 'baseline' else 'lib'} {p} is not a file")
    with open(p, "rb") as f:
        if f.read(4) != b"\x7fELF":
            raise UsageError(f"{p} is not an ELF shared library")
    return Variant(name, p.resolve(), {"from": "file", "path": str(p.resolve())})


def run_matrix(repros: list[Reproducer], variants: list[Variant], runs: int, driver: DriverChoice,
               cache: Path, scenario_filter: list[str] | None = None) -> list[RunRecord]:
    records: list[RunRecord] = []
    shas = {v.name: v.sha256 for v in variants}
    with tempfile.TemporaryDirectory(prefix="lucepatch-runs-") as scratch:
        for repro in repros:
            binary = compile_reproducer(repro, cache, driver.fake_dir)
            scenarios = [s for s in repro.scenarios if s.control or not scenario_filter or s.name in scenario_filter]
            total = len(scenarios) * len(variants) * runs
            report.progress(f"{repro.name}: {len(scenarios)} scenario(s) x {len(variants)} variant(s) x {runs} run(s) "
                            f"= {total} processes, driver {driver.chosen}, serial")
            # Interleave variants run by run so drift on the machine hits both alike.
            for i in range(runs):
                for s in scenarios:
                    for v in variants:
                        rec = run_once(binary, repro, s, v.name, i, v.lib, driver.env, Path(scratch),
                                       expected_sha256=shas[v.name])
                        rec.scenario = f"{repro.name}:{s.name}"
                        records.append(rec)
                done = (i + 1) * len(scenarios) * len(variants)
                report.progress(f"  {repro.name}: {done}/{total} runs")
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
                   driver: DriverChoice, runs: int, workspace: dict, upstream_base: str | None) -> dict:
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
            sv = scenario_verdict(key, s.control, recs, True)
            if s.control and sv["verdict"] != "pass":
                ctrl_ok = False
            per.append((s, recs, sv))
        for s, recs, sv in per:
            if not s.control and not ctrl_ok:
                sv = scenario_verdict(f"{repro.name}:{s.name}", False, recs, False)
            sv["reproducer"] = repro.name
            scenarios.append(sv)
    drv = derive_driver(records, driver)
    verdict = overall(scenarios)
    if drv["kind"] in ("unknown", "mixed") and verdict != "invalid":
        verdict = "invalid"
    return {
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
        "execution": {"mode": "serial", "runs_per_variant": runs, "interleaved": True,
                      "region_file": "fresh per run, deleted after", "core_dumps": "off"},
        "variants": {v.name: {**v.provenance, "artifact": {"path": str(v.lib), "sha256": v.sha256}} for v in variants},
        "scenarios": scenarios,
        "verdict": verdict,
        "runs": [{k: v for k, v in r.to_json().items() if k not in ("log_tail", "checks")} for r in records],
    }
