"""The verify pipeline as one service: which reproducers, which two variants, the runs, the
verdicts, the fingerprints, the evidence. `lucepatch verify`, `lucepatch ci`, the public API and
the tests call `run_verify`; commands only parse their options into a `VerifyRequest` and print
what comes back.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from lucepatch import git, report
from lucepatch.builders.native import build_variant
from lucepatch.errors import EnvironmentMissing, UsageError
from lucepatch.faults import pause
from lucepatch.fingerprints import match_fingerprint
from lucepatch.target import Target, list_targets, load_target
from lucepatch.verify.bounds import error_bounds
from lucepatch.verify.driver import DriverChoice, choose_driver, hold_driver, require_driver
from lucepatch.verify import rates as rate_scenarios
from lucepatch.verify.evidence import Evidence, RunPolicy, check_destination, schema_validator
from lucepatch.verify.reproducer import Reproducer, list_reproducers, load_reproducer
from lucepatch.verify.rules import FixedRule, SequentialRule, proof_hint
from lucepatch.verify.verdict import split_not_applicable, with_declared_guards, with_upstream_fixes
from lucepatch.verify.session import (Execution, Variant, build_evidence, check_scenarios, plan_execution,
                                      run_scenarios, variant_from_file)
from lucepatch.workspace import Workspace


class Backend(Protocol):
    """Where the runs run when not here: handed in by the caller (k8s/incluster.ClusterBackend runs
    them as Jobs on a HAMi node, or re-reads their pod logs), so verify stays below the cluster
    code. Runs under a backend spend a fixed number of runs (no sequential stop across pods)."""

    def check(self) -> None:
        """Refuse before anything is built (no cluster, no image)."""

    def driver(self) -> DriverChoice:
        """The driver the runs will meet (the node's)."""

    def run(self, repros: list[Reproducer], scenario_filter: list[str] | None, variants: list[Variant],
            runs: int) -> tuple[list, Execution, dict]:
        """(run records, how they ran, what the evidence records of the backend)."""


@dataclass
class VerifyRequest:
    workspace: Workspace
    target: Target
    reproducers: list[Reproducer]
    source: Path | None = None
    driver: str = "auto"  # auto | real | fake
    runs: int | None = None  # the maximum per variant and scenario (default: the reproducers')
    fixed: bool = False  # every scenario runs `runs` times (else the sequential rule, lucepatch.verify.rules)
    scenarios: list[str] = field(default_factory=list)
    lib: Path | None = None  # patched bytes given, nothing built
    baseline_lib: Path | None = None
    baseline_ref: str | None = None  # ref-vs-ref
    patched_ref: str | None = None
    jobs: int | None = None
    backend: Backend | None = None  # runs elsewhere (k8s/incluster.ClusterBackend); None: here
    evidence: Path | None = None  # where the caller will write the evidence: checked before anything runs

    @property
    def artifact(self) -> str:
        return self.reproducers[0].artifact


def default_target(ws: Workspace) -> Target:
    """The target `verify --all` takes without --target: the one the workspace's reproducers are
    written for (lines share their family's reproducers, so the family's first target, hami-core,
    not one of its lines), else the workspace's only target; UsageError when that is ambiguous."""
    families = sorted({r.target for r in list_reproducers(ws)} & set(list_targets(ws)))
    if len(families) == 1:
        return load_target(ws, families[0])
    if not families:
        return load_target(ws, None)  # the only target, or "name a TARGET" with the list
    raise UsageError(f"name a TARGET (--target): the reproducers of workspace {ws.path} are written for "
                     f"{', '.join(families)}")


def select(ws: Workspace, *, target: str | None, reproducers: list[str], run_all: bool) -> tuple[Target, list[Reproducer]]:
    """The target and reproducers a verify names (`--reproducer R...` or `--all --target T`)."""
    if run_all and reproducers:
        raise UsageError("give --reproducer or --all, not both")
    if not run_all and not reproducers:
        raise UsageError("name a reproducer (--reproducer async-sched) or pass --all")
    if run_all:
        if target is None:
            t = default_target(ws)
        else:
            t = load_target(ws, target)
        repros = [r for r in list_reproducers(ws) if r.target in (t.name, t.family)]  # every line shares them
    else:
        repros = [load_reproducer(ws, n) for n in reproducers]
        t = load_target(ws, target or repros[0].target)
    if not repros:
        raise UsageError(f"no reproducer targets {t.name} in workspace {ws.path}")
    if len({r.artifact for r in repros}) != 1 or any(r.target not in (t.name, t.family) for r in repros):
        raise UsageError("the chosen reproducers need different targets or artifacts; verify them separately")
    return t, repros


def artifact_variant(name: str, build, artifact: str, target: Target, provenance: dict) -> Variant:
    """The reproducer's declared artifact out of one build (a BuildResult): the one place a variant's
    library is picked, so verify, ci, retire and bisect never run a different file of the build."""
    if artifact not in build.artifacts:
        raise UsageError(f"the reproducers need artifact {artifact!r}, which {target.name}'s build does not "
                         f"produce (it has {', '.join(build.artifacts)}); fix [build.artifacts] in {target.toml_path}")
    return Variant(name, build.artifacts[artifact], provenance)


@dataclass(frozen=True)
class VariantSpec:
    """One build beyond the two verify makes: `patches` (names, in series order) applied on `ref`
    (default: the pinned base), built under `name` (what the logs and reports call it)."""
    name: str
    patches: tuple[str, ...]
    ref: str | None = None
    coverage: bool = False


def build_variants(target: Target, source: Path, cache: Path, artifact: str, *,
                   baseline_ref: str | None = None, patched_ref: str | None = None,
                   specs: list[VariantSpec] | None = None, between=None) -> list[Variant]:
    """The baseline (pinned base + Build-Only patches) and patched (whole series) builds — or, in
    ref-vs-ref mode, upstream at each ref plus Build-Only — each giving the reproducer's declared
    artifact. The one place variants are built (verify, ci, the API, retire's add-one and
    leave-one-out builds through `specs`, the coverage map). Every build is logged under its own
    name: in ref-vs-ref mode "baseline (REF)" and "patched (REF)". `between`: called after each build
    (verify refuses there as soon as the driver probe beside the builds has failed)."""
    if specs is not None:
        by_name = {p.name: p for p in target.patches}
        out = []
        for spec in specs:
            unknown = [n for n in spec.patches if n not in by_name]
            if unknown:
                raise UsageError(f"no patch {', '.join(unknown)} in {target.name}'s series")
            b = build_variant(target, source, "patched", cache, base=spec.ref, patches=[by_name[n] for n in spec.patches],
                              label=spec.name, coverage=spec.coverage)
            prov = {"from": "series", "commit": b.commit, "base": b.base, "tree": b.tree, "patches": b.patches,
                    "build_key": b.key, "recipe": b.recipe, "name": spec.name}
            if b.coverage:
                prov["coverage"] = b.coverage
            if b.carried:
                prov["carried"] = b.carried
            out.append(artifact_variant(spec.name, b, artifact, target, prov))
        return out
    out = []
    for name in ("baseline", "patched"):
        if between is not None and out:
            between()
        ref = baseline_ref if name == "baseline" else patched_ref
        if ref:  # named by its flag in an error, not as the target's base commit
            git.resolve_commit(source, ref, what=f"--{name}-ref", upstream=target.upstream_urls)
            b = build_variant(target, source, "baseline", cache, base=ref, label=f"{name} ({ref})")
            prov = {"from": "ref", "ref": ref, "commit": b.commit, "base": b.base, "tree": b.tree, "patches": b.patches,
                    "recipe": b.recipe}
        else:
            b = build_variant(target, source, name, cache)
            prov = {"from": "series", "commit": b.commit, "base": b.base, "tree": b.tree, "patches": b.patches,
                    "build_key": b.key, "recipe": b.recipe}
        if b.carried:  # Build-Only patches carried another way at this ref (builders/build_only.py)
            prov["carried"] = b.carried
        out.append(artifact_variant(name, b, artifact, target, prov))
    return out


def rule_for(req: VerifyRequest):
    """The rule the runs are spent under: fixed with --fixed and under a backend, else sequential."""
    n = req.runs or max(r.default_runs for r in req.reproducers)
    return FixedRule(n) if req.fixed or req.backend is not None else SequentialRule(n)


def check_request(req: VerifyRequest) -> None:
    """Everything a verify can refuse from its request alone, before anything is built or run."""
    if bool(req.lib) != bool(req.baseline_lib):
        raise UsageError("--lib and --baseline-lib go together")
    if bool(req.baseline_ref) != bool(req.patched_ref):
        raise UsageError("--baseline-ref and --patched-ref go together")
    if req.lib and req.baseline_ref:
        raise UsageError("--lib/--baseline-lib and --baseline-ref/--patched-ref exclude each other")
    check_scenarios(req.reproducers, req.scenarios)
    rule = rule_for(req)
    if rule.name == "sequential" and rule.max_runs < rule.min_runs_for_proof():
        # the sequential rule spends runs only towards a verdict: runs that can never prove are refused up
        # front (--fixed measures any number of runs, with the same hint in its verdicts)
        given = "" if req.runs else f"the reproducers' default_runs is {rule.max_runs}: "
        raise UsageError(f"{given}{proof_hint(rule)}; or pass --fixed --runs {rule.max_runs} to measure "
                         f"{rule.max_runs} run(s) per variant without a possible proof")
    if req.backend is None:
        require_driver(req.driver)
    if req.evidence is not None:
        check_destination(req.evidence)


def run_verify(req: VerifyRequest, cache: Path, *, progress=None) -> Evidence:
    """Build (or take) both variants, run every selected scenario, return the typed evidence.

    The driver probe runs beside the builds (it is a process doing cuInit on a GPU machine); with
    the real driver a helper holds it open during the runs (lucepatch.verify.driver.hold_driver)."""
    say = progress or report.progress
    check_request(req)
    if not req.baseline_ref and req.target.regression_guard:
        # what upstream fixed at this base runs as a guard here (target.toml [regression_guard])
        req = replace(req, reproducers=with_declared_guards(req.reproducers, req.target.regression_guard))
        say(f"{', '.join(req.target.regression_guard)}: regression guard(s) at {req.target.name}'s base "
            "(target.toml [regression_guard])")
    backend = req.backend
    phases: dict[str, float] = {}
    t0 = time.monotonic()
    rule = rule_for(req)
    n = rule.max_runs
    # the rule's exact error bounds: a closed form, milliseconds at any --runs (lucepatch.verify.bounds)
    pause("verify-bounds")
    bounds = error_bounds(rule)
    # beside the builds: the evidence schema's validator, which the end of a run would otherwise wait for
    # (a daemon thread: nothing may hold the exit of an interrupted verify)
    threading.Thread(target=schema_validator, name="lucepatch-schema", daemon=True).start()
    with ThreadPoolExecutor(max_workers=1) as probe:
        if backend is not None:
            backend.check()
            drv_f, drv = None, backend.driver()
        else:
            drv_f = probe.submit(choose_driver, req.driver, cache)
        if req.lib:
            variants = [variant_from_file("baseline", req.baseline_lib), variant_from_file("patched", req.lib)]
            upstream_base = None
        else:
            if req.source is None:
                raise EnvironmentMissing(f"no upstream checkout for {req.target.name}: pass --source PATH")
            git.open_repo(req.source)
            variants = build_variants(req.target, req.source, cache, req.artifact,
                                      baseline_ref=req.baseline_ref, patched_ref=req.patched_ref,
                                      between=lambda: _probe_failed(drv_f))
            upstream_base = variants[0].provenance.get("base")
            fixed = fixed_at(req.source, req.reproducers, upstream_base, say)
            req = replace(req, reproducers=with_upstream_fixes(req.reproducers, fixed))
        phases["build_s"] = time.monotonic() - t0
        if drv_f is not None:
            drv = drv_f.result()
        phases["driver_probe_s"] = time.monotonic() - t0
    say(f"workspace {req.workspace.describe()}; driver {drv.chosen} ({drv.note or drv.requested})")
    extra = {}
    spend = None
    rates: list = []
    # what the target says does not apply at its base (not at other refs, where it may)
    declared = {} if req.baseline_ref else dict(req.target.not_applicable)
    run_repros, run_filter = split_not_applicable(req.reproducers, req.scenarios or None, declared)
    for key, why in declared.items():
        say(f"{key}: not applicable at {req.target.name}'s base, not run ({why})")
    t1 = time.monotonic()
    if backend is not None:
        records, ex, extra["cluster"] = backend.run(run_repros, run_filter, variants, n)
        rates = rate_scenarios.not_measured(
            [(r, s) for r in run_repros for s in r.scenarios if not run_filter or s.name in run_filter
             or f"{r.name}:{s.name}" in run_filter],
            "a rate is measured one run at a time on the node itself, not in parallel --in-cluster verify pods")
    else:
        ex = plan_execution(req.jobs, workloads=any(r.is_workload for r in run_repros))
        say(f"execution: {ex.mode}" + (f", {ex.jobs} jobs" if ex.mode == "parallel" else "") + f" ({ex.why})")
        with hold_driver(drv) as held:
            runs = run_scenarios(run_repros, variants, rule, drv, cache, run_filter, execution=ex)
        ex.driver_held = held.describe()
        records, spend, rates = runs.records, runs.spend, runs.rates
    phases["runs_s"] = time.monotonic() - t1
    t2 = time.monotonic()
    policy = RunPolicy.from_json({**rule.policy(), "bounds": bounds})
    ev = build_evidence(req.target, req.reproducers, variants, records, drv, n, req.workspace.to_json(),
                        upstream_base, execution=ex, policy=policy, spend=spend, rule=rule,
                        not_applicable=declared)
    rate_scenarios.attach(ev, rates, run_repros)
    ev.extra.update(extra)
    attach_fingerprints(ev, records)
    phases["evidence_s"] = time.monotonic() - t2
    ex.phases = phases
    ev.execution["phases"] = {k: round(v, 3) for k, v in phases.items()}
    return ev


def fixed_at(source: Path, repros: list[Reproducer], base: str | None, say) -> dict[str, str]:
    """{reproducer:scenario: why} of the scenarios whose `fixed_upstream` commit is the baseline's
    upstream commit or one of its ancestors: upstream's fix is in the baseline, so the scenario
    guards it there (verdict.with_upstream_fixes). A commit the checkout lacks is not assumed in
    it: the scenario stays a checked one, and the progress line says so."""
    out: dict[str, str] = {}
    for r in repros:
        for s in r.scenarios:
            if not s.fixed_upstream or s.control or not base:
                continue
            key, full = f"{r.name}:{s.name}", git.try_resolve(source, s.fixed_upstream)
            if full is None:
                say(f"{key}: fixed_upstream {s.fixed_upstream} is not in {source}: judged as a fix, not a guard "
                    "(fetch upstream to read it)")
            elif git.is_ancestor(source, full, base):
                at = "the baseline's commit" if full == base else f"an ancestor of the baseline's {base[:12]}"
                out[key] = f"fixed upstream by {full[:12]}, {at}"
    if out:
        say(f"{', '.join(out)}: regression guard(s): fixed upstream at or before the baseline's {base[:12]} "
            "(reproducer.toml fixed_upstream)")
    return out


def _probe_failed(drv_f) -> None:
    """Raise the driver probe's refusal (--driver real, no usable GPU) once it is known."""
    if drv_f is not None and drv_f.done() and drv_f.exception() is not None:
        drv_f.result()


def attach_fingerprints(ev: Evidence, records) -> None:
    """Name the known upstream issue each scenario's baseline failure matches (crash fingerprints):
    from the interposer's log lines and the call path the preloaded reporter recorded. A crash that
    only shows the bug family's log line is recorded as such (`ambiguous`), never as one issue."""
    for s in ev.scenarios:
        failing = [r for r in records if r.scenario == s.scenario and r.variant == "baseline" and r.failed]
        for r in failing[:1]:
            log = "\n".join([*(h["line"] for h in r.hami_log), r.first_error, r.log_tail])
            fp = match_fingerprint(r.signal, log, frames=r.backtrace or None)
            if fp and (fp.get("issue") or fp.get("ambiguous")):
                s.fingerprint = {k: fp[k] for k in ("issue", "url", "summary", "score", "ambiguous", "related",
                                                    "fixed_by", "why") if fp.get(k)}
