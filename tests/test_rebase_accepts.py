"""A rebase session checks what it accepts (issue 36, item 4), on the twobugs fixture.

The upstream move reworks the accounting: allocations are counted in `in_use`, `used` is left
declared and never updated, the comment above the limit check changes (so the limit patch no longer
applies exactly) and so does cuMemGetInfo_v2's (the meminfo patch conflicts). git merges the limit
patch 3-way without a marker into code that never counts — as it merged free_raw_async into 52f33fc's
allocator —, and before issue 36 the session accepted it. Now:

- the 3-way merge is built and its scenario run against the old base with the same patches: it is
  rejected, the session stops at the patch with the merged text in the work tree and says why; the
  human's fix is built and run again on --continue and accepted; so is a hand resolution;
- `--no-verify` (Options(verify=False)) accepts it unchecked and the journal says so;
- what upstream fixed between the bases becomes a regression guard of the rebased target;
- the message that cites a function the move changed is flagged in review.toml, `pr` refuses it until
  the message is edited, lint warns while it is unedited;
- a target whose [serves] the packaged compatible_hami.toml ties to the old base loses it (with the
  reason) instead of failing lint after the session.
"""

from __future__ import annotations

import importlib.util
import json
import tomllib

import pytest

from conftest import FIXTURES
from lucepatch.engine import stale
from lucepatch.errors import CheckFailed
from lucepatch.services import lint, rebase
from lucepatch.target import load_target
from lucepatch.upstream.pr import PrOptions, prepare_pr
from lucepatch.workspace import resolve_workspace

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")

_spec = importlib.util.spec_from_file_location("twobugs_fixture", FIXTURES / "twobugs" / "fixture.py")
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)

LIMIT, MEMINFO = "fix-limit-cumulative.patch", "fix-meminfo-limit.patch"
COMPAT = {"series": {"twobugs": {"shrreg": "1.2", "compatible": ["v2.9.0"]}},
          "release": [{"hami": "v2.9.0", "hami_core": "0" * 40, "shrreg": "1.2", "source": "test", "unknown": []}]}


def _rework(repo):
    src = repo / "src" / "twobugs.c"
    text = src.read_text()
    for old, new in (("/* 1 if allocating `size` more would exceed the limit */",
                      "/* 1 if allocating `size` more would exceed the limit (every request counts) */"),
                     ("static size_t used;  /* bytes allocated through us */",
                      "static size_t used;  /* unused since the rework */\nstatic size_t in_use; /* bytes allocated through us */"),
                     ("        used += size;", "        in_use += size;"),
                     ("            used -= chunks[i].size;", "            in_use -= chunks[i].size;"),
                     ("    /* reports the whole device, whatever the limit */",
                      "    /* reports the whole device (no limit applied here) */")):
        assert old in text
        text = text.replace(old, new)
    src.write_text(text)
    return tb._commit(repo, "allocator: count in_use in the allocator (rework)")


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    root = tmp_path_factory.mktemp("accepts")
    repo, commits = tb.upstream(root, [])
    return {"root": root, "repo": repo, "base": commits[0], "onto": _rework(repo)}


@pytest.fixture
def ws(up, tmp_path, monkeypatch):
    monkeypatch.setattr("lucepatch.engine.rebase.compat_data", lambda: {**COMPAT, "series": {"twobugs": {
        **COMPAT["series"]["twobugs"], "base": up["base"]}}})
    monkeypatch.setattr("lucepatch.services.lint.compat_data", lambda: {**COMPAT, "series": {"twobugs": {
        **COMPAT["series"]["twobugs"], "base": up["base"]}}})
    root = tb.workspace(tmp_path, up["base"])
    tdir = root / "patches" / "twobugs"
    with open(tdir / "target.toml", "a") as f:
        f.write('\n[serves]\nhami = ["v2.9.0"]\nshrreg = "1.2"\n')
    mi = tdir / MEMINFO  # the message cites the function the move changes
    mi.write_text(mi.read_text().replace("cuMemGetInfo passed the physical device memory through",
                                         "cuMemGetInfo_v2() passes the physical device memory through"))
    return resolve_workspace(root)


def _start(ws, up, cache, **opts):
    t = load_target(ws, "twobugs")
    sess = rebase.start(cache, t, up["repo"], up["onto"], rebase.Options(**opts))
    return rebase.run(sess)


def _lint_errors(ws):
    return [f.message for f in lint.lint_target(ws, "twobugs", pending_days=100000, now=0) if f.level == "error"]


def test_a_silent_3way_merge_that_breaks_its_scenario_is_rejected_and_a_fix_accepted(ws, up, tmp_path):
    cache = tmp_path / "cache"
    assert _lint_errors(ws) == []
    out = _start(ws, up, cache)
    assert out.code == 1 and out.doc["phase"] == "conflict"
    row = {r["name"]: r for r in out.doc["patches"]}[LIMIT]
    assert row["applies"] == "3-way" and row["action"] == "stopped"
    v = row["verify"]
    assert v["state"] == "rejected" and v["driver"] == "fake" and v["runs"] == 5
    assert "twobugs:cumulative-limit" in v["detail"] and "where" in v["detail"] and "+series-to-1 passes" in v["detail"]
    assert v["scenarios"]["twobugs:cumulative-limit"]["onto"].startswith("clean error")
    wt = rebase.open_session(ws, cache, "twobugs")
    try:
        work = wt.repo
    finally:
        wt.close()
    c = work / "src" / "twobugs.c"
    assert "used + size > limit" in c.read_text()  # what git merged, for the human to see
    c.write_text(c.read_text().replace("used + size > limit", "in_use + size > limit"))
    out = rebase.run(rebase.open_session(ws, cache, "twobugs"), resumed=True, cont=True)
    rows = {r["name"]: r for r in out.doc["patches"]}
    assert rows[LIMIT]["action"] == "resolved" and rows[LIMIT]["verify"]["state"] == "accepted"
    assert rows[MEMINFO]["action"] == "stopped" and rows[MEMINFO]["applies"] == "conflict"
    # the human resolves the meminfo conflict (in_use, the new accounting); the check accepts it
    text = c.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    end = text.index("\n", end) + 1
    c.write_text(text[:start] + "    if (r != CUDA_SUCCESS || limit == 0)\n        return r;\n"
                 "    pthread_mutex_lock(&lock);\n    *total = limit;\n"
                 "    *free_b = in_use < limit ? limit - in_use : 0;\n    pthread_mutex_unlock(&lock);\n" + text[end:])
    out = rebase.run(rebase.open_session(ws, cache, "twobugs"), resumed=True, cont=True)
    assert out.code == 0 and out.doc["written"], out.line
    rows = {r["name"]: r for r in out.doc["patches"]}
    assert rows[MEMINFO]["verify"]["state"] == "accepted"
    t = load_target(ws, "twobugs")
    # what the move takes along: no regression guard (upstream fixed nothing here), [serves] gone with why
    assert t.base == up["onto"] and t.serves == {} and t.regression_guard == {}
    assert any("[serves] removed from twobugs" in w for w in out.doc["warnings"])
    assert _lint_errors(ws) == []  # lint and compatible_hami.toml agree after the session
    # the meminfo message cites cuMemGetInfo_v2(), which the move changed: flagged, pr refuses it
    review = stale.read_review(t.dir)
    assert list(review) == [MEMINFO] and review[MEMINFO]["statements"][0]["cites"] == "cuMemGetInfo_v2()"
    assert rows[MEMINFO]["stale"] and not rows[LIMIT]["stale"]
    warns = [f.message for f in lint.lint_target(ws, "twobugs", pending_days=100000, now=0) if f.patch == MEMINFO]
    assert any("cites what the move" in w for w in warns)
    with pytest.raises(CheckFailed, match=r"1 patch message\(s\) cite what an upstream move changed.*cuMemGetInfo_v2"):
        prepare_pr(t, up["repo"], cache, tmp_path / "pr", PrOptions(no_evidence=True, skip_checks=True))
    f = t.dir / MEMINFO
    f.write_text(f.read_text().replace("cuMemGetInfo_v2() passes the physical device memory through",
                                       "cuMemGetInfo_v2() passed the physical device memory through (before the fix)"))
    t = load_target(ws, "twobugs")
    res = prepare_pr(t, up["repo"], cache, tmp_path / "pr", PrOptions(no_evidence=True, skip_checks=True))
    assert (res.out_dir / "pr-body.md").is_file()
    assert any("remove its entry" in f.message for f in lint.lint_target(ws, "twobugs", pending_days=100000, now=0))


def test_no_verify_accepts_unchecked_and_the_journal_says_so(ws, up, tmp_path, cli):
    r = cli("--workspace", ws.path, "--cache-dir", tmp_path / "cache", "rebase", "twobugs", "--source", up["repo"],
            "--onto", up["onto"], "--no-verify", "--no-interactive", "--json")
    doc = json.loads(r.out)
    row = {x["name"]: x for x in doc["patches"]}[LIMIT]
    assert row["action"] == "carried" and row["applies"] == "3-way"
    assert row["verify"]["state"] == "skipped" and "--no-verify" in row["verify"]["detail"]
    assert "skipped: not built or run: --no-verify" in row["detail"]
    sess = rebase.open_session(ws, tmp_path / "cache", "twobugs")
    try:
        assert json.loads(sess.store.state_path.read_text())["options"]["verify"] is False
    finally:
        sess.close()
    # --no-verify starts a session: the other modes refuse it
    r = cli("--workspace", ws.path, "--cache-dir", tmp_path / "cache", "rebase", "twobugs", "--continue", "--no-verify")
    assert r.code == 2 and "--no-verify" in r.err


def test_what_upstream_fixed_between_the_bases_becomes_a_regression_guard(tmp_path):
    """Upstream fixes bug 1 at the call site (and rewords the comment above the limit check, so the
    limit patch merges 3-way): the session's check measures cumulative-limit failing at the old base
    and passing at the new one on upstream alone; the rebased target declares it a regression guard."""
    repo, commits = tb.upstream(tmp_path, [])
    src = repo / "src" / "twobugs.c"
    text = src.read_text()
    for old, new in (("/* 1 if allocating `size` more would exceed the limit */",
                      "/* 1 if `size` bytes would exceed the limit */"),
                     ("    if (over_limit(size)) {", "    if (over_limit(used + size)) {")):
        assert old in text
        text = text.replace(old, new)
    src.write_text(text)
    onto = tb._commit(repo, "allocator: count what is allocated against the limit")
    ws = resolve_workspace(tb.workspace(tmp_path, commits[0]))
    out = _start(ws, {"repo": repo, "onto": onto}, tmp_path / "cache")
    assert out.code == 0, out.line
    rows = {r["name"]: r for r in out.doc["patches"]}
    assert rows[LIMIT]["applies"] == "3-way" and rows[LIMIT]["verify"]["state"] == "accepted"
    fixed = rows[LIMIT]["verify"]["fixed_upstream"]
    assert list(fixed) == ["twobugs:cumulative-limit"] and fixed["twobugs:cumulative-limit"].startswith(
        f"upstream fixed it between {commits[0][:12]} and {onto[:12]}")
    t = load_target(ws, "twobugs")
    assert list(t.regression_guard) == ["twobugs:cumulative-limit"]
    assert any("regression guard(s) from what upstream fixed: twobugs:cumulative-limit" in w for w in out.doc["warnings"])
