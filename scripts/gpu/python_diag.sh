#!/usr/bin/env bash
# Localises the device fault of issue 31 (python.np2 on the real driver:
# CUresult 719 at a Window.close() after eight tests of test_windows.py
# passed), in one device call:
#   scripts/gpu/python_diag.sh OUTDIR
# For the tree it runs in and, where git can check it out, for main at
# 720a504 (the failing commit; BASE=<rev> picks another, BASE= none):
#   1. test_windows.py at 2 ranks, in order, with a context-wide synchronise
#      after every test (scripts/gpu/fault_probe.py): the first test after
#      which a rank reports FAULT left the fault;
#   2. the same with CUDA_LAUNCH_BLOCKING=1 (kernel launches synchronous:
#      a fault that moves is asynchronous stream work, not a kernel);
#   3. each test of the file alone, in fresh processes: which test faults on
#      its own, and which only after another;
# then, for this tree only, the Python suites at 2 and 4 ranks REPEAT times
# each (default 2) and the Python examples.
# OUTDIR/diag.txt is the summary (the fault-probe lines that say FAULT, and
# each step's exit status); OUTDIR/*.log the full output.
set -uo pipefail
out=$(mkdir -p "${1:?outdir}" && cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
# shellcheck source=scripts/env.sh
. scripts/env.sh
unset VMMIPC_CUDA_DRIVER
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONDONTWRITEBYTECODE=1
base=${BASE-720a504}
repeat=${REPEAT:-2}
sum="$out/diag.txt"
t0=$(date +%s)
log() { echo "[diag $(($(date +%s) - t0)) s] $*" | tee -a "$sum" >&2; }
# shellcheck disable=SC2054 # "self,vader" is one argument
mpi=(mpirun --bind-to none --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none -np)
py=$(command -v python3)
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$py" -c 'import mpi4py, pytest; print("mpi4py", mpi4py.__version__, "pytest", pytest.__version__)'
} >> "$sum" 2>&1

build() { # build SRC DIR: the library and the Python module on the real driver
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_TEST_DRIVER=real -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DPython3_EXECUTABLE="$py" > "$out/$3-configure.log" 2>&1 &&
    cmake --build "$2" -j "$(nproc)" --target vmmipc_python > "$out/$3-build.log" 2>&1
}

probe_runs() { # probe_runs NAME SRC BUILD: steps 1 to 3 on one tree
  local name=$1 b=$3 tests=$2/python/tests
  local env=(env PYTHONPATH="$b/python:$root/scripts/gpu" VMMIPC_TEST_REAL_DRIVER=1)
  local pt=("$py" -m pytest -s -q --color=no -p no:cacheprovider -p fault_probe)
  timeout 300 "${env[@]}" "${mpi[@]}" 2 "${pt[@]}" "$tests/test_windows.py" > "$out/$name-inorder.log" 2>&1
  log "$name: test_windows.py in order, probe after each test: exit $?"
  grep -m4 "fault-probe.*FAULT" "$out/$name-inorder.log" >> "$sum"
  timeout 300 "${env[@]}" CUDA_LAUNCH_BLOCKING=1 "${mpi[@]}" 2 -x CUDA_LAUNCH_BLOCKING "${pt[@]}" \
    "$tests/test_windows.py" > "$out/$name-blocking.log" 2>&1
  log "$name: the same with CUDA_LAUNCH_BLOCKING=1: exit $?"
  grep -m4 "fault-probe.*FAULT" "$out/$name-blocking.log" >> "$sum"
  # The test names from the file itself (a singleton MPI process, which
  # pytest's collection would start, cannot start on some machines).
  local t
  # shellcheck disable=SC2013 # one name per line, no spaces
  for t in $(sed -n 's/^def \(test_[A-Za-z0-9_]*\)(.*/\1/p' "$tests/test_windows.py"); do
    timeout 120 "${env[@]}" "${mpi[@]}" 2 "${pt[@]}" "$tests/test_windows.py::$t" > "$out/$name-alone-$t.log" 2>&1
    local rc=$?
    log "$name: $t alone: exit $rc$(grep -q 'fault-probe.*FAULT' "$out/$name-alone-$t.log" && echo ', FAULT')"
  done
}

if build "$root" "$root/build-diag" tree; then
  log "build of this tree: ok"
  probe_runs tree "$root" "$root/build-diag"
else
  log "build of this tree FAILED (see tree-build.log)"
fi

if [ -n "$base" ] && git cat-file -e "$base^{commit}" 2>/dev/null; then
  rm -rf "$root/../diag-base" && git worktree add -f --detach "$root/../diag-base" "$base" > "$out/base-worktree.log" 2>&1
  if build "$root/../diag-base" "$root/build-diag-base" base; then
    log "build of $base: ok"
    probe_runs base "$root/../diag-base" "$root/build-diag-base"
  else
    log "build of $base FAILED (see base-build.log)"
  fi
  git worktree remove --force "$root/../diag-base" > /dev/null 2>&1
else
  log "no baseline: BASE='$base' is not a commit here (no git history in this copy?)"
fi

# This tree's suites, several times, and the examples (ctest registers them
# for the real driver; they need only the module built above).
for i in $(seq 1 "$repeat"); do
  (cd "$root/build-diag" && timeout 400 ctest --output-on-failure --timeout 300 -R '^python(_heap)?\.np[24]$') \
    > "$out/suites-$i.log" 2>&1
  log "python suites at 2 and 4 ranks, run $i: exit $?"
  grep -E "tests passed|Failed|Timeout" "$out/suites-$i.log" | head -6 >> "$sum"
done
(cd "$root/build-diag" && timeout 300 ctest --output-on-failure --timeout 180 -R '^example\.python_') \
  > "$out/examples.log" 2>&1
log "python examples: exit $?"
grep -E "tests passed|Failed|Timeout|skipped" "$out/examples.log" | head -10 >> "$sum"
