"""Make the LUCEPATCH_GGML_DIR the ggml-client workload needs (lib/ + include/) from a Lucebox build.

    python3 tools/ggml_dir.py OUTDIR [--arch 90] [--include DIR] [SUMMARY.json ...]
    python3 tools/ggml_dir.py OUTDIR [--arch 90] --build-dir DIR --include DIR

Looks at the build summaries given (bench/probe.py --measure-full's document, `build lucebox
--summary`'s, or a superbuild's manifest.json), then at every cached superbuild manifest under
/tmp/lp-bench-full-*/ and $LUCEPATCH_CACHE (a warm GPU machine keeps them between calls), newest
first, and takes the first patched, successful build whose libggml-cuda carries code the GPU can
run: SASS for sm_<arch>, or PTX of an arch <= <arch> (JIT). The SASS is read from the library
itself (lucepatch.native.elf), not from the summary. include/ is the build's own applied tree
(source_root, kept with --keep-build) or --include.

--build-dir: a native build folder instead (tools/lucebox_native_build.py, as the lucebox-today step leaves it
at /tmp/lucebox-vendored/build): every libggml*.so* under it, linked by name into OUTDIR/lib (a folder).

Writes OUTDIR/lib and OUTDIR/include (symlinks) and OUTDIR/ggml-dir.json (which build: key,
sha256 and SASS of libggml-cuda); prints OUTDIR. Exit 3 with one line when no build fits (e.g. a
sm_120-only build on an H200: rebuild with `--cuda-archs '120;90'`).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.files import sha256_file  # noqa: E402
from lucepatch.native import elf  # noqa: E402

GGML_INCLUDE = Path("server/deps/llama.cpp/ggml/include")


def _builds(doc: dict) -> list[dict]:
    return doc["builds"] if isinstance(doc.get("builds"), list) else [doc]


def _num(s: str) -> int:
    return int(re.sub(r"\D", "", s) or 0)


def candidates(explicit: list[str]) -> list[tuple[str, dict]]:
    found = [p for p in explicit if Path(p).is_file()]
    cache = os.environ.get("LUCEPATCH_CACHE", "")
    pattern = ["/tmp/lp-bench-full-*/superbuilds/*/manifest.json"] + ([f"{cache}/superbuilds/*/manifest.json"] if cache else [])
    cached = sorted({p for g in pattern for p in glob.glob(g)}, key=lambda p: os.path.getmtime(p), reverse=True)
    out = []
    for p in found + cached:
        try:
            doc = json.loads(Path(p).read_text())
        except (OSError, ValueError):
            continue
        out += [(p, b) for b in _builds(doc)]
    return out


def usable(build: dict, arch: int | None) -> tuple[Path | None, dict, str]:
    """(lib folder, facts, why not) for one build document."""
    if not build.get("ok") or build.get("variant", "patched") != "patched" or not build.get("out"):
        return None, {}, "not a successful patched build"
    lib = Path(build["out"]) / "app" / "lib"
    cuda = sorted(p for p in lib.glob("libggml-cuda.so*") if p.is_file() and not p.is_symlink())
    if not (lib / "libggml.so").exists() or not cuda:
        return None, {}, f"{lib} has no libggml.so / libggml-cuda.so (gone from this machine?)"
    code = elf.gpu_code(cuda[0])
    facts = {"key": build.get("key"), "profile": build.get("profile"), "lib": str(lib),
             "libggml_cuda": {"path": cuda[0].name, "sha256": sha256_file(cuda[0]), "sass": code.sass, "ptx": code.ptx},
             "cmake_args": (build.get("plan") or {}).get("cmake_args")}
    if arch is not None and f"sm_{arch}" not in code.sass and not any(_num(p) <= arch for p in code.ptx):
        return None, facts, (f"{cuda[0].name} has SASS {', '.join(code.sass) or 'none'} and PTX "
                             f"{', '.join(code.ptx) or 'none'}: nothing sm_{arch} can run")
    return lib, facts, ""


def from_build_dir(build_dir: Path, arch: int | None) -> tuple[list[Path], dict, str]:
    """(the ggml libraries of a native build folder, facts, why not)."""
    libs = sorted(p for p in build_dir.rglob("libggml*.so*") if "CMakeFiles" not in p.parts)
    cuda = [p for p in libs if p.name.startswith("libggml-cuda.so") and p.is_file() and not p.is_symlink()]
    if not cuda or not any(p.name == "libggml.so" for p in libs):
        return [], {}, f"{build_dir} has no libggml.so / libggml-cuda.so"
    code = elf.gpu_code(cuda[0])
    facts = {"build_dir": str(build_dir), "libggml_cuda": {"path": str(cuda[0].relative_to(build_dir)),
             "sha256": sha256_file(cuda[0]), "sass": code.sass, "ptx": code.ptx}}
    if arch is not None and f"sm_{arch}" not in code.sass and not any(_num(p) <= arch for p in code.ptx):
        return [], facts, f"{cuda[0].name} has SASS {', '.join(code.sass) or 'none'}: nothing sm_{arch} can run"
    return libs, facts, ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("summaries", nargs="*")
    ap.add_argument("--arch", type=int, default=None, help="the GPU's compute capability as a number (H200: 90)")
    ap.add_argument("--include", default=None, help="ggml's include/ when the build kept no source tree")
    ap.add_argument("--build-dir", default=None, help="a native build folder (lucebox_native_build.py) instead of summaries")
    a = ap.parse_intermixed_args()
    if a.build_dir:
        libs, facts, why = from_build_dir(Path(a.build_dir), a.arch)
        inc = Path(a.include) if a.include else None
        if not libs or inc is None or not (inc / "ggml-backend.h").is_file():
            print(f"ggml_dir: {why or 'no ggml include/ (pass --include)'}", file=sys.stderr)
            return 3
        out = Path(a.outdir)
        (out / "lib").mkdir(parents=True, exist_ok=True)
        for p in libs:
            link = out / "lib" / p.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(p.resolve())
        if (out / "include").is_symlink() or (out / "include").exists():
            (out / "include").unlink()
        (out / "include").symlink_to(inc.resolve())
        facts.update(include=str(inc), arch=a.arch)
        (out / "ggml-dir.json").write_text(json.dumps(facts, indent=1) + "\n")
        print(out)
        return 0
    tried = []
    for where, build in candidates(a.summaries):
        lib, facts, why = usable(build, a.arch)
        if lib is None:
            tried.append(f"{where}: {why}")
            continue
        inc = Path(build["source_root"]) / GGML_INCLUDE if build.get("source_root") else None
        if inc is None or not (inc / "ggml-backend.h").is_file():
            inc = Path(a.include) if a.include else None
        if inc is None or not (inc / "ggml-backend.h").is_file():
            tried.append(f"{where}: no ggml include/ (the build kept no source tree; pass --include)")
            continue
        out = Path(a.outdir)
        out.mkdir(parents=True, exist_ok=True)
        for name, dest in (("lib", lib), ("include", inc)):
            if (out / name).is_symlink() or (out / name).exists():
                (out / name).unlink()
            (out / name).symlink_to(dest.resolve())
        facts.update(summary=where, include=str(inc), arch=a.arch)
        (out / "ggml-dir.json").write_text(json.dumps(facts, indent=1) + "\n")
        print(out)
        return 0
    print("ggml_dir: no Lucebox build with a usable libggml-cuda" + (f" for sm_{a.arch}" if a.arch else "") + ": "
          + ("; ".join(tried) if tried else "none found (run the lucebox-build step first)"), file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
