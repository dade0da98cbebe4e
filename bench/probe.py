"""Benchmark: `lucepatch probe lucebox` time over one full single-arch build. Goal: <= 1/8.

The full-build figure is bench/full_build.json when bench/full_build.py has measured one on this kind
of machine; otherwise the field record (docs/field-notes.md §4: 35-45 min on 2 cores, 21 min of it compiling
before the F6 link failure) is used and labelled as such — the lucepatch CI machine cannot build
ggml-cuda at all (no cuBLAS in its PyPI CUDA).

Usage: python bench/probe.py [--source LUCEBOX_CHECKOUT] [--profile sm120-cuda13] [--both]
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

from lucepatch.builders.probe import run_probes  # noqa: E402
from lucepatch.target import load_target_dir  # noqa: E402

FIELD = {"total_s": 35 * 60, "source": "field record, docs/field-notes.md §4 (35-45 min on 2 cores; lower bound used)",
         "machine": "2-core CPU box, nvcc 13.0 / CMake 3.25"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=os.environ.get("LUCEPATCH_SRC_LUCEBOX", str(ROOT / ".upstream" / "lucebox-hub")))
    ap.add_argument("--profile", default="sm120-cuda13")
    ap.add_argument("--both", action="store_true", help="time baseline + patched (default: patched, what preflight runs)")
    ap.add_argument("--measure-full", metavar="SUMMARY.json", default=None,
                    help="in the same run, time a cold full build (`build lucebox --profile P`, same -j = cores, build "
                         "tree kept) and write its summary here; the ratio is then probe/full on one machine")
    ap.add_argument("--cuda-archs", default=None, metavar="LIST",
                    help="the full build's CUDA arch list instead of the profile's (e.g. '120;90': an H200 runs sm_90)")
    a = ap.parse_args()
    full = json.loads((ROOT / "bench" / "full_build.json").read_text()) if (ROOT / "bench" / "full_build.json").is_file() else FIELD
    t = load_target_dir(ROOT / "patches" / "lucebox")
    cache = Path(tempfile.mkdtemp(prefix="lp-bench-probe-"))  # cold: stand-ins built too
    out = {"profile": a.profile, "machine": f"{platform.node()} {os.cpu_count()} cpu", "runs": []}
    t0 = time.monotonic()
    for variant in (["baseline", "patched"] if a.both else ["patched"]):
        run = run_probes(t, Path(a.source), a.profile, variant, cache)
        out["runs"].append({"variant": variant, "seconds": round(run.seconds, 1), "ok": run.ok,
                            "probes": {r.spec.fix: round(r.seconds, 1) for r in run.results}})
    total = time.monotonic() - t0
    if a.measure_full:
        from lucepatch.builders.superbuild import build_superproject  # noqa: PLC0415
        from lucepatch.errors import LucepatchError  # noqa: PLC0415
        try:
            archs = [x for x in a.cuda_archs.replace(",", ";").split(";") if x] if a.cuda_archs else None
            fb = build_superproject(t, Path(a.source), a.profile, Path(tempfile.mkdtemp(prefix="lp-bench-full-")),
                                    jobs=os.cpu_count(), keep_build=True, cuda_archs=archs)
        except LucepatchError as exc:  # e.g. no cuBLAS headers: say so, keep the probe figures
            print(f"probe bench: full build not possible here: {exc}", file=sys.stderr)
            out["full_build_ok"] = False
            out["full_build_error"] = str(exc)
            print(json.dumps(out | {"probe_s": round(total, 1)}, indent=2))
            return 3
        doc = fb.to_json()
        Path(a.measure_full).write_text(json.dumps(doc, indent=1) + "\n")
        full = {"total_s": doc["total_s"], "source": f"measured in this run: cold `build lucebox --profile {a.profile}` "
                f"-j {fb.jobs}, {doc['steps_done']}/{doc['steps_total']} steps, ok={fb.ok}"}
        out["full_build_ok"] = fb.ok
    out["jobs"] = os.cpu_count()
    out.update({"probe_s": round(total, 1), "full_build_s": full["total_s"], "full_build_source": full["source"],
                "ratio": round(total / full["total_s"], 4), "goal": 0.125})
    # a full build that failed early is no denominator
    out["met"] = out["ratio"] <= 0.125 and out.get("full_build_ok", True)
    print(json.dumps(out, indent=2))
    print(f"probe {total:.0f}s vs full build {full['total_s']}s ({full['source']}): {out['ratio']:.1%} "
          f"(goal <= 12.5%: {'met' if out['met'] else 'NOT met'})", file=sys.stderr)
    return 0 if all(r["ok"] for r in out["runs"]) and out.get("full_build_ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
