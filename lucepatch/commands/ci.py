"""`lucepatch ci [TARGET|--all]`: the gate.

Per target: lint -> check on the pinned base -> canary check on --upstream-head REF -> build ->
verify every scenario the series names (`Reproducer:` trailers) -> probes (when the target has
probes.toml). Reports: JUnit XML (--junit), JSON (--json), markdown appended to
$GITHUB_STEP_SUMMARY when set (and --markdown FILE).

Exit 0 only when every target's pinned-base gate passes; a failing canary warns (exit 0) unless
--strict. Results are cached under <cache>/ci/<key>.json, key = sha256 of every input (series and
target.toml bytes, reproducer hashes, upstream commits, driver kind and version, runs, lucepatch
version); --no-cache re-runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import click

from lucepatch import __version__, git, report
from lucepatch.commands._common import cache as cache_dir
from lucepatch.commands._common import json_option, workspace
from lucepatch.errors import EXIT_CHECK_FAILED, LucepatchError, UsageError
from lucepatch.target import Target, list_targets, load_target

PASS, FAIL, SKIP, WARN = "pass", "fail", "skip", "warn"


@dataclass
class Step:
    name: str
    status: str
    detail: str = ""
    seconds: float = 0.0
    gate: bool = True  # part of the pinned-base gate (canary is not)
    cases: list[dict] = field(default_factory=list)  # sub-results (scenarios, probes)

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail, "seconds": round(self.seconds, 2),
                "gate": self.gate, "cases": self.cases}


@dataclass
class TargetResult:
    target: str
    key: str
    steps: list[Step] = field(default_factory=list)
    cached: bool = False
    evidence: str | None = None

    @property
    def gate(self) -> str:
        return FAIL if any(s.gate and s.status == FAIL for s in self.steps) else PASS

    @property
    def canary(self) -> str:
        c = [s for s in self.steps if s.name == "canary"]
        return c[0].status if c else SKIP

    def to_json(self) -> dict:
        return {"target": self.target, "key": self.key, "cached": self.cached, "gate": self.gate,
                "canary": self.canary, "evidence": self.evidence, "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, d: dict) -> "TargetResult":
        r = cls(d["target"], d["key"], cached=True, evidence=d.get("evidence"))
        r.steps = [Step(s["name"], s["status"], s["detail"], s["seconds"], s["gate"], s["cases"]) for s in d["steps"]]
        return r


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


def _driver_identity(driver: str, cache: Path) -> dict:
    """Driver kind and version for the cache key (what the runs will use)."""
    from lucepatch.verify.driver import choose_driver

    drv = choose_driver(driver, cache)
    ident = {"chosen": drv.chosen}
    if drv.chosen == "fake" and drv.fake_dir is not None:
        lib = Path(drv.fake_dir) / "libcuda.so.1"
        ident["libcuda"] = hashlib.sha256(lib.read_bytes()).hexdigest() if lib.is_file() else str(drv.fake_dir)
    else:
        import shutil
        import subprocess

        smi = shutil.which("nvidia-smi")
        if smi:
            ident["driver"] = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                             capture_output=True, text=True).stdout.strip()
    return ident


def cache_key(t: Target, ws, src: Path, upstream_head: str | None, driver_ident: dict, runs: int) -> str:
    from lucepatch.verify.reproducer import list_reproducers

    repros = {r.name: r.hash for r in list_reproducers(ws)}
    named = named_scenarios(t)
    doc = {
        "lucepatch": __version__, "target": t.name, "series_hash": t.series_hash,
        "base": git.resolve_commit(src, t.base, what=f"base commit of {t.name}"),
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
    except LucepatchError as exc:
        step = Step(getattr(fn, "__name__", "step"), FAIL, str(exc))
    step.seconds = time.monotonic() - t0
    return step


def step_lint(ws, t: Target) -> Step:
    try:
        from lucepatch.commands.lint import lint_target
    except ImportError:
        return Step("lint", SKIP, "lucepatch lint is not available in this version")
    findings = lint_target(ws, t.name, pending_days=90, now=time.time())
    errors = [f for f in findings if f.level == "error"]
    warns = [f for f in findings if f.level != "error"]
    cases = [{"name": f"{f.patch or t.name}: {f.check}", "status": FAIL if f.level == "error" else WARN,
              "detail": f.message} for f in findings]
    if errors:
        return Step("lint", FAIL, f"{len(errors)} error(s): {errors[0].patch}: {errors[0].message}", cases=cases)
    return Step("lint", PASS, f"{len(warns)} warning(s)" if warns else "clean", cases=cases)


def _check_on(t: Target, src: Path, cache: Path, ref: str, name: str) -> Step:
    from lucepatch.engine.apply import WorkArea, apply_series

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
    from lucepatch.verify.driver import choose_driver
    from lucepatch.verify.evidence import write_evidence
    from lucepatch.verify.reproducer import list_reproducers
    from lucepatch.verify.service import VerifyRequest, build_variants, run_verify

    if not t.build:
        return [Step("build", SKIP, "target has no [build] table"), Step("verify", SKIP, "nothing built")], None
    t0 = time.monotonic()
    named = named_scenarios(t)
    have = {r.name: r for r in list_reproducers(ws)}
    artifacts = {have[n].artifact for n in named if n in have} or set(t.build.get("artifacts", {}))
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
        if not scen:
            continue
        v = variants[r.artifact]
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
            if s.control:
                st = PASS if s.verdict == "pass" else FAIL
            else:
                st = PASS if s.verdict == "proven" else FAIL
            detail = (f"{s.verdict}: baseline {s.baseline.failures}/{s.baseline.runs} failed, "
                      f"patched {s.patched.failures}/{s.patched.runs}")
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
    kind = docs[0].driver_kind if docs else choose_driver(driver, cache).chosen
    detail = f"{len(cases) - len(failed)}/{len(cases)} scenario(s) as required, driver {kind}, {runs} run(s) each"
    if failed:
        detail += f"; first failure {failed[0]['name']}: {failed[0]['detail']}"
    return [build, Step("verify", FAIL if failed else PASS, detail, time.monotonic() - t0, cases=cases)], evidence_path


def step_probes(t: Target, src: Path, cache: Path) -> Step:
    if not (t.dir / "probes.toml").is_file():
        return Step("probes", SKIP, "no probes.toml")
    from lucepatch.builders.probe import run_probes

    run = run_probes(t, src, None, "patched", cache, None)
    cases = [{"name": f"{r.spec.fix} {r.spec.name}", "status": PASS if r.as_declared else FAIL, "detail": r.detail[:200]}
             for r in run.results]
    return Step("probes", PASS if run.ok else FAIL, f"{sum(c['status'] == PASS for c in cases)}/{len(cases)} proven",
                cases=cases)


def gate_target(ws, t: Target, src: Path, cache: Path, *, upstream_head: str | None, driver: str, runs: int,
                use_cache: bool, evidence_dir: Path | None, probes: bool = True) -> TargetResult:
    git.open_repo(src)
    key = cache_key(t, ws, src, upstream_head, _driver_identity(driver, cache), runs)
    store = cache / "ci" / f"{t.name}-{key}.json"
    if use_cache and store.is_file():
        return TargetResult.from_json(json.loads(store.read_text()))
    res = TargetResult(t.name, key)
    res.steps.append(_timed(lambda: step_lint(ws, t)))
    check = _timed(lambda: _check_on(t, src, cache, t.base, "check"))
    check.name = "check"
    res.steps.append(check)
    if upstream_head:
        def canary():
            ref = git.try_resolve(src, upstream_head)
            if ref is None:
                return Step("canary", FAIL, f"--upstream-head {upstream_head} is not in {src}; fetch it first", gate=False)
            return _check_on(t, src, cache, ref, "canary")
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
        except LucepatchError as exc:
            steps = [Step("build", FAIL, str(exc), time.monotonic() - t0)]
        res.steps += steps
        if probes:
            res.steps.append(_timed(lambda: step_probes(t, src, cache)))
            res.steps[-1].name = "probes"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(res.to_json(), indent=2) + "\n")
    return res


# ---- reports --------------------------------------------------------------------------------------

def junit_xml(results: list[TargetResult], strict: bool) -> str:
    suites = ET.Element("testsuites", name="lucepatch ci")
    total = fails = skips = 0
    for r in results:
        suite = ET.SubElement(suites, "testsuite", name=f"lucepatch.{r.target}")
        n = f = s = 0
        for step in r.steps:
            items = step.cases if step.name in ("verify", "probes") and step.cases else [
                {"name": step.name, "status": step.status, "detail": step.detail}]
            for c in items:
                n += 1
                name = c["name"] if items is step.cases else step.name
                tc = ET.SubElement(suite, "testcase", classname=f"{r.target}.{step.name}", name=name,
                                   time=f"{step.seconds / max(len(items), 1):.3f}")
                failing = c["status"] == FAIL or (c["status"] == WARN and step.name == "canary" and strict)
                if failing:
                    f += 1
                    ET.SubElement(tc, "failure", message=c.get("detail", "")[:500], type=step.name).text = c.get("detail", "")
                elif c["status"] == SKIP:
                    s += 1
                    ET.SubElement(tc, "skipped", message=c.get("detail", ""))
                elif c["status"] == WARN:
                    ET.SubElement(tc, "system-out").text = "warning: " + c.get("detail", "")
        suite.set("tests", str(n))
        suite.set("failures", str(f))
        suite.set("errors", "0")
        suite.set("skipped", str(s))
        total, fails, skips = total + n, fails + f, skips + s
    suites.set("tests", str(total))
    suites.set("failures", str(fails))
    suites.set("errors", "0")
    suites.set("skipped", str(skips))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_ICON = {PASS: "✅", FAIL: "❌", SKIP: "⏭️", WARN: "⚠️"}


def markdown(results: list[TargetResult], exit_code: int) -> str:
    lines = [f"## lucepatch ci — {'passed' if exit_code == 0 else 'FAILED'}", ""]
    for r in results:
        lines += [f"### {r.target}: gate {r.gate}, canary {r.canary}{' (cached)' if r.cached else ''}", "",
                  "| step | status | detail |", "|---|---|---|"]
        for s in r.steps:
            lines.append(f"| {s.name} | {_ICON.get(s.status, '')} {s.status} | {s.detail.replace('|', '/')} |")
            if s.name == "verify":
                for c in s.cases:
                    lines.append(f"| &nbsp;&nbsp;{c['name']} | {_ICON.get(c['status'], '')} {c['status']} | "
                                 f"{c['detail'].replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


@click.command("ci")
@click.argument("target", required=False)
@click.option("--all", "all_targets", is_flag=True, help="Every target of the workspace.")
@click.option("--source", type=click.Path(), default=None,
              help="Upstream checkout (one target only; otherwise $LUCEPATCH_SRC_<TARGET> per target).")
@click.option("--upstream-head", default=None, metavar="REF", help="Canary: also check the series on this upstream ref.")
@click.option("--strict", is_flag=True, help="A failing canary fails the gate.")
@click.option("--driver", type=click.Choice(["auto", "real", "fake"]), default="auto", show_default=True)
@click.option("--runs", type=click.IntRange(1, 10000), default=5, show_default=True, help="Runs per variant and scenario.")
@click.option("--no-cache", is_flag=True, help="Re-run everything even when no input changed.")
@click.option("--no-probes", is_flag=True, help="Skip compile/link probes.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None, help="Write JUnit XML here.")
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False), default=None, help="Write the markdown summary here.")
@click.option("--evidence-dir", type=click.Path(file_okay=False), default=None, help="Write verify evidence here.")
@json_option
@click.pass_context
def command(ctx, target, all_targets, source, upstream_head, strict, driver, runs, no_cache, no_probes, junit_path,
            md_path, evidence_dir, as_json):
    """The gate: lint, check on the pinned base, canary on --upstream-head, build, verify, probes."""
    from lucepatch.commands._common import require_source

    ws = workspace(ctx)
    if all_targets and target:
        raise UsageError("give a TARGET or --all, not both")
    names = list_targets(ws) if all_targets else [load_target(ws, target).name]
    if not names:
        raise UsageError(f"workspace {ws.path} has no targets")
    if source and len(names) > 1:
        raise UsageError("--source names one checkout; with --all set LUCEPATCH_SRC_<TARGET> per target")
    c = cache_dir(ctx)
    results = []
    report.progress(f"workspace {ws.describe()}; targets {', '.join(names)}")
    for n in names:
        t = load_target(ws, n)
        src = require_source(source, t.name)
        r = gate_target(ws, t, src, c, upstream_head=upstream_head, driver=driver, runs=runs,
                        use_cache=not no_cache, evidence_dir=Path(evidence_dir) if evidence_dir else None,
                        probes=not no_probes)
        results.append(r)
        for s in r.steps:
            report.progress(f"  {t.name} {s.name}: {s.status} — {s.detail}")
        report.progress(f"{t.name}: gate {r.gate}, canary {r.canary}{' (cached: no input changed)' if r.cached else ''}")
    failed = any(r.gate == FAIL for r in results) or (strict and any(r.canary in (WARN, FAIL) for r in results))
    code = EXIT_CHECK_FAILED if failed else 0
    if junit_path:
        Path(junit_path).parent.mkdir(parents=True, exist_ok=True)
        Path(junit_path).write_text(junit_xml(results, strict))
    md = markdown(results, code)
    if md_path:
        Path(md_path).write_text(md)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(md)
    if as_json:
        report.emit_json("ci", {"workspace": ws.to_json(), "exit_code": code, "strict": strict,
                                "upstream_head": upstream_head, "targets": [r.to_json() for r in results]})
    for r in results:
        if r.canary == WARN:
            report.progress(f"warning: {r.target}: the canary on {upstream_head} failed"
                            + ("" if strict else " (not gating; pass --strict to gate on it)"))
    report.progress("ci: " + ("gate passed" if code == 0 else "gate FAILED"))
    return code
