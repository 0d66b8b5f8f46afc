#!/usr/bin/env bash
# Wave 4's functional validation on a GPU machine, in one device call
# (docs/dev/gpu-validation.md records what ran):
#   scripts/gpu/wave4_suites.sh OUTDIR
# 1. build with the real driver (nvcc kernels, Python module);
# 2. every ctest entry but the node layouts and the chaos campaign, without MPS;
# 3. under a private MPS daemon (scripts/mps.sh): the gpu-labelled entries, the
#    sync and device suites, and the Python suites at 2 and 4 ranks REPEAT times each
#    (ctest --repeat until-fail), then the same Python repeats without MPS;
# 4. with BENCH=1 (before the Python repeats without MPS): scripts/gpu/wave4.sh bench
#    (issue 30's rows under MPS) into OUTDIR;
# 5. the node-layout matrix once, and a short chaos campaign on the real driver.
# Each step is bounded; the whole stays within DEADLINE_S (560). OUTDIR gets
# suites.txt (the summary) and suites.tgz (every log).
set -uo pipefail
out=$(mkdir -p "${1:?outdir}" && cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
# shellcheck source=scripts/env.sh
. scripts/env.sh
unset VMMIPC_CUDA_DRIVER
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONDONTWRITEBYTECODE=1
build=${BUILD_DIR:-$root/build-real}
logs=$out/suites
mkdir -p "$logs"
sum=$out/suites.txt
deadline=${DEADLINE_S:-560} repeat=${REPEAT:-3}
start=$(date +%s)
log() { echo "[suites $(($(date +%s) - start)) s] $*" | tee -a "$sum" >&2; }
left() { echo $((deadline - ($(date +%s) - start))); }
# step NAME CAP LOGFILE CMD...: bounded by CAP and by what is left of the deadline.
step() {
  local name=$1 cap=$2 logf=$3 rc lim
  shift 3
  lim=$(left)
  [ "$cap" -lt "$lim" ] && lim=$cap
  if [ "$lim" -lt 10 ]; then log "$name: skipped (deadline reached)"; return 124; fi
  timeout --signal=TERM --kill-after=10 "$lim" "$@" > "$logf" 2>&1
  rc=$?
  log "$name: exit $rc (limit $lim s; $(basename "$logf"))"
  grep -E "tests passed|\*\*\*Failed|\*\*\*Timeout|Exception|violations=|^chaos: " "$logf" | tail -25 >> "$sum"
  return "$rc"
}
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader
  nvcc --version | tail -1; mpirun --version | head -1; python3 --version
} >> "$sum" 2>&1
ulimit -Sn "$(ulimit -Hn)"
step configure 60 "$logs/configure.log" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVMMIPC_TEST_DRIVER=real -DVMMIPC_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DPython3_EXECUTABLE="$(command -v python3)"
step build 150 "$logs/build.log" cmake --build "$build" -j "$(nproc)"
# ctest in the build tree, as a command (timeout cannot run a shell function)
ct=(ctest --test-dir "$build" --output-on-failure --timeout 120)
step ctest-nomps ${NOMPS_S:-200} "$logs/ctest-nomps.log" "${ct[@]}" -j 8 -LE 'layouts|chaos'
mps_dir=${TMPDIR:-/tmp}/vmmipc-suites-mps
if env_lines=$(scripts/mps.sh start "$mps_dir" 2> "$logs/mps.log"); then
  eval "$env_lines"
  log "MPS on"
  # Python first: a kernel fault under MPS would end every client of the server.
  step python-repeat-mps 50 "$logs/python-mps.log" "${ct[@]}" -j 2 -R '^python\.np[24]$' --repeat "until-fail:$repeat"
  step ctest-mps 60 "$logs/ctest-mps.log" "${ct[@]}" -j 4 -R 'gpu|test_device|test_sync'
  scripts/mps.sh stop "$mps_dir" >> "$logs/mps.log" 2>&1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  log "MPS stopped"
else
  log "MPS not available: $(tail -1 "$logs/mps.log")"
fi
if [ "${BENCH:-0}" = 1 ]; then
  step bench 120 "$logs/bench.log" env DEADLINE_S=110 scripts/gpu/wave4.sh bench "$out"
fi
step python-repeat-nomps 50 "$logs/python-nomps.log" "${ct[@]}" -j 2 -R '^python\.np[24]$' --repeat "until-fail:$repeat"
step layouts 50 "$logs/layouts.log" "${ct[@]}" -j 8 -L layouts
step chaos 45 "$logs/chaos.log" env BUILD_DIR="$build" mpi_tests/harness/chaos.sh --runs 8 --steps 60 \
  --np "2 3 4" --kill-share 0.1 --budget 35
tar czf "$out/suites.tgz" -C "$out" suites
log "done"
