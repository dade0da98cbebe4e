"""`lucepatch bisect --reproducer R A..B` on the twobugs fixture, with the simulated driver.

History (first parent): c0 base (both bugs) .. c6, where c4 is upstream's own fix of bug 1 and
the other commits are harmless; bisect over c0..c6 on twobugs:cumulative-limit names c4.
"""

from __future__ import annotations

import importlib.util

import jsonschema
import pytest

from conftest import FIXTURES
from lucepatch.upstream.bisect import BISECT_SCHEMA, set_trailers

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")

_spec = importlib.util.spec_from_file_location("twobugs_fixture", FIXTURES / "twobugs" / "fixture.py")
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)

LIMIT = "fix-limit-cumulative.patch"


@pytest.fixture(scope="module")
def hist(tmp_path_factory):
    root = tmp_path_factory.mktemp("twobugs-bisect")
    repo, c = tb.upstream(root, ["one", "two", "three", "fix-limit", "five", "six"])
    assert len(c) == 7
    return {"root": root, "upstream": repo, "c": c, "cache": root / "cache"}


def bisect(cli, hist, ws, *args):
    return cli("--workspace", ws, "--cache-dir", hist["cache"], "bisect", "--source", hist["upstream"],
               "--driver", "fake", "--runs", "2", *args)


def test_names_the_commit_that_fixed_the_behaviour(cli, hist):
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-found")
    up = hist["upstream"]
    before = [tb.git(up, *a) for a in (["status", "--porcelain", "--ignored"], ["for-each-ref"], ["rev-parse", "HEAD"],
                                        ["worktree", "list"], ["stash", "list"])]
    res = bisect(cli, hist, ws, "--reproducer", "twobugs", "--scenario", "cumulative-limit", f"{c[0]}..{c[6]}")
    assert res.code == 0, res.err
    # the user's checkout is only read: no bisect refs, worktrees, build files or moved HEAD
    after = [tb.git(up, *a) for a in (["status", "--porcelain", "--ignored"], ["for-each-ref"], ["rev-parse", "HEAD"],
                                       ["worktree", "list"], ["stash", "list"])]
    assert after == before and not (up / ".git" / "BISECT_LOG").exists()
    # results on stdout: the probe table, then the answer as the last line
    assert res.out.strip().splitlines()[-1].startswith(f"fixed by {c[4]} allocator: count memory in use against the limit")
    assert c[4][:12] in res.out.split("fixed by")[0]


def test_json_document_and_probes(cli, hist):
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-json")
    res = bisect(cli, hist, ws, "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--json", f"{c[0]}..{c[6]}")
    assert res.code == 0, res.err
    doc = res.json["bisect"]
    jsonschema.validate(doc, BISECT_SCHEMA)
    assert res.json["verb"] == "bisect" and res.json["schema_version"] == 1
    assert doc["result"] == "found" and doc["direction"] == "fixed"
    assert doc["first"]["commit"] == c[4]
    assert doc["range"] == {"spec": f"{c[0]}..{c[6]}", "old": c[0], "new": c[6], "commits": 6}
    assert doc["scenarios"] == ["twobugs:cumulative-limit"] and doc["simulated"] is True
    states = {p["commit"]: p["state"] for p in doc["probes"]}
    assert states[c[0]] == "fail" and states[c[6]] == "pass" and states[c[4]] == "pass"
    assert states.get(c[3]) == "fail"  # the flip is pinned between two measured neighbours
    assert len(doc["probes"]) <= 5  # a search, not a sweep (7 commits)


def test_record_refuses_a_behaviour_flip_without_the_patchs_code(cli, hist):
    """c4 is upstream's own, textually different fix: the behaviour flips there, but nothing says
    upstream has the patch's code — behaviour alone never writes Applied-Upstream: (issue 26; the
    fixture tests/test_retire_adversarial.py records one that has the code)."""
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-record")
    pfile = ws / "patches" / "twobugs" / LIMIT
    raw = pfile.read_bytes()
    res = bisect(cli, hist, ws, "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--json",
                 "--record", "fix-limit-cumulative", f"{c[0]}..{c[6]}")
    assert res.code == 1, res.err
    assert res.json["bisect"]["result"] == "found" and res.json["bisect"]["first"]["commit"] == c[4]
    assert res.json["bisect"]["recorded"] is None
    assert f"nothing recorded in {LIMIT}" in res.err and "retire-candidate" in res.err
    assert f"{c[4][:12]} has none of the patch's code" in res.err
    assert pfile.read_bytes() == raw  # nothing written


def test_no_flip_is_inconclusive(cli, hist):
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-noflip")
    pfile = ws / "patches" / "twobugs" / "fix-meminfo-limit.patch"
    raw = pfile.read_bytes()
    res = bisect(cli, hist, ws, "--reproducer", "twobugs", "--scenario", "meminfo-limit", "--json",
                 "--record", "fix-meminfo-limit.patch", f"{c[0]}..{c[6]}")
    assert res.code == 1, res.err
    doc = res.json["bisect"]
    assert doc["result"] == "no-flip" and doc["first"] is None and "fails at both" in doc["reason"]
    assert pfile.read_bytes() == raw  # nothing recorded


def test_every_scenario_by_default_flips_only_when_all_pass(cli, hist):
    # without --scenario the behaviour is "every checked scenario passes": meminfo never does
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-all")
    res = bisect(cli, hist, ws, "--reproducer", "twobugs", "--json", f"{c[0]}..{c[6]}")
    assert res.code == 1
    doc = res.json["bisect"]
    assert doc["scenarios"] == ["twobugs:cumulative-limit", "twobugs:meminfo-limit"]
    assert doc["result"] == "no-flip"
    # ... and the answer names the scenario that did flip and how to bisect it alone (the README's
    # llama-vmm example answered a bare "no flip" this way: host-numa-create is fixed at 8c32de6)
    assert ("but cumulative-limit fails at " + c[0][:7] + " and passes at " + c[6][:7]) in doc["reason"]
    assert doc["reason"].endswith("bisect it alone with --scenario cumulative-limit")
    res = bisect(cli, hist, ws, "--reproducer", "twobugs", f"{c[0]}..{c[6]}")
    assert res.code == 1 and "--scenario cumulative-limit" in res.err


@pytest.mark.parametrize("spec", ["{c0}", "{c0}...{c6}", "nosuchref..{c6}", "{c6}..{c0}", "{c0}..{c0}", "..{c6}",
                                  "--upload-pack=x..{c6}"])
def test_bad_range_exits_2(cli, hist, spec):
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-bad")
    res = bisect(cli, hist, ws, "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--",
                 spec.format(c0=c[0], c6=c[6]))
    assert res.code == 2, (spec, res.err)
    assert "range" in res.err and "Traceback" not in res.err


@pytest.mark.parametrize("args,needle", [
    (["--reproducer", "nope"], "unknown reproducer"),
    (["--reproducer", "twobugs", "--scenario", "nope"], "no scenario"),
    (["--reproducer", "twobugs", "--scenario", "control"], "control"),
    (["--reproducer", "twobugs", "--record", "no-such.patch"], "not in twobugs's series"),
])
def test_bad_input_exits_2_before_building(cli, hist, args, needle):
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-badin")
    res = bisect(cli, hist, ws, *args, f"{c[0]}..{c[6]}")
    assert res.code == 2 and needle in res.err, res.err


def test_missing_source_exits_3(cli, hist, monkeypatch):
    c = hist["c"]
    ws = tb.workspace(hist["root"], c[0], name="ws-nosrc")
    monkeypatch.delenv("LUCEPATCH_SRC_TWOBUGS", raising=False)
    res = cli("--workspace", ws, "--cache-dir", hist["cache"], "bisect", "--reproducer", "twobugs", "--driver", "fake",
              f"{c[0]}..{c[6]}")
    assert res.code == 3 and "--source" in res.err


def _run(cli, tmp_path, repo, c, *extra):
    ws = tb.workspace(tmp_path, c[0])
    return cli("--workspace", ws, "--cache-dir", tmp_path / "cache", "bisect", "--source", repo, "--driver", "fake",
               "--runs", "1", "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--json", *extra,
               f"{c[0]}..{c[-1]}")


def test_unbuildable_commit_is_skipped(cli, tmp_path):
    # c3 does not build (c4 repairs it), c5 fixes the behaviour: the search steps around c3
    repo, c = tb.upstream(tmp_path, ["one", "two", "break-build", "unbreak-build", "fix-limit", "six"])
    res = _run(cli, tmp_path, repo, c)
    assert res.code == 0, res.err
    doc = res.json["bisect"]
    assert doc["first"]["commit"] == c[5]
    skipped = [p for p in doc["probes"] if p["state"] == "skip"]
    assert [p["commit"] for p in skipped] == [c[3]] and "does not build" in skipped[0]["why"]


def test_skipped_commits_hiding_the_flip_make_it_inconclusive(cli, tmp_path):
    # c3 breaks the build, c4 fixes the behaviour while still broken, c5 repairs the build:
    # the flip is in c3..c5 and nothing can tell which -> inconclusive, the candidates named
    repo, c = tb.upstream(tmp_path, ["one", "two", "break-build", "fix-limit", "unbreak-build", "six"])
    res = _run(cli, tmp_path, repo, c)
    assert res.code == 1, res.err
    doc = res.json["bisect"]
    assert doc["result"] == "inconclusive" and doc["first"] is None and doc["direction"] == "fixed"
    assert doc["candidates"] == c[3:6]
    assert "could not be judged" in doc["reason"]


def test_unbuildable_range_end_is_inconclusive(cli, tmp_path):
    repo, c = tb.upstream(tmp_path, ["one", "fix-limit", "break-build"])
    res = _run(cli, tmp_path, repo, c)
    assert res.code == 1
    doc = res.json["bisect"]
    assert doc["result"] == "inconclusive" and "cannot judge the range end" in doc["reason"]


def test_take_revert_refix_is_not_fixed_by_the_reverted_take(cli, tmp_path):
    """Issue 41: upstream takes the limit patch byte for byte (c2), reverts it (c3) and lands its own
    fix (c4). Before: `fixed by c2` after three probes, and --record wrote Applied-Upstream: c2 with
    the take's patch-id as its code signal. Now every transition is found and reported, the last fix
    (c4) is the answer, and nothing is recorded: c4 has none of the patch's code."""
    repo, c = tb.upstream(tmp_path, ["one", "take-limit", "revert-last", "fix-limit", "five"])
    ws = tb.workspace(tmp_path, c[0])
    pfile = ws / "patches" / "twobugs" / LIMIT
    raw = pfile.read_bytes()
    res = cli("--workspace", ws, "--cache-dir", tmp_path / "cache", "bisect", "--source", repo, "--driver", "fake",
              "--runs", "2", "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--json",
              "--record", LIMIT, f"{c[0]}..{c[-1]}")
    assert res.code == 1, res.err
    doc = res.json["bisect"]
    assert doc["result"] == "found" and doc["first"]["commit"] == c[4]
    assert [(t["commit"], t["direction"]) for t in doc["transitions"]] == [(c[2], "fixed"), (c[3], "broke"),
                                                                          (c[4], "fixed")]
    assert "not monotone, 3 transitions" in doc["reason"] and "of 6 commits probed" in doc["reason"]
    assert doc["recorded"] is None and f"{c[4][:12]} has none of the patch's code" in res.err
    assert pfile.read_bytes() == raw



def test_the_result_line_says_when_ref_is_broken_again(cli, tmp_path):
    """Issue 41: over c0..c2 the take (c2) fixes cumulative-limit; c3 reverts it, so REF (c4) fails
    again. The result line on stdout (what a script reads) says so and names the revert; before it
    read `fixed by c2 ...` alone, the revert only in the progress lines on stderr."""
    repo, c = tb.upstream(tmp_path, ["one", "take-limit", "revert-last", "five"])
    ws = tb.workspace(tmp_path, c[0])
    res = cli("--workspace", ws, "--cache-dir", tmp_path / "cache", "bisect", "--source", repo, "--driver", "fake",
              "--runs", "1", "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--ref", c[4],
              f"{c[0]}..{c[2]}")
    assert res.code == 0, res.err
    last = res.out.strip().splitlines()[-1]
    assert last.startswith(f"fixed by {c[2]} ") and last.endswith(
        f"; broken again at REF {c[4][:12]} by {c[3][:12]} Revert \"fix(limit): count what is already allocated "
        f"against the limit\""), last

def test_set_trailers_keeps_the_diff():
    raw = (FIXTURES / "twobugs" / "patches" / LIMIT).read_bytes()
    out = set_trailers(raw, [("Applied-Upstream", "a" * 40)])
    assert out.split(b"\n---\n", 1)[1] == raw.split(b"\n---\n", 1)[1]
    assert b"Reproducer: twobugs:cumulative-limit\nApplied-Upstream: " + b"a" * 40 + b"\n---\n" in out
