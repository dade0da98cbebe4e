"""Libraries the tests build themselves: small C shared objects with the exported names of a real
HAMi-core build (the names of a line's own build, lucepatch/data/line_builds.toml), a vendor's
extra names (a scheduler client, a websocket client, an event loop, hooks under CUDA 12 entry-point
names), getenv() of the vendor's variables, and a versioned `_dl_sym@GLIBC_PRIVATE` need.

Names only: every function returns a constant; `shrreg_major/minor_version` return the region
version as HAMi-core's do (an immediate before ret). No upstream code is compiled.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from lucepatch.lines.fit import compat_data
from lucepatch.lines.identity import line_builds

# What the beclab v2.5.4 library adds, a few of each group (the real library has 138)
FORK_EXTRAS = ["olares_initialize_client", "olares_continue_with_lock", "get_gpu_mode", "set_gpu_mode", "gpu_modes",
               "need_connect_websocket", "uwsc_new", "uwsc_send_ex", "buffer_init", "tcp_connect", "ev_run",
               "ev_default_loop", "event_base_new", "log_write"]
# the same hooks the line exports as _v2/_v4 (cuda.h 13.0), under the names CUDA 12 headers give them
CUDA12_NAMES = {"cuMemAdvise": "cuMemAdvise_v2", "cuMemPrefetchAsync": "cuMemPrefetchAsync_v2",
                "cuDeviceGetUuid": "cuDeviceGetUuid_v2", "cuGraphAddDependencies": "cuGraphAddDependencies_v2"}
FORK_ENV = ["SCHEDULER_WEBSOCKET_URL", "KUBERNETES_SERVICE_HOST", "LIBEV_FLAGS"]


def _run(cmd, cwd=None):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed: {r.stderr[-800:]}")


def line_names(line: str = "hami-core", *, with_adds: bool = False) -> list[str]:
    """The names of `line`'s own build, or (with_adds False) of its baseline: the base, unpatched."""
    b = line_builds()[line]
    names = b.exports if with_adds else b.base_names(b.exports)
    return sorted(n for n in names if n not in ("shrreg_major_version", "shrreg_minor_version"))


# How a library references _dl_sym@GLIBC_PRIVATE (dl_sym=):
# - "lazy" (True): a PLT call in a fallback, as HAMi-core's dlsym hook has it (upstream 54b1305 and the
#   beclab v2.5.4 library call _dl_sym only when dlvsym fails): the loader resolves it at the first call,
#   so the library loads on glibc >= 2.34 unless the process binds at start (LD_BIND_NOW=1, RTLD_NOW);
# - "load": its address taken (a GOT entry), resolved when the library loads: it cannot load there.
DL_SYM_SRC = {
    "lazy": "\nextern void *_dl_sym(void *, const char *, void *);\n"
            "__attribute__((used)) static void *lp_dlsym_fallback(void *h, const char *n) { return _dl_sym(h, n, 0); }\n",
    "load": "\nextern void *_dl_sym(void *, const char *, void *);\n"
            "__attribute__((used)) static void *lp_dl_sym_ref = (void *)&_dl_sym;\n",
}


def _dl_sym_kind(dl_sym) -> str | None:
    return None if not dl_sym else "lazy" if dl_sym is True else dl_sym


def source(names, *, minor: int, env: list[str] = (), dl_sym: bool | str = False, extra: str = "") -> str:
    body = [f"int {n}(void) {{ return 0; }}" for n in names if n not in ("shrreg_major_version", "shrreg_minor_version")]
    env_reads = "".join(f'    if (getenv("{e}")) n++;\n' for e in env)
    return textwrap.dedent("""\
        #include <stdlib.h>
        int shrreg_major_version(void) { return 1; }
        int shrreg_minor_version(void) { return %d; }
        """) % minor + "\n".join(body) + (
        "\n__attribute__((used)) static int lp_env_reader(void) {\n    int n = 0;\n" + env_reads + "    return n;\n}\n" if env else "") + (
        DL_SYM_SRC[_dl_sym_kind(dl_sym)] if dl_sym else "") + extra + "\n"


def glibc_private_stub(tmp: Path) -> Path:
    """A stand-in libc.so.6 whose only job is to give the link versioned references: _dl_sym at
    GLIBC_PRIVATE (as glibc < 2.34 exported it) and getenv at GLIBC_2.2.5."""
    d = tmp / "libc-stub"
    d.mkdir(exist_ok=True)
    (d / "stub.c").write_text("void *_dl_sym(void *h, const char *n, void *w) { return 0; }\n"
                              "char *getenv(const char *n) { return 0; }\n")
    (d / "stub.map").write_text("GLIBC_2.2.5 { global: getenv; };\nGLIBC_PRIVATE { global: _dl_sym; } GLIBC_2.2.5;\n")
    out = d / "libc.so.6"
    _run(["gcc", "-shared", "-fPIC", "-nostdlib", "-Wl,-soname,libc.so.6", f"-Wl,--version-script={d / 'stub.map'}",
          "-o", out, d / "stub.c"])
    return out


def build(tmp: Path, name: str, names, *, minor: int = 2, env: list[str] = (), dl_sym: bool | str = False,
          flags=(), extra: str = "") -> Path:
    c = tmp / f"{name}.c"
    c.write_text(source(names, minor=minor, env=env, dl_sym=dl_sym, extra=extra))
    out = tmp / f"{name}.so"
    cmd = ["gcc", "-shared", "-fPIC", "-O0", *flags, "-Wl,-soname,libvgpu.so", "-o", out, c]
    if dl_sym:  # link against the stub only, so the references carry its versions
        stub = glibc_private_stub(tmp)
        cmd = ["gcc", "-shared", "-fPIC", "-O0", *flags, "-nostdlib", "-Wl,-soname,libvgpu.so", "-o", out, c, stub]
    _run(cmd)
    return out


def _region_minor(line: str) -> int:
    """The shared-region MINOR of `line`'s base (lucepatch/data/compatible_hami.toml [series.<line>])."""
    return int(compat_data()["series"][line]["shrreg"].split(".")[1])


def upstream_like(tmp: Path, name: str, line: str = "hami-core", **kw) -> Path:
    """The exported names of `line`'s base, unpatched (what an upstream build at that base exports)."""
    return build(tmp, name, line_names(line), minor=kw.pop("minor", _region_minor(line)), **kw)


def line_build_like(tmp: Path, name: str, line: str = "hami-core", **kw) -> Path:
    return build(tmp, name, line_names(line, with_adds=True), minor=kw.pop("minor", _region_minor(line)), **kw)


def fork_like(tmp: Path, name: str, line: str = "hami-core-v2.5", *, dl_sym: bool | str = True, renamed: bool = True,
              **kw) -> Path:
    """The line base's names with the vendor's extras, CUDA 12 hook names and the vendor's variables."""
    names = set(line_names(line))
    if renamed:
        for old, new in CUDA12_NAMES.items():
            names.discard(new)
            names.add(old)
    names |= set(FORK_EXTRAS)
    return build(tmp, name, sorted(names), minor=kw.pop("minor", 1), env=kw.pop("env", FORK_ENV), dl_sym=dl_sym, **kw)
