"""The native build of a Lucebox line the way upstream builds its image: the series applied by lucepatch,
then the cmake configure + build that upstream's own Dockerfile RUNs (lucepatch/builders/dockerfile.py),
with the same build arguments, run on this machine instead of in the image.

  python3 tools/lucebox_native_build.py --source W --target lucebox-vendored --build-dir D --json F \
      [--build-arg DFLASH_CUDA_ARCHES='90;120'] [--cmake-arg -DDFLASH27B_FA_ALL_QUANTS=OFF] [--jobs N] \
      [--add-target backend_ipc_daemon]

`--cmake-arg` adds to upstream's invocation and is recorded as a deviation from it (the JSON says which);
a build argument the Dockerfile declares no ARG for is refused (Docker would ignore it). The build folder
stays (binaries run in place: their RUNPATH is $ORIGIN/deps/...). The JSON: the commands as run, configure
and build seconds, ninja's step count, per binary and ggml library its size, sha256, SASS/PTX (cuobjdump
--list-elf/--list-ptx where the toolkit has it, else lucepatch's fatbin reader) and what `ldd` resolves.
Exit 0 built, 1 the build failed (its first error lines in the JSON), 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.builders import dockerfile  # noqa: E402
from lucepatch.builders.probe import cuobjdump_list, find_cuobjdump  # noqa: E402
from lucepatch.builders.tree import prepare_tree  # noqa: E402
from lucepatch.errors import LucepatchError  # noqa: E402
from lucepatch.native import elf  # noqa: E402
from lucepatch.target import load_target  # noqa: E402
from lucepatch.workspace import resolve_workspace  # noqa: E402

BINARIES = ["dflash_server", "test_dflash", "test_server_unit", "backend_ipc_daemon"]


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gpu_code(p: Path, tool: str | None) -> dict:
    code = cuobjdump_list(p, tool) if tool else None
    if code is None:
        try:
            code = elf.gpu_code(p)
        except LucepatchError as exc:
            return {"error": str(exc)}
    return code.to_json()


def ldd(p: Path) -> dict:
    r = subprocess.run(["ldd", str(p)], capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    return {"rc": r.returncode, "not_found": [ln.split()[0] for ln in lines if "not found" in ln],
            "resolved": len([ln for ln in lines if "=>" in ln and "not found" not in ln])}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True)
    ap.add_argument("--target", default="lucebox-vendored")
    ap.add_argument("--build-dir", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--cmake-arg", action="append", default=[])
    ap.add_argument("--add-target", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("LUCEPATCH_CACHE", "/tmp/lpcache")))
    a = ap.parse_args(argv)
    args = dict(x.split("=", 1) for x in a.build_arg)
    doc: dict = {"target": a.target, "build_args": args, "deviations": a.cmake_arg, "jobs": a.jobs}
    try:
        ws = resolve_workspace(ROOT)
        t = load_target(ws, a.target)
        with contextlib.ExitStack() as stack:
            tree = prepare_tree(t, a.source, "patched", a.cache, stack, nested=True)
            recipe = dockerfile.read_recipe(tree.root / "Dockerfile")
            dockerfile.check_build_args(recipe, args)
            conf, bld = recipe.cmake(args)
            conf, bld = dockerfile.native(conf, bld, src_from="/src", src_to=tree.root, build_dir=a.build_dir,
                                          jobs=a.jobs, targets=a.add_target)
            conf += a.cmake_arg
            doc.update({"upstream_configure": recipe.cmake(args)[0], "upstream_build": recipe.cmake(args)[1],
                        "configure": conf, "build": bld, "tree": tree.to_json(), "images": recipe.images(args)})
            a.build_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            rc = subprocess.run(conf, capture_output=True, text=True)
            doc["configure_seconds"] = round(time.monotonic() - t0, 1)
            (a.build_dir / "lucepatch-configure.log").write_text(rc.stdout + rc.stderr)
            if rc.returncode != 0:
                doc["error"] = "configure failed: " + " | ".join((rc.stdout + rc.stderr).strip().splitlines()[-5:])
                a.json.write_text(json.dumps(doc, indent=1) + "\n")
                print(doc["error"], file=sys.stderr)
                return 1
            t0 = time.monotonic()
            rb = subprocess.run(bld, capture_output=True, text=True)
            doc["build_seconds"] = round(time.monotonic() - t0, 1)
            log = rb.stdout + rb.stderr
            (a.build_dir / "lucepatch-build.log").write_text(log)
            steps = re.findall(r"^\[(\d+)/(\d+)\]", log, re.M)
            doc["steps"] = f"{steps[-1][0]}/{steps[-1][1]}" if steps else None
            if rb.returncode != 0:
                errs = [ln for ln in log.splitlines() if re.search(r"error|undefined reference|FAILED", ln)]
                doc["error"] = f"build failed ({len(errs)} error lines): " + " | ".join(errs[:5])
                a.json.write_text(json.dumps(doc, indent=1) + "\n")
                print(doc["error"][:600], file=sys.stderr)
                return 1
    except LucepatchError as exc:
        print(f"lucebox_native_build: {exc}", file=sys.stderr)
        return exc.exit_code
    tool = find_cuobjdump()
    doc["cuobjdump"] = tool
    files = [a.build_dir / b for b in BINARIES if (a.build_dir / b).is_file()]
    files += sorted(p for p in a.build_dir.rglob("libggml*.so*") if p.is_file() and not p.is_symlink())
    doc["artifacts"] = {str(p.relative_to(a.build_dir)): {"bytes": p.stat().st_size, "sha256": _sha(p),
                                                          "gpu_code": gpu_code(p, tool), "ldd": ldd(p)} for p in files}
    doc["binaries_dir"] = str(a.build_dir)
    a.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("configure_seconds", "build_seconds", "steps", "binaries_dir")}))
    for name, art in doc["artifacts"].items():
        print(f"  {name}: SASS {', '.join(art['gpu_code'].get('sass', [])) or '-'}; ldd not found: "
              f"{', '.join(art['ldd']['not_found']) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
