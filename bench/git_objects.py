"""Reading repository objects: GitPython (what lucepatch/git.py uses for refs, HEAD, subjects,
config, remotes) vs one `git` process per question (what it did before), in the same run.

    python3 bench/git_objects.py [--repo PATH] [--n 200]

Prints per-call times and the ratio. The engine's hot paths (apply --cached, write-tree,
commit-tree/hash-object, patch-id, format-patch, batched log) stay on the git CLI.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lucepatch import git  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args()
    revs = subprocess.run(["git", "-C", a.repo, "rev-list", "--max-count", str(a.n), "HEAD"],
                          capture_output=True, text=True, check=True).stdout.split()
    rows = []
    for what, ours, cli in (
        ("resolve an abbreviated id", lambda r: git.try_resolve(a.repo, r[:10]),
         lambda r: subprocess.run(["git", "-C", a.repo, "rev-parse", "--verify", "--quiet", f"{r[:10]}^{{commit}}"],
                                  capture_output=True, text=True).stdout.strip()),
        ("subject of a commit", lambda r: git.subject(a.repo, r),
         lambda r: subprocess.run(["git", "-C", a.repo, "log", "-1", "--format=%s", r],
                                  capture_output=True, text=True).stdout.strip()),
    ):
        t0 = time.perf_counter()
        mine = [ours(r) for r in revs]
        t1 = time.perf_counter()
        theirs = [cli(r) for r in revs]
        t2 = time.perf_counter()
        agree = sum(x == y for x, y in zip(mine, theirs))
        rows.append((what, (t1 - t0) / len(revs) * 1e3, (t2 - t1) / len(revs) * 1e3, agree))
    print(f"{len(revs)} commits of {a.repo}")
    for what, ms_ours, ms_cli, agree in rows:
        print(f"{what:28} lucepatch (GitPython) {ms_ours:6.2f} ms   git CLI {ms_cli:6.2f} ms   "
              f"ratio {ms_ours / ms_cli:5.2f}   same answer {agree}/{len(revs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
