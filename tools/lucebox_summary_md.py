"""Render the GPU step's outputs as the committed full-build summary (docs/lucebox/), paths masked.

  python3 tools/lucebox_summary_md.py OUTDIR [COMMIT_DIR] > full-build-sm120-cuda13.md
COMMIT_DIR: also write the four JSON files there with cache and work paths masked (what to commit).
OUTDIR holds lucebox-full-build.sm120-cuda13.json, bench-probe.h200.json, lucebox-baseline-build.json
and lucebox-f6-relink.json (tools/gpu_session.sh lucebox-build). Prints markdown.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def load(d: Path, name: str):
    p = d / name
    if not p.is_file():
        return None
    doc = json.loads(p.read_text())
    return doc["builds"][0] if isinstance(doc, dict) and "builds" in doc else doc


def mask(s: str) -> str:
    s = re.sub(r"/tmp/[^\s\"',)]*?/(superbuilds|work|logs|probe-standins)/", r"<cache>/\1/", str(s))
    return re.sub(r"/tmp/lbx-src\b", "<carried-source>", s)


def main() -> int:
    d = Path(sys.argv[1])
    full, bench = load(d, "lucebox-full-build.sm120-cuda13.json"), load(d, "bench-probe.h200.json")
    base, relink = load(d, "lucebox-baseline-build.json"), load(d, "lucebox-f6-relink.json")
    out = ["# Lucebox full build on the GPU machine (sm120-cuda13)", ""]
    if full:
        out += [f"Patched, profile `{full['profile']}`, -j {full['jobs']}: configure {full['configure_s']} s, build "
                f"{full['build_s']} s, {full['steps_done']}/{full['steps_total']} steps, ok = {full['ok']}.", "",
                "| file | sha256 | SASS | PTX | fatbins | vs profile |", "|---|---|---|---|---|---|"]
        libs = full["sass"].get("libraries", {})
        for f, sha in full["files"].items():
            s = libs.get(f)
            if s or f.startswith("bin/"):
                note = "" if not s else ("ok" if not (s["missing"] or s["unexpected"] or s["arch_specific"]) else
                                         f"missing {s['missing']} unexpected {s['unexpected']} arch-specific {s['arch_specific']}")
                out.append(f"| {f} | `{sha[:16]}` | {', '.join(s['sass']) if s else ''} | {', '.join(s['ptx']) if s else ''} "
                           f"| {s['fatbins'] if s else ''} | {note} |")
        out += ["", "SASS per object of the build tree (target: SASS set x objects):", ""]
        out += [f"- {t}: " + ", ".join(f"{k} x {n}" for k, n in v.items()) for t, v in full["sass"].get("objects", {}).items()]
        out += ["", "Arch flags per target:", ""]
        out += [f"- {t}: " + "; ".join(f"`{k}` x {n}" for k, n in v.items()) for t, v in full.get("arch_flags", {}).items()]
        cl = full["closure"]
        out += ["", f"Closure: ok = {cl['ok']}, {cl['objects']} objects, absent as allowed: {cl['absent_allowed']}, "
                f"missing: {cl['missing'] or 'none'}.", ""]
    if bench and "ratio" not in bench:
        out += [f"Probe/full ratio not measured: {bench.get('full_build_error', 'the full build did not run')}", ""]
    elif bench:
        out += [f"Probes vs full build, one run on one machine: probes {bench['probe_s']} s, full build "
                f"{bench['full_build_s']} s, ratio {bench['ratio']:.1%} (goal <= 12.5 %: {'met' if bench['met'] else 'NOT met'}).", ""]
        out += [f"- {r['variant']}: {r['seconds']} s, ok = {r['ok']}, per fix {r['probes']}" for r in bench["runs"]]
        out.append("")
    if base:
        f = base.get("failure") or {}
        out += [f"Unpatched (baseline) build: ok = {base['ok']}, failed in {f.get('phase')} after configure "
                f"{base['configure_s']} s + build {base['build_s']} s at step {base['steps_done']}/{base['steps_total']}: "
                f"`{mask(f.get('first_error', ''))[:200]}`", ""]
    if relink:
        out += [f"F6 dropped in the kept tree, re-linked ({'driver masked' if relink['driver_masked'] else 'no driver present'}): "
                f"rc {relink['rc']} in {relink['seconds']} s, {relink['steps_rerun']} steps, "
                f"{len(relink['undefined'])} undefined: {', '.join(relink['undefined'])}", "",
                f"`{mask(relink['not_found_warning'])}`", ""]
    print(mask("\n".join(out)))
    if len(sys.argv) > 2:
        dest = Path(sys.argv[2])
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("lucebox-full-build.sm120-cuda13.json", "bench-probe.h200.json", "lucebox-baseline-build.json",
                     "lucebox-f6-relink.json"):
            if (d / name).is_file():
                (dest / name).write_text(mask((d / name).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
