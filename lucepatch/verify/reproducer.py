"""Reproducers are data: reproducers/<name>/reproducer.toml plus what it runs.

Two kinds, one runner (lucepatch/verify/runner.py), one set of verdicts and one evidence format:

  kind = "c"         (default) C sources on the driver API, compiled by lucepatch (`sources`, `libs`)
  kind = "workload"  any command: a Python program on PyTorch, a built llama.cpp binary, ...
                     (`command`, `requires`, `load_proof`; see lucepatch/verify/workload/)

A workload's `command` is a list of arguments in which {python} (the interpreter lucepatch runs
under, or $LUCEPATCH_WORKLOAD_PYTHON), {dir} (the reproducer's folder), {scenario}, {workload}
(lucepatch's workload helpers: lp_workload.py) and ${VAR} (the caller's environment) are
replaced; a scenario may give its own `command`. `requires` says what the machine must have
(python_modules, executables, files, driver = "real"); a scenario whose requirements are not met
is `skipped` with the reason, never run and never passed. `[build]` (optional) is a program
lucepatch compiles before the runs, cached like every compile (lucepatch.compiling): `sources`
from the reproducer's folder, `output`, `flags` ({dir}, {common} = reproducers/common,
{cuda_include} and ${VAR} replaced), `headers` hashed into the cache key, `language` "c" or
"c++"; the command names it as {build}/<output>. It is built only when some selected scenario's
requirements are met (a build against a library the machine lacks would fail, not skip).
`load_proof` says who proves what was loaded: "program" (the workload reports it after CUDA
init and before its action, through lp_workload or lp_report.h) or "preload" (lucepatch's preloaded reporter reports it at exit and on a fatal
signal: for programs that cannot be changed). `ranks` > 1: that many processes must each prove it.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.workspace import Workspace

KINDS = ("c", "workload")
LOAD_PROOFS = ("program", "preload")
REQUIREMENT_KEYS = ("python_modules", "executables", "files", "driver")
BUILD_KEYS = ("language", "sources", "output", "flags", "headers")


@dataclass
class Requirements:
    """What a machine needs for a scenario to run at all (else: skipped, with the reason)."""
    python_modules: list[str] = field(default_factory=list)
    executables: list[str] = field(default_factory=list)  # on PATH (or absolute)
    files: list[str] = field(default_factory=list)  # paths, ${VAR} expanded (a built binary)
    driver: str = "any"  # any | real

    @classmethod
    def from_toml(cls, d: dict, where: str, base: "Requirements | None" = None) -> "Requirements":
        unknown = sorted(set(d) - set(REQUIREMENT_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown requirement {', '.join(unknown)}; known: {', '.join(REQUIREMENT_KEYS)}")
        out = cls(**{k: (list(v) if isinstance(v, list) else v) for k, v in vars(base).items()}) if base else cls()
        for key in ("python_modules", "executables", "files"):
            if key in d:
                if not isinstance(d[key], list) or not all(isinstance(x, str) and x for x in d[key]):
                    raise UsageError(f"{where}: requires.{key} must be a list of non-empty strings")
                setattr(out, key, list(d[key]))
        if "driver" in d:
            if d["driver"] not in ("any", "real"):
                raise UsageError(f"{where}: requires.driver must be \"any\" or \"real\", not {d['driver']!r}")
            out.driver = d["driver"]
        return out

    def to_json(self) -> dict:
        return {k: v for k, v in vars(self).items() if v not in ([], "any")}


@dataclass
class WorkloadBuild:
    """A program a workload runs, compiled by lucepatch (reproducer.toml [build])."""
    sources: list[str]
    output: str
    flags: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)  # ${VAR} expanded; their bytes key the cache
    language: str = "c"  # c | c++

    @classmethod
    def from_toml(cls, d: dict, where: str, rdir: Path) -> "WorkloadBuild":
        unknown = sorted(set(d) - set(BUILD_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown key {', '.join(unknown)}; known: {', '.join(BUILD_KEYS)}")
        for key in ("sources", "output"):
            if key not in d:
                raise UsageError(f"{where} lacks required key {key!r}")
        out = cls(sources=_str_list(d["sources"], f"{where} sources"), output=str(d["output"]),
                  flags=_str_list(d["flags"], f"{where} flags") if d.get("flags") else [],
                  headers=_str_list(d["headers"], f"{where} headers") if d.get("headers") else [],
                  language=str(d.get("language", "c")))
        if out.language not in ("c", "c++"):
            raise UsageError(f'{where}: language must be "c" or "c++", not {out.language!r}')
        if not out.output or "/" in out.output:
            raise UsageError(f"{where}: output must be a file name, not {out.output!r}")
        for src in out.sources:
            if not (rdir / src).is_file():
                raise UsageError(f"{where}: source {src} does not exist")
        return out

    def to_json(self) -> dict:
        return {"language": self.language, "sources": self.sources, "output": self.output,
                "flags": self.flags, "headers": self.headers}


@dataclass
class Scenario:
    name: str
    control: bool = False
    description: str = ""
    env: dict = field(default_factory=dict)
    min_devices: int = 1
    # A regression guard: a behaviour upstream already gets right at the base (e.g. fixed in
    # `fixed_upstream`). Passing on both variants is "guarded", not "not-proven"; a baseline
    # that fails (an older --baseline-ref) is judged like any other scenario.
    regression_guard: bool = False
    fixed_upstream: str = ""
    # workloads only
    command: list[str] | None = None  # overrides the reproducer's command
    requires: Requirements | None = None  # the reproducer's, with this scenario's keys replacing them
    ranks: int = 1  # processes that must each prove what they loaded (torch.distributed ranks)
    timeout_s: float | None = None  # overrides the reproducer's (a server that loads a model)

    def to_json(self) -> dict:
        out = {"name": self.name, "control": self.control, "description": self.description,
               "min_devices": self.min_devices, "regression_guard": self.regression_guard,
               "fixed_upstream": self.fixed_upstream}
        if self.requires is not None and self.requires.to_json():
            out["requires"] = self.requires.to_json()
        if self.ranks != 1:
            out["ranks"] = self.ranks
        return out


@dataclass
class Reproducer:
    name: str
    dir: Path
    common_dir: Path
    target: str
    artifact: str
    load_marker: str
    timeout_s: float
    default_runs: int
    description: str
    sources: list[str]
    libs: list[str]
    env: dict
    scenarios: list[Scenario]
    kind: str = "c"
    command: list[str] = field(default_factory=list)
    requires: Requirements = field(default_factory=Requirements)
    load_proof: str = "program"
    extra_hash_files: list[Path] = field(default_factory=list)  # lucepatch files a workload runs with
    build: WorkloadBuild | None = None  # a workload's compiled program ([build])

    @property
    def is_workload(self) -> bool:
        return self.kind == "workload"

    @property
    def controls(self) -> list[Scenario]:
        return [s for s in self.scenarios if s.control]

    @property
    def checked(self) -> list[Scenario]:
        return [s for s in self.scenarios if not s.control]

    def scenario(self, name: str) -> Scenario:
        for s in self.scenarios:
            if s.name == name:
                return s
        raise UsageError(f"reproducer {self.name} has no scenario {name!r}; it has {', '.join(s.name for s in self.scenarios)}")

    @property
    def hash(self) -> str:
        """sha256 over every file of the reproducer and the shared header folder (evidence identity);
        a workload's also covers the lucepatch helpers it runs with (lp_workload.py, the reporter)."""
        h = hashlib.sha256()
        # a workload's program built by lucepatch may include the shared headers (lp_report.h)
        for base in (self.dir,) if self.is_workload and self.build is None else (self.dir, self.common_dir):
            if not base.is_dir():
                continue
            for f in sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                h.update(str(f.relative_to(base.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
        for f in self.extra_hash_files:
            h.update(f"lucepatch/{f.name}".encode() + b"\0" + f.read_bytes() + b"\0")
        return h.hexdigest()

    def to_json(self) -> dict:
        out = {"name": self.name, "kind": self.kind, "target": self.target, "artifact": self.artifact,
               "load_marker": self.load_marker, "timeout_s": self.timeout_s,
               "default_runs": self.default_runs, "hash": self.hash,
               "scenarios": [s.to_json() for s in self.scenarios]}
        if self.is_workload:
            out.update(command=self.command, load_proof=self.load_proof, requires=self.requires.to_json())
            if self.build is not None:
                out["build"] = self.build.to_json()
        return out


def _str_list(v, where: str) -> list[str]:
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise UsageError(f"{where} must be a non-empty list of strings")
    return list(v)


def load_reproducer_dir(rdir: Path) -> Reproducer:
    toml_path = rdir / "reproducer.toml"
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{toml_path} is missing; every reproducer folder needs a reproducer.toml")
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{toml_path} is not valid TOML: {exc}")
    kind = data.get("kind", "c")
    if kind not in KINDS:
        raise UsageError(f"{toml_path}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    workload = kind == "workload"
    for key in ("target", "artifact", "scenario") + (() if workload else ("sources",)):
        if key not in data:
            raise UsageError(f"{toml_path} lacks required key {key!r}")
    if not workload:
        for key in ("command", "requires", "load_proof", "build"):
            if key in data:
                raise UsageError(f"{toml_path}: {key!r} is for kind = \"workload\" reproducers")
    requires = Requirements.from_toml(data.get("requires", {}), f"{toml_path} [requires]") if workload else Requirements()
    command = _str_list(data["command"], f"{toml_path}: command") if workload and "command" in data else []
    load_proof = data.get("load_proof", "program")
    build = WorkloadBuild.from_toml(data["build"], f"{toml_path} [build]", rdir) if workload and "build" in data else None
    if load_proof not in LOAD_PROOFS:
        raise UsageError(f"{toml_path}: load_proof must be one of {', '.join(LOAD_PROOFS)}, not {load_proof!r}")
    scenarios = []
    for s in data["scenario"]:
        if "name" not in s:
            raise UsageError(f"{toml_path}: every [[scenario]] needs a name")
        where = f"{toml_path}: scenario {s['name']}"
        if not workload:
            for key in ("command", "requires", "ranks", "timeout_s"):
                if key in s:
                    raise UsageError(f"{where}: {key!r} is for kind = \"workload\" reproducers")
        sc = Scenario(name=s["name"], control=bool(s.get("control", False)),
                      description=s.get("description", ""), env={k: str(v) for k, v in s.get("env", {}).items()},
                      min_devices=int(s.get("min_devices", 1)),
                      regression_guard=bool(s.get("regression_guard", False)),
                      fixed_upstream=str(s.get("fixed_upstream", "")))
        if workload:
            sc.command = _str_list(s["command"], f"{where}: command") if "command" in s else None
            sc.requires = Requirements.from_toml(s.get("requires", {}), f"{where} requires", base=requires)
            sc.ranks = int(s.get("ranks", 1))
            sc.timeout_s = float(s["timeout_s"]) if "timeout_s" in s else None
            if sc.ranks < 1:
                raise UsageError(f"{where}: ranks must be >= 1")
            if sc.command is None and not command:
                raise UsageError(f"{where} has no command and the reproducer gives none")
        scenarios.append(sc)
        if sc.control and sc.regression_guard:
            raise UsageError(f"{toml_path}: scenario {s['name']} cannot be both a control and a regression guard")
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise UsageError(f"{toml_path}: scenario names must be unique")
    if not any(s.control for s in scenarios):
        raise UsageError(f"{toml_path}: a reproducer needs at least one control scenario (control = true)")
    for src in data.get("sources", []):
        if not (rdir / src).is_file():
            raise UsageError(f"{toml_path}: source {src} does not exist")
    extra = []
    if workload:
        from lucepatch.verify.workload import HASHED_FILES

        extra = list(HASHED_FILES)
    return Reproducer(
        name=data.get("name", rdir.name), dir=rdir, common_dir=rdir.parent / "common",
        target=data["target"], artifact=data["artifact"], load_marker=data.get("load_marker", "Initialized"),
        timeout_s=float(data.get("timeout_s", 30)), default_runs=int(data.get("default_runs", 20)),
        description=data.get("description", ""), sources=list(data.get("sources", [])),
        libs=list(data.get("libs", ["cuda", "pthread"])), env={k: str(v) for k, v in data.get("env", {}).items()},
        scenarios=scenarios, kind=kind, command=command, requires=requires, load_proof=load_proof,
        extra_hash_files=extra, build=build,
    )


def list_reproducers(ws: Workspace) -> list[Reproducer]:
    d = ws.reproducers_dir
    if not d.is_dir():
        return []
    return [load_reproducer_dir(p) for p in sorted(d.iterdir()) if (p / "reproducer.toml").is_file()]


def load_reproducer(ws: Workspace, name: str) -> Reproducer:
    rdir = ws.reproducers_dir / name
    if not (rdir / "reproducer.toml").is_file():
        known = ", ".join(r.name for r in list_reproducers(ws)) or "none"
        raise UsageError(f"unknown reproducer {name!r} in workspace {ws.path}; known: {known}")
    return load_reproducer_dir(rdir)
