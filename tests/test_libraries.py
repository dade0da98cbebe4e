"""The libraries made for the job, each checked against what it replaced or against git/binutils:
tomlkit writes target.toml (comments and order kept), pyelftools reads every ELF (cross-checked
with readelf/nm), unidiff parses diffs (hunk lines are content, never headers), GitPython answers
repository questions (the same answers as the git CLI)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, commit_all, git, init_repo, write

from lucepatch import git as lgit
from lucepatch.engine.safety import check_patch_paths, diff_paths
from lucepatch.errors import UsageError
from lucepatch.native import elf
from lucepatch.series import parse_patch_bytes
from lucepatch.services.lint import whitespace_errors
from lucepatch.target import load_target_dir, update_target_toml

# ---- tomlkit -----------------------------------------------------------------------------------


def test_update_target_toml_keeps_comments_and_order(tmp_path):
    tdir = tmp_path / "hami-core"
    tdir.mkdir()
    before = (REPO_ROOT / "patches" / "hami-core" / "target.toml").read_text()
    (tdir / "target.toml").write_text(before)
    update_target_toml(tdir / "target.toml", base="0123456789abcdef0123456789abcdef01234567", version="9.9.0")
    after = (tdir / "target.toml").read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(before.splitlines()) == len(after.splitlines())
    assert [b for _, b in changed] == ['base = "0123456789abcdef0123456789abcdef01234567"', 'version = "9.9.0"']
    assert "# HAMi-core's CMakeLists writes" in after  # comments survive
    t = load_target_dir(tdir)
    assert (t.base, t.version) == ("0123456789abcdef0123456789abcdef01234567", "9.9.0")


def test_update_target_toml_removes_a_key_then_places_new_ones(tmp_path):
    """What `rebase --line` does to the family's first target (as_line): the main line's target.toml
    has `line = "main"`; removing it left a tomlkit Null in the document, which the rewrite placing
    line_of after `name` could not re-add (ValueError, exit 70, the line never made)."""
    tdir = tmp_path / "hami-core-v2.9"  # the session's copy is named as the line it becomes
    tdir.mkdir()
    before = 'name = "hami-core"\nupstream = "u"\nbase = "%s"\nline = "main"\nversion = "1.3.0"\n' \
             '# a comment\n\n[build]\nsystem = "cmake"\n' % ("0" * 40)
    (tdir / "target.toml").write_text(before)
    update_target_toml(tdir / "target.toml", remove=("line", "line_of"), after="name",
                       name="hami-core-v2.9", line_of="hami-core", line="v2.9", version="1.0.0")
    after = (tdir / "target.toml").read_text()
    assert after.splitlines()[:3] == ['name = "hami-core-v2.9"', 'line_of = "hami-core"', 'line = "v2.9"']
    assert after.count("line = ") == 1 and "# a comment" in after
    t = load_target_dir(tdir)
    assert (t.name, t.line_of, t.line, t.version) == ("hami-core-v2.9", "hami-core", "v2.9", "1.0.0")


def test_update_target_toml_refuses_a_bad_value_and_leaves_the_file(tmp_path):
    tdir = tmp_path / "hami-core"
    tdir.mkdir()
    text = (REPO_ROOT / "patches" / "hami-core" / "target.toml").read_text()
    (tdir / "target.toml").write_text(text)
    with pytest.raises(UsageError, match="MAJOR.MINOR.PATCH"):
        update_target_toml(tdir / "target.toml", version="next")
    assert (tdir / "target.toml").read_text() == text


# ---- pyelftools --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shlib(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("no-tool: gcc (CI installs it)")
    d = tmp_path_factory.mktemp("elf")
    (d / "lib.c").write_text("int lp_major(void) { return 7; }\nint lp_minor(void) { return 42; }\n"
                             "static int hidden(void) { return 1; }\nint lp_uses(void) { return hidden(); }\n")
    out = d / "liblp.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-Wl,-soname,liblp.so.3", "-Wl,-rpath,$ORIGIN/../lib",
                    "-Wl,--enable-new-dtags", "-o", str(out), str(d / "lib.c"), "-Wl,--no-as-needed", "-lm"], check=True)
    return out


def test_dynamic_section_matches_readelf(shlib):
    if shutil.which("readelf") is None:
        pytest.skip("no-tool: readelf (binutils; CI installs it)")
    text = subprocess.run(["readelf", "-d", str(shlib)], capture_output=True, text=True, check=True).stdout
    dyn = elf.dynamic(shlib)
    assert dyn.soname == "liblp.so.3" and dyn.runpath == "$ORIGIN/../lib"
    for name in dyn.needed:
        assert f"Shared library: [{name}]" in text
    assert text.count("(NEEDED)") == len(dyn.needed) and "libm.so.6" in dyn.needed


def test_defined_symbols_match_nm(shlib):
    if shutil.which("nm") is None:
        pytest.skip("no-tool: nm (binutils; CI installs it)")
    out = subprocess.run(["nm", "-D", "--defined-only", str(shlib)], capture_output=True, text=True, check=True).stdout
    from_nm = {line.split()[2].split("@")[0] for line in out.splitlines() if len(line.split()) >= 3}
    assert set(elf.defined_dynamic_symbols(shlib)) == from_nm
    assert {"lp_major", "lp_minor", "lp_uses"} <= from_nm and "hidden" not in from_nm


def test_returned_constant_and_non_elf(shlib, tmp_path):
    assert elf.returned_constant(shlib, "lp_major") == 7
    assert elf.returned_constant(shlib, "lp_minor") == 42
    assert elf.returned_constant(shlib, "absent") is None
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF" + b"\0" * 8)
    assert elf.is_elf(junk) and not elf.is_elf(tmp_path)
    with pytest.raises(UsageError, match="not a readable ELF"):
        elf.dynamic(junk)
    (tmp_path / "text.so").write_text("not elf")
    with pytest.raises(UsageError, match="is not an ELF file"):
        elf.defined_dynamic_symbols(tmp_path / "text.so")


# ---- unidiff -----------------------------------------------------------------------------------

SQL_PATCH = b"""From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A Dev <a@example.invalid>
Date: Thu, 1 Jan 2026 00:00:00 +0000
Subject: [PATCH] db: drop an obsolete comment

---
diff --git a/q.sql b/q.sql
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/q.sql
+++ b/q.sql
@@ -1,2 +1,2 @@
--- /etc/passwd
+++ counter \n select 1;
"""


def test_hunk_lines_are_content_not_headers(tmp_path):
    # a removed SQL comment `-- /etc/passwd` reads as `--- /etc/passwd`; an added `++ counter`
    # reads as `+++ counter`: neither is a header (git agrees), so no path and a real whitespace error
    p = parse_patch_bytes(SQL_PATCH, tmp_path / "x.patch", "x.patch")
    assert check_patch_paths(p) == ["q.sql"] == diff_paths(p.diff)
    assert whitespace_errors(p) == ["q.sql: trailing whitespace in added line '++ counter'"]
    repo = init_repo(tmp_path / "r")
    write(repo, "q.sql", "-- /etc/passwd\nselect 1;\n")
    commit_all(repo, "base")
    (tmp_path / "x.patch").write_bytes(SQL_PATCH)
    assert subprocess.run(["git", "-C", str(repo), "apply", "--check", str(tmp_path / "x.patch")]).returncode == 0


def test_a_real_escaping_header_is_still_refused(tmp_path):
    head = SQL_PATCH.split(b"diff --git", 1)[0]
    bad = head + (b"diff --git a/../outside.sql b/../outside.sql\nnew file mode 100644\n"
                  b"index 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111\n"
                  b"--- /dev/null\n+++ b/../outside.sql\n@@ -0,0 +1 @@\n+x\n")
    p = parse_patch_bytes(bad, tmp_path / "y.patch", "y.patch")
    with pytest.raises(UsageError, match="escapes the repository"):
        check_patch_paths(p)


# ---- GitPython ---------------------------------------------------------------------------------


def test_repository_answers_match_the_git_cli(tmp_path):
    repo = init_repo(tmp_path / "r")
    write(repo, "a.txt", "1\n")
    c1 = commit_all(repo, "first: one\n\nbody")
    write(repo, "a.txt", "2\n")
    c2 = commit_all(repo, "second: two")
    git(repo, "tag", "-a", "v1", "-m", "annotated", c1)
    git(repo, "branch", "topic", c1)
    git(repo, "remote", "add", "upstream", "https://example.invalid/up.git")
    for ref in ("HEAD", "HEAD~1", c1[:9], "v1", "topic", "main", c2):
        assert lgit.try_resolve(repo, ref) == git(repo, "rev-parse", f"{ref}^{{commit}}").strip()
    assert lgit.try_resolve(repo, "no-such-ref") is None and lgit.try_resolve(repo, "--all") is None
    assert lgit.subject(repo, c1) == "first: one"
    assert lgit.tree_of(repo, c1) == git(repo, "rev-parse", f"{c1}^{{tree}}").strip()
    assert lgit.commit_time(repo, c2) == git(repo, "log", "-1", "--format=%ct", c2).strip()
    assert lgit.current_branch(repo) == "main" and lgit.branch_exists(repo, "topic")
    assert not lgit.branch_exists(repo, "nope")
    assert lgit.remote_url(repo, "upstream") == "https://example.invalid/up.git"
    assert lgit.remote_url(repo, "missing") is None
    assert lgit.config_identity(repo) == ("Upstream Dev", "dev@upstream.invalid")
    assert not lgit.is_shallow(repo)
    git(repo, "checkout", "-q", "--detach", c1)
    assert lgit.current_branch(repo) is None and lgit.head(repo) == c1
