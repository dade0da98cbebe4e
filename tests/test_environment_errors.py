"""Failures the environment causes are one line naming the command, its first error line and the
fix, with exit 3 (DESIGN "Verbs"); the user's checkout is exactly as before. Exit 70 (with a
traceback) is kept for real bugs only.

Each case runs the real CLI in a subprocess: a post-checkout hook that exits 1, a read-only
.git, a stale index.lock, an index locked half-way through the switch, git missing from PATH,
no C compiler, no Docker daemon.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, git
from test_fault_injection import _diff, relaxed_state, start_apply, wait_for

BRANCH = "lucepatch/toy/1.0.0"


def lp(toy, *args, env=None, preexec=None, cache=None):
    e = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    if cache:
        e["LUCEPATCH_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(toy["ws"]), *map(str, args)],
                          env=e, capture_output=True, text=True, preexec_fn=preexec)


def one_line(r) -> str:
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def assert_untouched(up: Path, before: dict):
    d = _diff(relaxed_state(up), before)
    assert not d, "\n".join(f"{k}: {v[0]!r:.200} != {v[1]!r:.200}" for k, v in sorted(d.items()))
    assert git(up, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert git(up, "rev-parse", "-q", "--verify", f"refs/heads/{BRANCH}", check=False).strip() == ""


def _hook(up: Path, name: str, body: str):
    h = up / ".git" / "hooks" / name
    h.write_text("#!/bin/sh\n" + body)
    h.chmod(0o755)


@pytest.mark.parametrize("stash", [False, True], ids=["plain", "stash"])
def test_failing_post_checkout_hook_leaves_head_where_it_was(toy, tmp_path, stash):
    up = toy["upstream"]
    _hook(up, "post-checkout", "echo 'post-checkout: lfs is not installed' >&2\nexit 1\n")
    if stash:
        (up / "README.local").write_text("untracked\n")
        (up / "notes.txt").write_text("tracked\n")
        git(up, "add", "notes.txt")  # a staged new file: the stash carries it
    before = relaxed_state(up)
    r = lp(toy, "apply", "toy", "--source", up, *(["--stash"] if stash else []), cache=tmp_path / "c")
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "git checkout" in line and "post-checkout: lfs is not installed" in line
    assert "fix the hook" in line and "restored to main" in line
    assert_untouched(up, before)
    if stash:
        assert (up / "notes.txt").read_text() == "tracked\n"


def test_stale_index_lock_is_refused_before_any_work(toy, tmp_path):
    up = toy["upstream"]
    (up / ".git" / "index.lock").write_text("")
    before = relaxed_state(up)
    r = lp(toy, "apply", "toy", "--source", up, cache=tmp_path / "c")
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "index.lock exists" in line and "remove that file" in line
    assert_untouched(up, before)


def test_index_locked_half_way_through_the_switch_rolls_back(toy, tmp_path):
    """Another git takes the index between the branch ref and the checkout: the checkout fails,
    the branch is removed again, the error names the lock."""
    up = toy["upstream"]
    before = relaxed_state(up)
    pause, cache = tmp_path / "pause", tmp_path / "cache"
    pause.mkdir()
    proc = start_apply(toy, pause, cache)
    for k in range(3):
        wait_for(pause / f"boundary-{k}", proc)
        (pause / f"boundary-{k}").unlink()
    wait_for(pause / "switch-branch", proc)
    lock = up / ".git" / "index.lock"
    lock.write_text("")
    (pause / "switch-branch").unlink()
    proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    assert proc.returncode == 3, err
    line = [l for l in err.strip().splitlines() if l.strip()]
    assert len(line) == 1 and "git checkout" in line[0] and "index.lock" in line[0], err
    assert "restored to main" in line[0]
    lock.unlink()
    assert_untouched(up, before)
    assert not list((cache / "switch").glob("*.json"))


def _without_dac_override():
    """Root ignores file modes; drop the capabilities that let it (bounding set, at exec)."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop():
        for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    return drop


def test_read_only_git_dir(toy, tmp_path):
    up = toy["upstream"]
    gd = up / ".git"
    modes = {p: p.stat().st_mode for p in [gd, *gd.rglob("*")] if not p.is_symlink()}
    for p in modes:
        p.chmod(modes[p] & ~0o222)
    try:
        before = relaxed_state(up)
        r = lp(toy, "apply", "toy", "--source", up, cache=tmp_path / "c", preexec=_without_dac_override())
        after = relaxed_state(up)
    finally:
        for p, m in modes.items():
            p.chmod(m)
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "is not writable" in line and "make" in line and str(gd) in line
    assert not _diff(after, before)


def test_git_missing_from_path(toy, tmp_path):
    up = toy["upstream"]
    bare = tmp_path / "bin"
    bare.mkdir()
    before = relaxed_state(up)
    for verb in ("check", "apply", "status"):
        r = lp(toy, verb, "toy", "--source", up, env={"PATH": str(bare)}, cache=tmp_path / "c")
        assert r.returncode == 3, r.stderr
        assert "git not found on PATH" in one_line(r) and "install git" in r.stderr
    assert_untouched(up, before)


def test_compiler_missing(tmp_path):
    """verify builds the simulated driver with the C compiler first; without one: exit 3."""
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "git").symlink_to(shutil.which("git"))
    e = {**os.environ, "PATH": str(bare), "PYTHONPATH": str(REPO_ROOT), "CC": "",
         "LUCEPATCH_CACHE": str(tmp_path / "c")}
    r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(REPO_ROOT), "verify",
                        "--reproducer", "async-sched", "--driver", "fake", "--fixed", "--runs", "1",
                        "--lib", "/bin/true", "--baseline-lib", "/bin/true"],
                       env=e, capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "not found" in line and "install a C compiler" in line


def test_docker_missing(tmp_path):
    lib = tmp_path / "libvgpu.so"
    lib.write_bytes(b"\x7fELF")
    e = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "PYTHONPATH": str(REPO_ROOT),
         "LUCEPATCH_CACHE": str(tmp_path / "c")}
    r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(REPO_ROOT), "build",
                        "hami-device-plugin", "--from", "hami/device-plugin:v2", "--lib", str(lib)],
                       env=e, capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "Docker daemon" in line and "start dockerd or set DOCKER_HOST" in line


def test_a_real_bug_still_says_so(toy, tmp_path):
    """Exit 70 with the traceback stays for bugs: here a verb that divides by zero."""
    code = ("import sys; import lucepatch.engine.apply as a; "
            "a.resolve_base = lambda *x, **k: 1 / 0; "
            "from lucepatch.main import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "--workspace", str(toy["ws"]), "check", "toy",
                        "--source", str(toy["upstream"])],
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "LUCEPATCH_CACHE": str(tmp_path / "c")},
                       capture_output=True, text=True)
    assert r.returncode == 70, r.stderr
    assert "ZeroDivisionError" in r.stderr and "internal error (a bug)" in r.stderr


def test_environment_oserror_and_hung_tool_map_to_exit_3():
    import errno

    from lucepatch.errors import EXIT_ENVIRONMENT, from_exception

    ro = from_exception(OSError(errno.EROFS, "Read-only file system", "/cache/x"))
    assert ro.exit_code == EXIT_ENVIRONMENT and "/cache/x" in str(ro) and "read-only" in str(ro)
    missing = from_exception(FileNotFoundError(errno.ENOENT, "No such file or directory", "cuobjdump"))
    assert missing.exit_code == EXIT_ENVIRONMENT and "cuobjdump not found on PATH" in str(missing)
    hung = from_exception(subprocess.TimeoutExpired(["/usr/bin/nvidia-smi", "-L"], 60))
    assert hung.exit_code == EXIT_ENVIRONMENT and "nvidia-smi" in str(hung) and "60 s" in str(hung)
    assert from_exception(ZeroDivisionError()) is None
    assert from_exception(FileNotFoundError(errno.ENOENT, "No such file", "/srv/x/series")) is None


def test_probe_object_that_is_not_elf_is_a_probe_failure_not_a_crash(tmp_path):
    """builders/probe.py read sections with a hand parser that raised ValueError (exit 70) on a
    non-ELF or truncated object; now the probe fails with that reason."""
    from lucepatch.builders import probe as P

    for name, data in (("text.o", b"INPUT(-lfoo)\n"), ("cut.o", b"\x7fELF\x02\x01\x01" + b"\0" * 20)):
        f = tmp_path / name
        f.write_bytes(data)
        with pytest.raises(P._ProbeFail, match="not a readable ELF64 object"):
            P.list_gpu_code(f)


def test_ci_gate_reports_an_environment_failure_in_one_step_and_goes_on(toy, tmp_path):
    """commands/ci.py's step wrapper caught only LucepatchError: an OSError in the check step
    (here the cache's work folder is read-only) aborted the whole gate. Now that step fails with
    the one-line reason and the gate still reports every step."""
    cache = tmp_path / "c"
    (cache / "work").mkdir(parents=True)
    (cache / "work").chmod(0o555)
    try:
        r = lp(toy, "ci", "toy", "--json", "--no-probes", cache=cache,
               env={"LUCEPATCH_SRC_TOY": str(toy["upstream"])}, preexec=_without_dac_override())
    finally:
        (cache / "work").chmod(0o755)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    import json

    steps = {s["name"]: s for s in json.loads(r.stdout)["targets"][0]["steps"]}
    assert steps["lint"]["status"] == "pass"
    assert steps["check"]["status"] == "fail" and "Permission denied" in steps["check"]["detail"], steps["check"]
    assert {"build", "verify"} <= set(steps)
