"""Compiling small C programs and libraries into the cache: the one helper for the simulated
driver, the trace interposer, the reproducers and the probe stand-ins.

An output is keyed by everything that decides its bytes — the sources, the flags, the compiler's
version line and the headers it includes from outside the project (cuda.h, nvml.h) — and built in
a private temporary folder (pid + thread + random suffix, so two concurrent builds never share a
path), then renamed into place; a half-built folder is never visible under the final name.
Compiler failures are one-line `ToolFailed` errors naming the compiler's first error line.

The bytes do not depend on where things are: every folder a compile step names (its `-I` folders,
its sources' folders, the output folder, which is also the compiler's working directory) is mapped
with `-ffile-prefix-map` to a name fixed by its place in the command (`inc0`, `src0`, `out`), so the
same command from another venv, prefix or cache gives the same sha256 (the debug info, `__FILE__`
and DW_AT_comp_dir would name them otherwise).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from lucepatch import children
from lucepatch.errors import CheckFailed, ToolFailed
from lucepatch.files import sha256_file
from lucepatch.native import toolchain

CC_REMEDY = "install a C compiler (apt-get install gcc)"


def cc() -> str:
    """The C compiler (`$CC`, else cc, else gcc), or EnvironmentMissing with the fix."""
    env_cc = os.environ.get("CC")
    if env_cc and shutil.which(env_cc):
        return shutil.which(env_cc)
    if shutil.which("cc"):
        return shutil.which("cc")
    return toolchain.require("gcc", CC_REMEDY)


def cxx() -> str:
    """The C++ compiler (`$CXX`, else c++, else g++), or EnvironmentMissing with the fix."""
    env_cxx = os.environ.get("CXX")
    if env_cxx and shutil.which(env_cxx):
        return shutil.which(env_cxx)
    if shutil.which("c++"):
        return shutil.which("c++")
    return toolchain.require("g++", "install a C++ compiler (apt-get install g++)")


@dataclass
class Unit:
    """One thing to build: `steps` are argument lists in which `{out}` is the output folder.

    `inputs` are files whose bytes go into the key; `key_extra` anything else that changes the
    result (flags are part of the steps already). `outputs` must exist after the steps ran.
    `user_error`: a compile failure is the input's fault (a reproducer that does not compile:
    exit 1), not the environment's (exit 3)."""

    what: str
    steps: list[list[str]]
    outputs: list[str]
    inputs: Sequence[Path] = ()
    key_extra: Sequence[str] = ()
    headers: Sequence[Path] = ()
    links: dict[str, str] = field(default_factory=dict)  # symlink name -> target, made in {out}
    user_error: bool = False

    def key(self, compiler: str) -> str:
        h = hashlib.sha256()
        h.update(b"lucepatch-compile-v1\0" + self.what.encode() + b"\0")
        h.update(toolchain.version_line(compiler).encode() + b"\0")
        for step in self.steps:
            h.update("\x1f".join(step).encode() + b"\0")
        for p in self.inputs:
            h.update(str(Path(p).name).encode() + b"\0" + Path(p).read_bytes() + b"\0")
        for p in self.headers:
            h.update(sha256_file(Path(p)).encode() + b"\0")
        for k in self.key_extra:
            h.update(str(k).encode() + b"\0")
        for name, dest in sorted(self.links.items()):
            h.update(f"{name}->{dest}".encode() + b"\0")
        return h.hexdigest()[:20]


def build_cached(unit: Unit, cache_dir: Path, *, compiler: str | None = None) -> Path:
    """The folder under `cache_dir` holding `unit.outputs`, built once per key."""
    compiler = compiler or cc()
    final = Path(cache_dir) / unit.key(compiler)
    if all((final / o).exists() for o in unit.outputs):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.{os.getpid()}-{threading.get_ident()}-",
                                dir=final.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; outputs are shared with containers and other users
    # the compiler's own temporary files (cc1's .s, collect2's) go here too, not to $TMPDIR: a build
    # killed on Ctrl-C cannot remove them itself, the `finally` below does
    cc_tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.cc-", dir=final.parent))
    try:
        for step in unit.steps:
            cmd = [a.replace("{out}", str(tmp)) for a in step]
            maps = prefix_maps(cmd, tmp)
            run_compiler([cmd[0], *maps, *cmd[1:]] if maps else cmd, unit.what, user_error=unit.user_error,
                         tmpdir=cc_tmp, cwd=tmp if maps else None)
        for name, dest in unit.links.items():
            os.symlink(dest, tmp / name)
        missing = [o for o in unit.outputs if not (tmp / o).exists()]
        if missing:
            raise CheckFailed(f"building {unit.what} produced no {', '.join(missing)}")
        try:
            os.rename(tmp, final)
        except OSError:
            # a concurrent build of the same key won the race; its result is identical
            if not all((final / o).exists() for o in unit.outputs):
                raise
    finally:
        shutil.rmtree(cc_tmp, ignore_errors=True)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


_SOURCES = (".c", ".cc", ".cpp", ".cxx", ".C")


def prefix_maps(cmd: list[str], out: Path) -> list[str]:
    """`-ffile-prefix-map` options for a compile step (one naming a source file; a link of objects,
    `mkdir` and the like get none): each `-I` folder -> `incN`, each source's folder -> `srcN`, in
    command order, and `out` (the output folder, run as the working directory) -> `out`. GCC tries
    the last map first, so a folder nested in another comes after it, whatever the paths' lengths."""
    if not any(a.endswith(_SOURCES) and not a.startswith("-") for a in cmd[1:]):
        return []
    folders: list[tuple[str, str]] = []
    for a in cmd[1:]:
        if a.startswith("-I") and len(a) > 2:
            folders.append(("inc", os.path.normpath(a[2:])))
        elif a.endswith(_SOURCES) and not a.startswith("-"):
            folders.append(("src", os.path.normpath(os.path.dirname(os.path.abspath(a)))))
    named: dict[str, str] = {}
    count = {"inc": 0, "src": 0}
    for kind, d in folders:
        if d not in named and d != "/":
            named[d] = f"{kind}{count[kind]}"
            count[kind] += 1
    named[os.path.normpath(str(out))] = "out"
    order = sorted(named, key=lambda d: sum(1 for o in named if o != d and Path(d).is_relative_to(o)))
    return [f"-ffile-prefix-map={d}={named[d]}" for d in order]


def run_compiler(cmd: list[str], what: str, *, user_error: bool = False, tmpdir: Path | None = None,
                 cwd: Path | None = None) -> None:
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir is not None else None
    try:
        r = children.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    except FileNotFoundError:
        raise ToolFailed(command=Path(cmd[0]).name, fix=CC_REMEDY, stderr=f"{cmd[0]} not found")
    if r.returncode != 0:
        first = next((l.strip() for l in r.stderr.splitlines() if "error" in l), "")
        if user_error:
            raise CheckFailed(f"{what} does not compile: {first or r.stderr.strip()[:200]}")
        raise ToolFailed(command=f"{Path(cmd[0]).name} ({what})", status=r.returncode, stderr=first or r.stderr,
                         fix="check the compiler and the CUDA headers (lucepatch doctor)")
