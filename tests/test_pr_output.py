"""`pr` output a person can send (issue 35 item 4): the commits are the submitter's (git config), never
lucepatch's placeholder identity; the DCO check says who signed off; files are named after what they
change; the body reads in two minutes, the rest in the attached page and notes; what only the submitter
knows (AI use, where problems could occur, the release note) is left for them, never "None"; Lucebox's
CONTRIBUTING.md decides its conventions. At 38ae54e the packaged series went out authored and signed off
by `lucepatch maintainers <maintainers@lucepatch.invalid>`, "check dco: ok — signed off by their
authors", 13 files named `000N-TODO-submitter-...patch` and a 41 KB body."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, git, init_repo

from test_pr import GOOD_C, _pr, _target_with

NOBODY = {"GIT_AUTHOR_NAME": "lucepatch maintainers", "GIT_AUTHOR_EMAIL": "maintainers@lucepatch.invalid"}
HAMI = "https://github.com/Project-HAMi/HAMi-core"
UNCLAIMED = "fix(a): return two\n\nBecause.\n\nSigned-off-by: lucepatch maintainers <maintainers@lucepatch.invalid>"


def _commits(out: Path, tmp_path: Path) -> list[str]:
    """author, committer and message of every commit the PR's branch.bundle carries."""
    clone = tmp_path / "from-bundle"
    init_repo(clone)
    git(clone, "fetch", "-q", str(out / "branch.bundle"), "+refs/heads/*:refs/remotes/pr/*")
    head = git(clone, "for-each-ref", "--format=%(refname)", "refs/remotes/pr/").split()[0]
    return git(clone, "log", "--format=%an <%ae>|%cn <%ce>|%B%x00", head, "--not", "--exclude=refs/remotes/*",
               "--all").split("\x00")


def test_the_submitter_authors_and_signs_what_lucepatch_holds_for_nobody(cli, tmp_path):
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, UNCLAIMED)], upstream=HAMI, author_env=NOBODY)
    # DCO wants a person's sign-off: refused in one line that says how to give it
    r = _pr(cli, fx, tmp_path / "o1")
    assert r.code == 1 and r.err.count("\n") == 1 and "--signoff to certify it as Upstream Dev <dev@upstream.invalid>" in r.err
    out = tmp_path / "out"
    r = _pr(cli, fx, out, "--signoff")
    assert r.code == 0, r.err
    assert "check dco: ok — 1 commit(s), each signed off by its author (Upstream Dev <dev@upstream.invalid>)" in r.out
    for f in out.iterdir():  # no invented identity anywhere in what is sent
        if f.suffix in (".patch", ".md", ".json", ".html"):
            assert "lucepatch.invalid" not in f.read_text(), f.name
    patch = next(out.glob("*.patch")).read_text()
    assert "From: Upstream Dev <dev@upstream.invalid>" in patch
    assert patch.count("Signed-off-by: Upstream Dev <dev@upstream.invalid>") == 1


def test_no_git_identity_is_one_line_never_an_invented_one(cli, tmp_path, monkeypatch):
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, UNCLAIMED)], upstream=HAMI, author_env=NOBODY)
    git(fx["up"], "config", "--unset", "user.name")
    git(fx["up"], "config", "--unset", "user.email")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    r = _pr(cli, fx, tmp_path / "out")
    assert r.code == 2 and r.err.count("\n") == 1 and "needs your git identity" in r.err and "never invents" in r.err
    assert not (tmp_path / "out").exists()


def test_the_dco_check_refuses_a_placeholder_and_names_real_signers(tmp_path):
    from lucepatch.upstream.checks import check_dco

    repo = init_repo(tmp_path / "r")
    (repo / "a").write_text("a\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "a").write_text("b\n")
    git(repo, "commit", "-q", "-am", UNCLAIMED, env={**os.environ, **NOBODY})
    res = check_dco(repo, base, {})
    assert not res.ok and "<maintainers@lucepatch.invalid> is lucepatch's placeholder identity, not a person" in res.findings[0]


def test_files_are_named_after_what_they_change(cli, tmp_path):
    msgs = [f"fix(a): return {i}\n\nSigned-off-by: Fixer <fixer@example.invalid>" for i in (2, 3)]
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, msgs[0]), ({"src/a.c": GOOD_C.replace("2", "3")}, msgs[1])],
                      upstream=HAMI, author_env={"GIT_AUTHOR_NAME": "Fixer", "GIT_AUTHOR_EMAIL": "fixer@example.invalid"})
    out = tmp_path / "out"
    r = _pr(cli, fx, out)
    assert r.code == 0, r.err
    names = sorted(p.name for p in out.glob("*.patch"))
    # HAMi's commits carry the submitter's placeholder message; the files are named after the patches
    assert names == ["0001-fix-a-return-2.patch", "0002-fix-a-return-3.patch"], names
    assert "TODO(submitter)" in (out / names[0]).read_text()


@pytest.mark.parametrize("upstream,ai", [(HAMI, "**AI Disclosure**"), ("https://github.com/Luce-Org/lucebox-hub", "### AI disclosure"),
                                         ("https://example.invalid/toy", "### AI disclosure")])
def test_what_only_the_submitter_knows_is_left_to_them(cli, tmp_path, upstream, ai):
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, "fix(a): return two\n\nSigned-off-by: Fixer <fixer@example.invalid>")],
                      upstream=upstream, author_env={"GIT_AUTHOR_NAME": "Fixer", "GIT_AUTHOR_EMAIL": "fixer@example.invalid"})
    r = _pr(cli, fx, tmp_path / "out")
    assert r.code == 0, r.err
    body = (tmp_path / "out" / "pr-body.md").read_text()
    for section in (ai, "Where problems could occur"):
        after = body[body.index(section) + len(section):].lstrip("*\n ")
        assert after.startswith("<!-- Submitter:"), (section, after[:80])
    said = re.sub(r"<!--.*?-->", "", body, flags=re.S)  # what lucepatch says, not what it asks the submitter
    assert "None" not in said and "NONE" not in said
    if upstream == HAMI:  # the release note is theirs too
        assert "```release-note\n<!-- Submitter:" in body


def test_lucebox_follows_its_contributing(cli, tmp_path):
    lucebox = "https://github.com/Luce-Org/lucebox-hub"
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, "style(a): return two")], upstream=lucebox,
                      author_env={"GIT_AUTHOR_NAME": "Fixer", "GIT_AUTHOR_EMAIL": "fixer@example.invalid"})
    r = _pr(cli, fx, tmp_path / "out")
    assert r.code == 1 and "with a type of feat, fix, refactor, perf, docs, test, bench, chore, ci" in r.err
    fx = _target_with(tmp_path / "ok", [({"src/a.c": GOOD_C}, "perf(a): return two")], upstream=lucebox,
                      author_env={"GIT_AUTHOR_NAME": "Fixer", "GIT_AUTHOR_EMAIL": "fixer@example.invalid"})
    r = _pr(cli, fx, tmp_path / "ok" / "out")
    assert r.code == 0, r.err
    body = (tmp_path / "ok" / "out" / "pr-body.md").read_text()
    assert "### Benchmark (before / after)\n\n<!-- Submitter: Lucebox asks for before/after numbers" in body


def test_the_body_of_the_packaged_series_reads_in_two_minutes():
    """The packaged hami-core series (14 patches) with its H200 evidence: at 38ae54e 41 KB (51 KB and 7257
    words rendered from this series); at most 8 KB and 1200 words now, the submitter's comments aside (a
    table and lists, not prose), the rest in evidence.html and notes.md."""
    from lucepatch import api
    from lucepatch.render import render
    from lucepatch.upstream import pr
    from lucepatch.upstream.conventions import conventions_for
    from lucepatch.verify.evidence import load_evidence
    from lucepatch.verify.reproducer import list_reproducers

    ws = api.open_workspace(REPO_ROOT)
    t = api.target(ws, "hami-core")
    ev = load_evidence(REPO_ROOT / "docs" / "evidence" / "hami-core-all.h200x2.json")
    conv = conventions_for(t.upstream, t.pr.overrides())
    patches = pr.select_patches(t, None)
    ctx = pr._body_context(t, patches, ev, t.base, conv, [], {r.name: r for r in list_reproducers(ws)},
                           revision=1, range_diff="", ai_use=None, prev=None)
    ctx.update(probes=[], placeholder_messages=[])
    body = render(f"pr/{conv['template']}.md.j2", **ctx)
    read = re.sub(r"<!--.*?-->", "", body, flags=re.S)  # what a maintainer reads: the submitter replaces the comments
    assert len(patches) >= 13
    assert len(read.encode()) <= 8000 and len(read.split()) <= 1200, (len(read.encode()), len(read.split()))
    assert all(p.subject in body for p in patches)  # every change is named
    notes = render("pr/notes.md.j2", **ctx)
    assert all(pr._body_text(p)[:60] in notes for p in patches if pr._body_text(p))
