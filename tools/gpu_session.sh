#!/usr/bin/env bash
# One device-machine session: record real-driver traces and take the real-GPU evidence.
# Run from the repo root on the GPU machine with .whl/ and .upstream/hami-core carried:
#   bash tools/gpu_session.sh <step...>
#   steps: env traces async-sched all all-a all-b all-serial vmm-refs overhead bench-verify multi-device
#          pool-alloc run-cost main-job main-job-jobs lucebox-build lucebox-full lucebox-f6 lucebox-f6-probe ggml-build ggml-client ggml-diag
#          lucebox-today (issue 37: Luce-Org/lucebox 62880e2, vendored llama.cpp: probes at both bases, upstream's build, a served model)
#          lbv-chart (issue 37 item 3: the vendored chart's server env through upstream's entrypoint to the real server; after lucebox-today)
#          i28-main i28-v25 i28-llama-vmm i28-traces i28-2gpu i28-ggml pr188-bundle (local) pr188-all
#          fork-lib lbx-vgpu-build lbx-vgpu-serve ggml-traces (issue 40)
#          i38-core i38-sm i38-tenants i38-overhead i38-v29 (issue 38: do HAMi-core's limits hold, what does the layer cost)
#   plan (issue 4): smoke = `env async-sched`; full = `all vmm-refs overhead bench-verify traces`;
#   reserve = `all-serial` (if parallel runs misbehave on the GPU); 2-GPU machine: `multi-device`.
#   issue 12: `pool-alloc` (~1.5 min on 1x H200: 2 builds + 85 processes under the sequential
#   rule) and `traces` (< 1 min); `all` is ~390 processes (~4-5 min at the measured 0.66 s per
#   process at x8); `all-a` + `all-b` split it in two calls should a run need `--fixed` (1040
#   processes, ~11.5 min: past the 10-minute call limit; `pr --evidence` combines the two per
#   reproducer); 2-GPU machine: `multi-device pool-alloc traces`.
#   issue 12 part 2 (the HAMi v2.5.x line): `v25-line` = base (54b1305 + Build-Only) vs
#   patches/hami-core-v2.5, every reproducer; llama-vmm, multi-device and shared-region are reported
#   not-applicable at 54b1305 (the line's [not_applicable]); then `v25-torch-threadpool
#   v25-torch-guards` (the PyTorch workloads on the line, like torch-threadpool/torch-guards).
# DRIVER=fake runs the same steps on the simulated driver (how they are proven off the GPU).
#   issue 13: call 1 = `env run-cost` (~4 min: a cold HAMi build, then ~2.5 min measuring);
#   call 2 = `bench-verify main-job` (~4 min: a cold patched build, fixed 20, sequential, the main job).
#   plan (issue 16, real clients; 1 GPU): `torch-smoke` first (one run of every torch scenario at the pin
#   and with the series: catches a workload that does not run on this torch), then
#   `torch-nccl-refs torch-threadpool torch-guards ctypes-clients vmm-refs crashlogs`
#   (workload steps: ctypes-clients torch-smoke torch-nccl-refs torch-threadpool torch-guards torch-2gpu crashlogs).
#   issue 17 item 4: `lucebox-build ggml-client` in one call (ggml-client < 90 s: 3 HAMi-core builds + the
#   ggml workload, e3c3477 vs pin, pin vs series); lucebox-build must then carry SASS for the GPU:
#   LUCEBOX_CUDA_ARCHS='120;90' on an H200. Otherwise `ggml-build ggml-client` in a later call (~5 min).
#   plan (issue 18, 2-GPU machine): `torch-2gpu` (on one GPU it runs too and reports the scenarios skipped).
#   issue 28 (the bugs of every released HAMi, both lines): call 1 (1 GPU, ~4.5 min) = `i28-main i28-traces`;
#   call 2 (1 GPU, ~4 min) = `i28-v25`; call 3 (nvidia-h200-x2, ~2.5 min) = `i28-2gpu` (device-index with
#   CUDA_VISIBLE_DEVICES=1,0 and llama-vmm device-create, both lines, and their traces); call 4 (~6 min, after
#   `ggml-build` in the same machine session, or with `lucebox-build` as issue 17 runs it) = `i28-ggml`.
#   issue 27: `fork-lib` (< 2 min: one cold v2.5-line build, then a few processes): the beclab fork's library
#   (2025-07, beclab/HAMi v2.5.4, carried git-ignored as .upstream/beclab-v2.5.4-libvgpu.so; FORK_LIB overrides)
#   is the node's baseline and the v2.5 line's build the candidate, on the real driver: `node --lib` on it,
#   the host's glibc, and `verify --baseline-lib <fork> --lib <line build>` with its evidence and page: the C
#   reproducers, then the workload ones (ctypes-clients, ctypes-meminfo: bound lazily, they run the fork).
#   issue 29 (1 GPU, one call, < 8 min): first, where PR #188 is, `pr188-bundle` (writes
#   .upstream/pr188-on-e3c3477.bundle); then on the GPU `env pr188-all main-job bench-verify`, carrying
#   .whl, .upstream/hami-core and .upstream/pr188-on-e3c3477.bundle (pr188-all ~15 s of builds + ~3-4 min
#   of runs, goal <= 240 s; main-job ~35 s cold; bench-verify ~1.5 min warm: fixed 20 vs sequential).
#   The like-for-like comparison with the 474 s run is `PR188_REPROS=old50 ... pr188-all` (its 50 scenarios,
#   see the step); the 86 of every reproducer today did not finish in 300 s (docs/evidence/hami-core-pr188-all.cut.h200.log).
#   Measured 2026-12-03: 242.6 s, then 264.3 s on another H200 at x6; 222.4 s with PR188_JOBS=8 there (hami-core-pr188-old50*);
#   verify's default is x8 since, where workload reproducers run (PR188_JOBS unset: the default).
#   issue 36 (graph capture, the main line on upstream main 52f33fc; 1 GPU): carry .whl, .upstream/hami-core and
#   .upstream/hami-core-main-2026-07-23.bundle (18 KB, the upstream test data's bundle of upstream main
#   8f3a89c..52f33fc: the steps fetch 52f33fc from it into $SRC when missing). Call 1 (~7 min) =
#   `env i36-traces i36-capture i36-pr`: the capture fix on the
#   three lines (hami-core on 52f33fc, hami-core-v2.9 on 8f3a89c, hami-core-v2.5), graph-capture (C) +
#   torch-clients:cuda-graph-async (PyTorch backend:cudaMallocAsync under torch.cuda.graph); call 2 (~7 min) = `i36-main`: the new main line
#   (hami-core 2.0.0 on 52f33fc) proven, every reproducer one GPU runs (torch-clients included; 2-GPU and
#   ggml scenarios report skipped); call 3 (~5 min) = `i36-refs`: ref-vs-ref 8f3a89c -> 52f33fc, every
#   reproducer (what #217 fixed, what it made worse). Evidence under $OUT/commit/ (docs/evidence/ names).
#   `i36-worse` (~2 min, any call after the bundle is carried): `verify --baseline-ref 8f3a89c --patched-ref 52f33fc`
#   itself (52f33fc built as it ships + [build.instead_of]) on pool-alloc and untracked-free: the `worse` verdict.
#   issue 40 (Lucebox under the vGPU layer; 1 GPU, after `lucebox-today` in the same machine session, which leaves
#   the default (VMM) build at /tmp/lucebox-vendored/build and the model /tmp/lucebox-vendored/tiny-qwen3.gguf):
#   call 1 (~4-5 min) = `lbx-vgpu-build` (the GGML_CUDA_NO_VMM=ON build for this GPU's arch; also the VMM build and
#   the model when lucebox-today did not run here: then ~8 min); call 2 (~5-6 min, 4 HAMi-core builds + 4 verifies) =
#   `lbx-vgpu-serve` (reproducers/serve: dflash_server in both builds under both lines, base vs series, --fixed 3;
#   LBV_KINDS=vmm / novmm split it); call 3 (~3 min) = `i28-ggml ggml-traces` (ggml-vmm-pool on both lines against
#   the VMM build's ggml, and its VMM calls traced without HAMi).
#   DRIVER=fake runs lbx-vgpu-serve with the stand-in server (tests/fixtures/stand-in-server) in its two pool modes:
#   a proof of the step, never evidence about Lucebox; lbx-vgpu-build then only builds the stand-in.
#   issue 38 (1 GPU, the main line first; each call < 8 min; quantitative scenarios run one process at a time):
#   `i38-core` alone (< 4 min) when one short call is all there is: SM 50 eager and graph on the driver API.
#   call 1 = `i38-sm` (~6 min: torch-decode control + SM 50 eager and graph, bare vs 52f33fc vs the series,
#   --runs 5: 1 warm-up + 4 counted rounds, one look at 99 %), call 2 = `i38-tenants` (~4 min: sm-limit's two tenants in two
#   regions at 30/70, eager and graph, first-writer's env-less first process, sm-limit SM 50 as a graph on the
#   driver API), call 3 = `i38-overhead` (~6 min: torch-decode's memory-only cost, eager and graph, 6 rounds at
#   95 % (--runs 5: 4 counted), and bench/hook_overhead.py for cuLaunchKernel/cuGraphLaunch); as time allows `i38-v29` (~5 min: the
#   8f3a89c line, driver API). Needs PyTorch on the machine for torch-decode (cu130).
# verify runs in parallel (private mount namespace + tmpfs /tmp/vgpulock per run) when root and
# unshare(1) works, serially otherwise; the evidence's execution.mode says which.
# Everything it writes goes under $OUT (or ./gpu-out when OUT is unset).
#
# .whl/ (git-ignored, ~3 MB) holds lucepatch's runtime dependencies for the machine's Python 3.12;
# build it on any machine with PyPI access:
#   python3 -m pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl "GitPython>=3.1.40" "unidiff>=0.7.5" "Jinja2>=3.1" "click>=8.1" "rich>=13.0" "jsonschema>=4.17" \
#     "nvidia-nvml-dev>=12.0" "PyYAML>=6"
# (jsonschema brings attrs, referencing, rpds-py (cp312 manylinux), jsonschema-specifications, typing-extensions;
# nvidia-nvml-dev is nvml.h for the HAMi-core build where the toolkit has none; PyYAML for gguf-py, which the
# lucebox-today step writes its model with: without it tools/lucebox_tiny_model.py stands a refusing module in).
# Workload reproducers (torch-clients) do not see /tmp/site: lucepatch gives them their own PYTHONPATH,
# so the carried wheels never shadow the machine's PyTorch and its dependencies.
# DRIVER=fake runs the same steps on lucepatch's simulated driver (proving a step without a GPU:
# every torch scenario is then reported skipped, the torch-free ones run).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
PYPATH=$PWD
# the carried wheels are for the GPU machine's Python 3.12 (see below); elsewhere (a developer's machine with .whl/
# beside the checkout, the tests' DRIVER=fake runs) the installed packages serve
if compgen -G ".whl/*.whl" >/dev/null && python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  # installed once per machine: two sessions started side by side must not rewrite /tmp/site under each other
  if [ ! -e /tmp/site/.lucepatch-wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 3
    touch /tmp/site/.lucepatch-wheels
  fi
  PYPATH=/tmp/site:$PWD
fi
export PYTHONPATH=$PYPATH PYTHONUNBUFFERED=1 LUCEPATCH_CACHE=${LUCEPATCH_CACHE:-/tmp/lpcache}
SRC=${SRC:-.upstream/hami-core}
DRIVER=${DRIVER:-real}
# The evidence files' label: on the real driver, the GPU nvidia-smi names (h100, h200, ...), so an H100 run is
# never filed as .h200 (2026-12-06: issue 36's H100 evidence came back as *.h200.json); GPU_TAG overrides it.
gpu_tag() {
  local name
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$name" in
    *H100*) echo h100 ;;
    *H200*) echo h200 ;;
    "") echo "gpu_session: nvidia-smi names no GPU (set GPU_TAG to label the evidence)" >&2; return 3 ;;
    *) echo "$name" | sed 's/^NVIDIA //' | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/^-*//; s/-*$//' ;;
  esac
}
if [ "$DRIVER" = real ]; then TAG=${GPU_TAG:-$(gpu_tag)} || exit 3; else TAG=$DRIVER; fi
now() { python3 -c 'import time; print(time.time())'; }
JOBS=${JOBS:-8}
lp() { python3 -m lucepatch "$@"; }
# The GPU machine's CC/CXX/CUDAHOSTCXX are /opt/gcc's wrappers: a relocated GCC 13 whose library folder holds
# only libstdc++.a, so every C++ shared library it links carries its own static libstdc++. Loaded together
# (ggml's four libraries + libnccl's libstdc++.so.6) they abort at start-up: `free(): invalid pointer` in
# std::locale's initialisation (docs/evidence/ggml-diag-opt-gcc.h200.txt; `build lucebox`'s closure check now
# refuses such a payload). Builds that must run here use the distribution's GCC 13 (same version, shared runtime).
# Once called, later steps of the same call build with it too (as the Lucebox steps all do now).
system_cc() { if [ -x /usr/bin/g++ ] && [ -x /usr/bin/gcc ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++; fi; }
# The carried Lucebox trees unpacked once per machine at $W, nlohmann's headers at /tmp/nlohmann, and what a
# `build lucebox` of them needs in the environment (the carried tree ids, nlohmann's CMake package); system GCC.
lucebox_tree() {
  system_cc; C=.upstream/lucebox-carry; W=/tmp/lbx-src
  [ -d $C ] || { echo "gpu_session: $C is missing: carry it (python3 tools/carry_lucebox.py pack, where LUCEPATCH_SRC_LUCEBOX is a lucebox-hub checkout)" >&2; exit 3; }
  [ -f $W/server/CMakeLists.txt ] || { rm -rf $W; python3 tools/carry_lucebox.py unpack $C $W 2>&1 | tail -2; }
  [ -d /tmp/nlohmann/usr ] || { dpkg -x $C/nlohmann-json3-dev_*.deb /tmp/nlohmann 2>/dev/null ||
    { mkdir -p /tmp/nlohmann && cd /tmp/nlohmann && ar x "$OLDPWD"/$C/nlohmann-json3-dev_*.deb && tar -xf data.tar.* && cd "$OLDPWD"; }; }
  mkdir -p "$OUT/commit"
  export LUCEPATCH_CARRIED_TREES=$C/trees.json CMAKE_PREFIX_PATH=/tmp/nlohmann/usr
}
# issue 40: the new line's native builds as lucebox-today leaves them (VMM: build/, GGML_CUDA_NO_VMM=ON: build-novmm/)
LBV=/tmp/lucebox-vendored; LBV_SRC=/tmp/lbv-src
lbv_tree() {  # the carried 62880e2 tree unpacked, nlohmann's headers (as lucebox-today does)
  system_cc; V=.upstream/lucebox-vendored-carry
  [ -f $LBV_SRC/server/CMakeLists.txt ] || { [ -d $V ] || { echo "gpu_session: $V is missing (python3 tools/carry_lucebox.py pack <Luce-Org/lucebox at 62880e2> $V)" >&2; return 3; }
    rm -rf $LBV_SRC; python3 tools/carry_lucebox.py unpack $V $LBV_SRC 2>&1 | tail -2; }
  [ -d /tmp/nlohmann/usr ] || { dpkg -x $V/nlohmann-json3-dev_*.deb /tmp/nlohmann 2>/dev/null ||
    { mkdir -p /tmp/nlohmann && cd /tmp/nlohmann && ar x "$OLDPWD"/$V/nlohmann-json3-dev_*.deb && tar -xf data.tar.* && cd "$OLDPWD"; }; }
  export CMAKE_PREFIX_PATH=/tmp/nlohmann/usr LUCEPATCH_CARRIED_TREES=$V/trees.json
}
lbx_ggml_dir() {  # $1 = out dir, $2 = arch: the VMM build's ggml as LUCEPATCH_GGML_DIR
  [ -x $LBV/build/dflash_server ] && python3 tools/ggml_dir.py "$1" ${2:+--arch $2} --build-dir $LBV/build \
    --include $LBV_SRC/server/deps/llama.cpp/ggml/include 2>&1 | tee "$OUT/ggml-dir-lbv.log" | tail -1 | grep -q "^$1"
}
# the C reproducers (the workloads have their own steps: torch processes are ~10x slower per run)
C_REPROS="--reproducer async-accounting --reproducer async-sched --reproducer llama-vmm --reproducer multi-device --reproducer pool-alloc \
  --reproducer pr188-guard --reproducer shared-region --reproducer zero-limit"
# issue 28: the reproducers of the fixes every released HAMi lacks, run on each line (base vs line), then the
# Python (ctypes) client of the NULL-output bug; --runs 10: a fix is proven at the sequential rule's 15 runs,
# a guard costs 20
I28_REPROS="--reproducer meminfo-null --reproducer untracked-free --reproducer pointer-attrs --reproducer vmm-release \
  --reproducer llama-vmm --reproducer device-index"
I28_CTYPES="--reproducer ctypes-meminfo"
I28_TRACES="--program driver-semantics.queries --program meminfo-null --program untracked-free --program pointer-attrs \
  --program vmm-release --program llama-vmm --program device-index"
i28_verify() {  # $1 = target, $2 = evidence name; one verify per target: the C reproducers, then the ctypes scenarios
  lp verify --target $1 $I28_REPROS --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
    --evidence "$OUT/commit/$2.$TAG.json" 2>&1 | tee "$OUT/verify-$2.log"
  lp verify --target $1 $I28_CTYPES --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
    --evidence "$OUT/commit/$2-ctypes.$TAG.json" 2>&1 | tee "$OUT/verify-$2-ctypes.log"
}
TORCH_GUARDS="--scenario threadpool-default-alloc --scenario nccl-allreduce-default --scenario nccl-allreduce-expandable \
  --scenario nccl-allreduce-async --scenario main-thread-alloc --scenario vllm-async-output --scenario expandable-segments \
  --scenario cuda-graph --scenario cuda-graph-async --scenario two-rank-threads-async --scenario two-rank-threads-default"
# issue 36: the main line's base (upstream main 2026-07-23) from the carried bundle, when $SRC lacks it
need_52f33fc() {
  git -C $SRC cat-file -e 52f33fc7fa1fbb3f08148ab076d0e7447bec7f2a^{commit} 2>/dev/null && return 0
  B=${MAIN_BUNDLE:-.upstream/hami-core-main-2026-07-23.bundle}
  [ -f "$B" ] || { echo "gpu_session: $SRC lacks 52f33fc and $B is missing: carry it" >&2; return 3; }
  git -C $SRC fetch -q "$(cd "$(dirname "$B")" && pwd)/$(basename "$B")" main-2026-07-23:main-2026-07-23
}
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    env)
      { echo "evidence label: $TAG"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; cmake --version | head -1;
        nvcc --version | tail -1; gcc --version | head -1; uname -r; } 2>&1 | tee "$OUT/env.txt" ;;
    traces)
      python3 -m lucepatch.verify.record_traces --out /tmp/traces-$TAG --driver $DRIVER --label $TAG &&
      tar -C /tmp/traces-$TAG -cf "$OUT/traces.tar" . ;;
    async-sched)
      lp verify --reproducer async-sched --source $SRC --driver real --runs 20 \
        --evidence "$OUT/async-sched.h200.json" 2>&1 | tee "$OUT/verify-async-sched.log" ;;
    all)
      lp verify $C_REPROS --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/hami-core-all.$TAG.json" 2>&1 | tee "$OUT/verify-all.log" ;;
    all-a)
      lp verify --reproducer async-sched --reproducer llama-vmm --reproducer multi-device --reproducer pr188-guard \
        --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/hami-core-all-a.$TAG.json" 2>&1 | tee "$OUT/verify-all-a.log" ;;
    all-b)
      lp verify --reproducer pool-alloc --reproducer shared-region --reproducer zero-limit --reproducer async-accounting \
        --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/hami-core-all-b.$TAG.json" 2>&1 | tee "$OUT/verify-all-b.log" ;;
    pool-alloc)
      # 1 GPU: cross-device reports skipped; on 2 GPUs it runs (evidence named by the GPU count)
      n=$(nvidia-smi -L 2>/dev/null | wc -l)
      lp verify --reproducer pool-alloc --source $SRC --driver $DRIVER --runs 20 --jobs 8 \
        --evidence "$OUT/pool-alloc.${TAG}x${n}.json" 2>&1 | tee "$OUT/verify-pool-alloc.log" ;;
    all-serial)
      lp verify $C_REPROS --source $SRC --driver real --runs 20 --jobs 1 \
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
    pr188-bundle)
      # issue 29, run where PR #188's commits are (not on the GPU machine): PR #188's two commits
      # cherry-picked onto e3c3477 in a private clone (the committer fixed, as tests/test_rebase_real_moves.py
      # does, so the commits are the same everywhere), saved as .upstream/pr188-on-e3c3477.bundle (git-ignored,
      # a few KB; its prerequisite e3c3477 is in every HAMi-core clone) for `pr188-all` to fetch
      PRH=${PR188_HEAD:-69ed0029b2ebfe2238ab6ab4b62c723a9e536320}; B=${PR188_BUNDLE:-$PWD/.upstream/pr188-on-e3c3477.bundle}
      C=${PR188_CLONE:-/tmp/lp-hc-pr188}-pick
      git -C $SRC cat-file -e "$PRH^{commit}" 2>/dev/null || { echo "pr188-bundle: $SRC lacks PR #188's head $PRH; fetch it:" \
        "git -C $SRC fetch <HAMi-core remote or bundle> +refs/pull/188/head:refs/pull/188/head" >&2; exit 3; }
      rm -rf $C && git clone -q --shared --no-checkout $SRC $C && git -C $C checkout -q -b pr188-on-e3c3477 e3c3477 &&
      GIT_COMMITTER_NAME=lucepatch GIT_COMMITTER_EMAIL=lucepatch@localhost GIT_COMMITTER_DATE=2026-01-01T00:00:00Z \
        GIT_CONFIG_GLOBAL=/dev/null git -C $C cherry-pick $(git -C $C rev-list --reverse --no-merges e3c3477..$PRH) >/dev/null &&
      git -C $C bundle create -q $B e3c3477..pr188-on-e3c3477 && git -C $C log --oneline e3c3477..pr188-on-e3c3477 &&
      echo "wrote $B ($(git -C $C rev-parse pr188-on-e3c3477)); carry it with .upstream/hami-core"; rm -rf $C ;;
    pr188-all)
      # issue 29: every reproducer, ref-vs-ref, on a candidate PR — upstream PR #188 on e3c3477 against
      # e3c3477 — at verify's default slots (8 with workloads) on one GPU, as a reviewer waits on it (sequential rule, settled scenarios stop).
      # Goal <= 240 s with the 50 verdicts of the run before settling (474 s, 960 processes on one H200).
      # Needs .upstream/pr188-on-e3c3477.bundle (step pr188-bundle); fetched into a private clone of $SRC
      # (objects borrowed), so $SRC is not written. Two cold HAMi-core builds (~15 s) + the runs.
      # PR188_BUNDLE / PR188_CLONE move the bundle and the private clone (the tests put both under their tmp)
      B=${PR188_BUNDLE:-$PWD/.upstream/pr188-on-e3c3477.bundle}; C=${PR188_CLONE:-/tmp/lp-hc-pr188}; mkdir -p "$OUT/commit"
      [ -f $B ] || { echo "pr188-all: no $B; run \`bash tools/gpu_session.sh pr188-bundle\` where PR #188 is" >&2; exit 3; }
      rm -rf $C && git clone -q --shared --no-checkout $SRC $C &&
      git -C $C fetch -q "$B" +refs/heads/pr188-on-e3c3477:refs/heads/pr188-on-e3c3477 || exit 3
      # PR188_REPROS (reproducer names, space-separated) runs a subset instead of --all, less the scenarios in
      # PR188_EXCLUDE (reproducer:scenario, space-separated); controls always run. PR188_REPROS=old50 is the
      # like-for-like set of the 474 s run: the 11 reproducers that existed before issue 28's commits
      # (`git show e6a7d8f^:reproducers`, before e6a7d8f..8ceb488 added ctypes-meminfo, device-index,
      # ggml-vmm-pool, meminfo-null, pointer-attrs, untracked-free, vmm-release): async-accounting 3,
      # async-sched 4, ctypes-clients 4, ggml-client 3, llama-vmm 4, multi-device 3, pool-alloc 6, pr188-guard 3,
      # shared-region 3, torch-clients 14, zero-limit 3 = 50 scenarios (controls counted), less llama-vmm's
      # main-device, which issue 28 added (ab041ad; the other ten reproducers' scenarios are unchanged since).
      # Its evidence and log are named hami-core-pr188-<PR188_NAME, default old50 or subset>.
      what="--all --target hami-core"; name=all
      if [ -n "${PR188_REPROS:-}" ]; then
        if [ "$PR188_REPROS" = old50 ]; then name=${PR188_NAME:-old50}; PR188_EXCLUDE=${PR188_EXCLUDE-llama-vmm:main-device}
          PR188_REPROS="async-accounting async-sched ctypes-clients ggml-client llama-vmm multi-device pool-alloc pr188-guard \
            shared-region torch-clients zero-limit"
        else name=${PR188_NAME:-subset}; fi
        what=$(python3 tools/scenario_set.py --exclude "${PR188_EXCLUDE:-}" $PR188_REPROS) || exit 3
      fi
      s0=$(now)
      lp verify $what --source $C --baseline-ref e3c3477 --patched-ref pr188-on-e3c3477 \
        --driver $DRIVER ${PR188_JOBS:+--jobs $PR188_JOBS} --evidence "$OUT/commit/hami-core-pr188-$name.$TAG.json" 2>&1 \
        | tee "$OUT/verify-pr188-$name.log"
      python3 -c "import sys; print(f'pr188-$name wall: {float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$s0" "$(now)" \
        | tee -a "$OUT/verify-pr188-$name.log"
      cp "$OUT/verify-pr188-$name.log" "$OUT/commit/hami-core-pr188-$name.$TAG.log" ;;
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
      system_cc; C=.upstream/lucebox-carry; W=/tmp/lbx-src; rm -rf $W /tmp/nlohmann
      python3 tools/carry_lucebox.py unpack $C $W 2>&1 | tee "$OUT/lucebox-carry.log" &&
      { dpkg -x $C/nlohmann-json3-dev_*.deb /tmp/nlohmann 2>/dev/null ||
        { mkdir -p /tmp/nlohmann && cd /tmp/nlohmann && ar x "$OLDPWD"/$C/nlohmann-json3-dev_*.deb && tar -xf data.tar.* && cd "$OLDPWD"; }; } &&
      export LUCEPATCH_CARRIED_TREES=$C/trees.json CMAKE_PREFIX_PATH=/tmp/nlohmann/usr &&
      python3 bench/probe.py --source $W --profile sm120-cuda13 --both ${LUCEBOX_CUDA_ARCHS:+--cuda-archs "$LUCEBOX_CUDA_ARCHS"} --measure-full "$OUT/lucebox-full-build.sm120-cuda13.json" \
        >"$OUT/bench-probe.h200.json" 2>"$OUT/bench-probe.h200.log"; tail -3 "$OUT/bench-probe.h200.log"
      lp build lucebox --source $W --profile sm120-cuda13 --baseline --summary "$OUT/lucebox-baseline-build.json" \
        2>&1 | tee "$OUT/lucebox-baseline-build.log" | tail -12
      python3 tools/lucebox_f6_relink.py "$OUT/lucebox-full-build.sm120-cuda13.json" "$OUT/lucebox-f6-relink.json" 2>&1 | tail -12
      mkdir -p "$OUT/commit" && python3 tools/lucebox_summary_md.py "$OUT" "$OUT/commit" >"$OUT/commit/full-build-sm120-cuda13.h200.md"
      cat "$OUT/commit/full-build-sm120-cuda13.h200.md" ;;
    lucebox-full)
      # issue 17 item 3, the full patched sm120-cuda13 build alone (~3.5 min on 16 cores), with the system GCC
      # (see system_cc): binaries, SASS per library and the closure (C++ runtime copies included)
      lucebox_tree
      lp build lucebox --source $W --profile sm120-cuda13 \
        --summary "$OUT/commit/lucebox-full-build.sm120-cuda13.system-gcc.h200.json" 2>&1 | tee "$OUT/lucebox-full.log" | tail -30 ;;
    lucebox-f6-probe)
      # issue 25 item 5: the F6 baseline re-measured with the masked link (~40 s on 16 cores: two F6 probes).
      # docs/lucebox/bench-probe.h200.log predates the mask (builders/driverless.py) and shows F6 passing on
      # the baseline, because ld found the H200's real libcuda.so.1; masked, the baseline must fail as declared
      # and the patched tree pass. F6_TARGET/F6_SOURCE/F6_PROFILE/F6_WORKSPACE run it on another target
      # (tests/test_gpu_session_f6.py: the cudaproj fixture with DRIVER=fake on a CPU machine).
      if [ -n "${F6_SOURCE:-}" ]; then FS=$F6_SOURCE; else lucebox_tree; FS=$W; fi
      mkdir -p "$OUT/commit"
      lp ${F6_WORKSPACE:+--workspace "$F6_WORKSPACE"} probe "${F6_TARGET:-lucebox}" --source "$FS" \
        --profile "${F6_PROFILE:-sm120-cuda13}" --both --only F6 --json \
        >"$OUT/commit/probe-f6.${F6_PROFILE:-sm120-cuda13}.$TAG.json" 2>"$OUT/commit/probe-f6.${F6_PROFILE:-sm120-cuda13}.$TAG.log"
      echo "probe exit: $?" >>"$OUT/commit/probe-f6.${F6_PROFILE:-sm120-cuda13}.$TAG.log"
      tail -5 "$OUT/commit/probe-f6.${F6_PROFILE:-sm120-cuda13}.$TAG.log"
      python3 tools/lucebox_f6_probe_check.py "$OUT/commit/probe-f6.${F6_PROFILE:-sm120-cuda13}.$TAG.json" \
        "$OUT/commit/probe-f6-verdict.${F6_PROFILE:-sm120-cuda13}.$TAG.json" ;;
    lucebox-f6)
      # the F6 re-link where it matters: on the GPU host, whose real libcuda.so.1 ld would find (ldconfig,
      # the driver's folders). The full patched build (~3.5 min, system GCC, tree kept), then F6 dropped
      # and re-linked with every libcuda.so.1 ld can see masked (builders/driverless.py): a driver-less
      # builder's link, which must fail with the 11 undefined cu* (exit 0); exit 3 = the driver stayed visible
      lucebox_tree
      lp build lucebox --source $W --profile sm120-cuda13 --keep-build --summary "$OUT/lucebox-f6-build.json" \
        2>&1 | tee "$OUT/lucebox-f6-build.log" | tail -8
      { ldconfig -p | grep -E "libcuda\.so" || true; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; } > "$OUT/lucebox-f6-host-libcuda.txt"
      python3 tools/lucebox_f6_relink.py "$OUT/lucebox-f6-build.json" "$OUT/commit/lucebox-f6-relink.masked.h200.json" 2>&1 | tail -14
      echo "lucebox_f6_relink exit: ${PIPESTATUS[0]}" | tee -a "$OUT/lucebox-f6-host-libcuda.txt"
      # which libcuda ld opened for that link (the same mask, -Wl,--verbose), the link line, NEEDED/RUNPATH
      python3 tools/lucebox_f6_diag.py "$OUT/lucebox-f6-build.json" "$OUT/commit/lucebox-f6-diag.h200.txt" 2>&1 | tail -25 ;;
    main-job-jobs)
      # issue 13: the main job at several parallelism levels (16 = one per core here), same builds; JOBS_LIST
      # overrides the levels; a repeated level gets its own files (-2, -3, ...)
      declare -A seen=()
      for j in ${JOBS_LIST:-16 24 32 12 16}; do
        seen[$j]=$(( ${seen[$j]:-0} + 1 )); sfx=x$j; [ "${seen[$j]}" -gt 1 ] && sfx=x$j-${seen[$j]}
        s0=$(now); c0=$(head -1 /proc/stat)
        lp verify --reproducer async-sched --source $SRC --driver $DRIVER --jobs $j \
          --evidence "$OUT/async-sched.sequential.$sfx.$TAG.json" > "$OUT/verify-main-job-$sfx.log" 2>&1
        # the whole machine's CPU use over the command (/proc/stat): tells a CPU-bound level from a driver-bound one
        python3 -c "import sys; a, b = ([int(x) for x in l.split()[1:]] for l in sys.argv[4:6]); d = [y - x for x, y in zip(a, b)]
print(f'main job x{sys.argv[3]}: {float(sys.argv[2]) - float(sys.argv[1]):.2f} s, CPU busy {100 * (1 - (d[3] + d[4]) / sum(d)):.0f} %')" \
          "$s0" "$(now)" "$j" "$c0" "$(head -1 /proc/stat)" | tee -a "$OUT/main-job-jobs.log"
        grep -E "processes in|verdict:" "$OUT/verify-main-job-$sfx.log" | tee -a "$OUT/main-job-jobs.log"
      done ;;
    ggml-build)
      # issue 17 item 4, fallback when lucebox-build's libggml-cuda has no code for this GPU (a
      # sm_120-only build on an H200): the patched superproject once more for this GPU's arch only
      # (~3-4 min on 16 cores), into $LUCEPATCH_CACHE where ggml-client finds it
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .); cap=${cap:-90}
      system_cc; echo "ggml-build: CC=${CC:-} CXX=${CXX:-}"
      C=.upstream/lucebox-carry; W=/tmp/lbx-src
      [ -f $W/server/CMakeLists.txt ] || { rm -rf $W; python3 tools/carry_lucebox.py unpack $C $W 2>&1 | tail -2; }
      [ -d /tmp/nlohmann/usr ] || { dpkg -x $C/nlohmann-json3-dev_*.deb /tmp/nlohmann 2>/dev/null ||
        { mkdir -p /tmp/nlohmann && cd /tmp/nlohmann && ar x "$OLDPWD"/$C/nlohmann-json3-dev_*.deb && tar -xf data.tar.* && cd "$OLDPWD"; }; }
      LUCEPATCH_CARRIED_TREES=$C/trees.json CMAKE_PREFIX_PATH=/tmp/nlohmann/usr \
        lp build lucebox --source $W --profile sm120-cuda13 --cuda-archs "$cap" --keep-build \
        --summary "$OUT/ggml-build.sm$cap.json" 2>&1 | tee "$OUT/ggml-build.log" | tail -8 ;;
    ggml-client)
      # issue 17 item 4 (< 90 s after lucebox-build or ggml-build in the same machine session): the
      # ggml workload (reproducers/ggml-client) against the Lucebox build's libggml*, under three
      # HAMi-core builds: e3c3477 vs the pin (8f3a89c), then the pin vs the series
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
      G=/tmp/lp-ggml; mkdir -p "$OUT/commit"; system_cc  # the client is compiled with the libraries' compiler
      if python3 tools/ggml_dir.py $G ${cap:+--arch $cap} --include /tmp/lbx-src/server/deps/llama.cpp/ggml/include \
          "$OUT"/ggml-build.*.json "$OUT/lucebox-full-build.sm120-cuda13.json" 2>&1 | tee "$OUT/ggml-dir.log"; then
        cp $G/ggml-dir.json "$OUT/commit/ggml-client-libs.$TAG.json"
        export LUCEPATCH_GGML_DIR=$G
      else
        echo "ggml-client: no usable ggml build (see ggml-dir.log); the scenarios report skipped" | tee -a "$OUT/ggml-dir.log"
      fi
      lp verify --reproducer ggml-client --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
        --baseline-ref e3c3477 --patched-ref 8f3a89c \
        --evidence "$OUT/commit/ggml-client-refs.$TAG.json" 2>&1 | tee "$OUT/verify-ggml-client-refs.log"
      lp verify --reproducer ggml-client --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
        --evidence "$OUT/commit/ggml-client.$TAG.json" 2>&1 | tee "$OUT/verify-ggml-client.log" ;;
    ggml-diag)
      # issue 17 item 4 (< 1 min, after ggml-client in the same machine session): the client died in
      # ~10 ms with `free(): invalid pointer` before its first line, --backend cpu and without HAMi too,
      # while it passes off the GPU (Debian gcc 12, pip cuBLAS, no driver) under valgrind with 0 errors.
      # tools/ggml_diag.py says which library's static constructor aborts (an empty main linked against
      # each library alone; LD_DEBUG=files; an INITFIRST backtrace preload, frames through addr2line) and
      # records sizes, NEEDED, compiler and the ggml targets' compile flags. GGML_DIR: another ggml dir.
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
      G=${GGML_DIR:-/tmp/lp-ggml}; mkdir -p "$OUT/commit"
      [ -e $G/lib/libggml.so ] || python3 tools/ggml_dir.py $G ${cap:+--arch $cap} \
        --include /tmp/lbx-src/server/deps/llama.cpp/ggml/include "$OUT"/ggml-build.*.json \
        "$OUT/lucebox-full-build.sm120-cuda13.json" 2>&1 | tail -2
      python3 tools/ggml_diag.py $G "$OUT/ggml-diag" ${CUDA_LIBS:+--cuda-lib "$CUDA_LIBS"} 2>&1 | tee "$OUT/ggml-diag.log" &&
      cp "$OUT/ggml-diag/ggml-diag.txt" "$OUT/commit/ggml-diag.$TAG.txt" ;;
    ctypes-clients)
      # the torch-free workload (ThreadPoolExecutor + ctypes on the driver API), pin vs series
      lp verify --reproducer ctypes-clients --source $SRC --driver $DRIVER --runs 20 --jobs $JOBS \
        --evidence "$OUT/ctypes-clients.$TAG.json" 2>&1 | tee "$OUT/verify-ctypes-clients.log" ;;
    torch-smoke)
      # one run of every torch scenario, pin vs series: does the workload run on this torch at all?
      # (~1 min; evidence for the reader, not for the README)
      lp verify --reproducer torch-clients --source $SRC --driver $DRIVER --fixed --runs 1 --jobs $JOBS \
        --evidence "$OUT/torch-clients-smoke.$TAG.json" 2>&1 | tee "$OUT/verify-torch-smoke.log" ;;
    torch-nccl-refs)
      # ref-vs-ref: e3c3477 (before 72b24fd) vs the pin, NCCL init + all_reduce with three allocators
      lp verify --reproducer torch-clients --source $SRC --driver $DRIVER --runs 10 --jobs $JOBS \
        --baseline-ref e3c3477 --patched-ref 8f3a89c --scenario nccl-allreduce-default \
        --scenario nccl-allreduce-expandable --scenario nccl-allreduce-async \
        --evidence "$OUT/torch-clients-nccl-refs.$TAG.json" 2>&1 | tee "$OUT/verify-torch-nccl-refs.log" ;;
    torch-threadpool)
      # pin vs series: ThreadPoolExecutor + backend:cudaMallocAsync (log line and accounting)
      lp verify --reproducer torch-clients --source $SRC --driver $DRIVER --runs 10 --jobs $JOBS \
        --scenario threadpool-async-alloc \
        --evidence "$OUT/torch-clients-threadpool.$TAG.json" 2>&1 | tee "$OUT/verify-torch-threadpool.log" ;;
    torch-guards)
      # pin vs series: every other pattern must pass on both (guarded); the 2-rank ones report skipped on 1 GPU
      lp verify --reproducer torch-clients --source $SRC --driver $DRIVER --runs 10 --jobs $JOBS $TORCH_GUARDS \
        --evidence "$OUT/torch-clients-guards.$TAG.json" 2>&1 | tee "$OUT/verify-torch-guards.log" ;;
    torch-2gpu)
      # issue 18: two ranks, one per GPU, pin vs series (skipped with the reason on fewer than 2 GPUs)
      n=$(nvidia-smi -L 2>/dev/null | wc -l)
      lp verify --reproducer torch-clients --source $SRC --driver $DRIVER --runs 10 --jobs 4 \
        --scenario two-rank-threads-async --scenario two-rank-threads-default \
        --evidence "$OUT/torch-clients-2gpu.${TAG}x${n}.json" 2>&1 | tee "$OUT/verify-torch-2gpu.log" ;;
    crashlogs)
      # the baseline crashes of the real-client runs, as fingerprint corpus logs (tests/fixtures/crashlogs/)
      mkdir -p "$OUT/crashlogs"
      for ev in "$OUT"/torch-clients-*.json "$OUT"/ctypes-clients.$TAG.json "$OUT"/llama-vmm-refs.$TAG.json; do
        [ -f "$ev" ] || continue
        for sc in $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' '.join(sorted({r['scenario'] for r in d['runs'] if r['variant']=='baseline' and r['outcome'] in ('crash','fail-log','fail')})))" "$ev"); do
          name="$TAG-${sc/:/-}.$(python3 -c "import json,sys; print((json.load(open(sys.argv[1]))['variants']['baseline'].get('base') or '')[:7])" "$ev").log"
          python3 -m lucepatch.fingerprints "$ev" "$sc" > "$OUT/crashlogs/$name" && echo "wrote crashlogs/$name"
        done
      done ;;
    v25-line)
      # every C reproducer + ctypes-clients, base vs line: 2 cmake builds (~1 min) + ~340 processes
      # under the sequential rule (~4 min at 0.66 s per process at x8); llama-vmm, multi-device and
      # shared-region are reported not-applicable (not run); async-accounting proves the 740f9ef backport
      lp verify --target hami-core-v2.5 $C_REPROS --reproducer ctypes-clients --source $SRC --driver $DRIVER --runs 20 --jobs $JOBS \
        --evidence "$OUT/hami-core-v2.5-all.$TAG.json" 2>&1 | tee "$OUT/verify-v25-line.log" ;;
    v25-torch-threadpool)
      # the PyTorch workloads on the line, as torch-threadpool / torch-guards run them on the main
      # line (same scenarios, runs and duration; the v25-line builds are cached)
      lp verify --target hami-core-v2.5 --reproducer torch-clients --source $SRC --driver $DRIVER --runs 10 \
        --jobs $JOBS --scenario threadpool-async-alloc \
        --evidence "$OUT/hami-core-v2.5-torch-threadpool.$TAG.json" 2>&1 | tee "$OUT/verify-v25-torch-threadpool.log" ;;
    v25-torch-guards)
      lp verify --target hami-core-v2.5 --reproducer torch-clients --source $SRC --driver $DRIVER --runs 10 \
        --jobs $JOBS $TORCH_GUARDS \
        --evidence "$OUT/hami-core-v2.5-torch-guards.$TAG.json" 2>&1 | tee "$OUT/verify-v25-torch-guards.log" ;;
    i28-main)
      # issue 28, the main line (8f3a89c vs hami-core): NULL cuMemGetInfo outputs, untracked frees, the NVML index
      # in oom_check, cuPointerGetAttributes, VMM charged until unmapped; llama-vmm's new control; device-index and
      # llama-vmm device-create report skipped on 1 GPU (i28-2gpu runs them). 2 builds + ~460 processes (~4 min)
      mkdir -p "$OUT/commit"; s0=$(now)
      i28_verify hami-core i28-hami-core
      python3 -c "import sys; print(f'i28-main wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i28-timing.log" ;;
    i28-v25)
      # issue 28, the v2.5 line (54b1305 vs hami-core-v2.5): the same fixes carried, VMM accounting backported,
      # llama-vmm applicable there now. 2 builds + ~445 processes (~4 min)
      mkdir -p "$OUT/commit"; s0=$(now)
      i28_verify hami-core-v2.5 i28-hami-core-v2.5
      python3 -c "import sys; print(f'i28-v25 wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i28-timing.log" ;;
    i28-llama-vmm)
      # issue 28: llama-vmm alone on both lines, after its usage reads stopped cycling the primary context (on the
      # v2.5 line each retain after a release charged HAMi's context_size again and the control failed on the H200);
      # 4 builds (cached after i28-main/i28-v25) + ~140 processes (< 1.5 min)
      mkdir -p "$OUT/commit"; s0=$(now)
      for t in hami-core hami-core-v2.5; do
        lp verify --target $t --reproducer llama-vmm --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
          --evidence "$OUT/commit/i28-llama-vmm-$t.$TAG.json" 2>&1 | tee "$OUT/verify-i28-llama-vmm-$t.log"
      done
      # its bare-driver traces, re-recorded for the changed program (device-create needs 2 GPUs: it stays awaiting)
      rm -rf "$OUT/traces-llama-vmm"
      python3 -m lucepatch.verify.record_traces --out "$OUT/traces-llama-vmm" --driver $DRIVER --label $TAG \
        --program llama-vmm 2>&1 | tee "$OUT/traces-llama-vmm.log"
      python3 -c "import sys; print(f'i28-llama-vmm wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i28-timing.log" ;;
    i28-traces)
      # the bare driver's answers to the new programs (no HAMi): the probe `queries` and every new reproducer
      # scenario the machine can run; commit $OUT/traces-i28/*.h200.jsonl under tests/fakecuda/traces/ and drop
      # their [awaiting-trace] entries (< 1 min)
      rm -rf "$OUT/traces-i28"
      python3 -m lucepatch.verify.record_traces --out "$OUT/traces-i28" --driver $DRIVER --label $TAG $I28_TRACES \
        2>&1 | tee "$OUT/traces-i28.log" ;;
    i28-2gpu)
      # issue 28 on nvidia-h200-x2: device-index (CUDA_VISIBLE_DEVICES=1,0: CUDA and NVML number the GPUs
      # differently) and llama-vmm device-create, both lines, then their traces (~2.5 min with cold builds)
      n=$(nvidia-smi -L 2>/dev/null | wc -l); mkdir -p "$OUT/commit"; s0=$(now)
      for t in hami-core hami-core-v2.5; do
        lp verify --target $t --reproducer device-index --reproducer llama-vmm --scenario llama-vmm:device-create \
          --scenario device-index:reordered --scenario device-index:reordered-device-1 \
          --scenario device-index:reordered-cuda-first --scenario device-index:reordered-per-device-limits \
          --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
          --evidence "$OUT/commit/i28-2gpu-$t.${TAG}x${n}.json" 2>&1 | tee "$OUT/verify-i28-2gpu-$t.log"
      done
      rm -rf "$OUT/traces-i28-2gpu"
      python3 -m lucepatch.verify.record_traces --out "$OUT/traces-i28-2gpu" --driver $DRIVER --label $TAG \
        --program device-index --program llama-vmm.device-create 2>&1 | tee "$OUT/traces-i28-2gpu.log"
      python3 -c "import sys; print(f'i28-2gpu wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i28-timing.log" ;;
    i28-ggml)
      # issue 28: ggml's VMM pool under HAMi (ggml-vmm-pool, one 65536-column batch): the charge
      # must cover what the pool mapped, base vs line on both lines; needs the ggml build of `ggml-build` or
      # `lucebox-build` in this machine session (a profile with VMM: sm120-cuda13, not sm120-cuda13-hami)
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
      need_52f33fc || continue  # the main line's base (hami-core 2.0.0)
      G=/tmp/lp-ggml; mkdir -p "$OUT/commit"; system_cc; s0=$(now)
      if [ -e $G/lib/libggml.so ] || lbx_ggml_dir $G "$cap" || python3 tools/ggml_dir.py $G ${cap:+--arch $cap} \
          --include /tmp/lbx-src/server/deps/llama.cpp/ggml/include "$OUT"/ggml-build.*.json \
          "$OUT/lucebox-full-build.sm120-cuda13.json" 2>&1 | tee "$OUT/ggml-dir-i28.log"; then
        cp $G/ggml-dir.json "$OUT/commit/i28-ggml-libs.$TAG.json" 2>/dev/null
        export LUCEPATCH_GGML_DIR=$G
      else
        echo "i28-ggml: no usable ggml build (run ggml-build first); the scenarios report skipped" | tee -a "$OUT/ggml-dir-i28.log"
      fi
      for t in hami-core hami-core-v2.5; do
        lp verify --target $t --reproducer ggml-vmm-pool \
          --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
          --evidence "$OUT/commit/i28-ggml-$t.$TAG.json" 2>&1 | tee "$OUT/verify-i28-ggml-$t.log"
      done
      python3 -c "import sys; print(f'i28-ggml wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i28-timing.log" ;;
    i36-traces)
      # issue 36: the bare driver's answers (no HAMi) to the capture probe (which calls a capture forbids, per mode
      # and thread; graph memory nodes) and to every graph-capture scenario; commit $OUT/traces-i36/*.jsonl under
      # tests/fakecuda/traces/ (renamed .h200.jsonl, the label the replay test reads; an H100 run (files .h100.jsonl)
      # says so in the commit and in known-differences.toml's header) and drop their
      # [awaiting-trace] entries in known-differences.toml (< 1 min)
      rm -rf "$OUT/traces-i36"
      python3 -m lucepatch.verify.record_traces --out "$OUT/traces-i36" --driver $DRIVER --label $TAG \
        --program driver-semantics.capture --program graph-capture 2>&1 | tee "$OUT/traces-i36.log" ;;
    i36-capture)
      # issue 36 item 1 on a GPU: the stream-capture fix on every line (base vs line): the driver-API reproducer
      # (7 scenarios; on the main line with async-sched, the evidence `pr` takes for the async + capture PR) and
      # PyTorch's cuda-graph-async (+ the two torch controls); 6 builds + ~330 C and ~105 torch processes
      # (~6-7 min; a torch run is ~5-10 s). RUNS=10: the sequential rule's 5 + 10 per fix.
      # 2026-12-06, H100, RUNS=5, main line only (62.9 s): 2.0.0 proved capture-pool and async-sched, not the
      # default-pool captures nor cuda-graph-async (its hook asked cuStreamGetDevice of the capturing stream: 900;
      # docs/evidence.md, issue 36). The corrected patch (2.2.0 / v2.9 1.2.0 / v2.5 1.7.0) awaits this step.
      need_52f33fc || continue
      mkdir -p "$OUT/commit"; s0=$(now)
      for t in ${I36_TARGETS:-hami-core hami-core-v2.9 hami-core-v2.5}; do  # I36_TARGETS: fewer lines where device time is short
        extra=""; [ $t = hami-core ] && extra="--reproducer async-sched"
        lp verify --target $t --reproducer graph-capture $extra --source $SRC --driver $DRIVER --runs ${RUNS:-10} \
          --jobs $JOBS --evidence "$OUT/commit/i36-graph-capture-$t.$TAG.json" 2>&1 | tee "$OUT/verify-i36-graph-capture-$t.log"
        lp verify --target $t --reproducer torch-clients --scenario cuda-graph-async --source $SRC --driver $DRIVER \
          --runs ${RUNS:-10} --jobs $JOBS --evidence "$OUT/commit/i36-torch-graph-$t.$TAG.json" 2>&1 \
          | tee "$OUT/verify-i36-torch-graph-$t.log"
      done
      python3 -c "import sys; print(f'i36-capture wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i36-timing.log" ;;
    i36-pr)
      # issue 36: the upstream PR of the stream-ordered paths + the capture fix, on 52f33fc, from i36-capture's
      # main-line evidence (graph-capture + async-sched, and torch cuda-graph-async): the async follow-up the
      # maintainers asked for after #290 (device from the stream / the pool, frees to the recorded device, free on
      # failure: #306) and never breaking a capture. Nothing is pushed; commit messages stay TODO(submitter).
      need_52f33fc || continue
      rm -rf "$OUT/pr-hami-core-capture"
      rc_ev=(); [ "$DRIVER" = real ] && rc_ev=(--real-clients "$OUT/commit/i36-torch-graph-hami-core.$TAG.json")  # hardware only
      lp pr hami-core --source $SRC --out "$OUT/pr-hami-core-capture" \
        --patches fix-allocator-charge-stream-ordered-allocations-to-the-streams-device.patch,fix-allocator-release-async-frees-against-the-recorded-device.patch,fix-allocator-track-and-charge-pool-allocations-to-the-pools-device.patch,fix-allocator-never-break-a-stream-capture-to-charge.patch \
        --evidence "$OUT/commit/i36-graph-capture-hami-core.$TAG.json" "${rc_ev[@]}" 2>&1 | tee "$OUT/i36-pr.log" ;;
    i36-main)
      # issue 36 item 6: the new main line proven (52f33fc + Build-Only vs hami-core 2.0.0), every reproducer one GPU
      # runs, C and workloads in one verify (sequential rule, --runs 10); 2 builds + ~900 processes (~6-7 min at x8)
      need_52f33fc || continue
      mkdir -p "$OUT/commit"; s0=$(now)
      lp verify --all --target hami-core --source $SRC --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
        --evidence "$OUT/commit/i36-hami-core-52f33fc.$TAG.json" 2>&1 | tee "$OUT/verify-i36-main.log"
      lp show "$OUT/commit/i36-hami-core-52f33fc.$TAG.json" --html "$OUT/i36-hami-core-52f33fc.$TAG.html" > /dev/null
      python3 -c "import sys; print(f'i36-main wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i36-timing.log" ;;
    i36-refs)
      # issue 36 item 6: ref-vs-ref 8f3a89c -> 52f33fc (no series), every reproducer: what upstream's move fixed
      # (pool-charged, over-limit) and made worse (ctxless-pool-alloc: uncharged -> SIGSEGV). Each ref is built
      # with its own era's Build-Only patch (the v2.9 line's baseline = 8f3a89c, the main line's = 52f33fc;
      # `--baseline-ref 8f3a89c` refuses while the main line's Build-Only patch is 52f33fc's), then compared as
      # --baseline-lib / --lib. 2 builds (cached after i36-capture) + ~900 processes (~5 min)
      need_52f33fc || continue
      mkdir -p "$OUT/commit"; s0=$(now)
      for t in hami-core-v2.9 hami-core; do
        lp build $t --baseline --source $SRC --json > "$OUT/i36-refs-build-$t.json" 2> "$OUT/i36-refs-build-$t.log" || {
          echo "i36-refs: $t's baseline did not build ($OUT/i36-refs-build-$t.log)" >&2; continue 2; }
      done
      libof() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["builds"][0]["artifacts"]["libvgpu.so"]["path"])' "$1"; }
      lp verify --all --target hami-core --driver $DRIVER --runs ${RUNS:-10} --jobs $JOBS \
        --baseline-lib "$(libof "$OUT/i36-refs-build-hami-core-v2.9.json")" --lib "$(libof "$OUT/i36-refs-build-hami-core.json")" \
        --evidence "$OUT/commit/i36-refs-8f3a89c-52f33fc.$TAG.json" 2>&1 | tee "$OUT/verify-i36-refs.log"
      python3 -c "import sys; print(f'i36-refs wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i36-timing.log" ;;
    i36-worse)
      # issue 36 items 2-3: `verify --baseline-ref 8f3a89c --patched-ref 52f33fc` as a maintainer types it (it refused
      # before: the v2.9 line's Build-Only patch does not apply at 52f33fc; now 52f33fc is built as it ships with
      # [build.instead_of]'s -DCMAKE_POLICY_VERSION_MINIMUM=3.5, recorded as `carried` in the evidence), pool-alloc
      # and untracked-free: #217's context-less pool allocation must read `worse` (Illegal device id / SIGSEGV on
      # 52f33fc where 8f3a89c left it uncharged, both sides' outcomes in the reason), pool-charged/over-limit
      # `proven` (fixed upstream); the page shows it. 2 builds + ~150 processes (~2 min)
      need_52f33fc || continue
      mkdir -p "$OUT/commit"; s0=$(now)
      lp verify --reproducer pool-alloc --reproducer untracked-free --target hami-core-v2.9 --source $SRC \
        --driver $DRIVER --baseline-ref 8f3a89c --patched-ref 52f33fc --jobs $JOBS \
        --evidence "$OUT/commit/i36-worse-8f3a89c-52f33fc.$TAG.json" 2>&1 | tee "$OUT/verify-i36-worse.log"
      lp show "$OUT/commit/i36-worse-8f3a89c-52f33fc.$TAG.json" --wide --html "$OUT/i36-worse.$TAG.html" \
        > "$OUT/i36-worse.show.txt" 2>&1
      python3 - "$OUT/commit/i36-worse-8f3a89c-52f33fc.$TAG.json" <<'PY' | tee "$OUT/i36-worse.summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
print("patched side built as:", d["variants"]["patched"].get("carried"))
for s in d["scenarios"]:
    if not s["control"]:
        print(f"{s['scenario']}: {s['verdict']}: {s.get('reason', '')[:300]}")
PY
      python3 -c "import sys; print(f'i36-worse wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" | tee -a "$OUT/i36-timing.log" ;;
    lbx-vgpu-build)
      # issue 40: dflash_server of the new line (62880e2 + lucebox-vendored) in the two builds the evidence compares,
      # each with upstream's own cmake invocation (tools/lucebox_native_build.py, as lucebox-today) for this GPU's arch:
      # build-novmm/ = the sm120-cuda13-hami profile's -DGGML_CUDA_NO_VMM=ON (~3.5-4 min on 16 cores); build/ = the
      # default, ggml's VMM pool (lucebox-today's: built here only if it is missing, ~3.5-4 min more); the model
      # (lucebox-today's tiny qwen3, tools/lucebox_tiny_model.py) if missing. LBV_ARCHS overrides the arch list.
      if [ "$DRIVER" = fake ]; then
        python3 tests/fixtures/stand-in-server/build.py "$LUCEPATCH_CACHE/stand-in" | tee "$OUT/lbx-vgpu-stand-in.txt"
        echo "lbx-vgpu-build: DRIVER=fake builds the stand-in only (Lucebox needs nvcc, cuBLAS and the GPU machine)"; continue
      fi
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
      lbv_tree || continue; mkdir -p "$OUT/commit" $LBV; s0=$(now)
      for kind in novmm vmm; do
        if [ $kind = vmm ]; then D=$LBV/build; extra=(); else D=$LBV/build-novmm; extra=(--cmake-arg -DGGML_CUDA_NO_VMM=ON); fi
        if [ -x $D/dflash_server ]; then echo "lbx-vgpu-build: $D/dflash_server is there (kept)"; continue; fi
        python3 tools/lucebox_native_build.py --source $LBV_SRC --target lucebox-vendored --build-dir $D \
          --json "$OUT/commit/native-build-$kind.62880e2.$TAG.json" --build-arg "DFLASH_CUDA_ARCHES=${LBV_ARCHS:-${cap:-90}}" \
          "${extra[@]}" --cmake-arg -DDFLASH27B_FA_ALL_QUANTS=OFF --add-target backend_ipc_daemon --jobs ${LUCEBOX_JOBS:-14} \
          2>&1 | tee "$OUT/native-build-$kind.log" | tail -6
      done
      [ -f $LBV/tiny-qwen3.gguf ] || python3 tools/lucebox_tiny_model.py $LBV/tiny-qwen3.gguf \
        --gguf-py $LBV_SRC/server/deps/llama.cpp/gguf-py --json "$OUT/commit/tiny-model.json" > /dev/null
      ls -la $LBV/build/dflash_server $LBV/build-novmm/dflash_server $LBV/tiny-qwen3.gguf 2>&1 | tee "$OUT/lbx-vgpu-build.txt"
      python3 -c "import sys; print(f'lbx-vgpu-build wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" \
        | tee -a "$OUT/lbx-vgpu-build.txt" ;;
    lbx-vgpu-serve)
      # issue 40 items 1-2: reproducers/serve with dflash_server (reproducers/serve/servers/dflash-server.toml: /health,
      # one chat completion, the charge against the device's usage, a clean OOM under LUCEBOX_OOM_LIMIT (8m)) in the
      # builds LBV_KINDS names (vmm novmm) under the lines LBV_TARGETS names (hami-core on 52f33fc, hami-core-v2.5 on
      # 54b1305; carry .upstream/hami-core-main-2026-07-23.bundle for 52f33fc), base vs series. The `device` truth queues every server on a
      # host-wide lock (one server on the GPU at a time), so the runs are what costs: by default --fixed --runs RUNS (3)
      # = 18 dflash_server lifetimes + 6 harness-only controls per verify, 4 verifies (~1 min each if a lifetime is
      # ~3 s); SEQUENTIAL=1 uses the sequential rule (RUNS 10: ~50 lifetimes per verify, for verdicts with p-values).
      # Split over two calls with LBV_KINDS=vmm / LBV_KINDS=novmm if one does not fit.
      # Evidence: $OUT/commit/lbx-vgpu-{vmm,novmm}-<target>.$TAG.json -> docs/evidence/; `lucepatch show` renders each,
      # and all four side by side.
      need_52f33fc || continue  # the main line's base (hami-core 2.0.0)
      mkdir -p "$OUT/commit"; s0=$(now)
      if [ "$DRIVER" = fake ]; then
        SI=$(python3 tests/fixtures/stand-in-server/build.py "$LUCEPATCH_CACHE/stand-in") || exit 3
        export LUCEPATCH_SERVER_SPEC=$PWD/tests/fixtures/stand-in-server/stand-in.toml LP_STAND_IN_SERVER=$SI
      else
        export LUCEPATCH_SERVER_SPEC=$PWD/reproducers/serve/servers/dflash-server.toml LUCEBOX_MODEL=${LUCEBOX_MODEL:-$LBV/tiny-qwen3.gguf}
        [ -f "$LUCEBOX_MODEL" ] || { echo "lbx-vgpu-serve: no model at $LUCEBOX_MODEL: run lucebox-today or lbx-vgpu-build first" >&2; continue; }
      fi
      if [ -n "${SEQUENTIAL:-}" ]; then RULE=(--runs ${RUNS:-10}); else RULE=(--fixed --runs ${RUNS:-3}); fi
      for kind in ${LBV_KINDS:-vmm novmm}; do
        if [ "$DRIVER" = fake ]; then export LP_STAND_IN_POOL=--$kind; [ $kind = novmm ] && export LP_STAND_IN_POOL=--no-vmm
        else
          D=$LBV/build; export LUCEBOX_BUILD="62880e2 + lucebox-vendored, upstream's cmake invocation: ggml's VMM pool"
          [ $kind = novmm ] && D=$LBV/build-novmm LUCEBOX_BUILD="62880e2 + lucebox-vendored, -DGGML_CUDA_NO_VMM=ON (sm120-cuda13-hami)"
          [ -x $D/dflash_server ] || { echo "lbx-vgpu-serve: no $D/dflash_server: run lbx-vgpu-build first" >&2; continue; }
          export DFLASH_SERVER=$D/dflash_server
        fi
        for t in ${LBV_TARGETS:-hami-core hami-core-v2.5}; do
          lp verify --target $t --reproducer serve --source $SRC --driver $DRIVER "${RULE[@]}" --jobs $JOBS \
            --evidence "$OUT/commit/lbx-vgpu-$kind-$t.$TAG.json" 2>&1 | tee "$OUT/verify-lbx-vgpu-$kind-$t.log" | tail -9
        done
      done
      python3 -c "import sys; print(f'lbx-vgpu-serve wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" \
        | tee -a "$OUT/lbx-vgpu-timing.log"
      ls "$OUT"/commit/lbx-vgpu-*."$TAG".json >/dev/null 2>&1 && lp show "$OUT"/commit/lbx-vgpu-*."$TAG".json \
        > "$OUT/commit/lbx-vgpu-matrix.$TAG.txt" 2>&1; cat "$OUT/commit/lbx-vgpu-matrix.$TAG.txt" 2>/dev/null ;;
    ggml-traces)
      # issue 40 item 3: ggml's VMM pool as the driver sees it, without HAMi (< 1 min): the interposer on
      # ggml-vmm-pool's client (its direct driver calls: the pool's cuMemCreate/Reserve/Map/Release/SetAccess/Unmap);
      # commit $OUT/traces-ggml/*.jsonl under tests/fakecuda/traces/workloads/: tests/test_serve.py checks the
      # stand-in's pool against it call by call. Needs the VMM build's ggml (lbx-vgpu-build / lucebox-today, or
      # ggml-build) for this GPU.
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
      G=/tmp/lp-ggml; system_cc
      if [ -e $G/lib/libggml.so ] || lbx_ggml_dir $G "$cap"; then export LUCEPATCH_GGML_DIR=$G; fi
      rm -rf "$OUT/traces-ggml"
      python3 -m lucepatch.verify.record_traces --out "$OUT/traces-ggml" --driver $DRIVER --label $TAG \
        --program ggml-vmm-pool 2>&1 | tee "$OUT/traces-ggml.log" ;;
    fork-lib)
      # the black-box check of a vendor's library (README "Olares"): which scenarios does the node's own library
      # fail? The fork binds _dl_sym@GLIBC_PRIVATE lazily and its preInit calls it when the first CUDA call
      # precedes any dlsym: on glibc >= 2.34 the C reproducers (verify's bind shim standing in at start) end
      # `invalid (cannot load: ... (called))` at that call; the workload reproducers reach CUDA through dlsym
      # first, as libcudart does, and measure the fork itself (fork-lib-workloads.*)
      F=${FORK_LIB:-.upstream/beclab-v2.5.4-libvgpu.so}
      if [ ! -f "$F" ]; then echo "fork-lib: $F is missing: carry .upstream/beclab-v2.5.4-libvgpu.so" >&2; continue; fi
      { ldd --version 2>&1 | head -1; sha256sum "$F"; } | tee "$OUT/fork-lib.host.txt"
      lp node --lib "$F" > "$OUT/fork-lib.doctor.txt" 2>&1
      lp node --lib "$F" --json > "$OUT/fork-lib.doctor.json" 2>/dev/null
      lp build hami-core-v2.5 --source $SRC --json > "$OUT/fork-lib.build.json" 2> "$OUT/fork-lib.build.log"
      LIB=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["builds"][0]["artifacts"]["libvgpu.so"]["path"])' \
        "$OUT/fork-lib.build.json") || { echo "fork-lib: the v2.5 line did not build (fork-lib.build.log)" >&2; continue; }
      lp verify --target hami-core-v2.5 $C_REPROS --baseline-lib "$F" --lib "$LIB" --driver $DRIVER --runs 5 --jobs $JOBS \
        --evidence "$OUT/fork-lib.$TAG.json" 2>&1 | tee "$OUT/verify-fork-lib.log"
      lp show "$OUT/fork-lib.$TAG.json" --html "$OUT/fork-lib.$TAG.html" > /dev/null
      lp verify --target hami-core-v2.5 --reproducer ctypes-clients --reproducer ctypes-meminfo --baseline-lib "$F" \
        --lib "$LIB" --driver $DRIVER --runs 5 --jobs $JOBS --evidence "$OUT/fork-lib-workloads.$TAG.json" 2>&1 \
        | tee "$OUT/verify-fork-lib-workloads.log"
      lp show "$OUT/fork-lib-workloads.$TAG.json" --html "$OUT/fork-lib-workloads.$TAG.html" > /dev/null ;;
    lucebox-today)
      # issue 37 (ONE call, ~7 min on 16 cores; carry .whl .upstream/lucebox-carry .upstream/lucebox-vendored-carry,
      # each made here by `python3 tools/carry_lucebox.py pack SRC OUT`: ~3 MB each). Luce-Org/lucebox as people
      # clone it today (62880e2, llama.cpp vendored) with the lucebox-vendored series:
      # 1) in the background (2 cores): the probes at both bases, baseline and patched (8305b6c: patches/lucebox,
      #    62880e2: patches/lucebox-vendored), CUDA 13, profile sm120-cuda13;
      # 2) the native build of the new line with upstream's own Dockerfile invocation (tools/lucebox_native_build.py:
      #    its cmake -S/--build RUN, DFLASH_CUDA_ARCHES=${LUCEBOX_CUDA_ARCHS:-90;120}, + backend_ipc_daemon; one
      #    deviation, recorded: -DDFLASH27B_FA_ALL_QUANTS=OFF, 145 instead of 204 nvcc TUs, to fit the call),
      #    -j 14: build seconds, SASS per binary and ggml library (cuobjdump), ldd of each;
      # 3) a tiny qwen3 model written here with the tree's gguf-py (tools/lucebox_tiny_model.py; n_vocab is fixed
      #    at 151936 by the loader, the rest small), then dflash_server on it: /health and one chat request, and
      #    test_dflash started (tools/lucebox_serve_check.py).
      # The build stays at /tmp/lucebox-vendored/build (dflash_server, test_dflash, backend_ipc_daemon, ggml under
      # deps/: RUNPATH $ORIGIN/deps/...) and the model at /tmp/lucebox-vendored/tiny-qwen3.gguf, for issue 40's
      # steps in the same machine session. $OUT/commit/ -> docs/lucebox/today/.
      system_cc; V=.upstream/lucebox-vendored-carry; O=.upstream/lucebox-carry; WV=/tmp/lbv-src; WO=/tmp/lbx-src
      B=/tmp/lucebox-vendored; mkdir -p "$OUT/commit" $B
      [ -d $V ] || { echo "gpu_session: $V is missing (python3 tools/carry_lucebox.py pack <Luce-Org/lucebox at 62880e2> $V)" >&2; exit 3; }
      [ -f $WV/server/CMakeLists.txt ] || { rm -rf $WV; python3 tools/carry_lucebox.py unpack $V $WV 2>&1 | tail -2; }
      if [ -d $O ] && [ ! -f $WO/server/CMakeLists.txt ]; then rm -rf $WO; python3 tools/carry_lucebox.py unpack $O $WO 2>&1 | tail -3; fi
      [ -d /tmp/nlohmann/usr ] || { dpkg -x $V/nlohmann-json3-dev_*.deb /tmp/nlohmann 2>/dev/null ||
        { mkdir -p /tmp/nlohmann && cd /tmp/nlohmann && ar x "$OLDPWD"/$V/nlohmann-json3-dev_*.deb && tar -xf data.tar.* && cd "$OLDPWD"; }; }
      export CMAKE_PREFIX_PATH=/tmp/nlohmann/usr
      { nvcc --version | tail -2; cmake --version | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } \
        > "$OUT/commit/lucebox-today.env.txt" 2>&1
      ( if [ -f $WO/server/CMakeLists.txt ]; then
          LUCEPATCH_CARRIED_TREES=$O/trees.json lp probe lucebox --source $WO --profile sm120-cuda13 --both --json \
            >"$OUT/commit/probe.8305b6c.sm120-cuda13.$TAG.json" 2>"$OUT/commit/probe.8305b6c.sm120-cuda13.$TAG.log"
        fi
        LUCEPATCH_CARRIED_TREES=$V/trees.json lp probe lucebox-vendored --source $WV --profile sm120-cuda13 --both --json \
          >"$OUT/commit/probe.62880e2.sm120-cuda13.$TAG.json" 2>"$OUT/commit/probe.62880e2.sm120-cuda13.$TAG.log" ) &
      PROBES=$!
      s0=$(now)
      LUCEPATCH_CARRIED_TREES=$V/trees.json python3 tools/lucebox_native_build.py --source $WV --target lucebox-vendored \
        --build-dir $B/build --json "$OUT/commit/native-build.62880e2.$TAG.json" --build-arg "DFLASH_CUDA_ARCHES=${LUCEBOX_CUDA_ARCHS:-90;120}" \
        --cmake-arg=-DDFLASH27B_FA_ALL_QUANTS=OFF --add-target backend_ipc_daemon --jobs ${LUCEBOX_JOBS:-14} 2>&1 \
        | tee "$OUT/commit/native-build.62880e2.$TAG.log" | tail -12
      python3 -c "import sys; print(f'native build wall: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$s0" "$(now)" \
        | tee -a "$OUT/commit/native-build.62880e2.$TAG.log"
      python3 tools/lucebox_tiny_model.py $B/tiny-qwen3.gguf --gguf-py $WV/server/deps/llama.cpp/gguf-py \
        --json "$OUT/commit/tiny-model.json" > /dev/null && tail -c 300 "$OUT/commit/tiny-model.json"
      python3 tools/lucebox_serve_check.py --bin $B/build --model $B/tiny-qwen3.gguf --out "$OUT/commit/serve" 2>&1 \
        | tee "$OUT/commit/serve-check.$TAG.txt"
      wait $PROBES
      for f in "$OUT"/commit/probe.*."$TAG".json; do
        python3 -c "import json, sys; d = json.load(open(sys.argv[1]))
for run in d.get('runs', [d]):
    print(sys.argv[1].rsplit('/', 1)[-1], run['variant'], ' '.join(p['probe'].split('-')[0] + ':' + p['status'] + ('' if p['as_declared'] else '!') for p in run['probes']))" "$f"
      done | tee "$OUT/commit/probe-verdicts.$TAG.txt" ;;
    lbv-chart)
      # issue 37 item 3 (1 GPU, < 1 min; in the machine session of lucebox-today, whose build /tmp/lucebox-vendored/build
      # and model /tmp/lucebox-vendored/tiny-qwen3.gguf it serves; carry .whl and .upstream/lucebox-vendored-carry).
      # The vendored chart's server container without Kubernetes (tools/lucebox_chart_check.py): the environment
      # `render k8s lucebox-vendored` gives the server (DFLASH_PORT, DFLASH_TARGET, dflash.DFLASH_MAX_CTX=512), the
      # image's ENV and layout, upstream's own entrypoint from the carried 62880e2 tree, the real dflash_server, as
      # uid 10001 like the pod; GET /health on the chart's port as its probes do. DRIVER=fake: a stand-in server.
      B=/tmp/lucebox-vendored; V=.upstream/lucebox-vendored-carry; WV=/tmp/lbv-src; mkdir -p "$OUT/commit"
      if [ ! -f $WV/server/scripts/entrypoint.sh ] && [ -d $V ]; then
        rm -rf $WV; python3 tools/carry_lucebox.py unpack $V $WV 2>&1 | tail -2
      fi
      EP=${LBV_ENTRYPOINT:-$WV/server/scripts/entrypoint.sh}
      [ -f "$EP" ] || { echo "gpu_session: no upstream entrypoint at $EP (carry $V, or set LBV_ENTRYPOINT)" >&2; exit 3; }
      if [ "$DRIVER" = real ]; then
        [ -x $B/build/dflash_server ] && [ -f $B/tiny-qwen3.gguf ] || {
          echo "gpu_session: lbv-chart needs lucebox-today's build and model in this machine session ($B)" >&2; exit 3; }
        SERVE="--server $B/build/dflash_server --model $B/tiny-qwen3.gguf"
      else
        SERVE=--stand-in
      fi
      python3 tools/lucebox_chart_check.py --entrypoint "$EP" $SERVE --out "$OUT/chart" --port ${LBV_CHART_PORT:-18080} \
        --json "$OUT/commit/chart-entrypoint.$TAG.json" 2>&1 | tee "$OUT/commit/chart-entrypoint.$TAG.txt" ;;
    i38-sm)
      # issue 38 done-criterion 1: SM 50 gives 0.40-0.60 x bare for eager and graph decode where 52f33fc does not
      need_52f33fc || exit 3
      mkdir -p "$OUT/commit"
      lp verify --target hami-core --reproducer torch-decode --scenario sm50-eager --scenario sm50-graph --source $SRC \
        --driver $DRIVER --runs ${RUNS:-5} --evidence "$OUT/commit/torch-decode-sm.$TAG.json" 2>&1 | tee "$OUT/verify-i38-sm.log"
      lp show "$OUT/commit/torch-decode-sm.$TAG.json" --html "$OUT/commit/torch-decode-sm.$TAG.html" > /dev/null ;;
    i38-tenants)
      # done-criteria 2 and 3: two tenants in two regions at 30/70 within +-10 points; an env-less first process
      # no longer erases the limit; and SM 50 as a graph on the driver API (the same limiter without PyTorch)
      need_52f33fc || exit 3
      mkdir -p "$OUT/commit"
      lp verify --target hami-core --reproducer sm-limit --scenario tenants-eager --scenario tenants-graph \
        --scenario sm50-graph --source $SRC --driver $DRIVER --runs ${RUNS:-5} --evidence "$OUT/commit/sm-limit.$TAG.json" 2>&1 \
        | tee "$OUT/verify-i38-tenants.log"
      lp verify --target hami-core --reproducer first-writer --source $SRC --driver $DRIVER --jobs $JOBS \
        --evidence "$OUT/commit/first-writer.$TAG.json" 2>&1 | tee "$OUT/verify-i38-first-writer.log"
      # the bare driver's answers to first-writer's three scenarios (no HAMi); commit $OUT/traces-i38/*.jsonl
      # under tests/fakecuda/traces/ and drop their [awaiting-trace] entries (seconds)
      rm -rf "$OUT/traces-i38"
      python3 -m lucepatch.verify.record_traces --out "$OUT/traces-i38" --driver $DRIVER --label h200 \
        --program first-writer 2>&1 | tee "$OUT/traces-i38.log"
      lp show "$OUT/commit/sm-limit.$TAG.json" --html "$OUT/commit/sm-limit.$TAG.html" > /dev/null ;;
    i38-overhead)
      # done-criterion 4: with a memory limit only the series costs <= 1 % of bare decode throughput (95 % interval)
      need_52f33fc || exit 3
      mkdir -p "$OUT/commit"
      lp verify --target hami-core --reproducer torch-decode --scenario overhead-eager --scenario overhead-graph \
        --source $SRC --driver $DRIVER --runs ${RUNS:-5} --evidence "$OUT/commit/torch-decode-overhead.$TAG.json" 2>&1 \
        | tee "$OUT/verify-i38-overhead.log"
      lp show "$OUT/commit/torch-decode-overhead.$TAG.json" --html "$OUT/commit/torch-decode-overhead.$TAG.html" > /dev/null
      python3 bench/hook_overhead.py --source $SRC --driver $DRIVER --ops launch,graph --repeats ${REPEATS:-5} \
        --iterations 100000 --json "$OUT/commit/hook-overhead-launch.$TAG.json" 2>&1 | tee "$OUT/overhead-launch.log" ;;
    i38-core)
      # issue 38's headline in one call of < 4 min (one H100/H200): CUDA_DEVICE_SM_LIMIT=50 on sm-limit's decode loop
      # (driver API, bandwidth-bound, no PyTorch), eager and as a CUDA graph, bare vs 52f33fc vs the series: the series
      # gives 0.40-0.60 x bare where 52f33fc does not (graphs: not throttled at all, HAMi#1445). --runs 5 = 1 warm-up
      # + 4 counted rounds of 3 runs (5 s each), one look at 99 %; ~35 s of builds + 2 x ~85 s + the control
      need_52f33fc || exit 3
      mkdir -p "$OUT/commit"
      # I38_CORE="sm50-graph" runs the graph scenario alone (~2 min)
      lp verify --target hami-core --reproducer sm-limit $(printf -- '--scenario %s ' ${I38_CORE:-sm50-eager sm50-graph}) \
        --source $SRC --driver $DRIVER --runs ${RUNS:-5} --evidence "$OUT/commit/sm-limit-sm50.$TAG.json" 2>&1 \
        | tee "$OUT/verify-i38-core.log"
      lp show "$OUT/commit/sm-limit-sm50.$TAG.json" --html "$OUT/commit/sm-limit-sm50.$TAG.html" > /dev/null ;;
    i38-v29)
      # the 8f3a89c line (HAMi v2.8.2..v2.9.0): SM 50 eager and graph and the two tenants on the driver API
      mkdir -p "$OUT/commit"
      lp verify --target hami-core-v2.9 --reproducer sm-limit --scenario sm50-eager --scenario sm50-graph \
        --scenario tenants-eager --source $SRC --driver $DRIVER --runs ${RUNS:-5} --evidence "$OUT/commit/sm-limit-v29.$TAG.json" 2>&1 \
        | tee "$OUT/verify-i38-v29.log" ;;
    *)
      echo "unknown step $step" >&2 ;;
  esac
done
