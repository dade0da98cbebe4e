#!/usr/bin/env python3
"""Seconds from `lucepatch verify` to a verdict: the sequential rule against `--fixed --runs 20`.

    python3 bench/verify.py [--source HAMI-CORE] [--driver auto|real|fake] [--runs 20] [--rounds 1]
                            [--reproducer async-sched] [--json FILE]

The main job is `verify --reproducer async-sched` (every scenario: the control and the three
checked ones). One cold run fills the build cache; then `rounds` warm rounds each run the fixed
rule and the sequential rule back to back (the order alternates per round, so drift hits both
alike); each figure is the wall time of the whole `lucepatch verify` process, from start until it
exited. The bench checks that both rules reach the same verdict on every scenario, that every run
was a process that proved what it loaded, and prints both medians, the ratio, the runs spent, the
theta the sequential evidence records and where its time went. Goal (issue 13): the sequential job
warm on one H200 < 25 s, theta <= 0.37.

Without --source (or LUCEPATCH_SRC_HAMI_CORE) the fakehami fixture is the upstream.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKEHAMI = ROOT / "tests" / "fixtures" / "fakehami"
BUILD = ('[build]\nsystem = "cmake"\nconfigure_args = []\ntargets = ["vgpu"]\n\n'
         '[build.artifacts]\n"libvgpu.so" = "libvgpu.so"\n')
GOAL_S = 25.0


def git(cwd, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@invalid",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@invalid"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def fakehami_workspace(tmp: Path, reproducer: str) -> tuple[Path, Path]:
    """(workspace, upstream): the fixture as an upstream repo plus a workspace with its series."""
    up = tmp / "upstream"
    up.mkdir()
    shutil.copytree(FAKEHAMI / "src", up / "src")
    shutil.copy(FAKEHAMI / "CMakeLists.txt", up)
    git(up, "init", "-q", "-b", "main")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "base")
    base = git(up, "rev-parse", "HEAD").strip()
    ws = tmp / "ws"
    tdir = ws / "patches" / "fakehami"
    tdir.mkdir(parents=True)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    names = []
    for line in (FAKEHAMI / "patches" / "series").read_text().split():
        slug = line.split("-", 1)[1]
        shutil.copy(FAKEHAMI / "patches" / line, tdir / slug)
        names.append(slug)
    (tdir / "series").write_text("".join(n + "\n" for n in names))
    (tdir / "target.toml").write_text(f'name = "fakehami"\nupstream = "https://example.invalid/fakehami"\n'
                                      f'branch = "main"\nbase = "{base}"\nversion = "1.0.0"\n\n{BUILD}')
    shutil.copytree(ROOT / "reproducers" / "common", ws / "reproducers" / "common")
    shutil.copytree(ROOT / "reproducers" / reproducer, ws / "reproducers" / reproducer)
    t = ws / "reproducers" / reproducer / "reproducer.toml"
    t.write_text(re.sub(r'(?m)^target = ".*"$', 'target = "fakehami"', t.read_text()))
    return ws, up


def one(ws: Path | None, source: Path, cache: Path, args, fixed: bool) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "lucepatch"]
    if ws:
        cmd += ["--workspace", str(ws)]
    cmd += ["--cache-dir", str(cache), "verify", "--reproducer", args.reproducer, "--source", str(source),
            "--driver", args.driver, "--runs", str(args.runs), "--json"] + (["--fixed"] if fixed else [])
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    dt = time.monotonic() - t0
    if not r.stdout.strip():
        raise SystemExit(f"verify produced no JSON (exit {r.returncode}): {r.stderr.strip()[-600:]}")
    return dt, json.loads(r.stdout)["evidence"]


def check_spawned(doc: dict) -> int:
    """Every run a real process that reported what it mapped; returns the process count."""
    recs = doc["runs"]
    assert doc["execution"]["processes"] == len(recs)
    spent = sum(sum(s["runs_spent"].values()) for s in doc["scenarios"])
    assert spent == len(recs), (spent, len(recs))
    assert all(r["preload"] and r["preload"][0]["sha256"] and r["libcuda"] for r in recs), "a run proved nothing"
    return len(recs)


def verdicts(doc: dict) -> dict:
    return {s["scenario"]: s["verdict"] for s in doc["scenarios"]} | {"(overall)": doc["verdict"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=os.environ.get("LUCEPATCH_SRC_HAMI_CORE"))
    ap.add_argument("--runs", type=int, default=20, help="the fixed N, and the sequential rule's maximum")
    ap.add_argument("--rounds", type=int, default=1, help="warm rounds (each: fixed and sequential)")
    ap.add_argument("--driver", choices=["auto", "real", "fake"], default="auto")
    ap.add_argument("--reproducer", default="async-sched")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lucepatch-bench-verify-") as tmp:
        tmp = Path(tmp)
        if args.source:
            ws, source, upstream = None, args.source.resolve(), "hami-core"
        else:
            ws, source = fakehami_workspace(tmp, args.reproducer)
            upstream = "fakehami fixture"
        cache = Path(os.environ.get("LUCEPATCH_BENCH_CACHE") or tmp / "cache")
        cold_s, cold = one(ws, source, cache, args, fixed=False)
        fixed_s, seq_s, docs = [], [], {"fixed": [], "sequential": []}
        for i in range(args.rounds):
            order = (True, False) if i % 2 == 0 else (False, True)
            for fixed in order:
                dt, doc = one(ws, source, cache, args, fixed)
                (fixed_s if fixed else seq_s).append(dt)
                docs["fixed" if fixed else "sequential"].append(doc)
    f_doc, s_doc = docs["fixed"][-1], docs["sequential"][-1]
    n_fixed, n_seq = check_spawned(f_doc), check_spawned(s_doc)
    same = all(verdicts(d) == verdicts(f_doc) for d in docs["fixed"] + docs["sequential"] + [cold])
    if not same:
        for d in docs["sequential"]:
            print(f"  sequential verdicts {verdicts(d)} != fixed {verdicts(f_doc)}", file=sys.stderr)
    pol = s_doc["run_policy"]
    simulated = bool(s_doc.get("simulated"))
    drv = s_doc["driver"]
    where = "simulated driver" if simulated else f"{drv.get('gpu')}, driver {drv.get('version')}"
    ex = s_doc["execution"]
    f_med, s_med = statistics.median(fixed_s), statistics.median(seq_s)
    print(f"verify --reproducer {args.reproducer} ({len(s_doc['scenarios'])} scenarios, 2 variants; {upstream}; "
          f"{where}; {os.cpu_count()} CPUs; {ex['mode']}" + (f" x{ex['jobs']}" if ex["mode"] == "parallel" else "")
          + f"), warm, median of {args.rounds} round(s), wall time of the whole command")
    print(f"  --fixed --runs {args.runs:<3}  {f_med:7.2f} s   {n_fixed:4d} processes   verdict {f_doc['verdict']}")
    print(f"  sequential (max {args.runs}) {s_med:7.2f} s   {n_seq:4d} processes   verdict {s_doc['verdict']}   "
          f"theta {pol['theta']}")
    print(f"  ratio sequential/fixed {s_med / f_med:.3f} ({f_med / s_med:.2f}x faster), processes {n_seq / n_fixed:.3f}; "
          f"same verdicts on every scenario: {'yes' if same else 'NO'}")
    for s in s_doc["scenarios"]:
        print(f"    {s['scenario']:<40} {s['verdict']:<10} spent {s['runs_spent']['baseline']:>2}+"
              f"{s['runs_spent']['patched']:<2} {s['mode']:<10} {s['stop_reason'][:70]}")
    ph = ex.get("phases", {})
    print(f"  where the sequential run's time went: " + ", ".join(f"{k} {v:.2f} s" for k, v in ph.items())
          + f"; {ex['wall_s'] / max(1, n_seq):.3f} s per process of runs wall; cold (first) run {cold_s:.2f} s")
    goal_met = (s_med < GOAL_S and pol["theta"] <= 0.37) if not simulated else None
    if not simulated:
        print(f"  goal: sequential warm < {GOAL_S:.0f} s with theta <= 0.37: {'met' if goal_met else 'MISSED'}")
    doc = {"schema_version": 2, "kind": "lucepatch-bench-verify", "simulated": simulated, "upstream": upstream,
           "reproducer": args.reproducer, "runs": args.runs, "rounds": args.rounds,
           "fixed": {"wall_s": fixed_s, "median_s": round(f_med, 3), "processes": n_fixed, "verdicts": verdicts(f_doc)},
           "sequential": {"wall_s": seq_s, "median_s": round(s_med, 3), "processes": n_seq,
                          "verdicts": verdicts(s_doc), "run_policy": pol, "phases": ph,
                          "spent": {s["scenario"]: s["runs_spent"] for s in s_doc["scenarios"]}},
           "ratio": round(s_med / f_med, 4), "same_verdicts": same, "cold_s": round(cold_s, 3),
           "goal_s": GOAL_S, "goal_met": goal_met, "driver": drv, "cpus": os.cpu_count(), "execution": ex}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
