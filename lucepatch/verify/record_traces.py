"""Record the driver-call traces of every reproducer scenario and of the driver-semantics probe.

    python3 -m lucepatch.verify.record_traces --out DIR [--driver real|fake] [--label h200] [--program NAME ...]

Run on a GPU machine with --driver real (no HAMi loaded); commit DIR/*.jsonl under
tests/fakecuda/traces/. CI replays the same programs on the simulated driver (tests/test_traces.py).

A workload reproducer with a compiled program (`[build]`, a command `{build}/<output> {scenario}`: the
ggml clients) is recorded only when named with --program, and only on a machine that meets its
requirements (the real driver, its library folder): its trace holds the driver calls the program and
its libraries make through exported symbols (ggml-cuda's VMM pool calls cuMemCreate, cuMemMap, ...
directly), not those the CUDA runtime resolves through cuGetProcAddress. Commit it under
tests/fakecuda/traces/workloads/: it is no program the simulated driver can run (cudart), but the
model of it the stand-in server replays there (tests/test_serve.py compares the two).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lucepatch.native import compiling
from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.native.toolchain import cuda_include
from lucepatch.native.trace import SOURCE, VALUES_VERSION, build_interposer, record
from lucepatch.native.workload import build_program, command_for, workload_env
from lucepatch.verify.reproducer import list_reproducers, scenario_env
from lucepatch.verify.requirements import device_count, unmet
from lucepatch.verify.runner import compile_reproducer
from lucepatch.workspace import resolve_cache, resolve_workspace

SEMANTICS = SOURCE.with_name("semantics.c")
# The probes semantics.c runs (its argument): contexts/streams/VMM, memory pools, and the queries and
# frees HAMi-core's hooks must forward faithfully (NULL meminfo outputs, managed memory and pointer
# attributes, frees of pointers no hook tracked), and stream capture (which calls a capture forbids, per
# mode and thread; graph memory nodes).
SEMANTICS_PROBES = ("all", "pools", "queries", "capture")


def compile_semantics(cache: Path, stub_dir: Path) -> Path:
    cc = compiling.cc()
    inc = cuda_include()
    unit = compiling.Unit(
        what="the driver-semantics probe",
        steps=[[cc, "-O1", "-g", "-o", "{out}/driver-semantics", str(SEMANTICS), f"-I{inc}", f"-L{stub_dir}",
                "-lcuda", "-pthread"]],
        outputs=["driver-semantics"], inputs=[SEMANTICS], headers=[inc / "cuda.h"])
    return compiling.build_cached(unit, cache / "trace", compiler=cc) / "driver-semantics"


def programs(ws, cache: Path, stub_dir: Path, devices: int | None = None, workloads: frozenset = frozenset(),
             driver: str = "real"):
    """(name, scenario, binary, env) for every program whose trace is recorded.

    Scenarios needing more devices than the machine has are left out: they only report a skip
    there, and replaying that on the simulated driver (2 devices) would differ. `workloads`: the
    workload reproducers named explicitly (see the module's docstring)."""
    semantics = compile_semantics(cache, stub_dir)
    for probe in SEMANTICS_PROBES:
        yield "driver-semantics", probe, semantics, {}
    for repro in (r for r in list_reproducers(ws) if r.is_workload and r.name in workloads):
        yield from _workload_programs(repro, cache, driver, devices)
    # other workloads (Python, PyTorch) are not driver-API programs of ours: their traces would record
    # cudart and the interpreter, not a model the simulated driver has to match
    # a reproducer with rate scenarios (sm-limit) loops for a time, not a count: its calls differ
    # from run to run, so no trace of it replays equal; the timing model has its own tests
    for repro in (r for r in list_reproducers(ws) if not r.is_workload and not r.is_timed):
        binary = compile_reproducer(repro, cache, stub_dir)
        for s in repro.scenarios:
            if devices is not None and s.min_devices > devices:
                print(f"{repro.name}.{s.name}: needs {s.min_devices} devices, {devices} here; not recorded",
                      file=sys.stderr)
                continue
            yield repro.name, s.name, binary, scenario_env(repro, s)


def _workload_programs(repro, cache: Path, driver: str, devices: int | None):
    if repro.build is None:
        print(f"{repro.name}: a workload without a compiled program ([build]) is not recorded", file=sys.stderr)
        return
    build = None
    for s in repro.scenarios:
        why = unmet(repro, s, driver, devices=devices)
        if why:
            print(f"{repro.name}.{s.name}: not recorded: {why}", file=sys.stderr)
            continue
        build = build or build_program(repro, cache)
        argv = command_for(repro, s, build)
        if len(argv) != 2 or argv[1] != s.name:
            print(f"{repro.name}.{s.name}: not recorded: its command is not `<program> <scenario>`", file=sys.stderr)
            continue
        yield repro.name, s.name, Path(argv[0]), workload_env(repro, s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--driver", choices=["real", "fake"], default="real")
    ap.add_argument("--label", default="h200", help="suffix naming the hardware, e.g. h200")
    ap.add_argument("--program", action="append", default=[], metavar="NAME",
                    help="record only this program (a reproducer or driver-semantics; repeatable); "
                         "NAME.SCENARIO: only that scenario")
    args = ap.parse_args(argv)
    ws, cache = resolve_workspace(None), resolve_cache(None)
    stubs = build_fakecuda(cache / "fakecuda")
    interposer = build_interposer(cache)
    env_driver = {"LD_LIBRARY_PATH": str(stubs)} if args.driver == "fake" else {}
    args.out.mkdir(parents=True, exist_ok=True)
    devices = device_count(env_driver)
    wanted = set(args.program)
    workloads = frozenset(r.name for r in list_reproducers(ws) if r.is_workload and any(w.split(".")[0] == r.name for w in wanted))
    for name, scenario, binary, env in programs(ws, cache, stubs, devices, workloads, args.driver):
        if wanted and name not in wanted and f"{name}.{scenario}" not in wanted:
            continue
        trace, rc = record(binary, scenario, interposer, {**env, **env_driver})
        path = args.out / f"{name}.{scenario}.{args.label}.jsonl"
        meta = {"program": name, "scenario": scenario, "returncode": rc, "driver": args.driver,
                "values": VALUES_VERSION}
        if name in workloads:
            meta.update(kind="workload", sees="calls through exported driver symbols only (not cudart's "
                                              "cuGetProcAddress entry points)")
        path.write_text("# " + json.dumps(meta) + "\n" + "".join(json.dumps(t) + "\n" for t in trace))
        print(f"{path.name}: {len(trace)} calls, exit {rc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
