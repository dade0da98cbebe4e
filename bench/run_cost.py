#!/usr/bin/env python3
"""Where a verification run's time goes (issue 13 item 4): a ladder from bare cuInit to the runner.

    python3 bench/run_cost.py [--source HAMI-CORE] [--driver auto|real|fake] [--serial 5] [--count 32]
                              [--jobs 16] [--json FILE]

Each row starts fresh processes of bench/run_cost.c (or, for the runner rows, the async-sched
control through lucepatch's own runner) `--serial` times one after the other (x1) and `--count`
times `--jobs` at once (x16), and reports the median wall time of one process (spawn to exit) and
the throughput (elapsed / processes), plus the medians of the phases the process timed itself
(CLOCK_MONOTONIC, the same clock as time.monotonic_ns):

  bare cuInit                 cuInit(0) only, no interposer
  + context                   + primary context of device 0, a 4 MiB alloc/free, release
  + NVML                      + nvmlInit_v2 / handle / compute processes first (what HAMi-core asks)
  + HAMi init                 the context row with libvgpu.so (HAMi-core at the pin) preloaded and a
                              fresh region file: HAMi's init (NVML, host pid, its own primary context
                              retain/release) runs inside cuInit
  + libcuda sha256            + the in-process sha256 of libcuda.so.1 every reproducer's load report does
  + HAMi init, driver held    the HAMi row while a helper holds NVML and the driver open
  runner before               run_once as before this change: unshare(1)+sh+mount(8), reproducer re-exec
  runner now                  run_once as verify runs it: lucepatch-isolate, LD_BIND_NOW from the runner
  runner now, driver held     + the helper verify starts with the real driver

Every ladder row runs in its own mount namespace with a private /tmp/vgpulock (lucepatch-isolate),
as verify's runs do, so HAMi-core's host-wide lock does not serialise the x16 rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.native import compiling, toolchain  # noqa: E402


def compile_probe(cache: Path, stubs: Path) -> Path:
    cc = compiling.cc()
    inc = toolchain.cuda_include()
    src = ROOT / "bench" / "run_cost.c"
    unit = compiling.Unit(what="bench run_cost probe",
                          steps=[[cc, "-O1", "-g", "-o", "{out}/run_cost", str(src), f"-I{inc}",
                                  f"-I{ROOT / 'reproducers' / 'common'}", f"-L{stubs}", "-lcuda", "-ldl"]],
                          outputs=["run_cost"], inputs=[src, ROOT / "reproducers" / "common" / "lp_report.h"],
                          headers=[inc / "cuda.h"])
    return compiling.build_cached(unit, cache / "bench", compiler=cc) / "run_cost"


def spawn(cmd: list[str], env: dict, scratch: Path, preload: Path | None) -> dict:
    env = dict(env)
    region = scratch / f"region-{uuid.uuid4().hex}.cache"
    if preload:
        env.update(LD_PRELOAD=str(preload), CUDA_DEVICE_MEMORY_SHARED_CACHE=str(region),
                   CUDA_DEVICE_MEMORY_LIMIT="1g", LIBCUDA_LOG_LEVEL="2")
    t0 = time.monotonic_ns()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=scratch)
    t1 = time.monotonic_ns()
    region.unlink(missing_ok=True)
    rec = {"spawn": t0, "exit": t1, "rc": p.returncode}
    for line in p.stdout.splitlines():
        if line.startswith("@@run_cost "):
            rec.update(json.loads(line[len("@@run_cost "):]))
    if p.returncode != 0:
        rec["err"] = (p.stderr.strip().splitlines() or [""])[-1][:200]
    return rec


def phases(rec: dict) -> dict:
    if "t_main" not in rec:
        return {}
    ms = lambda a, b: (a - b) / 1e6  # noqa: E731
    out = {"exec_to_main": ms(rec["t_main"], rec["spawn"])}
    start = rec["t_nvml"] or rec["t_main"]
    if rec["t_nvml"]:
        out["nvml"] = ms(rec["t_nvml"], rec["t_main"])
    out["cuinit"] = ms(rec["t_cuinit"], start)
    if rec["t_ctx"]:
        out["context"] = ms(rec["t_ctx"], rec["t_cuinit"])
        out["alloc_free"] = ms(rec["t_alloc"], rec["t_ctx"])
        last = rec["t_alloc"]
        if rec["t_hash"]:
            out["libcuda_sha256"] = ms(rec["t_hash"], rec["t_alloc"])
            last = rec["t_hash"]
        out["release"] = ms(rec["t_release"], last)
    out["exit"] = ms(rec["exit"], rec["t_end"])
    return out


def measure(fn, count: int, jobs: int) -> dict:
    """fn() -> record; run count of them `jobs` at a time."""
    t0 = time.monotonic()
    if jobs == 1:
        recs = [fn() for _ in range(count)]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            recs = list(pool.map(lambda _: fn(), range(count)))
    elapsed = time.monotonic() - t0
    walls = [(r["exit"] - r["spawn"]) / 1e9 for r in recs]
    ph = [phases(r) for r in recs if phases(r)]
    keys = list(dict.fromkeys(k for p in ph for k in p))
    bad = [r for r in recs if r.get("rc")]
    return {"processes": count, "jobs": jobs, "elapsed_s": round(elapsed, 3),
            "throughput_s_per_process": round(elapsed / count, 4),
            "wall_median_s": round(statistics.median(walls), 4), "wall_min_s": round(min(walls), 4),
            "phases_median_ms": {k: round(statistics.median([p[k] for p in ph if k in p]), 2) for k in keys},
            "failed": len(bad), "first_error": bad[0].get("err", f"exit {bad[0]['rc']}") if bad else "",
            "libcuda_bytes": next((r["libcuda_bytes"] for r in recs if r.get("libcuda_bytes")), None)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=os.environ.get("LUCEPATCH_SRC_HAMI_CORE"))
    ap.add_argument("--driver", choices=["auto", "real", "fake"], default="auto")
    ap.add_argument("--serial", type=int, default=5)
    ap.add_argument("--count", type=int, default=32)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.source:
        raise SystemExit("bench/run_cost.py needs --source HAMI-CORE (or LUCEPATCH_SRC_HAMI_CORE)")

    from lucepatch.native.launch import build_isolate
    from lucepatch.target import load_target
    from lucepatch.verify.driver import DriverChoice, choose_driver, hold_driver
    from lucepatch.verify.reproducer import load_reproducer
    from lucepatch.verify.runner import compile_reproducer, namespace_isolation, run_once, scrubbed_environ
    from lucepatch.verify.service import build_variants
    from lucepatch.workspace import resolve_workspace

    cache = Path(os.environ.get("LUCEPATCH_CACHE") or tempfile.mkdtemp(prefix="lucepatch-run-cost-"))
    ok, why = namespace_isolation()
    if not ok:
        raise SystemExit(f"run_cost needs private mount namespaces (root + unshare): {why}")
    drv = choose_driver(args.driver, cache)
    ws = resolve_workspace(str(ROOT))
    target = load_target(ws, "hami-core")
    repro = load_reproducer(ws, "async-sched")
    lib = build_variants(target, args.source, cache, "libvgpu.so")[0].lib  # HAMi-core at the pin (+ Build-Only)
    probe = compile_probe(cache, drv.fake_dir)
    isolate = build_isolate(cache)
    repro_bin = compile_reproducer(repro, cache, drv.fake_dir)
    base_env = scrubbed_environ() | drv.env
    control = repro.scenario("control")

    def ladder(mode: str, preload: Path | None):
        return lambda: spawn([str(isolate), str(probe), mode], base_env, scratch, preload)

    def runner(launcher: Path | None, bind_now: bool):
        def fn():
            t0 = time.monotonic_ns()
            r = run_once(repro_bin, repro, control, "baseline", 0, lib, drv.env, scratch, isolate=True,
                         launcher=launcher, bind_now=bind_now)
            return {"spawn": t0, "exit": time.monotonic_ns(), "rc": 0 if r.outcome == "pass" else 1,
                    "err": r.reason or r.first_error}
        return fn

    rows = [("bare cuInit", ladder("cuinit", None), False), ("+ context, 4 MiB alloc/free", ladder("ctx", None), False),
            ("+ NVML as HAMi asks", ladder("nvml", None), False), ("+ HAMi init (libvgpu preloaded)", ladder("ctx", lib), False),
            ("+ libcuda sha256 (lp_report)", ladder("hash", lib), False),
            ("+ HAMi init, driver held", ladder("ctx", lib), True),
            ("runner before (unshare+sh+mount, re-exec)", runner(None, False), False),
            ("runner now (lucepatch-isolate, LD_BIND_NOW)", runner(isolate, True), False),
            ("runner now, driver held", runner(isolate, True), True)]
    out = []
    with tempfile.TemporaryDirectory(prefix="lucepatch-run-cost-") as scratch_s:
        scratch = Path(scratch_s)
        for label, fn, held in rows:
            row = {"row": label, "driver_held": held}
            with hold_driver(drv if held else DriverChoice(drv.requested, "fake", {}, None)) as h:
                row["x1"] = measure(fn, args.serial, 1)
                row[f"x{args.jobs}"] = measure(fn, args.count, args.jobs)
            if held:
                row["held"] = h.describe()
            out.append(row)
            x1, xn = row["x1"], row[f"x{args.jobs}"]
            print(f"{label:<45} x1 {x1['wall_median_s']:6.3f} s/proc   x{args.jobs} {xn['wall_median_s']:6.3f} s/proc "
                  f"{xn['throughput_s_per_process']:6.3f} s/proc throughput"
                  + (f"   FAILED {x1['failed'] + xn['failed']}: {x1['first_error'] or xn['first_error']}"
                     if x1["failed"] + xn["failed"] else ""), flush=True)
            if x1["phases_median_ms"]:
                print("    x1 ms: " + ", ".join(f"{k} {v:.1f}" for k, v in x1["phases_median_ms"].items())
                      + f"   x{args.jobs} ms: " + ", ".join(f"{k} {v:.1f}" for k, v in xn["phases_median_ms"].items()))
    size = next((r["x1"]["libcuda_bytes"] for r in out if r["x1"].get("libcuda_bytes")), None)
    if size:
        print(f"libcuda.so.1 mapped by the runs: {size / 2 ** 20:.1f} MiB (hashed in every run by lp_report.h)")
    doc = {"schema_version": 1, "kind": "lucepatch-bench-run-cost", "driver": drv.chosen, "note": drv.note,
           "source": str(args.source), "cpus": os.cpu_count(), "serial": args.serial, "count": args.count,
           "jobs": args.jobs, "libcuda_bytes": size, "rows": out}
    if drv.chosen == "real":
        try:
            doc["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,persistence_mode,compute_mode", "--format=csv"],
                capture_output=True, text=True, timeout=30).stdout.strip()
            print(doc["nvidia_smi"])
        except (OSError, subprocess.TimeoutExpired):
            pass
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if not any(r["x1"]["failed"] or r[f"x{args.jobs}"]["failed"] for r in out) else 1


if __name__ == "__main__":
    sys.exit(main())
