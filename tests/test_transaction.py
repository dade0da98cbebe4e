"""engine/transaction.py: a target folder is replaced whole, under a lock, or not at all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lucepatch.engine import transaction as tx
from lucepatch.errors import CheckFailed


@pytest.fixture
def tdir(tmp_path):
    d = tmp_path / "patches" / "t"
    (d / "absorbed").mkdir(parents=True)
    (d / "series").write_text("a.patch\n")
    (d / "a.patch").write_text("A\n")
    (d / "absorbed" / "old.patch").write_text("O\n")
    os.symlink("a.patch", d / "link")
    return d


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_snapshot_sees_content_modes_links_and_folders(tdir):
    s = tx.snapshot(tdir)
    assert set(s) == {"absorbed/", "absorbed/old.patch", "series", "a.patch", "link"}
    assert s["link"] == "link::a.patch"
    os.chmod(tdir / "a.patch", 0o600)
    assert tx.first_difference(s, tx.snapshot(tdir)) == "a.patch"


@pytest.mark.parametrize("cache", [False, True], ids=["stage-beside", "stage-in-cache"])
def test_replace_swaps_the_whole_folder(tdir, tmp_path, cache):
    before = tx.snapshot(tdir)

    def build(d):
        (d / "a.patch").write_text("A2\n")
        (d / "b.patch").write_text("B\n")

    after = tx.replace_dir(tdir, build, expect=before, cache=tmp_path / "cache" if cache else None)
    assert (tdir / "a.patch").read_text() == "A2\n" and (tdir / "b.patch").is_file()
    assert after == tx.snapshot(tdir) and (tdir / "absorbed" / "old.patch").is_file()
    assert sorted(p.name for p in tdir.parent.iterdir()) == ["t"]


def test_a_failing_build_or_a_changed_folder_writes_nothing(tdir, tmp_path):
    before = tx.snapshot(tdir)

    def boom(d):
        (d / "a.patch").write_text("half\n")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        tx.replace_dir(tdir, boom, expect=before, cache=tmp_path / "cache")
    assert tx.snapshot(tdir) == before and sorted(p.name for p in tdir.parent.iterdir()) == ["t"]
    (tdir / "series").write_text("a.patch\n# mine\n")
    mine = tx.snapshot(tdir)
    with pytest.raises(CheckFailed, match="series changed since the rebase session started"):
        tx.replace_dir(tdir, lambda d: (d / "a.patch").write_text("X\n"), expect=before)
    assert tx.snapshot(tdir) == mine


def test_recover_completes_a_half_done_two_rename_swap_backwards(tdir):
    before = tx.snapshot(tdir)
    pid = _dead_pid()
    old = tdir.parent / f".t{tx.OLD}{pid}"
    os.rename(tdir, old)  # killed between the two renames: the target is missing
    stage = tdir.parent / f".t{tx.STAGE}{pid}"
    stage.mkdir()
    done = tx.recover(tdir.parent)
    assert len(done) == 2 and tx.snapshot(tdir) == before
    assert sorted(p.name for p in tdir.parent.iterdir()) == ["t"]


def test_recover_leaves_a_live_writers_staging_alone(tdir):
    stage = tdir.parent / f".t{tx.STAGE}{os.getpid()}"
    stage.mkdir()
    assert tx.recover(tdir.parent) == [] and stage.is_dir()
