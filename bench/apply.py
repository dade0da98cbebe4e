"""Benchmark: `lucepatch apply` vs `git am -3` vs `quilt push -a` on a >= 30-patch series.

The series is made at run time from HAMi-core 950c62f..8f3a89c (never committed): format-patch
--no-merges, then linearised — patches that do not apply in sequence on 950c62f are dropped.
Each tool starts from a fresh clean clone at 950c62f (made outside the timing); the three run
interleaved, each timed until every process it started has exited (bench/_timing.py); the median
of --runs per tool, the ratios and the time `lucepatch --help` takes are printed in the same run.
Not a timed test.  Usage: python bench/apply.py [--source DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import describe, interleave, median, run_group  # noqa: E402

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


def clean_venv(dest: Path) -> Path:
    """A venv whose site-packages holds one .pth naming this checkout and the running interpreter's
    library folders: lucepatch and its dependencies import as after `pip install .` in a fresh venv,
    without the .pth files of the running interpreter's site-packages (an editable install's finder,
    a sandbox's certificate hook: start-up cost that is the machine's, not lucepatch's). Lines of a
    .pth only extend sys.path; the .pth files in the folders they name are not run."""
    import site
    import sysconfig
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(dest)
    py = dest / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    dirs = dict.fromkeys([str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                          *site.getsitepackages()])
    (Path(purelib) / "lucepatch-bench.pth").write_text("".join(f"{d}\n" for d in dirs))
    return py


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

        lp_env = {**ENV, "PYTHONPATH": str(ROOT)}

        def lucepatch():
            dt, _ = run_group([sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(cache),
                               "apply", "bench", "--source", str(repo)], env=lp_env)
            return dt

        def git_am():
            dt, _ = run_group(["git", "am", "-3", "-q", "--keep-cr", *[str(tdir / n) for n in names]], cwd=repo)
            return dt

        def quilt():
            env = {**ENV, "QUILT_PATCHES": str(qp), "QUILTRC": os.devnull}
            dt, _ = run_group(["quilt", "push", "-a", "-q", "--fuzz=0"], cwd=repo, env=env)
            return dt

        def helptime():
            dt, _ = run_group([sys.executable, "-m", "lucepatch", "--help"], env=lp_env)
            return dt

        clean = clean_venv(tmp / "venv")

        def helptime_clean():
            dt, _ = run_group([str(clean), "-m", "lucepatch", "--help"], env=ENV)
            return dt

        sides = {"lucepatch": lucepatch, "git am -3": git_am}
        if shutil.which("quilt"):
            sides["quilt"] = quilt
        times = interleave(sides, a.runs, prepare=lambda _n: fresh(src, repo, base))
        helps = [helptime() for _ in range(a.runs)]
        bare = [run_group([sys.executable, "-c", "pass"])[0] for _ in range(a.runs)]
        helps_clean = [helptime_clean() for _ in range(a.runs)]
        bare_clean = [run_group([str(clean), "-c", "pass"])[0] for _ in range(a.runs)]
        lp, am = median(times["lucepatch"]), median(times["git am -3"])
        q = median(times.get("quilt", []))
        print(f"lucepatch apply : {describe(times['lucepatch'])}  (whole CLI run: checks, {len(patches)} commits, "
              "transactional branch switch)")
        print(f"git am -3       : {describe(times['git am -3'])}")
        print(f"quilt push -a   : {describe(times.get('quilt', []))}")
        print(f"lucepatch --help: {describe(helps)}  (goal < 150 ms; this interpreter, whose start-up runs every "
              f"site .pth file it has; bare `python -c pass`: {median(bare) * 1000:.1f} ms)")
        print(f"  in a clean venv: {describe(helps_clean)}  (what `pip install .` in a fresh venv starts with; bare "
              f"`python -c pass`: {median(bare_clean) * 1000:.1f} ms)")
        print(f"ratio lucepatch / git am -3 = {lp / am:.2f}x   (goal <= 1.3x)")
        print(f"ratio lucepatch / quilt     = {lp / q:.2f}x   (goal <= 0.5x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
