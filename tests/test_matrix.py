"""matrix: cumulative cells over a range, and agreement with apply/check on every cell."""

from __future__ import annotations

from conftest import commit_all, git, write


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
