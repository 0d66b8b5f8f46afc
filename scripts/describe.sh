# Sourced by scripts/test.sh and scripts/demo.sh: one line each on the driver
# and the MPI a run used, so that its output says what it proved.
#   vmmipc_describe_mpi            "Open MPI 4.1.4 (/usr/bin/mpiexec)"; needs vmmipc_mpi_find
#   vmmipc_describe_driver standin|real [STANDIN_PATH]
vmmipc_describe_mpi() {
  local v name
  v=$("$VMMIPC_MPIEXEC" --version 2>&1 || true)
  case "$VMMIPC_MPI_FLAVOR" in
    openmpi) name="Open MPI $(sed -n 's/.*(Open\(RTE\| MPI\)) \([0-9][0-9.]*\).*/\2/p' <<<"$v" | head -1)" ;;
    mpich) name="MPICH $(sed -n 's/^ *Version: *\([0-9][0-9.a-z]*\).*/\1/p' <<<"$v" | head -1)" ;;
    *) name="an MPI of unknown kind" ;;
  esac
  echo "$name ($(command -v "$VMMIPC_MPIEXEC" 2>/dev/null || echo "$VMMIPC_MPIEXEC"))"
}

vmmipc_describe_driver() {
  if [ "$1" = standin ]; then
    echo "the CPU stand-in (${2:-libvmmipc_standin.so}; no GPU is used: docs/standin.md)"
    return
  fi
  local gpus=""
  command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | sed 's/ (UUID.*//' | paste -sd ';' -)
  echo "the real CUDA driver (${VMMIPC_CUDA_DRIVER:-libcuda.so.1}); GPUs: ${gpus:-none listed by nvidia-smi -L}"
}
