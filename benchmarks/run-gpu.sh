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
# Writes under OUTDIR: bw.json/.csv/.log, setup.json/.csv/.log, torch.json/
# .log (when torch imports), nvidia-smi.log, summary.md (goals, from
# summarize.py), plots/*.png (when matplotlib imports) and status.txt.
# Sized to finish in under 6 minutes on 2 H200: each step has a time limit
# and the whole run a deadline ($DEADLINE_S, default 280 s, so that it also
# fits the 300 s that scripts/gpu-check.sh allows it); the last 25 s are
# kept for the plots.
#
# Environment: NP (ranks, 2), MPIRUN (default: the launcher BUILD_DIR was
# configured with, else mpirun), MPIRUN_FLAGS (default: for Open MPI shared
# memory only, for MPICH none), PYTHON (python3), DEADLINE_S. NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
set -uo pipefail

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }

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
DEADLINE_S="${DEADLINE_S:-280}"
START=$(date +%s)

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
  TORCH_ARGS=(--max-size 256M --reps 3)
else
  # OSU-style iteration counts (10/100 up to 1 MiB, 2/20 above), up to 1 GiB.
  BW_ARGS=(--max-size 1G)
  # 2 MiB .. 4 GiB x 1/16/256 chunks; 10 reps from 1 GiB; at most ~1 s per
  # size x chunks x collective x method (256 chunks cost ~0.3 s a call).
  SETUP_ARGS=(--max-size 4G --chunks 1,16,256 --reps 20 --reps-large 10 --budget 1 --min-reps 3)
  TORCH_ARGS=(--max-size 4G --reps 20 --reps-large 10)
fi

step "vmmipc_bw" 90 "$OUT/bw.log" \
  "$MPIRUN" -np "$NP" $MPIRUN_FLAGS ${LAUNCH[@]+"${LAUNCH[@]}"} "$BW" "${BW_ARGS[@]}" --json "$OUT/bw.json" --csv "$OUT/bw.csv"
step "vmmipc_setup" 130 "$OUT/setup.log" \
  "$MPIRUN" -np "$NP" $MPIRUN_FLAGS ${LAUNCH[@]+"${LAUNCH[@]}"} "$SETUP" "${SETUP_ARGS[@]}" --json "$OUT/setup.json" --csv "$OUT/setup.csv"

TORCH_JSON=()
if "$PYTHON" -c 'import torch, torch.distributed._symmetric_memory; assert torch.cuda.is_available()' 2>/dev/null; then
  # torch.distributed.run is torchrun; --standalone keeps the rendezvous on this host.
  if step "torch_symm_mem" 60 "$OUT/torch.log" \
      "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NP" \
      "$HERE/anchors/torch_symm_mem.py" "${TORCH_ARGS[@]}" --json "$OUT/torch.json"; then
    TORCH_JSON=("$OUT/torch.json")
  elif [ -s "$OUT/torch.json" ]; then
    TORCH_JSON=("$OUT/torch.json")
  fi
else
  log_status "torch_symm_mem: skipped (torch with CUDA and torch.distributed._symmetric_memory not importable by $PYTHON)"
fi

JSONS=()
for f in "$OUT/bw.json" "$OUT/setup.json" ${TORCH_JSON[@]+"${TORCH_JSON[@]}"}; do [ -s "$f" ] && JSONS+=("$f"); done
if [ "${#JSONS[@]}" -gt 0 ]; then
  "$PYTHON" "$HERE/summarize.py" "${JSONS[@]}" > "$OUT/summary.md" 2>> "$OUT/status.txt" || FAILED=1
  RESERVE=0
  step "plot" 30 "$OUT/plot.log" "$PYTHON" "$HERE/plot.py" "${JSONS[@]}" --out "$OUT/plots"
  cat "$OUT/summary.md"
fi
log_status "total: $(( $(date +%s) - START ))s; $([ "$FAILED" = 0 ] && echo ok || echo 'some steps failed')"
exit "$FAILED"
