#!/usr/bin/env python3
"""Write lucepatch/data/hami_core_names.toml from a HAMi-core checkout (lucepatch.lines.history).

Usage: tools/hami_core_names.py HAMI_CORE_CHECKOUT [REF] [--out FILE] [--check]

REF (default 52f33fc, the main line's base since issue 36; 8f3a89c, the v2.9 line's, is on its first-parent history): every commit of its first-parent history, the
sources scanned where src/ changed. --check compares with the packaged file instead of writing and exits 1 when
they differ (tests/test_identity.py runs it under LUCEPATCH_SRC_HAMI_CORE).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tomlkit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lucepatch.lines import history  # noqa: E402

HEADER = """\
# What upstream HAMi-core's sources define, along its first-parent history (lucepatch.lines.history).
# Written by tools/hami_core_names.py from a HAMi-core checkout; do not edit by hand.
#
# names  = every name (function or variable at file scope, i.e. what a Debug build exports) any
#          commit defined, driver entry points by family (cuMemAdvise_v2 -> cuMemAdvise): a library
#          exporting a name outside this list carries code upstream HAMi-core never had
# state  = one per change of the hook set (cu*/nvml* families) or of the shared-region version:
#          first = the first commit with it, last = the last first-parent commit
#          before the next state; commits = all of them (12 hex digits), oldest first;
#          hooks_added/hooks_removed relative to the previous state
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout")
    ap.add_argument("ref", nargs="?", default="52f33fc7fa1fbb3f08148ab076d0e7447bec7f2a")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "lucepatch" / "data" / history.DATA_NAME))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    scans = history.scan_history(a.checkout, a.ref)
    data = history.to_data(scans, ref=a.ref, source="Project-HAMi/HAMi-core, first-parent history of ref (sources scanned where src/ changed)")
    doc = tomlkit.document()
    for k in ("schema_version", "source", "ref", "commits"):
        doc[k] = data[k]
    arr = tomlkit.array()
    arr.multiline(True)
    arr.extend(data["names"])
    doc["names"] = arr
    aot = tomlkit.aot()
    for st in data["state"]:
        t = tomlkit.table()
        for k, v in st.items():
            if isinstance(v, list):
                a2 = tomlkit.array()
                a2.extend(v)
                a2.multiline(len(v) > 6)
                t[k] = a2
            else:
                t[k] = v
        aot.append(t)
    doc["state"] = aot
    text = HEADER + tomlkit.dumps(doc)
    out = Path(a.out)
    if a.check:
        same = out.is_file() and out.read_text() == text
        print(f"{out}: {'up to date' if same else 'differs from the scan of ' + a.checkout}")
        return 0 if same else 1
    out.write_text(text)
    print(f"{out}: {len(data['names'])} names, {len(data['state'])} states from {data['commits']} commits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
