"""`status`: each patch at a checkout's HEAD — applied (a Patch-Id trailer reachable from HEAD),
already upstream (with the signal that says so), not applied (and how it would apply) or
conflicting — for the target and each of its [[submodule]] sub-targets at their own HEADs.
Nothing in the checkouts is written."""

from __future__ import annotations

from pathlib import Path

from lucepatch import git
from lucepatch.engine import layout, upstreamed
from lucepatch.engine.apply import CONFLICT, WorkArea, open_state, resolve_base
from lucepatch.engine.commits import applied_patch_ids
from lucepatch.engine.subtargets import sub_targets

APPLIED = "applied"
NOT_APPLIED = "not-applied"
UPSTREAM = "already-upstream"
CONFLICTS = "conflicts"


def compute_status(t, src, work, head: str, base: str, patches: list | None = None) -> list[dict]:
    """Rows of `patches` (default: t's series) at `head`; a folder sub-target passes its re-rooted
    patches with the superproject's checkout, HEAD and base."""
    patches = t.patches if patches is None else patches
    applied = applied_patch_ids(src, base, head)
    up_ids = upstreamed.upstream_patch_ids(src, base, head)
    state, files = open_state(src, patches, work, head)
    reader = upstreamed.tree_reader(work.repo, head)
    rows = []
    for p, f in zip(patches, files):
        row = {"name": p.name, "subject": p.subject, "patch_id": p.patch_id, "status": None,
               "signal": None, "commit": None, "would": None, "detail": ""}
        if p.patch_id in applied:
            row.update(status=APPLIED, commit=applied[p.patch_id], detail="Patch-Id trailer reachable from HEAD")
        else:
            hit = upstreamed.detect(p, f, repo=work.repo, ref=head, upstream_ids=up_ids,
                                    reverse_check=state.check_reverse, read_file=reader, target=t, source=src)
            if hit:
                row.update(status=UPSTREAM, signal=hit.signal, commit=hit.commit, detail=hit.detail)
        rows.append(row)
    # what is neither applied nor upstream: would it apply at HEAD (cumulatively, in series order)?
    for row, p, f in zip(rows, patches, files):
        if row["status"] is not None:
            continue
        status, detail = state.apply(p, f)
        if status == CONFLICT:
            row.update(status=CONFLICTS, detail=detail)
        elif status == "already-upstream":
            row.update(status=UPSTREAM, signal="3-way", detail=detail)
        else:
            row.update(status=NOT_APPLIED, would=status)
    return rows


def status_of(t, src: Path, cache: Path, *, fetch: bool = False) -> dict:
    base = resolve_base(src, t.base, t.name, fetch=fetch, upstream=t.upstream_urls)
    head = git.resolve_commit(src, "HEAD", what="HEAD", remedy="the checkout has no commits")
    with WorkArea(cache, f"status-{t.name}") as work:
        rows = compute_status(t, src, work, head, base)
    return {"base": base, "head": head, "branch": git.current_branch(src), "patches": rows}


def status_all(t, src: Path, cache: Path, *, fetch: bool = False) -> dict:
    """The target's status, with `submodules`: each sub-target's where the checkout's HEAD holds
    it — a submodule at its own checkout's HEAD; a folder (vendored) or absent one in the
    superproject at its HEAD, its patches re-rooted there (engine/layout.py)."""
    doc = status_of(t, src, cache, fetch=fetch)
    if t.submodules:
        subs = []
        for st in sub_targets(t)[1:]:
            if not st.target.series:
                continue
            pl = layout.place(src, doc["head"], st.submodule)
            if pl.in_superproject:
                moved = [layout.reroot(p, "", pl.path) for p in st.target.patches]
                with WorkArea(cache, f"status-{st.target.name}") as work:
                    rows = compute_status(st.target, src, work, doc["head"], doc["base"], moved)
                sub = {"base": doc["base"], "head": doc["head"], "branch": doc["branch"], "patches": rows}
            else:
                checkout = layout.checkout_of(src, st.submodule, pl) or st.source(src)
                sub = status_of(st.target, checkout, cache, fetch=fetch)
            subs.append({**st.to_json(), **sub, "place": pl.to_json()})
        doc["submodules"] = subs
    return doc


def has_conflicts(doc: dict) -> bool:
    return any(r["status"] == CONFLICTS for d in [doc, *doc.get("submodules", [])] for r in d["patches"])
