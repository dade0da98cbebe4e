"""`pr` as a service: the PR directory for a target's series after the upstream's own checks
(upstream/pr.py writes it); the command and a program (lucepatch.api.write_pr) call this."""

from __future__ import annotations

from pathlib import Path

from lucepatch.target import Target
from lucepatch.upstream.pr import PrResult, prepare_pr
from lucepatch.verify.reproducer import list_reproducers
from lucepatch.workspace import Workspace

__all__ = ["write_pr", "PrResult"]


def _path(p) -> Path | None:
    return Path(p).expanduser() if p is not None and str(p) != "" else None


def write_pr(ws: Workspace, t: Target, src: Path, cache: Path, out_dir: Path | str, *,
             evidence: list | None = None, no_evidence: bool = False, patches: list[str] | None = None,
             **options) -> PrResult:
    """The PR directory (patches with base-commit, pr-body.md, pr.json) after the upstream's own
    checks; `evidence` files must prove the series. Other keyword options are those of
    `lucepatch pr` (upstream_ref, signoff, draft, template, push, branch, revise, ai_use, messages,
    real_clients). A relative `out_dir` is the caller's working directory's, `~` expanded."""
    repros = {r.name: r for r in list_reproducers(ws)}
    return prepare_pr(t, _path(src), cache, _path(out_dir), patch_names=patches,
                      evidence_path=[_path(e) for e in evidence or []] or None, no_evidence=no_evidence,
                      repro_hashes={n: r.hash for n, r in repros.items()}, reproducers=repros,
                      workspace=ws.path, **options)
