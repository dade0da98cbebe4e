"""Where a ggml client dies before its first line: the facts one GPU call needs to name the cause.

    python3 tools/ggml_diag.py GGML_DIR OUTDIR [--client BINARY]

GGML_DIR is a LUCEPATCH_GGML_DIR (lib/ + include/, tools/ggml_dir.py). Written to OUTDIR/ggml-diag.json
(and a readable ggml-diag.txt):
  libs     each lib/ file: size, sha256, NEEDED, RUNPATH, the compiler that built it (.comment), and
           the compile flags of the ggml targets when the build tree's compile_commands.json is there
  loads    an empty main() linked (--no-as-needed) against one library at a time, run with the
           workload's LD_LIBRARY_PATH: cudart, cublasLt, cublas, libcuda, then each ggml library in
           link order. The first that aborts is the static constructor at fault.
  client   the ggml-client (built as `lp verify` builds it unless --client) with --backend cpu: plain;
           under LD_DEBUG=files (the initializers ld.so called, the last one is where it died); and
           with an INITFIRST preload (built here) that prints a backtrace on SIGABRT/SIGSEGV, its
           frames resolved with addr2line. INITFIRST: its handler is installed before any other
           library's constructor runs, so a crash in one is caught (lucepatch's reporter runs after them).
Each step is bounded (30 s) and recorded with its exit status; nothing here needs the GPU to run
(off the GPU every step passes, which is what the off-GPU proof of the step shows).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lucepatch.files import sha256_file  # noqa: E402

BT_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static void on_sig(int sig) {
    void *pc[64];
    char line[1200];
    int n = backtrace(pc, 64);
    for (int i = 0; i < n; i++) {
        Dl_info di;
        int len = dladdr(pc[i], &di) && di.dli_fname
            ? snprintf(line, sizeof line, "lp-bt %s 0x%lx %s\n", di.dli_fname,
                       (unsigned long)((char *)pc[i] - (char *)di.dli_fbase), di.dli_sname ? di.dli_sname : "?")
            : snprintf(line, sizeof line, "lp-bt ? %p ?\n", pc[i]);
        if (write(2, line, len) < 0) break;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}
__attribute__((constructor)) static void lp_bt_init(void) {
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc_s now, not in the handler */
    signal(SIGABRT, on_sig);
    signal(SIGSEGV, on_sig);
}
"""


def sh(cmd: list[str], env: dict | None = None, timeout: int = 30, keep: int = 6000) -> dict:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        return {"cmd": " ".join(cmd), "rc": r.returncode, "stdout": r.stdout[-4000:], "stderr": r.stderr[-keep:]}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"cmd": " ".join(cmd), "rc": None, "stdout": "", "stderr": str(exc)}


def lib_facts(lib: Path) -> list[dict]:
    out = []
    for p in sorted(lib.iterdir()):
        if p.is_symlink() or not p.is_file():
            continue
        d = sh(["readelf", "-d", str(p)])["stdout"]
        comment = sh(["readelf", "-p", ".comment", str(p)])["stdout"]
        out.append({"name": p.name, "bytes": p.stat().st_size, "sha256": sha256_file(p),
                    "needed": re.findall(r"NEEDED.*\[(.*)\]", d), "runpath": re.findall(r"R(?:UN)?PATH.*\[(.*)\]", d),
                    "comment": sorted(set(re.findall(r"\]\s+(.*)", comment)))})
    return out


def compile_flags(lib: Path, build_dir: str | None = None) -> dict:
    """The flags of one source per ggml target, from the build tree the libraries came from
    (--build-dir, else the kept build named by ggml_dir.py's ggml-dir.json)."""
    meta = lib.parent / "ggml-dir.json"
    if not build_dir and meta.is_file():
        facts = json.loads(meta.read_text())
        manifest = Path(facts.get("lib", "")).parent.parent / "manifest.json"
        if manifest.is_file():
            build_dir = json.loads(manifest.read_text()).get("build_dir")
    cc = Path(build_dir or "/nonexistent") / "compile_commands.json"
    if not cc.is_file():
        return {"note": f"no compile_commands.json (build_dir {build_dir})"}
    seen = {}
    for e in json.loads(cc.read_text()):
        m = re.search(r"CMakeFiles/(ggml(?:-base|-cpu|-cuda)?)\.dir/", e.get("output", "") + e.get("command", ""))
        if m and m.group(1) not in seen:
            seen[m.group(1)] = {"file": e["file"], "command": e.get("command", " ".join(e.get("arguments", [])))}
    return seen


LOAD_ORDER = ["cudart", "cublasLt", "cublas", "cuda", "ggml-base", "ggml-cpu", "ggml-cuda", "ggml"]


def load_tests(lib: Path, work: Path, env: dict, order: list[str] = LOAD_ORDER) -> list[dict]:
    main = work / "m.c"
    main.write_text('#include <stdio.h>\nint main(void) { puts("loaded"); return 0; }\n')
    dirs = [str(lib), *env["LD_LIBRARY_PATH"].split(":")]
    out = []
    for name in order:
        exe = work / f"load-{name}"
        flags = [f"-L{d}" for d in dirs] + ["-Wl,--no-as-needed", "-Wl,--allow-shlib-undefined", f"-l{name}"]
        if name == "cuda":  # the driver has no unversioned name outside a devel toolkit: name the file
            found = [p for d in (*dirs, "/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64")
                     for p in [Path(d) / "libcuda.so.1"] if p.exists()]
            if not found:
                out.append({"load": name, "rc": None, "stderr": "no libcuda.so.1 on this machine"})
                continue
            flags = ["-Wl,--no-as-needed", str(found[0])]
        b = sh(["cc", str(main), "-o", str(exe), *flags])
        if b["rc"] != 0:
            out.append({"load": name, "rc": None, "stderr": "link: " + b["stderr"][-500:]})
            continue
        r = sh([str(exe)], env=env)
        out.append({"load": name, "rc": r["rc"], "stderr": r["stderr"][-1500:]})
    return out


def client_runs(client: Path, work: Path, env: dict) -> dict:
    bt = work / "liblp_bt.so"
    (work / "bt.c").write_text(BT_SOURCE)
    built = sh(["cc", "-shared", "-fPIC", "-O1", "-g", "-Wl,-z,initfirst", "-o", str(bt), str(work / "bt.c")])
    argv = [str(client), "main-thread", "--backend", "cpu"]
    plain = sh(argv, env=env, timeout=300)
    traced = sh(argv, env={**env, "LD_DEBUG": "files"}, timeout=300, keep=1 << 22)
    inits = re.findall(r"calling init: (\S+)", traced["stderr"])
    traced["stderr"] = "\n".join(l for l in traced["stderr"].splitlines() if "calling init" not in l)[-3000:]
    res = {"plain": plain, "inits_called": inits, "ld_debug": traced}
    if built["rc"] == 0:
        b = sh(argv, env={**env, "LD_PRELOAD": str(bt)}, timeout=300)
        frames = []
        for lib, off, sym in re.findall(r"lp-bt (\S+) (0x[0-9a-f]+) (\S+)", b["stderr"]):
            where = sh(["addr2line", "-f", "-C", "-e", lib, off])["stdout"].split("\n") if lib != "?" else []
            frames.append({"lib": lib, "offset": off, "dladdr": sym,
                           "function": where[0] if where else "", "line": where[1] if len(where) > 1 else ""})
        res["backtrace"] = {"rc": b["rc"], "frames": frames, "stderr": re.sub(r"lp-bt .*\n", "", b["stderr"])[-2000:]}
    else:
        res["backtrace"] = {"rc": None, "stderr": "could not build the preload: " + built["stderr"][-500:]}
    return res


def build_client(ggml: Path, cache: Path) -> Path:
    os.environ["LUCEPATCH_GGML_DIR"] = str(ggml)
    from lucepatch.native.workload import build_program  # noqa: PLC0415
    from lucepatch.verify.reproducer import load_reproducer_dir  # noqa: PLC0415

    return build_program(load_reproducer_dir(ROOT / "reproducers" / "ggml-client"), cache) / "ggml_client"


def text_report(doc: dict) -> str:
    lines = [f"ggml-diag {doc['ggml_dir']}"]
    for f in doc["libs"]:
        lines.append(f"  {f['name']}: {f['bytes']} B, NEEDED {', '.join(f['needed'])}; {'; '.join(f['comment'])}")
    for t in doc["loads"]:
        lines.append(f"  load {t['load']}: rc {t['rc']} {t['stderr'].strip()[-200:]}")
    c = doc["client"]
    lines.append(f"  client plain: rc {c['plain']['rc']} {c['plain']['stderr'].strip()[-300:]}")
    lines.append(f"  last initializers: {' <- '.join(c['inits_called'][-4:])}")
    for fr in c["backtrace"].get("frames", []):
        lines.append(f"    {Path(fr['lib']).name}+{fr['offset']} {fr['function'] or fr['dladdr']} {fr['line']}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ggml_dir")
    ap.add_argument("outdir")
    ap.add_argument("--client", default=None, help="a ggml_client binary (default: built here as lp verify builds it)")
    ap.add_argument("--build-dir", default=None, help="the build tree the libraries came from (its compile_commands.json)")
    ap.add_argument("--cuda-lib", default="/usr/local/cuda/lib64", help="the toolkit's lib folder(s), colon-separated (cudart, cuBLAS): the workload's LD_LIBRARY_PATH after lib/")
    a = ap.parse_args()
    ggml, out = Path(a.ggml_dir), Path(a.outdir)
    lib = ggml / "lib"
    if not (lib / "libggml.so").exists() or not shutil.which("cc"):
        print(f"ggml_diag: {lib} has no libggml.so (tools/ggml_dir.py makes it), or no cc", file=sys.stderr)
        return 3
    out.mkdir(parents=True, exist_ok=True)
    env = {"LD_LIBRARY_PATH": f"{lib.resolve()}:{a.cuda_lib}", "LD_PRELOAD": ""}
    with tempfile.TemporaryDirectory(prefix="ggml-diag-") as tmp:
        work = Path(tmp)
        client = Path(a.client) if a.client else build_client(ggml, Path(os.environ.get("LUCEPATCH_CACHE") or work))
        doc = {"ggml_dir": str(ggml.resolve()), "client": None, "libs": lib_facts(lib.resolve()),
               "compile_flags": compile_flags(lib, a.build_dir), "loads": load_tests(lib.resolve(), work, env)}
        doc["client"] = client_runs(client, work, env)
        doc["client_binary"] = {"path": str(client), "sha256": sha256_file(client)}
    (out / "ggml-diag.json").write_text(json.dumps(doc, indent=1) + "\n")
    report = text_report(doc)
    (out / "ggml-diag.txt").write_text(report)
    print(report, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
