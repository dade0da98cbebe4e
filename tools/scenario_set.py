#!/usr/bin/env python3
"""verify's selection arguments for a set of reproducers less some scenarios, on one line:

    python3 tools/scenario_set.py [--exclude "repro:scenario ..."] REPRODUCER...
    -> --reproducer A --reproducer B ... [--scenario A:x --scenario B:y ...]

`verify --scenario` filters every selected reproducer at once (controls always run), so leaving one
scenario out means naming all the others; without --exclude no --scenario is printed. Used by
tools/gpu_session.sh pr188-all (PR188_REPROS / PR188_EXCLUDE); reads this checkout's reproducers/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.verify.reproducer import load_reproducer_dir  # noqa: E402


def selection(names: list[str], exclude: list[str], root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(verify arguments, every scenario key the run covers, controls included)."""
    repros = []
    for n in names:
        d = root / "reproducers" / n
        if not (d / "reproducer.toml").is_file():
            raise SystemExit(f"scenario_set: no reproducer {n!r} under {root / 'reproducers'}")
        repros.append(load_reproducer_dir(d))
    known = {f"{r.name}:{s.name}" for r in repros for s in r.scenarios}
    unknown = [k for k in exclude if k not in known]
    if unknown:
        raise SystemExit(f"scenario_set: --exclude {', '.join(unknown)}: no such scenario of {', '.join(names)}")
    args = [a for r in repros for a in ("--reproducer", r.name)]
    covered = [f"{r.name}:{s.name}" for r in repros for s in r.scenarios if f"{r.name}:{s.name}" not in exclude]
    if exclude:
        controls = {f"{r.name}:{s.name}" for r in repros for s in r.scenarios if s.control}
        if any(k in controls for k in exclude):
            raise SystemExit("scenario_set: a control always runs; it cannot be excluded")
        args += [a for k in covered if k not in controls for a in ("--scenario", k)]
    return args, covered


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exclude", default="", help="reproducer:scenario keys, space-separated")
    ap.add_argument("--count", action="store_true", help="print how many scenarios the selection covers")
    ap.add_argument("reproducers", nargs="+")
    a = ap.parse_args(argv)
    args, covered = selection(a.reproducers, a.exclude.split())
    print(len(covered) if a.count else " ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
