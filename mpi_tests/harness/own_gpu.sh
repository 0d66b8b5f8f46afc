#!/bin/sh
# Lets each rank see only its own GPU (node-local rank modulo the GPU count),
# as per-process CUDA_VISIBLE_DEVICES does in many job launchers.
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-0}}
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
export CUDA_VISIBLE_DEVICES
exec "$@"
