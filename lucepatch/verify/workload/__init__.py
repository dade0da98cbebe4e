"""What workload reproducers run with: the Python helper workloads import (lp_workload.py, on
their PYTHONPATH as {workload}) and the preloaded reporter (reporter.c), built here with
lucepatch.compiling. Both are part of a workload reproducer's hash: they decide what a run proves.
"""

from __future__ import annotations

from pathlib import Path

from lucepatch import compiling

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
    import os
    import sys

    return os.environ.get(PYTHON_ENV) or sys.executable


def expand(text: str, repro, scenario_name: str) -> str:
    """{python} {dir} {scenario} {workload} and ${VAR} in one command argument or env value."""
    import os

    out = (text.replace("{python}", python_for(repro)).replace("{dir}", str(repro.dir))
           .replace("{scenario}", scenario_name).replace("{workload}", str(HERE)))
    return os.path.expandvars(out)


def command_for(repro, scenario) -> list[str]:
    return [expand(a, repro, scenario.name) for a in (scenario.command or repro.command)]


def workload_env(repro, scenario) -> dict:
    """The reproducer's and the scenario's env, expanded. PYTHONPATH is the workload's own (plus
    $LUCEPATCH_WORKLOAD_PYTHONPATH), never the caller's: lucepatch's own dependencies on the caller's
    path (the carried wheels) must not shadow the packages the workload's interpreter has (torch's)."""
    import os

    env = {k: expand(v, repro, scenario.name) for k, v in {**repro.env, **scenario.env}.items()}
    extra = os.environ.get(PYTHONPATH_ENV, "")
    env["PYTHONPATH"] = ":".join(p for p in (env.get("PYTHONPATH", ""), extra) if p)
    return env
