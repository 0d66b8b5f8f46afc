#!/usr/bin/env bash
# The demo: checks (and installs when it can) what it needs, builds only what
# it runs, and runs it with 2 ranks under the MPI launcher: the
# allgather_map example, then the bandwidth benchmark. On the GPUs when
# nvidia-smi sees any (the table of vmmipc against raw driver VMM, NCCL and
# the NVLink line rate); otherwise on the CPU stand-in driver (a functional
# check: what ran and which data checks passed, no figures).
# When ranks share a GPU and MPS is available, a private MPS daemon
# (scripts/mps.sh, in BUILD_DIR/mps) serves the run, so that the ranks'
# kernels run at once; it is stopped at the end. MPS=0: never.
# One line per phase; each phase's output is in BUILD_DIR/demo-logs/.
#   BUILD_DIR (default build), NP (ranks, default 2), MAX_SIZE (largest
#   message: 1G on GPUs, 8M on the stand-in), VMMIPC_MPI, VMMIPC_NO_INSTALL=1:
#   as for scripts/test.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
np=${NP:-2}
say() { echo "demo: $*"; }
# Stops with the tail of a phase's log.
fail() {
  echo "demo: $1 failed; the last lines of $2:" >&2
  tail -n 30 "$2" >&2
  exit 1
}

"$root/scripts/deps.sh" demo
. "$root/scripts/env.sh"
. "$root/scripts/mpi.sh"
. "$root/scripts/describe.sh"
vmmipc_mpi_find
vmmipc_mpi_check_build "$build"
mkdir -p "$build/demo-logs"
logs=$build/demo-logs

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
targets=(allgather_demo vmmipc_bw)
standin=OFF
if [ "${gpus:-0}" -eq 0 ]; then
  targets+=(vmmipc_standin)
  standin=ON
fi

mapfile -t mpi_args < <(vmmipc_mpi_cmake_args)
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_BUILD_TESTS=OFF \
    -DVMMIPC_BUILD_STANDIN=$standin -DVMMIPC_BUILD_EXAMPLES=ON -DVMMIPC_BUILD_BENCHMARKS=ON \
    ${mpi_args[@]+"${mpi_args[@]}"} > "$logs/configure.log" 2>&1; then
  fail "configure (cmake -S $root -B $build)" "$logs/configure.log"
fi
say "configured $build"
say "MPI: $(vmmipc_describe_mpi)"
if ! cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}" > "$logs/build.log" 2>&1; then
  fail "build" "$logs/build.log"
fi
say "built ${targets[*]}"

run="$build/vmmipc-mpirun"
if [ "${gpus:-0}" -gt 0 ]; then
  unset VMMIPC_CUDA_DRIVER
  if [ "$gpus" -eq 1 ]; then
    where="$np ranks on 1 GPU, which they share, with the real CUDA driver"
  elif [ "$gpus" -lt "$np" ]; then
    where="$np ranks on $gpus GPUs (ranks share GPUs: device = rank % $gpus), with the real CUDA driver"
  else
    where="$np ranks on $gpus GPUs, one each, with the real CUDA driver"
  fi
  max=${MAX_SIZE:-1G}
  if [ "$np" -gt "$gpus" ] && [ "${MPS:-auto}" != 0 ]; then
    had_mark=0
    [ -f "$build/mps/started-by-mps.sh" ] && had_mark=1
    if mps_env=$("$root/scripts/mps.sh" start "$build/mps" 2> "$logs/mps.log"); then
      eval "$mps_env" # the ranks inherit the daemon's variables from the launcher
      if [ "$had_mark" = 0 ] && [ -f "$build/mps/started-by-mps.sh" ]; then
        trap '"$root/scripts/mps.sh" stop "$build/mps" >> "$logs/mps.log" 2>&1 || true' EXIT
      fi
      say "MPS: $(head -1 "$logs/mps.log" | sed 's/^mps: //')"
      where="$where, under MPS"
    else
      say "MPS: not used ($(tail -1 "$logs/mps.log" | sed 's/^mps: //')); the ranks' kernels time-slice the GPU"
    fi
  fi
else
  export VMMIPC_CUDA_DRIVER="$build/mpi_tests/standin/libvmmipc_standin.so"
  where="$np ranks on the CPU stand-in driver (no GPU found): a functional check, no performance figures"
  max=${MAX_SIZE:-8M}
fi

if [ "${gpus:-0}" -gt 0 ]; then say "driver: $(vmmipc_describe_driver real)"
else say "driver: $(vmmipc_describe_driver standin "$VMMIPC_CUDA_DRIVER")"; fi
if ! "$run" "$np" "$build/examples/allgather_demo" > "$logs/example.log" 2>&1; then
  fail "the allgather_map example" "$logs/example.log"
fi
say "allgather_map example, $where:"
sed 's/^/  /' "$logs/example.log"

if [ "${gpus:-0}" -gt 0 ]; then
  say "bandwidth, 64 KiB to $max: vmmipc next to raw driver VMM, NCCL and the NVLink line rate"
  if ! "$run" "$np" "$build/benchmarks/vmmipc_bw" --modes vmmipc.ce,raw_vmm.ce,nccl --min-size 64K \
      --max-size "$max" --no-matrix --tables compare --quiet > "$logs/bandwidth.log" 2>&1; then
    fail "the bandwidth benchmark" "$logs/bandwidth.log"
  fi
  cat "$logs/bandwidth.log"
  say "done"
else
  if ! "$run" "$np" "$build/benchmarks/vmmipc_bw" --modes vmmipc.ce --max-size "$max" --iters 5 \
      --tables none --quiet > "$logs/bandwidth.log" 2>&1; then
    fail "the bandwidth benchmark" "$logs/bandwidth.log"
  fi
  say "bandwidth benchmark on the stand-in (copies through the mapped peer buffers, 1 B to $max):"
  sed 's/^/  /' "$logs/bandwidth.log"
  say "done: every check passed on the CPU stand-in; run it on a GPU machine for bandwidth figures"
fi
