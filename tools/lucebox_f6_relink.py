"""Drop F6 in a kept patched Lucebox build tree and re-link: the expensive failure in seconds.

  python3 tools/lucebox_f6_relink.py SUMMARY.json OUT.json
SUMMARY: `build lucebox --keep-build --summary` or `bench/probe.py --measure-full` output. Exit 0
when the re-link fails with the 11 undefined cuMem*/cu* driver symbols (as upstream does).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.builders.superbuild import relink_dropping  # noqa: E402

F6 = ROOT / "patches/lucebox/submodules/llama.cpp/f6-ggml-cuda-link-cuda-driver-public.patch"


def main() -> int:
    doc = json.loads(Path(sys.argv[1]).read_text())
    b = doc["builds"][0] if "builds" in doc else doc
    if not b.get("build_dir") or not b.get("source_root"):
        print("lucebox_f6_relink: the summary has no kept build tree (build with --keep-build)", file=sys.stderr)
        return 2
    out = relink_dropping(Path(b["build_dir"]), Path(b["source_root"]) / "server/deps/llama.cpp", F6,
                          ["dflash_server", "test_dflash"])
    Path(sys.argv[2]).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "log_tail"}, indent=1))
    if out.get("driver_visible") and out["rc"] == 0:
        print(f"lucebox_f6_relink: inconclusive: {', '.join(out['driver_visible'])} stayed visible to ld (masking needs "
              "root and unshare), so a passing re-link does not show a driver-less builder's", file=sys.stderr)
        return 3
    return 0 if out["rc"] != 0 and len([s for s in out["undefined"] if s.startswith("cu")]) == 11 else 1


if __name__ == "__main__":
    sys.exit(main())
