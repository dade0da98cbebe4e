"""status, export, lint, import on throwaway repos."""

from __future__ import annotations

import shutil

from conftest import commit_all, format_patches, git, init_repo, make_target, write


def _statuses(r):
    return [(p["status"], p["signal"]) for p in r.json["patches"]]


# -- status ------------------------------------------------------------------------------------
def test_status_not_applied_then_applied(toy, cli):
    ws, up = toy["ws"], toy["upstream"]
    r = cli("--workspace", ws, "status", "toy", "--source", up, "--json")
    assert r.code == 0, r.err
    assert [(p["status"], p["would"]) for p in r.json["patches"]] == [("not-applied", "applied")] * 2
    assert cli("--workspace", ws, "apply", "toy", "--source", up).code == 0
    r = cli("--workspace", ws, "status", "toy", "--source", up, "--json")
    assert [p["status"] for p in r.json["patches"]] == ["applied", "applied"]


def test_status_upstream_signals_and_near_miss(toy, cli):
    ws, up = toy["ws"], toy["upstream"]
    # patch 1 taken upstream verbatim (same patch-id) in a commit with other context
    write(up, "src/a.c", "int a(void) {\n    return 10;\n}\n")
    c1 = commit_all(up, "upstream: a returns ten")
    r = cli("--workspace", ws, "status", "toy", "--source", up, "--json")
    assert r.code == 0, r.err
    assert r.json["patches"][0]["status"] == "already-upstream"
    assert r.json["patches"][0]["signal"] == "patch-id" and r.json["patches"][0]["commit"] == c1
    assert r.json["patches"][1]["status"] == "not-applied"


def test_status_hand_rewritten_variant_is_upstream_near_miss_is_not(tmp_path, cli):
    up = init_repo(tmp_path / "up")
    body = "".join(f"int filler{i}(void) {{ return {i}; }}\n" for i in range(12))
    write(up, "m.c", "#include <stdio.h>\n\n" + body + "int dev_limit(int dev) {\n    if (dev < 0)\n        return 0;\n"
          "    return limits[dev];\n}\n" + body)
    base = commit_all(up, "base")
    git(up, "checkout", "-q", "-b", "fix")
    write(up, "m.c", (up / "m.c").read_text().replace(
        "    if (dev < 0)\n        return 0;\n", "    if (dev < 0 || dev >= MAX_DEVICES)\n        return 0;\n"
        "    if (limits == NULL)\n        return 0;\n"))
    commit_all(up, "fix: bound dev\n\nUpstream-Status: Pending\nSigned-off-by: A <a@b.c>")
    git(up, "checkout", "-q", "-b", "near", base)
    write(up, "m.c", (up / "m.c").read_text().replace(
        "    if (dev < 0)\n        return 0;\n", "    if (dev < 0 || dev > MAX_DEVICES)\n        return 0;\n"
        "    if (limits == NULL)\n        return 0;\n"))
    commit_all(up, "near miss: off by one\n\nUpstream-Status: Pending\nSigned-off-by: A <a@b.c>")
    fix = format_patches(up, f"{base}..fix", tmp_path / "fp1")
    near = format_patches(up, f"{base}..near", tmp_path / "fp2")
    git(up, "checkout", "-q", "main")
    # upstream rewrites the fix by hand: other whitespace, reflowed condition, other context
    text = (up / "m.c").read_text().replace("#include <stdio.h>", "#include <stdio.h>\n#include <stdlib.h>")
    text = text.replace("    if (dev < 0)\n        return 0;\n",
                        "\tif (dev < 0 ||\n\t    dev >= MAX_DEVICES)\n\t\treturn 0;\n\tif (limits==NULL)  return 0;\n")
    text = text.replace("int filler11(void) { return 11; }\nint dev_limit", "int filler11(void) { return 11; }\n\n/* doc */\nint dev_limit")
    write(up, "m.c", text)
    commit_all(up, "upstream: own version of the bound")
    ws = tmp_path / "ws"
    make_target(ws, "t", base, fix)
    r = cli("--workspace", ws, "status", "t", "--source", up, "--json")
    assert r.code == 0, r.err
    assert _statuses(r) == [("already-upstream", "content-match")]
    ws2 = tmp_path / "ws2"
    make_target(ws2, "t", base, near)
    r = cli("--workspace", ws2, "status", "t", "--source", up, "--json")
    assert r.json["patches"][0]["status"] != "already-upstream"


def test_status_reverse_apply_signal_for_squashed_upstream(toy, cli):
    ws, up = toy["ws"], toy["upstream"]
    write(up, "src/a.c", "int a(void) {\n    return 10;\n}\n")
    write(up, "src/b.c", "int b(void) {\n    return 20;\n}\n")
    commit_all(up, "upstream squashes both fixes")
    r = cli("--workspace", ws, "status", "toy", "--source", up, "--json")
    assert _statuses(r) == [("already-upstream", "reverse-apply")] * 2


# -- export ------------------------------------------------------------------------------------
def _bytes(tdir):
    return {p.name: p.read_bytes() for p in sorted(tdir.iterdir())}


def test_export_round_trip_is_byte_identical(toy, cli):
    ws, up = toy["ws"], toy["upstream"]
    tdir = ws / "patches/toy"
    before = _bytes(tdir)
    assert cli("--workspace", ws, "apply", "toy", "--source", up).code == 0
    r = cli("--workspace", ws, "export", "toy", "--source", up, "--json")
    assert r.code == 0, r.err
    assert [p["action"] for p in r.json["patches"]] == ["unchanged", "unchanged"]
    assert _bytes(tdir) == before
    assert cli("--workspace", ws, "export", "toy", "--source", up, "--check").code == 0


def test_export_only_touches_changed_patches(toy, cli):
    ws, up = toy["ws"], toy["upstream"]
    tdir = ws / "patches/toy"
    before = _bytes(tdir)
    assert cli("--workspace", ws, "apply", "toy", "--source", up).code == 0
    # the user adds a third commit on the branch
    write(up, "src/c.c", "int c(void) { return 3; }\n")
    commit_all(up, "feat: add c\n\nUpstream-Status: Pending\nSigned-off-by: Fixer <fixer@example.invalid>")
    assert cli("--workspace", ws, "export", "toy", "--source", up, "--check").code == 1
    r = cli("--workspace", ws, "export", "toy", "--source", up, "--json")
    assert [p["action"] for p in r.json["patches"]] == ["unchanged", "unchanged", "added"]
    after = _bytes(tdir)
    for name in before:
        if name != "series":
            assert after[name] == before[name]
    assert (tdir / "series").read_text().splitlines()[-1] == "feat-add-c.patch"
    assert after["feat-add-c.patch"].startswith(b"From 0000000000000000000000000000000000000000 ")
    assert b"Lucepatch-Series" not in after["feat-add-c.patch"] and b"Patch-Id:" not in after["feat-add-c.patch"]


# -- lint --------------------------------------------------------------------------------------
def test_lint_clean_and_errors(toy, cli):
    ws = toy["ws"]
    tdir = ws / "patches/toy"
    r = cli("--workspace", ws, "lint", "toy", "--json")
    assert r.code == 0, r.err
    first = tdir / (tdir / "series").read_text().split()[0]
    first.write_bytes(first.read_bytes().replace(b"Signed-off-by: Fixer <fixer@example.invalid>\n", b""))
    shutil.copy(first, tdir / "stray.patch")
    r = cli("--workspace", ws, "lint", "toy", "--json")
    assert r.code == 1
    checks = {(f["patch"], f["check"]) for f in r.json["findings"]}
    assert (first.name, "trailer") in checks and ("stray.patch", "series") in checks


def test_lint_whitespace_and_pending_age(toy, cli):
    ws = toy["ws"]
    tdir = ws / "patches/toy"
    first = tdir / (tdir / "series").read_text().split()[0]
    first.write_bytes(first.read_bytes().replace(b"Date: Thu, 1 Jan 2026", b"Date: Thu, 1 Jan 2015"))
    r = cli("--workspace", ws, "lint", "toy", "--json", "--pending-days", "30")
    assert r.code == 0, r.err
    assert any(f["check"] == "pending" and f["level"] == "warning" for f in r.json["findings"])
    first.write_bytes(first.read_bytes().replace(b"+    return 10;\n", b"+    return 10;  \n"))
    r = cli("--workspace", ws, "lint", "toy", "--json")
    assert r.code == 1 and any(f["check"] == "whitespace" for f in r.json["findings"])


# -- import ------------------------------------------------------------------------------------
def test_import_format_patch_dir_then_export_is_identity(toy, cli, tmp_path):
    up = toy["upstream"]
    src = toy["ws"] / "patches/toy"
    fp = tmp_path / "incoming"
    fp.mkdir()
    for i, n in enumerate((src / "series").read_text().split(), 1):
        shutil.copy(src / n, fp / f"{i:04d}-{n}")
    ws = tmp_path / "ws2"
    ws.mkdir()
    (ws / "lucepatch.toml").write_text("")
    (ws / "patches").mkdir()
    r = cli("--workspace", ws, "import", "toy", fp, "--base", toy["base"], "--json")
    assert r.code == 0, r.err
    tdir = ws / "patches/toy"
    assert (tdir / "series").read_text() == (src / "series").read_text()
    imported = _bytes(tdir)
    for n in (src / "series").read_text().split():
        assert imported[n] == (src / n).read_bytes()
    assert cli("--workspace", ws, "apply", "toy", "--source", up).code == 0
    assert cli("--workspace", ws, "export", "toy", "--source", up).code == 0
    assert _bytes(tdir) == imported
    # importing the same patches again adds nothing
    r = cli("--workspace", ws, "import", "toy", fp, "--json")
    assert {p["action"] for p in r.json["patches"]} == {"skipped (already in series)"}


def test_import_from_branch_and_mbox(toy, cli, tmp_path):
    up = toy["upstream"]
    git(up, "checkout", "-q", "-b", "feature")
    write(up, "src/a.c", "int a(void) {\n    return 11;\n}\n")
    commit_all(up, "fix(a): eleven\n\nUpstream-Status: Pending\nSigned-off-by: X <x@y.z>")
    git(up, "checkout", "-q", "main")
    ws = toy["ws"]
    r = cli("--workspace", ws, "import", "toy", "--from-branch", "main..feature", "--source", up, "--json")
    assert r.code == 0, r.err
    assert r.json["patches"] == [{"name": "fix-a-eleven.patch", "action": "added"}]
    mbox = tmp_path / "all.mbox"
    mbox.write_text(git(up, "format-patch", "--stdout", "--full-index", "main..feature"))
    ws2 = tmp_path / "ws3"
    (ws2 / "patches").mkdir(parents=True)
    (ws2 / "lucepatch.toml").write_text("")
    r = cli("--workspace", ws2, "import", "newt", mbox, "--base", toy["base"], "--json")
    assert r.code == 0, r.err
    assert len(r.json["patches"]) == 1 and r.json["created"] is True
