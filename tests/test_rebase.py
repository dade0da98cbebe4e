"""rebase: absorbed patches move with Applied-Upstream + signal, version bumps, conflicts, range-diff."""

from __future__ import annotations

from conftest import commit_all, write


def test_rebase_absorbs_and_bumps_major(toy, cli):
    ws, up = toy["ws"], toy["upstream"]
    tdir = ws / "patches/toy"
    names = (tdir / "series").read_text().split()
    p1_before = (tdir / names[0]).read_bytes()
    write(up, "src/b.c", "int b(void) {\n    return 20;\n}\n")
    fix_b = commit_all(up, "upstream takes fix b")
    write(up, "README", "r\n")
    onto = commit_all(up, "docs")
    r = cli("--workspace", ws, "rebase", "toy", "--source", up, "--onto", "main", "--json")
    assert r.code == 0, r.err
    doc = r.json
    assert [(p["name"], p["action"]) for p in doc["patches"]] == [(names[0], "carried"), (names[1], "absorbed")]
    assert doc["patches"][1]["signal"] == "patch-id" and doc["patches"][1]["upstream_commit"] == fix_b
    assert doc["new_version"] == "2.0.0" and doc["bump"] == "major"
    assert (tdir / "series").read_text().split() == [names[0]]
    assert (tdir / names[0]).read_bytes() == p1_before  # carried exactly: no churn
    absorbed = (tdir / "absorbed" / names[1]).read_text()
    assert f"Applied-Upstream: {fix_b}" in absorbed and "Applied-Upstream-Signal: patch-id" in absorbed
    toml = (tdir / "target.toml").read_text()
    assert f'base = "{onto}"' in toml and 'version = "2.0.0"' in toml
    assert doc["direction"] == "forward" and doc["written"] is True and doc["range_diff"]


def test_rebase_refreshes_3way_patch_and_reports_conflicts(toy, cli):
    ws, up = toy["ws"], toy["upstream"]
    tdir = ws / "patches/toy"
    names = (tdir / "series").read_text().split()
    write(up, "src/b.c", "/* b */\nint b(void) {\n    return 2;\n}\n")
    commit_all(up, "comment b")
    r = cli("--workspace", ws, "rebase", "toy", "--source", up, "--onto", "main", "--json")
    assert r.code == 0, r.err
    assert [(p["action"], p["applies"]) for p in r.json["patches"]] == [("carried", "exact"), ("carried", "3-way")]
    assert r.json["patches"][1]["new_patch_id"] is not None  # context changed: so does the patch id (minor)
    assert r.json["bump"] == "major" and r.json["new_version"] == "2.0.0"
    assert b"/* b */" in (tdir / names[1]).read_bytes()
    # now upstream rewrites a.c: a dry run reports the conflict by name and still tries the rest
    write(up, "src/a.c", "int a(void) {\n    return 5;\n}\n")
    commit_all(up, "a five")
    before = {p.name: p.read_bytes() for p in tdir.iterdir() if p.is_file()}
    r = cli("--workspace", ws, "rebase", "toy", "--source", up, "--onto", "main", "--json", "--dry-run")
    assert r.code == 1
    assert [(p["action"], p["applies"]) for p in r.json["patches"]] == [("would stop", "conflict"), ("carried", "exact")]
    assert r.json["conflicts"] == [names[0]] and "session" not in r.json
    # a real run stops at the conflict with a session; nothing written
    r = cli("--workspace", ws, "rebase", "toy", "--source", up, "--onto", "main", "--json")
    assert r.code == 1 and r.json["phase"] == "conflict" and r.json["session"]["current"] == names[0]
    assert [p["action"] for p in r.json["patches"]] == ["stopped", "pending"]
    assert {p.name: p.read_bytes() for p in tdir.iterdir() if p.is_file()} == before


def test_rebase_same_base_text_only_is_patch_bump(toy, cli):
    from lucepatch.engine.rebase import bump_version

    assert bump_version("1.2.3", "patch") == "1.2.4"
    assert bump_version("1.2.3", "minor") == "1.3.0"
    assert bump_version("1.2.3", "major") == "2.0.0"
    r = cli("--workspace", toy["ws"], "rebase", "toy", "--source", toy["upstream"], "--onto", toy["base"], "--json",
            "--dry-run")
    assert r.code == 0 and r.json["bump"] == "none" and r.json["new_version"] == "1.0.0"
