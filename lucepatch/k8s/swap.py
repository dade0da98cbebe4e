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
import shutil
import struct
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lucepatch.errors import CheckFailed, EnvironmentMissing, UsageError

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


# ---------------------------------------------------------------- ELF: symbols and shrreg

def is_elf(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def exported_symbols(path: str | os.PathLike) -> set[str]:
    """Names of defined dynamic symbols (``nm -D --defined-only``), version suffixes dropped."""
    nm = shutil.which("nm")
    if nm is None:
        raise EnvironmentMissing("nm not found: install binutils (apt-get install binutils)")
    if not is_elf(path):
        raise UsageError(f"{path} is not an ELF shared library: pass the built libvgpu.so")
    proc = subprocess.run([nm, "-D", "--defined-only", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"nm could not read {path}: {proc.stderr.strip()[:200]}")
    names = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            names.add(parts[2].split("@", 1)[0])
    return names


def missing_symbols(new: str | os.PathLike, installed: str | os.PathLike) -> list[str]:
    return sorted(exported_symbols(installed) - exported_symbols(new))


@dataclass
class _Elf:
    data: bytes
    is64: bool
    endian: str
    machine: int

    def u(self, fmt: str, off: int):
        return struct.unpack_from(self.endian + fmt, self.data, off)


def _elf(path) -> _Elf:
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF":
        raise UsageError(f"{path} is not an ELF file")
    is64 = data[4] == 2
    endian = "<" if data[5] == 1 else ">"
    machine = struct.unpack_from(endian + "H", data, 18)[0]
    return _Elf(data, is64, endian, machine)


def _dynsym_values(elf: _Elf, wanted: set[str]) -> dict[str, int]:
    """st_value of the wanted names from the dynamic symbol table (section headers)."""
    d = elf.data
    if elf.is64:
        shoff, = elf.u("Q", 0x28)
        shentsize, shnum = elf.u("HH", 0x3A)
    else:
        shoff, = elf.u("I", 0x20)
        shentsize, shnum = elf.u("HH", 0x2E)
    sections = []
    for i in range(shnum):
        o = shoff + i * shentsize
        if elf.is64:
            _n, typ, _f, addr, off, size, link, _i, _a, entsize = elf.u("IIQQQQIIQQ", o)
        else:
            _n, typ, _f, addr, off, size, link, _i, _a, entsize = elf.u("IIIIIIIIII", o)
        sections.append((typ, off, size, link, entsize))
    out = {}
    for typ, off, size, link, entsize in sections:
        if typ != 11 or not entsize:  # SHT_DYNSYM
            continue
        stroff = sections[link][1]
        for j in range(size // entsize):
            o = off + j * entsize
            if elf.is64:
                name, _info, _oth, shndx, value, _sz = elf.u("IBBHQQ", o)
            else:
                name, value, _sz, _info, _oth, shndx = elf.u("IIIBBH", o)
            if shndx == 0:
                continue
            end = d.index(b"\0", stroff + name)
            sym = d[stroff + name:end].decode("ascii", "replace")
            if sym in wanted:
                out[sym] = value
    return out


def _vaddr_to_offset(elf: _Elf, vaddr: int) -> int | None:
    if elf.is64:
        phoff, = elf.u("Q", 0x20)
        phentsize, phnum = elf.u("HH", 0x36)
    else:
        phoff, = elf.u("I", 0x1C)
        phentsize, phnum = elf.u("HH", 0x2A)
    for i in range(phnum):
        o = phoff + i * phentsize
        if elf.is64:
            typ, _fl, off, va, _pa, filesz, _ms, _al = elf.u("IIQQQQQQ", o)
        else:
            typ, off, va, _pa, filesz, _ms, _fl, _al = elf.u("IIIIIIII", o)
        if typ == 1 and va <= vaddr < va + filesz:
            return off + (vaddr - va)
    return None


def _returned_immediate(elf: _Elf, off: int) -> int | None:
    """The constant a tiny ``int f(void) { return N; }`` at file offset ``off`` returns
    (lucepatch.lines.libfacts.returned_immediate decodes it: x86-64 and AArch64)."""
    from lucepatch.lines.libfacts import returned_immediate

    return returned_immediate(elf.data[off:off + 32], {62: "x86-64", 183: "aarch64"}.get(elf.machine, ""))


def shrreg_version(path: str | os.PathLike) -> str | None:
    """HAMi-core's shared-region MAJOR.MINOR from an exported build, else None.

    HAMi-core defines MAJOR_VERSION/MINOR_VERSION in src/multiprocess/multiprocess_memory_limit.h
    and returns them from ``int shrreg_major_version()`` / ``shrreg_minor_version()``. Debug
    builds (upstream's build.sh, what HAMi ships) export both; Release builds use
    -fvisibility=hidden, and then the version is not determinable from the bytes (None: the
    gate falls back to compatible_hami.toml data and says so).
    """
    elf = _elf(path)
    syms = _dynsym_values(elf, {"shrreg_major_version", "shrreg_minor_version"})
    parts = []
    for name in ("shrreg_major_version", "shrreg_minor_version"):
        if name not in syms:
            return None
        off = _vaddr_to_offset(elf, syms[name])
        if off is None:
            return None
        v = _returned_immediate(elf, off)
        if v is None:
            return None
        parts.append(str(v))
    return ".".join(parts)


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
