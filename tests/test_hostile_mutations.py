"""hypothesis: 2,000+ mutations of valid patches through the same steps `apply` runs (parse,
safety, git's own diff validation, the index engine). Each either applies, conflicts, or is
refused with a one-line LucepatchError; nothing else may escape. Both paths of apply see every
mutation: where the fast path (engine/fastapply.py) applies a patch in Python, the engine must
say `applied` with the very same tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import commit_all, format_patches, git, init_repo, write
from lucepatch.engine.apply import TreeState, clone_private
from lucepatch.engine.core import STATUSES, IndexEngine, validate_diffs
from lucepatch.engine.safety import base_listing, check_series_safety
from lucepatch.errors import LucepatchError
from lucepatch.series import parse_patch

EXAMPLES = int(os.environ.get("LUCEPATCH_FUZZ_EXAMPLES", "2000"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    up = init_repo(tmp / "up")
    write(up, "src/a.c", "".join(f"int a{i}(void) {{ return {i}; }}\n" for i in range(20)))
    write(up, "doc/readme.txt", "hello\r\nworld\r\n")
    base = commit_all(up, "base")
    git(up, "checkout", "-q", "-b", "w")
    write(up, "src/a.c", (up / "src/a.c").read_text().replace("return 7;", "return 70;"))
    commit_all(up, "fix a7\n\nUpstream-Status: Pending\nSigned-off-by: A <a@b.c>")
    write(up, "doc/readme.txt", "hello\r\nthere\r\nworld\r\n")
    write(up, "src/new.h", "#define NEW 1\n")
    commit_all(up, "docs and header\n\nSigned-off-by: A <a@b.c>")
    pf = format_patches(up, f"{base}..w", tmp / "fp")
    repo = tmp / "clone"
    clone_private(up, repo)
    return {"up": up, "base": base, "patches": [p.read_bytes() for p in pf], "repo": repo, "tmp": tmp,
            "listing": base_listing(up, base)}


def mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for kind, pos, val in ops:
        if not b:
            b = bytearray(b"x")
        i = pos % len(b)
        if kind == 0:
            b[i] = val
        elif kind == 1:
            del b[i: i + 1 + val % 8]
        elif kind == 2:
            b[i:i] = bytes([val]) * (1 + val % 3)
        elif kind == 3:  # duplicate or drop a whole line
            lines = bytes(b).split(b"\n")
            j = pos % len(lines)
            if val % 2:
                lines.insert(j, lines[j])
            else:
                del lines[j]
            b = bytearray(b"\n".join(lines))
        else:  # splice a dangerous token
            tok = [b"../", b"/etc/", b".git/", b"\r", b"@@ -1 +1 @@\n", b"GIT binary patch\n", b"diff --git a/x b/x\n",
                   b"new file mode 120000\n", b"rename to ../x\n", b"\\ No newline at end of file\n"][val % 10]
            b[i:i] = tok
    return bytes(b)


op = st.tuples(st.integers(0, 4), st.integers(0, 1 << 20), st.integers(0, 255))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(which=st.integers(0, 1), ops=st.lists(op, min_size=1, max_size=4))
def test_mutated_patches_never_crash(corpus, which, ops):
    data = mutate(corpus["patches"][which], ops)
    f = corpus["tmp"] / "m.patch"
    f.write_bytes(data)
    repo = corpus["repo"]
    try:
        p = parse_patch(f, "m.patch")
        check_series_safety([p], repo, corpus["base"])
        d = corpus["tmp"] / "m.diff"
        d.write_bytes(p.diff)
        validate_diffs(repo, [(d, str(f))])
        eng = IndexEngine(repo, corpus["tmp"] / "index")
        eng.reset(corpus["base"])
        status, _ = eng.apply(d, name=str(f))
        assert status in STATUSES
        _ = p.patch_id
        fs = TreeState(repo, corpus["tmp"] / "state.index", corpus["base"], listing=corpus["listing"], fast=True)
        if fs.try_python(fs.prefetch([p])[0]):
            assert status == "applied" and fs.tree_id == eng.write_tree(), (status, data)
    except LucepatchError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg
