#!/usr/bin/env bash
# Wave 3's GPU validation in two batches, each within one device call
# (docs/dev/gpu-validation.md records what ran):
#   scripts/gpu/wave3.sh suites OUTDIR  build (real driver, nvcc, Python), every ctest
#                                       entry on the real driver (gpu label and Python
#                                       included), a Release build with default options
#   scripts/gpu/wave3.sh bench OUTDIR   mapped again up to 256 chunks, the heap at 2 and
#                                       8 ranks, the device API on both paths, Python overhead
# Logs go under OUTDIR/<phase>, packed into OUTDIR/<phase>.tgz; OUTDIR/<phase>.txt
# is the short summary.
set -uo pipefail
phase=${1:?phase}
out=$(mkdir -p "${2:?outdir}/$phase" && cd "$2/$phase" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. scripts/env.sh
unset VMMIPC_CUDA_DRIVER
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-$root/build-gpu}
t0=$(date +%s)
sum="$2/$phase.txt"
log() { echo "[$phase $(($(date +%s) - t0)) s] $*" | tee -a "$sum" >&2; }
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
configure() {
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_TEST_DRIVER=real \
    -DVMMIPC_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE="$(command -v python3)" > "$out/configure.log" 2>&1
}
mpi=(mpirun --bind-to none --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none -np)
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1; mpirun --version | head -1; python3 --version
  python3 -c 'import mpi4py, torch; print("mpi4py", mpi4py.__version__, "torch", torch.__version__)'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt" >> "$sum"
case "$phase" in
  suites)
    configure && cmake --build "$build" -j "$(nproc)" > "$out/build.log" 2>&1
    log "build (real driver, nvcc, Python) exited $?"
    grep -iE "python|nvcc|cuda compiler" "$out/configure.log" | head -8 >> "$sum"
    (cd "$build" && ulimit -Sn "$(ulimit -Hn)" && timeout "${SUITES_S:-380}" ctest --output-on-failure --timeout 240 \
      -j "${JOBS:-6}" ${CTEST_ARGS:-}) > "$out/ctest-real.log" 2>&1
    log "ctest on the real driver exited $?"
    grep -E "tests passed|\*\*\*Failed|Failed  |Timeout|Not Run|Skipped" "$out/ctest-real.log" | head -40 >> "$sum"
    cmake -S "$root" -B "$root/build-release" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release > "$out/release.log" 2>&1 &&
      cmake --build "$root/build-release" -j "$(nproc)" --target vmmipc >> "$out/release.log" 2>&1
    log "Release build with default options (library) exited $?"
    ;;
  bench)
    [ -x "$build/benchmarks/vmmipc_setup" ] || {
      configure && cmake --build "$build" -j "$(nproc)" --target vmmipc_setup vmmipc_device_bench _vmmipc \
        > "$out/build.log" 2>&1
      log "build exited $?"
    }
    b="$build/benchmarks"
    timeout 110 "${mpi[@]}" 2 "$b/vmmipc_setup" --points 2Mx1,32Mx16,512Mx256,1Gx256 --modes first,again \
      --methods vmmipc,floor,legacy_ipc --reps 10 --time-limit 80 --json "$out/setup_again.json" > "$out/setup_again.log" 2>&1
    log "setup, mapped again (2 ranks, one GPU) exited $?"
    timeout 60 "${mpi[@]}" 2 "$b/vmmipc_setup" --heap-only --reps 50 --heap-json "$out/heap_np2.json" \
      > "$out/heap_np2.log" 2>&1
    log "heap, 2 ranks exited $?"
    timeout 90 "${mpi[@]}" 8 "$b/vmmipc_setup" --heap-only --reps 20 --heap-windows 300 \
      --heap-json "$out/heap_np8.json" > "$out/heap_np8.log" 2>&1
    log "heap, 8 ranks on one GPU exited $?"
    # The design probe: the heap's one round as MPI_Iallgather instead of point-to-point (src/heap/xfer.c).
    VMMIPC_HEAP_XFER=coll timeout 60 "${mpi[@]}" 8 "$b/vmmipc_setup" --heap-only --reps 20 --heap-windows 100 \
      > "$out/heap_np8_coll.log" 2>&1
    log "heap, 8 ranks, VMMIPC_HEAP_XFER=coll exited $?"
    for path in memops kernel; do
      VMMIPC_SYNC=$path timeout 40 "${mpi[@]}" 2 "$b/vmmipc_device_bench" "${ITERS:-1000}" > "$out/device_$path.log" 2>&1
      log "device_bench VMMIPC_SYNC=$path exited $?"
    done
    PYTHONPATH="$build/python" timeout 40 "${mpi[@]}" 2 python3 benchmarks/python/overhead.py --json "$out/py.json" \
      > "$out/python_overhead.log" 2>&1
    log "python overhead exited $?"
    ;;
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
tar czf "$2/$phase.tgz" -C "$2" "$phase"
log "packed $phase.tgz"
