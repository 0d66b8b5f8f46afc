#!/bin/sh
# Puts this rank on virtual node (rank / VMMIPC_TEST_RANKS_PER_NODE), so one
# machine acts as several nodes whose ranks must never exchange fds.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
VMMIPC_NODE_ID="vnode$((rank / ${VMMIPC_TEST_RANKS_PER_NODE:-1}))"
export VMMIPC_NODE_ID
exec "$@"
