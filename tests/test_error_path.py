"""The one error path holds (docs/design.md "Output and exit codes"): whatever the file system
answers — a file where a folder belongs, a name too long, a full or read-only disk, a symlink
loop, something already there — is one line naming the path, exit 3, never a traceback; a full
disk is named as the disk of the path that is full (the checkout's is not the cache's); a git that
hangs is stopped at its timeout with the command and the setting that lengthens it; and no broad
`except` in lucepatch/ swallows an error.
"""

from __future__ import annotations

import ast
import errno
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import needs
from conftest import REPO_ROOT, git
from test_fault_injection import _diff, relaxed_state

from lucepatch.errors import EXIT_ENVIRONMENT, EnvironmentMissing, from_exception

FS_ERRNOS = ["ENOTDIR", "ENAMETOOLONG", "ENOSPC", "EDQUOT", "EACCES", "EPERM", "EROFS", "ELOOP", "EEXIST", "EISDIR",
             "ENOTEMPTY", "EXDEV", "EMLINK", "EFBIG", "EIO", "ESTALE", "EMFILE", "ENFILE", "EBUSY", "ETXTBSY"]


def lp(ws, *args, cache=None, env=None, cwd=None):
    e = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    if cache is not None:
        e["LUCEPATCH_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(ws), *map(str, args)],
                          env=e, capture_output=True, text=True, timeout=300, cwd=cwd)


def one_line(r) -> str:
    lines = [l for l in r.stderr.strip().splitlines() if l.strip() and not l.startswith("lucepatch: workspace ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("name", FS_ERRNOS)
def test_every_file_system_errno_is_one_line_and_exit_3(name):
    code = getattr(errno, name)
    err = from_exception(OSError(code, os.strerror(code), "/srv/lucepatch/x"), cache="/srv/cache")
    assert isinstance(err, EnvironmentMissing) and err.exit_code == EXIT_ENVIRONMENT, name
    text = str(err)
    assert "\n" not in text and "/srv/lucepatch/x" in text and os.strerror(code) in text
    assert "; " in text  # and what to do about it
    assert "--cache-dir" not in text  # the path is not the cache's


def test_a_full_disk_is_named_as_the_disk_of_its_path():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/home/me/cache/lucepatch/builds/x.o")
    assert "--cache-dir on another disk" in str(from_exception(full, cache="/home/me/cache/lucepatch"))
    checkout = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/src/hami-core/.git/objects/ab/cd")
    said = str(from_exception(checkout, cache="/home/me/cache/lucepatch"))
    assert "/src/hami-core/.git/objects/ab/cd" in said and "--cache-dir" not in said
    unnamed = str(from_exception(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), cache="/c"))
    assert "--cache-dir" not in unnamed and "df -h" in unnamed


def test_a_bug_stays_a_bug():
    assert from_exception(FileNotFoundError(errno.ENOENT, "No such file", "/srv/x/series")) is None
    assert from_exception(OSError(errno.EINVAL, "Invalid argument", "/x")) is None
    assert from_exception(KeyError("x")) is None


def test_cache_dir_under_a_file(toy, tmp_path):
    a_file = tmp_path / "FILE"
    a_file.write_text("not a folder\n")
    r = lp(toy["ws"], "--cache-dir", a_file / "sub", "check", "toy", "--source", toy["upstream"])
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert f"{a_file}/sub" in line and "Not a directory" in line and "--cache-dir" in line


def test_cache_dir_with_a_300_character_name(toy, tmp_path):
    long = tmp_path / ("c" * 300)
    r = lp(toy["ws"], "--cache-dir", long, "check", "toy", "--source", toy["upstream"])
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "File name too long" in line and "shorter path" in line


def test_cache_dir_through_a_symlink_loop(toy, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    r = lp(toy["ws"], "--cache-dir", tmp_path / "loop" / "c", "check", "toy", "--source", toy["upstream"])
    assert r.returncode == 3, r.stderr
    assert "symbolic links" in one_line(r)


def test_workspace_with_a_300_character_name(tmp_path):
    r = lp(tmp_path / ("w" * 300), "list", cache=tmp_path / "c")
    assert r.returncode == 3, r.stderr
    assert "File name too long" in one_line(r)


# ---- a full checkout disk: a real tmpfs in a private mount namespace -------------------------------
_FULL_DISK = textwrap.dedent('''
    set -e
    mount -t tmpfs -o size=3m tmpfs "$DISK"
    cp -a "$PRISTINE" "$DISK/up"
    export GIT_OPTIONAL_LOCKS=0
    before=$(cd "$DISK/up" && git status --porcelain=v2 --branch && git stash list && git for-each-ref && git rev-parse HEAD)
    dd if=/dev/zero of="$DISK/filler" bs=64k 2>/dev/null || true  # the disk is full
    set +e
    "$PY" -m lucepatch --workspace "$WS" apply toy --source "$DISK/up" $STASH > "$OUT/out" 2> "$OUT/err"
    echo $? > "$OUT/rc"
    after=$(cd "$DISK/up" && git status --porcelain=v2 --branch && git stash list && git for-each-ref && git rev-parse HEAD)
    [ "$before" = "$after" ] && echo same > "$OUT/state" || { echo "$before" > "$OUT/before"; echo "$after" > "$OUT/after"; }
    find "$DISK/up/.git" -name '*.lock' > "$OUT/locks"
''')


@pytest.mark.parametrize("stash", [False, True], ids=["plain", "stash"])
def test_full_checkout_disk_is_reported_as_the_checkouts(toy, tmp_path, stash):
    if os.geteuid() != 0 or not shutil.which("unshare") or \
            subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        needs.unavailable("no-tool:", "a private mount namespace for a small tmpfs (unshare -m, as root)")
    up = toy["upstream"]
    if stash:
        (up / "notes.txt").write_text("mine\n")
        git(up, "add", "notes.txt")
    out, disk = tmp_path / "out", tmp_path / "disk"
    out.mkdir()
    disk.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "LUCEPATCH_CACHE": str(tmp_path / "cache"),
           "DISK": str(disk), "PRISTINE": str(up), "WS": str(toy["ws"]), "OUT": str(out), "PY": sys.executable,
           "STASH": "--stash" if stash else ""}
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", _FULL_DISK], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    err = (out / "err").read_text()
    assert (out / "rc").read_text().strip() == "3", err
    lines = [l for l in err.strip().splitlines() if not l.startswith("lucepatch: workspace ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(disk / "up") in lines[0] and "--cache-dir" not in lines[0], err
    assert ("restored to main" if stash else "was not changed") in lines[0], err  # the stash was pushed first
    assert (out / "state").is_file(), f"the checkout changed:\n{(out / 'before').read_text()}\n---\n{(out / 'after').read_text()}"
    assert (out / "locks").read_text() == ""


# ---- git's timeout --------------------------------------------------------------------------------------
def test_a_hanging_git_is_stopped_at_its_timeout_and_the_checkout_restored(toy, tmp_path):
    """A post-checkout hook that never returns: git is stopped after LUCEPATCH_GIT_TIMEOUT, the
    message names the command and the setting, and the switch is rolled back."""
    up = toy["upstream"]
    hook = up / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\nexec sleep 20\n")
    hook.chmod(0o755)
    before = relaxed_state(up)
    r = lp(toy["ws"], "apply", "toy", "--source", up, cache=tmp_path / "c", env={"LUCEPATCH_GIT_TIMEOUT": "2"})
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "git checkout" in line and "did not finish within 2 s" in line and "LUCEPATCH_GIT_TIMEOUT" in line
    assert "restored to main" in line
    d = _diff(relaxed_state(up), before)
    assert not d, d
    assert not list((up / ".git").glob("*.lock"))


def test_a_bad_git_timeout_is_a_usage_error(toy, tmp_path):
    r = lp(toy["ws"], "check", "toy", "--source", toy["upstream"], cache=tmp_path / "c",
           env={"LUCEPATCH_GIT_TIMEOUT": "soon"})
    assert r.returncode == 2 and "LUCEPATCH_GIT_TIMEOUT='soon' is not a number" in one_line(r)


# ---- no broad except swallows -------------------------------------------------------------------------
# handlers that keep a broad catch on purpose, and why it swallows nothing
BROAD_OK = {
    "lucepatch/engine/matrix_batches.py": "a worker thread's exception is re-raised in the caller's thread",
    "lucepatch/native/workload/lp_workload.py": "a workload reports its own exception as a failed check and exits 1",
}


def test_no_broad_except_swallows_an_error():
    """`except Exception` / `except BaseException` / a bare `except:` must re-raise or go through
    errors.from_exception (which keeps a bug a bug); the file system's errors are the error path's."""
    bad = []
    for f in sorted((REPO_ROOT / "lucepatch").rglob("*.py")):
        rel = str(f.relative_to(REPO_ROOT))
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ExceptHandler):
                continue
            names = [n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)] if node.type else ["<bare>"]
            if not {"Exception", "BaseException", "<bare>"} & set(names):
                continue
            body = [n for stmt in node.body for n in ast.walk(stmt)]
            reraises = any(isinstance(n, ast.Raise) for n in body)
            maps = any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) == "from_exception"
                       for n in body)
            if not (reraises or maps or rel in BROAD_OK):
                bad.append(f"{rel}:{node.lineno}")
    assert not bad, f"broad except handlers that swallow errors (narrow them, or re-raise): {bad}"
