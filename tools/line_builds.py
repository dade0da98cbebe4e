#!/usr/bin/env python3
"""Write lucepatch/data/line_builds.toml: what each line's own build exports and reads.

Usage: tools/line_builds.py HAMI_CORE_CHECKOUT [--cache-dir DIR] [--out FILE] [--check]

Builds every HAMi-core line of this workspace (lucepatch build LINE --both, its default profile)
and records the patched build's exported symbols, the names its patches add that upstream never
defined (lucepatch/data/hami_core_names.toml), the environment variables it reads
(lucepatch.native.elf.env_names) and the newest glibc version it references. `lucepatch node --lib`
compares a node's library with these (lucepatch.lines.identity). --check rebuilds and compares
(exit 1 on a difference); the CUDA headers rename driver entry points, so the file records the
CUDA version it was made with and --check needs the same.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import tomlkit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from lucepatch.lines import history  # noqa: E402
from lucepatch.lines.fit import load_lines  # noqa: E402
from lucepatch.native import elf  # noqa: E402
from lucepatch.workspace import resolve_workspace  # noqa: E402

OUT = ROOT / "lucepatch" / "data" / "line_builds.toml"
HEADER = """\
# What each line's own build exports and reads (lucepatch.lines.identity compares a node's library
# with it). Written by tools/line_builds.py from real builds (lucepatch build LINE --both, the
# line's default profile); do not edit by hand. Names only: no code and no bytes of a build.
#
# exports      = the patched build's defined dynamic symbols
# adds         = the names among them that upstream HAMi-core never defined: the line's patches'
# patched_only = exported by the patched build and not by the baseline (the adds, and upstream names a
#                backport brings, e.g. a hook of a later upstream commit)
# baseline_only = exported by the line's baseline build (its base, unpatched) and not by the patched one
# env          = the environment variables the patched build reads (getenv call sites, read-only data)
# newest_glibc = the newest GLIBC_x.y version it references (depends on the glibc it was built on)
# cuda         = the CUDA headers' version: cuda.h renames driver entry points (cuMemAdvise -> cuMemAdvise_v2 at 13.0)
"""


def cuda_version() -> str:
    from lucepatch.native import toolchain
    import re
    text = (toolchain.cuda_include() / "cuda.h").read_text(errors="replace")
    n = int(re.search(r"#define CUDA_VERSION (\d+)", text).group(1))
    return f"{n // 1000}.{(n % 1000) // 10}"


def build(line: str, checkout: str, cache: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(ROOT), "--cache-dir", cache, "build", line,
                          "--source", checkout, "--both", "--json"], capture_output=True, text=True, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise SystemExit(f"lucepatch build {line} failed: {out.stderr.strip().splitlines()[-1:]}")
    return {b["variant"]: b["artifacts"]["libvgpu.so"]["path"] for b in json.loads(out.stdout)["builds"]}


def record(line, paths: dict[str, str], hist) -> dict:
    pat = sorted(elf.defined_dynamic_symbols(paths["patched"]))
    base = set(elf.defined_dynamic_symbols(paths["baseline"]))
    env = elf.env_names(paths["patched"])
    return {"base": line.base, "cuda": cuda_version(), "newest_glibc": elf.loader_needs(paths["patched"]).newest_glibc,
            "adds": hist.never_upstream(pat), "patched_only": sorted(set(pat) - base),
            "baseline_only": sorted(base - set(pat)), "env": sorted(env.all),
            "exports": pat}


def render(lines: dict[str, dict]) -> str:
    doc = tomlkit.document()
    doc["schema_version"] = 1
    tab = tomlkit.table(is_super_table=True)
    for name, rec in lines.items():
        t = tomlkit.table()
        for k, v in rec.items():
            if isinstance(v, list):
                arr = tomlkit.array()
                arr.extend(v)
                arr.multiline(len(v) > 4)
                t[k] = arr
            else:
                t[k] = v
        tab[name] = t
    doc["line"] = tab
    return HEADER + tomlkit.dumps(doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    hist = history.load_history()
    lines = [l for l in load_lines(ws=resolve_workspace(ROOT)) if l.in_workspace]
    with tempfile.TemporaryDirectory(prefix="lp-line-builds-") as tmp:
        recs = {l.target: record(l, build(l.target, a.checkout, a.cache_dir or tmp), hist) for l in lines}
    text = render(recs)
    out = Path(a.out)
    if a.check:
        same = out.is_file() and out.read_text() == text
        print(f"{out}: {'up to date' if same else 'differs from the builds'}")
        return 0 if same else 1
    out.write_text(text)
    print(f"{out}: " + ", ".join(f"{k} {len(v['exports'])} exports, {len(v['adds'])} added by the line" for k, v in recs.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
