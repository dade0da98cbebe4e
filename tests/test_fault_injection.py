"""Real SIGINT / SIGTERM / SIGKILL sent to a `lucepatch apply` subprocess paused at every patch
boundary (LUCEPATCH_TEST_PAUSE_AT_PATCH). Afterwards the checkout is exactly as before: status
(--porcelain=v2 --ignored), stash list, worktree list, reflog and every file hash (.git included);
uncommitted changes survive (and with --stash come back byte for byte after a finished run);
work areas orphaned by SIGKILL are removed by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, git, write
from test_hostile_corpus import tree_hash

RO = {"GIT_OPTIONAL_LOCKS": "0"}


def state(up: Path):
    return {
        "status": git(up, "status", "--porcelain=v2", "--ignored", "--branch", env=RO),
        "stash": git(up, "stash", "list", env=RO),
        "worktrees": git(up, "worktree", "list", "--porcelain", env=RO),
        "reflog": git(up, "reflog", "show", "--all", env=RO),
        "refs": git(up, "for-each-ref", env=RO),
        "files": tree_hash(up),
    }


def start_apply(toy, pause_dir: Path, cache: Path, *extra) -> subprocess.Popen:
    env = {**os.environ, "LUCEPATCH_TEST_PAUSE_AT_PATCH": str(pause_dir), "LUCEPATCH_CACHE": str(cache),
           "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen([sys.executable, "-m", "lucepatch", "--workspace", str(toy["ws"]), "apply", "toy",
                             "--source", str(toy["upstream"]), *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout=30.0):
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"apply exited early ({proc.returncode}): {proc.stderr.read().decode()}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"no pause at {path}")
        time.sleep(0.01)


def release(pause_dir: Path, proc: subprocess.Popen, upto: int | None = None):
    """Let the run continue through every boundary (for runs that must finish)."""
    while proc.poll() is None:
        for m in pause_dir.glob("boundary-*"):
            if not m.name.endswith(".tmp"):
                m.unlink(missing_ok=True)
        time.sleep(0.01)


BOUNDARIES = [0, 1, 2]  # before patch 1, before patch 2, all applied (before the switch)
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]


def _dirty(up: Path):
    write(up, "README.local", "untracked notes\n")
    write(up, "src/a.c", (up / "src/a.c").read_text() + "/* local edit\r\n with CRLF */\n")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("stash", [False, True], ids=["plain", "stash"])
def test_signal_at_boundary_leaves_checkout_untouched(toy, tmp_path, sig, boundary, stash):
    up = toy["upstream"]
    if stash:
        _dirty(up)
    pause, cache = tmp_path / "pause", tmp_path / "cache"
    pause.mkdir()
    before = state(up)
    proc = start_apply(toy, pause, cache, *(["--stash"] if stash else []))
    for k in range(boundary):
        wait_for(pause / f"boundary-{k}", proc)
        (pause / f"boundary-{k}").unlink()
    wait_for(pause / f"boundary-{boundary}", proc)
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    err = proc.stderr.read().decode()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        # main.py: SIGINT -> "interrupted", 130; SIGTERM -> "terminated", 143
        assert proc.returncode == (130 if sig == signal.SIGINT else 143), err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert state(up) == before
    work = cache / "work"
    leftovers = list(work.iterdir()) if work.exists() else []
    if sig == signal.SIGKILL:
        assert len(leftovers) == 1  # orphaned by the kill ...
        env = {**os.environ, "LUCEPATCH_CACHE": str(cache), "PYTHONPATH": str(REPO_ROOT)}
        r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(toy["ws"]), "check", "toy",
                            "--source", str(up)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert not work.exists() or not any(work.iterdir())  # ... and reclaimed by the next run
        assert state(up) == before
    else:
        assert leftovers == []


def test_stash_refuses_changes_that_overlap_the_series(toy, tmp_path):
    up = toy["upstream"]
    _dirty(up)  # src/a.c is also changed by patch 1
    before = state(up)
    pause, cache = tmp_path / "pause", tmp_path / "cache"
    pause.mkdir()
    proc = start_apply(toy, pause, cache, "--stash")
    release(pause, proc)
    err = proc.stderr.read().decode()
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "src/a.c" in err
    assert state(up) == before


def test_stash_roundtrip_untouched_file(toy, tmp_path):
    up = toy["upstream"]
    write(up, "notes.txt", "base\n")
    git(up, "add", "notes.txt")
    git(up, "commit", "-q", "-m", "notes")
    write(up, "notes.txt", "base\r\nmine, with CRLF and no newline at end")
    write(up, "README.local", "untracked\n")
    data = (up / "notes.txt").read_bytes()
    pause, cache = tmp_path / "pause", tmp_path / "cache"
    pause.mkdir()
    # the base moved one commit: update target to the new head so the series applies there
    head = git(up, "rev-parse", "HEAD").strip()
    toml = toy["ws"] / "patches/toy/target.toml"
    toml.write_text(toml.read_text().replace(toy["base"], head))
    proc = start_apply(toy, pause, cache, "--stash")
    release(pause, proc)
    assert proc.returncode == 0, proc.stderr.read().decode()
    assert git(up, "symbolic-ref", "--short", "HEAD").strip() == "lucepatch/toy/1.0.0"
    assert (up / "notes.txt").read_bytes() == data
    assert (up / "README.local").read_text() == "untracked\n"
    assert git(up, "stash", "list") == ""
    assert "return 20" in (up / "src/b.c").read_text()
