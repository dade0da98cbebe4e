"""`lucepatch bench`: what the vGPU layer costs a node's workload and whether its limits hold — the use
case (issue 38; HAMi#904, website#415). The measurement is lucepatch/verify/bench.py, the method
docs/bench.md; this module picks the workload, checks the request, runs, and writes the document
(kind lucepatch-bench, docs/schema/bench.schema.json) and its page.
"""

from __future__ import annotations

import json
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.files import data_schema, sha256_file, write_atomic
from lucepatch.native import elf
from lucepatch.native.fakecuda import FAKE_DEVICE_NAME_PREFIX
from lucepatch.render import render
from lucepatch.show.rates import bench_views
from lucepatch.verify import bench as measure
from lucepatch.verify.driver import choose_driver, require_driver
from lucepatch.verify.evidence import tool_info
from lucepatch.verify.reproducer import load_reproducer
from lucepatch.workspace import Workspace

SCHEMA_VERSION = 1
COLUMNS = ["configuration", "mode", "result", "interval", "expected", "answer"]
BenchRequest = measure.BenchRequest  # the public name (lucepatch.api)


def check(req: measure.BenchRequest) -> list[measure.Config]:
    """Everything bench can refuse before it runs (one line each)."""
    lib = Path(req.lib)
    if not lib.is_file():
        raise UsageError(f"--lib {lib} is not a file")
    if not elf.is_elf(lib):
        raise UsageError(f"--lib {lib} is not an ELF shared library")
    if req.workload not in measure.WORKLOADS:
        raise UsageError(f"--workload takes {', '.join(measure.WORKLOADS)}, not {req.workload!r}")
    require_driver(req.driver)
    return measure.configs(req)


def run(ws: Workspace, req: measure.BenchRequest, cache: Path, *, html: Path | None = None, out: Path | None = None,
        run_once=None) -> dict:
    """Measure every configuration; return the bench document (validated), write its page to `html` and
    the document to `out` (both checked before anything runs)."""
    for p, flag in ((html, "--html"), (out, "--out")):
        if p is not None:
            check_destination(Path(p), flag)
    cfgs = check(req)
    repro = load_reproducer(ws, measure.WORKLOADS[req.workload])
    driver = choose_driver(req.driver, cache)
    sha = sha256_file(req.lib)
    b = measure.prepare(repro, req, driver, cache, sha)
    results = measure.run_bench(b, cfgs, **({"run": run_once} if run_once else {}))
    doc = document(req, repro, results, sha)
    validate(doc)
    if html is not None:
        write_page(doc, html)
    if out is not None:
        write_atomic(Path(out), json.dumps(doc, indent=2) + "\n", mode=0o666)
    return doc


def check_destination(path: Path, flag: str) -> None:
    """A file can be written at `path` (its folder exists, it is not a folder): refused before any run."""
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: the folder {path.parent} does not exist")


def document(req: measure.BenchRequest, repro, results: list[measure.ConfigResult], sha: str) -> dict:
    drv = next((r.driver for r in results if r.driver), {})
    gpu = drv.get("gpu") or ""
    return {
        "schema_version": SCHEMA_VERSION, "verb": "bench", "kind": "lucepatch-bench", "tool": tool_info(),
        "library": {"path": str(Path(req.lib).resolve()), "sha256": sha},
        "driver": {"gpu": gpu, "version": drv.get("version"), "device_count": drv.get("device_count")},
        "simulated": gpu.startswith(FAKE_DEVICE_NAME_PREFIX),
        "workload": {"name": req.workload, "reproducer": repro.name, "hash": repro.hash},
        "method": {
            "rounds": req.rounds, "warmup_rounds": req.warmup_rounds, "alpha": req.alpha,
            "interval": f"Student t, two-sided {100 * (1 - req.alpha):g} %, on the log of layer/bare per round "
                        "(paired) or on the share",
            "note": ("rounds of one run of the bare driver and one of the layer (order alternating), one run at a "
                     "time, a fresh region file per run, warm-up rounds left out; each run excludes its own warm-up "
                     "(the workload's warmup_ms) and reports the tokens per second that follow (docs/bench.md)")},
        "configs": [r.to_json() for r in results],
    }


def validate(doc: dict) -> None:
    import jsonschema  # lazy: jsonschema, 34 ms

    errors = sorted(jsonschema.Draft202012Validator(data_schema("bench")).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        raise UsageError(f"bench document does not match its schema at {'/'.join(map(str, errors[0].path))}: "
                         f"{errors[0].message[:200]}")


def table_rows(doc: dict) -> list[dict]:
    rows = []
    for c in doc["configs"]:
        iv = c.get("interval") or {}
        unit = c["measure"].get("unit", "")
        rows.append({"configuration": c["name"].rsplit("-", 1)[0], "mode": c["mode"],
                     "result": f"{iv['estimate']:.3g} {unit}" if iv else "",
                     "interval": f"[{iv['low']:.3g}, {iv['high']:.3g}]" if iv else "",
                     "expected": c["expect"], "answer": c["answer"] if iv else f"{c['answer']}: {c['why']}"})
    return rows


def write_page(doc: dict, path: Path) -> Path:
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"--html {path} is a directory; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    page = render("show/bench.html.j2", doc=doc, views=bench_views(doc), rows=table_rows(doc), columns=COLUMNS)
    return write_atomic(path, page, mode=0o666)
