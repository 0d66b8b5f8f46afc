#!/usr/bin/env bash
# The test command: installs missing dependencies, builds with warnings as
# errors, and runs every suite under mpirun on the CPU stand-in driver (or on
# the real GPUs with VMMIPC_TEST_DRIVER=real).
#   BUILD_DIR        build folder (default: build)
#   VMMIPC_SANITIZE  e.g. address,undefined
#   VMMIPC_TEST_DRIVER standin (default) or real
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
. "$root/scripts/env.sh"
build=${BUILD_DIR:-$root/build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_WERROR=ON \
  -DVMMIPC_SANITIZE="${VMMIPC_SANITIZE:-}" -DVMMIPC_TEST_DRIVER="${VMMIPC_TEST_DRIVER:-standin}"
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure --timeout 300 "$@"
