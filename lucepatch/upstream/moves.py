"""What an upstream move did, from a ref-vs-ref evidence (issue 36): `verify --baseline-ref OLD
--patched-ref NEW` measures upstream at two commits with no series; its `worse` scenarios are bugs
the move made worse (a crash or hang where OLD gave a wrong value), its `proven` ones bugs it fixed,
its `regression`s bugs it introduced. `pr` renders them beside the series' own evidence (never
combined with it: they prove no fix) when NEW is the PR's base."""

from __future__ import annotations

from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.show.model import driver_display
from lucepatch.verify.evidence import Evidence
from lucepatch.verify.verdict import signature


def upstream_move(ev: Evidence, base_sha: str, path: Path) -> bool:
    """Is `ev` a ref-vs-ref evidence (both sides upstream at a commit, no series)? Then its newer
    side must be the PR's base: it says what upstream changed on the way there."""
    sides = [ev.variants.get(v) for v in ("baseline", "patched")]
    if not all(v is not None and v.source == "ref" for v in sides):
        return False
    newer = sides[1].base or sides[1].commit or ""
    if not base_sha.startswith(newer[:12]) or not newer:
        raise UsageError(f"--evidence {path} compares upstream {str(sides[0].base)[:12]} with {newer[:12]}, but the PR "
                         f"is based on {base_sha[:12]}: give the ref-vs-ref evidence whose --patched-ref is the base")
    return True


def move_rows(ev: Evidence) -> dict:
    """What upstream made worse, fixed and broke between the two commits, each with both sides'
    outcomes and first errors (the scenario's own verdict reason keeps the full text)."""
    older = ev.variants["baseline"].base or ev.variants["baseline"].commit or ""
    newer = ev.variants["patched"].base or ev.variants["patched"].commit or ""
    d = driver_display(ev)
    rows = []
    for s in ev.checked:
        what = {"worse": "made worse", "proven": "fixed", "regression": "broke"}.get(s.verdict)
        if what:
            rows.append({"scenario": s.scenario, "what": what,
                         "older": signature(s.baseline) if s.baseline.failures else f"pass {s.baseline.passed}/{s.baseline.runs}",
                         "newer": signature(s.patched) if s.patched.failures else f"pass {s.patched.passed}/{s.patched.runs}"})
    return {"older": older[:12], "newer": newer[:12], "rows": rows, "gpu": d["gpu"], "driver": d["driver"],
            "kind": d["kind"]}


def split_moves(evs: list[Evidence], paths: list[Path], base_sha: str) -> tuple[list[Evidence], list[Evidence]]:
    """(the series' evidence, the ref-vs-ref ones): a ref-vs-ref evidence (upstream at two commits, no
    series) proves no fix; it says what the move to the PR's base did and is rendered apart."""
    moves = [e for e, path in zip(evs, paths) if upstream_move(e, base_sha, path)]
    rest = [e for e in evs if all(e is not m for m in moves)]
    if not rest:
        raise UsageError("every --evidence given compares upstream with upstream (ref-vs-ref); give the evidence of "
                         "the series too (lucepatch verify --all)")
    return rest, moves
