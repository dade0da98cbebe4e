"""The node report: a small JSON document describing one GPU node, read by the deploy gates.

Written by `lucepatch doctor --pod` (the node-identity work extends it); today only the field the
CUDA/driver gate needs is defined:

    {"schema_version": 1, "node": "gpu-node-1", "driver_version": "595.84"}

`driver_version` is the NVIDIA driver as `nvidia-smi --query-gpu=driver_version` (or
/proc/driver/nvidia/version) prints it. Unknown keys are kept in `extra` for later readers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lucepatch.errors import UsageError
from lucepatch.node.driver import DriverVersion

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class NodeReport:
    driver_version: DriverVersion | None
    node: str | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def parse_node_report(doc: Any, source: str = "node report") -> NodeReport:
    if not isinstance(doc, dict):
        raise UsageError(f"{source}: a node report is a JSON object (schema_version {SCHEMA_VERSION})")
    ver = doc.get("schema_version")
    if ver != SCHEMA_VERSION:
        raise UsageError(f"{source}: schema_version {ver!r} is not {SCHEMA_VERSION}: write it with this lucepatch")
    raw = doc.get("driver_version")
    if raw is not None and not isinstance(raw, str):
        raise UsageError(f"{source}: driver_version must be a string like \"595.84\", not {raw!r}")
    node = doc.get("node")
    extra = {k: v for k, v in doc.items() if k not in ("schema_version", "driver_version", "node")}
    return NodeReport(DriverVersion.parse(raw, source) if raw else None, node if isinstance(node, str) else None,
                      source, extra)


def load_node_report(path: str | Path) -> NodeReport:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"node report {p} not found (lucepatch doctor --pod writes one)")
    except json.JSONDecodeError as e:
        raise UsageError(f"node report {p} is not JSON: {e.msg} at line {e.lineno}")
    return parse_node_report(doc, str(p))


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
