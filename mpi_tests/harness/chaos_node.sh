#!/bin/sh
# Puts this rank on the node VMMIPC_TEST_LAYOUT names for it: a comma list
# with one node index per rank ("0,0,1": ranks 0 and 1 share a node, rank 2
# is alone; "0,1,0,1,0": round robin), as VMMIPC_NODE_ID=vnode<index>, the
# rule of harness/vnode.sh. Unset: the ranks stay on their real nodes.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-${PMIX_RANK:-}}}}
if [ -n "${VMMIPC_TEST_LAYOUT:-}" ]; then
  if [ -z "$rank" ]; then
    echo "chaos_node.sh: no rank from the launcher (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID or PMIX_RANK)" >&2
    exit 2
  fi
  field=$(printf '%s\n' "$VMMIPC_TEST_LAYOUT" | cut -d, -f$((rank + 1)))
  case "$field" in
    ''|*[!0-9]*)
      echo "chaos_node.sh: VMMIPC_TEST_LAYOUT=$VMMIPC_TEST_LAYOUT gives rank $rank no node index" >&2
      exit 2 ;;
  esac
  VMMIPC_NODE_ID="vnode$field"
  export VMMIPC_NODE_ID
fi
exec "$@"
