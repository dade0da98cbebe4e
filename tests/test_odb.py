"""The git object layer (lucepatch/odb.py) against git itself: what it writes git reads (packs,
loose objects, commits, index files), what it reads is what git has, and what it copies between
object stores is complete and leaves nothing half-written. The pack and tree formats are also
checked in tests/test_fastapply.py, the index format in tests/test_matrix.py."""

from __future__ import annotations

import subprocess

import pytest

from conftest import commit_all, git, init_repo, write
from lucepatch import odb


@pytest.fixture
def repo(tmp_path):
    r = init_repo(tmp_path / "r")
    write(r, "f.txt", "one\n")
    write(r, "d/g.txt", "two\n")
    commit_all(r, "base")
    return r


def _objects(*blobs: bytes) -> dict:
    return {odb.object_id("blob", b): ("blob", b) for b in blobs}


def test_write_objects_packs_sha1_and_git_reads_them(repo):
    objs = _objects(b"alpha\n", b"beta\n" * 1000)
    before = set((repo / ".git/objects/pack").glob("pack-*"))
    odb.write_objects(repo, objs)
    new = set((repo / ".git/objects/pack").glob("pack-*")) - before
    assert sorted(p.suffix for p in new) == [".idx", ".pack"]  # one pack: two files
    for oid, (_, data) in objs.items():
        assert subprocess.run(["git", "cat-file", "blob", oid], cwd=repo, capture_output=True, check=True).stdout == data
    odb.write_objects(repo, {})  # nothing to write: nothing written
    assert set((repo / ".git/objects/pack").glob("pack-*")) - before == new


def test_loose_objects_are_gits(repo):
    objs = _objects(b"", b"gamma\n")
    odb.write_loose(repo / ".git/objects", objs)
    odb.write_loose(repo / ".git/objects", objs)  # present ones are left as they are
    for oid, (_, data) in objs.items():
        assert (repo / ".git/objects" / oid[:2] / oid[2:]).is_file()
        assert git(repo, "cat-file", "-t", oid).strip() == "blob"
    assert not list((repo / ".git/objects").rglob(".tmp-*"))
    git(repo, "fsck", "--no-dangling")


def test_commit_bytes_are_what_commit_tree_writes(repo):
    tree, parent = git(repo, "rev-parse", "HEAD^{tree}").strip(), git(repo, "rev-parse", "HEAD").strip()
    msg = "subject\n\nbody with ünïcode\n"
    env = {"GIT_AUTHOR_NAME": "A U", "GIT_AUTHOR_EMAIL": "a@u", "GIT_AUTHOR_DATE": "@1700000000 +0130",
           "GIT_COMMITTER_NAME": "C", "GIT_COMMITTER_EMAIL": "c@c", "GIT_COMMITTER_DATE": "@0 +0000"}
    theirs = odb.commit_tree(repo, tree, parent, msg, env=env)
    body = odb.commit_bytes(tree, parent, "A U <a@u> 1700000000 +0130", "C <c@c> 0 +0000", msg)
    assert odb.object_id("commit", body) == theirs
    assert subprocess.run(["git", "cat-file", "commit", theirs], cwd=repo, capture_output=True).stdout == body


def test_reads_answer_as_git_does(repo):
    f = git(repo, "rev-parse", "HEAD:f.txt").strip()
    d = git(repo, "rev-parse", "HEAD:d").strip()
    assert odb.read_blobs(repo, [f, f]) == {f: b"one\n"}
    assert odb.read_blobs(repo, []) == {}
    with pytest.raises(ValueError, match=d):  # a tree where a blob is wanted
        odb.read_blobs(repo, [d])
    assert odb.batch_check(repo, ["HEAD:f.txt", "HEAD:nope", "HEAD:d"]) == [(f, "blob"), None, (d, "tree")]
    got = odb.read_specs(repo, ["HEAD:d", "HEAD:nope"])
    assert got[0][0] == "tree" and b"g.txt\0" in got[0][1] and got[1] is None
    assert odb.read_file(repo, "HEAD", "d/g.txt") == "two\n" and odb.read_file(repo, "HEAD", "nope") is None
    write(repo, "f.txt", "changed\n")
    assert odb.hash_files(repo, ["f.txt"]) == [odb.object_id("blob", b"changed\n")]
    assert odb.hash_files(repo, []) == []


def test_write_tree_and_tree_agree(repo):
    t = odb.Tree(odb.listing(repo, "HEAD"))
    oid = odb.object_id("blob", b"new\n")
    odb.write_objects(repo, {oid: ("blob", b"new\n")})
    t.put("d/e/new.txt", "100644", oid)
    root = t.write()
    odb.write_objects(repo, t.new_objects)
    idx = repo / ".git" / "scratch-index"
    env = {"GIT_INDEX_FILE": str(idx)}
    git(repo, "read-tree", root, env=env)
    assert odb.write_tree(repo, env=env) == root
    assert git(repo, "ls-tree", "-r", "--name-only", root).split() == ["d/e/new.txt", "d/g.txt", "f.txt"]


def test_copy_objects_brings_packs_and_loose_objects_whole(tmp_path, repo):
    other = init_repo(tmp_path / "other")
    write(other, "x", "x\n")
    commit_all(other, "x")
    packed, loose = _objects(b"packed\n"), _objects(b"loose\n")
    odb.write_objects(repo, packed)
    odb.write_loose(repo / ".git/objects", loose)
    dest = odb.objects_dir(other / ".git")
    odb.copy_objects(repo / ".git" / "objects", dest)
    odb.copy_objects(repo / ".git" / "objects", dest)  # again: everything is there, nothing rewritten
    for oid in [*packed, *loose]:
        assert git(other, "cat-file", "-t", oid).strip() == "blob"
    assert not [p for p in dest.rglob("*") if "tmp-lucepatch-" in p.name or p.name.startswith(".lucepatch-")]
    git(other, "fsck", "--no-dangling")


def test_objects_dir_of_a_linked_worktree_is_the_common_one(tmp_path, repo):
    git(repo, "worktree", "add", "-q", str(tmp_path / "wt"))
    gd = git(tmp_path / "wt", "rev-parse", "--absolute-git-dir").strip()
    assert odb.objects_dir(gd) == (repo / ".git" / "objects").resolve()
