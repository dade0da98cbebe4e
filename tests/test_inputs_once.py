"""Inputs validated once (issue 35 item 5): `render` checks values against the chart's own
values.schema.json before anything is rendered or written; a path lucepatch cannot write is one line;
a range with merges is imported by first parent, or refused with the reason, never with the other
side's changes in a patch. tests/test_helm_chart.py holds helm to the same schema and the chart to
the release namespace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from unidiff import PatchSet

from conftest import REPO_ROOT, commit_all, git, init_repo, write


# ---- values ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("setting,why", [
    ("port=abc", "port: 'abc' is not of type 'integer'"),
    ("port=0", "port: 0 is less than the minimum of 1"),
    ("gpu_count=0", "gpu_count: 0 is less than the minimum of 1"),
    ("image_pull_policy=Sometimes", "image_pull_policy: 'Sometimes' is not one of"),
])
def test_render_refuses_a_value_the_schema_refuses_before_writing(cli, tmp_path, setting, why):
    out = tmp_path / "k8s"
    r = cli("render", "k8s", "lucebox", "--set", setting, "--validate", "1.35", "--out", out)
    assert r.code == 2 and why in r.err and r.err.count("\n") == 1 and r.out == "", r.err
    assert not out.exists()
    assert "validated" not in r.err  # at 38ae54e: exit 0, containerPort 0, "validated against Kubernetes 1.35"


def test_every_set_is_checked_by_its_schema(cli):
    from lucepatch.k8s import values

    for name in values.SCHEMAS:
        values.check(name, values.defaults(values.SCHEMAS[name]))  # the defaults pass their own schema
    r = cli("render", "k8s", "verify-job", "--set", "runs=0")
    assert r.code == 2 and "runs: 0 is less than the minimum of 1" in r.err
    r = cli("render", "k8s", "verify-job", "--set", "variant=both")
    assert r.code == 2 and "variant: 'both' is not one of ['baseline', 'patched']" in r.err


# ---- paths ----------------------------------------------------------------------------------------
def test_a_page_lucepatch_cannot_write_is_one_line(cli, tmp_path):
    ev = REPO_ROOT / "docs" / "evidence" / "async-sched.h200.json"
    for bad in ("/proc/x.html", str(tmp_path / "file" / "x.html")):
        (tmp_path / "file").write_text("a file, not a folder")
        r = cli("show", ev, "--html", bad)
        assert r.code == 2 and r.err.startswith("lucepatch: error: cannot write the page to ") and \
            r.err.count("\n") == 1 and r.out == "", r.err  # at 38ae54e: a 37-line traceback, exit 70


# ---- ranges with merges -----------------------------------------------------------------------------
LINES = [f"line {i}\n" for i in range(1, 13)]


def _edit(repo: Path, n: int, text: str, msg: str) -> str:
    lines = (repo / "a.txt").read_text().splitlines(keepends=True)
    lines[n - 1] = text + "\n"
    write(repo, "a.txt", "".join(lines))
    return commit_all(repo, msg)


def _imported(cli, tmp_path, repo: Path, a: str, b: str):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "lucepatch.toml").write_text("")
    return cli("--workspace", ws, "--cache-dir", tmp_path / "cache", "import", "side", "--from-branch", f"{a}..{b}",
               "--source", repo, "--base", a, "--upstream", "https://example.invalid/side"), ws / "patches" / "side"


def test_a_range_with_merges_is_imported_by_first_parent(cli, tmp_path):
    """A feature branch merged into the range's main line: at 38ae54e the side's commit was put after
    the main line's with its own tree, so its patch deleted the main line's edit and the next put it back."""
    repo = init_repo(tmp_path / "fork")
    write(repo, "a.txt", "".join(LINES))
    c0 = commit_all(repo, "base")
    git(repo, "checkout", "-q", "-b", "feature")
    _edit(repo, 2, "line 2, the feature's", "feature: line 2")
    git(repo, "checkout", "-q", "main")
    _edit(repo, 10, "line 10, main's", "main: line 10")
    git(repo, "merge", "-q", "--no-ff", "feature", "-m", "Merge pull request #1 from fork/feature")
    _edit(repo, 5, "line 5, after the merge", "main: line 5")
    r, tdir = _imported(cli, tmp_path, repo, c0, "main")
    assert r.code == 0, r.err
    names = (tdir / "series").read_text().split()
    assert len(names) == 3 and "Merge-pull-request" in names[1]
    removed_later_added: list[str] = []
    seen_minus: set[str] = set()
    for n in names:
        ps = PatchSet((tdir / n).read_text())
        minus = {l.value for f in ps for h in f for l in h if l.is_removed}
        plus = {l.value for f in ps for h in f for l in h if l.is_added}
        removed_later_added += sorted(plus & seen_minus)
        seen_minus |= minus
    assert removed_later_added == [], removed_later_added  # no patch undoes what another patch did
    # applied in order on the base they give main's tree
    chk = init_repo(tmp_path / "check")
    write(chk, "a.txt", "".join(LINES))
    commit_all(chk, "base")
    for n in names:
        git(chk, "apply", str(tdir / n))
    assert (chk / "a.txt").read_text() == (repo / "a.txt").read_text()


def test_a_range_that_merges_upstream_into_the_branch_is_refused_with_the_reason(cli, tmp_path):
    up = init_repo(tmp_path / "upstream")
    write(up, "a.txt", "".join(LINES))
    u0 = commit_all(up, "base")
    subprocess.run(["git", "clone", "-q", str(up), str(tmp_path / "fork")], check=True)
    fork = tmp_path / "fork"
    for k, v in (("user.name", "Fork Dev"), ("user.email", "fork@example.invalid")):
        git(fork, "config", k, v)
    git(fork, "checkout", "-q", "-b", "fix")
    _edit(fork, 3, "line 3, the fix", "fix: line 3")
    u1 = _edit(up, 11, "line 11, upstream moved on", "upstream: line 11")
    git(fork, "fetch", "-q", "origin")
    git(fork, "merge", "-q", "--no-ff", "origin/main", "-m", "Merge branch 'main' into fix")
    merge = git(fork, "rev-parse", "HEAD").strip()
    _edit(fork, 4, "line 4, the fix goes on", "fix: line 4")
    r, tdir = _imported(cli, tmp_path, fork, u0, "fix")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert f"{merge[:12]} (Merge branch 'main' into fix) merges upstream {u1[:12]} into the branch" in r.err
    assert not tdir.exists()  # nothing written


def test_hami_core_pr_145_imports_by_first_parent():
    """The real case named in the issue: HAMi-core PR #145 (a fork's main, its own PRs merged in)."""
    src = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
    bundle = Path(os.environ.get("LUCEPATCH_HAMI_CORE_BUNDLE") or REPO_ROOT.parent / "shared/upstream/hami-core.bundle")
    if not src or not bundle.is_file():
        pytest.skip("no-upstream: set LUCEPATCH_SRC_HAMI_CORE and LUCEPATCH_HAMI_CORE_BUNDLE (the bundle with the PR "
                    "heads; default ../shared/upstream/hami-core.bundle)")
    from lucepatch.engine.commits import format_commits, upstream_merge

    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"lucepatch-pr145-{os.getpid()}"
    subprocess.run(["git", "clone", "-q", "--no-checkout", src, str(work)], check=True)
    try:
        git(work, "fetch", "-q", str(bundle), "+refs/pull/145/head:pr145")
        base = git(work, "merge-base", "pr145", "origin/HEAD").strip()
        assert upstream_merge(work, base, "pr145") is None  # its merges are the fork's own PRs
        files = format_commits(work, base, "pr145", work / "out")
        chain = git(work, "rev-list", "--first-parent", "--reverse", f"{base}..pr145").split()
        assert [c for _, _, c in files] == chain and len(chain) < len(git(work, "rev-list", f"{base}..pr145").split())
        # each patch is one step of the chain: applied in order on the base, each gives that commit's tree
        git(work, "checkout", "-q", base)
        for f, _, c in files:
            git(work, "apply", "--index", str(f))
            assert git(work, "write-tree").strip() == git(work, "rev-parse", f"{c}^{{tree}}").strip(), f.name
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=True)
