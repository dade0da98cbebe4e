"""What a libvgpu.so says about itself, read with pyelftools (nothing is loaded or run).

- Shared-region version: HAMi-core returns MAJOR_VERSION / MINOR_VERSION from
  ``int shrreg_major_version(void)`` / ``shrreg_minor_version(void)``
  (src/multiprocess/multiprocess_memory_limit.c). Debug builds (upstream's build.sh, what HAMi
  ships) export them; a Release build hides them (-fvisibility=hidden) but keeps them in .symtab
  unless stripped. The value is the immediate the tiny function loads before returning.
- Embedded commit: CMakeLists.txt runs ``git log -1 --pretty=format:%h`` and
  ``git symbolic-ref --short -q HEAD`` and writes them into config/static_config.h as
  ``size_t GIT_HASH_<hash>; size_t GIT_BRANCH_<branch>;`` (src/static_config.h.in). Until
  048efe9 (2024-09-03) those were definitions, so the symbols are in the library; since then
  they are ``extern`` declarations nothing references, and no build embeds a commit any more.
  (The stamp names the checkout's HEAD, which for a patched build is a commit of the build
  tree, not the upstream base; lucepatch's own builds neutralise it, [build.reproducible].)
"""

from __future__ import annotations

import hashlib
import io
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lucepatch.errors import EnvironmentMissing, UsageError

STAMP_FIXED_IN = "048efe9"  # HAMi-core: GIT_HASH_/GIT_BRANCH_ became extern (2024-09-03)
MACHINES = {"EM_X86_64": "x86-64", "EM_AARCH64": "aarch64"}


@dataclass
class LibFacts:
    path: str
    sha256: str
    size: int
    machine: str
    is_hami_core: bool  # exports HAMi-core's driver hooks and its shared-region accessors
    shrreg: str | None  # "MAJOR.MINOR"
    shrreg_from: str  # ".dynsym", ".symtab" or "" (not determinable)
    git_hash: str | None
    git_branch: str | None
    debug_info: bool
    build_id: str | None
    exported: int  # defined dynamic symbols
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def returned_immediate(code: bytes, machine: str) -> int | None:
    """The constant a tiny ``int f(void) { return N; }`` returns, from its first bytes.

    x86-64: the first ``mov $imm32, %eax`` (B8 imm32) before a ``ret`` (C3): gcc -O0
    (push rbp; mov rbp,rsp; mov eax,N; pop rbp; ret) and -O1+ (mov eax,N; ret), endbr64 or not.
    AArch64: the first ``movz w0, #imm16`` before ``ret``."""
    if machine == "x86-64":
        for i, b in enumerate(code):
            if b == 0xB8 and i + 5 <= len(code):
                return struct.unpack_from("<i", code, i + 1)[0]
            if b == 0xC3:
                return None
        return None
    if machine == "aarch64":
        for i in range(0, len(code) - 3, 4):
            insn, = struct.unpack_from("<I", code, i)
            if insn & 0xFFE0001F == 0x52800000:
                return (insn >> 5) & 0xFFFF
            if insn == 0xD65F03C0:
                return None
    return None


def _elffile():
    try:
        from elftools.elf.elffile import ELFFile  # lazy: pyelftools, 17 ms
        from elftools.elf.sections import NoteSection, SymbolTableSection  # lazy: pyelftools, 17 ms
    except ImportError:
        raise EnvironmentMissing("pyelftools is missing: pip install 'pyelftools>=0.29'")
    return ELFFile, NoteSection, SymbolTableSection


def _offset(elf, vaddr: int) -> int | None:
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= vaddr < seg["p_vaddr"] + seg["p_filesz"]:
            return seg["p_offset"] + vaddr - seg["p_vaddr"]
    return None


def read_lib(path: str | Path) -> LibFacts:
    """The facts of the ELF at ``path``; UsageError when it is not an ELF file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}")
    if data[:4] != b"\x7fELF":
        raise UsageError(f"{path} is not an ELF file: pass a libvgpu.so (HAMi-core's library)")
    ELFFile, NoteSection, SymbolTableSection = _elffile()

    from elftools.common.exceptions import ELFError  # lazy: pyelftools, 17 ms

    try:
        elf = ELFFile(io.BytesIO(data))
        machine = MACHINES.get(elf["e_machine"], str(elf["e_machine"]))
        tables: dict[str, dict[str, int]] = {}
        exported = 0
        for sec in elf.iter_sections():
            if not isinstance(sec, SymbolTableSection):
                continue
            names = tables.setdefault(sec.name, {})
            for sym in sec.iter_symbols():
                if sym["st_shndx"] == "SHN_UNDEF" or not sym.name:
                    continue
                names[sym.name] = sym["st_value"]
                if sec.name == ".dynsym":
                    exported += 1
        build_id = None
        for sec in elf.iter_sections():
            if isinstance(sec, NoteSection):
                for note in sec.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        build_id = note["n_desc"]
        debug_info = elf.get_section_by_name(".debug_info") is not None

        shrreg, shrreg_from = None, ""
        for table in (".dynsym", ".symtab"):
            syms = tables.get(table, {})
            if "shrreg_major_version" in syms and "shrreg_minor_version" in syms:
                parts = []
                for name in ("shrreg_major_version", "shrreg_minor_version"):
                    off = _offset(elf, syms[name])
                    parts.append(None if off is None else returned_immediate(data[off:off + 32], machine))
                if None not in parts:
                    shrreg, shrreg_from = ".".join(map(str, parts)), table
                    break
    except ELFError as exc:
        raise UsageError(f"{path} is not a readable ELF file: {exc}")

    every = set(tables.get(".dynsym", {})) | set(tables.get(".symtab", {}))
    git_hash = next((n[len("GIT_HASH_"):] for n in sorted(every) if n.startswith("GIT_HASH_")), None) or None
    git_branch = next((n[len("GIT_BRANCH_"):] for n in sorted(every) if n.startswith("GIT_BRANCH_")), None) or None
    dyn = set(tables.get(".dynsym", {}))
    # a driver hook exported, and HAMi-core's region accessors or its NVML / cuGetProcAddress hooks
    is_hami = "cuMemAlloc_v2" in dyn and bool({"shrreg_major_version", "nvmlInit_v2", "cuGetProcAddress"} & every)
    notes = []
    if shrreg is None:
        notes.append("shared-region version not determinable: shrreg_major/minor_version are neither exported nor in "
                     ".symtab (a stripped Release build)")
    elif shrreg_from == ".symtab":
        notes.append("shared-region version read from .symtab (the library hides it: a Release build)")
    if git_hash is None:
        notes.append(f"no embedded HAMi-core commit (builds stamp none since HAMi-core {STAMP_FIXED_IN}, 2024-09-03: "
                     "GIT_HASH_ became an extern declaration)")
    return LibFacts(path=str(path), sha256=hashlib.sha256(data).hexdigest(), size=len(data), machine=machine,
                    is_hami_core=is_hami, shrreg=shrreg, shrreg_from=shrreg_from, git_hash=git_hash,
                    git_branch=git_branch, debug_info=debug_info, build_id=build_id, exported=exported, notes=notes)
