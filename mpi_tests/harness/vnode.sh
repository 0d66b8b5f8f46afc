#!/bin/sh
# Puts this rank on a virtual node, so one machine acts as several nodes
# whose ranks must never exchange fds:
#   VMMIPC_TEST_LAYOUT=0,0,1     a node index per rank ({2,1}; 0,1,0,1,0 is
#                                round robin): rank r on vnode<field r>;
#   VMMIPC_TEST_RANKS_PER_NODE=k rank r on vnode<r / k> (equal nodes);
# the layout wins when both are set. The rank: Open MPI, MPICH/Hydra (and
# Intel MPI), Slurm, PMIx.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-${PMIX_RANK:-}}}}
if [ -z "$rank" ]; then
  echo "vnode.sh: no rank from the launcher (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID or PMIX_RANK)" >&2
  exit 2
fi
case $rank in
  '' | *[!0-9]*) echo "vnode.sh: the launcher's rank '$rank' is not a number" >&2; exit 2 ;;
esac
if [ -n "${VMMIPC_TEST_LAYOUT:-}" ]; then
  fields=$(printf '%s\n' "$VMMIPC_TEST_LAYOUT" | awk -F, '{print NF}')
  if [ "$rank" -ge "$fields" ]; then
    echo "vnode.sh: VMMIPC_TEST_LAYOUT=$VMMIPC_TEST_LAYOUT has $fields node indices, fewer than the ranks: rank $rank has none (give one per rank)" >&2
    exit 2
  fi
  node=$(printf '%s\n' "$VMMIPC_TEST_LAYOUT" | awk -F, -v i="$((rank + 1))" '{print $i}')
  case $node in
    '' | *[!0-9]*) echo "vnode.sh: VMMIPC_TEST_LAYOUT=$VMMIPC_TEST_LAYOUT: field $((rank + 1)) ('$node') is not a node index" >&2; exit 2 ;;
  esac
  VMMIPC_NODE_ID="vnode$node"
else
  per=${VMMIPC_TEST_RANKS_PER_NODE:-1}
  case $per in
    '' | *[!0-9]* | 0) echo "vnode.sh: VMMIPC_TEST_RANKS_PER_NODE=$per is not a positive number" >&2; exit 2 ;;
  esac
  VMMIPC_NODE_ID="vnode$((rank / per))"
fi
export VMMIPC_NODE_ID
exec "$@"
