"""The one judge of "already upstream" (lucepatch/engine/absorption.py; issues 36 item 5, 39, 41).

Small upstreams built on the fly, one branch per history a maintainer meets (every verb reads the
same judge): upstream takes a patch and reverts it; takes, reverts and lands a different fix; takes
it and changes its lines; takes it exactly (still absorbed); has the lines but inactive (content
match: only measured behaviour can say it is still needed); a `Backport [sha]` whose sha REF
contains (later changed, or reverted); and lucepatch's own commits under an older workspace's
`status`. Each case runs the verbs a user runs (rebase --dry-run, a real session, status, check,
retire's code column) and reads what they print."""

from __future__ import annotations

import importlib.util
import subprocess

import pytest

from conftest import FIXTURES, commit_all, format_patches, git, make_target, write
from lucepatch.engine import absorption, needed, retirement
from lucepatch.engine.absorption import ALREADY_UPSTREAM, NOT_UPSTREAM, Finding, decide
from lucepatch.target import load_target
from lucepatch.workspace import resolve_workspace

_spec = importlib.util.spec_from_file_location("absorb_fixture", FIXTURES / "absorb" / "fixture.py")
af = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(af)
LIM, LIMIT_PATCH, REPORT_PATCH, FIXED = af.LIM, af.LIMIT_PATCH, af.REPORT_PATCH, af.FIXED


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    return af.build(tmp_path_factory.mktemp("absorb"))


@pytest.fixture
def ws(up, tmp_path):
    ws = tmp_path / "ws"
    make_target(ws, "lim", up["c"]["base"], up["pfiles"])
    return ws


def _target(ws):
    return load_target(resolve_workspace(ws), "lim")


def _rows(doc):
    return {p["name"]: p for p in doc["patches"]}


def _dry(cli, ws, repo, ref):
    r = cli("--workspace", ws, "rebase", "lim", "--source", repo, "--onto", ref, "--dry-run", "--no-behaviour", "--json")
    assert r.code in (0, 1), r.err
    return _rows(r.json)


def _status_at(cli, ws, up, ref, tmp_path):
    co = tmp_path / "co"
    if not co.exists():
        git(tmp_path, "clone", "-q", "--no-local", str(up["repo"]), str(co))
    git(co, "checkout", "-q", "--detach", ref)
    r = cli("--workspace", ws, "status", "lim", "--source", co, "--json")
    assert r.code in (0, 1), r.err
    return _rows(r.json)


def _code(ws, up, ref, cache):
    t = _target(ws)
    return retirement.findings(t, up["repo"], up["c"]["base"], ref, cache)


def _judge_at(repo, base, ref, tmp_path, patch_file, name="j"):
    from lucepatch.series import parse_patch

    p = parse_patch(patch_file)
    f = tmp_path / f"{name}.diff"
    f.write_bytes(p.diff)
    return absorption.UpstreamJudge(repo, base, ref, tmp_path / name).code(p, f)


def test_the_judge_reads_each_history_on_refs_tree(up, bp, tmp_path):
    """The judge itself, on every history (what tools/mutate.py runs against its mutants: fast)."""
    c, pf = up["c"], up["pfiles"][0]
    at = lambda ref, n: _judge_at(up["repo"], c["base"], ref, tmp_path, pf, n)  # noqa: E731
    f = at(c["tr_ref"], "tr")
    assert (f.state, f.took, f.undone_by, f.undone_how) == (NOT_UPSTREAM, c["tr_take"], c["tr_revert"], "reverted")
    f = at(c["trr_ref"], "trr")
    assert (f.state, f.undone_by, f.undone_how) == (NOT_UPSTREAM, c["trr_revert"], "reverted")
    f = at(c["tm_ref"], "tm")
    assert (f.state, f.undone_by, f.undone_how) == (NOT_UPSTREAM, c["tm_ref"], "changed") and LIM in f.detail
    f = at(c["et_ref"], "et")
    assert (f.state, f.signal, f.commit, f.took) == (ALREADY_UPSTREAM, "patch-id", c["et_take"], c["et_take"])
    assert f.detail.endswith("tree still has the change (reverse-apply)")
    f = at(c["in_ref"], "in")
    assert (f.state, f.signal, f.took) == (ALREADY_UPSTREAM, "content-match", None)
    assert f.detail.startswith("every changed run is present in")
    # nothing after the take changed its files: no undoing commit to name
    from lucepatch.series import parse_patch

    j = absorption.UpstreamJudge(up["repo"], c["base"], c["et_take"], tmp_path / "u")
    assert j._undone(parse_patch(pf), tmp_path / "et.diff", c["et_take"]) == (None, None)
    f = at(c["base"], "none")
    assert f == Finding(NOT_UPSTREAM)
    b = lambda ref, n: _judge_at(bp["repo"], bp["old"], ref, tmp_path, bp["pfiles"][0], n)  # noqa: E731
    f = b(bp["moved"], "bpm")
    assert (f.state, f.signal, f.commit) == (ALREADY_UPSTREAM, "backport", bp["fix"])
    f = b(bp["reverted"], "bpr")
    assert (f.state, f.undone_by, f.undone_how) == (NOT_UPSTREAM, bp["reverted"], "reverted")
    f = b(bp["old"], "bpo")
    assert f.state == NOT_UPSTREAM and f.took is None


# ---- the cases ----------------------------------------------------------------------------------


def test_take_then_revert_is_not_absorbed_and_names_the_revert(up, ws, cli, tmp_path):
    c = up["c"]
    row = _dry(cli, ws, up["repo"], c["tr_ref"])[LIMIT_PATCH]
    assert (row["applies"], row["action"]) == ("exact", "carried"), row
    assert c["tr_take"][:12] in row["detail"] and c["tr_revert"][:12] in row["detail"] and "reverted" in row["detail"]
    found = _code(ws, up, c["tr_ref"], tmp_path / "cache")[LIMIT_PATCH]
    assert found.state == NOT_UPSTREAM and found.took == c["tr_take"] and found.undone_by == c["tr_revert"]
    assert found.undone_how == "reverted" and found.code_signal() is None  # retire's code column: none
    st = _status_at(cli, ws, up, c["tr_ref"], tmp_path)[LIMIT_PATCH]
    assert st["status"] == "not-applied" and st["would"] == "applied" and c["tr_revert"][:12] in st["detail"]
    # a real session carries it (before: dropped, `2: df4d60a < -: -------` in the range-diff)
    r = cli("--workspace", ws, "rebase", "lim", "--source", up["repo"], "--onto", c["tr_ref"], "--no-interactive",
            "--no-behaviour", "--json")
    assert r.code == 0, r.err
    assert (ws / "patches/lim/series").read_text().split() == [LIMIT_PATCH, REPORT_PATCH]
    assert not (ws / "patches/lim/absorbed").exists()


def test_take_revert_then_a_different_fix_names_the_revert_not_the_new_fix(up, ws, cli, tmp_path):
    c = up["c"]
    row = _dry(cli, ws, up["repo"], c["trr_ref"])[LIMIT_PATCH]
    assert row["action"] != "absorbed" and row["applies"] == "conflict", row  # the new fix rewrote its line
    assert f"reverted its lines in {c['trr_revert'][:12]}" in row["detail"]  # the revert, not the later fix
    found = _code(ws, up, c["trr_ref"], tmp_path / "cache")[LIMIT_PATCH]
    assert (found.state, found.undone_by, found.undone_how) == (NOT_UPSTREAM, c["trr_revert"], "reverted")
    r = cli("--workspace", ws, "check", "lim", "--source", up["repo"], "--onto", c["trr_ref"], "--json")
    assert r.code == 1 and _rows(r.json)[LIMIT_PATCH]["status"] == "conflict"
    assert c["trr_revert"][:12] in _rows(r.json)[LIMIT_PATCH]["detail"]


def test_take_then_modify_is_not_absorbed_and_names_the_change(up, ws, cli, tmp_path):
    c = up["c"]
    row = _dry(cli, ws, up["repo"], c["tm_ref"])[LIMIT_PATCH]
    assert row["action"] != "absorbed", row
    assert c["tm_take"][:12] in row["detail"] and c["tm_ref"][:12] in row["detail"] and "changed" in row["detail"]
    found = _code(ws, up, c["tm_ref"], tmp_path / "cache")[LIMIT_PATCH]
    assert (found.state, found.undone_by, found.undone_how) == (NOT_UPSTREAM, c["tm_ref"], "changed")
    st = _status_at(cli, ws, up, c["tm_ref"], tmp_path)[LIMIT_PATCH]
    assert st["status"] != "already-upstream" and c["tm_ref"][:12] in st["detail"]


def test_an_exact_take_is_still_absorbed_with_its_commit(up, ws, cli, tmp_path):
    c = up["c"]
    rows = _dry(cli, ws, up["repo"], c["et_ref"])
    row = rows[LIMIT_PATCH]
    assert (row["applies"], row["action"], row["signal"], row["upstream_commit"]) == \
        ("already-upstream", "absorbed", "patch-id", c["et_take"])
    assert "absorbed by code signal alone" in row["detail"] and "behaviour not measured" in row["detail"]
    assert rows[REPORT_PATCH]["action"] == "carried"
    found = _code(ws, up, c["et_ref"], tmp_path / "cache")[LIMIT_PATCH]
    assert found.code_signal()["signal"] == "patch-id" and found.commit == c["et_take"]
    st = _status_at(cli, ws, up, c["et_ref"], tmp_path)[LIMIT_PATCH]
    assert (st["status"], st["signal"], st["commit"]) == ("already-upstream", "patch-id", c["et_take"])
    r = cli("--workspace", ws, "rebase", "lim", "--source", up["repo"], "--onto", c["et_ref"], "--no-interactive",
            "--no-behaviour", "--json")
    assert r.code == 0, r.err
    text = (ws / "patches/lim/absorbed" / LIMIT_PATCH).read_text()
    assert f"Applied-Upstream: {c['et_take']}" in text
    assert "Applied-Upstream-Signal: patch-id (code signal alone; behaviour not measured)" in text


def _still_needed(target, source, ref, patches, **where):
    return {LIMIT_PATCH: needed.Judgement(needed.STILL_NEEDED, "still-needed: add-one at x", "lim:count-in-use",
                                          "fake", None, absorption.INVARIANT,
                                          "fail (10/10) on x+build-only, pass (10/10) on x+build-only+fix-limit")}


def test_lines_present_but_inactive_are_kept_when_behaviour_says_needed(up, ws, tmp_path):
    from lucepatch.engine import session as S

    c = up["c"]
    found = _code(ws, up, c["in_ref"], tmp_path / "cache")[LIMIT_PATCH]
    assert found.state == ALREADY_UPSTREAM and found.signal == "content-match"  # the code alone says upstream
    t = _target(ws)
    doc = S.dry_run(tmp_path / "cache", t, up["repo"], c["in_ref"], S.Options(judge=_still_needed))
    row = _rows(doc)[LIMIT_PATCH]
    assert row["action"] != "absorbed" and row["needed"]["needed"] == "still-needed", row
    assert row["detail"].startswith(f"kept: upstream has the lines (content-match {c['in_ref'][:12]})")
    assert "lim:count-in-use still fails at REF without the patch (fail (10/10)" in row["detail"]
    # --drop-superseded never overrides a measured still-needed
    doc = S.dry_run(tmp_path / "cache", t, up["repo"], c["in_ref"], S.Options(judge=_still_needed,
                                                                              drop_superseded=True))
    assert _rows(doc)[LIMIT_PATCH]["action"] not in ("absorbed", "dropped")


def test_a_person_rejects_an_absorption_by_code_alone(up, ws, tmp_path):
    """`keep` (session.Options.keep): the exact take is carried anyway; the session stops for a human,
    since re-applied on REF the patch changes nothing, and says why."""
    from lucepatch.engine import session as S

    c = up["c"]
    t = _target(ws)
    doc = S.dry_run(tmp_path / "cache", t, up["repo"], c["et_ref"], S.Options(no_behaviour=True, keep=(LIMIT_PATCH,)))
    row = _rows(doc)[LIMIT_PATCH]
    assert row["action"] == "would stop" and row["applies"] == "already-upstream"
    assert "kept by a person (--keep)" in row["detail"] and "--skip" in row["detail"]


def test_rebase_keep_on_the_command_line(up, ws, cli):
    c = up["c"]
    r = cli("--workspace", ws, "rebase", "lim", "--source", up["repo"], "--onto", c["et_ref"], "--dry-run",
            "--no-behaviour", "--keep", LIMIT_PATCH[:-6], "--json")
    row = _rows(r.json)[LIMIT_PATCH]
    assert r.code == 1 and row["action"] == "would stop" and "kept by a person (--keep)" in row["detail"]
    r = cli("--workspace", ws, "rebase", "lim", "--source", up["repo"], "--onto", c["et_ref"], "--dry-run",
            "--keep", "no-such-patch")
    assert r.code == 2 and "--keep" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    r = cli("--workspace", ws, "rebase", "lim", "--status", "--keep", LIMIT_PATCH)
    assert r.code == 2 and "--keep" in r.err  # a mode that does not use it refuses it


def test_a_person_confirms_or_rejects_an_absorption_in_the_session(up, ws, tmp_path):
    """The terminal's answer before the walk (services.rebase.run(on_absorbed=)): `keep` carries the
    exact take anyway (it then stops: re-applied it changes nothing), `drop` confirms it and says so."""
    from lucepatch.engine import session as S
    from lucepatch.services import rebase as svc

    c = up["c"]
    t = _target(ws)
    asked = []

    def answer(choice):
        def on_absorbed(sess, ps):
            asked.append(ps.name)
            return choice
        return on_absorbed

    sess = svc.start(tmp_path / "cache", t, up["repo"], c["et_ref"], S.Options(no_behaviour=True))
    out = svc.run(sess, on_absorbed=answer("keep"))
    row = _rows(out.doc)[LIMIT_PATCH]
    assert asked == [LIMIT_PATCH] and out.code == 1 and row["action"] == "stopped"
    assert row["detail"].startswith("kept by a person (--keep), but re-applied on the new base it changes nothing")
    svc.run(svc.open_session(resolve_workspace(ws), tmp_path / "cache", "lim"), abort=True)
    sess = svc.start(tmp_path / "cache", t, up["repo"], c["et_ref"], S.Options(no_behaviour=True))
    out = svc.run(sess, on_absorbed=answer("drop"))
    row = _rows(out.doc)[LIMIT_PATCH]
    assert out.code == 0 and row["action"] == "absorbed" and row["detail"].endswith("; confirmed by a person")
    assert row["absorption"]["confirmed"] is True


# ---- backports: `Upstream-Status: Backport [sha]` counts when sha is an ancestor of REF -----------


@pytest.fixture(scope="module")
def bp(tmp_path_factory):
    return af.build_backport(tmp_path_factory.mktemp("bp"))


def test_a_backport_whose_commit_ref_contains_is_already_upstream_in_check_and_rebase(bp, tmp_path, cli):
    ws = tmp_path / "ws"
    make_target(ws, "lim", bp["old"], bp["pfiles"])
    name = (ws / "patches/lim/series").read_text().split()[0]
    r = cli("--workspace", ws, "check", "lim", "--source", bp["repo"], "--onto", bp["moved"], "--json")
    assert r.code == 0, r.out
    row = _rows(r.json)[name]
    assert (row["status"], row["signal"], row["commit"]) == ("already-upstream", "backport", bp["fix"])
    r = cli("--workspace", ws, "rebase", "lim", "--source", bp["repo"], "--onto", bp["moved"], "--dry-run",
            "--no-behaviour", "--json")
    row = _rows(r.json)[name]
    assert (row["action"], row["signal"], row["upstream_commit"]) == ("absorbed", "backport", bp["fix"])
    # upstream reverted it: the backport is needed again, and the revert is named
    r = cli("--workspace", ws, "check", "lim", "--source", bp["repo"], "--onto", bp["reverted"], "--json")
    row = _rows(r.json)[name]
    assert row["status"] == "applied" and r.code == 0
    r = cli("--workspace", ws, "rebase", "lim", "--source", bp["repo"], "--onto", bp["reverted"], "--dry-run",
            "--no-behaviour", "--json")
    row = _rows(r.json)[name]
    assert row["action"] == "carried" and bp["reverted"][:12] in row["detail"] and "reverted" in row["detail"]


def test_matrix_cells_are_what_check_says_at_each_commit(bp, tmp_path, cli):
    """The matrix reads the same judge: the backport is `U` from upstream's own commit on (before:
    `X`, while a rebase called it absorbed), and every cell is what `check --onto` says there."""
    ws = tmp_path / "ws"
    make_target(ws, "lim", bp["old"], bp["pfiles"])
    r = cli("--workspace", ws, "matrix", "lim", "--source", bp["repo"], "--range", f"{bp['old']}..main", "--json")
    assert r.code == 0, r.err
    cells = {c["commit"]: c["cells"][0] for c in r.json["commits"]}
    assert cells[bp["fix"]] == cells[bp["moved"]] == "already-upstream"
    for commit, cell in cells.items():
        row = cli("--workspace", ws, "check", "lim", "--source", bp["repo"], "--onto", commit, "--json").json
        assert row["patches"][0]["status"] == cell, commit


# ---- status under an older workspace: lucepatch's own commits are not upstream ---------------------


def test_status_with_an_older_workspace_does_not_call_lucepatchs_own_commits_upstream(up, tmp_path, cli):
    """The checkout carries a newer version of the series (applied by lucepatch: a comment beside the
    fix, so the patch ids differ); `status` from the older workspace reads upstream's tree below
    lucepatch's commits, never what lucepatch applied."""
    c = up["c"]
    newer_ws, older_ws = tmp_path / "new", tmp_path / "old"
    make_target(older_ws, "lim", c["base"], up["pfiles"])
    repo = tmp_path / "work-up"
    git(tmp_path, "clone", "-q", "--no-local", str(up["repo"]), str(repo))
    git(repo, "checkout", "-q", "-b", "w", c["base"])
    write(repo, LIM, FIXED.replace("    return used", "    /* what is in use counts too */\n    return used"))
    commit_all(repo, "fix(limit): count what is in use\n\nUpstream-Status: Pending")
    newer = format_patches(repo, f"{c['base']}..w", tmp_path / "nfp")
    git(repo, "checkout", "-q", "-B", "main", c["base"])
    make_target(newer_ws, "lim", c["base"], newer)
    assert cli("--workspace", newer_ws, "apply", "lim", "--source", repo).code == 0
    r = cli("--workspace", older_ws, "status", "lim", "--source", repo, "--json")
    row = _rows(r.json)[LIMIT_PATCH]
    assert row["status"] == "applied" and "lucepatch's own commits" in row["detail"], row
    assert all(p["status"] != "already-upstream" for p in r.json["patches"])


# ---- the decision table (engine/absorption.decide) --------------------------------------------------

UP = Finding(ALREADY_UPSTREAM, "content-match", "a" * 40, "every changed run is present")


def _j(verdict, code=None, invariant=absorption.INVARIANT, scenario="r:s", measured="fail (10/10)"):
    return needed.Judgement(verdict, f"{verdict}: why", scenario, "fake", code, invariant, measured)


@pytest.mark.parametrize("judgement, state, drop", [
    (None, absorption.ABSORBED, True),
    (_j(needed.NOT_JUDGED), absorption.ABSORBED, True),
    (_j(needed.STILL_NEEDED), absorption.KEPT, False),
    (_j(needed.SUPERSEDED, {"signal": "content-match"}), absorption.SUPERSEDED, True),
    (_j(needed.SUPERSEDED, {"signal": "content-match"}, invariant=1), absorption.ABSORBED, True),
    (_j(needed.RETIRE_CANDIDATE), absorption.ABSORBED, True),
    (_j(needed.INCONCLUSIVE), absorption.ABSORBED, True),
])
def test_decide_lets_measured_behaviour_keep_a_patch_and_says_when_code_alone_decided(judgement, state, drop):
    d = decide(UP, judgement)
    assert (d.state, d.drop) == (state, drop)
    assert d.measured is (state in (absorption.KEPT, absorption.SUPERSEDED))  # behaviour counted, or code alone
    if state == absorption.ABSORBED:
        assert "absorbed by code signal alone (content-match aaaaaaaaaaaa)" in d.reason
    if state == absorption.KEPT:
        assert d.reason == ("kept: upstream has the lines (content-match aaaaaaaaaaaa) but r:s still fails at REF "
                            "without the patch (fail (10/10), simulated driver)")


def test_decide_says_what_kept_it_without_a_scenario_and_reads_no_finding_as_not_upstream():
    d = decide(UP, _j(needed.STILL_NEEDED, scenario=None))
    assert d.reason == ("kept: upstream has the lines (content-match aaaaaaaaaaaa) but behaviour at REF needs it "
                        "(fail (10/10), simulated driver)")
    assert decide(None) == absorption.Decision(NOT_UPSTREAM, False, "")


def test_decide_never_absorbs_what_the_tree_lacks():
    for j in (None, _j(needed.SUPERSEDED, {"signal": "patch-id"})):
        d = decide(Finding(NOT_UPSTREAM, took="b" * 40, undone_by="c" * 40, undone_how="reverted"), j)
        assert (d.state, d.drop) == (NOT_UPSTREAM, False)


@pytest.mark.parametrize("judgements, state, words", [
    (None, absorption.ABSORBED, "by code alone (no retire report at REF: behaviour not measured)"),
    ({}, absorption.ABSORBED, "by code alone (the retire report at REF did not judge it: behaviour not measured)"),
    ({"p": _j(needed.RETIRE_CANDIDATE)}, absorption.ABSORBED, ("by code alone (behaviour at REF did not decide: "
                                                              "retire-candidate)")),
    ({"p": _j(needed.STILL_NEEDED)}, absorption.KEPT, ("kept: upstream has the lines (content-match aaaaaaaaaaaa) "
                                                       "but r:s still fails at REF without the patch (fail (10/10), "
                                                       "simulated driver)")),
    ({"p": _j(needed.SUPERSEDED, {"signal": "content-match"})}, absorption.SUPERSEDED,
     "superseded: upstream has the change (content-match aaaaaaaaaaaa) and behaviour at REF agrees (superseded: why)"),
])
def test_at_ref_is_decide_for_check_and_status_and_says_when_no_report_was_read(judgements, state, words):
    """check and status (they drop nothing) ask the same rule as a rebase: measured behaviour at REF keeps
    the patch; without a saved retire report the words say behaviour was not consulted."""
    d = absorption.at_ref(UP, judgements, "p")
    assert (d.state, d.reason) == (state, words)


def test_at_ref_names_the_commit_whose_tree_has_it_when_behaviour_keeps_it(up, tmp_path):
    c = up["c"]
    found = _judge_at(up["repo"], c["base"], c["in_ref"], tmp_path, up["pfiles"][0])
    assert found.signal == "content-match" and found.commit is None
    judge = absorption.UpstreamJudge(up["repo"], c["base"], c["in_ref"], tmp_path / "k")
    from lucepatch.series import parse_patch

    p = parse_patch(up["pfiles"][0])
    d = absorption.at_ref(found, {p.name: _j(needed.STILL_NEEDED)}, p.name, judge, tmp_path / "j.diff", p)
    assert d.state == absorption.KEPT
    assert d.reason.startswith(f"kept: upstream has the lines (content-match {c['in_ref'][:12]}) but r:s still fails")


def test_reversed_diff_gives_the_patch_id_of_a_revert(up):
    from lucepatch import git as g
    from lucepatch.series import parse_patch

    p = parse_patch(up["pfiles"][0])
    show = git(up["repo"], "show", "--full-index", "--format=commit %H", up["c"]["tr_revert"])
    got = subprocess.run(["git", "patch-id", "--stable"], input=show, capture_output=True, text=True,
                         cwd=up["repo"]).stdout.split()[0]
    rev = g.patch_id(absorption.reversed_diff(p.diff))
    assert rev == got and rev != p.patch_id
