"""Retirement by behaviour (lucepatch.upstream.retire) on fixtures, with the simulated driver.

twobugs: an interposer with two independent bugs, each fixed by its own patch owning its own
scenario. Upstream then fixes bug 1 with a textually different change (no patch-id, no
content match): exactly the bug-1 patch is a retire candidate, the other is still needed.
fakehami + its no-op "fix" (patches/bad): the patched build still fails -> no-longer-effective.
"""

from __future__ import annotations

import importlib.util
import re
import shutil

import jsonschema
import pytest

from conftest import FIXTURES, REPO_ROOT, commit_all, init_repo, make_target
from lucepatch.errors import EnvironmentMissing
from lucepatch.target import load_target
from lucepatch.upstream.retire import (INCONCLUSIVE, NO_LONGER_EFFECTIVE, RETIRE, RETIRE_SCHEMA, STILL_NEEDED,
                                       Behaviour, classify, format_retire_table, retire_exit_code, retire_report)
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


def test_upstream_fixing_one_of_two_behaviours_retires_exactly_that_patch(twobugs):
    base, fixed = twobugs["commits"][:2]
    doc = retire_report(twobugs["target"], twobugs["upstream"], fixed, twobugs["cache"], "fake", 3)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    assert doc["upstream"]["commit"] == fixed and doc["simulated"] is True
    assert doc["retire_candidates"] == [LIMIT]
    assert doc["no_longer_effective"] == []
    by = _by(doc)
    lim, mem = by[LIMIT], by[MEMINFO]
    assert lim["status"] == RETIRE and "upstream fixed" in lim["reason"]
    # upstream's fix is a different text: no patch-id match, no content match -- only behaviour says so
    assert lim["textual"] is None and lim["applies"] is True
    [s] = lim["scenarios"]
    assert s["scenario"] == "twobugs:cumulative-limit"
    assert s["unpatched"]["behaviour"] == "pass" and s["unpatched"]["tally"]["runs"] == 3
    assert s["unpatched"]["control_ok"] is True
    assert mem["status"] == STILL_NEEDED
    [m] = mem["scenarios"]
    assert m["scenario"] == "twobugs:meminfo-limit"
    assert m["unpatched"]["behaviour"] == "fail" and m["unpatched"]["tally"]["failures"] == 3
    assert m["patched"]["behaviour"] == "pass"
    assert doc["summary"] == {RETIRE: 1, STILL_NEEDED: 1}
    assert doc["variants"]["unpatched"]["commit"] == fixed and doc["variants"]["unpatched"]["patches"] == []
    assert doc["variants"]["patched"]["patches"] == [LIMIT, MEMINFO]
    assert retire_exit_code(doc) == 0
    title, cols, rows = format_retire_table(doc)
    assert fixed[:12] in title and cols[-2:] == ["status", "why"]
    assert [r[0] for r in rows] == [LIMIT, MEMINFO] and rows[0][4] == RETIRE and rows[1][4] == STILL_NEEDED


def test_at_the_pinned_base_nothing_retires(twobugs):
    doc = retire_report(twobugs["target"], twobugs["upstream"], twobugs["commits"][0], twobugs["cache"], "fake", 2)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    assert doc["retire_candidates"] == []
    assert {p["name"]: p["status"] for p in doc["patches"]} == {LIMIT: STILL_NEEDED, MEMINFO: STILL_NEEDED}


def test_a_patch_that_no_longer_applies_is_still_judged_by_behaviour(twobugs):
    # commit 2 rewrites the line the limit patch changes: the patch conflicts, yet upstream's own
    # fix (commit 1) makes the behaviour pass unpatched -> still a retire candidate, flagged.
    reworded = twobugs["commits"][2]
    doc = retire_report(twobugs["target"], twobugs["upstream"], reworded, twobugs["cache"], "fake", 2)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    by = _by(doc)
    assert by[LIMIT]["applies"] is False and by[LIMIT]["status"] == RETIRE
    assert "no longer applies" in by[LIMIT]["scenarios"][0]["reason"]
    assert doc["variants"]["patched"]["left_out"] == [LIMIT]
    assert doc["variants"]["patched"]["patches"] == [MEMINFO]
    assert by[MEMINFO]["status"] == STILL_NEEDED


def test_conflicting_patch_whose_behaviour_upstream_did_not_fix(tmp_path):
    repo, commits = tb.upstream(tmp_path, ["reword-limit"])
    ws = tb.workspace(tmp_path, commits[0])
    t = load_target(resolve_workspace(ws), "twobugs")
    doc = retire_report(t, repo, commits[1], tmp_path / "cache", "fake", 2)
    by = _by(doc)
    assert by[LIMIT]["status"] == "conflict" and "rebase" in by[LIMIT]["reason"]
    assert by[MEMINFO]["status"] == STILL_NEEDED


def test_patches_without_scenarios_are_untested_and_nothing_is_built(tmp_path):
    repo, commits = tb.upstream(tmp_path, [])
    ws = tb.workspace(tmp_path, commits[0])
    for f in (ws / "patches" / "twobugs").glob("*.patch"):
        f.write_text(re.sub(r"(?m)^Reproducer: .*\n", "", f.read_text()))
    t = load_target(resolve_workspace(ws), "twobugs")
    doc = retire_report(t, repo, commits[0], tmp_path / "cache", "fake", 1)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    assert {p["status"] for p in doc["patches"]} == {"untested"}
    assert doc["variants"]["unpatched"]["built"] is False and not (tmp_path / "cache" / "builds").exists()


def test_unknown_ref_is_an_environment_error(twobugs):
    with pytest.raises(EnvironmentMissing):
        retire_report(twobugs["target"], twobugs["upstream"], "0" * 40, twobugs["cache"], "fake", 1)


def test_patched_failing_is_no_longer_effective(tmp_path):
    # fakehami with its no-op "fix" (Reproducer: async-sched): unpatched and patched both fail
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
    doc = retire_report(t, up, base, tmp_path / "cache", "fake", 2)
    jsonschema.validate(doc, RETIRE_SCHEMA)
    [p] = doc["patches"]
    assert p["status"] == NO_LONGER_EFFECTIVE
    assert doc["no_longer_effective"] == [p["name"]]
    scen = {s["scenario"]: s for s in p["scenarios"]}
    # a Reproducer: trailer without a scenario names every checked scenario of the reproducer
    assert set(scen) == {"async-sched:ctxless-async-alloc", "async-sched:ctxless-async-free", "async-sched:ctxless-sync-alloc"}
    assert scen["async-sched:ctxless-async-alloc"]["status"] == NO_LONGER_EFFECTIVE
    assert retire_exit_code(doc) == 1


def _b(state, control_ok=True, runs=3, failures=None):
    f = runs if failures is None and state == "fail" else (failures or 0)
    return Behaviour(state, control_ok, {"runs": runs, "pass": runs - f, "failures": f, "invalid": 0, "skipped": 0})


@pytest.mark.parametrize("unpatched,patched,applies,want", [
    (_b("pass"), _b("pass"), True, RETIRE),
    (_b("pass"), _b("fail"), True, RETIRE),  # flagged in the reason: the patch breaks upstream's fix
    (_b("fail"), _b("fail"), True, NO_LONGER_EFFECTIVE),
    (_b("fail"), _b("pass"), True, STILL_NEEDED),
    (_b("fail"), Behaviour("not-built", None), False, "conflict"),
    (_b("pass", control_ok=False), _b("pass"), True, INCONCLUSIVE),
    (_b("fail"), _b("pass", control_ok=False), True, INCONCLUSIVE),
    (_b("invalid"), _b("pass"), True, INCONCLUSIVE),
    (Behaviour("skipped", True), _b("pass"), True, "skipped"),
])
def test_classify(unpatched, patched, applies, want):
    status, why = classify(unpatched, patched, applies)
    assert status == want and why
    if unpatched.behaviour == "pass" and patched.behaviour == "fail":
        assert "FAILS" in why
