"""Every ELF read lucepatch makes, through pyelftools: is it ELF, its dynamic section (NEEDED,
RUNPATH/RPATH, SONAME), its defined dynamic symbols, section contents (the CUDA fatbin), and the
constant a tiny exported function returns (HAMi-core's shared-region version), the GPU code of
every embedded fatbin (SASS/PTX per translation unit), and the shared-library closure resolved the
way glibc's loader does (breadth first, RPATH/LD_LIBRARY_PATH/RUNPATH/ld.so.conf/default dirs,
$ORIGIN, class and machine must match, an already loaded SONAME satisfies a NEEDED).

Why a closure walk and not `ld.so --list` alone: the loader stops at the first library it cannot
open (glibc 2.36: "error while loading shared libraries"), so a binary whose driver library is
absent on a build machine never shows what comes after it in load order.

One module so that no caller parses ELF structures by hand; a file that is not ELF, or is
truncated, is a UsageError naming it.
"""

from __future__ import annotations

import glob
import os
import re
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError

# pyelftools is imported where an ELF is parsed, not here: `is_elf` (all that verify needs, also on
# the GPU machine's minimal wheel set) stays dependency-free.

MAGIC = b"\x7fELF"

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")


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
    # what the loader's search order distinguishes (RPATH is inherited, RUNPATH is not)
    dt_runpath: str = ""
    dt_rpath: str = ""
    elfclass: int = 0
    machine: str = ""
    nodeflib: bool = False

    def to_json(self) -> dict:
        return {"needed": self.needed, "runpath": self.runpath, "soname": self.soname}


def dynamic(path: str | os.PathLike) -> Dynamic:
    """NEEDED entries (in order), RUNPATH (or RPATH) and SONAME of the dynamic section."""
    from elftools.elf.dynamic import DynamicSection

    needed, runpath, rpath, soname, nodeflib = [], "", "", "", False
    with open_elf(path) as elf:
        elfclass, machine = elf.elfclass, elf["e_machine"]
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
                elif tag.entry.d_tag == "DT_FLAGS_1" and tag.entry.d_val & 0x800:  # DF_1_NODEFLIB
                    nodeflib = True
    return Dynamic(needed, runpath or rpath, soname, runpath, rpath, elfclass, machine, nodeflib)


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


# ---------------------------------------------------------------------------------- GPU code
@dataclass
class GpuCode:
    sass: list[str] = field(default_factory=list)  # e.g. ["sm_120"], in order of first appearance
    ptx: list[str] = field(default_factory=list)  # e.g. ["compute_120"]
    tool: str = "pyelftools fatbin reader"
    fatbins: int = 0  # embedded fatbin containers (one per CUDA translation unit linked in)
    per_fatbin: list[list[str]] = field(default_factory=list)  # the SASS/PTX of each container

    def sass_numbers(self) -> list[int]:
        return sorted({int(re.sub(r"\D", "", s)) for s in self.sass})

    def to_json(self) -> dict:
        return {"sass": self.sass, "ptx": self.ptx, "tool": self.tool}


def _parse_fatbins(blob: bytes, code: GpuCode) -> None:
    p = 0
    while p + 16 <= len(blob):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", blob, p)
        if magic != FATBIN_MAGIC:
            p += 8  # containers are 8-byte aligned inside the section
            continue
        q, end = p + hsize, min(p + hsize + fsize, len(blob))
        entries: list[str] = []
        while q + 32 <= end:
            kind, _ev, ehs, psize = struct.unpack_from("<HHIQ", blob, q)
            sm = struct.unpack_from("<I", blob, q + 28)[0]
            # flags at +40: bits 20-21 mark arch-specific (sm_120a) and family (sm_120f) code
            flags = struct.unpack_from("<Q", blob, q + 40)[0] if ehs >= 48 else 0
            suffix = {1: "a", 2: "f"}.get((flags >> 20) & 3, "")
            name = f"sm_{sm}{suffix}" if kind == 2 else f"compute_{sm}{suffix}" if kind == 1 else ""
            if name:
                entries.append(name)
                dest = code.sass if kind == 2 else code.ptx
                if name not in dest:
                    dest.append(name)
            if ehs == 0:
                break
            q += ehs + psize
        code.fatbins += 1
        code.per_fatbin.append(entries)
        p = max(end, p + 16)


def gpu_code(path: Path) -> GpuCode:
    """SASS and PTX of every fatbin embedded in an object, archive member or shared library.

    Entry headers carry the kind (1 PTX, 2 ELF/SASS) and the SM number; payloads may be compressed
    (nvcc 13 compresses by default), which does not affect the headers read here. Arch-specific
    code (sm_120a: FP4 MMA) and family code (sm_120f) are told by the entry's flags; cuobjdump
    prints sm_120a for the first and plain sm_120 for the second."""
    code = GpuCode()
    for blob in sections(path, set(FATBIN_SECTIONS)).values():  # UsageError: not (readable) ELF
        _parse_fatbins(blob, code)
    return code


# ---------------------------------------------------------------------------------- closure
def ld_so_conf_dirs(conf: Path = Path("/etc/ld.so.conf"), _seen: set | None = None) -> list[str]:
    """The directories /etc/ld.so.conf names (with `include` globs): what ld.so.cache indexes."""
    seen = _seen if _seen is not None else set()
    if conf in seen or not conf.is_file():
        return []
    seen.add(conf)
    out: list[str] = []
    for line in conf.read_text(errors="replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include"):
            pat = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if not os.path.isabs(pat):
                pat = str(conf.parent / pat)
            for inc in sorted(glob.glob(pat)):
                out += ld_so_conf_dirs(Path(inc), seen)
        else:
            out.append(line)
    return out


@dataclass
class Closure:
    """Every object reachable from the roots; `needed[obj][name]` is the resolved path or None."""
    roots: list[str]
    objects: list[str] = field(default_factory=list)
    needed: dict[str, dict[str, str | None]] = field(default_factory=dict)
    allowed_missing: list[str] = field(default_factory=list)
    # roots that carry their own static libstdc++ (see private_cxx_runtime) and whether the shared
    # libstdc++.so.6 is loaded too: two runtimes in one process is a start-up abort, not a warning
    cxx_private: list[str] = field(default_factory=list)
    cxx_shared: bool = False

    @property
    def cxx_runtime_clash(self) -> bool:
        return len(self.cxx_private) >= 2 or (bool(self.cxx_private) and self.cxx_shared)

    @property
    def missing(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for obj, names in self.needed.items():
            bad = [n for n, p in names.items() if p is None and n not in self.allowed_missing]
            if bad:
                out[obj] = bad
        return out

    @property
    def absent_allowed(self) -> list[str]:
        return sorted({n for names in self.needed.values() for n, p in names.items()
                       if p is None and n in self.allowed_missing})

    @property
    def ok(self) -> bool:
        return bool(self.objects) and not self.missing and not self.cxx_runtime_clash

    def lines(self) -> list[str]:
        out = [f"{n} => not found (needed by {Path(o).name})" for o, names in self.missing.items() for n in names]
        if self.cxx_runtime_clash:
            others = " and libstdc++.so.6" if self.cxx_shared else ""
            out.append(f"{', '.join(Path(o).name for o in self.cxx_private)}{others}: {len(self.cxx_private) + self.cxx_shared} "
                       f"copies of the C++ runtime in one process (each object linked libstdc++ statically): {CXX_CLASH_FIX}")
        return out

    def to_json(self) -> dict:
        return {"roots": self.roots, "objects": len(self.objects), "ok": self.ok,
                "needed_names": sorted({n for names in self.needed.values() for n in names}),
                "allowed_missing": self.allowed_missing, "absent_allowed": self.absent_allowed,
                "missing": self.missing,
                "cxx_runtime": {"private_copies": self.cxx_private, "shared_loaded": self.cxx_shared,
                                "clash": self.cxx_runtime_clash}}


# Symbols only a copy of libstdc++ defines: libstdc++.a brings in only the members a library uses, so
# a locale-free library carries the support runtime (exceptions, terminate) without std::locale
CXX_RUNTIME_MARKS = ("_ZNSt6locale7classicEv", "__gxx_personality_v0", "__cxa_throw", "_ZSt9terminatev")
CXX_CLASH_FIX = ("their exported std:: symbols interpose each other and start-up aborts (measured on the H200: "
                 "`free(): invalid pointer` in std::locale's initialisation, GCC 13); build with a compiler whose "
                 "libstdc++.so is on its link path (e.g. CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++)")


def private_cxx_runtime(path: str | os.PathLike) -> bool:
    """True when the object carries its own libstdc++: it defines the runtime's symbols in .dynsym
    but does not NEED libstdc++.so.6. A relocated GCC whose library folder holds only libstdc++.a
    (the GPU machine's /opt/gcc wrapper) links every C++ shared library this way."""
    d = dynamic(path)
    if d.soname.startswith("libstdc++.so") or any(n.startswith("libstdc++.so") for n in d.needed):
        return False
    defined = defined_dynamic_symbols(path)
    return any(m in defined for m in CXX_RUNTIME_MARKS)


def _expand(entry: str, origin: str) -> str:
    return re.sub(r"\$(ORIGIN|\{ORIGIN\})", origin, entry).replace("$LIB", "lib64").replace("${LIB}", "lib64") \
        .replace("$PLATFORM", "x86_64").replace("${PLATFORM}", "x86_64")


def _split(path_list: str, origin: str) -> list[str]:
    return [_expand(e, origin) for e in path_list.split(":") if e != ""]


def resolve_closure(roots: list[Path], *, allowed_missing: list[str] = (), ld_library_path: str = "",
                    system_dirs: list[str] | None = None) -> Closure:
    """Walk NEEDED/RUNPATH breadth first from `roots` as glibc's loader maps dependencies.

    Search order per NEEDED (ld.so(8)): DT_RPATH of the requester and then of its loaders, only
    when the requester has no DT_RUNPATH; LD_LIBRARY_PATH; the requester's own DT_RUNPATH; the
    ld.so.cache directories (/etc/ld.so.conf); the default directories (not with DF_1_NODEFLIB).
    A candidate of another ELF class or machine is skipped, as the loader does. An allowed
    missing name (the host driver's libcuda.so.1) is not followed further when absent."""
    sysdirs = list(ld_so_conf_dirs() + list(DEFAULT_DIRS)) if system_dirs is None else list(system_dirs)
    cl = Closure([str(r) for r in roots], allowed_missing=list(allowed_missing))
    info: dict[str, Dynamic] = {}
    by_name: dict[str, str] = {}  # names an object is known by (SONAME, NEEDED it satisfied) -> path
    loader_of: dict[str, str | None] = {}

    def load(path: str) -> Dynamic | None:
        if path not in info:
            try:
                info[path] = dynamic(Path(path))
            except (UsageError, OSError):
                return None
        return info[path]

    def fits(path: str, want: Dynamic) -> bool:
        if not os.path.isfile(path):
            return False
        d = load(path)
        return d is not None and d.elfclass == want.elfclass and d.machine == want.machine

    def find(name: str, requester: str) -> str | None:
        me = info[requester]
        if "/" in name:
            return name if fits(name, me) else None
        dirs: list[str] = []
        if not me.dt_runpath:
            cur: str | None = requester
            while cur:
                d = info[cur]
                if d.dt_rpath and not d.dt_runpath:
                    dirs += _split(d.dt_rpath, os.path.dirname(cur))
                cur = loader_of.get(cur)
        dirs += [e for e in ld_library_path.split(":") if e]
        if me.dt_runpath:
            dirs += _split(me.dt_runpath, os.path.dirname(requester))
        if not me.nodeflib:
            dirs += sysdirs
        for d in dirs:
            cand = os.path.join(d, name)
            if fits(cand, me):
                return cand
        return None

    queue: list[str] = []
    for r in roots:
        p = str(r)
        if load(p) is None:
            raise ValueError(f"{p}: not an ELF file")
        queue.append(p)
        loader_of[p] = None
        by_name[os.path.basename(p)] = p
        if info[p].soname:
            by_name[info[p].soname] = p
    i = 0
    while i < len(queue):
        obj = queue[i]
        i += 1
        cl.objects.append(obj)
        cl.needed[obj] = {}
        for name in info[obj].needed:
            path = by_name.get(name) or find(name, obj)
            cl.needed[obj][name] = path
            if path is None:
                continue
            by_name.setdefault(name, path)
            if info[path].soname:
                by_name.setdefault(info[path].soname, path)
            if path not in loader_of:
                loader_of[path] = obj
                queue.append(path)
    # the roots are what was built; the system's libraries are not judged here
    cl.cxx_private = [str(r) for r in roots if private_cxx_runtime(r)]
    cl.cxx_shared = any((info[o].soname or os.path.basename(o)).startswith("libstdc++.so") for o in cl.objects)
    return cl
