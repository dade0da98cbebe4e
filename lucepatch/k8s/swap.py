"""The hami-core node swap: the shell script, and the ELF facts the deploy gates need.

The script itself is ``lucepatch/templates/k8s/hami-core-swap.sh``: it is mounted into the
swap DaemonSet through a ConfigMap and is also runnable directly (tests run it for real on a
temporary directory standing in for ``/usr/local/vgpu``). Python here only helps: locate and
run it, parse its one ``@@lucepatch-swap {json}`` result line, read exported symbols and the
shared-region version of a library, and find processes still mapping a replaced library.
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib import resources
from pathlib import Path

from lucepatch.errors import CheckFailed, UsageError
from lucepatch.native import elf

SWAP_RESULT_PREFIX = "@@lucepatch-swap "
SCRIPT_NAME = "hami-core-swap.sh"


def script_path() -> Path:
    return Path(str(resources.files("lucepatch").joinpath("templates", "k8s", SCRIPT_NAME)))


def script_text() -> str:
    return script_path().read_text(encoding="utf-8")


def parse_swap_result(text: str) -> dict | None:
    """The last ``@@lucepatch-swap {json}`` line of ``text`` (stdout or pod logs), or None."""
    found = None
    for line in text.splitlines():
        idx = line.find(SWAP_RESULT_PREFIX)
        if idx < 0:
            continue
        try:
            found = json.loads(line[idx + len(SWAP_RESULT_PREFIX):])
        except json.JSONDecodeError:
            continue
    return found


def run_script(action: str, *, directory: str, lib: str | None = None, sha256: str | None = None,
               name: str = "libvgpu.so", env: dict | None = None, timeout: float = 120) -> tuple[int, dict | None, str]:
    """Run the swap script locally; returns (exit code, result dict, stderr)."""
    cmd = ["bash", str(script_path()), action, "--dir", directory, "--name", name]
    if lib is not None:
        cmd += ["--lib", lib]
    if sha256 is not None:
        cmd += ["--sha256", sha256]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return proc.returncode, parse_swap_result(proc.stdout), proc.stderr


# ---------------------------------------------------------------- ELF: symbols and shrreg (lucepatch/native/elf.py)

is_elf = elf.is_elf


def exported_symbols(path: str | os.PathLike) -> set[str]:
    """Names of defined dynamic symbols (what ``nm -D --defined-only`` lists), no version suffixes."""
    if not elf.is_elf(path):
        raise UsageError(f"{path} is not an ELF shared library: pass the built libvgpu.so")
    return set(elf.defined_dynamic_symbols(path))


def missing_symbols(new: str | os.PathLike, installed: str | os.PathLike) -> list[str]:
    return sorted(exported_symbols(installed) - exported_symbols(new))


def shrreg_version(path: str | os.PathLike) -> str | None:
    """HAMi-core's shared-region MAJOR.MINOR from an exported build, else None.

    HAMi-core defines MAJOR_VERSION/MINOR_VERSION in src/multiprocess/multiprocess_memory_limit.h
    and returns them from ``int shrreg_major_version()`` / ``shrreg_minor_version()``. Debug
    builds (upstream's build.sh, what HAMi ships) export both; Release builds use
    -fvisibility=hidden, and then the version is not determinable from the bytes (None: the
    gate falls back to compatible_hami.toml data and says so).
    """
    parts = [elf.returned_constant(path, name) for name in ("shrreg_major_version", "shrreg_minor_version")]
    return None if None in parts else ".".join(map(str, parts))


# ---------------------------------------------------------------- processes mapping old inodes

def stale_mappers(target: str | os.PathLike, proc_root: str = "/proc") -> list[dict]:
    """Processes mapping a file at ``target``'s path whose inode is not the current file's.

    After an atomic swap (or a HAMi update overwriting the fix), running processes keep the old
    inode: /proc/<pid>/maps then names the same path with another inode (often "(deleted)").
    Returns [{"pid", "comm", "inode", "deleted"}] — the pods that still run the old library.
    """
    target = os.path.realpath(target)
    try:
        cur_inode = os.stat(target).st_ino
    except FileNotFoundError:
        cur_inode = None
    found = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "maps"), encoding="utf-8", errors="replace") as f:
                maps = f.read()
        except OSError:
            continue
        hit = parse_maps_for(maps, target, cur_inode)
        if hit:
            try:
                comm = Path(proc_root, entry, "comm").read_text().strip()
            except OSError:
                comm = "?"
            found.append({"pid": int(entry), "comm": comm, **hit})
    return sorted(found, key=lambda d: d["pid"])


def parse_maps_for(maps: str, target: str, cur_inode: int | None) -> dict | None:
    """First mapping of ``target`` in a maps text with an inode other than ``cur_inode``."""
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5]
        deleted = path.endswith(" (deleted)")
        if deleted:
            path = path[: -len(" (deleted)")]
        if path != target:
            continue
        inode = int(parts[4])
        if inode != cur_inode:
            return {"inode": inode, "deleted": deleted}
    return None


def require_check(ok: bool, message: str) -> None:
    if not ok:
        raise CheckFailed(message)
