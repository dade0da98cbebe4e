"""In a kept patched Lucebox build tree, drop F6 (reverse its patch) and re-link: the expensive
failure in seconds. The link runs where no libcuda.so.1 can be found (a devel-image builder): in a
private mount namespace each libcuda.so.1 the machine has is covered by an empty file.

  python3 tools/lucebox_f6_relink.py SUMMARY.json OUT.json   (SUMMARY from bench/probe.py --measure-full)
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
F6 = ROOT / "patches/lucebox/submodules/llama.cpp/f6-ggml-cuda-link-cuda-driver-public.patch"


def main() -> int:
    summ = json.loads(Path(sys.argv[1]).read_text())["builds"][0] if "builds" in json.loads(Path(sys.argv[1]).read_text()) \
        else json.loads(Path(sys.argv[1]).read_text())
    bdir, src = summ["build_dir"], Path(summ["source_root"]) / "server/deps/llama.cpp"
    targets = " ".join(summ["plan"]["targets"][:2])
    out = {"build_dir": bdir}
    r = subprocess.run(["git", "apply", "-R", str(F6)], cwd=src, capture_output=True, text=True)
    if r.returncode:
        r = subprocess.run(["patch", "-R", "-p1", "-i", str(F6)], cwd=src, capture_output=True, text=True)
    out["reverted"] = r.returncode == 0
    mask = ("libs=$(ldconfig -p | awk '/libcuda\\.so\\.1 /{print $NF}'); : > /tmp/lp-empty; "
            "for f in $libs $(ls /usr/local/cuda*/compat/libcuda.so.1 2>/dev/null); do mount --bind /tmp/lp-empty \"$f\"; done; "
            f"cmake --build {bdir} --target {targets}")
    t0 = time.monotonic()
    r = subprocess.run(["unshare", "-m", "sh", "-c", mask], capture_output=True, text=True)
    out["relink_s"] = round(time.monotonic() - t0, 1)
    log = r.stdout + r.stderr
    out["rc"] = r.returncode
    out["undefined"] = sorted(set(re.findall(r"undefined reference to `(cu[A-Za-z_0-9]+)'", log)))
    out["not_found_warning"] = next((l.strip() for l in log.splitlines() if "libcuda.so.1, needed by" in l), "")
    out["steps_rerun"] = len(re.findall(r"^\[\d+/\d+\]", log, re.M))
    out["log_tail"] = log.splitlines()[-30:]
    subprocess.run(["git", "apply", str(F6)], cwd=src, capture_output=True)  # put F6 back
    Path(sys.argv[2]).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "log_tail"}, indent=1))
    return 0 if r.returncode != 0 and len(out["undefined"]) == 11 else 1


if __name__ == "__main__":
    sys.exit(main())
