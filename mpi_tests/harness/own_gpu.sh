#!/bin/sh
# Lets each rank see only its own GPU (node-local rank modulo the GPU count),
# as per-process CUDA_VISIBLE_DEVICES does in many job launchers. With one
# GPU every rank gets GPU 0, so the ranks share it (VMMIPC_TEST_OWN_GPU=1
# tells the suites that each rank was meant to see only its own GPU).
# The node-local rank: Open MPI, MPICH/Hydra (and Intel MPI), Slurm, PMIx.
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${SLURM_LOCALID:-${PMIX_LOCAL_RANK:-}}}}
if [ -z "$local_rank" ]; then
  echo "own_gpu.sh: no node-local rank from the launcher (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID," \
       "SLURM_LOCALID or PMIX_LOCAL_RANK)" >&2
  exit 2
fi
count=${VMMIPC_TEST_GPUS:-}
if [ -z "$count" ]; then
  if [ -n "${VMMIPC_CUDA_DRIVER:-}" ]; then
    count=${VMMIPC_STANDIN_DEVICES:-2}
  else
    count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  fi
fi
[ "${count:-0}" -gt 0 ] || count=1
CUDA_VISIBLE_DEVICES=$((local_rank % count))
VMMIPC_TEST_OWN_GPU=1
export CUDA_VISIBLE_DEVICES VMMIPC_TEST_OWN_GPU
exec "$@"
