"""THE node report: what lucepatch knows about one GPU node, read by every gate that needs a node's facts.

Two forms, one reader (`load_node_report`, `parse_node_report`), schema_version 1:
- written by `lucepatch node --pod NAME | --pod-root DIR --save-report FILE` (lucepatch/lines/pod.py),
  `"kind": "lucepatch-node-report"`: what runs in a GPU pod of the node — the injection state, the
  preloaded library (path, sha256 and its identity as lucepatch/lines/identity.py wrote it, exported
  names, environment names and loader needs included, so the gates run on a report as on the file),
  the driver, the HAMi and vendor the pod sees, the pod's glibc, the limits HAMi applies; described
  by docs/schema/node-report.schema.json;
- written by hand, the driver only: `{"schema_version": 1, "node": "gpu-node-1", "driver_version": "595.84"}`.
`driver_version` is the NVIDIA driver as `nvidia-smi --query-gpu=driver_version` (or
/proc/driver/nvidia/version) prints it; the CUDA/driver gate (node/driver.py) reads it, `doctor`,
`deploy`, `verify` and `build --image` read the rest. Unknown keys are kept in `extra`.

A malformed report, another schema_version or another kind is a UsageError naming the file (exit 2).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lucepatch.errors import UsageError
from lucepatch.files import write_atomic
from lucepatch.node.driver import DriverVersion

SCHEMA_VERSION = 1
KIND = "lucepatch-node-report"

# injection states (node --pod)
INJECTED = "injected"  # a libvgpu.so is preloaded (LD_PRELOAD or /etc/ld.so.preload) and present
NOT_INJECTED = "not-injected"  # nothing preloaded
EXCLUSIVE = "not-injected-exclusive"  # nothing preloaded, and the container's only GPU(s) are exclusive
DISABLED = "mounted-not-preloaded"  # the library is mounted, CUDA_DISABLE_CONTROL=true keeps it out
BROKEN = "preload-missing"  # a preload entry names a file that is not there (the loader ignores it)
STATES = (INJECTED, NOT_INJECTED, EXCLUSIVE, DISABLED, BROKEN)
_SECTIONS = ("collected_from", "collected_at", "tool", "injection", "library", "driver", "hami", "vendor", "glibc",
             "limits", "loads", "gpus", "notes")


@dataclass
class Injection:
    state: str
    message: str
    via: list[str] = field(default_factory=list)  # "LD_PRELOAD", "/etc/ld.so.preload"
    preload: list[str] = field(default_factory=list)  # every entry, in load order
    library_path: str | None = None  # the libvgpu.so in effect (or mounted)


@dataclass
class Library:
    path: str
    sha256: str
    size: int
    identity: dict  # lucepatch.lines.identity.Identity.to_json()

    @property
    def kind(self) -> str:
        return self.identity.get("kind", "unknown")


@dataclass
class Fact:
    value: str | None
    source: str  # where it was read ("/proc/driver/nvidia/version", "nvidia-smi", "--hami-version", ...)
    note: str = ""


@dataclass
class NodeReport:
    driver_version: DriverVersion | None
    node: str | None = None
    source: str = ""  # the file it was read from
    extra: dict[str, Any] = field(default_factory=dict)
    # what node --pod found (None / empty in a hand-written report)
    collected_from: str = ""  # "pod NS/NAME", "this container", "root DIR"
    collected_at: str = ""
    tool: str = ""
    injection: Injection | None = None
    library: Library | None = None
    driver: Fact | None = None
    hami: Fact | None = None
    vendor: Fact | None = None  # who built the HAMi on the node, as the device plugin's environment shows it
    glibc: Fact | None = None  # the pod's glibc
    limits: dict = field(default_factory=dict)
    loads: dict = field(default_factory=dict)  # the library against the pod's glibc: {"ok", "problems", "against"}
    gpus: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def from_doctor(self) -> bool:
        return self.injection is not None

    @property
    def state(self) -> str:
        """The injection state, or "driver-only" for a hand-written report."""
        return self.injection.state if self.injection else "driver-only"

    @property
    def what_runs(self) -> str:
        """One line: what the pod runs, as node --pod found it."""
        if self.injection is None:
            return (f"{self.source or 'the report'} carries only the node's driver (written by hand); lucepatch "
                    "node --pod NAME --save-report FILE writes what the pod runs")
        return self.injection.message

    @property
    def pod_glibc(self) -> str | None:
        return self.glibc.value if self.glibc else None

    @property
    def hami_version(self) -> str | None:
        return self.hami.value if self.hami else None

    def to_json(self) -> dict:
        d = {"schema_version": SCHEMA_VERSION, "kind": KIND, "node": self.node,
             "driver_version": str(self.driver_version) if self.driver_version else None}
        for k in _SECTIONS:
            v = getattr(self, k)
            d[k] = asdict(v) if hasattr(v, "__dataclass_fields__") else v
        return d


def _fact(d, where: str) -> Fact:
    if not isinstance(d, dict) or "source" not in d:
        raise UsageError(f"{where}: malformed node report (a fact without its source); write it again with "
                         "lucepatch node --pod")
    return Fact(d.get("value"), d["source"], d.get("note", ""))


def parse_node_report(doc: Any, source: str = "node report") -> NodeReport:
    if not isinstance(doc, dict):
        raise UsageError(f"{source}: a node report is a JSON object (schema_version {SCHEMA_VERSION})")
    kind = doc.get("kind")
    if kind is not None and kind != KIND:
        raise UsageError(f"{source}: not a lucepatch node report (kind {kind!r}; write one with `lucepatch node "
                         "--pod NAME --save-report FILE`)")
    ver = doc.get("schema_version")
    if ver != SCHEMA_VERSION:
        raise UsageError(f"{source}: schema_version {ver!r} is not {SCHEMA_VERSION}: write it with this lucepatch")
    raw = doc.get("driver_version")
    if raw is not None and not isinstance(raw, str):
        raise UsageError(f"{source}: driver_version must be a string like \"595.84\", not {raw!r}")
    node = doc.get("node")
    known = {"schema_version", "kind", "driver_version", "node"} | (set(_SECTIONS) if kind == KIND else set())
    rep = NodeReport(DriverVersion.parse(raw, source) if raw else None, node if isinstance(node, str) else None,
                     source, {k: v for k, v in doc.items() if k not in known})
    if kind != KIND:
        return rep
    try:
        inj, lib = doc["injection"], doc.get("library")
        rep.collected_from, rep.collected_at, rep.tool = doc["collected_from"], doc["collected_at"], doc.get("tool", "")
        rep.injection = Injection(inj["state"], inj.get("message", ""), list(inj.get("via", [])),
                                  list(inj.get("preload", [])), inj.get("library_path"))
        rep.library = Library(lib["path"], lib["sha256"], int(lib["size"]), dict(lib["identity"])) if lib else None
        rep.driver, rep.hami = _fact(doc["driver"], source), _fact(doc["hami"], source)
        rep.vendor, rep.glibc = _fact(doc["vendor"], source), _fact(doc["glibc"], source)
        rep.limits, rep.loads = dict(doc.get("limits") or {}), dict(doc.get("loads") or {})
        rep.gpus, rep.notes = list(doc.get("gpus") or []), list(doc.get("notes") or [])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{source}: malformed node report ({type(exc).__name__}: {exc}); write it again with "
                         "lucepatch node --pod")
    return rep


def load_node_report(path: str | Path) -> NodeReport:
    """A node report (`node --pod NAME --save-report FILE`; `~` expanded): `.injection`, `.library`,
    `.driver_version`, `.pod_glibc`, `.hami_version`, `.limits`."""
    p = Path(path).expanduser()
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"node report {p} not found (lucepatch node --pod writes one)")
    except OSError as exc:
        raise UsageError(f"node report {p}: {exc.strerror or exc}")
    except json.JSONDecodeError as e:
        raise UsageError(f"node report {p} is not JSON: {e.msg} at line {e.lineno}")
    return parse_node_report(doc, str(p))


def save_node_report(report: NodeReport, path: str | Path) -> None:
    write_atomic(path, json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")


def node_driver(driver: str | None = None, report: str | None = None) -> DriverVersion | None:
    """The node's driver from `--node-driver VER` or `--node-report FILE` (not both); None = neither."""
    if driver and report:
        raise UsageError("give --node-driver or --node-report, not both")
    if driver:
        return DriverVersion.parse(driver, "--node-driver")
    if report:
        rep = load_node_report(report)
        if rep.driver_version is None:
            raise UsageError(f"node report {report} has no driver_version: the gate cannot judge the node")
        return rep.driver_version
    return None
