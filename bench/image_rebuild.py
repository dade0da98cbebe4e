"""Benchmark P5: rebuild a compile-dominated fixture image after one patch edit, with a compiler
cache (ccache) carried between builds, against the cold build. Goal: warm <= 15% of cold.

The cudaproj fixture gets N generated C translation units (src/gen/) and a 4th series patch that
changes one of them. Cold: empty ccache. Then the patch is edited (a different constant in the same
TU, regenerated with git format-patch) and the image rebuilt with the ccache the cold build left
(the build stage's /ccache is copied out of the image and into the next build context: the docker
SDK talks to the legacy builder, which has no BuildKit cache mounts). Recompiled TUs = ccache
misses printed in the build log (`ccache --print-stats` inside the RUN step); total TUs = compile
commands in the log (ninja -v).

Needs: a Docker engine, ccache on the host (it goes into the offline base image).
Usage: python bench/image_rebuild.py [--tus 64] [--funcs 500] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "cudaproj"))

import make_fixture  # noqa: E402

from lucepatch.builders import image as img  # noqa: E402
from lucepatch.target import load_target_dir  # noqa: E402


def gen_tu(i: int, n: int, k: int = 7) -> str:
    out = [f"/* generated TU {i} */\n#include <math.h>\n#define K {k}\n"]
    for j in range(n):
        out.append(f"double gen_{i}_{j}(const double *v, int n) {{ double s = {j}.0; for (int a = 0; a < n; a++) "
                   f"{{ s += v[a] * (a % K + {j % 13}) / (1.0 + a); if (s > 1e9) s = sqrt(s); }} return s; }}\n")
    out.append(f"double gen_{i}_all(const double *v, int n) {{ return 0"
               + "".join(f" + gen_{i}_{j}(v, n)" for j in range(n)) + "; }\n")
    return "".join(out)


def add_tuning_patch(fx: dict, value: int, name: str = "perf-tune-gen-07.patch") -> None:
    """Series patch #4: K in src/gen/tu_07.c (regenerated with real git on each edit)."""
    up = fx["upstream"]
    git = lambda *a: make_fixture.git(up, *a)  # noqa: E731
    git("checkout", "-q", "-B", "tune", fx["base"])
    path = up / "src" / "gen" / "tu_07.c"
    path.write_text(path.read_text().replace("#define K 7", f"#define K {value}"))
    git("commit", "-q", "-am", f"perf(gen): K={value} in tu_07\n\nUpstream-Status: Inappropriate [benchmark]\n{make_fixture.SOB}")
    out = git("format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "-1", "--stdout", "tune")
    git("checkout", "-q", "main")
    git("branch", "-q", "-D", "tune")
    (fx["tdir"] / name).write_text(out)
    series = fx["tdir"] / "series"
    lines = series.read_text().splitlines()
    if name not in lines:
        series.write_text("\n".join(lines + [name]) + "\n")


def stats(log: str) -> dict:
    """ccache counters printed after the compile, and the compile commands ninja -v printed."""
    tail = log.split("ccache-stats:", 1)[1] if "ccache-stats:" in log else ""
    get = lambda k: int(m.group(1)) if (m := re.search(rf"^{k}\s+(\d+)", tail, re.M)) else 0  # noqa: E731
    compiles = len(re.findall(r"^\[\d+/\d+\] .*\s-c\s", log, re.M))
    return {"ccache_misses": get("cache_miss"), "ccache_hits": get("direct_cache_hit") + get("preprocessed_cache_hit"),
            "compile_commands": compiles}


def build(fx, cache: Path, ccache_dir: Path, label: str, nocache: bool = False) -> dict:
    t = load_target_dir(fx["tdir"])
    log_dir = cache / f"img-{label}"
    t0 = time.monotonic()
    res = img.build_image(t, fx["upstream"], "cpu", cache, repo="lucepatch-bench/cudaproj", ccache_dir=ccache_dir,
                          log_dir=log_dir, closure=True, nocache=nocache)
    secs = time.monotonic() - t0
    log = res.log.read_text(errors="replace")
    keep = Path(os.environ.get("LUCEPATCH_BENCH_LOGS", tempfile.gettempdir())) / f"image_rebuild-{label}.log"
    shutil.copy(res.log, keep)
    return {"seconds": round(secs, 1), **stats(log), "compile_step_s": compile_step_seconds(log),
            "docker_build_s": round(sum(build_times(log)), 1), "log": str(keep), "tag": res.tag}


def _steps(log: str) -> list[tuple[float, str]]:
    return [(float(m.group(1)), m.group(2)) for m in re.finditer(r"^\[\s*([\d.]+)s\] Step \d+/\d+ : (.*)$", log, re.M)]


def compile_step_seconds(log: str) -> float | None:
    """Duration of the RUN step that configures and compiles (to the next step's timestamp)."""
    steps = _steps(log)
    for i, (t, text) in enumerate(steps):
        if text.startswith("RUN") and "cmake --build" in text and i + 1 < len(steps) and steps[i + 1][0] >= t:
            return round(steps[i + 1][0] - t, 1)
    return None


def build_times(log: str) -> list[float]:
    """Wall time of each docker build pass (the last step's timestamp; a pass restarts at 0)."""
    out, last = [], 0.0
    for t, _ in _steps(log):
        if t < last:
            out.append(last)
        last = t
    return out + [last]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tus", type=int, default=64)
    ap.add_argument("--funcs", type=int, default=500)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not shutil.which("ccache"):
        print("image_rebuild: ccache is not installed on this host (apt-get install ccache)", file=sys.stderr)
        return 3
    for args in ([], ["--flavour", "rt"]):
        subprocess.run(["bash", str(ROOT / "tests/fixtures/cudaproj/make_base.sh"), *args], check=True, capture_output=True)
    tmp = Path(tempfile.mkdtemp(prefix="lp-bench-rebuild-"))
    try:
        fx = make_fixture.make(tmp, extra_files={f"src/gen/tu_{i:02d}.c": gen_tu(i, a.funcs) for i in range(a.tus)})
        add_tuning_patch(fx, 11)
        ccache_dir = tmp / "ccache"
        ccache_dir.mkdir()
        cold = build(fx, tmp / "cache", ccache_dir, "cold", nocache=True)  # no docker layer cache either
        add_tuning_patch(fx, 13)  # the one patch edit
        warm = build(fx, tmp / "cache", ccache_dir, "warm")
        ratio = warm["seconds"] / cold["seconds"]
        doc = {"benchmark": "P5 image rebuild after one patch edit, ccache carried", "tus": a.tus + 1,
               "cold": cold, "warm": warm, "ratio": round(ratio, 3), "goal": 0.15, "met": ratio <= 0.15,
               "machine": f"{platform.node()} {os.cpu_count()} cpu", "date": time.strftime("%Y-%m-%d")}
        print(json.dumps(doc, indent=2))
        doc["compile_step_ratio"] = round((warm["compile_step_s"] or 0) / (cold["compile_step_s"] or 1), 3)
        print(f"cold {cold['seconds']}s ({cold['ccache_misses']} TUs compiled), warm {warm['seconds']}s "
              f"({warm['ccache_misses']} recompiled, {warm['ccache_hits']} from ccache): {ratio:.1%} of cold "
              f"(goal <= 15%: {'met' if ratio <= 0.15 else 'NOT met'})", file=sys.stderr)
        if a.out:
            Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
