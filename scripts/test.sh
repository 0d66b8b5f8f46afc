#!/usr/bin/env bash
# The test command: checks (and installs when it can) what the build needs,
# builds with warnings as errors, and runs every suite under the MPI launcher
# on the CPU stand-in driver (or on the real GPUs with VMMIPC_TEST_DRIVER=real).
# Arguments go to ctest (e.g. -j2, -R test_comm).
#   BUILD_DIR           build folder (default: build)
#   VMMIPC_SANITIZE     e.g. address,undefined
#   VMMIPC_TEST_DRIVER  standin (default) or real
#   VMMIPC_MPI          openmpi or mpich: that MPI's suffixed commands (mpicc.mpich...)
#                       instead of the MPI on PATH
#   VMMIPC_NO_INSTALL=1 never install packages
#   CMAKE_ARGS          more arguments for the configure step
#   BUILD_SKIP          a Perl regex (grep -P) of build targets to leave unbuilt (CI's
#                       Release stage: the suites it does not run); default: build all
#   VMMIPC_STANDIN_ASYNC  when the stand-in's stream work completes (docs/standin.md);
#                       default random:SEED with a new seed each run, printed so that
#                       a failure can be replayed with the same setting
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh" test
. "$root/scripts/env.sh"
. "$root/scripts/mpi.sh"
. "$root/scripts/describe.sh"
vmmipc_mpi_find
build=${BUILD_DIR:-$root/build}
vmmipc_mpi_check_build "$build"
jobs=$(nproc 2>/dev/null || echo 2)
mapfile -t mpi_args < <(vmmipc_mpi_cmake_args)
# shellcheck disable=SC2086 # CMAKE_ARGS is a list of words
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_WERROR=ON -DVMMIPC_BUILD_TESTS=ON \
  -DVMMIPC_SANITIZE="${VMMIPC_SANITIZE:-}" -DVMMIPC_TEST_DRIVER="${VMMIPC_TEST_DRIVER:-standin}" \
  ${mpi_args[@]+"${mpi_args[@]}"} ${CMAKE_ARGS:-}
if [ -n "${BUILD_SKIP:-}" ]; then
  # Every target the Makefiles list, but the generator's own and the skipped ones.
  mapfile -t targets < <(cmake --build "$build" --target help | sed -n 's/^[.][.][.] \([A-Za-z0-9_.+-]*\).*/\1/p' |
    grep -vxP "all|clean|depend|edit_cache|rebuild_cache|test|install(/.*)?|list_install_components|$BUILD_SKIP")
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$build" -j "$jobs"
fi
# Some suites hold about a thousand fds at once, more than the usual soft
# limit of non-root users (1024); the hard limit is theirs to take.
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true
cd "$build"
if [ "${VMMIPC_TEST_DRIVER:-standin}" = standin ]; then
  driver=$(vmmipc_describe_driver standin "$build/mpi_tests/standin/libvmmipc_standin.so")
  # Stream work completes late, as on a GPU: a missing synchronisation shows.
  export VMMIPC_STANDIN_ASYNC=${VMMIPC_STANDIN_ASYNC:-random:$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
  driver="$driver, stream work VMMIPC_STANDIN_ASYNC=$VMMIPC_STANDIN_ASYNC"
else
  driver=$(vmmipc_describe_driver real)
fi
mpi=$(vmmipc_describe_mpi)
echo "test: driver: $driver"
echo "test: MPI: $mpi"
rc=0
ctest --output-on-failure --timeout 300 "$@" || rc=$?
echo "test: ran on $driver, with $mpi; ctest exit status $rc"
exit "$rc"
