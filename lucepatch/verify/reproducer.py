"""Reproducers are data: reproducers/<name>/reproducer.toml + C sources (driver API only)."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.workspace import Workspace


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

    def to_json(self) -> dict:
        return {"name": self.name, "control": self.control, "description": self.description,
                "min_devices": self.min_devices, "regression_guard": self.regression_guard,
                "fixed_upstream": self.fixed_upstream}


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
        """sha256 over every file of the reproducer and the shared header folder (evidence identity)."""
        h = hashlib.sha256()
        for base in (self.dir, self.common_dir):
            if not base.is_dir():
                continue
            for f in sorted(p for p in base.rglob("*") if p.is_file()):
                h.update(str(f.relative_to(base.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
        return h.hexdigest()

    def to_json(self) -> dict:
        return {"name": self.name, "target": self.target, "artifact": self.artifact,
                "load_marker": self.load_marker, "timeout_s": self.timeout_s,
                "default_runs": self.default_runs, "hash": self.hash,
                "scenarios": [s.to_json() for s in self.scenarios]}


def load_reproducer_dir(rdir: Path) -> Reproducer:
    toml_path = rdir / "reproducer.toml"
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{toml_path} is missing; every reproducer folder needs a reproducer.toml")
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{toml_path} is not valid TOML: {exc}")
    for key in ("target", "artifact", "sources", "scenario"):
        if key not in data:
            raise UsageError(f"{toml_path} lacks required key {key!r}")
    scenarios = []
    for s in data["scenario"]:
        if "name" not in s:
            raise UsageError(f"{toml_path}: every [[scenario]] needs a name")
        scenarios.append(Scenario(name=s["name"], control=bool(s.get("control", False)),
                                  description=s.get("description", ""), env=dict(s.get("env", {})),
                                  min_devices=int(s.get("min_devices", 1)),
                                  regression_guard=bool(s.get("regression_guard", False)),
                                  fixed_upstream=str(s.get("fixed_upstream", ""))))
        if scenarios[-1].control and scenarios[-1].regression_guard:
            raise UsageError(f"{toml_path}: scenario {s['name']} cannot be both a control and a regression guard")
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise UsageError(f"{toml_path}: scenario names must be unique")
    if not any(s.control for s in scenarios):
        raise UsageError(f"{toml_path}: a reproducer needs at least one control scenario (control = true)")
    for src in data["sources"]:
        if not (rdir / src).is_file():
            raise UsageError(f"{toml_path}: source {src} does not exist")
    return Reproducer(
        name=data.get("name", rdir.name), dir=rdir, common_dir=rdir.parent / "common",
        target=data["target"], artifact=data["artifact"], load_marker=data.get("load_marker", "Initialized"),
        timeout_s=float(data.get("timeout_s", 30)), default_runs=int(data.get("default_runs", 20)),
        description=data.get("description", ""), sources=list(data["sources"]),
        libs=list(data.get("libs", ["cuda", "pthread"])), env={k: str(v) for k, v in data.get("env", {}).items()},
        scenarios=scenarios,
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
