#!/usr/bin/env python3
"""Seconds from `lucepatch verify` to a verdict: the sequential rule against an old rule, same run.

    python3 bench/verify.py [--source HAMI-CORE] [--driver auto|real|fake] [--runs 20] [--rounds 1]
                            [--reproducer R ... [--exclude "R:S ..."] | --all [--target T]]
                            [--baseline-ref A --patched-ref B] [--jobs J] [--old fixed | --old TREE] [--json FILE]

The main job is `verify --reproducer async-sched` (every scenario: the control and the three
checked ones). One cold run fills the build cache; then `rounds` warm rounds each run the old rule
and the sequential rule back to back (the order alternates per round, so drift hits both alike);
each figure is the wall time of the whole `lucepatch verify` process, from start until it exited.
The bench checks that both rules reach the same verdict on every scenario, that every run was a
process that proved what it loaded, and prints both medians, the ratios of wall time and of
processes, the runs spent, the theta the sequential evidence records and where its time went.

The old rule: `--old fixed` (default) is this lucepatch's `--fixed --runs N`; `--old TREE` is the
sequential rule of another lucepatch checkout (e.g. `git worktree add /tmp/old <commit>` before issue
29's settling), run with the same arguments and the same build cache.

Where the runs go: every scenario is put in one class by its verdict and how its runs ended (control,
guard both passing, proven, settled not-proven, regression, flaky, skipped, ...), and each class's
scenarios, runs under both rules and process-seconds (the sum of its runs' durations: what it costs
the machine) are printed — on the real driver that names what a verify's wall time is made of.
The like-for-like PR #188 set of issue 29 (the 50 scenarios of the 474 s run) is
`--reproducer async-accounting ... --reproducer zero-limit --exclude llama-vmm:main-device`
(tools/gpu_session.sh pr188-all spells it as PR188_REPROS=old50).

Goals: issue 13, the main job's sequential run warm on one H200 < 25 s, theta <= 0.37; issue 29,
`--all --baseline-ref e3c3477 --patched-ref <PR #188 on e3c3477>` (the ref-vs-ref check of a
candidate PR) with the same 50 verdicts as before settling, in <= 240 s on one H200.

Without --source (or LUCEPATCH_SRC_HAMI_CORE) the fakehami fixture is the upstream (the main job only).
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
GOAL_S = 25.0  # the main job (issue 13)
GOAL_ALL_S = 240.0  # verify --all ref-vs-ref on a candidate PR (issue 29)


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


def one(ws: Path | None, source: Path, cache: Path, args, fixed: bool, tree: Path = ROOT) -> tuple[float, dict]:
    """One whole `lucepatch verify` process of the lucepatch in `tree`: (wall seconds, its evidence)."""
    # this checkout's workspace for both sides (the same reproducers and series), whichever code runs
    cmd = [sys.executable, "-m", "lucepatch", "--workspace", str(ws or ROOT)]
    what = (["--all"] + (["--target", args.target] if args.target else [])) if args.all else args.selection
    refs = ["--baseline-ref", args.baseline_ref, "--patched-ref", args.patched_ref] if args.baseline_ref else []
    jobs = ["--jobs", str(args.jobs)] if args.jobs else []
    cmd += ["--cache-dir", str(cache), "verify", *what, "--source", str(source), *refs, *jobs,
            "--driver", args.driver, "--runs", str(args.runs), "--json"] + (["--fixed"] if fixed else [])
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)  # `-m` puts the cwd first on sys.path
    dt = time.monotonic() - t0
    if not r.stdout.strip():
        raise SystemExit(f"verify produced no JSON (exit {r.returncode}): {r.stderr.strip()[-600:]}")
    return dt, json.loads(r.stdout)["evidence"]


def check_spawned(doc: dict) -> int:
    """Every run a real process that reported what it mapped (or a scenario the machine cannot run,
    recorded skipped); returns the process count."""
    recs = doc["runs"]
    started = [r for r in recs if not (r["outcome"] == "skipped" and r.get("returncode") is None)]
    assert doc["execution"]["processes"] == len(started), (doc["execution"]["processes"], len(started))
    spent = sum(sum(s["runs_spent"].values()) for s in doc["scenarios"])
    assert spent == len(recs), (spent, len(recs))
    assert all(r["preload"] and r["preload"][0]["sha256"] and r["libcuda"] for r in started
               if r["outcome"] != "skipped"), "a run proved nothing"
    return len(started)


def run_class(s: dict) -> str:
    """The class a scenario's runs are counted in (see the module's docstring)."""
    v, mode = s["verdict"], s.get("mode", "")
    if v in ("skipped", "not-applicable", "invalid"):
        return v
    if s.get("control"):
        return "control"
    if v == "guarded":
        return "guard, both pass"
    if v == "proven":
        return "proven" + (" (flaky)" if mode == "flaky" else "")
    if mode == "settled":
        return f"settled {v}"
    if mode == "flaky":
        return f"flaky {v}"
    return v


def where_runs_go(doc: dict) -> dict:
    """class -> {"scenarios", "runs", "process_s"} of one evidence document."""
    dur: dict = {}
    for r in doc["runs"]:
        dur[r["scenario"]] = dur.get(r["scenario"], 0.0) + (r.get("duration_s") or 0.0)
    out: dict = {}
    for s in doc["scenarios"]:
        c = out.setdefault(run_class(s), {"scenarios": 0, "runs": 0, "process_s": 0.0})
        c["scenarios"] += 1
        c["runs"] += sum((s.get("runs_spent") or {}).values())
        c["process_s"] = round(c["process_s"] + dur.get(s["scenario"], 0.0), 3)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["runs"]))


def verdicts(doc: dict) -> dict:
    return {s["scenario"]: s["verdict"] for s in doc["scenarios"]} | {"(overall)": doc["verdict"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=os.environ.get("LUCEPATCH_SRC_HAMI_CORE"))
    ap.add_argument("--runs", type=int, default=20, help="the fixed N, and the sequential rule's maximum")
    ap.add_argument("--rounds", type=int, default=1, help="warm rounds (each: the old rule and the sequential one)")
    ap.add_argument("--driver", choices=["auto", "real", "fake"], default="auto")
    ap.add_argument("--reproducer", action="append", default=None, help="repeatable (default: async-sched)")
    ap.add_argument("--exclude", default="", help="reproducer:scenario keys left out, space-separated")
    ap.add_argument("--all", action="store_true", help="every reproducer of the target (needs --source)")
    ap.add_argument("--target", default=None)
    ap.add_argument("--baseline-ref", default=None)
    ap.add_argument("--patched-ref", default=None)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--old", default="fixed", help="fixed (this lucepatch's --fixed) or a lucepatch checkout")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if (args.all or args.baseline_ref) and not args.source:
        ap.error("--all and --baseline-ref need --source (a HAMi-core checkout)")
    args.reproducer = args.reproducer or ["async-sched"]
    if not args.source and (len(args.reproducer) > 1 or args.exclude):
        ap.error("several reproducers and --exclude need --source (a HAMi-core checkout)")
    if args.source:
        sys.path.insert(0, str(ROOT / "tools"))
        from scenario_set import selection

        args.selection = selection(args.reproducer, args.exclude.split())[0]
    else:
        args.selection = ["--reproducer", args.reproducer[0]]
    if bool(args.baseline_ref) != bool(args.patched_ref):
        ap.error("--baseline-ref and --patched-ref go together")
    old_tree = None if args.old == "fixed" else Path(args.old).resolve()
    if old_tree is not None and not (old_tree / "lucepatch" / "__init__.py").is_file():
        ap.error(f"--old {args.old}: not a lucepatch checkout")
    old_name = f"--fixed --runs {args.runs}" if old_tree is None else f"old sequential ({old_tree.name})"
    with tempfile.TemporaryDirectory(prefix="lucepatch-bench-verify-") as tmp:
        tmp = Path(tmp)
        if args.source:
            ws, source, upstream = None, args.source.resolve(), "hami-core"
        else:
            ws, source = fakehami_workspace(tmp, args.reproducer[0])
            upstream = "fakehami fixture"
        cache = Path(os.environ.get("LUCEPATCH_BENCH_CACHE") or tmp / "cache")
        cold_s, cold = one(ws, source, cache, args, fixed=False)
        old_s, seq_s, docs = [], [], {"old": [], "sequential": []}
        for i in range(args.rounds):
            order = (True, False) if i % 2 == 0 else (False, True)
            for is_old in order:
                if is_old:
                    dt, doc = one(ws, source, cache, args, fixed=old_tree is None, tree=old_tree or ROOT)
                else:
                    dt, doc = one(ws, source, cache, args, fixed=False)
                (old_s if is_old else seq_s).append(dt)
                docs["old" if is_old else "sequential"].append(doc)
    o_doc, s_doc = docs["old"][-1], docs["sequential"][-1]
    n_old, n_seq = check_spawned(o_doc), check_spawned(s_doc)
    same = all(verdicts(d) == verdicts(o_doc) for d in docs["old"] + docs["sequential"] + [cold])
    if not same:
        for d in docs["sequential"]:
            print(f"  sequential verdicts {verdicts(d)} != old {verdicts(o_doc)}", file=sys.stderr)
    pol = s_doc["run_policy"]
    simulated = bool(s_doc.get("simulated"))
    drv = s_doc["driver"]
    where = "simulated driver" if simulated else f"{drv.get('gpu')}, driver {drv.get('version')}"
    ex = s_doc["execution"]
    o_med, s_med = statistics.median(old_s), statistics.median(seq_s)
    what = ("--all" + (f" --target {args.target}" if args.target else "")) if args.all else " ".join(
        f"--reproducer {r}" for r in args.reproducer) + (f" --exclude {args.exclude!r}" if args.exclude else "")
    refs = f" --baseline-ref {args.baseline_ref} --patched-ref {args.patched_ref}" if args.baseline_ref else ""
    print(f"verify {what}{refs} ({len(s_doc['scenarios'])} scenarios, 2 variants; {upstream}; "
          f"{where}; {os.cpu_count()} CPUs; {ex['mode']}" + (f" x{ex['jobs']}" if ex["mode"] == "parallel" else "")
          + f"), warm, median of {args.rounds} round(s), wall time of the whole command")
    print(f"  {old_name:<24} {o_med:7.2f} s   {n_old:4d} processes   verdict {o_doc['verdict']}")
    print(f"  {'sequential (max ' + str(args.runs) + ')':<24} {s_med:7.2f} s   {n_seq:4d} processes   "
          f"verdict {s_doc['verdict']}   theta {pol['theta']}")
    print(f"  ratio sequential/old: wall {s_med / o_med:.3f} ({o_med / s_med:.2f}x faster), processes "
          f"{n_seq / n_old:.3f} ({n_old} -> {n_seq}); same verdicts on every scenario: {'yes' if same else 'NO'}")
    for s in s_doc["scenarios"]:
        print(f"    {s['scenario']:<44} {s['verdict']:<10} spent {s['runs_spent']['baseline']:>2}+"
              f"{s['runs_spent'].get('patched', 0):<2} {s['mode']:<10} {s['stop_reason'][:70]}")
    go_old, go_new = where_runs_go(o_doc), where_runs_go(s_doc)
    print("  where the runs go (class: scenarios, runs old -> sequential, process-seconds old -> sequential):")
    for c in dict.fromkeys([*go_new, *go_old]):
        o, n = go_old.get(c, {"scenarios": 0, "runs": 0, "process_s": 0}), go_new.get(c, {"scenarios": 0, "runs": 0,
                                                                                             "process_s": 0})
        print(f"    {c:<24} {max(o['scenarios'], n['scenarios']):3d}   runs {o['runs']:4d} -> {n['runs']:4d}   "
              f"process-s {o['process_s']:8.1f} -> {n['process_s']:8.1f}")
    ph = ex.get("phases", {})
    print(f"  where the sequential run's time went: " + ", ".join(f"{k} {v:.2f} s" for k, v in ph.items())
          + f"; {ex['wall_s'] / max(1, n_seq):.3f} s per process of runs wall; cold (first) run {cold_s:.2f} s")
    goal = GOAL_ALL_S if args.all else GOAL_S
    goal_met = (s_med <= goal and (args.all or pol["theta"] <= 0.37)) if not simulated else None
    if not simulated:
        print(f"  goal: sequential warm <= {goal:.0f} s" + ("" if args.all else " with theta <= 0.37")
              + f": {'met' if goal_met else 'MISSED'}")
    doc = {"schema_version": 3, "kind": "lucepatch-bench-verify", "simulated": simulated, "upstream": upstream,
           "what": what + refs, "reproducer": None if args.all or len(args.reproducer) > 1 else args.reproducer[0],
           "reproducers": None if args.all else args.reproducer, "exclude": args.exclude.split(), "runs": args.runs,
           "where_runs_go": {"old": go_old, "sequential": go_new},
           "rounds": args.rounds, "old_rule": old_name,
           "old": {"wall_s": old_s, "median_s": round(o_med, 3), "processes": n_old, "verdicts": verdicts(o_doc)},
           "sequential": {"wall_s": seq_s, "median_s": round(s_med, 3), "processes": n_seq,
                          "verdicts": verdicts(s_doc), "run_policy": pol, "phases": ph,
                          "spent": {s["scenario"]: s["runs_spent"] for s in s_doc["scenarios"]}},
           "ratio": round(s_med / o_med, 4), "process_ratio": round(n_seq / n_old, 4), "same_verdicts": same,
           "cold_s": round(cold_s, 3), "goal_s": goal, "goal_met": goal_met, "driver": drv, "cpus": os.cpu_count(),
           "execution": ex}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
