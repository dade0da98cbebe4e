"""matrix: cumulative cells over a range, and agreement with apply/check on every cell (toy
histories, and the whole real HAMi-core history against the per-state engine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, commit_all, git, write


def _history(up):
    """Upstream moves: unrelated, context change (3-way), takes patch 2, conflicts patch 1."""
    commits = []
    write(up, "README", "readme\n")
    commits.append(commit_all(up, "docs"))
    write(up, "src/b.c", "/* b */\nint b(void) {\n    return 2;\n}\n")
    commits.append(commit_all(up, "comment on b"))  # patch 2 needs 3-way (context line 1 moved)
    write(up, "src/b.c", "/* b */\nint b(void) {\n    return 20;\n}\n")
    commits.append(commit_all(up, "upstream fixes b"))  # patch 2 already upstream
    write(up, "src/a.c", "int a(void) {\n    return 5;\n}\n")
    commits.append(commit_all(up, "a returns five"))  # patch 1 conflicts
    return commits


def test_matrix_cells_and_agreement_with_check(toy, cli):
    ws, up, base = toy["ws"], toy["upstream"], toy["base"]
    commits = _history(up)
    r = cli("--workspace", ws, "matrix", "toy", "--source", up, "--range", f"{base}..HEAD", "--json")
    assert r.code == 0, r.err
    doc = r.json
    assert [c["commit"] for c in doc["commits"]] == commits
    cells = {c["commit"]: c["cells"] for c in doc["commits"]}
    seen = {s for row in cells.values() for s in row}
    assert {"applied", "applied-3way", "already-upstream", "conflict"} <= seen
    assert doc["newest_compatible"] == commits[2]
    # computed by rounds (blob ids + one batch per patch), not one engine run per state
    assert doc["evaluation"]["method"] == "rounds", doc["evaluation"]
    assert doc["evaluation"]["git_runs"] <= 4 + 5 * 2
    for c in commits:
        rc = cli("--workspace", ws, "check", "toy", "--source", up, "--onto", c, "--json")
        assert [p["status"] for p in rc.json["patches"]] == cells[c], c
    r2 = cli("--workspace", ws, "matrix", "toy", "--source", up, "--range", f"{base}..HEAD", "--newest-compatible")
    assert r2.code == 0 and r2.out.strip() == commits[2]


def test_matrix_independent_and_cumulative_differ_when_patches_depend(toy, cli, tmp_path):
    ws, up, base = toy["ws"], toy["upstream"], toy["base"]
    # a third patch that edits the line patch 2 wrote: it only applies cumulatively
    tdir = ws / "patches/toy"
    git(up, "checkout", "-q", "-b", "w3", base)
    write(up, "src/b.c", "int b(void) {\n    return 20;\n}\n")
    commit_all(up, "p2 again")
    write(up, "src/b.c", "int b(void) {\n    return 200;\n}\n")
    commit_all(up, "b returns 200\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    out = git(up, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "-1", "--stdout", "HEAD")
    (tdir / "b200.patch").write_text(out)
    with open(tdir / "series", "a") as f:
        f.write("b200.patch\n")
    git(up, "checkout", "-q", "main")
    write(up, "README", "x\n")
    commit_all(up, "docs")
    r = cli("--workspace", ws, "matrix", "toy", "--source", up, "--range", f"{base}..main", "--json")
    assert r.json["commits"][0]["cells"] == ["applied", "applied", "applied"]
    r = cli("--workspace", ws, "matrix", "toy", "--source", up, "--range", f"{base}..main", "--json", "--independent")
    assert r.json["commits"][0]["cells"][:2] == ["applied", "applied"]
    assert r.json["commits"][0]["cells"][2] != "applied"


def test_matrix_never_touches_source(toy, cli):
    from test_apply import snapshot

    up = toy["upstream"]
    _history(up)
    before = snapshot(up)
    assert cli("--workspace", toy["ws"], "matrix", "toy", "--source", up, "--range", f"{toy['base']}..HEAD").code == 0
    assert snapshot(up) == before


def test_stale_index_lines_lose_the_blob_id_shortcut(toy, cli):
    """A hand-edited patch whose `index` line names another postimage: git apply ignores the
    line, so must matrix. The shortcut is taken only after git confirmed the line."""
    ws, up, base = toy["ws"], toy["upstream"], toy["base"]
    commits = _history(up)
    pf = ws / "patches/toy" / (ws / "patches/toy/series").read_text().split()[0]
    text = pf.read_text()
    import re

    pre, post = re.search(r"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})", text, re.M).groups()
    pf.write_text(text.replace(f"{pre}..{post}", f"{pre}..{'1' * 40}"))
    r = cli("--workspace", ws, "matrix", "toy", "--source", up, "--range", f"{base}..HEAD", "--json")
    assert r.code == 0, r.err
    assert pf.name not in r.json["evaluation"]["index_lines_trusted"]
    assert r.json["evaluation"]["index_lines_trusted"]  # the other patch keeps its shortcut
    cells = {c["commit"]: c["cells"] for c in r.json["commits"]}
    for c in commits:
        rc = cli("--workspace", ws, "check", "toy", "--source", up, "--onto", c, "--json")
        assert [p["status"] for p in rc.json["patches"]] == cells[c], c


def test_trusted_index_lines_skip_git(toy, cli):
    ws, up, base = toy["ws"], toy["upstream"], toy["base"]
    for i in range(3):
        write(up, "README", f"docs {i}\n")
        commit_all(up, f"docs {i}")
    r = cli("--workspace", ws, "matrix", "toy", "--source", up, "--range", f"{base}..HEAD", "--json")
    ev = r.json["evaluation"]
    assert ev["method"] == "rounds" and ev["exact_by_blob_id"] == 2, ev  # both patches, one state
    assert all(c["cells"] == ["applied", "applied"] for c in r.json["commits"])


HAMI = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")


@pytest.mark.skipif(not HAMI or not Path(HAMI, ".git").exists(), reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE")
@pytest.mark.parametrize("independent", [False, True], ids=["cumulative", "independent"])
def test_rounds_agree_with_the_engine_on_the_whole_hami_core_history(tmp_path, independent):
    """Every commit of HAMi-core x the real series: the batched rounds give exactly the cells of
    the per-state engine (a read-tree and `git apply` per patch per distinct state)."""
    from lucepatch.engine import matrix as M
    from lucepatch.engine.apply import WorkArea, prepare_private
    from lucepatch.target import load_target
    from lucepatch.workspace import resolve_workspace

    t = load_target(resolve_workspace(REPO_ROOT), "hami-core")
    with WorkArea(tmp_path / "cache", "matrix-agree") as work:
        root = git(HAMI, "rev-list", "--max-parents=0", "HEAD").split()[-1]
        commits, subjects = M.range_commits(Path(HAMI), f"{root}..HEAD")
        files = prepare_private(Path(HAMI), t.patches, work, commits[-1])
        res = M.run_matrix(work.repo, work.path, t.patches, files, commits, subjects, independent=independent)
        assert res.stats["method"] == "rounds", res.stats
        first = {}
        for c, key in zip(commits, M.state_keys(work.repo, commits, M._series_paths(t.patches))[0]):
            first.setdefault(key, c)
        rows: dict = {}
        M._run_full(work.repo, work.path, list(first.values()), t.patches, files, independent, 2, rows, {})
        by_commit = dict(zip(commits, res.cells))
        bad = [(c[:10], by_commit[c], rows[c]) for c in first.values() if by_commit[c] != rows[c]]
        assert not bad, bad[:5]
        seen = {s for row in res.cells for s in row}
        assert {"applied", "applied-3way", "conflict"} <= seen


def test_index_file_written_and_read_like_git(tmp_path):
    """matrix writes its synthetic index itself and reads git's result itself (lucepatch/odb.py): both must be
    byte-compatible with git (ls-files agrees, and a conflict's stages are read back)."""
    from conftest import init_repo
    from lucepatch.odb import read_index, write_index

    up = init_repo(tmp_path / "r")
    write(up, "x", "one\n")
    write(up, "dir/y", "two\n")
    commit_all(up, "base")
    blobs = {p: git(up, "rev-parse", f"HEAD:{p}").strip() for p in ("x", "dir/y")}
    idx = tmp_path / "index"
    write_index(idx, [("100644", blobs["x"], "e1/x"), ("100755", blobs["dir/y"], "e0/dir/y")])
    env = {"GIT_INDEX_FILE": str(idx)}
    assert git(up, "ls-files", "-s", env=env).splitlines() == [
        f"100755 {blobs['dir/y']} 0\te0/dir/y", f"100644 {blobs['x']} 0\te1/x"]
    assert read_index(idx, 40) == [("e0/dir/y", blobs["dir/y"], 0), ("e1/x", blobs["x"], 0)]
    # a conflict written by git apply --3way: stages 1-3 read back
    write(up, "x", "one, changed\n")
    commit_all(up, "change")
    diff = git(up, "diff", "--full-index", "HEAD~1", "HEAD")
    write(up, "x", "one, theirs\n")
    commit_all(up, "other")
    git(up, "read-tree", "HEAD", env=env)
    r = subprocess.run(["git", "apply", "--cached", "--3way"], input=diff, text=True, cwd=up,
                       capture_output=True, env={**os.environ, **env})
    assert r.returncode == 1 and "conflicts" in r.stderr
    listed = read_index(idx, 40)
    want = [tuple(l.split("\t")[1:] + l.split("\t")[0].split()[1:]) for l in git(up, "ls-files", "-s", env=env).splitlines()]
    assert [(p, o, s) for p, o, s in listed] == [(p, o, int(s)) for p, o, s in want]
    assert {s for p, _, s in listed if p == "x"} == {1, 2, 3}
