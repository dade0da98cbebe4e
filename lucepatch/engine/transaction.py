"""Replace a target folder of the workspace in one step, under a lock, or not at all.

A rebase rewrites several files of `patches/<target>/` at once (series, patch files, absorbed/,
target.toml). Written one by one, an interrupt in the middle leaves a series that matches none
of its patches. Here the new folder is built complete beside the old one (a copy of it, then
edited), and swapped in with one `renameat2(RENAME_EXCHANGE)`: before the swap the workspace is
the old folder byte for byte, after it the new one. Where the file system cannot exchange, two
renames are used and `recover()` (run by the next command) puts back whichever half is missing.

The staging copy lives in the cache when it is on the workspace's file system (then an
interrupted write leaves nothing at all in the workspace), else as a hidden sibling
`patches/.<target>.lucepatch-stage-<pid>` that the next command removes. Writers hold an
exclusive `flock` on the `patches/` folder itself, so nothing is created to lock with.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Callable

from lucepatch.engine.checkout import pid_alive  # the one liveness check of a lock owner
from lucepatch.errors import CheckFailed, UsageError

STAGE = ".lucepatch-stage-"
OLD = ".lucepatch-old-"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def snapshot(folder: Path) -> dict[str, str]:
    """rel path -> "<kind>:<mode>:<sha256 or link target>" for everything under `folder`."""
    out: dict[str, str] = {}
    folder = Path(folder)
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            p = Path(root) / name
            rel = p.relative_to(folder).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link::{os.readlink(p)}"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = f"file:{st.st_mode & 0o777:o}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
        for d in dirs:
            p = Path(root) / d
            if not p.is_symlink():
                out[p.relative_to(folder).as_posix() + "/"] = f"dir:{p.lstat().st_mode & 0o777:o}:"
    return out


def first_difference(a: dict[str, str], b: dict[str, str]) -> str | None:
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            return k
    return None


@contextlib.contextmanager
def locked(folder: Path, *, timeout: float = 30.0):
    """Exclusive flock on `folder` (a directory) for the duration of the block."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > timeout:
                    raise UsageError(f"another lucepatch process is writing {folder}; wait for it and run again")
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False when the platform/file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP if hasattr(errno, "ENOTSUP") else errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), str(a))


def _stage_parent(target_dir: Path, cache: Path | None) -> Path:
    if cache is not None:
        d = Path(cache) / "staging"
        d.mkdir(parents=True, exist_ok=True)
        if os.stat(d).st_dev == os.stat(target_dir.parent).st_dev:
            return d
    return target_dir.parent


def recover(patches_dir: Path) -> list[str]:
    """Undo what an interrupted `replace_dir` left in `patches_dir` (owner process gone):
    a half-done two-rename swap is completed backwards (old folder restored), stale staging
    copies are removed. Returns what was done, one line each."""
    done = []
    if not Path(patches_dir).is_dir():
        return done
    for p in sorted(Path(patches_dir).iterdir()):
        name = p.name
        for marker in (STAGE, OLD):
            if not (name.startswith(".") and marker in name):
                continue
            target, _, pid = name[1:].rpartition(marker)
            try:
                alive = pid_alive(int(pid))
            except ValueError:
                alive = False
            if alive:
                continue
            real = p.parent / target
            if marker == OLD and not real.exists():
                os.rename(p, real)
                done.append(f"restored {real} from an interrupted write")
            else:
                shutil.rmtree(p, ignore_errors=True)
                done.append(f"removed {p} left by an interrupted write")
    return done


def replace_dir(target_dir: Path, build: Callable[[Path], None], *, expect: dict[str, str],
                cache: Path | None = None, before_swap: Callable[[dict], None] | None = None) -> dict[str, str]:
    """Swap `target_dir` for a copy edited by `build(copy)`; returns the new folder's snapshot.

    Refuses (CheckFailed, nothing written) when `target_dir` no longer matches `expect`."""
    target_dir = Path(target_dir)
    with locked(target_dir.parent):
        recover(target_dir.parent)
        now = snapshot(target_dir)
        diff = first_difference(expect, now)
        if diff is not None:
            raise CheckFailed(f"{target_dir / diff} changed since the rebase session started; restore it (or "
                              "--abort the session and start again): the session writes nothing over your edits")
        parent = _stage_parent(target_dir, cache)
        if parent != target_dir.parent:
            recover(parent)
        stage = parent / f".{target_dir.name}{STAGE}{os.getpid()}"
        shutil.rmtree(stage, ignore_errors=True)
        try:
            shutil.copytree(target_dir, stage, symlinks=True)
            build(stage)
            result = snapshot(stage)
            if before_swap:
                before_swap(result)
            try:
                swapped = _exchange(stage, target_dir)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                # the cache is on another mount after all: stage beside the target instead
                local = target_dir.parent / stage.name
                shutil.rmtree(local, ignore_errors=True)
                shutil.copytree(stage, local, symlinks=True)
                shutil.rmtree(stage, ignore_errors=True)
                stage = local
                swapped = _exchange(stage, target_dir)
            if not swapped:
                old = target_dir.parent / f".{target_dir.name}{OLD}{os.getpid()}"
                os.rename(target_dir, old)
                os.rename(stage, target_dir)
                stage = old
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return result


def create_dir(target_dir: Path, build: Callable[[Path], None], *, source: Path, cache: Path | None = None,
               before_swap: Callable[[dict], None] | None = None) -> dict[str, str]:
    """Create `target_dir` (which must not exist) as a copy of `source` edited by `build`, in one
    rename; returns its snapshot."""
    target_dir = Path(target_dir)
    with locked(target_dir.parent):
        recover(target_dir.parent)
        if target_dir.exists():
            raise CheckFailed(f"{target_dir} appeared while the rebase session ran; move it away and --continue, "
                              "or --abort the session")
        parent = _stage_parent(target_dir, cache)
        if parent != target_dir.parent:
            recover(parent)
        stage = parent / f".{target_dir.name}{STAGE}{os.getpid()}"
        shutil.rmtree(stage, ignore_errors=True)
        try:
            shutil.copytree(source, stage, symlinks=True)
            build(stage)
            result = snapshot(stage)
            if before_swap:
                before_swap(result)
            try:
                os.rename(stage, target_dir)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                local = target_dir.parent / stage.name
                shutil.copytree(stage, local, symlinks=True)
                shutil.rmtree(stage, ignore_errors=True)
                stage = local
                os.rename(stage, target_dir)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return result
