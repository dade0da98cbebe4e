"""The evidence contract: schema 2 (lucepatch/data/evidence.schema.json), the schema 1 reader for
the committed H200 evidence, lossless typed round trips, and validation on write."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from lucepatch.errors import UsageError
from lucepatch.verify import evidence as ev

from conftest import REPO_ROOT, evidence_doc

COMMITTED = sorted(p for p in (REPO_ROOT / "docs" / "evidence").glob("*.json")
                   if json.loads(p.read_text()).get("kind") == "lucepatch-evidence")


def test_docs_schema_is_the_packaged_one():
    docs = REPO_ROOT / "docs" / "schema" / "evidence.schema.json"
    assert docs.read_bytes() == (REPO_ROOT / "lucepatch" / "data" / "evidence.schema.json").read_bytes()


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_evidence_validates_through_the_reader(path):
    raw = json.loads(path.read_text())
    doc = ev.read_evidence_json(path)
    assert doc["schema_version"] == 2
    if raw["schema_version"] == 1:
        assert doc["run_policy"]["rule"] == "fixed"
        assert doc["run_policy"]["max_runs"] == raw["execution"]["runs_per_variant"]
        # the reader adds fields and changes none
        for k, v in raw.items():
            if k not in ("schema_version", "scenarios"):
                assert doc[k] == v, k
        assert doc["simulated"] == (raw["driver"]["kind"] == "fake")
        for a, b in zip(raw["scenarios"], doc["scenarios"]):
            assert _added_only(a, b)
            assert b["runs_spent"] == {"baseline": a["baseline"]["runs"], "patched": a["patched"]["runs"]}
    typed = ev.Evidence.from_json(doc)
    assert typed.to_json() == doc
    assert typed.verdict == raw["verdict"]
    assert [s.scenario for s in typed.scenarios] == [s["scenario"] for s in raw["scenarios"]]


def _added_only(old, new) -> bool:
    """`new` holds every value of `old` unchanged (dicts may gain keys)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _added_only(v, new[k]) for k, v in old.items())
    return old == new


def test_committed_evidence_exists():
    assert len(COMMITTED) >= 4


def test_write_validates_and_is_world_readable(tmp_path):
    good = evidence_doc()
    p = tmp_path / "e.json"
    old = os.umask(0o022)
    try:
        ev.write_evidence(p, ev.Evidence.from_json(good))
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    assert ev.load_evidence(p).verdict == "proven"
    bad = dict(good, verdict="maybe")
    with pytest.raises(UsageError, match="verdict"):
        ev.write_evidence(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()
    assert not list(tmp_path.glob(".evidence-*"))


@pytest.mark.parametrize("mutate,where", [
    (lambda d: d.pop("run_policy"), "run_policy"),
    (lambda d: d["run_policy"].update(rule="whenever"), "run_policy/rule"),
    (lambda d: d["scenarios"].append({"scenario": "no-colon", "control": False, "verdict": "proven",
                                      "baseline": {}, "patched": {}}), "scenarios/0"),
    (lambda d: d["runs"].append({"variant": "patched", "scenario": "r:s", "index": 0, "outcome": "fine"}), "runs/0/outcome"),
])
def test_reader_names_the_violation(tmp_path, mutate, where):
    d = evidence_doc()
    mutate(d)
    p = tmp_path / "e.json"
    p.write_text(json.dumps(d))
    with pytest.raises(UsageError, match=where.split("/")[0]) as exc:
        ev.load_evidence(p)
    assert where in str(exc.value)


def test_reader_refuses_other_documents(tmp_path):
    for text in ("[]", '{"schema_version": 3, "verdict": "proven"}', '{"kind": "lucepatch-bisect", "schema_version": 1, "verdict": "x"}'):
        p = tmp_path / "x.json"
        p.write_text(text)
        with pytest.raises(UsageError, match="not lucepatch evidence"):
            ev.load_evidence(p)
    with pytest.raises(UsageError, match="not JSON"):
        (tmp_path / "y.json").write_text("{")
        ev.load_evidence(tmp_path / "y.json")
