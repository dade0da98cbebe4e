"""Proof as services: `verify` (both variants, the runs, the evidence), `verify --retire` /
`--coverage-map` (retirement by behaviour) and `bisect` (where a reproducer's behaviour flips).
The command and a program (lucepatch.api names these) call the same functions: the command only
parses options and prints what comes back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git
from lucepatch.errors import LucepatchError
from lucepatch.node.report import load_node_report
from lucepatch.show.model import build_view
from lucepatch.show.terminal import print_parts, verdict_parts
from lucepatch.target import Target, family_lines, load_target
from lucepatch.upstream import coverage, retire as rule
from lucepatch.upstream.bisect import FOUND, bisect_behaviour, bisect_exit_code, find_patch, record_applied_upstream
from lucepatch.verify.driver import choose_driver
from lucepatch.verify.evidence import Evidence, load_evidence, write_evidence
from lucepatch.verify.node import node_section
from lucepatch.verify.progress import clock
from lucepatch.verify.reproducer import Reproducer, load_reproducer
from lucepatch.verify.service import VerifyRequest, build_variants, run_verify, select
from lucepatch.workspace import Workspace, resolve_source

__all__ = ["verify", "selection", "reproducers", "cluster_backend", "print_verdicts", "retire", "retire_or_map",
           "bisect", "build_variants", "write_evidence", "load_evidence", "clock", "FOUND", "Evidence", "Judged",
           "Bisected"]


def _path(p) -> Path | None:
    """A path as a caller wrote it: `~` expanded where it enters (a notebook's "~/src/HAMi-core")."""
    return Path(p).expanduser() if p is not None and str(p) != "" else None


def selection(ws: Workspace, *, target: str | None, reproducers: list[str], run_all: bool) -> tuple[Target, list, str | None]:
    """The target and reproducers a verify names, and (for `--all` without `--target`) the note
    that says which target it took and how to name a line instead."""
    t, repros = select(ws, target=target, reproducers=list(reproducers), run_all=run_all)
    note = None
    if run_all and not target:
        lines = family_lines(ws, t.name)
        note = (f"verify --all: target {t.name} (no --target; the target the workspace's reproducers are "
                f"written for" + (f"; --target {lines[0]} for its line" if len(lines) == 1 else
                                  f"; --target NAME for a line: {', '.join(lines)}" if lines else "") + ")")
    return t, repros, note


def cluster_backend(*, in_cluster: bool, from_logs: str | None, **options):
    """The backend `--in-cluster` / `--from-logs` hand to verify (k8s/incluster.ClusterBackend), or
    None: the runs run here. `options`: image, kubeconfig, context, namespace, node, gpu_mem_mib, save_logs."""
    if not (in_cluster or from_logs):
        return None
    from lucepatch.k8s.incluster import ClusterBackend  # lazy: --in-cluster only, 16 ms

    save = options.pop("save_logs", None)
    return ClusterBackend(from_logs=Path(from_logs) if from_logs else None, save_logs=Path(save) if save else None,
                          **options)


def reproducers(ws: Workspace, names: list[str] | None = None, *, target_name: str | None = None
                ) -> tuple[Target, list[Reproducer]]:
    """(target, reproducers): the named ones, or with no names every reproducer of `target_name`."""
    return select(ws, target=target_name, reproducers=list(names or []), run_all=not names)


def verify(ws: Workspace, t: Target, reproducers: list | None = None, *, cache: Path, progress=None,
           **options) -> Evidence:
    """Build (or take `lib`/`baseline_lib`) both variants, run every selected scenario and return
    the typed evidence (verdicts, p-values, fingerprints, what each run mapped, the run policy).
    `reproducers`: names, or the Reproducers `selection` chose; none: every reproducer of `t`.
    `options`: source (else $LUCEPATCH_SRC_<TARGET>; unused with `lib`), lib, baseline_lib,
    evidence (the JSON written there, checked before anything runs), node_report (the node the
    evidence records; its notes go to `progress`) — paths, `~` expanded — and those of
    verify.service.VerifyRequest: driver (auto | real | fake), runs (the most per variant under the
    sequential rule), fixed (exactly `runs`), scenarios, baseline_ref, patched_ref, jobs, backend
    (`cluster_backend`). `progress`: a callable for the progress lines (default: stderr)."""
    if not reproducers or isinstance(reproducers[0], str):
        _, reproducers = select(ws, target=t.name, reproducers=list(reproducers or []), run_all=not reproducers)
    paths = {k: _path(options.pop(k, None)) for k in ("source", "lib", "baseline_lib", "evidence", "node_report")}
    src = None if paths["lib"] else resolve_source(paths["source"], t.name, family=t.family)
    options["scenarios"] = list(options.get("scenarios") or [])
    req = VerifyRequest(workspace=ws, target=t, reproducers=list(reproducers), source=src, lib=paths["lib"],
                        baseline_lib=paths["baseline_lib"], evidence=paths["evidence"], **options)
    node_doc = None
    if paths["node_report"]:
        node_doc, notes = node_section(load_node_report(paths["node_report"]), baseline_lib=req.baseline_lib,
                                       lib=req.lib, where=f"--node-report {paths['node_report']}")
        for n in notes:
            (progress or (lambda _l: None))(n)
    ev = run_verify(req, cache, progress=progress)
    if node_doc is not None:
        ev.extra["node"] = node_doc
    if paths["evidence"]:
        write_evidence(paths["evidence"], ev)
    return ev


def print_verdicts(console, ev: Evidence, *, wide: bool = False) -> None:
    """The verdict table as `verify` prints it (the evidence viewer's, at the console's width)."""
    print_parts(console, verdict_parts(build_view(ev), console.width, wide=wide))


@dataclass
class Judged:
    """`verify --retire` / `--coverage-map`: the document, its table and the exit code."""
    kind: str  # verify-retire | verify-coverage-map
    doc: dict
    table: tuple  # (title, columns, rows)
    code: int
    review: list[str] = field(default_factory=list)  # what a reviewer of each candidate reads


def retire(ws: Workspace, t: Target, src: Path, cache: Path, ref: str, **options) -> dict:
    """Every patch judged at upstream `ref` by the retirement rule (superseded — only with a code
    signal that upstream has the change — / retire-candidate (behaviour alone, needs review) /
    still-needed / untestable / inconclusive, with the scenario and the builds that decided;
    docs/design.md "Retirement"); the lucepatch-retire report (lucepatch.upstream.retire.RETIRE_SCHEMA),
    saved (its path in `saved`) where a rebase session's `needed` and `status --behaviour` read it.
    `options`: driver (auto | real | fake), runs (>= 10), reproducers (judge with these only: the others'
    patches read not-judged)."""
    doc = rule.retire_report(t, src, ref, cache, options.pop("driver", "auto"), options.pop("runs", None),
                             workspace=ws, reproducers=options.pop("reproducers", None) or None, **options)
    doc["saved"] = str(rule.save_report(doc, t, cache, ws))
    return doc


def retire_or_map(ws: Workspace, cache: Path, *, target: str | None, source: str | None, ref: str | None,
                  driver: str, runs: int | None, coverage_map: bool, reproducers: list[str]) -> Judged:
    """`verify --retire REF`: `retire` and its table; with `coverage_map` the map alone (at `ref` or
    the pinned base)."""
    if not target and reproducers:  # the target is the reproducers' (as verify --reproducer R)
        target = select(ws, target=None, reproducers=list(reproducers), run_all=False)[0].name
    t = load_target(ws, target)
    src = resolve_source(source, t.name, family=t.family)
    git.open_repo(src)
    names = list(reproducers) or None
    if coverage_map:
        m, left_out = rule.coverage_map_at(t, src, ref or t.base, cache, driver, workspace=ws, reproducers=names)
        doc = {**m.to_json(), "left_out": left_out, "cached": m.cached}
        return Judged("verify-coverage-map", doc, coverage.format_coverage_map(m), 0)
    doc = retire(ws, t, src, cache, ref, driver=driver, runs=runs, reproducers=names)
    return Judged("verify-retire", doc, rule.format_retire_table(doc), rule.retire_exit_code(doc),
                  rule.review_lines(doc))


@dataclass
class Bisected:
    doc: dict
    target: Target
    code: int
    patch: object = None  # the --record patch (series.Patch), None without --record
    record_error: LucepatchError | None = None  # reported after the result, which is still worth printing


def bisect(ws: Workspace, cache: Path, range_spec: str, reproducer: str, *, scenario: str | None = None,
           target: str | None = None, source: str | None = None, driver: str = "auto", runs: int | None = None,
           record: str | None = None, progress=None, ref: str | None = None) -> Bisected:
    """Where the reproducer's behaviour flips over `range_spec` (first parent): every transition
    found, the one that holds at the end, and the state at `ref` (REF, default the range's end);
    with `record`, Applied-Upstream: written into that patch only when the one judge says upstream
    has it (upstream/bisect.py record_applied_upstream)."""
    repro = load_reproducer(ws, reproducer)
    t = load_target(ws, target or repro.target)
    patch = None
    if record:
        ws.require_writable("bisect --record")
        patch = find_patch(t, record)  # fail on a bad name before any build
    if scenario:
        repro.scenario(scenario)
    src = resolve_source(source, t.name)
    drv = choose_driver(driver, cache)
    if progress:
        progress(f"workspace {ws.describe()}; driver {drv.chosen} ({drv.note or drv.requested})")
    doc = bisect_behaviour(t, src, range_spec, repro, cache, drv, runs, scenario, ref=ref, patch=patch)
    doc["workspace"] = ws.to_json()
    out = Bisected(doc, t, bisect_exit_code(doc), patch)
    if patch is not None and doc["result"] == FOUND:
        try:
            doc["recorded"] = record_applied_upstream(patch, doc, target=t, source=src, cache=cache,
                                                      judge=rule.judge)
        except LucepatchError as exc:
            out.record_error = exc
    return out
