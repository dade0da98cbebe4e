"""Combined evidence: one view of several verify runs of the same series (say, one GPU machine per
reproducer) — used by `pr --evidence A --evidence B`.

It sits above evidence.py (the typed document) and verdict.py (the overall verdict it recomputes),
so that neither of those imports the other both ways (docs/design.md "Layers").
"""

from __future__ import annotations

from lucepatch.errors import UsageError
from lucepatch.verify.evidence import Evidence, upgrade
from lucepatch.verify.verdict import overall


def combine(docs: list[dict], reproducer_hashes: dict[str, str]) -> dict:
    """One evidence view from several verify runs (say, one GPU machine per reproducer).

    All documents must describe the same target, series (patch ids) and upstream base. For every
    reproducer, the scenarios come from the newest document whose recorded reproducer hash is
    still current, so a re-run of one reproducer supersedes its old, stale results without
    discarding the others. Each scenario keeps the driver and artifacts of the run it came from.
    """
    docs = [d.to_json() if isinstance(d, Evidence) else upgrade(d) for d in docs]

    if not docs:
        raise UsageError("no evidence to combine")
    first = docs[0]
    for d in docs[1:]:
        for key, what in ((("target",), "target"), (("series", "patch_ids"), "series"), (("upstream", "base"), "upstream base")):
            a, b = first, d
            for k in key:
                a, b = (a or {}).get(k), (b or {}).get(k)
            if a != b:
                raise UsageError(f"evidence files disagree on the {what}; combine only runs of the same series on the same base")
    picked: dict[str, dict] = {}
    for d in sorted(docs, key=lambda d: d.get("tool", {}).get("created", "")):
        for rep in d.get("reproducers", []):
            if reproducer_hashes.get(rep["name"], rep["hash"]) == rep["hash"]:
                picked[rep["name"]] = d  # newest current run of this reproducer wins
    scenarios, reps, runs, skipped = [], [], [], []
    for name, d in sorted(picked.items()):
        reps.append(next(r for r in d["reproducers"] if r["name"] == name))
        mine = set()
        for s in d["scenarios"]:
            if s.get("reproducer", s["scenario"].split(":", 1)[0]) == name:
                mine.add(s["scenario"])
                scenarios.append({**s, "driver": d.get("driver"), "variants": d.get("variants"),
                                  "evidence_created": d.get("tool", {}).get("created")})
        # the runs and skips of the scenarios taken from this document travel with them
        runs += [r for r in d.get("runs", []) if r.get("scenario") in mine]
        skipped += [k for k in d.get("skipped", []) if k.get("scenario") in mine]
    drivers = {(s["driver"] or {}).get("kind") for s in scenarios}
    used = [d for d in docs if d in picked.values()]
    newest = used[-1] if used else first
    return {
        **{k: v for k, v in newest.items() if k not in ("scenarios", "runs", "reproducers", "skipped")},
        "reproducers": reps,
        "scenarios": scenarios,
        "runs": runs,
        "skipped": skipped,
        "verdict": overall(scenarios) if scenarios else "invalid",
        "driver": newest.get("driver") if len(drivers) == 1 else {"kind": "mixed", "kinds": sorted(map(str, drivers))},
        "combined_from": [{"created": d.get("tool", {}).get("created"), "verdict": d.get("verdict"),
                           "reproducers_used": sorted(n for n, p in picked.items() if p is d)} for d in docs],
    }
