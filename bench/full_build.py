"""Measure one cold full single-arch Lucebox build (the figure bench/probe.py compares probes
against when it cannot measure both in one run) and store it in bench/full_build.json.

It is `lucepatch build lucebox --profile P` (lucepatch/builders/superbuild.py) in a fresh cache:
the patched trees with their submodule series, the profile's cmake arguments, -j = cores. It needs
a full CUDA toolkit (cuBLAS headers included); never part of CI. To get the ratio from one machine
in one run, prefer `python bench/probe.py --both --measure-full SUMMARY.json`.

Usage: python bench/full_build.py --source LUCEBOX_CHECKOUT [--profile sm120-cuda13] [-j N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.builders.superbuild import build_superproject  # noqa: E402
from lucepatch.errors import LucepatchError  # noqa: E402
from lucepatch.target import load_target_dir  # noqa: E402

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
    t = load_target_dir(ROOT / "patches" / "lucebox")
    try:
        b = build_superproject(t, Path(a.source), a.profile, Path(tempfile.mkdtemp(prefix="lp-full-build-")), jobs=a.jobs)
    except LucepatchError as exc:
        print(f"full_build: {exc}", file=sys.stderr)
        return exc.exit_code if hasattr(exc, "exit_code") else 3
    d = b.to_json()
    doc = {"profile": b.profile, "commit": b.repos[0]["base"], "submodules": b.repos[1:], "ok": b.ok,
           "configure_s": d["configure_s"], "build_s": d["build_s"], "total_s": d["total_s"],
           "steps": b.steps_total, "jobs": b.jobs, "machine": f"{platform.node()} {os.cpu_count()} cpu",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": "measured by bench/full_build.py",
           "sass_ok": b.sass.get("ok"), "closure_ok": b.closure.get("ok"), "failure": b.failure}
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0 if b.ok else 1


if __name__ == "__main__":
    sys.exit(main())
