"""Retirement by behaviour (lucepatch.upstream.retire, issue 11's rule) on the twobugs and fakehami
fixtures, with the simulated driver (the minihami fixture in test_retire_rule.py covers the rest).

twobugs: an interposer with two independent bugs, each fixed by its own patch owning its own
scenario. Upstream then fixes bug 1 with a textually different change (no patch-id, no
content match): exactly the bug-1 patch is a retire-candidate (behaviour alone, needs review —
never superseded without a code signal), the other is still needed.
fakehami + its no-op "fix" (patches/bad): no scenario ever distinguishes it -> untestable.
"""

from __future__ import annotations

import importlib.util
import re
import shutil

import jsonschema
import pytest

from conftest import FIXTURES, REPO_ROOT, commit_all, init_repo, make_target
from lucepatch.engine import retirement
from lucepatch.errors import EnvironmentMissing
from lucepatch.target import load_target
from lucepatch.upstream.retire import (CONFLICT, RETIRE_CANDIDATE, RETIRE_SCHEMA, STILL_NEEDED, UNTESTABLE,
                                       format_retire_table, retire_exit_code, retire_report)
from lucepatch.workspace import resolve_workspace

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")

_spec = importlib.util.spec_from_file_location("twobugs_fixture", FIXTURES / "twobugs" / "fixture.py")
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)

LIMIT = "fix-limit-cumulative.patch"
MEMINFO = "fix-meminfo-limit.patch"


@pytest.fixture(scope="module")
def twobugs(tmp_path_factory):
    root = tmp_path_factory.mktemp("twobugs-retire")
    repo, commits = tb.upstream(root, ["fix-limit", "reword-limit"])
    ws = tb.workspace(root, commits[0])
    return {"root": root, "upstream": repo, "commits": commits, "ws": ws, "cache": root / "cache",
            "target": load_target(resolve_workspace(ws), "twobugs")}


def _by(doc):
    return {p["name"]: p for p in doc["patches"]}


def test_upstream_fixing_one_of_two_behaviours_makes_exactly_that_patch_a_candidate(twobugs):
    """Behaviour alone (issue 26): upstream's textually different fix makes the bug-1 patch a
    retire-candidate that needs review, never superseded — no code signal says upstream has it."""
    base, fixed = twobugs["commits"][:2]
    doc = retire_report(twobugs["target"], twobugs["upstream"], fixed, twobugs["cache"], "fake", 10)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    assert doc["upstream"]["commit"] == fixed and doc["upstream"]["base"] == base and doc["simulated"] is True
    assert doc["superseded"] == [] and doc["retire_candidates"] == [LIMIT] and doc["invariant"] == retirement.INVARIANT
    assert doc["no_longer_effective"] == []
    by = _by(doc)
    lim, mem = by[LIMIT], by[MEMINFO]
    assert lim["status"] == RETIRE_CANDIDATE and lim["needed"] == "retire-candidate"
    assert lim["reason"].startswith("behaviour alone — no code signal")
    assert "identical with and without it" in lim["reason"] and "at the base it made a difference on " \
        "twobugs:cumulative-limit" in lim["reason"]
    # upstream's fix is a different text: no patch-id match, no content match, no 3-way no-op
    assert lim["code_signal"] is None and lim["applies"] is True
    assert lim["judged"][0] == "twobugs:cumulative-limit"
    kinds = {(d["at"], d["pair"]) for d in lim["scenarios"] if d["scenario"] == "twobugs:cumulative-limit"}
    assert kinds == {("ref", "add-one"), ("ref", "leave-one-out"), ("base", "add-one"), ("base", "leave-one-out")}
    assert all(d["kind"] == "identical" for d in lim["scenarios"] if d["at"] == "ref")
    # what the reviewer reads: the hunk, REF's version of the function it changes, the runs
    rv = lim["review"]
    assert [(h["file"], h["line"]) for h in rv["hunks"]] == [("src/twobugs.c", 61)]
    assert "+    return limit != 0 && used + size > limit;" in rv["hunks"][0]["text"]
    [fn] = rv["ref_functions"]
    assert "static int over_limit(size_t size) {" in fn["text"] and "return limit != 0 && size > limit;" in fn["text"]
    assert {r["pair"] for r in rv["runs"]} == {"add-one", "leave-one-out"}
    assert mem["status"] == STILL_NEEDED and mem["scenario"] == "twobugs:meminfo-limit" and "review" not in mem
    assert "add-one" in mem["reason"] and "-> pass" in mem["reason"]
    assert doc["summary"] == {RETIRE_CANDIDATE: 1, STILL_NEEDED: 1}
    assert retire_exit_code(doc) == 0
    title, cols, rows = format_retire_table(doc)
    assert fixed[:12] in title and cols == ["patch", "status", "decided by", "why"]
    assert [r[0] for r in rows] == [LIMIT, MEMINFO] and rows[0][1] == "retire-candidate (needs review)"
    assert rows[1][1] == STILL_NEEDED


def test_at_the_pinned_base_nothing_retires(twobugs):
    doc = retire_report(twobugs["target"], twobugs["upstream"], twobugs["commits"][0], twobugs["cache"], "fake", 10)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    assert doc["superseded"] == []
    assert {p["name"]: p["status"] for p in doc["patches"]} == {LIMIT: STILL_NEEDED, MEMINFO: STILL_NEEDED}


def test_a_patch_that_no_longer_applies_is_never_superseded(twobugs):
    # commit 2 rewrites the line the limit patch changes: the patch conflicts. Upstream's own fix
    # (commit 1) makes the behaviour pass without it, but add-one and leave-one-out need the patch
    # applied: conflict (rebase it to judge), never superseded
    reworded = twobugs["commits"][2]
    doc = retire_report(twobugs["target"], twobugs["upstream"], reworded, twobugs["cache"], "fake", 10)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    by = _by(doc)
    # one name for the state (issue 36 item 5): `conflict` in the status and in `needed`
    assert by[LIMIT]["applies"] is False and by[LIMIT]["status"] == CONFLICT and by[LIMIT]["needed"] == "conflict"
    assert "already behaves as it did with it at the base" in by[LIMIT]["reason"] and "rebase it" in by[LIMIT]["reason"]
    full = next(b for b in doc["builds"] if b["name"] == f"{reworded[:12]}+series")
    assert full["patches"] == [MEMINFO]
    assert by[MEMINFO]["status"] == STILL_NEEDED


def test_conflicting_patch_whose_behaviour_upstream_did_not_fix(tmp_path):
    repo, commits = tb.upstream(tmp_path, ["reword-limit"])
    ws = tb.workspace(tmp_path, commits[0])
    t = load_target(resolve_workspace(ws), "twobugs")
    doc = retire_report(t, repo, commits[1], tmp_path / "cache", "fake", 10)
    by = _by(doc)
    assert by[LIMIT]["status"] == STILL_NEEDED and by[LIMIT]["applies"] is False
    assert "rebase it" in by[LIMIT]["reason"] and by[LIMIT]["scenario"] == "twobugs:cumulative-limit"
    assert by[MEMINFO]["status"] == STILL_NEEDED


def test_lines_present_but_inactive_keep_the_patch_in_a_rebase(tmp_path, cli):
    """Issue 39, case 3, end to end on the simulated driver: upstream's tree has the limit patch's
    line, inside `#if 0` (a content match), so its behaviour is not active. `verify --retire REF`
    measures the patch still needed; the rebase's dry run then keeps it and says why. Before: the dry
    run marked it `absorbed` (content-match) while its own `needed` column said still-needed.
    `status` (at REF: the upstream's HEAD) and `check --onto REF` read the same saved report through
    the same judge: before it exists they say the code alone decided; after, they keep it with the
    rebase's words. Before: both said `already-upstream content-match` with no word on behaviour."""
    repo, commits = tb.upstream(tmp_path, ["inactive-limit"])
    ws = tb.workspace(tmp_path, commits[0])
    cache = tmp_path / "cache"
    alone = "by code alone (no retire report at REF: behaviour not measured)"
    r = cli("--workspace", ws, "--cache-dir", cache, "status", "twobugs", "--source", repo, "--json")
    st = _by(r.json)[LIMIT]
    assert r.code == 0 and st["status"] == "already-upstream" and st["signal"] == "content-match", r.err
    assert st["detail"].endswith(alone), st
    r = cli("--workspace", ws, "--cache-dir", cache, "check", "twobugs", "--source", repo, "--onto", commits[1], "--json")
    ck = _by(r.json)[LIMIT]
    assert r.code == 0 and ck["status"] == "already-upstream" and alone in ck["detail"], ck
    r = cli("--workspace", ws, "--cache-dir", cache, "verify", "--retire", commits[1], "--target", "twobugs",
            "--source", repo, "--driver", "fake", "--json")
    assert r.code in (0, 1), r.err
    lim = _by(r.json)[LIMIT]
    assert lim["status"] == STILL_NEEDED and lim["code_signal"]["signal"] == "content-match"
    assert lim["reason"].startswith("kept: upstream has the lines (content-match) but behaviour at REF still needs it: "
                                    "does not apply at")
    r = cli("--workspace", ws, "--cache-dir", cache, "rebase", "twobugs", "--source", repo, "--onto", commits[1],
            "--dry-run", "--json")
    row = _by(r.json)[LIMIT]
    assert row["action"] != "absorbed" and row["needed"]["needed"] == "still-needed" and row["needed"]["simulated"]
    assert row["detail"].startswith(f"kept: upstream has the lines (content-match {commits[1][:12]}) but "
                                    "twobugs:cumulative-limit still fails at REF without the patch (clean error")
    assert f"(10/10) on {commits[1][:12]}+build-only" in row["detail"]
    assert row["detail"].split("; ")[0].endswith("simulated driver)")
    kept = row["detail"].split("; ")[0]  # the rebase's words, which status and check now print
    r = cli("--workspace", ws, "--cache-dir", cache, "status", "twobugs", "--source", repo, "--json")
    st = _by(r.json)[LIMIT]
    assert r.code == 1 and st["status"] == "conflict" and st["detail"].startswith(kept + "; "), (r.err, st)
    r = cli("--workspace", ws, "--cache-dir", cache, "check", "twobugs", "--source", repo, "--onto", commits[1], "--json")
    ck = _by(r.json)[LIMIT]
    assert r.code == 1 and ck["status"] == "conflict" and ck["detail"].startswith(kept + "; "), (r.err, ck)


def test_patches_without_trailers_are_judged_through_the_coverage_map(tmp_path):
    repo, commits = tb.upstream(tmp_path, [])
    ws = tb.workspace(tmp_path, commits[0])
    for f in (ws / "patches" / "twobugs").glob("*.patch"):
        f.write_text(re.sub(r"(?m)^Reproducer: .*\n", "", f.read_text()))
    t = load_target(resolve_workspace(ws), "twobugs")
    doc = retire_report(t, repo, commits[0], tmp_path / "cache", "fake", 10)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    by = _by(doc)
    # the map finds what each patch's code runs under; the measured difference keeps both
    assert "twobugs:cumulative-limit" in by[LIMIT]["judged"] and "twobugs:meminfo-limit" in by[MEMINFO]["judged"]
    assert by[LIMIT]["status"] == by[MEMINFO]["status"] == STILL_NEEDED


def test_no_reproducer_for_the_target_means_untestable_and_nothing_built(tmp_path):
    repo, commits = tb.upstream(tmp_path, [])
    ws = tb.workspace(tmp_path, commits[0])
    shutil.rmtree(ws / "reproducers" / "twobugs")
    t = load_target(resolve_workspace(ws), "twobugs")
    doc = retire_report(t, repo, commits[0], tmp_path / "cache", "fake", 10)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    assert {p["status"] for p in doc["patches"]} == {UNTESTABLE}
    assert doc["builds"] == [] and not (tmp_path / "cache" / "builds").exists()


def test_unknown_ref_is_an_environment_error(twobugs):
    with pytest.raises(EnvironmentMissing):
        retire_report(twobugs["target"], twobugs["upstream"], "0" * 40, twobugs["cache"], "fake", 10)


def test_a_fix_no_scenario_ever_distinguishes_is_untestable(tmp_path):
    # fakehami with its no-op "fix" (Reproducer: async-sched): identical with and without it, at the
    # base too -- the positive control fails, so it is untestable, never superseded
    up = init_repo(tmp_path / "upstream")
    shutil.copytree(FIXTURES / "fakehami" / "src", up / "src")
    shutil.copy(FIXTURES / "fakehami" / "CMakeLists.txt", up / "CMakeLists.txt")
    base = commit_all(up, "fakehami base")
    ws = tmp_path / "ws"
    make_target(ws, "fakehami", base, sorted((FIXTURES / "fakehami" / "patches" / "bad").glob("*.patch")), build=tb.BUILD)
    shutil.copytree(REPO_ROOT / "reproducers" / "common", ws / "reproducers" / "common")
    shutil.copytree(REPO_ROOT / "reproducers" / "async-sched", ws / "reproducers" / "async-sched")
    toml = ws / "reproducers" / "async-sched" / "reproducer.toml"
    toml.write_text(re.sub(r'(?m)^target = ".*"$', 'target = "fakehami"', toml.read_text()))
    t = load_target(resolve_workspace(ws), "fakehami")
    doc = retire_report(t, up, base, tmp_path / "cache", "fake", 10)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    [p] = doc["patches"]
    assert p["status"] == UNTESTABLE and "no scenario distinguishes it at the base" in p["reason"]
    # a Reproducer: trailer without a scenario names every checked scenario of the reproducer
    assert set(p["judged"]) >= {"async-sched:ctxless-async-alloc", "async-sched:ctxless-async-free",
                                "async-sched:ctxless-sync-alloc"}
    # the bug the no-op leaves in place is still failing on REF + series
    assert "async-sched:ctxless-async-alloc" in {s["scenario"] for s in doc["still_failing"]}
