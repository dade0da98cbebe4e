"""Benchmark: `lucepatch matrix` vs the naive loop (checkout + git am -3 + reset per commit).

HAMi-core (all commits up to the pin, $LUCEPATCH_SRC_HAMI_CORE or .upstream/hami-core) with the
real series patches/hami-core; lucebox-hub only when $LUCEPATCH_SRC_LUCEBOX is set (with the
series patches/lucebox). Prints absolute times and the ratio (goal >= 20x and < 10 s on 2 cores).
Usage: python bench/matrix.py [--limit N]   (--limit: naive loop on the first N commits, extrapolated)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@b", "GIT_CONFIG_GLOBAL": os.devnull, "PYTHONPATH": str(ROOT)}


def sh(cwd, *args, check=True):
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=ENV)
    if check and r.returncode:
        raise SystemExit(f"{' '.join(args)}: {r.stderr}")
    return r


def bench(name: str, src: Path, target: str, limit: int | None):
    tmp = Path(tempfile.mkdtemp(prefix="lp-bench-matrix-"))
    try:
        repo = tmp / "repo"
        sh(tmp, "git", "clone", "-q", str(src), str(repo))
        head = sh(repo, "git", "rev-parse", "HEAD").stdout.strip()
        root = sh(repo, "git", "rev-list", "--max-parents=0", "HEAD").stdout.split()[-1]
        rng = f"{root}..{head}"
        series = (ROOT / "patches" / target / "series").read_text().split()
        pfiles = [str(ROOT / "patches" / target / n) for n in series]
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(ROOT), "--cache-dir", str(tmp / "c"),
                            "matrix", target, "--source", str(repo), "--range", rng, "--json"],
                           capture_output=True, text=True, env=ENV)
        lp = time.perf_counter() - t
        if r.returncode:
            raise SystemExit(r.stderr[-2000:])
        doc = json.loads(r.stdout)
        commits = [c["commit"] for c in doc["commits"]]
        naive_commits = commits[:limit] if limit else commits
        sh(repo, "git", "checkout", "-q", "--detach", head)
        t = time.perf_counter()
        for c in naive_commits:
            sh(repo, "git", "checkout", "-q", "-f", "--detach", c)
            res = sh(repo, "git", "am", "-3", "-q", "--keep-cr", *pfiles, check=False)
            while res.returncode and (repo / ".git" / "rebase-apply").exists():
                res = sh(repo, "git", "am", "--skip", check=False)
            sh(repo, "git", "am", "--abort", check=False)
            sh(repo, "git", "reset", "-q", "--hard", c)
        naive = time.perf_counter() - t
        if limit and len(naive_commits) < len(commits):
            naive = naive / len(naive_commits) * len(commits)
        print(f"{name}: {len(commits)} commits x {len(series)} patches ({doc['distinct_states']} distinct states)")
        print(f"  lucepatch matrix : {lp:7.2f} s (whole CLI run)")
        print(f"  naive loop       : {naive:7.2f} s{' (extrapolated from %d commits)' % len(naive_commits) if limit else ''}")
        print(f"  ratio            : {naive / lp:6.1f}x   (goal >= 20x, < 10 s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args()
    hami = Path(os.environ.get("LUCEPATCH_SRC_HAMI_CORE", ROOT / ".upstream/hami-core"))
    if (hami / ".git").exists():
        bench("HAMi-core", hami, "hami-core", a.limit)
    else:
        print("no-upstream: HAMi-core checkout missing (LUCEPATCH_SRC_HAMI_CORE)")
    lb = os.environ.get("LUCEPATCH_SRC_LUCEBOX")
    if lb:
        bench("lucebox-hub", Path(lb), "lucebox", a.limit)
    else:
        print("lucebox-hub: skipped (LUCEPATCH_SRC_LUCEBOX not set; no lucebox history on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
