"""Every ELF read lucepatch makes, through pyelftools: is it ELF, its dynamic section (NEEDED,
RUNPATH/RPATH, SONAME), its defined dynamic symbols, section contents (the CUDA fatbin), and the
constant a tiny exported function returns (HAMi-core's shared-region version).

One module so that no caller parses ELF structures by hand; a file that is not ELF, or is
truncated, is a UsageError naming it.
"""

from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass

from lucepatch.errors import UsageError

# pyelftools is imported where an ELF is parsed, not here: `is_elf` (all that verify needs, also on
# the GPU machine's minimal wheel set) stays dependency-free.

MAGIC = b"\x7fELF"


def is_elf(path: str | os.PathLike) -> bool:
    """True when the file starts with the ELF magic (cheap: callers use it to pick files)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


@contextmanager
def open_elf(path: str | os.PathLike):
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    if not is_elf(path):
        raise UsageError(f"{path} is not an ELF file")
    with open(path, "rb") as f:
        try:
            yield ELFFile(f)
        except (ELFError, struct.error, ValueError) as exc:  # truncated or corrupt headers
            raise UsageError(f"{path} is not a readable ELF file ({exc}); pass the built library")


@dataclass
class Dynamic:
    needed: list[str]
    runpath: str  # RUNPATH, else RPATH, else ""
    soname: str

    def to_json(self) -> dict:
        return {"needed": self.needed, "runpath": self.runpath, "soname": self.soname}


def dynamic(path: str | os.PathLike) -> Dynamic:
    """NEEDED entries (in order), RUNPATH (or RPATH) and SONAME of the dynamic section."""
    from elftools.elf.dynamic import DynamicSection

    needed, runpath, rpath, soname = [], "", "", ""
    with open_elf(path) as elf:
        for sec in elf.iter_sections():
            if not isinstance(sec, DynamicSection):
                continue
            for tag in sec.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath = tag.runpath
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath = tag.rpath
                elif tag.entry.d_tag == "DT_SONAME":
                    soname = tag.soname
    return Dynamic(needed, runpath or rpath, soname)


def defined_dynamic_symbols(path: str | os.PathLike) -> dict[str, int]:
    """Defined symbols of .dynsym (what `nm -D --defined-only` lists) -> st_value; version
    suffixes are not part of the names."""
    from elftools.elf.sections import SymbolTableSection

    out: dict[str, int] = {}
    with open_elf(path) as elf:
        for sec in elf.iter_sections():
            if not isinstance(sec, SymbolTableSection) or sec["sh_type"] != "SHT_DYNSYM":
                continue
            for sym in sec.iter_symbols():
                if sym.name and sym["st_shndx"] != "SHN_UNDEF":
                    out.setdefault(sym.name, sym["st_value"])
    return out


def sections(path: str | os.PathLike, names: set[str] | None = None) -> dict[str, bytes]:
    """Contents of the sections (those in `names`, or all) that occupy bytes in the file."""
    out = {}
    with open_elf(path) as elf:
        for sec in elf.iter_sections():
            if (names is None or sec.name in names) and sec["sh_type"] != "SHT_NOBITS":
                out[sec.name] = sec.data()
    return out


def returned_constant(path: str | os.PathLike, symbol: str) -> int | None:
    """The constant an exported `int f(void) { return N; }` returns, from its first instructions;
    None when the symbol is absent (e.g. a -fvisibility=hidden build) or the code is not that shape.

    pyelftools locates the code (symbol value -> the segment holding it -> file offset); the
    instruction test, the part no ELF library does, is lines/libfacts.returned_immediate.
    """
    from elftools.elf.sections import SymbolTableSection

    with open_elf(path) as elf:
        value = None
        for sec in elf.iter_sections():
            if isinstance(sec, SymbolTableSection) and sec["sh_type"] == "SHT_DYNSYM":
                for sym in sec.get_symbol_by_name(symbol) or []:
                    if sym["st_shndx"] != "SHN_UNDEF":
                        value = sym["st_value"]
        if value is None:
            return None
        code = None
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_filesz"]:
                start = value - seg["p_vaddr"]
                code = seg.data()[start:start + 32]
                break
        machine = elf["e_machine"]
    if code is None:
        return None
    from lucepatch.lines.libfacts import MACHINES, returned_immediate  # the one instruction decoder

    return returned_immediate(code, MACHINES.get(machine, ""))


