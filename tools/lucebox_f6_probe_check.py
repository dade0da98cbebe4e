"""Judge a `lucepatch probe TARGET --both --only F6 --json` document: the F6 baseline re-measured.

  python3 tools/lucebox_f6_probe_check.py PROBE.json [SUMMARY.json]

F6 is right when the baseline's F6 probe FAILS with its declared signature (the link of a
driver-less builder: libcuda.so.1 not found + the undefined cu* symbols) and the patched one
passes. On a GPU host the probe's link runs with every libcuda.so.1 ld could find masked
(lucepatch/builders/driverless.py); `driver_masked` says which. The committed H200 log of
bench-probe (docs/lucebox/bench-probe.h200.log) predates that mask and shows the baseline passing.
Exit 0 = F6 proven both ways, 1 = not (the line says why), 2 = no F6 result in the document.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def judge(doc: dict) -> tuple[int, dict]:
    found = {}
    for run in doc.get("runs") or []:
        for p in run.get("probes") or []:
            if p.get("fix") == "F6":
                found[p.get("variant") or run.get("variant")] = p
    if set(found) != {"baseline", "patched"}:
        return 2, {"verdict": "no-result", "why": f"F6 results for {sorted(found)}, need baseline and patched"}
    b, pt = found["baseline"], found["patched"]
    masked = (b.get("evidence") or {}).get("driver_masked") or []
    out = {"baseline": {"status": b["status"], "as_declared": b.get("as_declared"), "first_error": b.get("first_error"),
                        "seconds": b.get("seconds")},
           "patched": {"status": pt["status"], "detail": pt.get("detail"), "seconds": pt.get("seconds")},
           "driver_masked": masked}
    if b["status"] == "fail" and b.get("as_declared") and pt["status"] == "pass":
        out["verdict"] = "proven"
        out["why"] = (f"F6 baseline fails as declared ({b.get('first_error')}), patched passes; "
                      f"{len(masked)} libcuda.so.1 path(s) masked for the link")
        return 0, out
    out["verdict"] = "not-proven"
    out["why"] = f"F6 baseline {b['status']} (as declared: {b.get('as_declared')}), patched {pt['status']}: {b.get('detail')}"
    return 1, out


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    rc, out = judge(json.loads(Path(argv[1]).read_text()))
    if len(argv) == 3:
        Path(argv[2]).write_text(json.dumps(out, indent=2) + "\n")
    print(f"F6 baseline re-measured: {out['verdict']}: {out['why']}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
