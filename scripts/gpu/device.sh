#!/usr/bin/env bash
# The device API on a GPU machine, in one batch (issue 23): build what it
# needs against the real driver, run the gpu-label checks, the real-driver
# device and sync suites, and a short device-API benchmark on each path.
# Logs go to OUTDIR (default $OUT). QUICK=1: only the suites and the
# benchmark (not the gpu-label programs); ITERS: benchmark iterations.
set -uo pipefail
out=${1:-${OUT:?outdir}}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. scripts/env.sh
build=${BUILD_DIR:-$root/build-device}
t0=$(date +%s)
log() { echo "device[$(($(date +%s) - t0)) s] $*" | tee -a "$out/phases.log"; }
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$out/machine.txt" 2>&1
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_TEST_DRIVER=real \
  -DVMMIPC_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" --target vmmipc test_device test_sync test_device_gpu allreduce_oneshot \
    vmmipc_device_bench >> "$out/build.log" 2>&1
log "build exited $?"
cd "$build"
mpi=(mpirun --allow-run-as-root --oversubscribe -np)
if [ -z "${QUICK:-}" ]; then
VMMIPC_GPU_BARRIERS=${BARRIERS:-10000} timeout 150 "${mpi[@]}" 2 mpi_tests/test_device_gpu > "$out/gpu_np2.log" 2>&1
log "test_device_gpu np2 (${BARRIERS:-10000} barriers) exited $?"
VMMIPC_GPU_BARRIERS=1000 timeout 90 "${mpi[@]}" 3 mpi_tests/test_device_gpu > "$out/gpu_np3.log" 2>&1
log "test_device_gpu np3 (1000 barriers) exited $?"
timeout 90 "${mpi[@]}" 2 examples/allreduce_oneshot 3 > "$out/allreduce.log" 2>&1
log "allreduce_oneshot np2 exited $?"
fi
timeout 150 ctest --output-on-failure --timeout 60 -R "${SUITES:-^test_device|^test_sync.np2}" > "$out/ctest.log" 2>&1
log "ctest test_device, test_sync.np2 exited $?"
grep -E "tests passed|Failed|Passed" "$out/ctest.log" >> "$out/phases.log"
for path in kernel memops; do
  VMMIPC_SYNC=$path timeout 60 "${mpi[@]}" 2 benchmarks/vmmipc_device_bench ${ITERS:-2000} > "$out/bench_$path.log" 2>&1
  log "device_bench VMMIPC_SYNC=$path exited $?"
done
cat "$out"/bench_*.log >> "$out/phases.log"
