#!/usr/bin/env bash
# One device-machine session: record real-driver traces and take the real-GPU evidence.
# Run from the repo root on the GPU machine with .whl/ and .upstream/hami-core carried:
#   bash tools/gpu_session.sh <step...>     steps: env traces async-sched all vmm-refs overhead
# Everything it writes goes under $OUT (or ./gpu-out when OUT is unset).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 LUCEPATCH_CACHE=/tmp/lpcache
SRC=.upstream/hami-core
lp() { python3 -m lucepatch "$@"; }
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    env)
      { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; cmake --version | head -1;
        nvcc --version | tail -1; gcc --version | head -1; uname -r; } 2>&1 | tee "$OUT/env.txt" ;;
    traces)
      python3 -m lucepatch.verify.trace.record_all --out /tmp/traces --driver real --label h200 &&
      tar -C /tmp/traces -cf "$OUT/traces.tar" . ;;
    async-sched)
      lp verify --reproducer async-sched --source $SRC --driver real --runs 20 \
        --evidence "$OUT/async-sched.h200.json" 2>&1 | tee "$OUT/verify-async-sched.log" ;;
    all)
      lp verify --all --target hami-core --source $SRC --driver real --runs 20 \
        --evidence "$OUT/hami-core-all.h200.json" 2>&1 | tee "$OUT/verify-all.log" ;;
    vmm-refs)
      lp verify --reproducer llama-vmm --source $SRC --driver real --runs 20 --baseline-ref e3c3477 \
        --patched-ref 8f3a89c --evidence "$OUT/llama-vmm-refs.h200.json" 2>&1 | tee "$OUT/verify-vmm-refs.log" ;;
    overhead)
      python3 bench/hook_overhead.py --source $SRC --json "$OUT/hook-overhead.h200.json" 2>&1 | tee "$OUT/overhead.log" ;;
  esac
done
