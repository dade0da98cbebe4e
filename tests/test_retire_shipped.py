"""The shipped workspace works (issue 26): `verify --coverage-map`, `verify --retire` and
`status --behaviour` on the packaged workspace (what the wheel ships as lucepatch/_workspace: run
from a folder with no workspace above it) against the real HAMi-core history
(LUCEPATCH_SRC_HAMI_CORE), simulated driver.

Every reproducer kind takes part: the C reproducers are compiled and run, the workload reproducers
(ctypes clients, PyTorch, ggml) run as verify runs them or are skipped with the reason their
requirements give — never compiled as C (before: "reproducer ctypes-clients does not compile").
To keep CI short the retirement check judges with async-sched (C), ctypes-meminfo (a workload that
runs on the simulated driver) and ggml-client (a workload that needs the real driver: skipped),
once, at the pin; the map covers three C reproducers and every workload reproducer (one coverage
build, each scenario once). The map of every reproducer is docs/verbs.md's block, which
tests/test_docs_commands.py runs as written (here it took 102 s alone and checked no other kind).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest

from conftest import REPO_ROOT
from lucepatch.engine import retirement
from lucepatch.target import load_target
from lucepatch.upstream import retire as rt
from lucepatch.workspace import resolve_workspace

SRC = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
PIN = "52f33fc7fa1fbb3f08148ab076d0e7447bec7f2a"  # the main line's base (upstream main 2026-07-23, issue 36)
SELECTED = ["async-sched", "ctypes-meminfo", "ggml-client"]
WORKLOADS = {"ctypes-clients", "ctypes-meminfo", "torch-clients", "ggml-client", "ggml-vmm-pool"}
MAPPED = ["async-sched", "meminfo-null", "vmm-release", *sorted(WORKLOADS)]  # every kind of reproducer

pytestmark = [pytest.mark.skipif(not SRC, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout"),
              pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    root = tmp_path_factory.mktemp("shipped")
    clone = root / "hami-core"  # status reads HEAD: a private clone at the pin, the given checkout only read
    subprocess.run(["git", "clone", "-q", "--no-checkout", SRC, str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "--detach", PIN], check=True)
    empty = root / "empty"  # no lucepatch.toml above it: the packaged workspace
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("LUCEPATCH_WORKSPACE", "LUCEPATCH_CACHE")}
    env["PYTHONPATH"] = str(REPO_ROOT)

    def lp(*args):
        r = subprocess.run([sys.executable, "-m", "lucepatch", "--cache-dir", str(root / "cache"), *map(str, args)],
                           cwd=empty, env=env, capture_output=True, text=True, timeout=1500)
        return r.returncode, (json.loads(r.stdout) if r.stdout.strip().startswith("{") else None), r.stderr

    picks = [a for n in SELECTED for a in ("--reproducer", n)]
    mapped = [a for n in MAPPED for a in ("--reproducer", n)]
    return {
        "map": lp("verify", "--coverage-map", "--target", "hami-core", *mapped, "--source", clone, "--driver", "fake",
                  "--json"),
        "retire": lp("verify", "--retire", "HEAD", "--target", "hami-core", *picks, "--source", clone, "--driver",
                     "fake", "--json"),
        "status": lp("status", "hami-core", "--source", clone, "--behaviour", "--json"),
    }


def test_coverage_map_runs_every_reproducer_kind_on_the_packaged_workspace(shipped):
    rc, doc, err = shipped["map"]
    assert rc == 0, err[-3000:]
    assert "does not compile" not in err
    assert doc["workspace"]["origin"] == "packaged" and doc["ref"] == PIN
    scen = doc["scenarios"]
    repros = {k.split(":")[0] for k in scen}
    assert repros == set(MAPPED)
    for key, d in scen.items():
        # ran (coverage complete or conservatively incomplete) or skipped with a reason; nothing else
        assert d["complete"] or d.get("skipped") or d["outcome"] in ("crash", "timeout"), (key, d)
        if d.get("skipped"):
            assert d["why"] and not d["hunks"], key
    ran = {k.split(":")[0] for k, d in scen.items() if d["complete"]}
    skipped = {k.split(":")[0] for k, d in scen.items() if d.get("skipped")}
    assert {"ctypes-clients", "ctypes-meminfo"} <= ran  # workloads on the simulated driver: run, coverage read
    assert {"ggml-client", "ggml-vmm-pool"} <= skipped  # need the real driver: skipped, with the reason
    assert all("needs the real CUDA driver" in scen[k]["why"] for k in scen if k.startswith("ggml-client:"))


def test_retire_judges_with_c_and_workload_reproducers_on_the_packaged_workspace(shipped):
    rc, doc, err = shipped["retire"]
    assert rc == 0, err[-3000:]
    jsonschema.validate(doc, rt.RETIRE_SCHEMA)
    assert doc["workspace"]["origin"] == "packaged" and doc["invariant"] == retirement.INVARIANT
    assert doc["upstream"]["commit"] == doc["upstream"]["base"] == PIN and doc["simulated"] is True
    assert sorted(r["name"] for r in doc["reproducers"]) == sorted(SELECTED)
    by = {p["name"]: p for p in doc["patches"]}
    # at the pin nothing goes; every patch a selected scenario shows needed is still-needed
    assert doc["superseded"] == [] and doc["retire_candidates"] == []
    assert {p["status"] for p in by.values()} <= {rt.STILL_NEEDED, rt.UNTESTABLE, rt.NOT_JUDGED}
    t = load_target(resolve_workspace(REPO_ROOT), "hami-core")
    judged = [p.name for p in t.patches if p.reproducers and {r for r, _ in p.reproducers} <= set(SELECTED)]
    assert len(judged) >= 2  # the patches whose Reproducer: trailers name only selected reproducers
    assert {n: by[n]["status"] for n in judged} == {n: rt.STILL_NEEDED for n in judged}
    assert sum(p["status"] == rt.STILL_NEEDED for p in by.values()) >= 5
    # the workload that runs on the simulated driver decides for the patch it names
    meminfo = next(p for n, p in by.items() if n.startswith("fix-memory-cumemgetinfo-v2"))
    assert meminfo["status"] == rt.STILL_NEEDED and meminfo["scenario"].startswith("ctypes-meminfo:")
    # the one that needs the real driver is skipped with its reason, in the map the judgement used
    cov = doc["coverage"]["scenarios"]
    assert all(cov[k].get("skipped") and "needs the real CUDA driver" in cov[k]["why"]
               for k in cov if k.startswith("ggml-client:"))
    # what this run could not judge says so and names the reproducers it was not judged on
    for p in by.values():
        if p["status"] == rt.NOT_JUDGED:
            assert "(--reproducer), not on" in p["reason"]
    assert doc["saved"]


def test_status_behaviour_reads_the_saved_report_on_the_packaged_workspace(shipped):
    rc, doc, err = shipped["status"]
    assert rc == 0, err[-3000:]
    assert doc["workspace"]["origin"] == "packaged" and doc["head"] == PIN
    assert "retire check of" not in err  # the report verify --retire HEAD saved, not a new judgement
    _, ret, _ = shipped["retire"]
    want = {p["name"]: p["status"] for p in ret["patches"]}
    got = {r["name"]: r["behaviour"]["status"] for r in doc["patches"]}
    assert got == want
    assert not any(r["signal"] == "behaviour" for r in doc["patches"])  # nothing already upstream by behaviour
