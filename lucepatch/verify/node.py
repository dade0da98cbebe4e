"""`verify --node-report FILE`: verify against what a node runs (lucepatch/node/report.py).

`verify --baseline-lib <the node's library> --lib <candidate>` is how a user learns whether a node
is affected (docs/olares.md): the node's own bytes are the baseline. With the node report the
baseline must be those bytes (sha256), the evidence records which node they came from (`node`),
and the candidate is checked against the pods' glibc before anything runs.
"""

from __future__ import annotations

from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.files import sha256_file
from lucepatch.native import elf
from lucepatch.node.report import NodeReport


def node_section(report: NodeReport, *, baseline_lib: Path | None, lib: Path | None, where: str) -> tuple[dict, list[str]]:
    """(the evidence's `node` section, notes to print). UsageError when --baseline-lib is not the node's library."""
    notes: list[str] = []
    lib_rec = report.library
    if baseline_lib is not None and lib_rec is not None:
        got = sha256_file(baseline_lib)
        if got != lib_rec.sha256:
            raise UsageError(f"--baseline-lib {baseline_lib} (sha256 {got[:12]}) is not the library {where} found in "
                             f"{report.collected_from} ({lib_rec.path}, sha256 {lib_rec.sha256[:12]}): pass the node's "
                             "own copy (node --pod NAME --save FILE)")
    if lib_rec is None:
        notes.append(f"{where}: no libvgpu.so in the report ({report.what_runs}); the verification does not "
                     "describe that node's apps")
    elif baseline_lib is None:
        notes.append(f"{where}: the baseline is not the node's library ({lib_rec.path}); pass --baseline-lib with its "
                     "bytes to measure the node itself")
    if lib is not None and report.pod_glibc:
        needs = elf.loader_needs(lib)
        have = tuple(int(x) for x in report.pod_glibc.split("."))
        newest = tuple(int(x) for x in needs.newest_glibc.split(".")) if needs.newest_glibc else ()
        if newest > have:
            notes.append(f"--lib needs GLIBC_{needs.newest_glibc}; the node's pods have glibc {report.pod_glibc}: "
                         "it cannot load there, whatever this verification shows")
    section = {"collected_from": report.collected_from, "collected_at": report.collected_at,
               "injection": report.state, "driver": str(report.driver_version) if report.driver_version else None,
               "glibc": report.pod_glibc, "hami": report.hami_version,
               "vendor": report.vendor.value if report.vendor else None,
               "library": ({"path": lib_rec.path, "sha256": lib_rec.sha256, "kind": lib_rec.kind,
                            "is_baseline": baseline_lib is not None} if lib_rec else None)}
    return section, notes
