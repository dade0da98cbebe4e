"""A content-addressed object cache for native builds (issue 36): compiled objects are reused
across the variants of one upstream, because a patch touches 1-3 of HAMi-core's ~20 translation
units and retirement builds dozens of variants.

CMake runs this file as the compiler launcher (`CMAKE_C_COMPILER_LAUNCHER`, set by
builders/native.py on the command it runs, never in the recorded recipe): `python3 -S -E
objcache.py <compiler> <args...>`. For a compile (`-c ... -o OBJ`) it preprocesses with the same
arguments (`-E`; the dependency file CMake asks for with -MD/-MF is written by that step, as the
compile would write it) and keys the object by:

  the compiler (its --version and the binary's path, size and mtime), every argument except the
  output and dependency-file names, the working directory, SOURCE_DATE_EPOCH, and the preprocessed
  text — the paths in the arguments, the working directory and the text rewritten by the build's
  own `-f{file,debug,macro}-prefix-map=OLD=NEW` maps.

The maps are why reuse is sound across work areas: lucepatch's builds happen in private folders
with random names, and builders/reproducible.py maps those folders to `src` and `build`, so the
compiler writes the same bytes for the same mapped input wherever it runs (the reproducible-build
contract, docs/design.md "Contracts"); the key is the input as the compiler sees it after mapping.
A hit copies the stored object; a miss compiles with the original arguments and stores the result.
Anything this cannot key — no `-c`/`-o`, coverage (`--coverage`/`-fprofile-*`: the object names
its .gcda path), a failing preprocessor — runs the compiler untouched. Objects are stored by an
atomic rename, so concurrent builds only ever read whole files.

Standalone on purpose (the standard library only, nothing of lucepatch): it runs once per compiled
file, and `-S -E` keeps that start at ~15 ms. `LUCEPATCH_OBJECT_CACHE=off` in the environment of
lucepatch turns it off (builders/native.py); bench/retire.py measures it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

DIR_ENV = "LP_OBJCACHE_DIR"  # where the objects are (set by builders/native.py for its build only)
LOG_ENV = "LP_OBJCACHE_LOG"  # append `hit|miss|bypass <source>` per compile (the build counts them)
SWITCH_ENV = "LUCEPATCH_OBJECT_CACHE"  # "off": builds run the compiler directly
VERSION = "1"  # part of every key: objects stored by an older layout are never read

_MAPS = ("-ffile-prefix-map=", "-fdebug-prefix-map=", "-fmacro-prefix-map=")
_NO_CACHE = ("--coverage", "-fprofile-arcs", "-ftest-coverage", "-fprofile-generate", "-fprofile-use",
             "-fauto-profile", "-save-temps", "-gsplit-dwarf")
_DEP_WITH_VALUE = ("-MF", "-MT", "-MQ")
_DEP_FLAGS = ("-MD", "-MMD", "-MP")


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "on").lower() not in ("off", "0", "no", "false")


def launcher() -> list[str]:
    """The launcher command (CMake's `;`-list of a program and its arguments)."""
    return [sys.executable, "-S", "-E", os.path.abspath(__file__)]


def configure_args() -> list[str]:
    """What builders/native.py adds to the cmake configure command it runs (not to the recipe)."""
    cmd = ";".join(launcher())
    return [f"-DCMAKE_C_COMPILER_LAUNCHER={cmd}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={cmd}"]


def count(log_path) -> dict[str, int]:
    """{hit, miss, bypass: n} from a build's log of this launcher."""
    out = {"hit": 0, "miss": 0, "bypass": 0}
    try:
        with open(log_path) as f:
            for line in f:
                word = line.split(" ", 1)[0]
                if word in out:
                    out[word] += 1
    except OSError:
        pass
    return out


# ---- the launcher ---------------------------------------------------------------------------


def _maps(args: list[str]) -> list[tuple[str, str]]:
    out = []
    for a in args:
        for prefix in _MAPS:
            if a.startswith(prefix) and "=" in a[len(prefix):]:
                old, new = a[len(prefix):].split("=", 1)  # GCC splits at the first '=' too
                out.append((old, new))
    # longest first: a build folder inside the source folder maps as the compiler maps it (the
    # most specific map wins; builders/reproducible.py orders them for GCC the same way)
    return sorted(set(out), key=lambda m: len(m[0]), reverse=True)


def _mapped(text: str, maps: list[tuple[str, str]]) -> str:
    for old, new in maps:
        text = text.replace(old, new)
    return text


def _split(args: list[str]) -> tuple[str | None, list[str], list[str]]:
    """(output object, the arguments that decide the object, the arguments of the preprocessing
    step: -c dropped, -o replaced later, the dependency-file arguments kept)."""
    out, keyed, pre = None, [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-o" and i + 1 < len(args):
            out = args[i + 1]
            i += 2
            continue
        if a in _DEP_WITH_VALUE and i + 1 < len(args):
            pre += [a, args[i + 1]]
            i += 2
            continue
        if a in _DEP_FLAGS:
            pre.append(a)
            i += 1
            continue
        keyed.append(a)
        if a != "-c":
            pre.append(a)
        i += 1
    return out, keyed, pre


def _identity(compiler: str, store: str) -> str:
    path = shutil.which(compiler) or compiler
    real = os.path.realpath(path)
    st = os.stat(real)
    stamp = hashlib.sha256(f"{real}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:24]
    memo = os.path.join(store, "compilers", stamp)
    try:
        with open(memo) as f:
            return f.read()
    except OSError:
        pass
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    ident = f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{version}"
    _store_bytes(memo, ident.encode())
    return ident


def _store_bytes(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _copy_into(src: str, dst: str) -> None:
    """`dst` gets `src`'s bytes by an atomic rename (a reader never sees half a file)."""
    d = os.path.dirname(os.path.abspath(dst))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".lp-obj-")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _log(what: str, source: str) -> None:
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(f"{what} {source}\n")


def _source_of(keyed: list[str]) -> str:
    return next((a for a in reversed(keyed) if not a.startswith("-")), "?")


def run(argv: list[str]) -> int:
    """Compile `argv` (compiler and arguments) through the cache; returns the exit status."""
    compiler, args = argv[0], argv[1:]
    store = os.environ.get(DIR_ENV)
    out, keyed, pre = _split(args)
    if not store or out is None or "-c" not in args or any(a.startswith(_NO_CACHE) for a in args):
        _log("bypass", _source_of(keyed))
        return subprocess.run(argv).returncode
    maps = _maps(args)
    with tempfile.TemporaryDirectory(prefix="lp-objcache-") as tmp:
        ipath = os.path.join(tmp, "pre.i")
        p = subprocess.run([compiler, *pre, "-E", "-o", ipath], capture_output=True)
        if p.returncode != 0:
            _log("bypass", _source_of(keyed))  # the compiler itself reports the error
            return subprocess.run(argv).returncode
        h = hashlib.sha256()
        for part in (VERSION, _identity(compiler, store), "\0".join(_mapped(a, maps) for a in keyed),
                     _mapped(os.getcwd(), maps), os.environ.get("SOURCE_DATE_EPOCH", "")):
            h.update(part.encode(errors="surrogateescape"))
            h.update(b"\0\0")
        with open(ipath, "rb") as f:
            text = f.read()
        for old, new in maps:
            text = text.replace(old.encode(errors="surrogateescape"), new.encode(errors="surrogateescape"))
        h.update(text)
        key = h.hexdigest()
    obj = os.path.join(store, "objects", key[:2], key[2:] + ".o")
    if os.path.isfile(obj):
        _copy_into(obj, out)
        _log("hit", _source_of(keyed))
        return 0
    rc = subprocess.run(argv).returncode
    if rc == 0 and os.path.isfile(out):
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        _copy_into(out, obj)
        _log("miss", _source_of(keyed))
    return rc


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
