#!/usr/bin/env bash
# test_pdl_gpu before and after c119118, on a GPU machine, in one device call.
# Before: the host-sync wait and barrier kernels let the next PDL launch in
# at their top; after: only once their wait for peers is over. The test
# (mpi_tests/gpu/test_pdl_gpu.cu, which queues a host wait, then a host
# barrier, before the user's kernel) is built twice,
# against the library of this tree (BUILD_DIR, default build-real, as
# wave4_lanes.sh builds it) and against the same tree with c119118^'s
# src/sync/kern/sync.cu and its committed PTX (so the old kernels are used
# whether nvcc rebuilds the PTX or not), and each runs at 2 ranks with
# VMMIPC_SYNC=kernel under a private MPS daemon and without (the old one
# twice: its wait rounds, then its barrier rounds alone, TEST_PDL_ROUNDS,
# since a wait that times out fails the comm for the rounds after); the current
# build also with auto and memops (on memops no library kernel sits before
# the user's; under MPS auto takes the barrier kernel, so its barrier rounds
# are on the kernel path). Each run is judged against what is expected: the
# old kernels FAILED with a block started early (the test's !early check),
# the current ones ok; the summary says EXPECTED or
# UNEXPECTED per run, and the exit status is 1 if any was unexpected.
#   scripts/gpu/pdl_hazard.sh OUTDIR   -> OUTDIR/pdl.txt (summary), OUTDIR/pdl.tgz (logs)
set -uo pipefail
out=$(mkdir -p "${1:?outdir}" && cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
# shellcheck source=scripts/env.sh
. scripts/env.sh
unset VMMIPC_CUDA_DRIVER
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-$root/build-real} old=${TMPDIR:-/tmp}/vmmipc-pdl-old logs=$out/pdl sum=$out/pdl.txt
mkdir -p "$logs"
start=$(date +%s)
log() { echo "[pdl $(($(date +%s) - start)) s] $*" | tee -a "$sum" >&2; }
surprises=0
# run NAME EXPECT CAP CMD...: bounded; EXPECT is ok or FAILED (with a block started early). The log
# keeps the output; the summary the exit status, the verdict line and whether it was expected.
run() {
  local name=$1 expect=$2 cap=$3 rc verdict got=other
  shift 3
  timeout --signal=TERM --kill-after=10 "$cap" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  verdict=$(grep -m1 '^test_pdl_gpu:' "$logs/$name.log")
  case "$verdict" in
    "test_pdl_gpu: ok"*) [ "$rc" = 0 ] && got=ok ;;
    "test_pdl_gpu: FAILED"*) grep -q ': !early: ' "$logs/$name.log" && got=FAILED ;;
  esac
  if [ "$got" = "$expect" ]; then got="EXPECTED ($expect)"; else got="UNEXPECTED (wanted $expect)"; surprises=$((surprises + 1)); fi
  log "$name: exit $rc: $got: ${verdict:-no verdict}; $(grep -E '^rank [0-9]+: ' "$logs/$name.log" | head -2 | tr '\n' ' ')"
}
cfg=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_TEST_DRIVER=real -DVMMIPC_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90)
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD) $(git status --porcelain | grep -q . && echo '(with local changes)')"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} >> "$sum" 2>&1

[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" "${cfg[@]}" -DPython3_EXECUTABLE="$(command -v python3)" \
  > "$logs/configure.log" 2>&1
cmake --build "$build" -j "$(nproc)" --target test_pdl_gpu > "$logs/build.log" 2>&1
log "build (current kernels): exit $?"
have_old=0
if git cat-file -e 'c119118^:src/sync/kern/sync.cu' 2> /dev/null; then
  rm -rf "$old" && mkdir -p "$old"
  tar -C "$root" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$old" -xf -
  for f in sync.cu sync.ptx sync90.ptx; do git show "c119118^:src/sync/kern/$f" > "$old/src/sync/kern/$f"; done
  cmake -S "$old" -B "$old/build" "${cfg[@]}" -DVMMIPC_BUILD_PYTHON=OFF > "$logs/configure-old.log" 2>&1 &&
    cmake --build "$old/build" -j "$(nproc)" --target test_pdl_gpu > "$logs/build-old.log" 2>&1
  rc=$?
  log "build (c119118^ kernels): exit $rc"
  [ "$rc" = 0 ] && have_old=1
else
  log "no c119118^ in this checkout: only the current kernels run"
fi

# shellcheck disable=SC2054 # "self,vader" is one argument
mpi=(mpirun --bind-to none --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none -np 2)
mps_dir=${TMPDIR:-/tmp}/vmmipc-pdl-mps
for mode in mps nomps; do
  x=()
  if [ "$mode" = mps ]; then
    env_lines=$(scripts/mps.sh start "$mps_dir" 2> "$logs/mps.log") || { log "MPS not available"; continue; }
    eval "$env_lines"
    for v in CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; do [ -n "${!v:-}" ] && x+=(-x "$v"); done
  elif scripts/mps.sh status > /dev/null 2>&1; then
    log "an MPS daemon that this script did not start still runs: the runs below are not without MPS"
  fi
  if [ "$have_old" = 1 ]; then
    for rounds in wait barrier; do
      run "old-kernel-$rounds-$mode" FAILED 90 "${mpi[@]}" "${x[@]}" -x VMMIPC_SYNC=kernel -x TEST_PDL_ROUNDS=$rounds \
        "$old/build/mpi_tests/test_pdl_gpu"
    done
  fi
  for path in kernel auto memops; do
    run "new-$path-$mode" ok 60 "${mpi[@]}" "${x[@]}" -x VMMIPC_SYNC=$path "$build/mpi_tests/test_pdl_gpu"
  done
  if [ "$mode" = mps ]; then
    scripts/mps.sh stop "$mps_dir" >> "$logs/mps.log" 2>&1
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
done
tar czf "$out/pdl.tgz" -C "$out" pdl && rm -rf "$logs"
log "done: $surprises unexpected"
[ "$surprises" = 0 ]
