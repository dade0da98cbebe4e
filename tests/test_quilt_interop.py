"""Interop with Debian's quilt (--fuzz=0): same trees and modes through `quilt push -a` and
`lucepatch apply`; a quilt series (DEP-3 headers) imports once and re-exports stably."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import commit_all, format_patches, git, init_repo, make_target, write

pytestmark = pytest.mark.needs("quilt")


def _series(tmp_path):
    up = init_repo(tmp_path / "up")
    write(up, "src/keep.c", "int keep;\n")
    write(up, "src/gone.c", "int gone;\n")
    write(up, "tools/run.sh", "#!/bin/sh\necho run\n")
    write(up, "win/dos.txt", "line one\r\nline two\r\n")
    base = commit_all(up, "base")
    git(up, "checkout", "-q", "-b", "s")
    write(up, "src/new.c", "int added(void) { return 1; }\n")
    commit_all(up, "add new.c\n\nUpstream-Status: Pending\nSigned-off-by: A <a@b.c>")
    (up / "src/gone.c").unlink()
    commit_all(up, "drop gone.c\n\nUpstream-Status: Pending\nSigned-off-by: A <a@b.c>")
    os.chmod(up / "tools/run.sh", 0o755)
    commit_all(up, "make run.sh executable\n\nUpstream-Status: Pending\nSigned-off-by: A <a@b.c>")
    write(up, "win/dos.txt", "line one\r\nline 1.5\r\nline two\r\n")
    commit_all(up, "crlf content\n\nUpstream-Status: Pending\nSigned-off-by: A <a@b.c>")
    pf = format_patches(up, f"{base}..s", tmp_path / "fp")
    git(up, "checkout", "-q", "main")
    git(up, "branch", "-q", "-D", "s")
    return up, base, pf


def _tree_with_modes(repo):
    git(repo, "add", "-A", "--", ".", ":!.pc", ":!patches")
    tree = git(repo, "write-tree").strip()
    return tree, git(repo, "ls-tree", "-r", tree)


def test_quilt_push_and_lucepatch_apply_give_the_same_tree(tmp_path, cli):
    up, base, pf = _series(tmp_path)
    ws = tmp_path / "ws"
    tdir = make_target(ws, "q", base, pf)
    # quilt side: a plain copy of the base
    qtree = tmp_path / "quilt"
    git(tmp_path, "clone", "-q", str(up), str(qtree))
    qp = tmp_path / "qpatches"
    shutil.copytree(tdir, qp)
    env = {**os.environ, "QUILT_PATCHES": str(qp), "QUILT_PC": ".pc", "QUILTRC": "/dev/null"}
    r = subprocess.run(["quilt", "push", "-a", "--fuzz=0", "-q"], cwd=qtree, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    shutil.rmtree(qtree / ".pc")
    q_tree, q_modes = _tree_with_modes(qtree)
    assert cli("--workspace", ws, "apply", "q", "--source", up).code == 0
    l_tree, l_modes = _tree_with_modes(up)
    assert q_modes == l_modes
    assert q_tree == l_tree
    assert "100755" in l_modes.split("tools/run.sh")[0].splitlines()[-1]
    assert b"line 1.5\r\n" in (up / "win/dos.txt").read_bytes()
    assert not (up / "src/gone.c").exists()


def test_quilt_dir_imports_once_and_reexports_stably(tmp_path, cli):
    up, base, pf = _series(tmp_path)
    # a hand-made quilt folder: plain diffs with DEP-3 headers, one with -p0
    q = tmp_path / "debian-patches"
    q.mkdir()
    (q / "add-new.patch").write_text(
        "Description: add new.c\n A longer explanation.\nAuthor: Dev One <one@example.invalid>\n"
        "Forwarded: no\nLast-Update: 2026-01-01\n---\n"
        "--- a/src/new.c\n+++ b/src/new.c\n@@ -0,0 +1 @@\n+int added(void) { return 1; }\n")
    (q / "keep.patch").write_text(
        "Subject: tweak keep\nFrom: Dev Two <two@example.invalid>\nOrigin: vendor\n\n"
        "Index: src/keep.c\n===================================================================\n"
        "--- src/keep.c\n+++ src/keep.c\n@@ -1 +1 @@\n-int keep;\n+int keep = 1;\n")
    (q / "series").write_text("add-new.patch\nkeep.patch -p0\n")
    ws = tmp_path / "ws"
    (ws / "patches").mkdir(parents=True)
    (ws / "lucepatch.toml").write_text("")
    r = cli("--workspace", ws, "import", "q", q, "--base", base, "--source", up, "--json")
    assert r.code == 0, r.err
    assert r.json["kind"] == "quilt"
    tdir = ws / "patches/q"
    first = {p.name: p.read_bytes() for p in tdir.iterdir()}
    assert len(first) == 4  # target.toml, series, 2 patches
    text = "".join(v.decode() for k, v in first.items() if k.endswith(".patch"))
    assert "Forwarded: no" in text and "Origin: vendor" in text and "Dev One" in text
    # apply + export: byte-identical
    assert cli("--workspace", ws, "apply", "q", "--source", up).code == 0
    assert cli("--workspace", ws, "export", "q", "--source", up).code == 0
    assert {p.name: p.read_bytes() for p in tdir.iterdir()} == first
    # importing the normalised files again into a fresh target gives the same bytes
    ws2 = tmp_path / "ws2"
    (ws2 / "patches").mkdir(parents=True)
    (ws2 / "lucepatch.toml").write_text("")
    r = cli("--workspace", ws2, "import", "q", tdir, "--base", base, "--json")
    assert r.code == 0, r.err
    for name, data in first.items():
        if name.endswith(".patch"):
            assert (ws2 / "patches/q" / name).read_bytes() == data
    # and a second quilt import of the same folder produces the same bytes (normalised once, stable)
    ws3 = tmp_path / "ws3"
    (ws3 / "patches").mkdir(parents=True)
    (ws3 / "lucepatch.toml").write_text("")
    assert cli("--workspace", ws3, "import", "q", q, "--base", base, "--source", up).code == 0
    for name, data in first.items():
        if name.endswith(".patch"):
            assert (ws3 / "patches/q" / name).read_bytes() == data
