# shellcheck shell=bash
# shellcheck disable=SC2034 # variables for the scripts that source this file
# Sourced by the scripts: finds the MPI to build and launch with. By default
# the one on PATH (mpicc, mpicxx, mpiexec); VMMIPC_MPI=openmpi or mpich picks
# that MPI's suffixed commands instead (mpicc.mpich, ... as Debian installs
# them side by side). Sets VMMIPC_MPICC, VMMIPC_MPICXX, VMMIPC_MPIEXEC (empty
# when missing) and VMMIPC_MPI_FLAVOR (openmpi, mpich or unknown).
vmmipc_first() {
  local c
  for c in "$@"; do
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}
vmmipc_mpi_find() {
  local s=""
  case "${VMMIPC_MPI:-}" in
    "") ;;
    openmpi|mpich) s=".$VMMIPC_MPI" ;;
    *) echo "VMMIPC_MPI=$VMMIPC_MPI: expected openmpi or mpich" >&2; return 2 ;;
  esac
  VMMIPC_MPICC=$(vmmipc_first "mpicc$s" || true)
  VMMIPC_MPICXX=$(vmmipc_first "mpicxx$s" "mpic++$s" "mpiCC$s" || true)
  if [ "${VMMIPC_MPI:-}" = mpich ]; then
    VMMIPC_MPIEXEC=$(vmmipc_first mpiexec.mpich mpiexec.hydra mpirun.mpich || true)
  else
    VMMIPC_MPIEXEC=$(vmmipc_first "mpiexec$s" "mpirun$s" || true)
  fi
  VMMIPC_MPI_FLAVOR=unknown
  if [ -n "$VMMIPC_MPIEXEC" ]; then
    case "$("$VMMIPC_MPIEXEC" --version 2>&1)" in
      *"Open MPI"*|*OpenRTE*) VMMIPC_MPI_FLAVOR=openmpi ;;
      *HYDRA*|*MPICH*) VMMIPC_MPI_FLAVOR=mpich ;;
    esac
  fi
}
# CMake arguments that pin the MPI chosen with VMMIPC_MPI (none otherwise:
# CMake then finds the MPI on PATH and a launcher of the same MPI).
vmmipc_mpi_cmake_args() {
  [ -n "${VMMIPC_MPI:-}" ] || return 0
  printf '%s\n' "-DMPI_C_COMPILER=$VMMIPC_MPICC" "-DMPI_CXX_COMPILER=$VMMIPC_MPICXX" \
    "-DMPIEXEC_EXECUTABLE=$VMMIPC_MPIEXEC"
}
# Refuses a build folder configured with another MPI than VMMIPC_MPI asks
# for (CMake keeps what it found in its cache).
vmmipc_mpi_check_build() {
  local cache="$1/CMakeCache.txt" was
  [ -n "${VMMIPC_MPI:-}" ] && [ -f "$cache" ] || return 0
  was=$(sed -n 's/^MPI_C_COMPILER:[A-Z]*=//p' "$cache")
  if [ -n "$was" ] && [ "$was" != "$VMMIPC_MPICC" ]; then
    echo "$1 was configured with $was, not $VMMIPC_MPICC (VMMIPC_MPI=$VMMIPC_MPI); set BUILD_DIR to another folder" >&2
    return 1
  fi
}
