"""The one apply loop (engine/apply.py `apply_loop` on a `TreeState`) has two paths — Python where
git would apply a patch exactly (engine/fastapply.py), the per-patch engine (`git apply --cached` +
write-tree per patch) for the rest or, with LUCEPATCH_ENGINE=per-patch, for all — and they give the
same outcomes, trees and commit ids (dates are fixed by the patches, the committer by lucepatch):
on toy series with exact, 3-way, already-upstream, conflicting and after-conflict patches, new and
deleted files, unusual identities, and — with LUCEPATCH_SRC_HAMI_CORE — HAMi-core's own history as
a series (every non-merge commit 950c62f..8f3a89c) and the repository's series on their pins. The
loop's other users get the same: a rebase session's walk (commit per patch, absorbed and
conflicting ones) and the retirement's code signals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import REPO_ROOT, commit_all, format_patches, git, init_repo, make_target, write
from lucepatch.engine import retirement, session as S
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.target import load_target_dir


def both(monkeypatch, tmp_path, target, source, base=None, **kw):
    out = {}
    for path in ("per-patch", "fast"):
        if path == "per-patch":
            monkeypatch.setenv("LUCEPATCH_ENGINE", "per-patch")
        else:
            monkeypatch.delenv("LUCEPATCH_ENGINE", raising=False)
        with WorkArea(tmp_path / f"cache-{path}", "paths") as work:
            r = apply_series(target, source, target.patches, work, base=base, checkout=False, **kw)
            out[path] = r
            # every object of the result is readable (written by the fast path itself)
            if r.head != r.base:
                git(work.repo, "fsck", "--no-dangling", "--connectivity-only", r.head)
                assert git(work.repo, "rev-parse", f"{r.head}^{{tree}}").strip() == r.tree
    a, b = out["per-patch"], out["fast"]
    assert [(o.patch.name, o.status, o.commit, o.after_conflict) for o in a.outcomes] == \
           [(o.patch.name, o.status, o.commit, o.after_conflict) for o in b.outcomes]
    assert (a.head, a.tree) == (b.head, b.tree)
    return b


def _series(tmp_path, up, base, commits_fn, name="toy"):
    git(up, "checkout", "-q", "-b", "w", base)
    commits_fn(up)
    pf = format_patches(up, f"{base}..w", tmp_path / f"fp-{name}")
    git(up, "checkout", "-q", "main")
    return load_target_dir(make_target(tmp_path / "ws", name, base, pf))


def test_same_commits_on_exact_new_deleted_and_odd_identities(tmp_path, monkeypatch):
    up = init_repo(tmp_path / "up")
    write(up, "src/a.c", "".join(f"line {i}\n" for i in range(40)))
    write(up, "src/old.txt", "to be deleted\n")
    write(up, "lib/x.h", "#pragma once\n")
    base = commit_all(up, "base")

    def commits(r):
        write(r, "src/a.c", (r / "src/a.c").read_text().replace("line 3\n", "line three\n"))
        commit_all(r, "three\n\nSigned-off-by: A <a@b.c>")
        write(r, "src/new/deep/n.c", "int n;\n")
        (r / "src/old.txt").unlink()
        commit_all(r, "new and gone")
        write(r, "src/a.c", (r / "src/a.c").read_text().replace("line 30\n", "line thirty\nline 30a\n"))
        git(r, "add", "-A")
        git(r, "commit", "-q", "-m", "odd identity", env={"GIT_AUTHOR_NAME": "Ünïcode \"Q\" <x>", "GIT_AUTHOR_EMAIL": "u@x"})
        write(r, "lib/x.h", "")
        commit_all(r, "empty the header")
    t = _series(tmp_path, up, base, commits)
    r = both(monkeypatch, tmp_path, t, up)
    assert [o.status for o in r.outcomes] == ["applied"] * 4
    assert r.method["python"] >= 3  # the odd identity still applies in Python; its commit comes from commit-tree


def test_same_commits_with_3way_upstream_and_conflicts(tmp_path, monkeypatch):
    up = init_repo(tmp_path / "up")
    write(up, "a.c", "".join(f"a {i}\n" for i in range(30)))
    write(up, "b.c", "".join(f"b {i}\n" for i in range(30)))
    base = commit_all(up, "base")

    def commits(r):
        write(r, "a.c", (r / "a.c").read_text().replace("a 5\n", "a five\n"))
        commit_all(r, "a five")
        write(r, "b.c", (r / "b.c").read_text().replace("b 10\n", "b ten\n"))
        commit_all(r, "b ten")
        write(r, "a.c", (r / "a.c").read_text().replace("a 20\n", "a twenty\n"))
        commit_all(r, "a twenty")
    t = _series(tmp_path, up, base, commits)
    # upstream moves: context of patch 1 changes next to it (3-way), b ten lands upstream, a 20 conflicts
    write(up, "a.c", (up / "a.c").read_text().replace("a 8\n", "a eight\n").replace("a 20\n", "a 20!\n"))
    write(up, "b.c", (up / "b.c").read_text().replace("b 10\n", "b ten\n"))
    onto = commit_all(up, "upstream")
    r = both(monkeypatch, tmp_path, t, up, base=onto)
    assert [o.status for o in r.outcomes] == ["applied-3way", "already-upstream", "conflict"]
    # and after a conflict the later ones are still tried, exactly as the engine does
    write(up, "a.c", (up / "a.c").read_text().replace("a 5\n", "a 5!\n"))
    onto2 = commit_all(up, "conflict first")
    r = both(monkeypatch, tmp_path, t, up, base=onto2)
    assert r.outcomes[0].status == "conflict" and r.outcomes[2].after_conflict


def _paths(monkeypatch, fn):
    """fn() run on the per-patch path, then on the fast path."""
    out = {}
    for path in ("per-patch", "fast"):
        if path == "per-patch":
            monkeypatch.setenv("LUCEPATCH_ENGINE", "per-patch")
        else:
            monkeypatch.delenv("LUCEPATCH_ENGINE", raising=False)
        out[path] = fn(path)
    return out["per-patch"], out["fast"]


def _moved_upstream(tmp_path):
    """A toy series of three patches and an upstream that moved under it: patch 1 needs a 3-way
    merge, patch 2 landed upstream, patch 3 conflicts; and a fourth patch after the conflict."""
    up = init_repo(tmp_path / "up")
    write(up, "a.c", "".join(f"a {i}\n" for i in range(30)))
    write(up, "b.c", "".join(f"b {i}\n" for i in range(30)))
    base = commit_all(up, "base")

    def commits(r):
        write(r, "a.c", (r / "a.c").read_text().replace("a 5\n", "a five\n"))
        commit_all(r, "a five")
        write(r, "b.c", (r / "b.c").read_text().replace("b 10\n", "b ten\n"))
        commit_all(r, "b ten")
        write(r, "a.c", (r / "a.c").read_text().replace("a 20\n", "a twenty\n"))
        commit_all(r, "a twenty")
        write(r, "b.c", (r / "b.c").read_text().replace("b 25\n", "b twenty-five\n"))
        commit_all(r, "b twenty-five")
    t = _series(tmp_path, up, base, commits)
    write(up, "a.c", (up / "a.c").read_text().replace("a 8\n", "a eight\n").replace("a 20\n", "a 20!\n"))
    write(up, "b.c", (up / "b.c").read_text().replace("b 10\n", "b ten\n"))
    return up, t, commit_all(up, "upstream")


def test_same_commits_in_a_rebase_session(tmp_path, monkeypatch):
    """A session's walk goes through the one loop, patch by patch: both paths carry each patch to
    the same commit (exact, 3-way), absorb the same one and stop at the same conflict."""
    up, t, onto = _moved_upstream(tmp_path)

    def walk(path):
        doc = S.dry_run(tmp_path / f"cache-{path}", t, up, onto, S.Options(no_behaviour=True))
        return [(r["name"], r["applies"], r["action"], r["commit"]) for r in doc["patches"]]
    a, b = _paths(monkeypatch, walk)
    assert a == b
    assert [x[1:3] for x in b] == [("3-way", "carried"), ("already-upstream", "absorbed"), ("conflict", "would stop"),
                                   ("exact", "carried")]
    assert all(c for _, applies, _, c in b if applies in ("exact", "3-way"))


def test_same_code_signals_for_retirement(tmp_path, monkeypatch):
    """The retirement's code signals re-apply the series on REF through the one loop (its 3-way
    signal: a patch that changes nothing there): the same signals on both paths."""
    up, t, onto = _moved_upstream(tmp_path)
    a, b = _paths(monkeypatch, lambda path: retirement.code_signals(t, up, t.base, onto, tmp_path / f"c-{path}"))
    assert a == b
    assert (b[t.patches[1].name] or {}).get("signal") in ("3-way", "content-match", "reverse-apply")
    assert b[t.patches[0].name] is None and b[t.patches[2].name] is None


HAMI = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
needs_hami = pytest.mark.skipif(not HAMI or not Path(HAMI, ".git").exists(),
                                reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE")


@needs_hami
def test_same_commits_on_hami_core_history_as_a_series(tmp_path, monkeypatch):
    """Every non-merge commit of 950c62f..8f3a89c as one series on 950c62f: most apply exactly,
    some need 3-way, some conflict — both paths agree on all of them."""
    up = Path(HAMI)
    base = git(up, "rev-parse", "950c62f").strip()
    pf = [f.rename(f.with_name("p" + f.name)) for f in format_patches(up, f"{base}..8f3a89c", tmp_path / "fp")]
    t = load_target_dir(make_target(tmp_path / "ws", "hist", base, pf))
    r = both(monkeypatch, tmp_path, t, up)
    assert len(r.outcomes) > 50 and r.method["python"] > 30, r.method


@needs_hami
def test_same_commits_for_the_repository_series(tmp_path, monkeypatch):
    t = load_target_dir(REPO_ROOT / "patches" / "hami-core")
    r = both(monkeypatch, tmp_path, t, Path(HAMI))
    assert all(o.status == "applied" for o in r.outcomes) and r.method["python"] == len(r.outcomes)
