"""Processes start only in the helpers the README's design section names ("Where processes start"):
git through lucepatch/git.py (GitPython included), the Docker SDK in the image builders and doctor,
every other program in its one runner module. A new `subprocess` import, `os.system`, or a
`["git", ...]` argv anywhere else fails here — add the call to the named helper instead."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

PKG = REPO_ROOT / "lucepatch"

# module -> what it runs (the same list as docs/design.md "Where processes start")
PROCESS_HELPERS = {
    "lucepatch/git.py": "git",
    "lucepatch/children.py": "the process groups that die with lucepatch (builds, compiles, runs, driver probes)",
    "lucepatch/native/compiling.py": "the C compiler (cached compiles)",
    "lucepatch/native/objcache.py": "the compiler launcher CMake runs: the preprocessor, the compiler (issue 36)",
    "lucepatch/builders/driverless.py": "ldconfig -p, unshare (a link as a driver-less builder sees it)",
    "lucepatch/builders/native.py": "cmake (native builds)",
    "lucepatch/builders/probe.py": "cmake, ninja, nvcc, ld.so, cuobjdump (probes)",
    "lucepatch/builders/superbuild.py": "cmake, ninja, nvcc (the full Lucebox build, the drop-and-relink)",
    "lucepatch/native/toolchain.py": "<tool> --version",
    "lucepatch/verify/runner.py": "reproducer and workload processes, unshare, addr2line, a workload interpreter's probe",
    "lucepatch/verify/driver.py": "the real-driver probe, nvidia-smi",
    "lucepatch/native/trace/__init__.py": "traced reproducer runs",
    "lucepatch/verify/record_traces.py": "the trace recorder's driver probe",
    "lucepatch/services/doctor.py": "tool version checks",
    "lucepatch/lines/pod.py": "nvidia-smi, getconf GNU_LIBC_VERSION (node --pod-root / inside a pod)",
    "lucepatch/upstream/checks.py": "the upstream's own PR checks (cpplint, scripts)",
    "lucepatch/upstream/coverage.py": "gcov (the measured coverage map)",
    "lucepatch/k8s/swap.py": "the node swap script",
}
DOCKER_SDK = {"lucepatch/builders/image.py", "lucepatch/k8s/plugin_image.py", "lucepatch/services/doctor.py",
              "lucepatch/services/node_sources.py"}
# may import subprocess for its exception types, but start nothing
TYPES_ONLY = {"lucepatch/errors.py": "maps subprocess.TimeoutExpired to a one-line error"}
_SPAWN = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
GITPYTHON = {"lucepatch/git.py"}
_OS_SPAWN = {"system", "popen", "posix_spawn", "posix_spawnp", "fork", "forkpty"}


def _violations(rel: str, tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                top = m.split(".")[0]
                if top in ("subprocess", "pty") and rel not in PROCESS_HELPERS and rel not in TYPES_ONLY:
                    out.append(f"{where}: imports {m}")
                if top == "docker" and rel not in DOCKER_SDK:
                    out.append(f"{where}: imports the Docker SDK")
                absolute = isinstance(node, ast.Import) or node.level == 0  # not `from . import git`
                if top == "git" and absolute and rel not in GITPYTHON:
                    out.append(f"{where}: imports GitPython")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if (node.attr in _OS_SPAWN or node.attr.startswith(("exec", "spawn"))) and rel not in PROCESS_HELPERS:
                out.append(f"{where}: os.{node.attr}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "subprocess" \
                and node.attr in _SPAWN and rel in TYPES_ONLY:
            out.append(f"{where}: subprocess.{node.attr} in a module that may only use subprocess's types")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("create_subprocess_"):
            if rel not in PROCESS_HELPERS:
                out.append(f"{where}: {node.attr}")
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git" and rel not in GITPYTHON:
                out.append(f"{where}: a git argv outside lucepatch/git.py")
    return out


def test_processes_start_only_in_the_named_helpers():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(REPO_ROOT))
        found += _violations(rel, ast.parse(path.read_text(encoding="utf-8"), rel))
    assert not found, "\n".join(found)


def test_the_scan_finds_what_it_forbids():
    # the check cannot pass vacuously: each forbidden form is caught in a module that is no helper
    bad = ("import subprocess\nfrom subprocess import run\nimport os\nos.system('x')\nos.execvp('a', [])\n"
           "import docker\nimport git\nfrom git import Repo\nargv = ['git', 'status']\n"
           "import asyncio\nasyncio.create_subprocess_exec('x')\n")
    v = _violations("lucepatch/engine/new_thing.py", ast.parse(bad))
    kinds = " ".join(v)
    for what in ("imports subprocess", "os.system", "os.execvp", "Docker SDK", "imports GitPython",
                 "git argv", "create_subprocess_exec"):
        assert what in kinds, (what, v)
    assert _violations("lucepatch/git.py", ast.parse("import git\nx = ['git', 'log']\nimport subprocess\n")) == []
    assert _violations("lucepatch/errors.py", ast.parse("import subprocess\nsubprocess.TimeoutExpired\n")) == []
    assert _violations("lucepatch/errors.py", ast.parse("import subprocess\nsubprocess.run(['x'])\n"))


def test_design_names_every_helper():
    text = (REPO_ROOT / "docs" / "design.md").read_text()
    section = text.split("Where processes start", 1)[1].split("\n## ", 1)[0]
    for rel in PROCESS_HELPERS:
        assert rel.removeprefix("lucepatch/") in section, rel
    for rel in sorted(DOCKER_SDK):
        assert rel.removeprefix("lucepatch/") in section, rel
