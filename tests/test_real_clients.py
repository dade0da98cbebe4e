"""The "real clients" table (lucepatch/upstream/real_clients.py): rendered from workload evidence into
the README and the HAMi-core PR body; only real-driver evidence is accepted."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO_ROOT, evidence_doc
from lucepatch.errors import CheckFailed
from lucepatch.upstream import real_clients as rc

EVIDENCE_DIR = REPO_ROOT / "docs" / "evidence"
# the table's order: ref vs ref first, then pin vs series (the README command lists them so)
TABLE = ["torch-clients-nccl-refs.h200.json", "torch-clients-threadpool.h200.json",
         "torch-clients-guards.h200.json", "ctypes-clients.h200.json",
         # issue 17 item 4 (tools/gpu_session.sh ggml-client): e3c3477 vs the pin, the pin vs the series
         "ggml-client-refs.h200.json", "ggml-client.h200.json"]


def _doc(driver_kind="real"):
    doc = evidence_doc(driver_kind=driver_kind)
    doc["reproducers"] = [{"name": "torch-clients", "hash": "0" * 64, "kind": "workload"}]
    doc["series"]["patches"] = [{"name": "build.patch", "patch_id": "a", "build_only": True},
                                {"name": "fix.patch", "patch_id": "b", "build_only": False}]
    doc["variants"]["baseline"].update({"from": "ref", "ref": "e3c3477", "base": "e3c3477" + "0" * 33})
    doc["variants"]["patched"].update({"from": "series", "base": "8f3a89c" + "0" * 33,
                                       "patches": ["build.patch", "fix.patch"]})
    doc["driver"]["libcuda"] = {"path": "/usr/lib/libcuda.so.580.159.04", "sha256": "0" * 64}

    def tally(runs, failures, outcomes, first_error=""):
        return {"runs": runs, "pass": runs - failures, "failures": failures, "invalid": 0, "skipped": 0,
                "outcomes": outcomes, "first_error": first_error}

    doc["scenarios"] = [
        {"scenario": "torch-clients:driver", "control": True, "verdict": "pass", "baseline": tally(10, 0, {"pass": 10}),
         "patched": tally(10, 0, {"pass": 10}), "reproducer": "torch-clients"},
        {"scenario": "torch-clients:nccl-allreduce-default", "control": False, "verdict": "proven",
         "baseline": tally(10, 10, {"crash": 10}, "[HAMI-core ERROR (pid:1 thread=2 x.c:1)]: Illegal device id: 9"),
         "patched": tally(10, 0, {"pass": 10}), "reproducer": "torch-clients",
         "fingerprint": {"issue": "Project-HAMi/HAMi-core#187", "summary": "matches Project-HAMi/HAMi-core#187"}},
        {"scenario": "torch-clients:two-rank-threads-async", "control": False, "verdict": "skipped",
         "reason": "not run on this machine: needs 2 GPUs; the driver reports 1",
         "baseline": {**tally(10, 0, {"skipped": 10}), "skipped": 10},
         "patched": {**tally(10, 0, {"skipped": 10}), "skipped": 10}, "reproducer": "torch-clients"},
    ]
    doc["runs"] = [{"variant": "baseline", "scenario": "torch-clients:nccl-allreduce-default", "index": i,
                    "outcome": "crash", "signal": "SIGSEGV"} for i in range(10)]
    return doc


def test_rows_say_what_each_side_ran_and_did():
    rows = rc.rows([_doc()])
    # the reproducer is part of the name: ctypes-clients and torch-clients share pattern names
    assert [r["client pattern"] for r in rows] == ["`torch-clients:nccl-allreduce-default`",
                                                   "`torch-clients:two-rank-threads-async`"]
    nccl, two = rows
    assert nccl["baseline"] == "`e3c3477`" and nccl["patched"] == "`8f3a89c` + series"
    assert nccl["baseline result"] == ("10/10 failed (10 crash, SIGSEGV): `Illegal device id` — "
                                       "matches Project-HAMi/HAMi-core#187")
    assert nccl["patched result"] == "0/10 failed" and nccl["verdict"] == "proven"
    assert nccl["GPU, driver"] == "NVIDIA H200, 580.159.04 (CUDA 13.0)"
    assert two["baseline result"] == "skipped" and two["verdict"] == "skipped: needs 2 GPUs; the driver reports 1"


def test_markdown_is_a_table_with_a_row_per_pattern():
    md = rc.markdown([_doc()])
    assert md.startswith("### Real clients")
    table = [l for l in md.splitlines() if l.startswith("|")]
    assert table[0] == "| " + " | ".join(rc.COLUMNS) + " |" and len(table) == 2 + 2


def test_only_real_driver_workload_evidence_is_accepted(tmp_path):
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps(_doc("fake")))
    with pytest.raises(CheckFailed, match="not real-driver evidence"):
        rc.load([sim], target="hami-core", repro_hashes={})
    c_only = _doc()
    c_only["reproducers"][0]["kind"] = "c"
    p = tmp_path / "c.json"
    p.write_text(json.dumps(c_only))
    with pytest.raises(CheckFailed, match="no workload reproducer"):
        rc.load([p], target="hami-core", repro_hashes={})
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_doc()))
    with pytest.raises(CheckFailed, match="reproducer torch-clients changed"):
        rc.load([good], target="hami-core", repro_hashes={"torch-clients": "1" * 64})
    assert len(rc.load([good], target="hami-core", repro_hashes={"torch-clients": "0" * 64})) == 1


def test_evidence_page_block_is_the_rendering_of_the_committed_evidence():
    text = (REPO_ROOT / "docs" / "evidence.md").read_text()
    block = re.search(r"<!-- real-clients:begin -->\n(.*?)<!-- real-clients:end -->", text, re.S).group(1)
    from lucepatch.verify.reproducer import list_reproducers
    from lucepatch.workspace import Workspace

    hashes = {r.name: r.hash for r in list_reproducers(Workspace(REPO_ROOT, "flag"))}
    assert {"torch-clients", "ctypes-clients"} <= set(hashes)
    present = [EVIDENCE_DIR / n for n in TABLE if (EVIDENCE_DIR / n).is_file()]
    if not present:
        assert block.startswith("*Pending the H200 run.*")
        for n in TABLE:  # the command that fills it names every file
            assert f"docs/evidence/{n}" in block.replace("\n", " ")
        return
    assert block == rc.markdown(rc.load(present, target="hami-core", repro_hashes=hashes))


def test_pr_body_carries_the_real_clients_table(cli, tmp_path):
    from test_pr import AUTHOR, GOOD_C, _target_with

    msg = "fix(a): return two\n\nBecause.\n\nSigned-off-by: Fixer <fixer@example.invalid>"
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, msg)], upstream="https://github.com/Project-HAMi/HAMi-core",
                      author_env=AUTHOR, extra='[pr]\nrelease_note = "Fix a."\n')
    doc = _doc()
    doc["target"] = "toy"
    ev = tmp_path / "torch.json"
    ev.write_text(json.dumps(doc))
    r = cli("--workspace", fx["ws"], "pr", "toy", "--source", fx["up"], "--out", tmp_path / "out", "--no-evidence",
            "--real-clients", ev)
    assert r.code == 0, r.err
    body = (tmp_path / "out" / "pr-body.md").read_text()
    assert "### Real clients" in body and "| `torch-clients:nccl-allreduce-default` | `e3c3477` | `8f3a89c` + series |" in body
    # simulated evidence is refused with one line
    doc["driver"]["kind"] = "fake"
    ev.write_text(json.dumps(doc))
    r = cli("--workspace", fx["ws"], "pr", "toy", "--source", fx["up"], "--out", tmp_path / "out2", "--no-evidence",
            "--real-clients", ev)
    assert r.code == 1 and "not real-driver evidence" in r.err and not (tmp_path / "out2").exists()
