"""A stand-in for the glibc-private functions a library under test binds lazily and this machine's glibc
no longer exports, for the runs that bind every symbol at start.

The C reproducers run with LD_BIND_NOW=1 (their stack poisoning needs every symbol bound before the
hooks run). A library such as the beclab fork of libvgpu.so, which calls _dl_sym@GLIBC_PRIVATE through
its PLT only where dlvsym failed, then dies at start on glibc >= 2.34 ("symbol lookup error"), though a
pod's process - bound lazily - loads it and runs. Without a stand-in the node's own library cannot be
measured black-box by those reproducers at all.

The shim defines each such function at its version (glibc's loader accepts a versioned definition from
any object in the global scope) and is preloaded after the library and the reporter, so the reference
resolves at start as it would not in a pod only because a pod never resolves it. A call to it is what
would kill a pod's process: the shim prints the loader's own line, marked, and exits 127, so the run is
classified as the pod would have fared (`cannot load: ... (called)`). Each run's preload list (the
reporter's) shows the shim; verify says so when it uses one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.native import compiling, elf

MARK = "lucepatch-bind-shim"
SONAME = "liblp_bindshim.so"


def lazy_unmet(lib: Path) -> list[elf.VersionedRef]:
    """The GLIBC_PRIVATE references `lib` binds lazily and this machine's libc.so.6 does not export."""
    libc = elf.system_libc()
    if libc is None or not elf.is_elf(lib):
        return []
    try:
        needs = elf.loader_needs(lib)
    except UsageError:  # an ELF the loader will refuse anyway: the runs say so in the loader's words
        return []
    return [r for r in elf.unmet_private(needs, elf.libc_provides(libc)) if r.binding == elf.LAZY]


def _source(lib_name: str, refs: list[elf.VersionedRef]) -> tuple[str, str]:
    body = ["#include <stdio.h>", "#include <string.h>", "#include <unistd.h>",
            "static void lp_called(const char *name, const char *ver) {",
            "    char buf[512];",
            f'    int n = snprintf(buf, sizeof buf, "{MARK}: symbol lookup error: %s: undefined symbol: %s, '
            f'version %s (called)\\n", "{lib_name}", name, ver);',
            "    if (n > 0) { ssize_t w = write(2, buf, (size_t)n); (void)w; }",
            "    _exit(127);",
            "}"]
    for r in refs:
        body.append(f'void *{r.name}(void) {{ lp_called("{r.name}", "{r.version}"); return 0; }}')
    versions: dict[str, list[str]] = {}
    for r in refs:
        versions.setdefault(r.version, []).append(r.name)
    script = "".join(f"{v} {{ global: {'; '.join(ns)}; local: *; }};\n" for v, ns in versions.items())
    return "\n".join(body) + "\n", script


def build(cache: Path, lib: Path, refs: list[elf.VersionedRef]) -> Path:
    """The shim for `lib`'s lazily bound `refs`, built once per (library name, references) into the cache."""
    src, script = _source(lib.name, refs)
    key = hashlib.sha256((src + script).encode()).hexdigest()[:20]
    d = Path(cache) / "bindshim-src" / key
    d.mkdir(parents=True, exist_ok=True)
    (d / "bindshim.c").write_text(src)
    (d / "bindshim.map").write_text(script)
    cc = compiling.cc()
    unit = compiling.Unit(
        what=f"the bind shim for {lib.name} ({', '.join(str(r) for r in refs)})",
        steps=[[cc, "-shared", "-fPIC", "-O1", f"-Wl,--version-script={d / 'bindshim.map'}",
                f"-Wl,-soname,{SONAME}", "-o", f"{{out}}/{SONAME}", str(d / "bindshim.c")]],
        outputs=[SONAME], inputs=[d / "bindshim.c", d / "bindshim.map"])
    return compiling.build_cached(unit, Path(cache) / "bindshim", compiler=cc) / SONAME


def for_library(cache: Path, lib: Path | None) -> tuple[Path | None, list[elf.VersionedRef]]:
    """(the shim, the references it stands in for) when `lib` needs one here, else (None, [])."""
    if lib is None:
        return None, []
    refs = lazy_unmet(Path(lib))
    return (build(cache, Path(lib), refs), refs) if refs else (None, [])
