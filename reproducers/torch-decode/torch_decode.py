"""torch-decode: the issue's workload under HAMi-core's limits — does CUDA_DEVICE_SM_LIMIT hold for a
PyTorch decode loop, eager and as a CUDA graph, and what does the layer cost? (issue 38; HAMi#1445,
HAMi-core#274/#314/#317, HAMi#2863, HAMi#904)

A decode-like loop in bf16, batch 1: per token, `layers` layers each reading an up and a down
projection (hidden x ffn and ffn x hidden) once — bandwidth-bound, as a batch-1 decode step is
(12 x 2 x 8192 x 16384 x 2 bytes = 6 GiB of weights read per token, the field notes' H100 decode
read 6.4 GB). Each token ends with the host reading a number back (the sampled token), so one token
is one synchronisation. Eager mode launches the matmuls one by one; graph mode captures one token
with torch.cuda.CUDAGraph and replays it (what vLLM and llama.cpp do for decode).

After `warmup_ms` (not counted: the limiter's token bucket and the clocks settle) tokens are counted
for `measure_ms`; the run reports tok/s and its series per 250 ms. With LP_TENANTS="30,70" two tenants
run at once, each a fresh process with its OWN region file (as two pods) and its own
CUDA_DEVICE_SM_LIMIT, the second started once the first has initialised (HAMi-core finds its host pid by
diffing NVML's process list around a context creation: simultaneous starts would race), both measured
over the same window; the run reports each tenant's tok/s and the first tenant's share. lucepatch
decides from the rates (docs/design.md "Quantitative scenarios"); a run fails only when it cannot
measure.
"""

import os
import subprocess
import sys
import time

import lp_workload as lp

SERIES_S = 0.25


def _param(name: str) -> int:
    v = os.environ.get(f"LP_PARAM_{name.upper()}")
    if v is None:
        lp.setup_error(f"LP_PARAM_{name.upper()} is not set (the runner sets every declared parameter)")
    return int(v)


def _torch(rank=None):
    try:
        import torch
    except ImportError as exc:
        lp.setup_error(f"cannot import torch: {exc}")
    if not torch.cuda.is_available():
        lp.setup_error("torch.cuda.is_available() is False")
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    lp.report_loaded(rank=rank)
    lp.report_driver(*lp.driver_info(0))
    return torch


def _decode(torch, mode: str, name: str, go=None) -> float:
    layers, hidden, ffn = _param("layers"), _param("hidden"), _param("ffn")
    warm, measure = _param("warmup_ms") / 1000.0, _param("measure_ms") / 1000.0
    g = torch.Generator(device="cuda").manual_seed(38)
    weights = [(torch.randn(ffn, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 0.01,
                torch.randn(hidden, ffn, device="cuda", dtype=torch.bfloat16, generator=g) * 0.01)
               for _ in range(layers)]
    x = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.empty(1, device="cuda", dtype=torch.float32)

    def token():
        h = x
        for up, down in weights:
            h = torch.nn.functional.linear(torch.nn.functional.linear(h, up), down)
        out.copy_(h.float().sum(dim=1))  # the "sampled token": one number the host reads back

    step = token
    if mode == "graph":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm the kernels and the caching allocator before capture
                token()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            token()
        step = graph.replay
    step()
    out.item()  # the first token pays HAMi-core's post-init (host pid, the watcher)
    if go is not None:
        go()
    start = time.monotonic()
    counted_from, end = start + warm, start + warm + measure
    tokens, series = 0, [0] * max(1, int(measure / SERIES_S))
    while True:
        step()
        out.item()
        now = time.monotonic()
        if now >= end:
            break
        if now >= counted_from:
            tokens += 1
            slot = int((now - counted_from) / SERIES_S)
            if slot < len(series):
                series[slot] += 1
    rate = tokens / measure
    lp.value(name, rate)
    lp.emit({"event": "series", "name": name, "step_s": SERIES_S, "unit": "tok/s",
             "values": [round(n / SERIES_S, 3) for n in series]})
    return rate


def one_process() -> bool:
    torch = _torch()
    return _decode(torch, os.environ.get("LP_MODE", "eager"), "tok_per_s") > 0


def tenant(index: int, limit: int) -> bool:
    """A tenant (its own process, region and SM limit): say when initialised, wait for go, measure."""
    torch = _torch(rank=index)
    lp.rank_started(index)

    def go():
        sys.stdout.write(f"@@tenant-ready {index}\n")
        sys.stdout.flush()
        sys.stdin.readline()  # the parent starts every tenant at once

    rate = _decode(torch, os.environ.get("LP_MODE", "eager"), f"tenant_sm{limit}.tok_per_s", go)
    sys.stdout.write(f"@@tenant-rate {index} {rate}\n")
    sys.stdout.flush()
    return rate > 0


def tenants(spec: str) -> bool:
    limits = [int(x) for x in spec.split(",") if x.strip()]
    region = os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    if len(limits) < 2 or not region:
        lp.setup_error("LP_TENANTS needs two limits and the runner's region file")
    procs, rates = [], {}
    for i, limit in enumerate(limits):
        env = dict(os.environ, CUDA_DEVICE_MEMORY_SHARED_CACHE=f"{region}.tenant{i}",
                   CUDA_DEVICE_SM_LIMIT=str(limit), LP_TENANT=f"{i},{limit}")
        p = subprocess.Popen([sys.executable, __file__, sys.argv[1]], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        for line in p.stdout:  # pass its events on; wait until it is ready before starting the next
            if line.startswith("@@tenant-ready"):
                break
            sys.stdout.write(line)
        else:
            lp.check(f"tenant {i} (SM {limit}) came up", "ready", f"exit {p.wait()}", False)
            return False
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    ok = True
    for i, p in enumerate(procs):
        for line in p.stdout:
            if line.startswith("@@tenant-rate"):
                rates[i] = float(line.split()[2])
            else:
                sys.stdout.write(line)
        code = p.wait()
        lp.child_exit(i, p.pid, code)
        ok = ok and code == 0
        try:
            os.unlink(f"{region}.tenant{i}")
        except OSError:
            pass
    sys.stdout.flush()
    if not ok or len(rates) != len(limits) or sum(rates.values()) <= 0:
        return False
    lp.value(f"share_sm{limits[0]}", rates[0] / sum(rates.values()))
    return True


def main() -> None:
    t = os.environ.get("LP_TENANT")
    if t:
        index, limit = (int(x) for x in t.split(","))
        ok = tenant(index, limit)
        sys.stdout.flush()
        sys.exit(0 if ok else 1)
    spec = os.environ.get("LP_TENANTS", "")
    lp.run({name: (lambda: tenants(spec)) if spec else one_process for name in SCENARIOS})


SCENARIOS = ("control", "sm50-eager", "sm50-graph", "tenants-eager", "tenants-graph", "overhead-eager",
             "overhead-graph")

if __name__ == "__main__":
    main()
