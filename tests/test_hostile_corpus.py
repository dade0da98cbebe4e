"""Hostile input corpus: every case is refused with exit 2 (3 for a missing environment), exactly
one stderr line that names the offending file/thing, no traceback, and nothing changed in HOME,
the current directory, the checkout (every file under .git hashed) or the cache (except the
transient `work/` folder, which must end empty)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import commit_all, format_patches, git, init_repo, make_target, write


def tree_hash(root: Path, skip=()) -> dict:
    out = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root)
        for d in list(dirnames):
            p = Path(dirpath) / d
            if p.is_symlink():
                out[str(rel_dir / d)] = "link:" + os.readlink(p)
                dirnames.remove(d)
        for f in filenames:
            p = Path(dirpath) / f
            rel = str(rel_dir / f)
            if any(rel == s or rel.startswith(s + "/") for s in skip):
                continue
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            else:
                st = p.stat()
                out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode)
        if str(rel_dir) != ".":
            out.setdefault(str(rel_dir) + "/", "dir")
    return out


@pytest.fixture
def env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Home User\n\temail = home@example.invalid\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "keep.txt").write_text("mine\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LUCEPATCH_CACHE", str(cache))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.chdir(cwd)
    up = init_repo(tmp_path / "upstream")
    write(up, "src/a.c", "int a(void) {\n    return 1;\n}\n")
    write(up, "src/b.c", "int b(void) {\n    return 2;\n}\n")
    (up / "link").symlink_to("/tmp")
    (up / "uplink").symlink_to("..")
    base = commit_all(up, "base")
    git(up, "tag", "v1")
    git(up, "checkout", "-q", "-b", "work")
    write(up, "src/a.c", "int a(void) {\n    return 10;\n}\n")
    commit_all(up, "fix(a): ten\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    write(up, "src/b.c", "int b(void) {\n    return 20;\n}\n")
    commit_all(up, "fix(b): twenty\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    pf = format_patches(up, f"{base}..work", tmp_path / "fp")
    git(up, "checkout", "-q", "main")
    git(up, "branch", "-q", "-D", "work")
    ws = tmp_path / "ws"
    tdir = make_target(ws, "toy", base, pf)
    names = (tdir / "series").read_text().split()
    return {"home": home, "cwd": cwd, "cache": cache, "up": up, "base": base, "ws": ws, "tdir": tdir,
            "p1": tdir / names[0], "p2": tdir / names[1], "tmp": tmp_path}


def _sub(path: Path, old: bytes, new: bytes, count: int = -1):
    data = path.read_bytes()
    assert old in data, (old, path)
    path.write_bytes(data.replace(old, new, count) if count > 0 else data.replace(old, new))


def _retarget(path: Path, new: str, old: str = "src/a.c"):
    """Make the patch write `new` instead of `old` in every header."""
    _sub(path, f"a/{old}".encode(), f"a/{new}".encode())
    _sub(path, f"b/{old}".encode(), f"b/{new}".encode())


def _binary_no_data(e):
    p = e["p1"]
    text = p.read_text()
    head = text[: text.index("diff --git")]
    p.write_text(head + "diff --git a/img.png b/img.png\nnew file mode 100644\nindex 0000000..1111111\n"
                 "Binary files /dev/null and b/img.png differ\n")
    return p


def _binary_short_index(e):
    p = e["p1"]
    text = p.read_text()
    head = text[: text.index("diff --git")]
    p.write_text(head + "diff --git a/img.png b/img.png\nnew file mode 100644\nindex 0000000..e69de29\n"
                 "GIT binary patch\nliteral 4\nLcmZ?wbYuVk01N;C\n\nliteral 0\nHcmV?d00001\n\n")
    return p


def _symlink_created_then_written(e):
    up, p1 = e["up"], e["p1"]
    text = p1.read_text()
    head = text[: text.index("diff --git")]
    p1.write_text(head + "diff --git a/esc b/esc\nnew file mode 120000\nindex 0000000000000000000000000000000000000000.."
                  "5a4f2f7ff1e8a4f06b3a1d3f8e1c2d6d5b9a0c11\n--- /dev/null\n+++ b/esc\n@@ -0,0 +1 @@\n+/etc\n"
                  "\\ No newline at end of file\n")
    _retarget(e["p2"], "esc/passwd", "src/b.c")
    return e["p2"]


def _dirty_merge(e):
    up = e["up"]
    gd = up / ".git"
    (gd / "MERGE_HEAD").write_text(e["base"] + "\n")
    return "merge"


def _worktree(e):
    up = e["up"]
    git(up, "branch", "lucepatch/toy/1.0.0")
    git(up, "worktree", "add", "-q", str(e["tmp"] / "wt"), "lucepatch/toy/1.0.0")
    return "lucepatch/toy/1.0.0"


# Each case: (id, setup(e) -> needle, extra args, expected exit). `needle` must appear in the line.
CASES = [
    # traversal
    ("traversal-dotdot", lambda e: (_retarget(e["p1"], "../outside.c"), e["p1"].name)[1], [], 2),
    ("traversal-nested", lambda e: (_retarget(e["p1"], "src/../../x.c"), e["p1"].name)[1], [], 2),
    ("traversal-rename", lambda e: (_sub(e["p1"], b"index ", b"rename from src/a.c\nrename to ../evil.c\nindex ", 1),
                                    e["p1"].name)[1], [], 2),
    # absolute
    ("absolute-prefixed", lambda e: (_retarget(e["p1"], "/tmp/lp-abs.c"), e["p1"].name)[1], [], 2),
    ("absolute-plain", lambda e: (_sub(e["p1"], b"+++ b/src/a.c", b"+++ /etc/lp-abs.c"), e["p1"].name)[1], [], 2),
    ("absolute-rename", lambda e: (_sub(e["p1"], b"index ", b"rename from src/a.c\nrename to /etc/evil.c\nindex ", 1),
                                   e["p1"].name)[1], [], 2),
    # symlink escape
    ("symlink-base-abs", lambda e: (_retarget(e["p1"], "link/x.c"), e["p1"].name)[1], [], 2),
    ("symlink-base-parent", lambda e: (_retarget(e["p1"], "uplink/evil.c"), e["p1"].name)[1], [], 2),
    ("symlink-created", lambda e: _symlink_created_then_written(e).name, [], 2),
    # .git writes
    (".git-config", lambda e: (_retarget(e["p1"], ".git/config"), e["p1"].name)[1], [], 2),
    (".git-nested-hook", lambda e: (_retarget(e["p1"], "sub/.git/hooks/post-checkout"), e["p1"].name)[1], [], 2),
    (".git-case", lambda e: (_retarget(e["p1"], ".GIT/config"), e["p1"].name)[1], [], 2),
    # binary
    ("binary-no-data", lambda e: _binary_no_data(e).name, [], 2),
    ("binary-nul", lambda e: (e["p1"].write_bytes(e["p1"].read_bytes() + b"\0\0junk"), e["p1"].name)[1], [], 2),
    ("binary-short-index", lambda e: _binary_short_index(e).name, [], 2),
    # CRLF
    ("crlf-whole-file", lambda e: (e["p1"].write_bytes(e["p1"].read_bytes().replace(b"\n", b"\r\n")), e["p1"].name)[1], [], 2),
    ("crlf-hunk-header", lambda e: (_sub(e["p2"], b" @@\n", b" @@\r\n", 1), e["p2"].name)[1], [], 2),
    ("crlf-plus-header", lambda e: (_sub(e["p2"], b"+++ b/src/b.c\n", b"+++ b/src/b.c\r\n"), e["p2"].name)[1], [], 2),
    # empty / garbage
    ("empty", lambda e: (e["p1"].write_bytes(b""), e["p1"].name)[1], [], 2),
    ("garbage", lambda e: (e["p2"].write_bytes(os.urandom(3000).replace(b"\0", b"x")), e["p2"].name)[1], [], 2),
    ("garbage-hunk", lambda e: (_sub(e["p2"], b"@@ -1,3 +1,3 @@", b"@@ -1,9 +1,2 @@"), e["p2"].name)[1], [], 2),
    # malformed headers
    ("header-no-colon", lambda e: (_sub(e["p1"], b"Subject:", b"Subject", 1), e["p1"].name)[1], [], 2),
    ("header-junk-line", lambda e: (_sub(e["p1"], b"Date:", b"X-Junk header without colon\nDate:", 1), e["p1"].name)[1], [], 2),
    ("diff-header-no-plus", lambda e: (_sub(e["p2"], b"+++ b/src/b.c\n", b""), e["p2"].name)[1], [], 2),
    # malformed TOML
    ("toml-syntax", lambda e: ((e["tdir"] / "target.toml").write_text("name = [unclosed\n"), "target.toml")[1], [], 2),
    ("toml-base", lambda e: (_sub(e["tdir"] / "target.toml", e["base"].encode(), b"not-a-commit"), "target.toml")[1], [], 2),
    ("toml-type", lambda e: (_sub(e["tdir"] / "target.toml", b'version = "1.0.0"', b"version = 1"), "target.toml")[1], [], 2),
    # series errors
    ("series-missing", lambda e: ((e["tdir"] / "series").write_text("nope.patch\n"), "nope.patch")[1], [], 2),
    ("series-duplicate", lambda e: ((e["tdir"] / "series").write_text(f"{e['p1'].name}\n{e['p1'].name}\n"), "series")[1], [], 2),
    ("series-escape", lambda e: ((e["tdir"] / "series").write_text("../../etc/passwd\n"), "series")[1], [], 2),
    ("series-empty", lambda e: ((e["tdir"] / "series").write_text("# nothing\n"), "series")[1], [], 2),
    # bad source paths
    ("source-missing", lambda e: "does-not-exist", ["--source", "{tmp}/does-not-exist"], 2),
    ("source-file", lambda e: ((e["tmp"] / "afile").write_text("x"), "afile")[1], ["--source", "{tmp}/afile"], 2),
    ("source-subdir", lambda e: "src", ["--source", "{up}/src"], 2),
    ("source-not-repo", lambda e: "cwd", ["--source", "{cwd}"], 2),
    # dirty tree
    ("dirty-modified", lambda e: (write(e["up"], "src/a.c", "local edit\n"), "uncommitted")[1], [], 2),
    ("dirty-staged", lambda e: (write(e["up"], "new.c", "x\n"), git(e["up"], "add", "new.c"), "uncommitted")[2], [], 2),
    ("dirty-merge-in-progress", _dirty_merge, [], 2),
    ("dirty-untracked-collision", lambda e: (_sub(e["p2"], b"b/src/b.c", b"b/src/new.c"),
                                             _sub(e["p2"], b"a/src/b.c", b"a/src/new.c"),
                                             _sub(e["p2"], b"--- a/src/new.c", b"--- /dev/null"),
                                             _sub(e["p2"], b"index ", b"new file mode 100644\nindex "),
                                             write(e["up"], "src/new.c", "mine\n"), "new.c")[5], [], "1or2"),
    # existing branch
    ("branch-exists", lambda e: (git(e["up"], "branch", "lucepatch/toy/1.0.0"), "lucepatch/toy/1.0.0")[1], [], 2),
    ("branch-current", lambda e: (git(e["up"], "checkout", "-q", "-b", "lucepatch/toy/1.0.0"), "lucepatch/toy/1.0.0")[1],
     ["--force"], 2),
    ("branch-other-worktree", _worktree, ["--force"], 2),
    # detached HEAD
    ("detached-base", lambda e: (git(e["up"], "checkout", "-q", "--detach"), "detached")[1], [], 2),
    ("detached-other", lambda e: (write(e["up"], "z", "z\n"), commit_all(e["up"], "z"),
                                  git(e["up"], "checkout", "-q", "--detach", "HEAD"), "detached")[3], [], 2),
    ("detached-tag", lambda e: (git(e["up"], "checkout", "-q", "v1"), "detached")[1], [], 2),
    # huge input
    ("huge-patch", lambda e: (e["p1"].write_bytes(e["p1"].read_bytes() + b"+" * (33 << 20)), e["p1"].name)[1], [], 2),
    ("huge-series", lambda e: ((e["tdir"] / "series").write_text("# pad\n" * 300000), "series")[1], [], 2),
    ("huge-toml", lambda e: ((e["tdir"] / "target.toml").write_text((e["tdir"] / "target.toml").read_text()
                                                                     + "# pad\n" * 300000), "target.toml")[1], [], 2),
]


@pytest.fixture(params=["fast", "per-patch"])
def engine_path(request, monkeypatch):
    """Every hostile input goes through both paths of the one apply loop (engine/apply.py TreeState: Python first, or
    the per-patch engine for every patch)."""
    if request.param == "per-patch":
        monkeypatch.setenv("LUCEPATCH_ENGINE", "per-patch")
    else:
        monkeypatch.delenv("LUCEPATCH_ENGINE", raising=False)
    return request.param


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile(env, cli, case, engine_path):
    _id, setup, extra, expected = case
    needle = setup(env)
    fmt = {k: str(v) for k, v in env.items() if isinstance(v, Path)}
    extra = [a.format(**fmt) for a in extra]
    args = ["--workspace", env["ws"], "apply", "toy"]
    if not any(a == "--source" for a in extra):
        args += ["--source", env["up"]]
    before = {k: tree_hash(env[k]) for k in ("home", "cwd", "up", "ws")}
    before["cache"] = tree_hash(env["cache"])
    r = cli(*args, *extra)
    allowed = (1, 2) if expected == "1or2" else (expected,)
    assert r.code in allowed, (r.code, r.err)
    assert "Traceback" not in r.err and "internal error" not in r.err
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1, r.err
    assert needle in lines[0], (needle, lines[0])
    assert r.out == ""
    after = {k: tree_hash(env[k]) for k in ("home", "cwd", "up", "ws")}
    after["cache"] = tree_hash(env["cache"], skip=("work",))
    assert after == {**before, "cache": tree_hash(env["cache"], skip=("work",))} and after["up"] == before["up"]
    for k in ("home", "cwd", "up", "ws"):
        assert after[k] == before[k], k
    work = env["cache"] / "work"
    assert not work.exists() or not any(work.iterdir())
    assert set(after["cache"]) <= set(before["cache"]) | {"work/"}


def test_corpus_covers_every_category():
    cats = {re.split(r"[-]", c[0].lstrip("."))[0] for c in CASES}
    want = {"traversal", "absolute", "symlink", "git", "binary", "crlf", "empty", "garbage", "header", "diff", "toml",
            "series", "source", "dirty", "branch", "detached", "huge"}
    assert want <= cats
    counts = {}
    for c in CASES:
        counts[re.split(r"[-]", c[0].lstrip("."))[0]] = counts.get(re.split(r"[-]", c[0].lstrip("."))[0], 0) + 1
    for cat in ("traversal", "absolute", "symlink", "git", "binary", "crlf", "toml", "series", "source", "dirty",
                "branch", "detached", "huge"):
        assert counts[cat] >= 3, cat
