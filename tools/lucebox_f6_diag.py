"""Why the F6 re-link passed or failed: which libcuda ld opened for the executable's link.

  python3 tools/lucebox_f6_diag.py SUMMARY.json OUT.txt
Run right after tools/lucebox_f6_relink.py on the same kept tree (its build.ninja is then the one
configured without F6). Records: dflash_server's link line (without F6) and its libcuda arguments,
libggml-cuda's NEEDED and RUNPATH, CMakeCache's CUDA_cuda_driver_LIBRARY, every libcuda* file of
the host's library folders, then the link run again into a scratch file with -Wl,--verbose in the
same masked namespace as the re-link (builders/driverless.py): every libcuda path ld tried, and
whether it found one. A diagnosis tool for the GPU host; it changes nothing in the build tree.
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.builders import driverless  # noqa: E402

TARGET = "dflash_server"


def sh(argv: list[str], cwd: str | None = None) -> str:
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    return (r.stdout + r.stderr).strip()


def main() -> int:
    doc = json.loads(Path(sys.argv[1]).read_text())
    b = doc["builds"][0] if "builds" in doc else doc
    bdir = b.get("build_dir")
    if not bdir:
        print("lucebox_f6_diag: the summary has no kept build tree (build with --keep-build)", file=sys.stderr)
        return 2
    out: list[str] = []
    link = sh(["ninja", "-C", bdir, "-t", "commands", TARGET]).splitlines()[-1]
    args = sorted(set(re.findall(r"\S*(?:libcuda|-lcuda\b)\S*", link))) or ["(none)"]
    out += ["# dflash_server's link line (build.ninja as configured last)", link, "",
            "# its libcuda / cuda_driver arguments", *args, ""]
    for lib in sorted(glob.glob(f"{bdir}/**/libggml-cuda.so*", recursive=True)):
        if os.path.islink(lib):
            continue
        dyn = [l for l in sh(["readelf", "-d", lib]).splitlines() if "NEEDED" in l or "RUNPATH" in l or "RPATH" in l]
        out += [f"# {os.path.relpath(lib, bdir)}: NEEDED / RUNPATH", *dyn, ""]
    cache = Path(bdir) / "CMakeCache.txt"
    if cache.is_file():
        out += ["# CMakeCache", *[l for l in cache.read_text().splitlines() if "cuda_driver" in l.lower()
                                  or l.startswith("CUDA_cuda")], ""]
    files = sorted({p for d in ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib/x86_64-linux-gnu",
                                "/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib", "/usr/local/nvidia/lib64",
                                "/usr/local/cuda/lib64", "/usr/local/cuda/lib64/stubs", "/usr/local/cuda/compat",
                                "/usr/local/cuda/targets/x86_64-linux/lib/stubs"]
                    for p in glob.glob(f"{d}/libcuda.so*")})
    out += ["# libcuda files here (-> symlink target)",
            *[f"{p} -> {os.readlink(p)}" if os.path.islink(p) else p for p in files], ""]
    libs = driverless.driver_libraries()
    out += ["# masked for the re-link (driverless.driver_libraries)", *libs, ""]
    with tempfile.TemporaryDirectory(prefix="f6diag-") as tmp:
        # the same link, written elsewhere, ld telling every file it tries
        probe = re.sub(rf"(-o\s+)\S*{TARGET}\b", rf"\g<1>{tmp}/{TARGET}", link, count=1)
        probe = probe.replace(f" -o {tmp}/{TARGET}", f" -Wl,--verbose -o {tmp}/{TARGET}", 1)
        cmd = f"cd {bdir} && {probe}"
        p = subprocess.run(driverless.masked(cmd, libs), capture_output=True, text=True,
                           env=driverless.masked_env(cmd))
        log = p.stdout + p.stderr
        tried = [l.strip() for l in log.splitlines() if "libcuda" in l]
        out += [f"# the link again under the mask, -Wl,--verbose: exit {p.returncode}",
                *(tried[:60] or ["(no line names libcuda)"]),
                *[l for l in log.splitlines() if "undefined reference" in l][:3]]
    Path(sys.argv[2]).write_text("\n".join(out) + "\n")
    print("\n".join(out[-40:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
