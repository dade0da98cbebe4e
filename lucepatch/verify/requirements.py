"""Can this machine run a scenario at all? (reproducer.toml `requires` of a workload, `min_devices` of any)

An unmet requirement makes the scenario `skipped` with the reason: never run, never passed, listed
in the evidence. Checked on the host, before any run, without the library under test:
python_modules (found by the workload's interpreter), executables (on PATH), files (${VAR}
expanded: a built binary), driver = "real" (the chosen driver is the machine's), min_devices
(counted by asking that driver).
"""

from __future__ import annotations

import os
import shutil
import sys
from functools import lru_cache

from lucepatch import children
from lucepatch.native.workload import python_for
from lucepatch.verify.driver import _PROBE
from lucepatch.verify.reproducer import Reproducer, Scenario

_FIND = ("import importlib.util, sys\n"
         "missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]\n"
         "print(' '.join(missing)); sys.exit(1 if missing else 0)\n")


@lru_cache(maxsize=64)
def _missing_modules(python: str, modules: tuple[str, ...], pythonpath: str) -> tuple[str, ...]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    r = children.run_helper([python, "-c", _FIND, *modules], timeout=60, env=env)
    if r is None:
        return tuple(f"{m} (cannot run {python})" for m in modules)
    if r.returncode == 0:
        return ()
    return tuple(r.stdout.split()) or modules


def device_count(driver_env: dict) -> int:
    """CUDA devices the driver in `driver_env` reports (0 when it cannot be asked)."""
    r = children.run_helper([sys.executable, "-c", _PROBE], timeout=60, env={**os.environ, **driver_env})
    parts = r.stdout.split() if r is not None else []
    return int(parts[1]) if len(parts) == 2 and parts[0] == "devices" else 0


def unmet(repro: Reproducer, scenario: Scenario, driver_chosen: str, *, devices: int | None = None,
          pythonpath: str = "") -> str:
    """Why `scenario` cannot run here ("" when it can)."""
    req = scenario.requires or repro.requires
    why = []
    if req.driver == "real" and driver_chosen != "real":
        which = "simulated" if driver_chosen == "fake" else driver_chosen
        # the cause is the workload's CUDA runtime (libcudart: PyTorch's, ggml's, cuBLAS's), not any one client
        why.append(f"needs the real CUDA driver (this verify uses the {which} one, which has the driver API only: "
                   "the CUDA runtime a workload loads needs the driver's private export tables)")
    missing = [e for e in req.executables if shutil.which(os.path.expandvars(e)) is None]
    if missing:
        why.append(f"needs {', '.join(missing)} on PATH")
    for f in req.files:
        path = os.path.expandvars(f)
        if "$" in path:
            why.append(f"needs {f}: set the variable it names")
        elif not os.path.exists(path):
            why.append(f"needs {path} (not found)")
    if req.python_modules:
        python = python_for(repro)
        gone = _missing_modules(python, tuple(req.python_modules), pythonpath)
        if gone:
            why.append(f"needs the Python module(s) {', '.join(gone)} (not importable by {python})")
    if devices is not None and scenario.min_devices > devices:
        why.append(f"needs {scenario.min_devices} GPUs; the driver reports {devices}")
    return "; ".join(why)
