"""The series verbs' joins: `status --behaviour` (the engine's status beside the retirement rule's
report, which lives a floor above the engine)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from lucepatch import git
from lucepatch.engine import upstreamed
from lucepatch.engine.status import status_all


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
    for r in rows if judged else []:
        b = next(p for p in judged["patches"] if p["name"] == r["name"])
        r["behaviour"] = {k: b.get(k) for k in ("status", "needed", "scenario", "reason", "code_signal")}
        shown = "retire-candidate (needs review)" if b["status"] == "retire-candidate" else b["status"]
        r["detail"] = (r["detail"] + "; " if r["detail"] else "") + f"behaviour: {shown} ({b['scenario'] or '-'})"


def status(t, src: Path, cache: Path, ws, *, fetch: bool = False, behaviour: bool = False) -> dict:
    """`status`: per patch at the checkout's HEAD (and each sub-target's at its own); with
    `behaviour`, the superproject's rows also judged by the retirement rule."""
    with judged_by_behaviour(t, src, cache, ws) if behaviour else contextlib.nullcontext() as judged:
        doc = status_all(t, src, cache, fetch=fetch)
    annotate_behaviour(doc["patches"], judged)
    return doc
