"""Gate orchestration: the cache key over every input, the steps in order, the exit code."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from lucepatch import __version__, git
from lucepatch.errors import EXIT_CHECK_FAILED, EnvironmentMissing, UsageError, from_exception
from lucepatch.services.gate.result import FAIL, SKIP, WARN, Step, TargetResult
from lucepatch.services.gate.steps import check_on, named_scenarios, step_build_and_verify, step_lint, step_probes
from lucepatch.target import Target, list_targets, load_target
from lucepatch.verify.driver import driver_identity
from lucepatch.verify.reproducer import list_reproducers
from lucepatch.workspace import find_source, resolve_cache, resolve_source, source_hint


def cache_key(t: Target, ws, src: Path, upstream_head: str | None, driver_ident: dict, runs: int) -> str:
    repros = {r.name: r.hash for r in list_reproducers(ws)}
    named = named_scenarios(t)
    doc = {
        "lucepatch": __version__, "target": t.name, "series_hash": t.series_hash,
        "base": git.resolve_commit(src, t.base, what=f"base commit of {t.name}", upstream=t.upstream_urls),
        "head": git.try_resolve(src, upstream_head) if upstream_head else None,
        "reproducers": {n: repros.get(n) for n in sorted(named)}, "named": {k: v for k, v in sorted(named.items())},
        "probes": hashlib.sha256((t.dir / "probes.toml").read_bytes()).hexdigest() if (t.dir / "probes.toml").is_file() else None,
        "driver": driver_ident, "runs": runs,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def _timed(fn):
    t0 = time.monotonic()
    try:
        step = fn()
    except Exception as exc:  # an environment failure fails this step, not the whole gate; a bug still raises
        err = from_exception(exc)
        if err is None:
            raise
        step = Step(getattr(fn, "__name__", "step"), FAIL, str(err))
    step.seconds = time.monotonic() - t0
    return step


def gate_target(ws, t: Target, src: Path, cache: Path, *, upstream_head: str | None = None, driver: str = "auto",
                runs: int = 5, use_cache: bool = True, evidence_dir: Path | None = None, probes: bool = True
                ) -> TargetResult:
    """The CI gate for one target (lint, check, canary, build, verify, probes); a TargetResult
    (gate, canary, steps). Reports: junit_xml / markdown. Paths: `~` expanded."""
    src = Path(src).expanduser()
    evidence_dir = Path(evidence_dir).expanduser() if evidence_dir else None
    git.open_repo(src)
    key = cache_key(t, ws, src, upstream_head, driver_identity(driver, cache), runs)
    store = cache / "ci" / f"{t.name}-{key}.json"
    if use_cache and store.is_file():
        return TargetResult.from_json(json.loads(store.read_text()))
    res = TargetResult(t.name, key)
    res.steps.append(_timed(lambda: step_lint(ws, t)))
    check = _timed(lambda: check_on(t, src, cache, t.base, "check"))
    check.name = "check"
    res.steps.append(check)
    if upstream_head:
        def canary():
            ref = git.try_resolve(src, upstream_head)
            if ref is None:
                return Step("canary", FAIL, f"--upstream-head {upstream_head} is not in {src}; fetch it first", gate=False)
            return check_on(t, src, cache, ref, "canary")
        c = _timed(canary)
        c.name, c.gate = "canary", False
        if c.status == FAIL:
            c.status = WARN if c.status == FAIL else c.status
            c.detail = "upstream HEAD breaks the series: " + c.detail
        res.steps.append(c)
    if check.status == FAIL:
        res.steps += [Step("build", SKIP, "check failed"), Step("verify", SKIP, "check failed")]
    else:
        t0 = time.monotonic()
        try:
            steps, res.evidence = step_build_and_verify(ws, t, src, cache, driver, runs, evidence_dir)
        except Exception as exc:
            err = from_exception(exc)
            if err is None:
                raise
            steps = [Step("build", FAIL, str(err), time.monotonic() - t0)]
        res.steps += steps
        if probes:
            res.steps.append(_timed(lambda: step_probes(t, src, cache)))
            res.steps[-1].name = "probes"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(res.to_json(), indent=2) + "\n")
    return res


def find_checkout(source: str | None, target: Target) -> tuple[Path | None, str]:
    """The target's upstream checkout (the one given, else its repository's variable, which serves
    every line of it: $LUCEPATCH_SRC_HAMI_CORE for hami-core-v2.5 too, a line's own variable
    overriding it) when it is a git checkout; otherwise (None, why) — `ci --all` then reports the
    target as skipped."""
    if source:
        path, what = Path(source).expanduser(), "--source"
    else:
        path, what = find_source(target.name, target.family)
    if path is None:
        return None, f"no upstream checkout: set {source_hint(target.name, target.family)} (or pass --source with one target)"
    try:
        git.open_repo(path, what=what)
    except UsageError as exc:
        return None, str(exc)
    return path, ""


def missing_base(target: Target, src: Path) -> str | None:
    """One line when the checkout lacks the target's pinned base (a line's base is often on a branch
    or tag a clone did not fetch), naming the fetch that brings it; None when it is there."""
    try:
        git.resolve_commit(src, target.base, what=f"base commit of {target.name}", upstream=target.upstream_urls)
    except EnvironmentMissing as exc:
        return str(exc)
    return None


def failed_target(t: Target, step: str, why: str) -> TargetResult:
    r = TargetResult(t.name, "")
    r.steps = [Step(step, FAIL, why)]
    return r


def ungated_lines(results: list[TargetResult], targets: list[Target]) -> tuple[list[TargetResult], list[TargetResult]]:
    """`ci --all`: a target skipped for want of a checkout while another target of its family (the
    same upstream repository) is gated fails instead — a line must not go ungated silently because
    only the family's checkout was thought of (or only the line's). Returns (results, the ones failed here)."""
    family = {t.name: t.family for t in targets}
    gated = {family[r.target] for r in results if not r.skipped}
    out, failed = [], []
    for r in results:
        if r.skipped and family[r.target] in gated:
            others = [x.target for x in results if not x.skipped and family[x.target] == family[r.target]]
            r = TargetResult(r.target, r.key, steps=[Step("checkout", FAIL,
                             f"{r.target} would go ungated while {', '.join(others)} of the same repository is gated: "
                             f"{r.skipped}")])
            failed.append(r)
        out.append(r)
    return out, failed


def skipped_target(t: Target, why: str) -> TargetResult:
    r = TargetResult(t.name, "", skipped=why)
    r.steps = [Step("checkout", SKIP, why)]
    return r


def exit_code(results: list[TargetResult], strict: bool) -> int:
    """0 when every gated target's pinned-base gate passed and at least one target was gated; with
    strict, also every canary passed, no target was skipped for want of a checkout and no scenario
    was skipped (one this machine cannot run, or not applicable at a line's base)."""
    gated = [r for r in results if not r.skipped]
    skipped_cases = any(c.get("status") == SKIP for r in gated for s in r.steps for c in s.cases)
    failed = (not gated or any(r.gate == FAIL for r in gated)
              or (strict and (any(r.canary in (WARN, FAIL) for r in gated) or len(gated) < len(results)
                              or skipped_cases)))
    return EXIT_CHECK_FAILED if failed else 0


def gate_all(ws, target: str | None, cache_dir: str | None, *, all_targets: bool = False, source: str | None = None,
             strict: bool = False, upstream_head: str | None = None, driver: str = "auto", runs: int = 5,
             use_cache: bool = True, evidence_dir: Path | None = None, probes: bool = True,
             progress=lambda _line: None) -> tuple[list[str], list[TargetResult], int]:
    """`ci [TARGET | --all]`: each target gated (`gate_target`), or reported skipped when it has no
    checkout (one named target: its checkout is required, exit 3), or failed when its checkout
    lacks its base (`--all`; one named target: exit 3) or when it is a line left ungated while its
    family is gated. `cache_dir`: --cache-dir as given (resolved once the arguments are checked).
    Returns (the target names, their results, the exit code)."""
    if all_targets and target:
        raise UsageError("give a TARGET or --all, not both")
    names = list_targets(ws) if all_targets else [load_target(ws, target).name]
    if not names:
        raise UsageError(f"workspace {ws.path} has no targets")
    if source and len(names) > 1:
        raise UsageError("--source names one checkout; with --all set LUCEPATCH_SRC_<TARGET> per upstream repository "
                         "(LUCEPATCH_SRC_HAMI_CORE serves hami-core and its lines)")
    cache = resolve_cache(cache_dir)
    results, targets = [], [load_target(ws, n) for n in names]
    progress(f"workspace {ws.describe()}; targets {', '.join(names)}")
    for t in targets:
        src, why = find_checkout(source, t)
        if src is None:
            if not all_targets:
                resolve_source(source, t.name, family=t.family)  # one named target: its checkout is required (exit 3)
            results.append(skipped_target(t, why))
            progress(f"{t.name}: skipped — {why}" + ("" if strict else " (not gating; --strict fails on it)"))
            continue
        lacks = missing_base(t, src)
        if lacks and not all_targets:
            raise EnvironmentMissing(lacks)  # one named target: something missing (exit 3), as every verb says it
        if lacks:  # --all: the checkout is there but cannot gate this target: a failure, never a skip
            results.append(failed_target(t, "checkout", lacks))
            progress(f"{t.name}: {lacks}")
            continue
        progress(f"{t.name}: gating with {src}")
        results.append(gate_target(ws, t, src, cache, upstream_head=upstream_head, driver=driver, runs=runs,
                                   use_cache=use_cache, evidence_dir=evidence_dir, probes=probes))
    results, ungated = ungated_lines(results, targets)
    for r in ungated:
        progress(f"{r.target}: {r.steps[0].detail}")
    return names, results, exit_code(results, strict)
