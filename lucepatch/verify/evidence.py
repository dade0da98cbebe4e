"""The evidence document `verify` writes and `pr`, `ci`, `deploy` and `show` read.

Wire format: JSON, schema_version 2, described by lucepatch/data/evidence.schema.json (also at
docs/schema/evidence.schema.json). `write_evidence` validates before writing, `load_evidence`
validates after reading; schema 1 documents (the committed H200 evidence, not regenerable without
GPU time) are read through `upgrade`, which adds the v2 fields with the values a fixed-N run
implies and changes nothing else.

In memory: `Evidence` and its parts are dataclasses. Fields the schema does not name (a cluster
section, `combined_from`, retirement details) ride along in `extra`, so
`Evidence.from_json(d).to_json() == d` for every valid document.

Identity (docs/design.md): evidence is stale when its upstream commit, the covered patch ids, the
reproducer's hash or the profile's hash differ. Artifact sha256s are provenance; with reproducible
builds a rebuild from the same inputs gives the same sha256.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import os
import platform
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from lucepatch import __version__
from lucepatch.errors import EnvironmentMissing, UsageError, environment_oserror
from lucepatch.faults import pause
from lucepatch.files import data_schema, write_atomic

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


# ---- the typed view ---------------------------------------------------------------------------
def _split(cls, doc: dict) -> tuple[dict, dict]:
    names = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
    alias = getattr(cls, "_ALIAS", {})
    known, extra = {}, {}
    for k, v in doc.items():
        attr = alias.get(k, k)
        (known if attr in names else extra)[attr if attr in names else k] = v
    return known, extra


def _join(obj, skip_none: tuple[str, ...] = ()) -> dict:
    alias = {v: k for k, v in getattr(type(obj), "_ALIAS", {}).items()}
    out = {}
    for f in dataclasses.fields(obj):
        if f.name == "extra":
            continue
        v = getattr(obj, f.name)
        if f.name in skip_none and v is None:
            continue
        if hasattr(v, "to_json"):
            v = v.to_json()
        out[alias.get(f.name, f.name)] = v
    out.update(obj.extra)
    return out


@dataclass
class RunPolicy:
    """How runs were spent (see the schema's run_policy description)."""
    rule: str = "fixed"  # fixed | sequential
    max_runs: int = 20
    alpha: float = 0.01
    theta: float | None = None
    baseline_stop_after: int | None = None
    patched_min_passes: int | None = None
    control_runs: int | None = None
    order: str = "launch"
    note: str = ""
    bounds: dict | None = None  # the rule's exact error bounds of proven (lucepatch.verify.bounds.error_bounds)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict) -> "RunPolicy":
        known, extra = _split(cls, d)
        return cls(**known, extra=extra)

    def to_json(self) -> dict:
        return _join(self, skip_none=("control_runs", "bounds"))


@dataclass
class Tally:
    runs: int = 0
    passed: int = 0
    failures: int = 0
    invalid: int = 0
    skipped: int = 0
    failure_rate: float | None = None
    outcomes: dict = field(default_factory=dict)
    first_error: str = ""
    extra: dict = field(default_factory=dict)
    _ALIAS = {"pass": "passed"}

    @classmethod
    def from_json(cls, d: dict) -> "Tally":
        known, extra = _split(cls, d)
        return cls(**known, extra=extra)

    def to_json(self) -> dict:
        return _join(self)


@dataclass
class ScenarioResult:
    scenario: str  # reproducer:scenario
    control: bool
    verdict: str
    baseline: Tally
    patched: Tally
    reason: str = ""
    p_value: float | None = None
    regression_guard: bool | None = None  # absent in the oldest schema 1 files: read as False
    reproducer: str | None = None
    description: str | None = None
    runs_spent: dict | None = None
    stop_reason: str | None = None
    mode: str | None = None
    theta: float | None = None  # proven/guarded: patched 0/n => failure rate < theta at 1 - alpha
    fingerprint: dict | None = None
    extra: dict = field(default_factory=dict)
    _OPTIONAL = ("regression_guard", "reproducer", "description", "runs_spent", "stop_reason", "mode", "theta",
                 "fingerprint")

    @property
    def name(self) -> str:
        return self.scenario.split(":", 1)[-1]

    @classmethod
    def from_json(cls, d: dict) -> "ScenarioResult":
        known, extra = _split(cls, d)
        known["baseline"] = Tally.from_json(known.get("baseline", {}))
        known["patched"] = Tally.from_json(known.get("patched", {}))
        return cls(**known, extra=extra)

    def to_json(self) -> dict:
        return _join(self, skip_none=self._OPTIONAL)


@dataclass
class Artifact:
    path: str
    sha256: str | None

    def to_json(self) -> dict:
        return {"path": self.path, "sha256": self.sha256}


@dataclass
class VariantInfo:
    """What one side ran: built from the series, from an upstream ref, or given as a file."""
    artifact: Artifact
    source: str | None = None  # series | ref | file | image  (JSON "from")
    commit: str | None = None
    base: str | None = None
    tree: str | None = None
    patches: list | None = None
    ref: str | None = None
    build_key: str | None = None
    recipe: dict | None = None  # builders/reproducible.Recipe.to_json(): how to rebuild the same bytes
    extra: dict = field(default_factory=dict)
    _ALIAS = {"from": "source"}

    @classmethod
    def from_json(cls, d: dict) -> "VariantInfo":
        known, extra = _split(cls, d)
        a = known.pop("artifact", {}) or {}
        return cls(artifact=Artifact(a.get("path", ""), a.get("sha256")), **known, extra=extra)

    def to_json(self) -> dict:
        out = {"from": self.source} if self.source is not None else {}
        for k in ("ref", "commit", "base", "tree", "patches", "build_key", "recipe"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        out.update(self.extra)
        out["artifact"] = self.artifact.to_json()
        return out


@dataclass
class SeriesInfo:
    version: str
    series_hash: str
    patch_ids: list
    patches: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict) -> "SeriesInfo":
        known, extra = _split(cls, d)
        return cls(**known, extra=extra)

    def to_json(self) -> dict:
        return _join(self)


@dataclass
class Evidence:
    target: str
    series: SeriesInfo
    upstream: dict  # {"url", "base"}
    reproducers: list  # [{"name", "hash", "kind"?}]
    driver: dict  # derived from what the runs mapped and reported, never from a flag
    simulated: bool
    execution: dict
    run_policy: RunPolicy
    variants: dict  # name -> VariantInfo
    scenarios: list  # [ScenarioResult]
    verdict: str
    runs: list  # RunRecord JSON (log_tail only for non-passing runs)
    skipped: list = field(default_factory=list)
    tool: dict = field(default_factory=dict)
    workspace: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    kind: str = "lucepatch-evidence"
    extra: dict = field(default_factory=dict)

    _ORDER = ("schema_version", "kind", "tool", "workspace", "target", "series", "upstream", "reproducers",
              "driver", "simulated", "execution", "run_policy", "skipped", "variants", "scenarios", "verdict", "runs")

    @classmethod
    def from_json(cls, doc: dict) -> "Evidence":
        doc = upgrade(doc)
        known, extra = _split(cls, doc)
        known["series"] = SeriesInfo.from_json(known["series"])
        known["run_policy"] = RunPolicy.from_json(known["run_policy"])
        known["variants"] = {k: VariantInfo.from_json(v) for k, v in known["variants"].items()}
        known["scenarios"] = [ScenarioResult.from_json(s) for s in known["scenarios"]]
        return cls(**known, extra=extra)

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        for k in self._ORDER:
            v = getattr(self, k)
            if k == "variants":
                v = {n: vi.to_json() for n, vi in v.items()}
            elif k == "scenarios":
                v = [s.to_json() for s in v]
            elif hasattr(v, "to_json"):
                v = v.to_json()
            out[k] = v
        out.update(self.extra)
        return out

    # -- questions every reader asks --------------------------------------------------------------
    def scenario(self, name: str) -> ScenarioResult | None:
        return next((s for s in self.scenarios if s.scenario == name or s.name == name), None)

    @property
    def checked(self) -> list:
        return [s for s in self.scenarios if not s.control]

    @property
    def driver_kind(self) -> str | None:
        return (self.driver or {}).get("kind")

    def artifact_sha256(self, variant: str = "patched") -> str | None:
        v = self.variants.get(variant)
        return v.artifact.sha256 if v else None


# ---- schema, versions, files ------------------------------------------------------------------
def schema() -> dict:
    return data_schema("evidence")


@lru_cache(maxsize=1)
def schema_validator():
    """The schema's validator, made once per process (importing jsonschema is most of validation's cost;
    verify makes it in the background while its runs go on)."""
    import jsonschema  # lazy: jsonschema, 34 ms

    return jsonschema.Draft202012Validator(schema())


def validate(doc: dict, *, what: str = "evidence") -> None:
    """Raise UsageError naming the first schema violation (path and message)."""
    errors = sorted(schema_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        raise UsageError(f"{what} does not match the evidence schema at {where}: {e.message[:200]}")


def upgrade(doc: dict) -> dict:
    """A schema 1 document as schema 2: a fixed-N run policy, runs spent = runs tallied. Any other
    version is returned as it is (validation reports it)."""
    if not isinstance(doc, dict) or doc.get("schema_version") != 1:
        return doc
    out = copy.deepcopy(doc)
    n = (out.get("execution") or {}).get("runs_per_variant") or max(
        [s.get("baseline", {}).get("runs", 0) for s in out.get("scenarios", [])] or [1]) or 1
    out["schema_version"] = 2
    out["run_policy"] = {"rule": "fixed", "max_runs": int(n), "alpha": 0.01, "theta": None,
                         "baseline_stop_after": None, "patched_min_passes": None, "order": "launch",
                         "note": "read from schema 1 evidence: every scenario ran a fixed number of runs"}
    # the oldest schema 1 files predate these two fields; both follow from what the file holds
    out.setdefault("simulated", (out.get("driver") or {}).get("kind") == "fake")
    # schema 1 combined evidence (pr --evidence A --evidence B) dropped the runs: only tallies remain
    if "combined_from" in out:
        out.setdefault("runs", [])
    out.setdefault("skipped", [{"scenario": s["scenario"], "reason": s.get("reason", "")}
                               for s in out.get("scenarios", []) if s.get("verdict") == "skipped"])
    for s in out.get("scenarios", []):
        for side in ("baseline", "patched"):
            t = s.get(side) or {}
            t.setdefault("skipped", (t.get("outcomes") or {}).get("skipped", 0))
        s.setdefault("runs_spent", {v: s.get(v, {}).get("runs", 0) for v in ("baseline", "patched")})
        s.setdefault("stop_reason", "fixed number of runs")
        s.setdefault("mode", "fixed")
    # the in-memory key order of v2
    return {**{k: out[k] for k in Evidence._ORDER if k in out}, **{k: v for k, v in out.items() if k not in Evidence._ORDER}}


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def host_info() -> dict:
    return {"hostname": platform.node(), "machine": platform.machine(), "kernel": platform.release(),
            "cpus": os.cpu_count()}


def write_evidence(path: Path, ev: "Evidence | dict") -> None:
    """Validate and write atomically; the file is world-readable (it goes into PRs)."""
    doc = ev.to_json() if isinstance(ev, Evidence) else ev
    validate(doc, what="the evidence verify produced")
    path = Path(path).expanduser()  # a program's "~/x.json" (the CLI's shell expands its own)
    if path.exists() and path.is_dir():
        raise UsageError(f"--evidence {path} is a directory; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    pause("evidence-write")
    write_atomic(path, json.dumps(doc, indent=2, sort_keys=False) + "\n", mode=0o666)


def check_destination(path: str | Path, option: str = "--evidence") -> None:
    """Can the evidence be written there? Asked before anything is built or run, so that an unusable path
    costs a second, not a verification: not a folder, its folder exists, and a file can be created in it
    (tried: permissions, a read-only file system or a full disk say so only when writing)."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {p} is a directory; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise UsageError(f"{option} {p}: the folder {parent} {what}; create it or give another path")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{p.name}.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        # permissions, a read-only file system, a full disk: the machine's (exit 3); anything else: the path's
        cls = EnvironmentMissing if environment_oserror(exc) is not None else UsageError
        raise cls(f"{option} {p}: cannot create a file in {parent} ({exc.strerror or exc}); make it writable by you "
                  "or give another path")


def read_evidence_json(path: Path) -> dict:
    """The evidence file as a schema 2 dict (upgraded from 1 when needed), validated."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"evidence file {path} does not exist; run lucepatch verify --evidence {path}")
    except IsADirectoryError:
        raise UsageError(f"evidence file {path} is a directory; pass the file lucepatch verify wrote")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"evidence file {path} is not JSON ({exc})")
    if not isinstance(doc, dict) or doc.get("kind", "lucepatch-evidence") != "lucepatch-evidence" \
            or doc.get("schema_version") not in READABLE_VERSIONS or "verdict" not in doc:
        raise UsageError(f"evidence file {path} is not lucepatch evidence (schema_version "
                         f"{'/'.join(map(str, READABLE_VERSIONS))}); pass the file lucepatch verify --evidence wrote")
    return upgrade_and_validate(doc, path)


def upgrade_and_validate(doc: dict, path) -> dict:
    """A schema 1 or 2 evidence document (read from `path`) as schema 2, validated."""
    doc = upgrade(doc)
    validate(doc, what=f"evidence file {path}")
    return doc


def load_evidence(path: Path) -> Evidence:
    """Evidence JSON as typed `Evidence` (validated; schema 1 upgraded); `~` expanded."""
    return Evidence.from_json(read_evidence_json(Path(path).expanduser()))


def staleness(doc: dict, *, upstream_commit: str, patch_ids: list[str], reproducer_hashes: dict[str, str]) -> list[str]:
    """Reasons the evidence no longer describes this series; empty when it is current."""
    why = []
    if doc.get("upstream", {}).get("base") != upstream_commit:
        why.append(f"upstream commit {str(doc.get('upstream', {}).get('base'))[:12]} != {upstream_commit[:12]}")
    covered = doc.get("series", {}).get("patch_ids")
    if covered is not None and covered != patch_ids:
        why.append("the series' patch ids changed since the evidence was taken")
    for rep in doc.get("reproducers", []):
        have = reproducer_hashes.get(rep.get("name"))
        if have is not None and have != rep.get("hash"):
            why.append(f"reproducer {rep.get('name')} changed since the evidence was taken")
    return why


def tool_info() -> dict:
    return {"lucepatch": __version__, "created": now_utc(), "host": host_info()}
