"""`pr` as a service: the PR directory for a target's series after the upstream's own checks
(upstream/pr.py writes it); the command and a program (lucepatch.api.write_pr) call this."""

from __future__ import annotations

from pathlib import Path

from lucepatch.target import Target
from lucepatch.upstream.pr import PrContext, PrOptions, PrResult, prepare_pr
from lucepatch.verify.reproducer import list_reproducers
from lucepatch.workspace import Workspace

__all__ = ["write_pr", "PrResult", "PrOptions"]


def _path(p) -> Path | None:
    return Path(p).expanduser() if p is not None and str(p) != "" else None


def write_pr(ws: Workspace, t: Target, src: Path, cache: Path, out_dir: Path | str, **options) -> PrResult:
    """The PR directory (patches named after what they change, with base-commit; pr-body.md; notes.md;
    pr.json; evidence.json + evidence.html) after the upstream's own checks. `options`: those of
    `lucepatch pr` — evidence (files that must prove the series), no_evidence, patches, upstream_ref,
    signoff, draft, template, push, branch, revise, ai_use, messages, real_clients. A relative `out_dir`
    is the caller's working directory's; paths `~` expanded."""
    evidence = [_path(e) for e in options.pop("evidence", None) or []] or None
    patches = options.pop("patches", None)
    for k in ("revise", "messages"):
        options[k] = _path(options.get(k))
    options["real_clients"] = [_path(p) for p in options.get("real_clients") or []]
    repros = {r.name: r for r in list_reproducers(ws)}
    known = PrContext(reproducers=repros, repro_hashes={n: r.hash for n, r in repros.items()}, workspace=ws.path)
    return prepare_pr(t, _path(src), cache, _path(out_dir), PrOptions(patch_names=patches, evidence_path=evidence,
                                                                      **options), known)
