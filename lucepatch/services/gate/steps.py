"""The gate's steps: lint, check (pinned base and canary), build + verify, probes."""

from __future__ import annotations

import time
from pathlib import Path

from lucepatch.builders.probe import run_probes
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.services.gate.result import FAIL, PASS, SKIP, WARN, Step
from lucepatch.services.lint import lint_target
from lucepatch.target import Target
from lucepatch.verify.driver import choose_driver
from lucepatch.verify.evidence import write_evidence
from lucepatch.verify.reproducer import list_reproducers


def named_scenarios(t: Target) -> dict[str, list[str] | None]:
    """reproducer -> scenarios the series names (None = all of them)."""
    out: dict[str, list[str] | None] = {}
    for p in t.patches:
        for r, s in p.reproducers:
            if s is None:
                out[r] = None
            elif out.get(r, []) is not None:
                out.setdefault(r, [])
                if s not in out[r]:
                    out[r].append(s)
    return out


def step_lint(ws, t: Target) -> Step:
    findings = lint_target(ws, t.name, pending_days=90, now=time.time())
    errors = [f for f in findings if f.level == "error"]
    warns = [f for f in findings if f.level != "error"]
    cases = [{"name": f"{f.patch or t.name}: {f.check}", "status": FAIL if f.level == "error" else WARN,
              "detail": f.message} for f in findings]
    if errors:
        return Step("lint", FAIL, f"{len(errors)} error(s): {errors[0].patch}: {errors[0].message}", cases=cases)
    return Step("lint", PASS, f"{len(warns)} warning(s)" if warns else "clean", cases=cases)


def check_on(t: Target, src: Path, cache: Path, ref: str, name: str) -> Step:
    with WorkArea(cache, f"ci-{name}-{t.name}") as work:
        res = apply_series(t, src, list(t.patches), work, base=ref)
    cases = [{"name": o.patch.name, "status": FAIL if o.status == "conflict" else PASS,
              "detail": o.status + (f": {o.detail}" if o.detail else "")} for o in res.outcomes]
    absorbed = [o.patch.name for o in res.outcomes if o.status == "already-upstream"]
    conflicts = [o.patch.name for o in res.conflicts]
    detail = f"on {res.base[:12]}: {len(res.outcomes) - len(conflicts)}/{len(res.outcomes)} apply"
    if absorbed:
        detail += f"; already upstream (retire candidates): {', '.join(absorbed)}"
    if conflicts:
        return Step(name, FAIL, detail + f"; conflicts: {', '.join(conflicts)}", cases=cases)
    return Step(name, PASS, detail, cases=cases)


def step_build_and_verify(ws, t: Target, src: Path, cache: Path, driver: str, runs: int,
                          evidence_dir: Path | None) -> tuple[list[Step], str | None]:
    from lucepatch.verify.service import VerifyRequest, build_variants, fixed_at, run_verify  # lazy: targets with reproducers only, 20 ms
    from lucepatch.verify.verdict import with_upstream_fixes  # lazy: as above, 1 ms

    if not t.build:
        return [Step("build", SKIP, "target has no [build] table"), Step("verify", SKIP, "nothing built")], None
    t0 = time.monotonic()
    named = named_scenarios(t)
    have = {r.name: r for r in list_reproducers(ws)}
    artifacts = {have[n].artifact for n in named if n in have} or set(t.build.artifacts)
    variants = {a: build_variants(t, src, cache, a) for a in sorted(artifacts)}
    first = next(iter(variants.values()))
    build = Step("build", PASS, f"baseline {first[0].sha256[:12]}, patched {first[1].sha256[:12]}",
                 time.monotonic() - t0)
    t0 = time.monotonic()
    if not named:
        return [build, Step("verify", SKIP, "the series names no Reproducer:")], None
    cases, evidence_path = [], None
    missing = [n for n in named if n not in have]
    for n in missing:
        cases.append({"name": n, "status": FAIL, "detail": f"reproducer {n} is named by the series but not in the workspace"})
    repros = [have[n] for n in named if n in have]
    docs = []
    for r in repros:
        wanted = named[r.name]
        for s in wanted or []:
            if not any(x.name == s for x in r.scenarios):
                cases.append({"name": f"{r.name}:{s}", "status": FAIL, "detail": f"reproducer {r.name} has no scenario {s}"})
        scen = [s for s in (wanted or [x.name for x in r.checked]) if any(x.name == s for x in r.scenarios)]
        # what the target declares not applicable at its base (a line's [not_applicable]) is reported, never run
        na = {s: t.not_applicable.get(f"{r.name}:{s}", t.not_applicable.get(r.name)) for s in scen}
        for s, why in na.items():
            if why is not None:
                cases.append({"name": f"{r.name}:{s}", "status": SKIP,
                              "detail": f"not applicable at {t.name}'s base: {why}"})
        scen = [s for s in scen if na[s] is None]
        if not scen:
            continue
        v = variants[r.artifact]
        # the libraries are given to verify, so it cannot read their history: what upstream fixed at or
        # before the baseline's commit (reproducer.toml fixed_upstream) is made a guard here
        [r] = with_upstream_fixes([r], fixed_at(src, [r], v[0].provenance.get("base") or t.base, lambda _m: None))
        ev = run_verify(VerifyRequest(workspace=ws, target=t, reproducers=[r], driver=driver, runs=runs,
                                      scenarios=scen, lib=v[1].lib, baseline_lib=v[0].lib), cache,
                        progress=lambda _m: None)
        # the variants were built here from the series: keep their provenance, not "file"
        for var in v:
            ev.variants[var.name] = type(ev.variants[var.name]).from_json(
                {**var.provenance, "artifact": ev.variants[var.name].artifact.to_json()})
        ev.upstream["base"] = v[0].provenance.get("base") or t.base
        docs.append(ev)
        for s in ev.scenarios:
            if s.verdict in ("skipped", "not-applicable"):  # never a pass, never run: reported as a skip
                if not any(c["name"] == s.scenario for c in cases):  # not-applicable ones are reported above
                    cases.append({"name": s.scenario, "status": SKIP, "driver": ev.driver_kind,
                                  "detail": f"{s.verdict}: {s.reason or 'not run here'}"})
                continue
            if s.control:
                st = PASS if s.verdict == "pass" else FAIL
            else:  # guarded: upstream fixed it at the base (a guard's reason says by what) and the series keeps it
                st = PASS if s.verdict in ("proven", "guarded") else FAIL
            detail = (f"{s.verdict}: baseline {s.baseline.failures}/{s.baseline.runs} failed, "
                      f"patched {s.patched.failures}/{s.patched.runs}")
            if s.verdict == "guarded":
                detail += f" ({s.reason.split(':')[0]})"
            if s.p_value is not None:
                detail += f", p={s.p_value:.3g}"
            if s.fingerprint:
                detail += f"; baseline crash {s.fingerprint['summary']}"
            cases.append({"name": s.scenario, "status": st, "detail": detail, "driver": ev.driver_kind})
    if evidence_dir and docs:
        evidence_dir.mkdir(parents=True, exist_ok=True)
        for d in docs:
            p = evidence_dir / f"{t.name}.{d.reproducers[0]['name']}.evidence.json"
            write_evidence(p, d)
            evidence_path = str(p)
    failed = [c for c in cases if c["status"] == FAIL]
    skipped = [c for c in cases if c["status"] == SKIP]
    kind = docs[0].driver_kind if docs else choose_driver(driver, cache).chosen
    detail = (f"{len(cases) - len(failed) - len(skipped)}/{len(cases)} scenario(s) as required, driver {kind}, "
              f"{runs} run(s) each")
    if skipped:  # not gated here; --strict fails on them (gate.run.exit_code)
        detail += f"; {len(skipped)} skipped ({skipped[0]['name']}: {skipped[0]['detail']})"
    if failed:
        detail += f"; first failure {failed[0]['name']}: {failed[0]['detail']}"
    return [build, Step("verify", FAIL if failed else PASS, detail, time.monotonic() - t0, cases=cases)], evidence_path


def step_probes(t: Target, src: Path, cache: Path) -> Step:
    if not (t.dir / "probes.toml").is_file():
        return Step("probes", SKIP, "no probes.toml")

    run = run_probes(t, src, None, "patched", cache, None)
    cases = [{"name": f"{r.spec.fix} {r.spec.name}", "status": PASS if r.as_declared else FAIL, "detail": r.detail[:200]}
             for r in run.results]
    return Step("probes", PASS if run.ok else FAIL, f"{sum(c['status'] == PASS for c in cases)}/{len(cases)} proven",
                cases=cases)
