"""`lucepatch bench --lib LIB`: what the vGPU layer costs a workload on this node, and whether its limits
hold (issue 38; the method: docs/bench.md). The use case is lucepatch/services/bench.py."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, workspace
from lucepatch.errors import CheckFailed, UsageError


def _tenants(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    parts = value.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--tenants takes two SM limits A,B (e.g. 30,70), not {value!r}")
    return int(parts[0]), int(parts[1])


@click.command("bench")
@click.option("--lib", required=True, type=click.Path(dir_okay=False),
              help="The library to measure: the node's libvgpu.so (e.g. /usr/local/vgpu/libvgpu.so) or any build.")
@click.option("--workload", type=click.Choice(["decode-c", "decode-torch"]), default="decode-c", show_default=True,
              help="decode-c: the driver-API decode loop (no PyTorch); decode-torch: a PyTorch bf16 decode loop.")
@click.option("--mode", "modes", type=click.Choice(["eager", "graph"]), multiple=True,
              help="Launch mode (repeatable; default both): kernels one by one, or the token as a CUDA graph.")
@click.option("--sm-limit", "sm_limits", type=int, multiple=True,
              help="CUDA_DEVICE_SM_LIMIT to check (repeatable, 1..99; default 50).")
@click.option("--tenants", default="30,70", show_default=True,
              help="Two tenants at once, each in its own region, at these SM limits (A,B).")
@click.option("--no-tenants", is_flag=True, help="Do not run the two-tenant configuration.")
@click.option("--memory-limit", default="60g", show_default=True, help="CUDA_DEVICE_MEMORY_LIMIT of the runs with the layer.")
@click.option("--rounds", type=int, default=6, show_default=True, help="Counted rounds per configuration (bare + layer each).")
@click.option("--warmup-rounds", type=int, default=1, show_default=True, help="Rounds run but not counted.")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="1 - the interval's confidence (two-sided).")
@click.option("--warmup-ms", type=int, default=None, help="Each run's uncounted decode time (default: the workload's, 2000).")
@click.option("--measure-ms", type=int, default=None, help="Each run's counted decode time (default: the workload's, 3000).")
@click.option("--driver", type=click.Choice(["auto", "real", "fake"]), default="auto", show_default=True,
              help="The CUDA driver the runs use (fake: lucepatch's simulated one, which measures its model).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the page (the answers, the method, the plots) to this file.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Also write the document (JSON) here.")
@json_option
@click.pass_context
def command(ctx, lib, workload, modes, sm_limits, tenants, no_tenants, memory_limit, rounds, warmup_rounds, alpha,
            warmup_ms, measure_ms, driver, html_path, out_path, as_json):
    """What the vGPU layer costs a workload on this node, and whether its limits hold."""
    refuse_unused(ctx, "bench")
    req = api.BenchRequest(lib=Path(lib), workload=workload, modes=tuple(modes) or ("eager", "graph"),
                           sm_limits=tuple(sm_limits) or (50,), tenants=None if no_tenants else _tenants(tenants),
                           memory_limit=memory_limit, rounds=rounds, warmup_rounds=warmup_rounds, alpha=alpha,
                           driver=driver, warmup_ms=warmup_ms, measure_ms=measure_ms)
    doc = api.bench(workspace(ctx), req, cache(ctx), html=Path(html_path) if html_path else None,
                    out=Path(out_path) if out_path else None)
    rows = api.bench_rows(doc)
    d = doc["driver"]
    title = (f"bench {doc['workload']['name']} under {doc['library']['path']} — {d.get('gpu') or 'unknown GPU'}"
             + (" (simulated driver: measures lucepatch's model of a GPU)" if doc["simulated"] else ""))
    if as_json:
        report.emit_json("bench", {k: v for k, v in doc.items() if k not in ("schema_version", "verb")})
    report.table(title, api.BENCH_COLUMNS, [[r[c] for c in api.BENCH_COLUMNS] for r in rows], as_json=as_json,
                 notes=[f"method: {doc['method']['note']}; {doc['method']['interval']}, {doc['method']['rounds']} rounds "
                        f"+ {doc['method']['warmup_rounds']} warm-up (docs/bench.md)"])
    for p, what in ((html_path, "page"), (out_path, "document")):
        if p:
            report.progress(f"bench {what} written to {p}")
    failed = [r for r in rows if r["answer"] != "holds"]
    if failed:
        raise CheckFailed(f"{len(failed)} of {len(rows)} configuration(s) not shown to hold: "
                          + ", ".join(f"{r['configuration']} {r['mode']} ({r['answer'].split(':')[0]})" for r in failed))
    report.progress(f"every configuration holds ({len(rows)})")
    return 0
