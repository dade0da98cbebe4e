"""Reproducers are data: reproducers/<name>/reproducer.toml plus what it runs.

Two kinds, one runner (lucepatch/verify/runner.py), one set of verdicts and one evidence format:

  kind = "c"         (default) C sources on the driver API, compiled by lucepatch (`sources`, `libs`)
  kind = "workload"  any command: a Python program on PyTorch, a built llama.cpp binary, ...
                     (`command`, `requires`, `load_proof`; see lucepatch/native/workload/)

A workload's `command` is a list of arguments in which {python} (the interpreter lucepatch runs
under, or $LUCEPATCH_WORKLOAD_PYTHON), {dir} (the reproducer's folder), {scenario}, {workload}
(lucepatch's workload helpers: lp_workload.py) and ${VAR} (the caller's environment) are
replaced; a scenario may give its own `command`. `requires` says what the machine must have
(python_modules, executables, files, driver = "real"); a scenario whose requirements are not met
is `skipped` with the reason, never run and never passed. `[build]` (optional) is a program
lucepatch compiles before the runs, cached like every compile (lucepatch.native.compiling): `sources`
from the reproducer's folder, `output`, `flags` ({dir}, {common} = reproducers/common,
{cuda_include} and ${VAR} replaced), `headers` hashed into the cache key, `language` "c" or
"c++"; the command names it as {build}/<output>. It is built only when some selected scenario's
requirements are met (a build against a library the machine lacks would fail, not skip).
`load_proof` says who proves what was loaded: "program" (the workload reports it after CUDA
init and before its action, through lp_workload or lp_report.h) or "preload" (lucepatch's preloaded reporter reports it at exit and on a fatal
signal: for programs that cannot be changed). `ranks` > 1: that many processes must each prove it.

Parameters (either kind): what a scenario's program takes as input — sizes, counts, devices — are
declared, typed, in `[params.<name>]` (every scenario) and `[[scenario]]`'s `[scenario.params.<name>]`
(that scenario; a name declared in both is the scenario's). Keys: `type` (int | bytes | device |
choice), `default`, `min`/`max` (int, bytes, device), `choices` (choice), `points` (values a sweep
must include: both sides of each threshold the scenario drives, e.g. the limit exactly hit and one
byte over), `env` (the variable that carries the value; default LP_PARAM_<NAME>), `description`.
Bytes take an integer or a string with a k/m/g suffix (binary, as HAMi-core reads its limits). The
runner always sets every declared parameter (the default unless a caller such as an input sweep
gives another value, validated against the declaration), so the program reads it from the
environment and never keeps a second default (lp_param_* in reproducers/common/lp_report.h,
lp_workload.param). A parameter's variable must not also be set in [env].
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.native.workload import HASHED_FILES
from lucepatch.verify.measure import Measure
from lucepatch.workspace import Workspace

KINDS = ("c", "workload")
PARAM_TYPES = ("int", "bytes", "device", "choice")
PARAM_KEYS = ("type", "default", "min", "max", "choices", "points", "env", "description")
_BYTE_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
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


def parse_bytes(v, where: str) -> int:
    """An integer number of bytes, or a string with a k/m/g suffix (binary units, as HAMi-core reads
    CUDA_DEVICE_MEMORY_LIMIT): 64m = 67108864."""
    if isinstance(v, bool):
        raise UsageError(f"{where}: {v!r} is not a number of bytes")
    if isinstance(v, int):
        n = v
    elif isinstance(v, str) and v.strip():
        t = v.strip().lower()
        mult = _BYTE_SUFFIX.get(t[-1], 1)
        digits = t[:-1] if t[-1] in _BYTE_SUFFIX else t
        if not digits.isdigit():
            raise UsageError(f"{where}: {v!r} is not a number of bytes (an integer, or digits with k, m or g)")
        n = int(digits) * mult
    else:
        raise UsageError(f"{where}: {v!r} is not a number of bytes")
    if n < 0:
        raise UsageError(f"{where}: {v!r} is negative")
    return n


@dataclass(frozen=True)
class Param:
    """One typed input of a scenario's program (reproducer.toml [params.<name>] /
    [scenario.params.<name>]). Values are normalised: int/bytes/device as int, choice as str."""
    name: str
    type: str
    default: int | str
    env: str
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] = ()
    points: tuple = ()
    description: str = ""

    def check(self, value, where: str = "") -> int | str:
        """`value` parsed and validated against the declaration (UsageError naming it otherwise)."""
        where = where or f"parameter {self.name}"
        if self.type == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise UsageError(f"{where}: {value!r} is not one of {', '.join(self.choices)}")
            return value
        if self.type == "bytes":
            v = parse_bytes(value, where)
        else:
            if isinstance(value, bool) or not isinstance(value, (int, str)) or \
                    (isinstance(value, str) and not value.strip().lstrip("-").isdigit()):
                raise UsageError(f"{where}: {value!r} is not an integer")
            v = int(value)
            if self.type == "device" and v < 0:
                raise UsageError(f"{where}: device {v} is negative")
        if self.min is not None and v < self.min:
            raise UsageError(f"{where}: {value!r} is below the minimum {self.min}")
        if self.max is not None and v > self.max:
            raise UsageError(f"{where}: {value!r} is above the maximum {self.max}")
        return v

    def to_json(self) -> dict:
        out = {"type": self.type, "default": self.default, "env": self.env}
        for key in ("min", "max"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.choices:
            out["choices"] = list(self.choices)
        if self.points:
            out["points"] = list(self.points)
        if self.description:
            out["description"] = self.description
        return out

    @classmethod
    def from_toml(cls, name: str, d, where: str) -> "Param":
        where = f"{where} parameter {name}"
        if not isinstance(d, dict):
            raise UsageError(f"{where} must be a table (type, default, ...)")
        if not name.replace("_", "").isalnum() or not name[:1].isalpha() or name != name.lower():
            raise UsageError(f"{where}: a parameter name is lower-case letters, digits and _, starting with a letter")
        unknown = sorted(set(d) - set(PARAM_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown key {', '.join(unknown)}; known: {', '.join(PARAM_KEYS)}")
        ptype = d.get("type")
        if ptype not in PARAM_TYPES:
            raise UsageError(f"{where}: type must be one of {', '.join(PARAM_TYPES)}, not {ptype!r}")
        if "default" not in d:
            raise UsageError(f"{where} lacks a default")
        env = d.get("env", f"LP_PARAM_{name.upper()}")
        if not isinstance(env, str) or not env or not env.replace("_", "").isalnum() or env[0].isdigit():
            raise UsageError(f"{where}: env must name an environment variable, not {env!r}")
        if ptype == "choice":
            choices = d.get("choices")
            if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
                raise UsageError(f"{where}: a choice parameter needs choices, a non-empty list of strings")
            if "min" in d or "max" in d:
                raise UsageError(f"{where}: min/max are for int, bytes and device parameters")
            bare = cls(name, ptype, "", env, choices=tuple(choices))
        else:
            if "choices" in d:
                raise UsageError(f"{where}: choices are for choice parameters")
            conv = (lambda v, w: parse_bytes(v, w)) if ptype == "bytes" else (lambda v, w: cls._int(v, w))
            lo = conv(d["min"], f"{where} min") if "min" in d else None
            hi = conv(d["max"], f"{where} max") if "max" in d else None
            if ptype == "device" and lo is None:
                lo = 0
            if lo is not None and hi is not None and lo > hi:
                raise UsageError(f"{where}: min {d['min']!r} is above max {d['max']!r}")
            bare = cls(name, ptype, 0, env, min=lo, max=hi)
        default = bare.check(d["default"], f"{where} default")
        points = d.get("points", [])
        if not isinstance(points, list):
            raise UsageError(f"{where}: points must be a list of values")
        pts = tuple(bare.check(v, f"{where} point") for v in points)
        if len(set(pts)) != len(pts):
            raise UsageError(f"{where}: points must not repeat a value")
        desc = d.get("description", "")
        if not isinstance(desc, str):
            raise UsageError(f"{where}: description must be a string")
        return cls(name, ptype, default, env, min=bare.min, max=bare.max, choices=bare.choices,
                   points=pts, description=desc)

    @staticmethod
    def _int(v, where: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise UsageError(f"{where}: {v!r} is not an integer")
        return v


def _params_from_toml(d, where: str) -> dict[str, Param]:
    if not isinstance(d, dict):
        raise UsageError(f"{where} params must be a table of parameters ([params.<name>])")
    return {name: Param.from_toml(name, v, where) for name, v in d.items()}


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
    guard_why: str = ""  # why it runs as a guard here, named in its `guarded` verdict (set by verify)
    # workloads only
    command: list[str] | None = None  # overrides the reproducer's command
    requires: Requirements | None = None  # the reproducer's, with this scenario's keys replacing them
    ranks: int = 1  # processes that must each prove what they loaded (torch.distributed ranks)
    timeout_s: float | None = None  # overrides the reproducer's (a server that loads a model)
    params: dict[str, Param] = field(default_factory=dict)  # the reproducer's and this scenario's inputs
    measure: Measure | None = None  # a quantitative scenario: judged on a rate (lucepatch/verify/measure.py)

    def param_env(self, values: dict | None = None) -> dict:
        """The environment that carries every declared parameter: its default, or the value given
        in `values` (validated; a name the scenario does not declare is a UsageError)."""
        values = dict(values or {})
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            known = ", ".join(self.params) or "none"
            raise UsageError(f"scenario {self.name} has no parameter {', '.join(unknown)}; it declares {known}")
        env = {}
        for name, p in self.params.items():
            v = p.check(values[name], f"scenario {self.name} parameter {name}") if name in values else p.default
            env[p.env] = str(v)
        return env

    def to_json(self) -> dict:
        out = {"name": self.name, "control": self.control, "description": self.description,
               "min_devices": self.min_devices, "regression_guard": self.regression_guard,
               "fixed_upstream": self.fixed_upstream}
        if self.params:
            out["params"] = {n: p.to_json() for n, p in self.params.items()}
        if self.requires is not None and self.requires.to_json():
            out["requires"] = self.requires.to_json()
        if self.ranks != 1:
            out["ranks"] = self.ranks
        if self.measure is not None:
            out["measure"] = self.measure.to_json()
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
    def is_timed(self) -> bool:
        """A reproducer with rate scenarios: its programs loop for a time, not a count."""
        return any(s.measure is not None for s in self.scenarios)

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
    shared_params = _params_from_toml(data.get("params", {}), f"{toml_path}:")
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
        sc.params = {**shared_params, **_params_from_toml(s.get("params", {}), f"{where}:")}
        if "measure" in s:
            if sc.control or sc.regression_guard is None:
                raise UsageError(f"{where}: a control passes or fails; it cannot have a [scenario.measure]")
            sc.measure = Measure.from_toml(s["measure"], where)
        env_keys = {**data.get("env", {}), **s.get("env", {})}
        clash = sorted(p.env for p in sc.params.values() if p.env in env_keys)
        if clash:
            raise UsageError(f"{where}: {', '.join(clash)} is both a parameter's variable and set in [env]; "
                             "declare it once (the parameter's default)")
        envs = [p.env for p in sc.params.values()]
        if len(set(envs)) != len(envs):
            raise UsageError(f"{where}: two parameters share one variable")
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


def scenario_env(repro: Reproducer, scenario: Scenario, params: dict | None = None) -> dict:
    """What a C reproducer's program runs with: the reproducer's [env], the scenario's, and every
    declared parameter (defaults unless `params` gives values). The one place the runner and the
    trace recorder take it from."""
    return {**repro.env, **scenario.env, **scenario.param_env(params)}


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
