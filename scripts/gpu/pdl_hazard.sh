#!/usr/bin/env bash
# test_pdl_gpu before and after c119118, on a GPU machine, in one device call.
# Before: the host-sync wait and barrier kernels let the next PDL launch in
# at their top; after: only once their wait for peers is over. The test
# (mpi_tests/gpu/test_pdl_gpu.cu) is built twice, against the library of
# this tree (BUILD_DIR, default build-real, as wave4_lanes.sh builds it) and
# against the same tree with c119118^'s src/sync/kern/sync.cu (nvcc makes
# the PTX from it), and each runs at 2 ranks with VMMIPC_SYNC=kernel under
# a private MPS daemon and without; the current build also with auto and
# memops.
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
# run NAME CAP CMD...: bounded; the log keeps the output, the summary the exit and the verdict line.
run() {
  local name=$1 cap=$2 rc
  shift 2
  timeout --signal=TERM --kill-after=10 "$cap" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  log "$name: exit $rc: $(grep -E '^test_pdl_gpu:|started before|wrong payload|took' "$logs/$name.log" | head -3 | tr '\n' ' ')"
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
rm -rf "$old" && mkdir -p "$old"
tar -C "$root" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$old" -xf -
git show c119118^:src/sync/kern/sync.cu > "$old/src/sync/kern/sync.cu" || { log "no c119118^ in this checkout"; exit 1; }
cmake -S "$old" -B "$old/build" "${cfg[@]}" -DVMMIPC_BUILD_PYTHON=OFF > "$logs/configure-old.log" 2>&1 &&
  cmake --build "$old/build" -j "$(nproc)" --target test_pdl_gpu > "$logs/build-old.log" 2>&1
log "build (c119118^ kernels): exit $?"

# shellcheck disable=SC2054 # "self,vader" is one argument
mpi=(mpirun --bind-to none --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none -np 2)
mps_dir=${TMPDIR:-/tmp}/vmmipc-pdl-mps
for mode in mps nomps; do
  if [ "$mode" = mps ]; then
    env_lines=$(scripts/mps.sh start "$mps_dir" 2> "$logs/mps.log") || { log "MPS not available"; continue; }
    eval "$env_lines"
    x=(-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY)
  else
    x=()
  fi
  run "old-kernel-$mode" 90 "${mpi[@]}" "${x[@]}" -x VMMIPC_SYNC=kernel "$old/build/mpi_tests/test_pdl_gpu"
  for path in kernel auto memops; do
    run "new-$path-$mode" 60 "${mpi[@]}" "${x[@]}" -x VMMIPC_SYNC=$path "$build/mpi_tests/test_pdl_gpu"
  done
  if [ "$mode" = mps ]; then
    scripts/mps.sh stop "$mps_dir" >> "$logs/mps.log" 2>&1
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
done
tar czf "$out/pdl.tgz" -C "$out" pdl && rm -rf "$logs"
log "done"
