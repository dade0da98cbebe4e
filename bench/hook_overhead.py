#!/usr/bin/env python3
"""ns per cuMemAllocAsync + cuMemFreeAsync pair: no interposer, baseline HAMi-core, patched HAMi-core.

    python3 bench/hook_overhead.py --source PATH-TO-HAMI-CORE [--json FILE] [--iterations N]
           [--repeats R] [--driver auto|real|fake] [--target hami-core]

The series' allocator fixes add device lookups on this hot path (cuStreamGetDevice, or a
context push/pop where it is missing); maintainers will ask what it costs. Goal: patched <=
1.05 x baseline. Baseline and patched are built with the same code `verify` uses (build_variant,
cached). Each measurement is a fresh process (fresh region file); variants are interleaved
and the median of R repeats is reported. Each process proves what it loaded (mapped library
sha256, HAMi's load marker). On the simulated driver the figures only show the interposer's own
cost and are labelled "simulated".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.builders.native import build_variant  # noqa: E402
from lucepatch.native import toolchain  # noqa: E402
from lucepatch.native.fakecuda import FAKE_DEVICE_NAME_PREFIX  # noqa: E402
from lucepatch.target import load_target  # noqa: E402
from lucepatch.verify.driver import choose_driver  # noqa: E402
from lucepatch.verify.runner import parse_events, scrubbed_environ  # noqa: E402
from lucepatch.workspace import resolve_cache, resolve_workspace  # noqa: E402

SRC = Path(__file__).with_name("hook_overhead.c")


def compile_driver(cache: Path, stubs: Path) -> Path:
    out = cache / "bench" / "hook_overhead"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-O2", "-o", str(out), str(SRC), f"-I{toolchain.cuda_include()}",
                    f"-I{ROOT / 'reproducers' / 'common'}", f"-L{stubs}", "-lcuda"], check=True)
    return out


def measure(binary: Path, preload: Path | None, driver_env: dict, iterations: int, scratch: Path) -> dict:
    region = scratch / f"region-{uuid.uuid4().hex}.cache"
    env = scrubbed_environ()
    env.update(driver_env)
    env.update(CUDA_DEVICE_MEMORY_LIMIT="8g", LIBCUDA_LOG_LEVEL="2", CUDA_DEVICE_MEMORY_SHARED_CACHE=str(region))
    if preload:
        env["LD_PRELOAD"] = str(preload)
    try:
        r = subprocess.run([str(binary), str(iterations)], capture_output=True, text=True, env=env, timeout=600)
    finally:
        region.unlink(missing_ok=True)
    ev = parse_events(r.stdout)
    bench = next((e for e in ev if e.get("event") == "bench"), None)
    loaded = next((e for e in ev if e.get("event") == "loaded"), {})
    drv = next((e for e in ev if e.get("event") == "driver"), {})
    if r.returncode != 0 or bench is None:
        raise SystemExit(f"hook_overhead failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-400:]}")
    if preload is not None:
        mapped = [p for p in loaded.get("preload", []) if Path(p["path"]).name == preload.name]
        if not mapped or "Initialized" not in r.stderr:
            raise SystemExit(f"{preload} did not load (no mapping or no load marker): the figure would be meaningless")
        bench["preload_sha256"] = mapped[0]["sha256"]
    bench["gpu"] = drv.get("gpu")
    bench["driver_version"] = drv.get("version")
    return bench


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True, type=Path, help="HAMi-core checkout")
    ap.add_argument("--target", default="hami-core")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--iterations", type=int, default=200000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--driver", choices=["auto", "real", "fake"], default="auto")
    args = ap.parse_args(argv)

    ws, cache = resolve_workspace(None), resolve_cache(None)
    drv = choose_driver(args.driver, cache)
    target = load_target(ws, args.target)
    libs = {"none": None}
    provenance = {}
    for variant in ("baseline", "patched"):
        b = build_variant(target, args.source, variant, cache)
        libs[variant] = b.artifacts[next(iter(b.artifacts))]
        provenance[variant] = {"commit": b.commit, "patches": b.patches, "sha256": b.sha256[next(iter(b.sha256))]}
    binary = compile_driver(cache, drv.fake_dir)
    samples: dict[str, list[float]] = {k: [] for k in libs}
    meta = {}
    with tempfile.TemporaryDirectory(prefix="lucepatch-bench-") as scratch:
        for _ in range(args.repeats):
            for name, lib in libs.items():  # interleaved: drift hits all variants alike
                m = measure(binary, lib, drv.env, args.iterations, Path(scratch))
                samples[name].append(m["ns_per_pair"])
                meta = m
    gpu = meta.get("gpu") or ""
    simulated = gpu.startswith(FAKE_DEVICE_NAME_PREFIX)
    med = {k: statistics.median(v) for k, v in samples.items()}
    low = {k: min(v) for k, v in samples.items()}
    # Noise on a shared GPU host only ever adds time, and it drifts between repeats: the ratio is
    # taken within each interleaved round (patched vs the baseline measured right before it), and
    # its median is what the goal is judged on. Medians and minima of each variant are reported too.
    paired = [p / b for p, b in zip(samples["patched"], samples["baseline"]) if b]
    ratio = statistics.median(paired)
    doc = {
        "schema_version": 1, "kind": "lucepatch-hook-overhead", "simulated": simulated,
        "gpu": gpu, "driver_version": meta.get("driver_version"), "iterations": args.iterations,
        "repeats": args.repeats, "ns_per_pair_median": {k: round(v, 1) for k, v in med.items()},
        "ns_per_pair_min": {k: round(v, 1) for k, v in low.items()},
        "ns_per_pair_samples": samples, "patched_over_baseline": round(ratio, 4),
        "patched_over_baseline_paired": [round(x, 4) for x in paired],
        "patched_over_baseline_of_medians": round(med["patched"] / med["baseline"], 4),
        "patched_over_baseline_of_minima": round(low["patched"] / low["baseline"], 4),
        "baseline_over_none": round(med["baseline"] / med["none"], 3) if med["none"] else None,
        "goal": "patched <= 1.05 x baseline", "goal_met": ratio <= 1.05, "variants": provenance,
        "host": {"cpus": os.cpu_count()},
    }
    label = "SIMULATED driver (interposer cost only, not GPU figures)" if simulated else f"{gpu}, driver {meta.get('driver_version')}"
    print(f"hook overhead, cuMemAllocAsync+cuMemFreeAsync pair, {label}; median of {args.repeats} x {args.iterations}")
    for k in ("none", "baseline", "patched"):
        print(f"  {k:9s} median {med[k]:8.1f}  min {low[k]:8.1f} ns/pair   ({med[k] / med['none']:.2f}x bare driver)")
    print(f"  patched / baseline: median of paired rounds {ratio:.3f}, of medians {med['patched'] / med['baseline']:.3f}, "
          f"of minima {low['patched'] / low['baseline']:.3f}  (goal <= 1.05: {'met' if ratio <= 1.05 else 'NOT met'})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
