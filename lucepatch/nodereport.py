"""THE node report: what runs in a GPU pod of a node, written by `doctor --pod` / `--pod-root`, read
offline by `doctor`, `deploy`, `verify` and `build --image` (`--node-report FILE`) and by every
gate that needs a node's facts (the driver, the glibc of its pods, the library it preloads).

One typed reader (`load`) so no caller parses the JSON by hand; the JSON schema is
docs/schema/node-report.schema.json (tests validate what `doctor` writes against it). The
library's identity is kept as `lucepatch.lines.identity.Identity.to_json()` wrote it: exported
names, environment names and loader needs included, so the gates run on a report as on the file.

schema_version 1. An unknown schema_version or a report without the required sections is a
UsageError naming the file (exit 2).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.files import write_atomic

SCHEMA_VERSION = 1
KIND = "lucepatch-node-report"

# injection states
INJECTED = "injected"  # a libvgpu.so is preloaded (LD_PRELOAD or /etc/ld.so.preload) and present
NOT_INJECTED = "not-injected"  # nothing preloaded
EXCLUSIVE = "not-injected-exclusive"  # nothing preloaded, and the container's only GPU(s) are exclusive
DISABLED = "mounted-not-preloaded"  # the library is mounted, CUDA_DISABLE_CONTROL=true keeps it out
BROKEN = "preload-missing"  # a preload entry names a file that is not there (the loader ignores it)
STATES = (INJECTED, NOT_INJECTED, EXCLUSIVE, DISABLED, BROKEN)


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
    collected_from: str  # "pod NS/NAME", "root DIR"
    collected_at: str
    tool: str
    injection: Injection
    library: Library | None
    driver: Fact
    hami: Fact
    vendor: Fact  # who built the HAMi on the node, as the device plugin's environment shows it
    glibc: Fact  # the pod's glibc
    limits: dict  # {"memory_mib": {"0": 24000}, "sm_percent": {...}, "gpu_mode": {...}, "env": {...}}
    loads: dict  # {"ok": bool | None, "problems": [...]} the library against the pod's glibc
    gpus: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    kind: str = KIND

    # -- what the gates read
    @property
    def driver_version(self) -> str | None:
        return self.driver.value

    @property
    def pod_glibc(self) -> str | None:
        return self.glibc.value

    @property
    def hami_version(self) -> str | None:
        return self.hami.value

    def to_json(self) -> dict:
        return asdict(self)


def _fact(d: dict | None, where: str) -> Fact:
    if not isinstance(d, dict) or "source" not in d:
        raise UsageError(f"{where}: not a node report written by lucepatch doctor --pod")
    return Fact(d.get("value"), d["source"], d.get("note", ""))


def from_json(d: dict, where: str = "node report") -> NodeReport:
    if not isinstance(d, dict) or d.get("kind") != KIND:
        raise UsageError(f"{where}: not a lucepatch node report (write one with `lucepatch doctor --pod NAME "
                         "--save-report FILE`)")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"{where}: node report schema_version {d.get('schema_version')!r}, this lucepatch reads "
                         f"{SCHEMA_VERSION}: write it again with this lucepatch")
    try:
        inj = d["injection"]
        lib = d.get("library")
        return NodeReport(
            collected_from=d["collected_from"], collected_at=d["collected_at"], tool=d.get("tool", ""),
            injection=Injection(inj["state"], inj.get("message", ""), list(inj.get("via", [])),
                                list(inj.get("preload", [])), inj.get("library_path")),
            library=Library(lib["path"], lib["sha256"], int(lib["size"]), dict(lib["identity"])) if lib else None,
            driver=_fact(d["driver"], where), hami=_fact(d["hami"], where), vendor=_fact(d["vendor"], where),
            glibc=_fact(d["glibc"], where), limits=dict(d.get("limits") or {}), loads=dict(d.get("loads") or {}),
            gpus=list(d.get("gpus") or []), notes=list(d.get("notes") or []))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: malformed node report ({type(exc).__name__}: {exc}); write it again with "
                         "lucepatch doctor --pod")


def load(path: str | Path) -> NodeReport:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--node-report {path}: {exc.strerror or exc}")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--node-report {path}: not JSON ({exc.msg} at line {exc.lineno})")
    return from_json(d, f"--node-report {path}")


def save(report: NodeReport, path: str | Path) -> None:
    write_atomic(path, json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")
