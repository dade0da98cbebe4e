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

Long: one module per outside thing (docs/design.md "Layers"): every ELF read shares the pyelftools
handle, the is-it-ELF check and the one error for a bad file; the dynamic section, GPU code, the
loader's closure, glibc needs and environment names are its sections, each a few functions.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import struct
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.native.libfacts import MACHINES, returned_immediate  # the one instruction decoder

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
    from elftools.common.exceptions import ELFError  # lazy: pyelftools, 16 ms
    from elftools.elf.elffile import ELFFile  # lazy: pyelftools, 16 ms

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
    from elftools.elf.dynamic import DynamicSection  # lazy: pyelftools, 16 ms

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
    from elftools.elf.sections import SymbolTableSection  # lazy: pyelftools, 16 ms

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
    instruction test, the part no ELF library does, is native/libfacts.returned_immediate.
    """
    from elftools.elf.sections import SymbolTableSection  # lazy: pyelftools, 16 ms

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


# ---------------------------------------------------------------------------------- loader needs
# What a library asks of the dynamic loader beyond NEEDED: the symbol versions it references
# (.gnu.version_r), the GLIBC_PRIVATE symbols among them (glibc's internal interface, which glibc
# changes between releases: the beclab fork of libvgpu.so references _dl_sym@GLIBC_PRIVATE, which
# libc.so.6 stopped exporting in glibc 2.34), and whether a given libc.so.6 provides them.
GLIBC_DATA = Path(__file__).resolve().parent.parent / "data" / "glibc.toml"


# When the loader resolves an undefined symbol: a function reached only through the PLT of a library
# that does not ask for immediate binding is resolved at its first call ("lazy": a missing one kills
# the process only if it is called, or at start under LD_BIND_NOW=1); any other reference (a GOT
# entry, a data or address relocation, a -z now library) is resolved when the library loads ("load");
# a symbol no relocation uses is never resolved ("unused").
LOAD, LAZY, UNUSED = "load", "lazy", "unused"


@dataclass
class VersionedRef:
    name: str
    version: str
    file: str  # the library the version is needed from (libc.so.6, libdl.so.2, ...)
    binding: str = LOAD  # LOAD | LAZY | UNUSED (a report without it: LOAD, the cautious reading)

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    def fails_at_load(self, *, bind_now: bool = False) -> bool:
        """Whether an unmet reference stops the process before it runs (bind_now: LD_BIND_NOW=1)."""
        return self.binding == LOAD or (bind_now and self.binding == LAZY)


@dataclass
class LoaderNeeds:
    needed: list[str]
    versions: dict[str, list[str]]  # needed file -> the versions referenced from it
    private: list[VersionedRef]  # undefined symbols bound to GLIBC_PRIVATE
    newest_glibc: str | None  # the newest GLIBC_x.y referenced ("2.17"); the floor of glibc it needs
    refs: int = 0  # versioned undefined references in all

    def to_json(self) -> dict:
        return {"needed": self.needed, "versions": self.versions, "newest_glibc": self.newest_glibc,
                "private": [{"name": r.name, "version": r.version, "file": r.file, "binding": r.binding}
                            for r in self.private],
                "versioned_refs": self.refs}

    @classmethod
    def from_json(cls, d: dict) -> "LoaderNeeds":
        return cls(needed=list(d.get("needed") or []), versions={k: list(v) for k, v in (d.get("versions") or {}).items()},
                   private=[VersionedRef(p["name"], p["version"], p.get("file", ""), p.get("binding", LOAD))
                            for p in d.get("private") or []],
                   newest_glibc=d.get("newest_glibc"), refs=int(d.get("versioned_refs") or 0))


def _glibc_key(v: str) -> tuple[int, ...]:
    m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", v)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def glibc_str(key: tuple[int, ...]) -> str:
    return ".".join(map(str, key))


def _bindings(elf) -> tuple[set[int], set[int], bool]:
    """(.dynsym indexes used by PLT jump-slot relocations, indexes used by any other dynamic
    relocation, whether the library asks for immediate binding: DT_BIND_NOW, DF_BIND_NOW, DF_1_NOW)."""
    from elftools.elf.dynamic import DynamicSection  # lazy: pyelftools 150 ms
    from elftools.elf.relocation import RelocationSection  # lazy: pyelftools 150 ms

    jmprel, now = None, False
    for sec in elf.iter_sections():
        if isinstance(sec, DynamicSection):
            for tag in sec.iter_tags():
                t, v = tag.entry.d_tag, tag.entry.d_val
                if t == "DT_JMPREL":
                    jmprel = v
                elif t == "DT_BIND_NOW" or (t == "DT_FLAGS" and v & 0x8) or (t == "DT_FLAGS_1" and v & 0x1):
                    now = True
    plt, other = set(), set()
    for sec in elf.iter_sections():
        if not isinstance(sec, RelocationSection) or not sec["sh_flags"] & 0x2:
            continue  # SHF_ALLOC: the relocations the loader applies (not a debug section's)
        used = {r["r_info_sym"] for r in sec.iter_relocations()}
        (plt if jmprel is not None and sec["sh_addr"] == jmprel else other).update(used)
    return plt, other, now


def loader_needs(path: str | os.PathLike) -> LoaderNeeds:
    """NEEDED, the symbol versions referenced per needed file, the GLIBC_PRIVATE references (each with
    when the loader resolves it: LOAD, LAZY or UNUSED), and the newest GLIBC_x.y referenced (read from
    .dynsym, .gnu.version, .gnu.version_r, the dynamic relocations and the dynamic section's flags)."""
    from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection  # lazy: pyelftools, 16 ms
    from elftools.elf.sections import SymbolTableSection  # lazy: pyelftools, 16 ms

    needed = dynamic(path).needed
    versions: dict[str, list[str]] = {}
    index_file: dict[int, tuple[str, str]] = {}  # vna_other -> (version name, file)
    private: list[VersionedRef] = []
    refs = 0
    with open_elf(path) as elf:
        vsym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
        for sec in elf.iter_sections():
            if isinstance(sec, GNUVerNeedSection):
                for vn, auxes in sec.iter_versions():
                    for aux in auxes:
                        versions.setdefault(vn.name, []).append(aux.name)
                        index_file[aux["vna_other"]] = (aux.name, vn.name)
        dynsym = next((s for s in elf.iter_sections()
                       if isinstance(s, SymbolTableSection) and s["sh_type"] == "SHT_DYNSYM"), None)
        if dynsym is not None and vsym is not None:
            for i, sym in enumerate(dynsym.iter_symbols()):
                if sym["st_shndx"] != "SHN_UNDEF" or not sym.name:
                    continue
                ndx = vsym.get_symbol(i)["ndx"]
                if not isinstance(ndx, int) or ndx not in index_file:
                    continue
                refs += 1
                ver, file = index_file[ndx]
                if ver == "GLIBC_PRIVATE":
                    private.append(VersionedRef(sym.name, ver, file, binding=i))  # the index, for now
        if private:
            plt, other, now = _bindings(elf)
            for r in private:
                i = r.binding
                r.binding = (LOAD if i in other or (now and i in plt) else LAZY if i in plt else UNUSED)
    glibc = sorted({_glibc_key(v) for vs in versions.values() for v in vs} - {()})
    return LoaderNeeds(needed=needed, versions={k: sorted(set(v), key=_glibc_key) for k, v in versions.items()},
                       private=sorted(private, key=lambda r: r.name), newest_glibc=glibc_str(glibc[-1]) if glibc else None,
                       refs=refs)


@dataclass
class LibcProvides:
    path: str
    glibc: str | None  # the newest GLIBC_x.y it defines: its release
    versions: set[str]
    private: set[str]  # symbols it exports at GLIBC_PRIVATE

    def to_json(self) -> dict:
        return {"path": self.path, "glibc": self.glibc}


def libc_provides(path: str | os.PathLike) -> LibcProvides:
    """The versions a libc.so.6 defines (.gnu.version_d) and the symbols it exports at GLIBC_PRIVATE
    (cached per file: reading libc's ~3000 symbols takes a second, and one verb asks several times)."""
    st = os.stat(path)
    return _libc_provides(os.path.realpath(path), st.st_mtime_ns, st.st_size, str(path))


@functools.lru_cache(maxsize=8)
def _libc_provides(real: str, _mtime: int, _size: int, path: str) -> LibcProvides:
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerSymSection  # lazy: pyelftools, 16 ms
    from elftools.elf.sections import SymbolTableSection  # lazy: pyelftools, 16 ms

    defined: dict[int, str] = {}
    private: set[str] = set()
    with open_elf(path) as elf:
        for sec in elf.iter_sections():
            if isinstance(sec, GNUVerDefSection):
                for vd, auxes in sec.iter_versions():
                    first = next(iter(auxes), None)
                    if first is not None:
                        defined[vd["vd_ndx"]] = first.name
        vsym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
        dynsym = next((s for s in elf.iter_sections()
                       if isinstance(s, SymbolTableSection) and s["sh_type"] == "SHT_DYNSYM"), None)
        want = {n for n, v in defined.items() if v == "GLIBC_PRIVATE"}
        if dynsym is not None and vsym is not None and want:
            # .gnu.version is one 16-bit index per symbol: read it raw and parse only the few symbols at
            # GLIBC_PRIVATE (pyelftools parsing all ~3000 of libc's symbols takes a second)
            order = "<" if elf.little_endian else ">"
            raw = vsym.data()
            ndxs = struct.unpack(f"{order}{len(raw) // 2}H", raw[: len(raw) // 2 * 2])
            for i, ndx in enumerate(ndxs):
                if ndx & 0x7FFF in want:
                    sym = dynsym.get_symbol(i)
                    if sym["st_shndx"] != "SHN_UNDEF" and sym.name:
                        private.add(sym.name)
    names = set(defined.values())
    keys = sorted({_glibc_key(v) for v in names} - {()})
    return LibcProvides(str(path), glibc_str(keys[-1]) if keys else None, names, private)


def system_libc(dirs: list[str] | None = None) -> Path | None:
    """This machine's libc.so.6, found where the loader looks (ld.so.conf, then the default dirs)."""
    for d in (dirs if dirs is not None else ld_so_conf_dirs() + list(DEFAULT_DIRS)):
        p = Path(d) / "libc.so.6"
        if p.is_file() and is_elf(p):
            return p
    return None


def unmet_private(needs: LoaderNeeds, libc: LibcProvides) -> list[VersionedRef]:
    """The GLIBC_PRIVATE references `libc` does not export, whatever their binding."""
    return [r for r in needs.private if r.file.startswith("libc.so") and r.name not in libc.private]


def unmet_needs(needs: LoaderNeeds, libc: LibcProvides, *, bind_now: bool = False) -> list[str]:
    """What `libc` does not provide of `needs` that stops the library loading, one line each (empty:
    the loader can load it). A lazily bound reference stops it only under LD_BIND_NOW=1 (bind_now):
    lazy_notes() says what it does otherwise."""
    out = []
    at = f"glibc {libc.glibc}" if libc.glibc else libc.path
    for r in unmet_private(needs, libc):
        if r.fails_at_load(bind_now=bind_now):
            out.append(f"{r} is not exported by {at} ({libc.path})")
    for file, vs in needs.versions.items():
        if not file.startswith("libc.so"):
            continue
        for v in vs:
            if v not in libc.versions:
                out.append(f"version {v} is not defined by {at} ({libc.path})")
    return out


def private_symbol_limits() -> dict[str, dict]:
    """GLIBC_PRIVATE symbols known to have left libc.so.6 (lucepatch/data/glibc.toml): name ->
    {"removed_in": "2.34", "source": ...}."""
    with open(GLIBC_DATA, "rb") as f:
        return dict(tomllib.load(f).get("private") or {})


def lazy_note(r: VersionedRef) -> str:
    """What a lazily bound reference the libc lacks does to a process (no LD_BIND_NOW)."""
    lim = private_symbol_limits().get(r.name) or {}
    called = f" ({lim['called']})" if lim.get("called") else ""
    return (f"{r} is bound lazily (a PLT call): the library loads; a process dies (`symbol lookup error`) "
            f"only if it calls {r.name}{called} or starts with LD_BIND_NOW=1")


def lazy_notes(needs: LoaderNeeds, libc: LibcProvides) -> list[str]:
    """One line per lazily bound reference `libc` lacks: what it does to a process (lazy_note)."""
    return [lazy_note(r) for r in unmet_private(needs, libc) if r.binding == LAZY]


def where_it_cannot_run(needs: LoaderNeeds) -> list[str]:
    """The glibc releases that cannot load a library with these needs, from the data: one line each.
    A lazily bound reference does not stop the load there: the line says when it does."""
    limits = private_symbol_limits()
    out = []
    for r in needs.private:
        lim = limits.get(r.name)
        if lim and r.binding == LOAD:
            out.append(f"{r}: libc.so.6 does not export it since glibc {lim['removed_in']} ({lim['why']}): "
                       f"cannot load on glibc >= {lim['removed_in']} (Debian 12, Ubuntu 22.04 and later)")
        elif lim and r.binding == LAZY:
            out.append(f"{r}: libc.so.6 does not export it since glibc {lim['removed_in']} ({lim['why']}); "
                       f"on glibc >= {lim['removed_in']} it " + lazy_note(r).split(f"{r} ", 1)[1])
        elif lim:
            out.append(f"{r}: libc.so.6 does not export it since glibc {lim['removed_in']}, but no relocation "
                       "uses it: the loader never resolves it")
        else:
            out.append(f"{r}: glibc's internal interface, which changes between glibc releases: "
                       + ("it loads only on a glibc that still exports it" if r.binding == LOAD else
                          "bound lazily, it stops a process only when called or under LD_BIND_NOW=1")
                       + " (check with the target's libc.so.6)")
    return out


# ---------------------------------------------------------------------------------- environment names
ENV_READERS = ("getenv", "secure_getenv")
_ENV_NAME = re.compile(rb"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


@dataclass
class EnvNames:
    getenv: list[str]  # literal arguments of getenv/secure_getenv call sites (x86-64 code decoded)
    rodata: list[str]  # NAME_LIKE strings in .rodata: names a helper may pass on to getenv
    method: str

    @property
    def all(self) -> set[str]:
        return set(self.getenv) | set(self.rodata)

    def to_json(self) -> dict:
        return {"getenv": self.getenv, "rodata": self.rodata, "method": self.method}


def _cstring(blob: bytes, start: int) -> bytes | None:
    end = blob.find(b"\0", start)
    return blob[start:end] if end > start and end - start <= 128 else None


def env_names(path: str | os.PathLike) -> EnvNames:
    """The environment variables a library can read.

    x86-64: every call of getenv/secure_getenv (through its PLT stub, or `call *GOT` with -fno-plt)
    whose first argument is loaded just before as a string address (`lea rdi,[rip+X]`, or gcc -O0's
    `lea rax,[rip+X]; mov rdi,rax`): the string at X. Other machines: only the .rodata strings
    that look like environment names (upper case with an underscore), which is also how names a
    helper passes on to getenv are found on x86-64."""
    from elftools.elf.relocation import RelocationSection  # lazy: pyelftools, 16 ms

    with open_elf(path) as elf:
        machine = elf["e_machine"]
        secs = {s.name: s for s in elf.iter_sections()}
        ro = [(s["sh_addr"], s.data()) for s in elf.iter_sections()
              if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & 0x2 and not s["sh_flags"] & 0x5]  # ALLOC, not W/X
        rodata = sorted({m.group(0).decode() for _, data in ro if data for m in _ENV_NAME.finditer(data)
                         if (m.start() == 0 or data[m.start() - 1] == 0) and data[m.end():m.end() + 1] == b"\0"})
        if machine != "EM_X86_64":
            return EnvNames([], rodata, "upper-case names in read-only data (call sites not decoded on this machine)")
        slots: set[int] = set()
        for sec in elf.iter_sections():
            if not isinstance(sec, RelocationSection) or sec["sh_link"] == 0:
                continue
            symtab = elf.get_section(sec["sh_link"])
            for rel in sec.iter_relocations():
                sym = symtab.get_symbol(rel["r_info_sym"]) if rel["r_info_sym"] else None
                if sym is not None and sym.name in ENV_READERS:
                    slots.add(rel["r_offset"])
        stubs: set[int] = set()
        for name in (".plt", ".plt.sec", ".plt.got"):
            s = secs.get(name)
            if s is None:
                continue
            base, data = s["sh_addr"], s.data()
            for i in range(0, len(data) - 5):
                if data[i] == 0xFF and data[i + 1] == 0x25:  # jmp *rel32(%rip)
                    target = base + i + 6 + struct.unpack_from("<i", data, i + 2)[0]
                    if target in slots:
                        entry = (i // 16) * 16
                        stubs.add(base + entry)
        found: set[str] = set()
        text = secs.get(".text")
        if text is not None and (stubs or slots):
            base, code = text["sh_addr"], text.data()
            for i in range(len(code) - 6):
                b = code[i]
                if b == 0xE8:
                    hit = base + i + 5 + struct.unpack_from("<i", code, i + 1)[0] in stubs
                elif b == 0xFF and code[i + 1] == 0x15:
                    hit = base + i + 6 + struct.unpack_from("<i", code, i + 2)[0] in slots
                else:
                    continue
                if not hit:
                    continue
                addr = _string_argument(code, base, i)
                if addr is None:
                    continue
                for rbase, rdata in ro:
                    if rbase <= addr < rbase + len(rdata):
                        s = _cstring(rdata, addr - rbase)
                        if s and re.fullmatch(rb"[A-Za-z_][A-Za-z0-9_]*", s):
                            found.add(s.decode())
                        break
    return EnvNames(sorted(found), rodata, "getenv/secure_getenv call sites decoded (x86-64) and upper-case names "
                                           "in read-only data")


def _string_argument(code: bytes, base: int, call: int) -> int | None:
    """The string address loaded into rdi shortly before the call at `call`, or None: the nearest
    `lea rdi,[rip+X]` ending at most 24 bytes before it (optimised code schedules other
    instructions in between), or gcc -O0's `lea rax,[rip+X]; mov rdi,rax` right before it."""
    for back in range(7, 25):
        i = call - back
        if i < 0:
            break
        if code[i] == 0x48 and code[i + 1] == 0x8D and code[i + 2] == 0x3D:  # lea rdi,[rip+X]
            return base + i + 7 + struct.unpack_from("<i", code, i + 3)[0]
        if (back == 10 and code[i] == 0x48 and code[i + 1] == 0x8D and code[i + 2] == 0x05
                and code[i + 7:i + 10] == b"\x48\x89\xc7"):  # lea rax,[rip+X]; mov rdi,rax; call
            return base + i + 7 + struct.unpack_from("<i", code, i + 3)[0]
    return None
