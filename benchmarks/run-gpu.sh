#!/usr/bin/env bash
# Runs the whole vmmipc benchmark suite on a GPU node in one batch.
#
#   benchmarks/run-gpu.sh OUTDIR [BUILD_DIR] [--per-rank-visible] [--quick]
#
# BUILD_DIR (or $VMMIPC_BUILD_DIR; default ./build) must already hold
# benchmarks/vmmipc_bw and benchmarks/vmmipc_setup (the caller builds).
# --per-rank-visible: every rank sees only its own GPU
#   (CUDA_VISIBLE_DEVICES=<node-local rank>), to check that the mapping and
#   the copies work when the GPUs are hidden from each other.
# --quick: small sizes, a few reps (a minute; for checking the setup).
#
# Writes under OUTDIR: sync.json/.csv/.log and torch_barrier.json/.log
# (window synchronisation, run first: short), bw.json/.csv/.log,
# setup.json/.csv/.log, heap.log (the symmetric heap's table), torch.json/.log (when torch imports),
# setup_scale_{1,2}gpu_np<N>.json/.log (the scale step: vmmipc_setup with N
# ranks all on one GPU, or spread over two; a launch that could not run
# leaves a JSON with "skipped" and the reason), setup_probes_*.json/.log
# (issue 11's design probes; SETUP_PROBES=0 skips them), nvidia-smi.log, summary.md
# (goals, from report.py summary), plots/*.png (when matplotlib imports) and
# status.txt. A missing vmmipc_sync is a skip. With one GPU the NP ranks
# share it, the run says so, and the two-GPU rows are left empty with that
# reason. Each step has a time limit and the whole run a deadline
# ($DEADLINE_S, default 420 s; scripts/gpu-check.sh must allow at least that:
# GPU_CHECK_BENCH_TIMEOUT=450); the last 25 s are kept for the plots.
#
# Environment: NP (ranks, 2), MPIRUN (default: the launcher BUILD_DIR was
# configured with, else mpirun), MPIRUN_FLAGS (default: for Open MPI shared
# memory only, for MPICH none), PYTHON (python3), DEADLINE_S, NGPU (GPUs to
# assume; default: nvidia-smi -L, or the entries of CUDA_VISIBLE_DEVICES),
# SCALE_NPS (rank counts of the scale step, "8 2 4 16 32"; 8 first: the
# one-GPU goal needs it), SCALE_POINTS (2Mx1,32Mx16), SCALE_BUDGET_S (the
# scale step's share, 150). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1). MPS (auto, or 0: never): where
# nvidia-cuda-mps-control is found, a private MPS daemon (scripts/mps.sh, in
# OUTDIR/mps) serves the steps whose ranks share a GPU (NP ranks on fewer
# GPUs, the scale and probe launches), so that their kernels run at once;
# the other steps run without it; status.txt says which did.
set -uo pipefail

usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; }

OUT="" BUILD="${VMMIPC_BUILD_DIR:-build}" VISIBLE=0 QUICK=0 NPOS=0
for arg in "$@"; do
  case "$arg" in
    --per-rank-visible) VISIBLE=1 ;;
    --quick) QUICK=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "run-gpu.sh: unknown option $arg" >&2; usage >&2; exit 2 ;;
    *) NPOS=$((NPOS + 1))
       case "$NPOS" in 1) OUT="$arg" ;; 2) BUILD="$arg" ;; *) echo "run-gpu.sh: too many arguments" >&2; exit 2 ;; esac ;;
  esac
done
[ -n "$OUT" ] || { usage >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
BW="$BUILD/benchmarks/vmmipc_bw"
SETUP="$BUILD/benchmarks/vmmipc_setup"
SYNC="$BUILD/benchmarks/vmmipc_sync"
for exe in "$BW" "$SETUP"; do
  [ -x "$exe" ] || { echo "run-gpu.sh: $exe not found; build first (cmake --build $BUILD --target vmmipc_bw vmmipc_setup)" >&2; exit 2; }
done
mkdir -p "$OUT/plots" || exit 2

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NP="${NP:-2}"
MPIRUN="${MPIRUN:-$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)}"
MPIRUN="${MPIRUN:-mpirun}"
if [ -z "${MPIRUN_FLAGS+set}" ]; then
  case "$("$MPIRUN" --version 2>&1)" in
    # Shared memory only (no network on the GPU machine); the single-copy
    # mechanism is off as in the test suites (CMA needs ptrace rights).
    *"Open MPI"*|*OpenRTE*) MPIRUN_FLAGS="--bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none" ;;
    *) MPIRUN_FLAGS="" ;; # MPICH's Hydra binds nothing by default
  esac
fi
PYTHON="${PYTHON:-python3}"
DEADLINE_S="${DEADLINE_S:-420}"
START=$(date +%s)

# How many GPUs: the scale step and the two-GPU rows depend on it.
if [ -z "${NGPU:-}" ]; then
  NGPU=$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    vis=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    [ "$vis" -lt "$NGPU" ] && NGPU=$vis
  fi
fi
# The devices of the scale step: the first visible one, or the first two.
ONE_GPU="${CUDA_VISIBLE_DEVICES:-0,1}"; ONE_GPU="${ONE_GPU%%,*}"
TWO_GPUS=$(echo "${CUDA_VISIBLE_DEVICES:-0,1}" | cut -d, -f1-2)

# Per-rank visibility: the suites' wrapper sets CUDA_VISIBLE_DEVICES from the
# node-local rank of either launcher (modulo the GPU count: with one GPU
# every rank gets it).
LAUNCH=()
if [ "$VISIBLE" = 1 ]; then
  LAUNCH=("$HERE/../mpi_tests/harness/own_gpu.sh")
fi

FAILED=0
: > "$OUT/status.txt"
log_status() { echo "$*" | tee -a "$OUT/status.txt"; }
if [ "$NGPU" -lt 2 ]; then
  log_status "one GPU ($NGPU found): the $NP ranks share it; the two-GPU rows are left empty"
fi

# MPS for the steps whose ranks share a GPU: SHARED is the prefix of their
# commands (the daemon's variables; empty without MPS). Ranks inherit them
# from the launcher on this node.
SHARED=(env) MPS_STARTED=""
if [ "${MPS:-auto}" != 0 ]; then
  if mps_env=$("$HERE/../scripts/mps.sh" start "$OUT/mps" 2> "$OUT/mps.log"); then
    [ -f "$OUT/mps/started-by-mps.sh" ] && MPS_STARTED="$OUT/mps"
    mapfile -t mps_vars < <(echo "$mps_env" | sed -n "s/^export \([A-Z_]*\)='\(.*\)'$/\1=\2/p")
    SHARED=(env "${mps_vars[@]}" VMMIPC_BENCH_MPS=1)
    log_status "MPS: on for the steps whose ranks share a GPU ($(head -1 "$OUT/mps.log" | sed 's/^mps: //'))"
    trap '[ -z "$MPS_STARTED" ] || "$HERE/../scripts/mps.sh" stop "$MPS_STARTED" >> "$OUT/mps.log" 2>&1' EXIT
  else
    log_status "MPS: not used ($(tail -1 "$OUT/mps.log" | sed 's/^mps: //')); ranks sharing a GPU time-slice it"
  fi
else
  log_status "MPS: off (MPS=0)"
fi
MAIN=(env)
[ "$NGPU" -lt "$NP" ] && MAIN=("${SHARED[@]}")

# step NAME CAP_SECONDS LOGFILE CMD...: runs CMD with a time limit of CAP or
# what is left before the deadline (less $RESERVE), whichever is smaller.
RESERVE=25
step() {
  local name="$1" cap="$2" logf="$3"; shift 3
  local left=$(( DEADLINE_S - RESERVE - ($(date +%s) - START) ))
  local limit=$(( cap < left ? cap : left ))
  if [ "$limit" -lt 5 ]; then
    log_status "$name: skipped (deadline reached)"; FAILED=1; return 1
  fi
  echo "== $name (limit ${limit}s) ==" >&2
  local t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$logf" 2> >(tee "${logf%.log}.err" >&2)
  local rc=$?
  log_status "$name: exit $rc after $(( $(date +%s) - t0 ))s (log: $logf)"
  [ "$rc" = 0 ] || FAILED=1
  return "$rc"
}

{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; echo "per-rank visible: $VISIBLE"
  timeout 20 nvidia-smi -L; timeout 20 nvidia-smi topo -m; timeout 20 nvidia-smi nvlink -s
  timeout 20 nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
  "$MPIRUN" --version | head -1
} > "$OUT/nvidia-smi.log" 2>&1

if [ "$QUICK" = 1 ]; then
  BW_ARGS=(--max-size 64M --iters 5)
  SETUP_ARGS=(--max-size 256M --chunks 1,16 --reps 3)
  SCALE_ARGS=(--reps 3 --min-reps 2 --budget 1)
  SCALE_NPS="${SCALE_NPS:-8 2 4}"
  SCALE_POINTS="${SCALE_POINTS:-2Mx1,8Mx4}"
  TORCH_ARGS=(--max-size 256M --reps 3)
  SYNC_ARGS=(--iters 20 --reps 5 --max-size 64K)
  TBAR_ARGS=(--iters 20 --reps 5)
else
  # OSU-style iteration counts (10/100 up to 1 MiB, 2/20 above), up to 1 GiB.
  BW_ARGS=(--max-size 1G)
  # 2 MiB .. 4 GiB x 1/16/256 chunks; 10 reps from 1 GiB; at most ~1 s per
  # size x chunks x collective x method (256 chunks cost ~0.3 s a call).
  # Both modes (first mapping on fresh buffers, mapped again) next to the
  # floor and legacy IPC; --time-limit keeps the JSON when the step's limit nears.
  SETUP_ARGS=(--max-size 4G --chunks 1,16,256 --reps 20 --reps-large 10 --budget 1 --min-reps 3)
  # Scale: 32 MiB x 16 chunks per rank (32 ranks fit in memory and time),
  # and 2 MiB x 1 chunk with legacy IPC (the 8-ranks goal); a few reps.
  SCALE_ARGS=(--reps 10 --min-reps 2 --budget 2)
  SCALE_NPS="${SCALE_NPS:-8 2 4 16 32}"
  SCALE_POINTS="${SCALE_POINTS:-2Mx1,32Mx16}"
  TORCH_ARGS=(--max-size 4G --reps 20 --reps-large 10)
  # 30 batches of 100 iterations, 64 B .. 1 MiB; at most ~1 s per entry or
  # size (fewer batches where the GPU is shared and slow).
  SYNC_ARGS=(--iters 100 --reps 30 --budget 1)
  TBAR_ARGS=(--iters 100 --reps 30 --budget 1)
fi

# Window synchronisation (issue 13) first: it takes seconds. Inside the
# step's limit the program has its own (--time-limit: what is left is
# skipped and the JSON still written; --timeout: a batch that hangs ends it).
if [ -x "$SYNC" ]; then
  step "vmmipc_sync" 45 "$OUT/sync.log" \
    "${MAIN[@]}" "$MPIRUN" -np "$NP" $MPIRUN_FLAGS ${LAUNCH[@]+"${LAUNCH[@]}"} "$SYNC" "${SYNC_ARGS[@]}" \
    --time-limit 30 --timeout 15 --json "$OUT/sync.json" --csv "$OUT/sync.csv"
else
  log_status "vmmipc_sync: skipped ($SYNC not built)"
fi
if "$PYTHON" -c 'import torch, torch.distributed; assert torch.cuda.is_available()' 2>/dev/null; then
  step "torch_barrier" 50 "$OUT/torch_barrier.log" \
    "${MAIN[@]}" "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NP" \
    "$HERE/anchors/torch_barrier.py" "${TBAR_ARGS[@]}" --json "$OUT/torch_barrier.json"
else
  log_status "torch_barrier: skipped (torch with CUDA not importable by $PYTHON)"
fi

step "vmmipc_bw" 90 "$OUT/bw.log" \
  "${MAIN[@]}" "$MPIRUN" -np "$NP" $MPIRUN_FLAGS ${LAUNCH[@]+"${LAUNCH[@]}"} "$BW" "${BW_ARGS[@]}" --json "$OUT/bw.json" --csv "$OUT/bw.csv"
step "vmmipc_setup" 150 "$OUT/setup.log" \
  "${MAIN[@]}" "$MPIRUN" -np "$NP" $MPIRUN_FLAGS ${LAUNCH[@]+"${LAUNCH[@]}"} "$SETUP" "${SETUP_ARGS[@]}" --time-limit 130 \
  --json "$OUT/setup.json" --csv "$OUT/setup.csv"

# The symmetric heap (issue 22): its own table in the log (docs/heap.md).
step "vmmipc_setup_heap" 120 "$OUT/heap.log" \
  "${MAIN[@]}" "$MPIRUN" -np "$NP" $MPIRUN_FLAGS ${LAUNCH[@]+"${LAUNCH[@]}"} "$SETUP" --heap-only --reps 50

TORCH_JSON=()
if "$PYTHON" -c 'import torch, torch.distributed._symmetric_memory; assert torch.cuda.is_available()' 2>/dev/null; then
  # torch.distributed.run is torchrun; --standalone keeps the rendezvous on this host.
  if step "torch_symm_mem" 60 "$OUT/torch.log" \
      "${MAIN[@]}" "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NP" \
      "$HERE/anchors/torch_symm_mem.py" "${TORCH_ARGS[@]}" --json "$OUT/torch.json"; then
    TORCH_JSON=("$OUT/torch.json")
  elif [ -s "$OUT/torch.json" ]; then
    TORCH_JSON=("$OUT/torch.json")
  fi
else
  log_status "torch_symm_mem: skipped (torch with CUDA and torch.distributed._symmetric_memory not importable by $PYTHON)"
fi

# Scale (issue 11): allgather_map with N ranks all on one GPU, then spread
# over two, each launch bounded (its own limit, the step's budget, the
# deadline; vmmipc_setup --time-limit keeps its JSON). Every launch that
# cannot run leaves a JSON that says why, so the rows are never silently
# missing. Oversubscribed: 32 ranks may outnumber the cores (the JSON has
# "cpus"). --per-rank-visible does not apply here.
scale_skip() { # FILE GPUS NP REASON
  printf '{"benchmark": "vmmipc_setup", "tag": "scale", "gpus_wanted": %s, "ranks": %s, "skipped": "%s"}\n' \
    "$2" "$3" "$(echo "$4" | sed 's/["\\]/ /g')" > "$1"
}
SCALE_START=$(date +%s)
SCALE_BUDGET_S="${SCALE_BUDGET_S:-150}"
SCALE_JSON=()
for gpus in 1 2; do
  for np in $SCALE_NPS; do
    f="$OUT/setup_scale_${gpus}gpu_np${np}.json"
    SCALE_JSON+=("$f")
    if [ "$gpus" = 2 ] && [ "$NGPU" -lt 2 ]; then
      scale_skip "$f" 2 "$np" "this machine has $NGPU GPU(s); the two-GPU scale rows need two"
      log_status "setup_scale_2gpu_np$np: skipped (one GPU)"; continue
    fi
    left=$(( SCALE_BUDGET_S - ($(date +%s) - SCALE_START) ))
    dl=$(( DEADLINE_S - RESERVE - ($(date +%s) - START) ))
    cap=$(( np >= 32 ? 90 : np >= 16 ? 60 : 40 ))
    [ "$left" -lt "$cap" ] && cap=$left
    [ "$dl" -lt "$cap" ] && cap=$dl
    if [ "$cap" -lt 15 ]; then
      why="the scale step's budget (SCALE_BUDGET_S=$SCALE_BUDGET_S s) was spent"
      [ "$dl" -lt 15 ] && why="the run's deadline (DEADLINE_S=$DEADLINE_S s) was near"
      scale_skip "$f" "$gpus" "$np" "$why"
      log_status "setup_scale_${gpus}gpu_np$np: skipped ($why)"; continue
    fi
    env=("${SHARED[@]}" CUDA_VISIBLE_DEVICES="$ONE_GPU")
    [ "$gpus" = 2 ] && env=("${SHARED[@]}" CUDA_VISIBLE_DEVICES="$TWO_GPUS")
    [ "$gpus" = 2 ] && [ "$np" -le 2 ] && env=(env CUDA_VISIBLE_DEVICES="$TWO_GPUS") # one rank per GPU
    step "setup_scale_${gpus}gpu_np$np" "$cap" "$OUT/setup_scale_${gpus}gpu_np$np.log" \
      "${env[@]}" "$MPIRUN" -np "$np" $MPIRUN_FLAGS --oversubscribe "$SETUP" --points "$SCALE_POINTS" \
      --colls allgather "${SCALE_ARGS[@]}" --time-limit $(( cap - 10 )) --tag scale --json "$f"
    rc=$?
    if [ ! -s "$f" ]; then
      why="exit $rc, no JSON (see setup_scale_${gpus}gpu_np$np.log)"
      [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="killed at its time limit of $cap s"
      scale_skip "$f" "$gpus" "$np" "$why"
    fi
  done
done

# Design probes (issue 11): the floor beside two ways of importing that the
# library could adopt (one range and one access call for all peers; a thread
# per peer) and legacy IPC of a new buffer every repetition, at 2 and 8
# ranks on two GPUs and 8 on one. SETUP_PROBES=0 skips it. Not in the
# summary; docs/performance.md shows them from setup_probes_*.json.
if [ "${SETUP_PROBES:-1}" != 0 ]; then
  for gn in 2:2 2:8 1:8; do
    gpus=${gn%%:*} np=${gn##*:}
    if [ "$gpus" = 2 ] && [ "$NGPU" -lt 2 ]; then log_status "setup_probes_${gpus}gpu_np$np: skipped (one GPU)"; continue; fi
    env=("${SHARED[@]}" CUDA_VISIBLE_DEVICES="$ONE_GPU")
    [ "$gpus" = 2 ] && env=("${SHARED[@]}" CUDA_VISIBLE_DEVICES="$TWO_GPUS")
    [ "$gpus" = 2 ] && [ "$np" -le 2 ] && env=(env CUDA_VISIBLE_DEVICES="$TWO_GPUS") # one rank per GPU
    step "setup_probes_${gpus}gpu_np$np" 40 "$OUT/setup_probes_${gpus}gpu_np$np.log" \
      "${env[@]}" "$MPIRUN" -np "$np" $MPIRUN_FLAGS --oversubscribe "$SETUP" --points "${PROBE_POINTS:-2Mx1,32Mx16}" \
      --colls allgather --modes first --probes joint,threads,ipc_fresh "${SCALE_ARGS[@]}" --time-limit 30 \
      --tag probes --json "$OUT/setup_probes_${gpus}gpu_np$np.json"
  done
fi

JSONS=()
for f in "$OUT/bw.json" "$OUT/setup.json" ${TORCH_JSON[@]+"${TORCH_JSON[@]}"} "$OUT/sync.json" "$OUT/torch_barrier.json" \
    ${SCALE_JSON[@]+"${SCALE_JSON[@]}"}; do
  [ -s "$f" ] && JSONS+=("$f")
done
if [ "${#JSONS[@]}" -gt 0 ]; then
  "$PYTHON" "$HERE/report.py" summary "${JSONS[@]}" > "$OUT/summary.md" 2>> "$OUT/status.txt" || FAILED=1
  RESERVE=0
  step "plot" 30 "$OUT/plot.log" "$PYTHON" "$HERE/report.py" plot "${JSONS[@]}" --out "$OUT/plots"
  cat "$OUT/summary.md"
fi
log_status "total: $(( $(date +%s) - START ))s; $([ "$FAILED" = 0 ] && echo ok || echo 'some steps failed')"
exit "$FAILED"
