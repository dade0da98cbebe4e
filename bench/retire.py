#!/usr/bin/env python3
"""Seconds a maintainer waits for "which of my patches are still needed?": `verify --retire` on the
shipped series, lucepatch before issue 36 against this one, in one run (issue 36, item 7).

    python3 bench/retire.py [--source HAMI-CORE] [--ref 52f33fc] [--pin 8f3a89c]
                            [--old REV | --old-tree DIR | --skip-old] [--out DIR] [--json FILE]

Three figures, each the wall time of one whole `lucepatch verify --retire REF --target T --driver fake
--json` process in a fresh cache, T the target of each tree's workspace whose series is on the pin
(hami-core before issue 36 moved the main line to 52f33fc, hami-core-v2.9 after):

  old cold   the lucepatch of REV (default: 5184ae5, main before issue 36; a `git worktree` of this
             repository in a temporary folder, its own workspace) at REF;
  new cold   this tree at REF;
  new warm   this tree at REF right after a retire at the pin in the same cache (the builds and the
             compiled objects a maintainer's earlier retire left; the pin's own run is not counted).

Goals (issue 36, this 2-core machine at rest): new cold <= 300 s, new warm <= 180 s. What changed
between old and new: compiled objects shared across the variants (lucepatch/native/objcache.py: a
patch touches 1-3 of HAMi-core's ~20 translation units) and runs only where a comparison needs them
(retire.measurement_plan; before, every scenario ran on every build) — and REF + Build-Only is now
built at 52f33fc (before it was not, so the old figure skipped those builds and their runs).

Printed per figure: seconds, builds made, runs measured, compiled objects reused, the statuses;
then the ratio old/new and the machine's load average at the start and end of each figure (this
machine is shared: a figure taken under load says so). The reports are kept under --out.
Without --source, LUCEPATCH_SRC_HAMI_CORE names the HAMi-core checkout (it needs both commits).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import run_group  # noqa: E402

BEFORE = "5184ae5"  # main before issue 36 (the retire of the 858 s / 1187 s figures)
PIN = "8f3a89c"
REF = "52f33fc"


def pinned_target(tree: Path, pin: str, family: str = "hami-core") -> str:
    """The target of `tree`'s workspace that carries the series on `pin` (hami-core before issue 36's
    move, the line hami-core-v2.9 after it)."""
    for toml in sorted((tree / "patches").glob("*/target.toml")):
        d = tomllib.loads(toml.read_text())
        if d.get("base", "").startswith(pin) and family in (d.get("name"), d.get("line_of")):
            return d["name"]
    raise SystemExit(f"no target of {family} on {pin} in {tree / 'patches'}")


def retire(tree: Path, cache: Path, source: Path, ref: str, out: Path, pin: str) -> dict:
    """One `verify --retire` of `tree`'s lucepatch on its own workspace (the target on the pin); its figures."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUCEPATCH_") or k == "LUCEPATCH_OBJECT_CACHE"}
    env["PYTHONPATH"] = str(tree)
    load0 = os.getloadavg()
    dt, cp = run_group([sys.executable, "-m", "lucepatch", "--cache-dir", str(cache), "verify", "--retire", ref,
                        "--target", pinned_target(tree, pin), "--source", str(source), "--driver", "fake", "--json"],
                       cwd=tree, env=env, check=False)
    load1 = os.getloadavg()
    out.write_text(cp.stdout)
    (out.with_suffix(".err")).write_text(cp.stderr)
    try:
        doc = json.loads(cp.stdout)
    except ValueError:
        raise SystemExit(f"retire at {ref} with {tree} failed ({cp.returncode}): {cp.stderr[-1500:]}")
    reused = missed = 0
    for m in (cache / "builds").glob("*/manifest.json"):
        o = json.loads(m.read_text()).get("objects") or {}
        reused, missed = reused + o.get("hit", 0), missed + o.get("miss", 0)
    return {"seconds": round(dt, 1), "exit": cp.returncode, "target": pinned_target(tree, pin), "builds": len(doc.get("builds", [])),
            "built": sum(1 for b in doc.get("builds", []) if b.get("built")),
            "runs": sum(m.get("runs", 0) for m in doc.get("measured", [])) or None,
            "objects_reused": reused, "objects_compiled": missed,
            "statuses": dict(Counter(p["status"] for p in doc["patches"])), "phases": doc.get("phases"),
            "load": [round(load0[0], 1), round(load1[0], 1)], "report": str(out)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=os.environ.get("LUCEPATCH_SRC_HAMI_CORE"))
    ap.add_argument("--ref", default=REF)
    ap.add_argument("--pin", default=PIN)
    ap.add_argument("--old", default=BEFORE, help="lucepatch revision to compare against (a worktree is made)")
    ap.add_argument("--old-tree", help="a lucepatch checkout to compare against instead of --old")
    ap.add_argument("--skip-old", action="store_true", help="only this tree's figures")
    ap.add_argument("--out", help="keep the reports here (default: a temporary folder)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    if not a.source:
        print("bench/retire.py: pass --source or set LUCEPATCH_SRC_HAMI_CORE (a HAMi-core checkout with both "
              "commits)", file=sys.stderr)
        return 3
    source = Path(a.source).resolve()
    work = Path(a.out or tempfile.mkdtemp(prefix="lp-bench-retire-"))
    work.mkdir(parents=True, exist_ok=True)
    figures: dict = {"machine": f"{os.uname().nodename}, {os.cpu_count()} CPUs", "ref": a.ref, "pin": a.pin,
                     "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if not a.skip_old:
        old = Path(a.old_tree) if a.old_tree else work / "old-tree"
        if not a.old_tree and not old.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(old), a.old], check=True)
        print(f"old cold: {old} at {a.ref} ...", file=sys.stderr)
        figures["old_cold"] = retire(old, work / "cache-old", source, a.ref, work / "old-cold.json", a.pin)
        print(f"  {figures['old_cold']}", file=sys.stderr)
    print(f"new cold: {ROOT} at {a.ref} ...", file=sys.stderr)
    figures["new_cold"] = retire(ROOT, work / "cache-new", source, a.ref, work / "new-cold.json", a.pin)
    print(f"  {figures['new_cold']}", file=sys.stderr)
    print(f"new warm: {ROOT} at {a.pin}, then at {a.ref} (counted) ...", file=sys.stderr)
    figures["new_pin"] = retire(ROOT, work / "cache-warm", source, a.pin, work / "new-pin.json", a.pin)
    figures["new_warm"] = retire(ROOT, work / "cache-warm", source, a.ref, work / "new-warm.json", a.pin)
    print(f"  {figures['new_warm']}", file=sys.stderr)
    print(f"verify --retire {a.ref} (hami-core, simulated driver) on {figures['machine']}")
    for k in ("old_cold", "new_cold", "new_pin", "new_warm"):
        f = figures.get(k)
        if f:
            print(f"  {k:9} {f['seconds']:8.1f} s  builds {f['built']}/{f['builds']}  runs {f['runs']}  objects "
                  f"reused {f['objects_reused']} compiled {f['objects_compiled']}  load {f['load'][0]}->{f['load'][1]}  "
                  f"{f['statuses']}" + (f"  phases {f['phases']}" if f.get("phases") else ""))
    if "old_cold" in figures:
        figures["ratio_cold"] = round(figures["old_cold"]["seconds"] / figures["new_cold"]["seconds"], 2)
        print(f"  old/new cold: {figures['ratio_cold']}x")
    goals = {"new_cold <= 300 s": figures["new_cold"]["seconds"] <= 300,
             "new_warm <= 180 s": figures["new_warm"]["seconds"] <= 180}
    figures["goals"] = goals
    print("  goals (at rest): " + ", ".join(f"{g}: {'met' if ok else 'NOT met'}" for g, ok in goals.items()))
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
