"""The ggml client (reproducers/ggml-client, issue 17 item 4) and the workload [build] it relies on.

Runs here: the reproducer loads and its scenarios are skipped with the reason (no process, no
build) without ggml and the real driver; a workload's [build] is compiled by lucepatch and run
end to end on the simulated driver (a C program on lp_report.h, fakehami preloaded); the GPU
step exists and parses; tools/ggml_dir.py refuses a libggml-cuda without code for the GPU.
With LUCEPATCH_SRC_LUCEBOX: the client compiles against the real ggml headers. With
LUCEPATCH_GGML_DIR (a ggml build, CPU-only is enough): the client, built through the workload
[build], runs every scenario on ggml's CPU backend (graph + CPU reference) and reports `no-gpu:`
when asked for CUDA0 on a ggml without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO_ROOT, make_target
from lucepatch.errors import UsageError
from lucepatch.native import compiling, toolchain
from lucepatch.verify.reproducer import load_reproducer_dir
from lucepatch.verify.requirements import unmet

CLIENT = REPO_ROOT / "reproducers" / "ggml-client"
SCENARIOS = ["main-thread", "worker-thread", "two-workers"]


def test_reproducer_is_a_workload_with_a_build_and_real_requirements():
    r = load_reproducer_dir(CLIENT)
    assert r.is_workload and r.load_proof == "program" and r.target == "hami-core"
    assert r.build is not None and r.build.language == "c++" and r.build.output == "ggml_client"
    assert r.command == ["{build}/ggml_client", "{scenario}"]
    assert [s.name for s in r.scenarios] == SCENARIOS and r.controls[0].name == "main-thread"
    assert all(s.regression_guard for s in r.checked)  # the verdict is the hardware's, no fix claimed
    assert r.requires.driver == "real"
    # the hash covers the client source and lp_report.h it includes
    assert "build" in r.to_json() and r.to_json()["build"]["sources"] == ["ggml_client.cpp"]


def test_without_ggml_or_the_real_driver_every_scenario_says_why(monkeypatch):
    monkeypatch.delenv("LUCEPATCH_GGML_DIR", raising=False)
    r = load_reproducer_dir(CLIENT)
    for s in r.scenarios:
        why = unmet(r, s, "fake")
        assert "needs the real CUDA driver" in why and "LUCEPATCH_GGML_DIR" in why and "set the variable" in why
    monkeypatch.setenv("LUCEPATCH_GGML_DIR", "/nonexistent/ggml")
    why = unmet(r, r.scenario("worker-thread"), "real")
    assert why == "needs /nonexistent/ggml/include/ggml-backend.h (not found); needs /nonexistent/ggml/lib/libggml.so (not found)"


@pytest.mark.needs("gcc", "/usr/local/cuda/include/cuda.h")
def test_skipped_scenarios_start_nothing_and_build_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("LUCEPATCH_GGML_DIR", raising=False)
    ws, cache = _workspace(tmp_path, {"ggml-client": CLIENT})
    lib = _fakehami(cache)
    res = cli("--workspace", ws, "--cache-dir", cache, "verify", "--reproducer", "ggml-client", "--lib", lib,
              "--baseline-lib", lib, "--driver", "fake", "--fixed", "--runs", "1", "--json")
    assert res.out.strip(), res.err
    doc = res.json["evidence"]
    assert {s["scenario"]: s["verdict"] for s in doc["scenarios"]} == {f"ggml-client:{s}": "skipped" for s in SCENARIOS}
    assert doc["execution"]["processes"] == 0
    assert not (cache / "workloads").exists()  # no compile against a ggml that is not there
    assert doc["reproducers"][0]["build"]["output"] == "ggml_client"


# ---- the workload [build], end to end on the simulated driver ---------------------------------------

BUILT_C = r"""
#include <cuda.h>
#include "lp_report.h"
int main(int argc, char **argv) {
    int n; CUdevice dev; CUcontext ctx;
    if (argc < 2 || lp_setup_primary(argv[0], &n, &dev, &ctx)) return 2;
    CUdeviceptr p = 0;
    int ok = lp_check_result("cuMemAlloc", CUDA_SUCCESS, cuMemAlloc(&p, 1 << 20));
    ok &= lp_check_eq("flag from [build]", 42, BUILT_FLAG);
    lp_report_done(argv[1], ok);
    return ok ? 0 : 1;
}
"""


def _workspace(tmp_path: Path, repros: dict[str, Path]) -> tuple[Path, Path]:
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    make_target(ws, "fakehami", "0" * 40, [])
    make_target(ws, "hami-core", "0" * 40, [])  # ggml-client's target (prebuilt --lib: never built)
    (ws / "reproducers").mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO_ROOT / "reproducers" / "common", ws / "reproducers" / "common")
    for name, src in repros.items():
        shutil.copytree(src, ws / "reproducers" / name)
    return ws, cache


def _fakehami(cache: Path) -> Path:
    cc = compiling.cc()
    src = FIXTURES / "fakehami" / "src" / "fakehami.c"
    unit = compiling.Unit(what="fakehami (ggml-client tests)",
                          steps=[[cc, "-shared", "-fPIC", "-O1", "-g", f"-I{toolchain.cuda_include()}",
                                  "-o", "{out}/libvgpu.so", str(src), "-ldl", "-lpthread"]],
                          outputs=["libvgpu.so"], inputs=[src])
    return compiling.build_cached(unit, cache / "fakehami") / "libvgpu.so"


def _built_reproducer(d: Path, flag: str = "${LP_TEST_FLAG}") -> Path:
    d.mkdir(parents=True)
    (d / "built.c").write_text(BUILT_C)
    (d / "reproducer.toml").write_text(f"""
name = "built"
kind = "workload"
target = "fakehami"
artifact = "libvgpu.so"
command = ["{{build}}/built", "{{scenario}}"]
[build]
sources = ["built.c"]
output = "built"
flags = ["-O1", "-I{{cuda_include}}", "-I{{common}}", "-DBUILT_FLAG={flag}", "-L${{LP_STUB_DIR}}", "-lcuda"]
headers = ["{{cuda_include}}/cuda.h"]
[[scenario]]
name = "control"
control = true
""")
    return d


@pytest.mark.needs("gcc", "/usr/local/cuda/include/cuda.h")
def test_a_workload_build_is_compiled_once_and_run_under_the_preload(cli, tmp_path, monkeypatch):
    from lucepatch.verify.driver import choose_driver

    ws, cache = _workspace(tmp_path, {})
    _built_reproducer(ws / "reproducers" / "built")
    lib = _fakehami(cache)
    stub = choose_driver("fake", cache).fake_dir  # link-time libcuda.so, as the C reproducers use
    monkeypatch.setenv("LP_STUB_DIR", str(stub))
    monkeypatch.setenv("LP_TEST_FLAG", "42")
    args = ["--workspace", ws, "--cache-dir", cache, "verify", "--reproducer", "built", "--lib", lib,
            "--baseline-lib", lib, "--driver", "fake", "--fixed", "--runs", "1", "--json"]
    doc = cli(*args).json["evidence"]
    runs = doc["runs"]
    assert runs and all(r["outcome"] == "pass" for r in runs), runs
    assert all(r["load_proof"]["reporter"] == "program" for r in runs)
    built = list((cache / "workloads").glob("*/built"))
    assert len(built) == 1
    # same inputs: the cached program; a different ${VAR} in the flags: a new key, and it is what runs
    cli(*args)
    assert len(list((cache / "workloads").glob("*/built"))) == 1
    monkeypatch.setenv("LP_TEST_FLAG", "41")
    doc = cli(*args).json["evidence"]
    assert len(list((cache / "workloads").glob("*/built"))) == 2
    bad = [r for r in doc["runs"] if r["scenario"] == "built:control"]
    assert bad and all(r["outcome"] == "fail" and "flag from [build]" in r["reason"] for r in bad), bad


@pytest.mark.needs("gcc", "/usr/local/cuda/include/cuda.h")
def test_a_workload_build_that_does_not_compile_is_one_line(cli, tmp_path, monkeypatch):
    ws, cache = _workspace(tmp_path, {})
    d = _built_reproducer(ws / "reproducers" / "built")
    (d / "built.c").write_text("int main(void) { return nope; }\n")
    lib = _fakehami(cache)
    res = cli("--workspace", ws, "--cache-dir", cache, "verify", "--reproducer", "built", "--lib", lib,
              "--baseline-lib", lib, "--driver", "fake", "--fixed", "--runs", "1")
    assert res.code == 1 and "does not compile" in res.err and "nope" in res.err


@pytest.mark.parametrize("body, message", [
    ('[build]\noutput = "x"\n', "lacks required key 'sources'"),
    ('[build]\nsources = ["gone.c"]\noutput = "x"\n', "source gone.c does not exist"),
    ('[build]\nsources = ["a.c"]\noutput = "x"\nlanguage = "rust"\n', 'language must be "c" or "c++"'),
    ('[build]\nsources = ["a.c"]\noutput = "x"\nopt = 1\n', "unknown key opt"),
    ('[build]\nsources = ["a.c"]\noutput = "a/b"\n', "output must be a file name"),
])
def test_bad_build_table_is_one_clear_line(tmp_path, body, message):
    d = tmp_path / "w"
    d.mkdir()
    (d / "a.c").write_text("int main(void){return 0;}\n")
    (d / "reproducer.toml").write_text('target = "t"\nartifact = "libvgpu.so"\nkind = "workload"\ncommand = ["x"]\n'
                                       + body + '[[scenario]]\nname = "c"\ncontrol = true\n')
    with pytest.raises(UsageError) as e:
        load_reproducer_dir(d)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_c_reproducer_cannot_have_a_workload_build(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    (d / "a.c").write_text("int main(void){return 0;}\n")
    (d / "reproducer.toml").write_text('target = "t"\nartifact = "l.so"\nsources = ["a.c"]\n[build]\nsources = ["a.c"]\n'
                                       'output = "a"\n[[scenario]]\nname = "c"\ncontrol = true\n')
    with pytest.raises(UsageError, match="is for kind"):
        load_reproducer_dir(d)


# ---- the GPU step and its library finder -----------------------------------------------------------

def test_gpu_session_has_the_ggml_steps_and_parses():
    script = REPO_ROOT / "tools" / "gpu_session.sh"
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = script.read_text()
    step = text.split("    ggml-client)", 1)[1].split(";;", 1)[0]
    assert "--reproducer ggml-client" in step and "--baseline-ref e3c3477 --patched-ref 8f3a89c" in step
    assert step.count("lp verify") == 2 and "tools/ggml_dir.py" in step and "$OUT/commit/" in step
    assert "    ggml-build)" in text and "--cuda-archs" in text.split("    ggml-build)", 1)[1].split(";;", 1)[0]
    assert 'LUCEBOX_CUDA_ARCHS:+--cuda-archs' in text


def _fake_build(tmp_path: Path, with_cuda: bool = True) -> Path:
    out = tmp_path / "sb" / "key1"
    lib = out / "app" / "lib"
    lib.mkdir(parents=True)
    for name in ("libggml.so", "libggml-base.so") + (("libggml-cuda.so.0.9.11",) if with_cuda else ()):
        shutil.copy("/bin/true", lib / name)  # an ELF without GPU code
    inc = tmp_path / "src" / "server" / "deps" / "llama.cpp" / "ggml" / "include"
    inc.mkdir(parents=True)
    (inc / "ggml-backend.h").write_text("/* header */\n")
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"builds": [{"ok": True, "variant": "patched", "key": "key1", "out": str(out),
                                               "source_root": str(tmp_path / "src")}]}))
    return summary


def _ggml_dir(*args, env=None):
    return subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "ggml_dir.py"), *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, "LUCEPATCH_CACHE": "", **(env or {})})


def test_ggml_dir_refuses_a_libggml_cuda_without_code_for_the_gpu(tmp_path):
    summary = _fake_build(tmp_path)
    r = _ggml_dir(tmp_path / "g", "--arch", "90", summary)
    assert r.returncode == 3 and "nothing sm_90 can run" in r.stderr and "\n" not in r.stderr.strip()
    assert not (tmp_path / "g" / "lib").exists()
    r = _ggml_dir(tmp_path / "g", summary)  # no arch asked: the build is taken
    assert r.returncode == 0, r.stderr
    g = tmp_path / "g"
    assert (g / "lib" / "libggml.so").exists() and (g / "include" / "ggml-backend.h").is_file()
    facts = json.loads((g / "ggml-dir.json").read_text())
    assert facts["key"] == "key1" and facts["libggml_cuda"]["sass"] == []


def test_ggml_dir_says_when_there_is_no_build(tmp_path):
    summary = _fake_build(tmp_path, with_cuda=False)
    r = _ggml_dir(tmp_path / "g", "--arch", "90", summary)
    assert r.returncode == 3 and "no libggml.so / libggml-cuda.so" in r.stderr


# ---- against real ggml --------------------------------------------------------------------------------

def _lucebox_ggml_include() -> Path:
    src = os.environ.get("LUCEPATCH_SRC_LUCEBOX")
    if not src:
        pytest.skip("no-upstream: LUCEPATCH_SRC_LUCEBOX is not set (a lucebox-hub checkout with its submodules)")
    inc = Path(src) / "server" / "deps" / "llama.cpp" / "ggml" / "include"
    if not (inc / "ggml-backend.h").is_file():
        pytest.skip(f"no-upstream: {inc} has no ggml-backend.h (submodule not checked out)")
    return inc


@pytest.mark.needs("g++", "/usr/local/cuda/include/cuda.h")
def test_client_compiles_against_the_lucebox_ggml_headers():
    inc = _lucebox_ggml_include()
    r = subprocess.run([compiling.cxx(), "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-function",
                        f"-I{toolchain.cuda_include()}", f"-I{REPO_ROOT / 'reproducers' / 'common'}", f"-I{inc}",
                        str(CLIENT / "ggml_client.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def _events(stdout: str) -> list[dict]:
    return [json.loads(l.split(" ", 1)[1]) for l in stdout.splitlines() if l.startswith("@@lucepatch ")]


@pytest.mark.needs("g++", "/usr/local/cuda/include/cuda.h")
def test_client_runs_every_scenario_on_ggmls_cpu_backend(tmp_path):
    gdir = os.environ.get("LUCEPATCH_GGML_DIR")
    if not gdir or not (Path(gdir) / "lib" / "libggml.so").exists():
        pytest.skip("no-upstream: LUCEPATCH_GGML_DIR is not set to a ggml build (lib/ + include/; a CPU-only "
                    "`cmake -DGGML_CUDA=OFF -DBUILD_SHARED_LIBS=ON` of the lucebox llama.cpp ggml is enough)")
    from lucepatch.native.workload import build_program

    binary = build_program(load_reproducer_dir(CLIENT), tmp_path) / "ggml_client"
    for scenario in SCENARIOS:
        r = subprocess.run([str(binary), "--backend", "cpu", scenario], capture_output=True, text=True, timeout=300)
        ev = _events(r.stdout)
        checks = [e for e in ev if e["event"] == "check"]
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-1000:])
        workers = {"main-thread": 1, "worker-thread": 1, "two-workers": 2}[scenario]
        # per client: backend, buffer, then per batch: allocated, computed, matches the reference
        assert len(checks) == workers * (2 + 3 * 4) and all(c["ok"] for c in checks), checks
        assert sum("CPU reference" in c["name"] for c in checks) == workers * 4
        # the load proof comes after the backend initialised and before the first compute
        kinds = [e["event"] if e["event"] != "check" else e["name"] for e in ev]
        first_compute = next(i for i, k in enumerate(kinds) if "graph allocated" in k)
        assert kinds.index("loaded") < first_compute
        assert ev[-1] == {"event": "done", "scenario": scenario, "ok": True}
    r = subprocess.run([str(binary), "worker-thread"], capture_output=True, text=True, timeout=120)
    skip = [e for e in _events(r.stdout) if e["event"] == "skip"]
    has_cuda = any(p.name.startswith("libggml-cuda") for p in (Path(gdir) / "lib").iterdir())
    if not has_cuda:
        assert r.returncode == 0 and skip and skip[0]["reason"].startswith("no-gpu: ggml has no CUDA0 device")


# ---- the GPU-only abort: tools/ggml_diag.py ------------------------------------------------------------

def test_gpu_session_has_the_ggml_diag_step():
    text = (REPO_ROOT / "tools" / "gpu_session.sh").read_text()
    step = text.split("    ggml-diag)", 1)[1].split(";;", 1)[0]
    assert "tools/ggml_diag.py" in step and '"$OUT/commit/ggml-diag.$TAG.txt"' in step and "tools/ggml_dir.py" in step


def _ggml_diag():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ggml_diag", REPO_ROOT / "tools" / "ggml_diag.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.needs("gcc", "addr2line", "readelf")
def test_diag_names_the_library_whose_static_constructor_aborts(tmp_path):
    # what the H200 showed: rc 134, `free(): invalid pointer`, no line from the client, ~10 ms; a
    # constructor in a NEEDED library runs before lucepatch's preloaded reporter installs its handler
    lib = tmp_path / "lib"
    lib.mkdir()
    # a misaligned pointer into a live block: glibc's "free(): invalid pointer" abort, every time
    (tmp_path / "bad.c").write_text("#include <stdlib.h>\n"
                                    "__attribute__((constructor)) static void bad_ctor(void) {\n"
                                    "    char *p = malloc(64); free(p + 8); }\n"
                                    "int bad_sym(void) { return 0; }\n")
    (tmp_path / "main.c").write_text("#include <stdio.h>\nint bad_sym(void);\n"
                                     "int main(void) { puts(\"main reached\"); return bad_sym(); }\n")
    cc = shutil.which("gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-g", "-w", "-o", str(lib / "libbad.so"), str(tmp_path / "bad.c")], check=True)
    client = tmp_path / "client"
    subprocess.run([cc, "-g", "-o", str(client), str(tmp_path / "main.c"), f"-L{lib}", "-lbad",
                    f"-Wl,-rpath,{lib}"], check=True)
    diag = _ggml_diag()
    res = diag.client_runs(client, tmp_path, {"LD_LIBRARY_PATH": str(lib), "LD_PRELOAD": ""})
    assert res["plain"]["rc"] == -6 and "main reached" not in res["plain"]["stdout"]
    assert "free(): invalid pointer" in res["plain"]["stderr"]
    assert res["inits_called"] and res["inits_called"][-1].endswith("libbad.so")  # the last initializer ld.so called
    frames = res["backtrace"]["frames"]
    assert any(f["lib"].endswith("libbad.so") and f["function"] == "bad_ctor" for f in frames), frames
    # and the load test: an empty main linked against that library alone aborts too
    loads = {t["load"]: t for t in diag.load_tests(lib, tmp_path, {"LD_LIBRARY_PATH": str(lib), "LD_PRELOAD": ""},
                                                   order=["bad", "c"])}
    assert loads["bad"]["rc"] == -6 and "free(): invalid pointer" in loads["bad"]["stderr"] and loads["c"]["rc"] == 0
