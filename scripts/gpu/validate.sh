#!/usr/bin/env bash
# One phase of the GPU validation, for a machine where each command has a
# time limit (docs/gpu-validation.md records what ran). Writes logs under
# OUTDIR and packs them into OUTDIR/<phase>.tgz.
#   scripts/gpu/validate.sh suites OUTDIR    real-driver suites (gpu-check.sh), demo, wrap checks
#   scripts/gpu/validate.sh bench OUTDIR     benchmarks/run-gpu.sh (builds what it needs)
#   scripts/gpu/validate.sh newcomer OUTDIR  the README's test command as a newcomer runs it
#   RERUN=regex scripts/gpu/validate.sh rerun OUTDIR  those suites again on the real driver
set -uo pipefail
phase=${1:?phase}
out=$(mkdir -p "${2:?outdir}/$phase" && cd "${2}/$phase" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. scripts/env.sh
build=${BUILD_DIR:-$root/build-gpu}
t0=$(date +%s)
log() { echo "validate[$phase] $(($(date +%s) - t0)) s: $*" | tee -a "$out/phases.log" >&2; }
case "$phase" in
  suites)
    log "gpu-check.sh (build + suites on the real driver)"
    GPU_CHECK_SKIP_BENCH=1 GPU_CHECK_TEST_TIMEOUT=${TEST_TIMEOUT:-330} scripts/gpu-check.sh "$out" > "$out/gpu-check.log" 2>&1
    log "gpu-check exited $?"
    for b in expandable cudamalloc; do
      VMMIPC_LIB="$build/src/libvmmipc.so" timeout 120 python3 scripts/gpu/wrap_torch.py "$b" >> "$out/wrap_torch.log" 2>&1
      log "wrap_torch $b exited $?"
    done
    BUILD_DIR="$root/build-demo" timeout 240 scripts/demo.sh > "$out/demo.log" 2>&1
    log "demo.sh exited $?"
    ;;
  bench)
    if [ ! -x "$build/benchmarks/vmmipc_sync" ]; then
      gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
      cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_TEST_DRIVER=real \
        -DVMMIPC_BUILD_TESTS=OFF > "$out/build.log" 2>&1 &&
        cmake --build "$build" -j "$(nproc)" --target vmmipc_bw vmmipc_setup vmmipc_sync >> "$out/build.log" 2>&1
      log "benchmarks built: $?"
    fi
    DEADLINE_S=${DEADLINE_S:-400} timeout 470 benchmarks/run-gpu.sh "$out/bench" "$build" > "$out/run-gpu.log" 2>&1
    log "run-gpu.sh exited $?"
    cp "$out/bench/machine.txt" "$out/" 2>/dev/null
    for b in expandable cudamalloc; do
      VMMIPC_LIB="$build/src/libvmmipc.so" timeout 120 python3 scripts/gpu/wrap_torch.py "$b" >> "$out/wrap_torch.log" 2>&1
      log "wrap_torch $b exited $?"
    done
    ;;
  newcomer)
    BUILD_DIR="$root/build-newcomer" timeout 420 scripts/test.sh -j8 > "$out/test.log" 2>&1
    log "scripts/test.sh exited $?"
    grep -E "tests passed|Failed|Not Run" "$out/test.log" | tail -20 >> "$out/phases.log"
    if [ -n "${RERUN:-}" ]; then  # suites to run again on the real driver
      BUILD_DIR="$root/build-rerun" VMMIPC_TEST_DRIVER=real CMAKE_ARGS="-DVMMIPC_BUILD_BENCHMARKS=OFF -DVMMIPC_BUILD_EXAMPLES=OFF" \
        timeout 240 scripts/test.sh -R "$RERUN" > "$out/rerun-real.log" 2>&1
      log "rerun on the real driver ($RERUN) exited $?"
      grep -E "tests passed|Failed" "$out/rerun-real.log" >> "$out/phases.log"
    fi
    ;;
  rerun)  # RERUN: a ctest regex of suites to run again on the real driver
    BUILD_DIR="$root/build-rerun" VMMIPC_TEST_DRIVER=real CMAKE_ARGS="-DVMMIPC_BUILD_BENCHMARKS=OFF" \
      timeout 500 scripts/test.sh -j4 -R "${RERUN:?set RERUN}" > "$out/rerun-real.log" 2>&1
    log "rerun on the real driver ($RERUN) exited $?"
    grep -E "tests passed|Failed|Test +#" "$out/rerun-real.log" >> "$out/phases.log"
    ;;
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
tar czf "$2/$phase.tgz" -C "$2" "$phase"
log "packed $2/$phase.tgz"
