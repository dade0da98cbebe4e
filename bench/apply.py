"""Benchmark: `lucepatch apply` vs `git am -3` vs `quilt push -a` on a >= 30-patch series.

The series is made at run time from HAMi-core 950c62f..8f3a89c (never committed): format-patch
--no-merges, then linearised — patches that do not apply in sequence on 950c62f are dropped.
Each tool starts from a fresh clean clone at 950c62f; best of N runs; ratios and absolute times
are printed. Not a timed test.  Usage: python bench/apply.py [--source DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASE, HEAD = "950c62f", "8f3a89c"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@b", "GIT_CONFIG_GLOBAL": os.devnull}


def sh(cwd, *args, check=True, env=None):
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env or ENV)
    if check and r.returncode:
        raise SystemExit(f"{' '.join(args)} failed: {r.stderr}")
    return r


def make_series(src: Path, tmp: Path) -> tuple[str, list[Path]]:
    base = sh(src, "git", "rev-parse", BASE).stdout.strip()
    raw = tmp / "raw"
    sh(src, "git", "format-patch", "--no-merges", "--zero-commit", "--no-signature", "--full-index", "-N",
       "-o", str(raw), f"{BASE}..{HEAD}")
    lin = tmp / "lin"
    sh(tmp, "git", "clone", "-q", str(src), str(lin))
    sh(lin, "git", "checkout", "-q", "--detach", base)
    keep = []
    for p in sorted(raw.iterdir()):
        q = subprocess.run(["patch", "-p1", "--dry-run", "--fuzz=0", "-s", "-f", "-i", str(p)], cwd=lin,
                           capture_output=True, text=True)
        if q.returncode:  # quilt (GNU patch, --fuzz=0) could not take it: drop it for all three tools
            continue
        r = sh(lin, "git", "am", "-q", "--keep-cr", str(p), check=False)
        if r.returncode:
            sh(lin, "git", "am", "--abort", check=False)
        else:
            keep.append(p)
    return base, keep


def fresh(src: Path, dest: Path, base: str):
    if dest.exists():
        shutil.rmtree(dest)
    sh(dest.parent, "git", "clone", "-q", str(src), str(dest))
    sh(dest, "git", "checkout", "-q", "-b", "bench", base)


def timed(fn, runs):
    best = None
    for _ in range(runs):
        t = fn()
        best = t if best is None else min(best, t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=os.environ.get("LUCEPATCH_SRC_HAMI_CORE", str(ROOT / ".upstream/hami-core")))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    src = Path(a.source)
    if not (src / ".git").exists():
        print(f"no-upstream: {src} is not a HAMi-core checkout; set LUCEPATCH_SRC_HAMI_CORE")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="lp-bench-apply-"))
    try:
        base, patches = make_series(src, tmp)
        print(f"series: {len(patches)} patches from HAMi-core {BASE}..{HEAD} (format-patch --no-merges, linearised)")
        ws = tmp / "ws"
        tdir = ws / "patches" / "bench"
        tdir.mkdir(parents=True)
        (ws / "lucepatch.toml").write_text("")
        names = []
        for p in patches:
            n = p.name.split("-", 1)[1]
            if n in names:
                n = p.name  # keep the number to stay unique
            shutil.copy(p, tdir / n)
            names.append(n)
        (tdir / "series").write_text("".join(f"{n}\n" for n in names))
        (tdir / "target.toml").write_text(f'name = "bench"\nupstream = "x"\nbase = "{base}"\nversion = "1.0.0"\n')
        qp = tmp / "quilt-patches"
        shutil.copytree(tdir, qp)
        repo = tmp / "repo"
        cache = tmp / "cache"

        def lucepatch():
            fresh(src, repo, base)
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(cache),
                                "apply", "bench", "--source", str(repo)], capture_output=True, text=True,
                               env={**ENV, "PYTHONPATH": str(ROOT)})
            dt = time.perf_counter() - t
            assert r.returncode == 0, r.stderr[-2000:]
            return dt

        def git_am():
            fresh(src, repo, base)
            t = time.perf_counter()
            sh(repo, "git", "am", "-3", "-q", "--keep-cr", *[str(tdir / n) for n in names])
            return time.perf_counter() - t

        def quilt():
            fresh(src, repo, base)
            env = {**ENV, "QUILT_PATCHES": str(qp), "QUILTRC": os.devnull}
            t = time.perf_counter()
            r = subprocess.run(["quilt", "push", "-a", "-q", "--fuzz=0"], cwd=repo, capture_output=True, text=True, env=env)
            dt = time.perf_counter() - t
            if r.returncode:
                print("quilt push failed:", (r.stdout + r.stderr)[-300:])
                return float("nan")
            return dt

        lp = timed(lucepatch, a.runs)
        am = timed(git_am, a.runs)
        q = timed(quilt, a.runs) if shutil.which("quilt") else float("nan")
        print(f"lucepatch apply : {lp * 1000:8.1f} ms  (private clone, index engine, commit per patch, branch switch;"
              f" includes ~python start-up)")
        print(f"git am -3       : {am * 1000:8.1f} ms")
        print(f"quilt push -a   : {q * 1000:8.1f} ms")
        print(f"ratio lucepatch / git am -3 = {lp / am:.2f}x   (goal <= 1.3x)")
        print(f"ratio lucepatch / quilt     = {lp / q:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
