"""Probe evidence in a PR: build fixes are proven by probes (builders/probe.py: the unpatched base fails
with the bug's own signature, the patched tree passes), not by reproducer runs. A `probe --both --json`
document given to `pr --evidence` becomes the body's "Probe evidence" table for the probes the PR's
patches name (`Probe:`), checked to be of the target, on the PR's base, with both variants."""

from __future__ import annotations

import json
from pathlib import Path

from lucepatch.errors import CheckFailed
from lucepatch.series import Patch
from lucepatch.target import Target


def probe_doc(path: Path) -> dict | None:
    """A `probe --both --json` document given as --evidence (build fixes are proven by probes, not
    reproducers), else None (verify evidence, read by load_evidence)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("verb") == "probe" and doc.get("runs") else None


def check_probe_evidence(docs: list[dict], target: Target, base: str) -> None:
    """Probe evidence must be of this target, run on both variants, on this base."""
    for d in docs:
        if d.get("target") != target.name:
            raise CheckFailed(f"probe evidence is for target {d.get('target')!r}, not {target.name}")
        variants = {r["variant"] for r in d["runs"]}
        if variants != {"baseline", "patched"}:
            raise CheckFailed(f"probe evidence has the {', '.join(sorted(variants))} variant only; run probe --both")
        bases = {r["tree"]["repos"][0]["base"] for r in d["runs"]}
        if bases != {base}:
            raise CheckFailed(f"probe evidence ran on {', '.join(b[:12] for b in bases)}, not the PR's base {base[:12]}")


def probe_rows(docs: list[dict], patches: list[Patch]) -> list[dict]:
    """Per probe a patch of the PR names (`Probe:`): baseline and patched verdicts as the runs measured them."""
    wanted = [n.strip() for p in patches for n in p.trailer_all("Probe")]
    rows = []
    for d in docs:
        by = {(r["variant"], q["probe"]): (q, r) for r in d["runs"] for q in r["probes"]}
        for name in dict.fromkeys(wanted):
            if ("baseline", name) not in by:
                continue
            b, run = by[("baseline", name)]
            q, _ = by[("patched", name)]
            rows.append({"probe": name, "fix": b["fix"], "profile": run["profile"], "baseline": b["status"],
                         "baseline_error": b["first_error"] or b["detail"], "baseline_s": b["seconds"],
                         "patched": q["status"], "patched_detail": q["detail"], "patched_s": q["seconds"],
                         "as_declared": b["as_declared"] and q["as_declared"]})
    return rows


__all__ = ["probe_doc", "check_probe_evidence", "probe_rows"]
