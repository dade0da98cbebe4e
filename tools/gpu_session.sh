#!/usr/bin/env bash
# One device-machine session: record real-driver traces and take the real-GPU evidence.
# Run from the repo root on the GPU machine with .whl/ and .upstream/hami-core carried:
#   bash tools/gpu_session.sh <step...>
#   steps: env traces async-sched all all-a all-b all-serial vmm-refs overhead bench-verify multi-device
#          pool-alloc run-cost main-job lucebox-build
#   plan (issue 4): smoke = `env async-sched`; full = `all vmm-refs overhead bench-verify traces`;
#   reserve = `all-serial` (if parallel runs misbehave on the GPU); 2-GPU machine: `multi-device`.
#   issue 12: `pool-alloc` (~1.5 min on 1x H200: 2 builds + 85 processes under the sequential
#   rule) and `traces` (< 1 min); `all` is 355 processes (~4-5 min at the measured 0.66 s per
#   process at x8); `all-a` + `all-b` split it in two calls should a run need `--fixed` (1040
#   processes, ~11.5 min: past the 10-minute call limit; `pr --evidence` combines the two per
#   reproducer); 2-GPU machine: `multi-device pool-alloc traces`.
# DRIVER=fake runs the same steps on the simulated driver (how they are proven off the GPU).
#   issue 13: call 1 = `env run-cost` (~4 min: a cold HAMi build, then ~2.5 min measuring);
#   call 2 = `bench-verify main-job` (~4 min: a cold patched build, fixed 20, sequential, the main job).
# verify runs in parallel (private mount namespace + tmpfs /tmp/vgpulock per run) when root and
# unshare(1) works, serially otherwise; the evidence's execution.mode says which.
# Everything it writes goes under $OUT (or ./gpu-out when OUT is unset).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
PYPATH=$PWD
if compgen -G ".whl/*.whl" >/dev/null; then  # the GPU machine: carried wheels, no index
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 3
  PYPATH=/tmp/site:$PWD
fi
export PYTHONPATH=$PYPATH PYTHONUNBUFFERED=1 LUCEPATCH_CACHE=${LUCEPATCH_CACHE:-/tmp/lpcache}
SRC=${SRC:-.upstream/hami-core}
DRIVER=${DRIVER:-real}
if [ "$DRIVER" = real ]; then TAG=h200; else TAG=$DRIVER; fi
now() { python3 -c 'import time; print(time.time())'; }
lp() { python3 -m lucepatch "$@"; }
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    env)
      { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; cmake --version | head -1;
        nvcc --version | tail -1; gcc --version | head -1; uname -r; } 2>&1 | tee "$OUT/env.txt" ;;
    traces)
      python3 -m lucepatch.verify.trace.record_all --out /tmp/traces-$TAG --driver $DRIVER --label $TAG &&
      tar -C /tmp/traces-$TAG -cf "$OUT/traces.tar" . ;;
    async-sched)
      lp verify --reproducer async-sched --source $SRC --driver real --runs 20 \
        --evidence "$OUT/async-sched.h200.json" 2>&1 | tee "$OUT/verify-async-sched.log" ;;
    all)
      lp verify --all --target hami-core --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/hami-core-all.$TAG.json" 2>&1 | tee "$OUT/verify-all.log" ;;
    all-a)
      lp verify --reproducer async-sched --reproducer llama-vmm --reproducer multi-device --reproducer pr188-guard \
        --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/hami-core-all-a.$TAG.json" 2>&1 | tee "$OUT/verify-all-a.log" ;;
    all-b)
      lp verify --reproducer pool-alloc --reproducer shared-region --reproducer zero-limit \
        --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/hami-core-all-b.$TAG.json" 2>&1 | tee "$OUT/verify-all-b.log" ;;
    pool-alloc)
      # 1 GPU: cross-device reports skipped; on 2 GPUs it runs (evidence named by the GPU count)
      n=$(nvidia-smi -L 2>/dev/null | wc -l)
      lp verify --reproducer pool-alloc --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/pool-alloc.${TAG}x${n}.json" 2>&1 | tee "$OUT/verify-pool-alloc.log" ;;
    all-serial)
      lp verify --all --target hami-core --source $SRC --driver real --runs 20 --jobs 1 \
        --evidence "$OUT/hami-core-all.serial.h200.json" 2>&1 | tee "$OUT/verify-all-serial.log" ;;
    vmm-refs)
      # host-numa-create crashes before 72b24fd; device-create is a series fix (wrong at both refs)
      lp verify --reproducer llama-vmm --source $SRC --driver real --runs 20 --baseline-ref e3c3477 \
        --patched-ref 8f3a89c --scenario host-numa-create --scenario ctxless-device --jobs 8 \
        --evidence "$OUT/llama-vmm-refs.h200.json" 2>&1 | tee "$OUT/verify-vmm-refs.log" ;;
    shared-region)
      lp verify --reproducer shared-region --source $SRC --driver real --runs 20 --jobs 8 \
        --evidence "$OUT/shared-region.h200.json" 2>&1 | tee "$OUT/verify-shared-region.log" ;;
    multi-device)
      n=$(nvidia-smi -L 2>/dev/null | wc -l)
      lp verify --reproducer multi-device --source $SRC --driver real --runs 20 --jobs 8 \
        --evidence "$OUT/multi-device.h200x${n}.json" 2>&1 | tee "$OUT/verify-multi-device.log" ;;
    overhead)
      python3 bench/hook_overhead.py --source $SRC --driver real --repeats ${REPEATS:-5} --json "$OUT/hook-overhead.h200.json" 2>&1 | tee "$OUT/overhead.log" ;;
    bench-verify)
      # fixed 20 vs the sequential rule on the main job, same cache as the other steps (warm after one run)
      LUCEPATCH_BENCH_CACHE=$LUCEPATCH_CACHE python3 bench/verify.py --source $SRC --driver $DRIVER --rounds ${ROUNDS:-1} \
        --json "$OUT/bench-verify.$TAG.json" 2>&1 | tee "$OUT/bench-verify.log" ;;
    run-cost)
      # where a run's time goes: bare cuInit, + context, + NVML, + HAMi init, the runner; x1 and x16
      { nvidia-smi --query-gpu=name,driver_version,persistence_mode,compute_mode --format=csv || true;
        nproc; } 2>&1 | tee "$OUT/run-cost-env.txt"
      python3 bench/run_cost.py --source $SRC --driver $DRIVER --serial 5 --count 32 --jobs 16 \
        --json "$OUT/run-cost.$TAG.json" 2>&1 | tee "$OUT/run-cost.log" ;;
    main-job)
      # the main job as a user runs it (sequential rule, default --runs 20 as the maximum), timed
      s0=$(now)
      lp verify --reproducer async-sched --source $SRC --driver $DRIVER \
        --evidence "$OUT/async-sched.sequential.$TAG.json" 2>&1 | tee "$OUT/verify-main-job.log"
      python3 -c "import sys; print(f'main job wall: {float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$s0" "$(now)" \
        | tee -a "$OUT/verify-main-job.log" ;;
    lucebox-build)
      # issue 17 item 3 (~7-8 min on 16 cores): needs .upstream/lucebox-carry from
      # `python3 tools/carry_lucebox.py pack` (a few MB: trees without history + nlohmann .deb).
      # 1) probes (baseline + patched) and a cold full patched sm120-cuda13 build, same -j, one run;
      # 2) the unpatched tree fails at F1 in seconds; 3) F6 dropped in the same tree + re-link.
      C=.upstream/lucebox-carry; W=/tmp/lbx-src; rm -rf $W /tmp/nlohmann
      python3 tools/carry_lucebox.py unpack $C $W 2>&1 | tee "$OUT/lucebox-carry.log" &&
      { dpkg -x $C/nlohmann-json3-dev_*.deb /tmp/nlohmann 2>/dev/null ||
        { mkdir -p /tmp/nlohmann && cd /tmp/nlohmann && ar x "$OLDPWD"/$C/nlohmann-json3-dev_*.deb && tar -xf data.tar.* && cd "$OLDPWD"; }; } &&
      export LUCEPATCH_CARRIED_TREES=$C/trees.json CMAKE_PREFIX_PATH=/tmp/nlohmann/usr &&
      python3 bench/probe.py --source $W --profile sm120-cuda13 --both --measure-full "$OUT/lucebox-full-build.sm120-cuda13.json" \
        >"$OUT/bench-probe.h200.json" 2>"$OUT/bench-probe.h200.log"; tail -3 "$OUT/bench-probe.h200.log"
      lp build lucebox --source $W --profile sm120-cuda13 --baseline --summary "$OUT/lucebox-baseline-build.json" \
        2>&1 | tee "$OUT/lucebox-baseline-build.log" | tail -12
      python3 tools/lucebox_f6_relink.py "$OUT/lucebox-full-build.sm120-cuda13.json" "$OUT/lucebox-f6-relink.json" 2>&1 | tail -12
      mkdir -p "$OUT/commit" && python3 tools/lucebox_summary_md.py "$OUT" "$OUT/commit" >"$OUT/commit/full-build-sm120-cuda13.h200.md"
      cat "$OUT/commit/full-build-sm120-cuda13.h200.md" ;;
    *)
      echo "unknown step $step" >&2 ;;
  esac
done
