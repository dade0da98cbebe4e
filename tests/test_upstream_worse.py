"""An upstream that made a bug worse is named as such (issue 36, item 3): a crash where the older
commit gave a wrong value. A ref-vs-ref evidence (verify --baseline-ref 8f3a89c --patched-ref
52f33fc) says `worse` with both sides' outcomes and first errors; `show` prints it (terminal and
page) as its own label; `pr` given that evidence beside the series' own renders what the move to
its base made worse and fixed, and refuses one whose newer side is not the PR's base. A scenario
upstream fixed at a line's base is declared a regression guard there ([regression_guard]), so the
line's evidence is `guarded` for it, not "not-proven", and `pr` takes it.
"""

from __future__ import annotations

import json

import pytest
from conftest import evidence_doc
from test_pr import _hami

from lucepatch.errors import UsageError
from lucepatch.show.model import build_view, short_reason
from lucepatch.show.page import html
from lucepatch.target import load_target
from lucepatch.upstream.pr import PrOptions, prepare_pr
from lucepatch.verify.evidence import Evidence
from lucepatch.workspace import resolve_workspace

OLD, NEW = "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811", "52f33fc7fa1f0000000000000000000000000000"
WORSE = ("worse on the patched build: crash 6/6 (first error: Illegal device id: 2139062143), where the baseline gave "
         "a wrong value: fail 1/1 (first error: check charged: expected 67108864, got 0)")


def _tally(outcomes, first_error=""):
    n = sum(outcomes.values())
    fails = sum(v for k, v in outcomes.items() if k != "pass")
    return {"runs": n, "pass": outcomes.get("pass", 0), "failures": fails, "invalid": 0, "skipped": 0,
            "failure_rate": round(fails / n, 4), "outcomes": outcomes, "first_error": first_error}


def move_doc(old=OLD, new=NEW, target="toy"):
    doc = evidence_doc(driver_kind="fake", gpu="simulated", target=target, verdict="worse")
    doc["upstream"]["base"] = old
    doc["variants"] = {"baseline": {"from": "ref", "ref": old[:7], "base": old, "commit": old,
                                    "artifact": {"path": "/b/libvgpu.so", "sha256": "1" * 64}},
                       "patched": {"from": "ref", "ref": new[:7], "base": new, "commit": new,
                                   "artifact": {"path": "/p/libvgpu.so", "sha256": "2" * 64}}}
    doc["scenarios"] = [
        {"scenario": "pool-alloc:ctxless-pool-alloc", "control": False, "verdict": "worse", "reason": WORSE,
         "baseline": _tally({"fail": 1}, "check charged: expected 67108864, got 0"),
         "patched": _tally({"crash": 6}, "Illegal device id: 2139062143"), "p_value": 1.0},
        {"scenario": "pool-alloc:pool-charged", "control": False, "verdict": "proven", "reason": "fixed upstream",
         "baseline": _tally({"fail": 5}, "check charged: expected 67108864, got 0"), "patched": _tally({"pass": 10}),
         "p_value": 0.0003}]
    return doc


def test_show_names_worse_in_the_terminal_and_the_page():
    ev = Evidence.from_json(move_doc())
    view = build_view(ev)
    row = next(r for r in view.rows if r.verdict == "worse")
    assert row.short == "crash where baseline: wrong value" and row.reason == WORSE
    page = html(view)
    assert 'class="badge v-worse"' in page or "v-worse" in page
    assert "Illegal device id: 2139062143" in page and "expected 67108864, got 0" in page
    assert short_reason(ev.scenarios[1]) == ""


def _proof(t, base):
    doc = evidence_doc(driver_kind="fake", gpu="simulated", target="toy")
    doc["upstream"]["base"] = base
    doc["series"]["patch_ids"] = [p.patch_id for p in t.patches]
    doc["variants"] = {v: {"from": "series", "base": base, "commit": base, "patches": [],
                           "artifact": {"path": f"/{v}/libvgpu.so", "sha256": "3" * 64}} for v in ("baseline", "patched")}
    doc["scenarios"] = [
        {"scenario": "pool-alloc:ctxless-pool-alloc", "control": False, "verdict": "proven", "reason": "proven",
         "baseline": _tally({"crash": 5}, "Illegal device id"), "patched": _tally({"pass": 10}), "p_value": 0.0003},
        {"scenario": "pool-alloc:pool-charged", "control": False, "verdict": "guarded", "regression_guard": True,
         "reason": "regression guard", "baseline": _tally({"pass": 5}), "patched": _tally({"pass": 10}), "p_value": 1.0}]
    return doc


def test_pr_renders_what_the_move_to_its_base_made_worse_and_fixed(tmp_path):
    fx = _hami(tmp_path)
    t = load_target(resolve_workspace(fx["ws"]), "toy")
    (tmp_path / "proof.json").write_text(json.dumps(_proof(t, fx["base"])))
    (tmp_path / "move.json").write_text(json.dumps(move_doc(new=fx["base"])))
    res = prepare_pr(t, fx["up"], tmp_path / "cache", tmp_path / "out",
                     PrOptions(skip_checks=True, evidence_path=[tmp_path / "proof.json", tmp_path / "move.json"]))
    body = (res.out_dir / "pr-body.md").read_text()
    sec = body[body.index(f"### What upstream changed between `{OLD[:12]}` and `{fx['base'][:12]}`"):]
    assert ("- `pool-alloc:ctxless-pool-alloc`: **made worse** — at `8f3a89c67b03`: fail 1/1 (first error: check "
            "charged: expected 67108864, got 0); at `" + fx["base"][:12] + "`: crash 6/6 (first error: Illegal device "
            "id: 2139062143)") in sec
    assert "- `pool-alloc:pool-charged`: **fixed**" in sec and "the simulated driver" in sec
    # the proof is the series' own evidence; the move is never combined into it
    assert json.loads((res.out_dir / "evidence.json").read_text())["verdict"] == "proven"
    # a ref-vs-ref evidence of another move is refused, naming both commits
    (tmp_path / "other.json").write_text(json.dumps(move_doc()))
    with pytest.raises(UsageError, match=r"compares upstream 8f3a89c67b03 with 52f33fc7fa1f, but the PR is based on"):
        prepare_pr(t, fx["up"], tmp_path / "cache", tmp_path / "out2",
                   PrOptions(skip_checks=True, evidence_path=[tmp_path / "proof.json", tmp_path / "other.json"]))
    with pytest.raises(UsageError, match="give the evidence of the series too"):
        prepare_pr(t, fx["up"], tmp_path / "cache", tmp_path / "out3",
                   PrOptions(skip_checks=True, evidence_path=[tmp_path / "move.json"]))


def test_status_behaviour_names_an_upstream_that_made_it_worse():
    """status --behaviour's detail says it as the retirement table does; the row keeps both sides."""
    from lucepatch.services.series import annotate_behaviour

    reason = ("does not apply at 52f33fc7fa1f (rebase it); upstream made pool-alloc:ctxless-pool-alloc worse: without it, "
              "8f3a89c67b03+build-only: accounting mismatch (10/10) at the base, 52f33fc7fa1f+build-only: crash (SIGSEGV) "
              "(10/10) at 52f33fc7fa1f")
    judged = {"patches": [{"name": "p", "status": "worse-upstream", "needed": "still-needed",
                           "scenario": "pool-alloc:ctxless-pool-alloc", "reason": reason, "code_signal": None}]}
    rows = [{"name": "p", "detail": "conflict"}]
    annotate_behaviour(rows, judged)
    assert rows[0]["detail"] == ("conflict; behaviour: still-needed (upstream made it worse) "
                                 "(pool-alloc:ctxless-pool-alloc)")
    assert rows[0]["behaviour"]["reason"] == reason
