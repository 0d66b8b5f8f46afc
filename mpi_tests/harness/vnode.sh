#!/bin/sh
# Puts this rank on virtual node (rank / VMMIPC_TEST_RANKS_PER_NODE), so one
# machine acts as several nodes whose ranks must never exchange fds.
# The rank: Open MPI, MPICH/Hydra (and Intel MPI), Slurm, PMIx.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-${PMIX_RANK:-}}}}
if [ -z "$rank" ]; then
  echo "vnode.sh: no rank from the launcher (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID or PMIX_RANK)" >&2
  exit 2
fi
VMMIPC_NODE_ID="vnode$((rank / ${VMMIPC_TEST_RANKS_PER_NODE:-1}))"
export VMMIPC_NODE_ID
exec "$@"
