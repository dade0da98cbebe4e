"""Real SIGINT / SIGTERM / SIGKILL sent to a `lucepatch apply` subprocess paused at every patch
boundary and at every step inside the checkout switch (LUCEPATCH_TEST_PAUSE_AT_PATCH).

Before the switch, the checkout is exactly as before afterwards: status (--porcelain=v2
--ignored), stash list, worktree list, reflog and every file hash (.git included). Inside the
switch (stash pushed, branch created, checkout done) SIGINT/SIGTERM roll the transaction back at
once and SIGKILL leaves a journal that the next lucepatch command (any verb) rolls back: branch,
HEAD, stash, refs, reflogs, work tree bytes, staged and unstaged changes as before (only the
object store and the index file's stat cache may differ). A signal after the switch completed
is reported as completion (exit 0 + a note). Work areas orphaned by SIGKILL are removed by the
next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, git, write
from sigint import POPEN
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
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, **POPEN)


def wait_for(path: Path, proc: subprocess.Popen, timeout=30.0):
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"apply exited early ({proc.returncode}): {proc.stderr.read().decode()}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"no pause at {path}")
        time.sleep(0.01)


def release(pause_dir: Path, proc: subprocess.Popen, upto: int | None = None):
    """Let the run continue through every pause point (for runs that must finish)."""
    while proc.poll() is None:
        for m in pause_dir.iterdir():
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


# ---- inside the switch: a transaction ------------------------------------------------------------
SWITCH_STEPS = ["switch-stashed", "switch-branch", "switch-checkout"]


def relaxed_state(up: Path):
    """Everything a user sees of the checkout; the object store (fetched, unreachable objects)
    and the index file's stat cache are allowed to differ, the index's content is not."""
    return {
        "head": git(up, "symbolic-ref", "-q", "HEAD", check=False, env=RO) + git(up, "rev-parse", "HEAD", env=RO),
        "status": git(up, "status", "--porcelain=v2", "--ignored", "--branch", env=RO),
        "staged": git(up, "diff", "--cached", "--binary", env=RO),
        "unstaged": git(up, "diff", "--binary", env=RO),
        "stash": git(up, "stash", "list", env=RO),
        "worktrees": git(up, "worktree", "list", "--porcelain", env=RO),
        "reflog": git(up, "reflog", "show", "--all", env=RO),
        "refs": git(up, "for-each-ref", env=RO),
        "files": {k: v for k, v in tree_hash(up, skip=(".git/index",)).items() if not k.startswith(".git/objects")},
    }


def _diff(a: dict, b: dict) -> dict:
    out = {k: (a[k], b[k]) for k in a if k != "files" and a[k] != b[k]}
    fa, fb = a["files"], b["files"]
    out.update({f"file {k}": (fa.get(k), fb.get(k)) for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)})
    return out


def _series_adds_a_directory(toy):
    """A third patch that creates src/new/deep/c.c: a rollback must remove file and folders."""
    up, base, tdir = toy["upstream"], toy["base"], toy["ws"] / "patches/toy"
    git(up, "checkout", "-q", "-b", "w3", base)
    write(up, "src/new/deep/c.c", "int c(void) { return 3; }\n")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "add c\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    (tdir / "add-c.patch").write_text(git(up, "format-patch", "--zero-commit", "--no-signature", "--full-index",
                                          "-N", "-1", "--stdout", "HEAD"))
    with open(tdir / "series", "a") as f:
        f.write("add-c.patch\n")
    git(up, "checkout", "-q", "main")
    git(up, "branch", "-q", "-D", "w3")


def _dirty_outside_series(toy):
    """Staged + unstaged changes (CRLF, no final newline) to a file the series does not touch,
    and an untracked file; the target is moved to the commit that adds that file."""
    up = toy["upstream"]
    write(up, "notes.txt", "base\n")
    write(up, "staged.txt", "one\n")
    git(up, "add", "notes.txt", "staged.txt")
    git(up, "commit", "-q", "-m", "notes")
    head = git(up, "rev-parse", "HEAD").strip()
    toml = toy["ws"] / "patches/toy/target.toml"
    toml.write_text(toml.read_text().replace(toy["base"], head))
    write(up, "notes.txt", "an older change the user stashed\n")
    git(up, "stash", "push", "-q", "-m", "the user's own older stash")
    write(up, "staged.txt", "one\ntwo, staged\n")
    git(up, "add", "staged.txt")
    write(up, "staged.txt", "one\ntwo, staged\nthree, not staged\n")
    write(up, "notes.txt", "base\r\nmine, with CRLF and no newline at end")
    write(up, "README.local", "untracked\n")


def _next_command_restores(toy, cache):
    env = {**os.environ, "LUCEPATCH_CACHE": str(cache), "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(toy["ws"]), "list"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "restored to main" in r.stderr, r.stderr
    assert not list((cache / "switch").glob("*.json"))
    return r


CASES = [("plain", s) for s in SWITCH_STEPS[1:]] + [("stash", s) for s in SWITCH_STEPS]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("mode,step", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_signal_inside_switch_rolls_back(toy, tmp_path, sig, mode, step):
    up = toy["upstream"]
    stash = mode == "stash"
    _series_adds_a_directory(toy)
    if stash:
        _dirty_outside_series(toy)
    pause, cache = tmp_path / "pause", tmp_path / "cache"
    pause.mkdir()
    before = relaxed_state(up)
    proc = start_apply(toy, pause, cache, *(["--stash"] if stash else []))
    for k in range(4):  # three patches: boundaries 0..3
        wait_for(pause / f"boundary-{k}", proc)
        (pause / f"boundary-{k}").unlink()
    steps = SWITCH_STEPS if stash else SWITCH_STEPS[1:]
    for s in steps[:steps.index(step)]:
        wait_for(pause / s, proc)
        (pause / s).unlink()
    wait_for(pause / step, proc)
    # the switch really is half-way: the branch exists from switch-branch on
    assert (git(up, "rev-parse", "-q", "--verify", "refs/heads/lucepatch/toy/1.0.0", check=False).strip() != "") \
        == (step != "switch-stashed")
    if step == "switch-checkout":
        assert git(up, "symbolic-ref", "--short", "HEAD").strip() == "lucepatch/toy/1.0.0"
        assert (up / "src/new/deep/c.c").is_file()
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert list((cache / "switch").glob("*.json")), "the journal must survive a SIGKILL"
        _next_command_restores(toy, cache)
    else:
        assert proc.returncode == (130 if sig == signal.SIGINT else 143), err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "restored to main" in err, err
    after = relaxed_state(up)
    d = _diff(after, before)
    assert not d, "\n".join(f"{k}: {v[0]!r:.300} != {v[1]!r:.300}" for k, v in sorted(d.items()))
    assert not (up / "src/new").exists()


def test_signal_after_the_switch_completed_reports_completion(toy, tmp_path):
    up = toy["upstream"]
    pause, cache = tmp_path / "pause", tmp_path / "cache"
    pause.mkdir()
    proc = start_apply(toy, pause, cache)
    for k in range(3):
        wait_for(pause / f"boundary-{k}", proc)
        (pause / f"boundary-{k}").unlink()
    for s in ("switch-branch", "switch-checkout"):
        wait_for(pause / s, proc)
        (pause / s).unlink()
    wait_for(pause / "switch-done", proc)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.2)
    (pause / "switch-done").unlink()
    proc.wait(timeout=30)
    err = proc.stderr.read().decode()
    assert proc.returncode == 0, err
    assert "interrupted" not in err and "SIGINT arrived after the work completed" in err, err
    assert git(up, "symbolic-ref", "--short", "HEAD").strip() == "lucepatch/toy/1.0.0"
    assert "return 20" in (up / "src/b.c").read_text()
    assert not list((cache / "switch").glob("*.json"))


def test_one_sigterm_handler_for_the_program():
    """There used to be two (main.py's and engine/apply.py's, which never ran)."""
    hits = [str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "lucepatch").rglob("*.py")
            if "signal.SIGTERM, " in p.read_text() and "signal.signal(" in p.read_text()]
    assert hits == ["lucepatch/signals.py"]


def test_a_work_area_whose_owner_pid_is_not_written_yet_is_kept(tmp_path):
    """Lab.prebuild makes two builds at a time: one thread's WorkArea is created (mkdir) before its
    owner.pid is written, and the other thread's reclaim_orphans must not remove it meanwhile; a
    directory without owner.pid older than a minute is an orphan and goes."""
    from lucepatch.engine.workarea import reclaim_orphans

    fresh, old = tmp_path / "fresh-1", tmp_path / "old-1"
    fresh.mkdir()
    old.mkdir()
    os.utime(old, (time.time() - 120, time.time() - 120))
    assert reclaim_orphans(tmp_path) == [old]
    assert fresh.is_dir() and not old.exists()
