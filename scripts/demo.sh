#!/usr/bin/env bash
# The main job: installs missing dependencies, builds, and runs the demo and a
# short benchmark under mpirun with 2 ranks: on the GPUs when nvidia-smi sees
# at least one, otherwise on the CPU stand-in driver. It says which.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
. "$root/scripts/env.sh"
build=${BUILD_DIR:-$root/build}
np=${NP:-2}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
flags=(--oversubscribe --mca btl_vader_single_copy_mechanism none)
if [ "${gpus:-0}" -gt 0 ]; then
  echo "demo: running on $gpus GPU(s) with the real CUDA driver"
  unset VMMIPC_CUDA_DRIVER
  max=${MAX_SIZE:-1G}
else
  echo "demo: no GPU found; running on the CPU stand-in driver (functional check, not a performance figure)"
  export VMMIPC_CUDA_DRIVER="$build/mpi_tests/standin/libvmmipc_standin.so"
  max=${MAX_SIZE:-8M}
fi
mpirun -np "$np" "${flags[@]}" "$build/examples/allgather_demo"
if [ -x "$build/benchmarks/vmmipc_bw" ]; then
  mpirun -np "$np" "${flags[@]}" "$build/benchmarks/vmmipc_bw" --max-size "$max" --modes vmmipc.ce --iters 5
fi
