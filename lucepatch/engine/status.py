"""`status`: each patch at a checkout's HEAD — applied (a Patch-Id trailer reachable from HEAD, or its
change in lucepatch's own commits), already upstream (the one judge, engine/absorption.py, on upstream's
tree below lucepatch's commits, with the signal that says so), not applied (and how it would apply) or
conflict — for the target and each of its [[submodule]] sub-targets at their own HEADs.
Nothing in the checkouts is written."""

from __future__ import annotations

from pathlib import Path

from lucepatch import git
from lucepatch.engine import layout, upstreamed
from lucepatch.engine.absorption import KEPT, UpstreamJudge, at_ref
from lucepatch.engine.apply import CONFLICT, WorkArea, open_state, resolve_base
from lucepatch.engine.commits import applied_patch_ids, patch_id_trailer
from lucepatch.engine.core import ALREADY_UPSTREAM, IndexEngine
from lucepatch.engine.subtargets import sub_targets

APPLIED = "applied"
NOT_APPLIED = "not-applied"
UPSTREAM = "already-upstream"
CONFLICTS = "conflict"  # one word per state (engine/absorption.py): as check and rebase say it


def upstream_below(src: Path, base: str, head: str) -> str:
    """The newest first-parent commit of HEAD that is upstream's: below lucepatch's own commits
    (those with a `Lucepatch-Series:` trailer, from this series or any other version of it), so
    "already upstream" is judged on upstream's tree, never on what lucepatch applied."""
    if head == base:
        return head
    log = git.run(src, "log", "--first-parent", "--format=%H%x00%B%x01", "-n", "1000", f"{base}..{head}",
                  env={"GIT_OPTIONAL_LOCKS": "0"}).stdout
    for entry in log.split("\x01"):
        if "\x00" not in entry:
            continue
        sha, body = entry.strip("\n").split("\x00", 1)
        if "\nLucepatch-Series: " not in "\n" + body or not patch_id_trailer(body):
            return sha
    return base if len(log.split("\x01")) < 1001 else head


def _three_way_noop(work, commit: str, p, f) -> bool:
    """Does `p` alone, re-applied 3-way on `commit`'s tree, change nothing?"""
    eng = IndexEngine(work.repo, work.path / "up.index")
    eng.reset(commit)
    return eng.apply(f, name=p.name)[0] == ALREADY_UPSTREAM


def compute_status(t, src, work, head: str, base: str, patches: list | None = None, measured=None) -> list[dict]:
    """Rows of `patches` (default: t's series) at `head`; a folder sub-target passes its re-rooted
    patches with the superproject's checkout, HEAD and base. `measured(target, commit)`: the saved
    retire report at upstream's commit as {patch name: Judgement} (None: there is none), so that what
    the code judge finds upstream is decided as a rebase decides it (absorption.at_ref: measured
    behaviour keeps it, code alone says so); without `measured` the code judge's word stands."""
    patches = t.patches if patches is None else patches
    applied = applied_patch_ids(src, base, head)
    up = upstream_below(src, base, head)
    js = measured(t, up) if measured is not None else None

    def decided(found, p, f):  # (kept?, the words after the code judge's): the one judge's, as a rebase says them
        if measured is None:
            return False, ""
        d = at_ref(found, js, p.name, judge, f, p)
        return d.state == KEPT, d.reason

    state, files = open_state(src, patches, work, head)
    # the one judge (engine/absorption.py), on upstream's tree below lucepatch's commits
    judge = UpstreamJudge(work.repo, base, up, work.path / "judge")
    ours = UpstreamJudge(work.repo, up, head, work.path / "ours") if up != head else None
    mine = f"lucepatch's own commits {up[:12]}..{head[:12]} (another version of the patch: no Patch-Id trailer matches)"
    rows = []
    for p, f in zip(patches, files):
        row = {"name": p.name, "subject": p.subject, "patch_id": p.patch_id, "status": None,
               "signal": None, "commit": None, "would": None, "detail": ""}
        if p.patch_id in applied:
            row.update(status=APPLIED, commit=applied[p.patch_id], detail="Patch-Id trailer reachable from HEAD")
        else:
            found = judge.code(p, f)
            kept, said = decided(found, p, f) if found.upstream else (False, "")
            if found.upstream and not kept:
                row.update(status=UPSTREAM, signal=found.signal, commit=found.commit,
                           detail="; ".join(x for x in (found.detail, said) if x))
            elif ours is not None and (sig := ours.tree_has(p, f)):  # HEAD has it, upstream's tree does not
                row.update(status=APPLIED, detail=f"its change ({sig}) is in {mine}")
            elif kept:  # REF's tree has it, a scenario measured at REF still needs it: as not upstream
                row.update(detail=said)
            elif found.took:  # taken upstream, then reverted or changed there
                row.update(detail=found.detail)
            else:
                hit = upstreamed.behaviour_says(p, target=t, source=src, ref=up)
                if hit:
                    row.update(status=UPSTREAM, signal=hit.signal, commit=hit.commit, detail=hit.detail)
        rows.append(row)
    # what is neither applied nor upstream: would it apply at HEAD (cumulatively, in series order)?
    for row, p, f in zip(rows, patches, files):
        if row["status"] is not None:
            continue
        status, detail = state.apply(p, f)
        note = f"{row['detail']}; " if row["detail"] else ""
        if status == CONFLICT:
            row.update(status=CONFLICTS, detail=note + detail)
        elif status == "already-upstream" and up != head and not _three_way_noop(work, up, p, f):
            # HEAD has the change but upstream's tree below lucepatch's commits does not: lucepatch applied it
            row.update(status=APPLIED, detail=note + f"its change (3-way) is in {mine}")
        elif status == ALREADY_UPSTREAM and (d := decided(judge.three_way(p, detail), p, f))[0]:
            # re-applied it changes nothing, yet behaviour at REF needs it: a rebase stops here for a person
            row.update(status=NOT_APPLIED, would="no change (3-way)", detail=note + d[1] + f"; {detail}")
        elif status == ALREADY_UPSTREAM:
            said = decided(judge.three_way(p, detail), p, f)[1]
            row.update(status=UPSTREAM, signal="3-way", detail=note + "; ".join(x for x in (detail, said) if x))
        else:
            row.update(status=NOT_APPLIED, would=status, detail=row["detail"])
    return rows


def status_of(t, src: Path, cache: Path, *, fetch: bool = False, measured=None) -> dict:
    base = resolve_base(src, t.base, t.name, fetch=fetch, upstream=t.upstream_urls)
    head = git.resolve_commit(src, "HEAD", what="HEAD", remedy="the checkout has no commits")
    with WorkArea(cache, f"status-{t.name}") as work:
        rows = compute_status(t, src, work, head, base, measured=measured)
    return {"base": base, "head": head, "branch": git.current_branch(src), "patches": rows}


def status_all(t, src: Path, cache: Path, *, fetch: bool = False, measured=None) -> dict:
    """The target's status, with `submodules`: each sub-target's where the checkout's HEAD holds
    it — a submodule at its own checkout's HEAD; a folder (vendored) or absent one in the
    superproject at its HEAD, its patches re-rooted there (engine/layout.py). `measured`:
    compute_status's, for the target and each sub-target."""
    doc = status_of(t, src, cache, fetch=fetch, measured=measured)
    if t.submodules:
        subs = []
        for st in sub_targets(t)[1:]:
            if not st.target.series:
                continue
            pl = layout.place(src, doc["head"], st.submodule)
            if pl.in_superproject:
                moved = [layout.reroot(p, "", pl.path) for p in st.target.patches]
                with WorkArea(cache, f"status-{st.target.name}") as work:
                    rows = compute_status(st.target, src, work, doc["head"], doc["base"], moved, measured)
                sub = {"base": doc["base"], "head": doc["head"], "branch": doc["branch"], "patches": rows}
            else:
                checkout = layout.checkout_of(src, st.submodule, pl) or st.source(src)
                sub = status_of(st.target, checkout, cache, fetch=fetch, measured=measured)
            subs.append({**st.to_json(), **sub, "place": pl.to_json()})
        doc["submodules"] = subs
    return doc


def has_conflicts(doc: dict) -> bool:
    return any(r["status"] == CONFLICTS for d in [doc, *doc.get("submodules", [])] for r in d["patches"])
