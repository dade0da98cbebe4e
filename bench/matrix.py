"""Benchmark: `lucepatch matrix` vs the naive loop (checkout + git am -3 + reset per commit).

HAMi-core: every commit up to the pin ($LUCEPATCH_SRC_HAMI_CORE or .upstream/hami-core) with the
real series patches/hami-core; lucebox-hub likewise ($LUCEPATCH_SRC_LUCEBOX or .upstream/lucebox)
with patches/lucebox (the superproject series). The naive loop runs on --limit commits spread
evenly over the history and is extrapolated to all of them (as the issue's figures were); the two
sides alternate, each timed until every process it started has exited, median of --runs.
Prints both times and the ratio (goal: >= 50x and < 1 s for HAMi-core; lucebox < 1 s).
Usage: python bench/matrix.py [--limit N] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import describe, interleave, median, run_group  # noqa: E402

ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@b", "GIT_CONFIG_GLOBAL": os.devnull, "PYTHONPATH": str(ROOT)}


def sh(cwd, *args, check=True):
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=ENV)
    if check and r.returncode:
        raise SystemExit(f"{' '.join(args)}: {r.stderr}")
    return r


NAIVE = r'''
set -u
for c in "$@"; do
  git checkout -q -f --detach "$c"
  git am -3 -q --keep-cr $PATCHES >/dev/null 2>&1
  n=0
  while [ -d .git/rebase-apply ] && [ $n -lt $NPATCHES ]; do git am --skip >/dev/null 2>&1; n=$((n+1)); done
  git am --abort >/dev/null 2>&1
  git reset -q --hard "$c"
done
'''


def bench(name: str, src: Path, target: str, limit: int, runs: int):
    tmp = Path(tempfile.mkdtemp(prefix="lp-bench-matrix-"))
    try:
        repo = tmp / "repo"
        sh(tmp, "git", "clone", "-q", "--no-checkout", str(src), str(repo))
        head = sh(src, "git", "rev-parse", "HEAD").stdout.strip()
        sparse = src / ".git" / "info" / "sparse-checkout"
        if sparse.is_file():  # a mirror without some blobs (lucebox): check out what it has, like the source
            sh(repo, "git", "sparse-checkout", "set", "--no-cone", *sparse.read_text().split())
        sh(repo, "git", "checkout", "-q", "-f", "--detach", head, check=False)
        # the submodules (lucebox: llama.cpp, Block-Sparse-Attention) as the source has them, sharing its
        # objects: matrix follows each one through the superproject's gitlinks, as on a user's checkout
        mods = sh(repo, "git", "config", "-f", ".gitmodules", "--get-regexp", r"\.path$", check=False).stdout.split()[1::2]
        for path in mods:
            if (src / path / ".git").exists():
                sh(tmp, "git", "clone", "-q", "--shared", "--no-checkout", str(src / path), str(repo / path))
        root = sh(repo, "git", "rev-list", "--max-parents=0", head).stdout.split()[-1]
        rng = f"{root}..{head}"
        series = (ROOT / "patches" / target / "series").read_text().split()
        pfiles = " ".join(str(ROOT / "patches" / target / n) for n in series)
        cache = tmp / "cache"
        doc = {}

        def lucepatch():
            dt, r = run_group([sys.executable, "-m", "lucepatch", "--workspace", str(ROOT), "--cache-dir", str(cache),
                               "matrix", target, "--source", str(repo), "--range", rng, "--json"], env=ENV)
            doc.update(json.loads(r.stdout))
            return dt

        lucepatch()  # warm the OS caches and (once) lucepatch's private clone, as a user's second run
        commits = [c["commit"] for c in doc["commits"]]
        step = max(1, len(commits) // max(1, limit))
        sample = commits[::step][:limit]

        def naive():
            dt, _ = run_group(["bash", "-c", NAIVE, "naive", *sample], cwd=repo, env={**ENV, "PATCHES": pfiles, "NPATCHES": str(len(series))},
                              check=False)
            return dt / len(sample) * len(commits)

        times = interleave({"lucepatch": lucepatch, "naive": naive}, runs)
        lp, nv = median(times["lucepatch"]), median(times["naive"])
        ev = doc.get("evaluation", {})
        print(f"{name}: {len(commits)} commits x {len(series)} patches ({doc['distinct_states']} distinct states; "
              f"{ev.get('method')}, {ev.get('file_evaluations', '?')} file evaluations, {ev.get('git_runs', '?')} git runs)")
        print(f"  lucepatch matrix : {describe(times['lucepatch'])}  (whole CLI run)")
        print(f"  naive loop       : {describe(times['naive'])}  (extrapolated from {len(sample)} of "
              f"{len(commits)} commits)")
        print(f"  ratio naive / lucepatch = {nv / lp:6.1f}x   (goal >= 50x, lucepatch < 1 s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=40, help="naive-loop commits per run (spread over the history)")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    for name, env, default, target in (("HAMi-core", "LUCEPATCH_SRC_HAMI_CORE", ".upstream/hami-core", "hami-core"),
                                       ("lucebox-hub", "LUCEPATCH_SRC_LUCEBOX", ".upstream/lucebox", "lucebox")):
        src = Path(os.environ.get(env) or ROOT / default)
        if (src / ".git").exists():
            bench(name, src, target, a.limit, a.runs)
        else:
            print(f"no-upstream: {name} checkout missing (set {env})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
