"""Measure one full single-arch Lucebox build (the figure bench/probe.py compares probes against) and
store it in bench/full_build.json with machine, commit and date.

What it runs: the patched tree (superproject + submodule series, as `probe` applies them), cmake with
the profile's arguments, `cmake --build --target dflash_server test_dflash`. It needs a complete CUDA
toolkit (cuBLAS headers and libraries included: a CUDA devel image or a full local install) — the
PyPI-only toolkit of the lucepatch CI machine lacks cublas_v2.h, so ggml-cuda cannot compile there.
The measurement takes 35-45 min on 2 cores (docs/field-notes.md §4); it is never part of CI.

Usage: python bench/full_build.py --source LUCEBOX_CHECKOUT [--profile sm120-cuda13] [-j N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.builders.probe import prepare_tree, resolve_profile  # noqa: E402
from lucepatch.builders.toolchain import cuda_home  # noqa: E402
from lucepatch.target import load_target_dir  # noqa: E402
from lucepatch.workspace import resolve_cache  # noqa: E402

OUT = ROOT / "bench" / "full_build.json"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=os.environ.get("LUCEPATCH_SRC_LUCEBOX"))
    ap.add_argument("--profile", default="sm120-cuda13")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    if not a.source:
        print("full_build: pass --source or set LUCEPATCH_SRC_LUCEBOX", file=sys.stderr)
        return 3
    home = cuda_home()
    if not any((home / d / "cublas_v2.h").is_file() for d in ("include", "targets/x86_64-linux/include")):
        print(f"full_build: {home} has no cublas_v2.h: a full build of ggml-cuda is impossible here "
              "(install the CUDA toolkit with cuBLAS, or run inside nvidia/cuda:13.0.0-devel)", file=sys.stderr)
        return 3
    t = load_target_dir(ROOT / "patches" / "lucebox")
    pname, prof = resolve_profile(t, a.profile)
    with contextlib.ExitStack() as stack:
        tree = prepare_tree(t, Path(a.source), "patched", resolve_cache(None), stack)
        bdir = tree.root.parent / "full-build"
        t0 = time.monotonic()
        subprocess.run(["cmake", "-G", "Ninja", "-S", str(tree.root / "server"), "-B", str(bdir), *prof["cmake_args"]], check=True)
        t1 = time.monotonic()
        r = subprocess.run(["cmake", "--build", str(bdir), "-j", str(a.jobs), "--target", *t.build.targets])
        t2 = time.monotonic()
        steps = subprocess.run(["ninja", "-C", str(bdir), "-t", "commands", *t.build.targets],
                               capture_output=True, text=True).stdout.count("\n")
    doc = {"profile": pname, "commit": tree.repos[0]["base"], "submodules": tree.repos[1:], "ok": r.returncode == 0,
           "configure_s": round(t1 - t0, 1), "build_s": round(t2 - t1, 1), "total_s": round(t2 - t0, 1),
           "steps": steps, "jobs": a.jobs, "machine": f"{platform.node()} {os.cpu_count()} cpu {platform.processor()}",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": "measured by bench/full_build.py"}
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0 if r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
