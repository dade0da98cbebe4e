"""apply/check on throwaway repos: exact, 3-way, after-conflict, untouched checkout on conflict."""

from __future__ import annotations

from conftest import commit_all, git, write


def snapshot(repo):
    return (git(repo, "status", "--porcelain=v2", "--ignored"), git(repo, "for-each-ref"),
            git(repo, "rev-parse", "HEAD"), git(repo, "worktree", "list", "--porcelain"),
            git(repo, "stash", "list"))


def test_apply_switches_branch_with_trailers(toy, cli):
    r = cli("--workspace", toy["ws"], "apply", "toy", "--source", toy["upstream"], "--json")
    assert r.code == 0, r.err
    doc = r.json
    assert doc["schema_version"] == 1
    assert [p["status"] for p in doc["patches"]] == ["applied", "applied"]
    assert doc["switched"] is True
    assert git(toy["upstream"], "symbolic-ref", "--short", "HEAD").strip() == "lucepatch/toy/1.0.0"
    assert "return 20" in (toy["upstream"] / "src/b.c").read_text()
    msg = git(toy["upstream"], "log", "-1", "--format=%B")
    assert "Lucepatch-Series: toy@1.0.0" in msg
    assert f"Patch-Id: {doc['patches'][1]['patch_id']}" in msg
    # the upstream author of the patch is kept, the sign-off is the patch's own
    assert git(toy["upstream"], "log", "-1", "--format=%an").strip() == "Upstream Dev"
    assert "Signed-off-by: Fixer <fixer@example.invalid>" in msg


def test_check_touches_nothing(toy, cli):
    before = snapshot(toy["upstream"])
    r = cli("--workspace", toy["ws"], "check", "toy", "--source", toy["upstream"], "--json")
    assert r.code == 0, r.err
    assert snapshot(toy["upstream"]) == before


def test_conflict_is_reported_later_patches_tried_checkout_untouched(toy, cli):
    up = toy["upstream"]
    # upstream moves: a.c changes under patch 1, so check --onto the new head conflicts there only
    write(up, "src/a.c", "int a(void) {\n    return 5;\n}\n")
    new = commit_all(up, "upstream changes a")
    before = snapshot(up)
    r = cli("--workspace", toy["ws"], "check", "toy", "--source", up, "--onto", new, "--json")
    assert r.code == 1
    statuses = [(p["status"], p["after_conflict"]) for p in r.json["patches"]]
    assert statuses == [("conflict", False), ("applied", True)]
    # apply onto the pinned base still works; but a conflicting apply must leave the checkout alone
    toml = toy["ws"] / "patches/toy/target.toml"
    toml.write_text(toml.read_text().replace(toy["base"], new))
    r = cli("--workspace", toy["ws"], "apply", "toy", "--source", up)
    assert r.code == 1
    assert snapshot(up) == before


def test_already_upstream_is_not_a_conflict(toy, cli):
    up = toy["upstream"]
    write(up, "src/b.c", "int b(void) {\n    return 20;\n}\n")  # upstream took patch 2 by hand
    new = commit_all(up, "upstream fixes b itself")
    r = cli("--workspace", toy["ws"], "check", "toy", "--source", up, "--onto", new, "--json")
    assert r.code == 0, r.err
    assert [p["status"] for p in r.json["patches"]] == ["applied", "already-upstream"]


def test_dirty_checkout_refused(toy, cli):
    write(toy["upstream"], "src/a.c", "dirty\n")
    r = cli("--workspace", toy["ws"], "apply", "toy", "--source", toy["upstream"])
    assert r.code == 2
    assert len(r.err.strip().splitlines()) == 1 and "uncommitted" in r.err


def test_missing_base_is_environment_error(toy, cli):
    toml = toy["ws"] / "patches/toy/target.toml"
    toml.write_text(toml.read_text().replace(toy["base"], "deadbeef" * 5))
    r = cli("--workspace", toy["ws"], "check", "toy", "--source", toy["upstream"])
    assert r.code == 3
    assert "--fetch" in r.err and "Traceback" not in r.err


def test_not_a_repo(toy, cli, tmp_path):
    r = cli("--workspace", toy["ws"], "check", "toy", "--source", tmp_path)
    assert r.code == 2 and "not a git checkout" in r.err


def test_apply_in_a_sha256_repository(tmp_path, cli):
    """Commits built in Python are sha1; in a sha256 repository git's ids differ and apply falls
    back to `git commit-tree` for the whole series instead of failing."""
    from conftest import format_patches, make_target

    up = tmp_path / "up"
    up.mkdir()
    git(up, "init", "-q", "--object-format=sha256", "-b", "main")
    write(up, "a.c", "int a = 1;\n")
    base = commit_all(up, "base")
    git(up, "checkout", "-q", "-b", "w")
    write(up, "a.c", "int a = 2;\n")
    commit_all(up, "two\n\nUpstream-Status: Pending")
    write(up, "a.c", "int a = 3;\n")
    commit_all(up, "three\n\nUpstream-Status: Pending")
    pf = format_patches(up, f"{base}..w", tmp_path / "fp")
    git(up, "checkout", "-q", "main")
    git(up, "branch", "-q", "-D", "w")
    make_target(tmp_path / "ws", "s256", base, pf)
    r = cli("--workspace", tmp_path / "ws", "apply", "s256", "--source", up, "--json")
    assert r.code == 0, r.err
    head = git(up, "rev-parse", "HEAD").strip()
    assert len(head) == 64 and r.json["head"] == head
    assert [p["commit"] for p in r.json["patches"]][-1] == head
    assert (up / "a.c").read_text() == "int a = 3;\n"
    assert git(up, "log", "--format=%s", "main..HEAD").split("\n")[:2] == ["three", "two"]

