"""What workload reproducers run with: the Python helper workloads import (lp_workload.py, on
their PYTHONPATH as {workload}) and the preloaded reporter (reporter.c), built here with
lucepatch.native.compiling. Both are part of a workload reproducer's hash: they decide what a run proves.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lucepatch.native import compiling, toolchain

HERE = Path(__file__).resolve().parent
HELPER = HERE / "lp_workload.py"
REPORTER_SOURCE = HERE / "reporter.c"
REPORTER_NAME = "liblp_reporter.so"
HASHED_FILES = (HELPER, REPORTER_SOURCE)
# The events file the reporter appends to, and the switch for its at-exit proof (runner.py sets both).
EVENTS_ENV = "LUCEPATCH_EVENTS"
AT_EXIT_ENV = "LUCEPATCH_REPORT_AT_EXIT"


def build_reporter(cache: Path) -> Path:
    """liblp_reporter.so, built once per source + compiler into the cache."""
    cc = compiling.cc()
    unit = compiling.Unit(
        what="the preloaded reporter (liblp_reporter.so)",
        steps=[[cc, "-shared", "-fPIC", "-O1", "-g", "-Wall", "-o", f"{{out}}/{REPORTER_NAME}", str(REPORTER_SOURCE)]],
        outputs=[REPORTER_NAME], inputs=[REPORTER_SOURCE])
    return compiling.build_cached(unit, Path(cache) / "reporter", compiler=cc) / REPORTER_NAME


PYTHON_ENV = "LUCEPATCH_WORKLOAD_PYTHON"  # the interpreter {python} names (default: lucepatch's own)
PYTHONPATH_ENV = "LUCEPATCH_WORKLOAD_PYTHONPATH"  # prepended to a workload's PYTHONPATH


def python_for(repro=None) -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


def expand(text: str, repro, scenario_name: str, build: Path | None = None) -> str:
    """{python} {dir} {scenario} {workload} {build} and ${VAR} in one command argument or env value."""
    out = (text.replace("{python}", python_for(repro)).replace("{dir}", str(repro.dir))
           .replace("{scenario}", scenario_name).replace("{workload}", str(HERE)))
    if build is not None:
        out = out.replace("{build}", str(build))
    return os.path.expandvars(out)


def command_for(repro, scenario, build: Path | None = None) -> list[str]:
    return [expand(a, repro, scenario.name, build) for a in (scenario.command or repro.command)]


def build_program(repro, cache: Path) -> Path:
    """The folder holding the workload's [build] output, compiled once per key into the cache.

    Flags may name {dir}, {common} (the shared reproducer headers), {cuda_include} and ${VAR}
    (expanded here, so a different library folder is a different key); `headers` are hashed into
    the key (a rebuilt library with changed headers recompiles the client). A compile failure is
    the reproducer's fault (exit 1, the compiler's first error line)."""
    b = repro.build

    def sub(a: str) -> str:
        a = (a.replace("{dir}", str(repro.dir)).replace("{common}", str(repro.common_dir))
             .replace("{cuda_include}", str(toolchain.cuda_include())))
        return os.path.expandvars(a)

    compiler = compiling.cxx() if b.language == "c++" else compiling.cc()
    sources = [repro.dir / s for s in b.sources]
    step = [compiler, *[str(s) for s in sources], "-o", f"{{out}}/{b.output}", *[sub(f) for f in b.flags]]
    unit = compiling.Unit(what=f"workload {repro.name}'s program {b.output}", steps=[step], outputs=[b.output],
                          inputs=sources, key_extra=[repro.hash],
                          headers=[Path(sub(h)) for h in b.headers if Path(sub(h)).is_file()], user_error=True)
    return compiling.build_cached(unit, Path(cache) / "workloads", compiler=compiler)


def workload_env(repro, scenario, params: dict | None = None) -> dict:
    """The reproducer's and the scenario's env, expanded. PYTHONPATH is the workload's own (plus
    $LUCEPATCH_WORKLOAD_PYTHONPATH), never the caller's: lucepatch's own dependencies on the caller's
    path (the carried wheels) must not shadow the packages the workload's interpreter has (torch's)."""
    env = {k: expand(v, repro, scenario.name) for k, v in {**repro.env, **scenario.env}.items()}
    env.update(scenario.param_env(params))
    extra = os.environ.get(PYTHONPATH_ENV, "")
    env["PYTHONPATH"] = ":".join(p for p in (env.get("PYTHONPATH", ""), extra) if p)
    return env
