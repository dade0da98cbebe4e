"""Retirement you can trust (issue 26): adversarial upstreams never make a patch `superseded` without
a code signal that upstream contains its change.

The partfix fixture (tests/fixtures/partfix/fixture.py): one interposer bug (the limit check ignores
what is in use), one patch, and one upstream branch per way an upstream can look fixed — the patch
itself (patch-id), the same line with its comment reworded (content match), respaced (patch-id, the
patch conflicts), a different complete fix, a fix of large requests only (right at the scenario's
default 600 MiB, wrong at its 100 MiB sweep point), an unrelated cap that hides the symptom, the code
moved to another file (bug and all, or fixed), and the fix's line copied where nothing calls it.
Simulated driver, 10 fixed runs per side.
"""

from __future__ import annotations

import importlib.util
import shutil

import jsonschema
import pytest

from conftest import FIXTURES, cache_sharing_builds
from lucepatch.engine import needed, retirement
from lucepatch.series import parse_patch
from lucepatch.target import load_target
from lucepatch.upstream import retire as rt
from lucepatch.workspace import resolve_workspace

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")

_spec = importlib.util.spec_from_file_location("partfix_fixture", FIXTURES / "partfix" / "fixture.py")
pf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pf)
P = pf.PATCH

# upstream -> (status, code signal): the labels the closing note of issue 26 shows
EXPECTED = {
    "exact": (rt.SUPERSEDED, "patch-id"),
    "reformatted": (rt.SUPERSEDED, "content-match"),
    "respaced": (rt.CONFLICT, "patch-id"),
    "equivalent": (rt.RETIRE_CANDIDATE, None),
    "partial": (rt.STILL_NEEDED, None),
    "mask": (rt.STILL_NEEDED, None),
    "move": (rt.STILL_NEEDED, None),
    "movefix": (rt.CONFLICT, None),
    "decoy": (rt.STILL_NEEDED, None),
}


@pytest.fixture(scope="module")
def adv(tmp_path_factory):
    root = tmp_path_factory.mktemp("partfix-retire")
    repo, c = pf.upstream(root)
    ws = pf.workspace(root, c["base"])
    t = load_target(resolve_workspace(ws), "partfix")
    cache = root / "cache"
    docs = {name: rt.retire_report(t, repo, c[name], cache, "fake", 10) for name in pf.UPSTREAMS}
    return {"root": root, "repo": repo, "c": c, "ws": ws, "t": t, "cache": cache, "docs": docs}


def _row(doc) -> dict:
    [row] = doc["patches"]
    return row


def test_labels_per_adversarial_upstream(adv):
    got = {}
    for name, doc in adv["docs"].items():
        jsonschema.validate(doc, rt.RETIRE_SCHEMA)
        row = _row(doc)
        got[name] = (row["status"], (row["code_signal"] or {}).get("signal"))
        # the invariant itself, on every report: superseded only with a code signal
        assert row["status"] != rt.SUPERSEDED or retirement.is_code_signal(row["code_signal"]), name
        assert doc["invariant"] == retirement.INVARIANT
    assert got == EXPECTED


def test_partial_and_masked_fixes_are_found_by_the_input_sweep(adv):
    for name in ("partial", "mask"):
        row = _row(adv["docs"][name])
        # identical at the scenario's default (600 MiB) — the old rule's "superseded" — and different at 100 MiB
        assert "identical with and without it" in row["reason"]
        assert row["reason"].startswith("input sweep, ") and row["scenario"] == "partfix:cumulative@part=104857600"
        assert "allocation 11 of 104857600 bytes (past the 1 GiB limit): expected CUDA_ERROR_OUT_OF_MEMORY, got " \
               "CUDA_SUCCESS" in row["reason"]
        points = {(d["scenario"], d["pair"]): d["kind"] for d in row["sweep"]}
        assert points == {("partfix:cumulative@part=104857600", "add-one"): "different",
                          ("partfix:cumulative@part=104857600", "leave-one-out"): "different"}
    # a complete fix behaves alike at every point: the sweep adds evidence to the candidate, nothing more
    eq = _row(adv["docs"]["equivalent"])
    assert {d["kind"] for d in eq["sweep"]} == {"identical"} and "input sweep: identical at 1 more point" in eq["reason"]
    assert eq["status"] == rt.RETIRE_CANDIDATE


def test_without_the_sweep_a_partial_fix_is_a_candidate_never_superseded(adv):
    """The issue's case: every line of the patch runs, the judged inputs behave alike at REF — the
    rule of issue 11 called it superseded. Without the sweep (no points to find the other inputs) it
    is a retire-candidate: behaviour alone is never a code signal."""
    for name in ("partial", "mask", "equivalent"):
        doc = rt.retire_report(adv["t"], adv["repo"], adv["c"][name], adv["cache"], "fake", 10, sweep=False)
        row = _row(doc)
        assert row["status"] == rt.RETIRE_CANDIDATE and row["needed"] == "retire-candidate", (name, row["reason"])
        assert row["unreached"] == [] and row["code_signal"] is None
        assert doc["superseded"] == [] and doc["retire_candidates"] == [P]
        # what a reviewer reads: the hunk, REF's version of over_limit() (still the bug), the runs
        rv = row["review"]
        assert rv["hunks"][0]["file"] == "src/partfix.c" and "+    return limit != 0 && used + size > limit;" in \
            rv["hunks"][0]["text"]
        assert any("return limit != 0 && size > limit;" in f.get("text", "") for f in rv["ref_functions"])
        assert rv["runs"] and all(r["kind"] == "identical" for r in rv["runs"])
        assert rt.retire_exit_code(doc) == 0  # a candidate is news for a reviewer, not a failure


def test_with_the_code_signal_disabled_nothing_passes_retire_candidate(adv, monkeypatch, cli):
    """Switch the code signal off: the same upstreams (the patch itself, the same line reworded) are
    retire-candidates, never superseded; the judge a rebase session asks, status --behaviour's hook
    and bisect --record all refuse."""
    monkeypatch.setattr(retirement, "code_signals", lambda t, *a, **k: {p.name: None for p in t.patches})
    cache = cache_sharing_builds(adv["root"] / "cache-nocode", adv["cache"])  # its own reports, the same builds
    for name in pf.UPSTREAMS:
        doc = rt.retire_report(adv["t"], adv["repo"], adv["c"][name], cache, "fake", 10)
        row = _row(doc)
        assert row["status"] != rt.SUPERSEDED and doc["superseded"] == [], name
        if name in ("exact", "reformatted", "equivalent"):
            assert row["status"] == rt.RETIRE_CANDIDATE, (name, row["reason"])
        rt.save_report(doc, adv["t"], cache)
        if name == "exact":
            j = rt.judge(adv["t"], adv["repo"], adv["c"][name], adv["t"].patches, cache=cache)[P]
            assert j.needed == needed.RETIRE_CANDIDATE and not retirement.may_drop(j)
            hook = rt.report_hook(doc)
            assert hook(adv["t"], adv["t"].patches[0], adv["repo"], adv["c"][name]) is None
            assert hook.code_signal(adv["t"].patches[0], adv["c"][name]) is None
    ws = pf.workspace(adv["root"], adv["c"]["base"], name="ws-nocode")
    pfile = ws / "patches" / "partfix" / P
    raw = pfile.read_bytes()
    res = cli("--workspace", ws, "--cache-dir", cache, "bisect", "--source", adv["repo"], "--driver", "fake", "--runs",
              "2", "--reproducer", "partfix", "--scenario", "cumulative", "--record", P,
              f"{adv['c']['base']}..{adv['c']['exact']}")
    assert res.code == 1 and "has none of the patch's code" in res.err and pfile.read_bytes() == raw


def test_a_report_made_before_the_invariant_never_drops(adv, tmp_path):
    """A saved report without {"invariant"} (issue 11's rule, when behaviour alone said superseded)
    is read as a retire-candidate by the rebase judge and answers nothing to status --behaviour."""
    doc = dict(adv["docs"]["equivalent"])
    old = {**doc, "patches": [{**_row(doc), "status": rt.SUPERSEDED, "needed": "superseded", "code_signal": None,
                               "textual": None}]}
    del old["invariant"]
    rt.save_report(old, adv["t"], tmp_path)
    j = rt.judge(adv["t"], adv["repo"], adv["c"]["equivalent"], adv["t"].patches, cache=tmp_path)[P]
    assert j.needed == needed.RETIRE_CANDIDATE and j.invariant is None and not retirement.may_drop(j)
    assert "without the code-signal rule" in j.reason
    assert rt.report_hook(old)(adv["t"], adv["t"].patches[0], adv["repo"], adv["c"]["equivalent"]) is None
    # even a forged code signal does not make a pre-invariant report drop anything
    forged = {**old, "patches": [{**old["patches"][0], "code_signal": {"signal": "patch-id", "commit": None}}]}
    assert rt.report_hook(forged)(adv["t"], adv["t"].patches[0], adv["repo"], adv["c"]["equivalent"]) is None


def test_bisect_record_writes_applied_upstream_only_with_the_code(adv, cli):
    c = adv["c"]
    ws = pf.workspace(adv["root"], c["base"], name="ws-record")
    pfile = ws / "patches" / "partfix" / P
    before = parse_patch(pfile, P)

    def record(ref):
        return cli("--workspace", ws, "--cache-dir", adv["cache"], "bisect", "--source", adv["repo"], "--driver",
                   "fake", "--runs", "2", "--reproducer", "partfix", "--scenario", "cumulative", "--json",
                   "--record", P, f"{c['base']}..{ref}")

    res = record(c["equivalent"])  # the behaviour flips, upstream's code is another
    assert res.code == 1 and res.json["bisect"]["recorded"] is None and pfile.read_bytes() == before.raw
    assert "retire-candidate" in res.err
    res = record(c["exact"])
    assert res.code == 0, res.err
    rec = res.json["bisect"]["recorded"]
    assert rec["applied_upstream"] == c["exact"] and rec["code_signal"]["signal"] == "patch-id"
    after = parse_patch(pfile, P)
    assert after.trailer("Applied-Upstream") == c["exact"]
    # no retire report was saved for this target at REF: the trailer says what decided (issue 41)
    assert after.trailer("Applied-Upstream-Signal").endswith("+ code patch-id (no retire report at REF: code and this "
                                                             "bisect only)")
    assert after.patch_id == before.patch_id


def test_status_behaviour_and_a_rebase_session_read_the_saved_report(adv, cli):
    """verify --retire saves the report under the target's content; status --behaviour and a rebase
    session (its staged copy of the target has no reproducers/ beside it) read it through --cache-dir:
    `needed` is the report's, never not-judged, and a retire-candidate is never dropped."""
    c, cache = adv["c"], cache_sharing_builds(adv["root"] / "cache-session", adv["cache"])
    checkout = adv["root"] / "checkout"
    if not checkout.exists():
        shutil.copytree(adv["repo"], checkout)
    ws = pf.workspace(adv["root"], c["base"], name="ws-session")
    for name in ("equivalent", "exact"):
        res = cli("--workspace", ws, "--cache-dir", cache, "verify", "--retire", c[name], "--source", checkout,
                  "--driver", "fake", "--json")
        assert res.code == 0, res.err
    pf.git(checkout, "checkout", "-q", "equivalent")
    res = cli("--workspace", ws, "--cache-dir", cache, "status", "--source", checkout, "--behaviour", "--json")
    assert res.code == 0, res.err
    [row] = res.json["patches"]
    assert row["status"] == "not-applied" and row["behaviour"]["status"] == rt.RETIRE_CANDIDATE
    pf.git(checkout, "checkout", "-q", "exact")
    res = cli("--workspace", ws, "--cache-dir", cache, "status", "--source", checkout, "--behaviour", "--json")
    [row] = res.json["patches"]
    assert row["status"] == "already-upstream" and row["behaviour"]["status"] == rt.SUPERSEDED
    pf.git(checkout, "checkout", "-q", "main")

    res = cli("--workspace", ws, "--cache-dir", cache, "rebase", "partfix", "--source", checkout, "--onto",
              c["equivalent"], "--drop-superseded", "--dry-run", "--json")
    [p] = res.json["patches"]
    assert p["needed"]["needed"] == "retire-candidate" and p["needed"]["invariant"] == retirement.INVARIANT
    assert p["needed"]["driver"] == "fake" and p["action"] != "dropped"
    res = cli("--workspace", ws, "--cache-dir", cache, "rebase", "partfix", "--source", checkout, "--onto",
              c["exact"], "--dry-run", "--json")
    [p] = res.json["patches"]
    assert p["needed"]["needed"] == "superseded" and p["needed"]["code_signal"]["signal"] == "patch-id"
    # another cache holds no report: not judged, and the command that judges it is named
    res = cli("--workspace", ws, "--cache-dir", adv["root"] / "cache-empty", "rebase", "partfix", "--source", checkout,
              "--onto", c["equivalent"], "--dry-run", "--json")
    [p] = res.json["patches"]
    assert p["needed"]["needed"] == "not-judged" and "verify --retire" in p["needed"]["reason"]
