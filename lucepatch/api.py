"""lucepatch as a library: the public Python surface for a CI system or a notebook.

The functions here are the ones the `lucepatch` commands call (they only add option parsing and
printing), so a program gets exactly what the CLI does: the same builds, the same runs, the same
typed evidence. Everything outside this module (and the types its functions return) is internal
and may change without notice. Errors are `lucepatch.errors.LucepatchError` subclasses with an
`exit_code` (UsageError 2, CheckFailed 1, EnvironmentMissing 3); see docs/api.md.

    from lucepatch import api
    ws = api.open_workspace("path/to/workspace")
    t = api.target(ws, "hami-core")
    src = api.source(t, "~/src/HAMi-core")
    cache = api.cache_dir()
    ev = api.verify(ws, t, ["async-sched"], source=src, cache=cache, driver="fake")
    ev.verdict, [s.verdict for s in ev.scenarios], ev.variants["patched"].artifact.sha256
"""

from __future__ import annotations

import time
from pathlib import Path

from lucepatch import git
from lucepatch.engine.apply import SeriesResult
from lucepatch.errors import CheckFailed, EnvironmentMissing, LucepatchError, UsageError
from lucepatch.lines.identity import Identity, identify
from lucepatch.node.report import NodeReport, load_node_report
from lucepatch.services import series as _series
from lucepatch.services.builds import build_native
from lucepatch.services.gate import gate_target
from lucepatch.services.lint import lint_target
from lucepatch.target import Target, list_targets, load_target
from lucepatch.verify import evidence as _evidence
from lucepatch.verify.evidence import Evidence
from lucepatch.verify.reproducer import list_reproducers
from lucepatch.workspace import Workspace, resolve_cache, resolve_source, resolve_workspace

__all__ = [
    "open_workspace", "cache_dir", "target", "source", "check", "apply", "rebase", "build", "build_variants",
    "reproducers", "verify", "retire", "write_evidence", "load_evidence", "write_pr", "gate", "lint",
    "identify_library", "node_report", "Identity", "NodeReport", "Workspace", "Target", "Evidence", "SeriesResult", "LucepatchError", "UsageError", "CheckFailed",
    "EnvironmentMissing",
]


# ---- where things are --------------------------------------------------------------------------

def _path(p: str | Path | None) -> Path | None:
    """A path as a caller wrote it: `~` expanded here, where it enters (a notebook's "~/src/HAMi-core")."""
    return Path(p).expanduser() if p is not None and str(p) != "" else None


def open_workspace(path: str | Path | None = None) -> Workspace:
    """The workspace (patches/, reproducers/): `path`, else $LUCEPATCH_WORKSPACE, the nearest
    ancestor holding lucepatch.toml, or the read-only copy packaged with lucepatch."""
    return resolve_workspace(path)


def cache_dir(path: str | Path | None = None) -> Path:
    """The cache for private clones, builds and runs: `path`, else $LUCEPATCH_CACHE, else
    $XDG_CACHE_HOME/lucepatch (created)."""
    return resolve_cache(path)


def target(ws: Workspace, name: str | None = None) -> Target:
    """A target of the workspace (the only one when `name` is None), its series parsed."""
    t = load_target(ws, name)
    _ = t.patches
    return t


def source(t: Target, path: str | Path | None = None) -> Path:
    """The upstream checkout of `t`: `path`, else $LUCEPATCH_SRC_<TARGET> (else, for a line of a
    series, $LUCEPATCH_SRC_<FAMILY>); checked to be the top of a git work tree. lucepatch only
    reads it, except `apply`, which switches its branch."""
    src = resolve_source(path, t.name, family=t.family)
    git.open_repo(src)
    return src


# ---- the series --------------------------------------------------------------------------------

def check(t: Target, src: Path, cache: Path, *, onto: str | None = None, fetch: bool = False) -> SeriesResult:
    """Per patch: applied / applied-3way / already-upstream / conflict on the pinned base (or
    `onto`), in a private repository; the checkout is not touched. A target's [[submodule]]
    sub-targets are checked too (`result.subs`; at their gitlinks in `onto` when given)."""
    return _series.check(t, src, cache, onto=onto, fetch=fetch)


def apply(t: Target, src: Path, cache: Path, *, partial: bool = False, force: bool = False, stash: bool = False,
          fetch: bool = False):
    """The series onto branch lucepatch/<target>/<version> of `src`; the checkout is switched only
    when every patch applied (or `partial`). Returns engine.onto.Applied (result, branch, switched)."""
    return _series.apply(t, src, cache, partial=partial, force=force, stash=stash, fetch=fetch)


def rebase(t: Target, src: Path, cache: Path, onto: str, *, dry_run: bool = False, fetch: bool = False,
           drop_superseded: bool = False, no_behaviour: bool = False) -> dict:
    """Carry the series to `onto` without a human: `dry_run` walks it all in a throwaway area;
    otherwise a rebase session walks until a conflict — which leaves the session open for
    `lucepatch rebase --status/--continue/--skip/--abort` — or to the end, and writes the workspace
    once. Returns the document `lucepatch rebase --json` prints (rows, conflicts, new version).
    With [[submodule]]s: refused (UsageError) when `onto` moves one; `dry_run` reports each
    sub-target at its pin there (`submodules`)."""
    from lucepatch.services import rebase as _rebase  # lazy: rebase sessions and the `needed` judge, 20 ms

    opts = _rebase.Options(drop_superseded=drop_superseded, no_behaviour=no_behaviour)
    started = _rebase.start(cache, t, src, onto, opts, dry_run=dry_run, fetch=fetch, quiet_subs=True)  # no tables
    out = started if isinstance(started, _rebase.Outcome) else _rebase.run(started)
    return out.doc


def lint(ws: Workspace, name: str | None = None, *, pending_days: int = 90) -> list:
    """Lint findings (lucepatch.services.lint.Finding: level, target, patch, check, message) of one target
    or, with no name, of every target."""
    names = [load_target(ws, name).name] if name else list_targets(ws)
    now = time.time()
    return [f for n in names for f in lint_target(ws, n, pending_days=pending_days, now=now)]


# ---- builds ------------------------------------------------------------------------------------

def build(t: Target, src: Path, cache: Path, variants=("patched",), *, jobs: int | None = None) -> list:
    """Native builds of the variants ("baseline", "patched"), cached by content and reproducible:
    each BuildResult has artifacts (path), sha256 and the recipe that rebuilds the same bytes."""
    return build_native(t, src, list(variants), cache, jobs=jobs)


def build_variants(t: Target, src: Path, cache: Path, artifact: str) -> list:
    """Baseline and patched builds as verify uses them: [Variant(name, lib, provenance)] holding
    the declared `artifact` (e.g. "libvgpu.so")."""
    from lucepatch.verify.service import build_variants as _build_variants  # lazy: verify's pipeline, 16 ms

    return _build_variants(t, src, cache, artifact)


# ---- proof -------------------------------------------------------------------------------------

def reproducers(ws: Workspace, names: list[str] | None = None, *, target_name: str | None = None):
    """(target, reproducers): the named ones, or with no names every reproducer of `target_name`."""
    from lucepatch.verify.service import select  # lazy: verify's pipeline, 16 ms

    return select(ws, target=target_name, reproducers=list(names or []), run_all=not names)


def verify(ws: Workspace, t: Target, reproducer_names: list[str] | None = None, *, source: Path | None = None,
           cache: Path, driver: str = "auto", runs: int | None = None, scenarios: list[str] | None = None,
           lib: Path | None = None, baseline_lib: Path | None = None, baseline_ref: str | None = None,
           patched_ref: str | None = None, jobs: int | None = None, fixed: bool = False, progress=None) -> Evidence:
    """Build (or take `lib`/`baseline_lib`) both variants, run every selected scenario and return
    the typed evidence (verdicts, p-values, fingerprints, what each run mapped, the run policy).
    `runs` is the most runs per variant under the sequential rule (a scenario stops once its
    verdict is settled); `fixed=True` runs every scenario exactly `runs` times. `driver`: auto |
    real | fake. `progress`: a callable for the progress lines (default: stderr, as the CLI)."""
    from lucepatch.verify.service import VerifyRequest, run_verify  # lazy: verify's pipeline, 16 ms

    _, repros = reproducers(ws, reproducer_names, target_name=t.name)
    req = VerifyRequest(workspace=ws, target=t, reproducers=repros, source=_path(source), driver=driver, runs=runs,
                        scenarios=list(scenarios or []), lib=_path(lib), baseline_lib=_path(baseline_lib),
                        baseline_ref=baseline_ref,
                        patched_ref=patched_ref, jobs=jobs, fixed=fixed)
    return run_verify(req, cache, progress=progress)


def retire(ws: Workspace, t: Target, src: Path, cache: Path, ref: str, *, driver: str = "auto",
           runs: int | None = None, reproducers: list[str] | None = None) -> dict:
    """Every patch judged at upstream `ref` by the retirement rule (superseded — only with a code
    signal that upstream has the change — / retire-candidate (behaviour alone, needs review) /
    still-needed / untestable / inconclusive, with the scenario and the builds that decided;
    docs/design.md "Retirement"); the lucepatch-retire report (lucepatch.upstream.retire.RETIRE_SCHEMA).
    reproducers: judge with these only (the others' patches read not-judged)."""
    from lucepatch.upstream.retire import retire_report  # lazy: the retirement rule, 19 ms

    return retire_report(t, src, ref, cache, driver, runs, workspace=ws, reproducers=reproducers)


def write_pr(ws: Workspace, t: Target, src: Path, cache: Path, out_dir: Path, *,
             evidence: list[Path] | None = None, no_evidence: bool = False, patches: list[str] | None = None,
             **options):
    """The PR directory (patches with base-commit, pr-body.md, pr.json) after the upstream's own
    checks; `evidence` files must prove the series. Other keyword options are those of
    `lucepatch pr` (upstream_ref, signoff, draft, template, push, branch, revise, ai_use, messages)."""
    from lucepatch.upstream.pr import prepare_pr  # lazy: the PR writer, 22 ms

    repros = {r.name: r for r in list_reproducers(ws)}
    # a relative out_dir ("pr/") is the caller's working directory's, ~ expanded (prepare_pr makes it absolute)
    return prepare_pr(t, _path(src), cache, _path(out_dir), patch_names=patches,
                      evidence_path=[_path(e) for e in evidence or []] or None, no_evidence=no_evidence,
                      repro_hashes={n: r.hash for n, r in repros.items()}, reproducers=repros,
                      workspace=ws.path, **options)


def gate(ws: Workspace, t: Target, src: Path, cache: Path, *, upstream_head: str | None = None, driver: str = "auto",
         runs: int = 5, use_cache: bool = True, evidence_dir: Path | None = None, probes: bool = True):
    """The CI gate for one target (lint, check, canary, build, verify, probes); a TargetResult
    (gate, canary, steps). Reports: lucepatch.services.gate.junit_xml / markdown."""
    return gate_target(ws, t, _path(src), cache, upstream_head=upstream_head, driver=driver, runs=runs,
                       use_cache=use_cache, evidence_dir=_path(evidence_dir), probes=probes)


def identify_library(path: str | Path) -> Identity:
    """What a libvgpu.so is (`doctor --lib`, `inspect --lib`): `.kind` upstream / line-build / fork /
    unknown, `.line`, `.commits`, `.decided_by`, `.foreign` (a fork's extra names, grouped),
    `.env_extra`, `.loader` (GLIBC_PRIVATE needs, newest GLIBC, NEEDED) and `.cannot_run`."""
    return identify(_path(path))


def node_report(path: str | Path) -> NodeReport:
    """A node report (`doctor --pod NAME --save-report FILE`): `.injection`, `.library`, `.driver_version`,
    `.pod_glibc`, `.hami_version`, `.limits` (lucepatch/node/report.py)."""
    return load_node_report(_path(path))


def write_evidence(path: str | Path, ev: Evidence) -> None:
    """Write `ev` as evidence JSON (validated against docs/schema/evidence.schema.json)."""
    _evidence.write_evidence(_path(path), ev)


def load_evidence(path: str | Path) -> Evidence:
    """Evidence JSON as typed `Evidence` (validated; schema 1 upgraded)."""
    return _evidence.load_evidence(_path(path))
