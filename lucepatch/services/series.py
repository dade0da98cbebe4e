"""The series verbs as services: `list`, `check`, `apply`, `status` (with `--behaviour`, the join of
the engine's status and the retirement report, which lives a floor above the engine), `export`,
`import` and `mark`. Commands parse, call these, and print what comes back."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

from lucepatch import git, trailers
from lucepatch.engine import upstreamed
# Where the engine's function is the use case itself, it is the service (lucepatch.api names it).
from lucepatch.engine.apply import SeriesResult
from lucepatch.engine.checkout import open_checkout
from lucepatch.engine.core import CONFLICT
from lucepatch.engine.export import ExportResult, export_series
from lucepatch.engine.importer import import_patches
from lucepatch.engine.onto import Applied, apply_onto_checkout as apply
from lucepatch.engine.session import notice
from lucepatch.engine.status import has_conflicts, status_all
from lucepatch.engine.subtargets import check_all
from lucepatch.errors import UsageError
from lucepatch.series import UPSTREAM_STATUS, find_patch, rewrite_patch_file
from lucepatch.target import Target, list_targets, load_target
from lucepatch.verify.reproducer import list_reproducers
from lucepatch.workspace import Workspace, resolve_source

__all__ = ["check", "apply", "status", "has_conflicts", "export", "import_patches", "mark", "listing", "load_checked",
           "open_checkout", "CONFLICT", "SeriesResult", "Applied", "ExportResult", "Marked"]


def load_checked(ws: Workspace, name: str | None, cache: Path) -> tuple[Target, str | None]:
    """The target with every patch parsed (before any output), and the note a verb prints when the
    target has an open or interrupted rebase session (None when it has none)."""
    t = load_target(ws, name)
    if not t.series:
        raise UsageError(f"series {t.dir / 'series'} lists no patches; add patch names, one per line")
    _ = t.patches
    return t, notice(cache, t)


def listing(ws: Workspace) -> tuple[list[Target], list]:
    """`list`: every target (series parsed) and every reproducer of the workspace."""
    return [load_target(ws, n) for n in list_targets(ws)], list_reproducers(ws)


@contextlib.contextmanager
def judged_by_behaviour(t, src: Path, cache: Path, ws):
    """`status --behaviour`: the retirement rule's report at HEAD (the one `verify --retire HEAD`
    saved, else made and saved now), answering the upstreamed detector while the status runs.
    Its hook answers only at the superproject's HEAD, so sub-targets are not judged by it."""
    from lucepatch.upstream import retire  # lazy: `status --behaviour` only, 33 ms

    head = git.resolve_commit(src, "HEAD", what="HEAD", remedy="the checkout has no commits")
    judged = retire.load_saved(t, head, cache, ws)
    if judged is None:
        judged = retire.retire_report(t, src, head, cache, "auto", workspace=ws)
        retire.save_report(judged, t, cache, ws)
    hook = retire.report_hook(judged)
    upstreamed.register_behaviour_hook(hook)
    try:
        yield judged
    finally:
        upstreamed.unregister_behaviour_hook(hook)


def annotate_behaviour(rows: list[dict], judged: dict | None) -> None:
    """Each row's behaviour verdict from the retire report (in `behaviour` and the detail). A
    retire-candidate stays as the engine found it (not-applied, ...): behaviour alone never makes a
    patch already-upstream (engine/retirement.py)."""
    if judged:
        from lucepatch.upstream.retire_report import SHOWN  # lazy: status --behaviour only, 334 ms (load ~11; retire 346 there)
    for r in rows if judged else []:
        b = next(p for p in judged["patches"] if p["name"] == r["name"])
        r["behaviour"] = {k: b.get(k) for k in ("status", "needed", "scenario", "reason", "code_signal")}
        # a candidate needs review; upstream made the bug worse: said as the retirement table says it
        shown = SHOWN.get(b["status"], b["status"])
        r["detail"] = (r["detail"] + "; " if r["detail"] else "") + f"behaviour: {shown} ({b['scenario'] or '-'})"


def saved_judgements(ws, cache: Path):
    """engine.status.compute_status's `measured(target, commit)`: the retire report `verify --retire`
    saved at that upstream commit (reproducers unchanged), read as the rebase session's judge reads
    it (upstream.retire.judgements); None where there is none. Reads only: nothing is built or run.
    `ws` None: the reproducers beside the target's folder."""
    def measured(target, commit: str):
        if not (Path(cache) / "retire").is_dir():
            return None  # this cache never held a report
        from lucepatch.upstream import retire  # lazy: only where a saved report may exist, 150 ms

        doc = retire.load_saved(target, commit, cache, ws)
        return retire.judgements(doc) if doc is not None else None
    return measured


def check(t, src: Path, cache: Path, *, onto: str | None = None, fetch: bool = False):
    """`check`: the series at its base (or `onto`), nothing touched; a conflict the one judge finds
    upstream is decided with the retire report saved at that commit, as a rebase decides it (kept,
    and still a conflict, where behaviour measured there needs it; "by code alone" without a report)."""
    return check_all(t, src, cache, onto=onto, fetch=fetch, measured=saved_judgements(None, cache))


def status(t, src: Path, cache: Path, ws, *, fetch: bool = False, behaviour: bool = False) -> dict:
    """`status`: per patch at the checkout's HEAD (and each sub-target's at its own); what the one
    judge finds upstream is decided with the retire report saved at upstream's commit, as a rebase
    decides it (kept where behaviour measured there still needs it; "by code alone" where there is
    no report); with `behaviour`, the superproject's rows also judged by the retirement rule."""
    open_checkout(src)
    with judged_by_behaviour(t, src, cache, ws) if behaviour else contextlib.nullcontext() as judged:
        doc = status_all(t, src, cache, fetch=fetch, measured=saved_judgements(ws, cache))
    annotate_behaviour(doc["patches"], judged)
    return doc


def export(ws: Workspace, name: str | None, src_path: str | None, cache: Path, *, branch: str | None = None,
           write: bool = True) -> tuple[Target, ExportResult]:
    """`export`: the target's patch files from its lucepatch branch (written unless `write` is False)."""
    t = load_target(ws, name)
    _ = t.patches
    if write:
        ws.require_writable("export")
    src = resolve_source(src_path, t.name, family=t.family)
    return t, export_series(t, src, cache, branch=branch, write=write)


@dataclass
class Marked:
    target: Target
    patch: object  # series.Patch
    before: str | None
    after: str


def mark(ws: Workspace, name: str, patch: str, *, submitted: str | None = None, status: str | None = None) -> Marked:
    """`mark`: set a patch's Upstream-Status trailer (only that trailer changes; never the diff)."""
    if bool(submitted) == bool(status):
        raise UsageError("give exactly one of --submitted URL or --status VALUE")
    if submitted:
        if not re.match(r"^https?://\S+$", submitted):
            raise UsageError(f"--submitted {submitted!r} is not a URL; pass the PR's https:// address")
        status = f"Submitted [{submitted}]"
    if not UPSTREAM_STATUS.match(status):
        raise UsageError(f"Upstream-Status {status!r} is not one of Pending, Submitted [url], Denied, "
                         "Inappropriate [reason], Inactive-Upstream, Backport, Accepted")
    ws.require_writable("mark")
    t = load_target(ws, name)
    p = find_patch(t.patches, patch, where=f"{t.name}'s series")
    before = p.trailer("Upstream-Status")
    rewrite_patch_file(p, trailers.edit_patch(p.raw, set_=[("Upstream-Status", status)]),
                       check={"Upstream-Status": status})
    return Marked(t, p, before, status)
