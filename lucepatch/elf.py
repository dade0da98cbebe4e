"""ELF reads with pyelftools: dynamic section, GPU code in fatbins, and the shared-library closure.

dynamic()        NEEDED / RUNPATH / RPATH / SONAME / class / machine of one file
gpu_code()       SASS and PTX per embedded fatbin (one fatbin = one translation unit's device code)
resolve_closure  every NEEDED of every object reachable from the roots, resolved the way glibc's
                 loader does (breadth first, RPATH/LD_LIBRARY_PATH/RUNPATH/ld.so.conf/default dirs,
                 $ORIGIN, class and machine must match, an already loaded SONAME satisfies a NEEDED)

Why not `ld.so --list`: it stops at the first library it cannot open (glibc 2.36: "error while
loading shared libraries"), so a binary whose driver library is absent on a build machine never
shows what comes after it in load order — a missing libggml-base.so would go unseen.
"""

from __future__ import annotations

import glob
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


@dataclass
class Dynamic:
    needed: list[str] = field(default_factory=list)
    runpath: str = ""
    rpath: str = ""
    soname: str = ""
    elfclass: int = 0
    machine: str = ""
    nodeflib: bool = False

    def to_json(self) -> dict:
        return {"needed": self.needed, "runpath": self.runpath or self.rpath, "soname": self.soname}


def dynamic(path: Path) -> Dynamic:
    """The dynamic section of an ELF file (empty lists for a static or relocatable file)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        d = Dynamic(elfclass=elf.elfclass, machine=elf["e_machine"])
        for sec in elf.iter_sections():
            if not isinstance(sec, DynamicSection):
                continue
            for tag in sec.iter_tags():
                t = tag.entry.d_tag
                if t == "DT_NEEDED":
                    d.needed.append(tag.needed)
                elif t == "DT_RUNPATH":
                    d.runpath = tag.runpath
                elif t == "DT_RPATH":
                    d.rpath = tag.rpath
                elif t == "DT_SONAME":
                    d.soname = tag.soname
                elif t == "DT_FLAGS_1" and tag.entry.d_val & 0x800:  # DF_1_NODEFLIB
                    d.nodeflib = True
        return d


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
    with open(path, "rb") as f:
        try:
            elf = ELFFile(f)
            for sec in elf.iter_sections():
                if sec.name in FATBIN_SECTIONS and sec["sh_type"] != "SHT_NOBITS":
                    _parse_fatbins(sec.data(), code)
        except (ELFError, struct.error, IndexError, ValueError, EOFError) as exc:
            raise ValueError(f"not an ELF file, or a truncated one: {exc or type(exc).__name__}")
    return code


def defined_symbols(path: Path, pattern: str) -> list[str]:
    """Names of the symbols (dynamic and static tables) matching `pattern` (regex)."""
    rx = re.compile(pattern)
    out: set[str] = set()
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            if sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                for sym in sec.iter_symbols():
                    if sym.name and rx.search(sym.name):
                        out.add(sym.name)
    return sorted(out)


def undefined_symbols(path: Path, pattern: str = "") -> list[str]:
    rx = re.compile(pattern or ".")
    out: set[str] = set()
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            if sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                for sym in sec.iter_symbols():
                    if sym.name and sym["st_shndx"] == "SHN_UNDEF" and rx.search(sym.name):
                        out.add(sym.name)
    return sorted(out)


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
        return bool(self.objects) and not self.missing

    def lines(self) -> list[str]:
        return [f"{n} => not found (needed by {Path(o).name})" for o, names in self.missing.items() for n in names]

    def to_json(self) -> dict:
        return {"roots": self.roots, "objects": len(self.objects), "ok": self.ok,
                "needed_names": sorted({n for names in self.needed.values() for n in names}),
                "allowed_missing": self.allowed_missing, "absent_allowed": self.absent_allowed,
                "missing": self.missing}


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
            except (ELFError, OSError, ValueError):
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
        if not me.runpath:
            cur: str | None = requester
            while cur:
                d = info[cur]
                if d.rpath and not d.runpath:
                    dirs += _split(d.rpath, os.path.dirname(cur))
                cur = loader_of.get(cur)
        dirs += [e for e in ld_library_path.split(":") if e]
        if me.runpath:
            dirs += _split(me.runpath, os.path.dirname(requester))
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
    return cl
