"""engine/fastapply.py mirrors `git apply` (default options): on generated files, edits and
drifted targets (repeated lines, offsets, hunks at both ends, missing final newlines, CRLF), its
result must be git's byte for byte, and it must refuse exactly where git refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucepatch import odb
from lucepatch.engine import fastapply as F

STATS = {"applied": 0, "refused": 0}
EXAMPLES = int(os.environ.get("LUCEPATCH_FUZZ_EXAMPLES", "150"))
ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

# few distinct lines, so contexts repeat and the search has several candidates
LINE = st.sampled_from([b"a\n", b"b\n", b"c\n", b"{\n", b"}\n", b"\n", b"  x\n", b"x\r\n", b"return 0;\n"])


@st.composite
def files(draw):
    base = draw(st.lists(LINE, min_size=0, max_size=30))
    new = list(base)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["ins", "del", "rep"]))
        pos = draw(st.integers(0, len(new)))
        if op == "ins":
            new[pos:pos] = draw(st.lists(LINE, min_size=1, max_size=3))
        elif new and pos < len(new):
            if op == "del":
                del new[pos:pos + draw(st.integers(1, 3))]
            else:
                new[pos] = draw(st.sampled_from([b"changed\n", b"y\n", b"b\n"]))
    target = list(base)
    for _ in range(draw(st.integers(0, 3))):  # upstream drift: lines added or removed elsewhere
        pos = draw(st.integers(0, len(target)))
        if draw(st.booleans()) or not target or pos >= len(target):
            target[pos:pos] = draw(st.lists(LINE, min_size=1, max_size=4))
        else:
            del target[pos]
    cut = draw(st.sampled_from(["none", "base", "new", "target", "all"]))

    def join(lines, name):
        data = b"".join(lines)
        return data[:-1] if cut in (name, "all") and data.endswith(b"\n") else data
    return join(base, "base"), join(new, "new"), join(target, "target"), draw(st.sampled_from([0, 1, 3]))


def _diff(tmp: Path, base: bytes, new: bytes, ctx: int) -> bytes | None:
    a, b = tmp / "a", tmp / "b"
    a.mkdir(exist_ok=True)
    b.mkdir(exist_ok=True)
    (a / "f").write_bytes(base)
    (b / "f").write_bytes(new)
    r = subprocess.run(["git", "diff", "--no-index", "--no-color", f"-U{ctx}", "a/f", "b/f"], cwd=tmp,
                       capture_output=True, env=ENV)
    if not r.stdout:
        return None
    return r.stdout.replace(b"diff --git a/a/f b/b/f", b"diff --git a/f b/f").replace(
        b"--- a/a/f", b"--- a/f").replace(b"+++ b/b/f", b"+++ b/f")


def _git_apply(tmp: Path, target: bytes, patch: bytes) -> bytes | None:
    w = tmp / "w"
    w.mkdir(exist_ok=True)
    (w / "f").write_bytes(target)
    (tmp / "p.diff").write_bytes(patch)
    r = subprocess.run(["git", "apply", str(tmp / "p.diff")], cwd=w, capture_output=True, env=ENV)
    return (w / "f").read_bytes() if r.returncode == 0 else None


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(files())
def test_apply_file_is_git_apply(tmp_path_factory, case):
    base, new, target, ctx = case
    tmp = tmp_path_factory.mktemp("fa")
    patch = _diff(tmp, base, new, ctx)
    if patch is None:
        return
    parsed = F.parse(patch)
    assert parsed is not None and len(parsed) == 1, patch
    ours = F.apply_file(target, parsed[0].hunks)
    theirs = _git_apply(tmp, target, patch)
    assert ours == theirs, (patch, target, ours, theirs)
    STATS["applied" if theirs is not None else "refused"] += 1


def test_hunks_never_match_lines_an_earlier_hunk_wrote(tmp_path):
    """apply.c marks written lines LINE_PATCHED; a later hunk searches past them."""
    base = b"".join(b"%d\n" % i for i in range(20))
    new = base.replace(b"3\n", b"x\n3\n").replace(b"15\n", b"15\nx\n")
    patch = _diff(tmp_path, base, new, 1)
    target = b"x\n" * 3 + base
    assert F.apply_file(target, F.parse(patch)[0].hunks) == _git_apply(tmp_path, target, patch)


def test_unusual_patches_are_left_to_git():
    rename = b"diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n"
    mode = b"diff --git a/x b/x\nold mode 100644\nnew mode 100755\n"
    binary = b"diff --git a/x b/x\nindex 1..2 100644\nGIT binary patch\nliteral 1\nIcmZ?d00001\n\n"
    quoted = b'diff --git "a/x y" "b/x y"\n--- "a/x y"\n+++ "b/x y"\n@@ -1 +1 @@\n-a\n+b\n'
    plain = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    for p in (rename, mode, binary, quoted, plain):
        assert F.parse(p) is None, p


def test_tree_objects_are_gits(tmp_path):
    from conftest import commit_all, git, init_repo, write

    up = init_repo(tmp_path / "r")
    write(up, "a/b/c.txt", "c\n")
    write(up, "a/d.txt", "d\n")
    write(up, "a-b", "file sorted between a and a/\n")
    write(up, "z", "z\n")
    commit_all(up, "base")
    t = odb.Tree(git(up, "ls-tree", "-r", "-t", "-z", "--full-tree", "HEAD"))
    data = b"new\n"
    oid = odb.object_id("blob", data)
    subprocess.run(["git", "hash-object", "-w", "--stdin"], input=data, cwd=up, check=True, capture_output=True)
    t.put("a/new/deep.txt", "100755", oid)
    t.delete("a/b/c.txt")
    t.delete("z")
    root = t.write()
    # git's own tree for the same change
    write(up, "a/new/deep.txt", "new\n")
    os.chmod(up / "a/new/deep.txt", 0o755)
    (up / "a/b/c.txt").unlink()
    (up / "z").unlink()
    commit_all(up, "change")
    assert root == git(up, "rev-parse", "HEAD^{tree}").strip()
    for oid, (kind, body) in t.new_objects.items():
        assert odb.object_id(kind, body) == oid


def test_the_generator_exercises_both_outcomes():
    """Runs after the property test (file order): both git outcomes occurred often enough."""
    if STATS["applied"] + STATS["refused"] < 50:
        return  # the property test was deselected or run with few examples
    assert STATS["applied"] > 10 and STATS["refused"] > 10, STATS


def test_pack_written_here_is_read_by_git(tmp_path):
    from conftest import commit_all, git, init_repo, write

    up = init_repo(tmp_path / "r")
    write(up, "f", "x\n")
    commit_all(up, "base")
    objs = {}
    for data in (b"", b"a\n", b"b" * 5000, bytes(range(256)) * 40):
        objs[odb.object_id("blob", data)] = ("blob", data)
    tree = b"100644 f\0" + bytes.fromhex(odb.object_id("blob", b"a\n"))
    objs[odb.object_id("tree", tree)] = ("tree", tree)
    name = odb.write_pack(up / ".git/objects/pack", objs)
    out = git(up, "verify-pack", "-v", str(up / f".git/objects/pack/pack-{name}.idx"))
    assert "ok" in out.splitlines()[-1]
    for oid, (kind, data) in objs.items():
        assert git(up, "cat-file", "-t", oid).strip() == kind
        r = subprocess.run(["git", "cat-file", kind, oid], cwd=up, capture_output=True, check=True)
        assert r.stdout == data


# ---- where a hunk lands when its preimage is there more than once -------------------------------------
# git searches from the hunk's *new* position (apply.c find_pos: `pos = newpos - 1`), alternately one
# line forwards, then one backwards, and takes the first place that matches. Inputs where the
# preimage repeats tell a matcher with another start or another order from git's: these must.

MOTIF = st.lists(st.sampled_from([b"a\n", b"b\n", b"{\n", b"}\n", b"\n", b"x\r\n"]), min_size=1, max_size=4)


@st.composite
def repeated(draw):
    """Files made of one motif repeated (with a few stray lines), patched at one to three places,
    applied to a drifted copy — so each hunk's preimage is found at several places."""
    motif = draw(MOTIF)
    base = []
    for _ in range(draw(st.integers(3, 8))):
        base += motif
        if draw(st.integers(0, 3)) == 0:
            base.append(draw(st.sampled_from([b"s\n", b"t\n"])))
    new = list(base)
    for _ in range(draw(st.integers(1, 3))):  # edits from the end, so each keeps its place
        pos = draw(st.integers(0, max(0, len(new) - 1)))
        what = draw(st.sampled_from(["ins", "del", "rep"]))
        if what == "ins":
            new[pos:pos] = draw(st.lists(st.sampled_from([b"NEW\n", b"y\n"]), min_size=1, max_size=3))
        elif what == "del" and new:
            del new[pos:pos + draw(st.integers(1, 2))]
        elif new:
            new[pos] = b"changed\n"
    target = list(base)
    for _ in range(draw(st.integers(0, 3))):  # upstream drift: whole motifs or single lines in or out
        pos = draw(st.integers(0, len(target)))
        if draw(st.booleans()):
            target[pos:pos] = motif if draw(st.booleans()) else [draw(st.sampled_from([b"s\n", b"u\n"]))]
        elif target:
            del target[min(pos, len(target) - 1)]
    return b"".join(base), b"".join(new), b"".join(target), draw(st.sampled_from([1, 2, 3]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(repeated())
def test_apply_file_is_git_apply_where_the_preimage_repeats(tmp_path_factory, case):
    base, new, target, ctx = case
    tmp = tmp_path_factory.mktemp("rep")
    patch = _diff(tmp, base, new, ctx)
    if patch is None:
        return
    parsed = F.parse(patch)
    assert parsed is not None and len(parsed) == 1, patch
    assert F.apply_file(target, parsed[0].hunks) == _git_apply(tmp, target, patch), (patch, target)


def _lines_of(*names: str) -> bytes:
    return "".join(n + "\n" for n in names).encode()


SEARCH_CASES = {
    # the hunk's preimage ("c X c") is 1 line after and 1 line before where the search starts, not
    # at it: git looks forwards first and takes the one after; backwards-first takes the other
    "forwards-before-backwards": (
        _lines_of("p", "q", "c", "X", "c", "r", "s"),
        _lines_of("p", "q", "c", "Y", "c", "r", "s"),
        _lines_of("p", "c", "X", "c", "X", "c", "s"), 1),
    # 2 lines behind and 3 ahead: git alternates and finds the nearer one behind; a matcher that
    # runs forwards to the end first takes the one ahead
    "alternating-not-forwards-only": (
        _lines_of("p", "q", "r", "s", "c1", "X", "c2", "t", "u", "v"),
        _lines_of("p", "q", "r", "s", "c1", "Y", "c2", "t", "u", "v"),
        _lines_of("p", "q", "c1", "X", "c2", "r", "s", "t", "c1", "X", "c2"), 1),
    # the second hunk's search starts at its *new* position (the first hunk added 4 lines): the
    # preimage sits exactly there and exactly at its old position; git takes the new one
    "second-hunk-starts-at-its-new-position": (
        _lines_of("h", "A", "k", "m0", "m1", "m2", "m3", "m4", "m5", "c1", "X", "c2", "n0", "n1", "n2"),
        _lines_of("h", "A", "A2", "A3", "A4", "A5", "k", "m0", "m1", "m2", "m3", "m4", "m5", "c1", "Y", "c2",
                  "n0", "n1", "n2"),
        _lines_of("h", "A", "k", "m0", "m1", "c1", "X", "c2", "m3", "c1", "X", "c2", "n0", "n1", "n2"), 1),
    # and at newpos - 1 (apply.c: `pos = frag->newpos - 1`), not newpos: the preimage right
    # at the start and one line later
    "start-is-newpos-minus-one": (
        _lines_of("p", "q", "c", "X", "c", "r", "s"),
        _lines_of("p", "q", "c", "Y", "c", "r", "s"),
        _lines_of("p", "q", "c", "X", "c", "X", "c", "s"), 1),
}


def test_search_cases_are_git_apply(tmp_path):
    """Each case is checked against git itself (no expected bytes written here), and each really
    has the preimage at more than one place — so a matcher with another start position or search
    order than git's gives another result on at least one of them (see tests/test_fastapply.py's
    history: the mutants `if not i & 1`, `oldpos - 1`, `newpos` (no -1) and forwards-only fail)."""
    for name, (base, new, target, ctx) in SEARCH_CASES.items():
        tmp = tmp_path / name
        tmp.mkdir()
        patch = _diff(tmp, base, new, ctx)
        hunks = F.parse(patch)[0].hunks
        img = F._lines(target)
        places = [sum(img[k:k + len(h.pre)] == h.pre for k in range(len(img))) for h in hunks]
        assert max(places) > 1, name  # ambiguous on purpose: the preimage is found at several places
        theirs = _git_apply(tmp, target, patch)
        assert theirs is not None, name
        assert F.apply_file(target, hunks) == theirs, (name, patch, target)


# the matcher's mutants the cases above must kill: (what is changed, the line in fastapply.py, the mutant)
MUTANTS = {
    "search order: backwards first": ("                if i & 1:\n", "                if not i & 1:\n"),
    "search order: forwards to the end first": ("                if i & 1:\n                    if back == 0:",
                                                "                if i & 1 and fwd == len(img):\n"
                                                "                    if back == 0:"),
    "start position: the old position": ("        line = h.newpos - 1 if h.newpos else 0\n",
                                         "        line = h.oldpos - 1 if h.oldpos else 0\n"),
    "start position: newpos, not newpos - 1": ("        line = h.newpos - 1 if h.newpos else 0\n",
                                               "        line = h.newpos if h.newpos else 0\n"),
}


def test_each_matcher_mutant_gives_another_result_than_git(tmp_path):
    """Mutation check, kept: each mutant of apply_file's search (built from fastapply.py's own text)
    answers differently from git on at least one of SEARCH_CASES, so the cases can tell."""
    import types

    source = Path(F.__file__).read_text(encoding="utf-8")
    theirs = {}
    for name, (base, new, target, ctx) in SEARCH_CASES.items():
        tmp = tmp_path / name
        tmp.mkdir()
        patch = _diff(tmp, base, new, ctx)
        theirs[name] = (target, F.parse(patch)[0].hunks, _git_apply(tmp, target, patch))
    for mutant, (old, new) in MUTANTS.items():
        assert source.count(old) == 1, f"fastapply.py changed: update the mutant {mutant!r}"
        mod = types.ModuleType("fastapply_mutant")
        sys.modules[mod.__name__] = mod  # dataclasses look their module up there
        try:
            exec(compile(source.replace(old, new), F.__file__, "exec"), mod.__dict__)
        finally:
            del sys.modules[mod.__name__]
        caught = [name for name, (target, hunks, want) in theirs.items() if mod.apply_file(target, hunks) != want]
        assert caught, f"the mutant {mutant!r} gives git's result on every case: add a case that tells them apart"
