"""The evidence document `verify` writes and `pr`, `ci` and `deploy` read.

Identity (DESIGN.md): evidence is stale when its upstream commit, the covered patch ids, the
reproducer's hash or the profile's hash differ. Artifact sha256s are provenance, not identity.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import tempfile
from pathlib import Path

from lucepatch import __version__
from lucepatch.errors import UsageError

SCHEMA_VERSION = 1


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def host_info() -> dict:
    return {"hostname": platform.node(), "machine": platform.machine(), "kernel": platform.release(),
            "cpus": os.cpu_count()}


def write_evidence(path: Path, doc: dict) -> None:
    path = Path(path)
    if path.exists() and path.is_dir():
        raise UsageError(f"--evidence {path} is a directory; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".evidence-")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def load_evidence(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"evidence file {path} does not exist; run lucepatch verify --evidence {path}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"evidence file {path} is not JSON ({exc})")
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION or "verdict" not in doc:
        raise UsageError(f"evidence file {path} is not lucepatch evidence (schema_version {SCHEMA_VERSION})")
    return doc


def staleness(doc: dict, *, upstream_commit: str, patch_ids: list[str], reproducer_hashes: dict[str, str]) -> list[str]:
    """Reasons the evidence no longer describes this series; empty when it is current."""
    why = []
    if doc.get("upstream", {}).get("base") != upstream_commit:
        why.append(f"upstream commit {str(doc.get('upstream', {}).get('base'))[:12]} != {upstream_commit[:12]}")
    covered = doc.get("series", {}).get("patch_ids")
    if covered is not None and covered != patch_ids:
        why.append("the series' patch ids changed since the evidence was taken")
    for rep in doc.get("reproducers", []):
        have = reproducer_hashes.get(rep.get("name"))
        if have is not None and have != rep.get("hash"):
            why.append(f"reproducer {rep.get('name')} changed since the evidence was taken")
    return why


def tool_info() -> dict:
    return {"lucepatch": __version__, "created": now_utc(), "host": host_info()}


def combine(docs: list[dict], reproducer_hashes: dict[str, str]) -> dict:
    """One evidence view from several verify runs (say, one GPU machine per reproducer).

    All documents must describe the same target, series (patch ids) and upstream base. For every
    reproducer, the scenarios come from the newest document whose recorded reproducer hash is
    still current, so a re-run of one reproducer supersedes its old, stale results without
    discarding the others. Each scenario keeps the driver and artifacts of the run it came from.
    """
    from lucepatch.verify.verdict import overall

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
    scenarios, reps = [], []
    for name, d in sorted(picked.items()):
        reps.append(next(r for r in d["reproducers"] if r["name"] == name))
        for s in d["scenarios"]:
            if s.get("reproducer", s["scenario"].split(":", 1)[0]) == name:
                scenarios.append({**s, "driver": d.get("driver"), "variants": d.get("variants"),
                                  "evidence_created": d.get("tool", {}).get("created")})
    drivers = {(s["driver"] or {}).get("kind") for s in scenarios}
    used = [d for d in docs if d in picked.values()]
    newest = used[-1] if used else first
    return {
        **{k: v for k, v in newest.items() if k not in ("scenarios", "runs", "reproducers", "skipped")},
        "reproducers": reps,
        "scenarios": scenarios,
        "verdict": overall(scenarios) if scenarios else "invalid",
        "driver": newest.get("driver") if len(drivers) == 1 else {"kind": "mixed", "kinds": sorted(map(str, drivers))},
        "combined_from": [{"created": d.get("tool", {}).get("created"), "verdict": d.get("verdict"),
                           "reproducers_used": sorted(n for n, p in picked.items() if p is d)} for d in docs],
    }
