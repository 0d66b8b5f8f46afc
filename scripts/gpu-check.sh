#!/usr/bin/env bash
# Builds everything on a GPU machine and runs the suites against the real
# driver, then the benchmarks; every log goes under DIR (default gpu-out).
# Installs nothing. Google Test: the system's (package or /usr/src/googletest),
# else the sources in .carry/googletest when they were carried along.
#   GPU_CHECK_SKIP_BENCH=1  skip the benchmarks
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-gpu-out}" && cd "${1:-gpu-out}" && pwd)
. "$root/scripts/env.sh"
unset VMMIPC_CUDA_DRIVER
build=${BUILD_DIR:-$root/build-gpu}
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null) $(git -C "$root" status --porcelain | grep -q . && echo '(with local changes)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  nvidia-smi nvlink -s 2>/dev/null | head -20
  mpirun --version | head -1
  cmake --version | head -1
} > "$out/machine.txt" 2>&1
gtest=()
if ! VMMIPC_NO_INSTALL=1 "$root/scripts/deps.sh" test > "$out/deps.log" 2>&1; then
  if [ -f "$root/.carry/googletest/CMakeLists.txt" ] &&
     VMMIPC_GTEST_SOURCE_DIR="$root/.carry/googletest" VMMIPC_NO_INSTALL=1 "$root/scripts/deps.sh" test >> "$out/deps.log" 2>&1; then
    gtest=(-DVMMIPC_GTEST_SOURCE_DIR="$root/.carry/googletest")
  else
    echo "gpu-check: missing build dependencies; see $out/deps.log" >&2
    cat "$out/deps.log" >&2
    exit 1
  fi
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if ! cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_TEST_DRIVER=real \
    "${gtest[@]}" > "$out/build.log" 2>&1 || ! cmake --build "$build" -j "$(nproc)" >> "$out/build.log" 2>&1; then
  echo "gpu-check: build failed; see $out/build.log" >&2
  tail -30 "$out/build.log" >&2
  exit 1
fi
echo "gpu-check: built; running the suites on the real driver" >&2
(cd "$build" && timeout "${GPU_CHECK_TEST_TIMEOUT:-300}" ctest --output-on-failure --timeout 200 -j 4) \
  > "$out/ctest-real.log" 2>&1
test_rc=$?
grep -E "tests passed|Test +#" "$out/ctest-real.log" >&2
if [ -z "${GPU_CHECK_SKIP_BENCH:-}" ] && [ -x "$root/benchmarks/run-gpu.sh" ]; then
  echo "gpu-check: running the benchmarks" >&2
  timeout "${GPU_CHECK_BENCH_TIMEOUT:-300}" "$root/benchmarks/run-gpu.sh" "$out/bench" "$build" \
    > "$out/bench.log" 2>&1
  echo "gpu-check: benchmarks exited $?" >&2
fi
exit $test_rc
