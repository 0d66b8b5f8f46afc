#!/bin/sh
# vnode.sh's node per rank for each launcher's rank variable, equal and
# listed layouts, and its errors (a layout shorter than the ranks, no rank).
vnode=$(dirname "$0")/vnode.sh
fails=0
# expect WANT VAR=VALUE...: vnode.sh run with that environment prints WANT.
expect() {
  want=$1
  shift
  got=$(env -i PATH="$PATH" "$@" sh "$vnode" sh -c 'printf %s "$VMMIPC_NODE_ID"' 2>&1)
  if [ "$got" != "$want" ]; then
    echo "FAIL: $*: got '$got', want '$want'"
    fails=$((fails + 1))
  fi
}
# refuse TEXT VAR=VALUE...: vnode.sh exits 2, its message containing TEXT.
refuse() {
  text=$1
  shift
  got=$(env -i PATH="$PATH" "$@" sh "$vnode" true 2>&1)
  rc=$?
  case "$rc:$got" in
    2:*"$text"*) ;;
    *) echo "FAIL: $*: exit $rc, '$got' (wanted exit 2 saying '$text')"; fails=$((fails + 1)) ;;
  esac
}
expect vnode0 OMPI_COMM_WORLD_RANK=0
expect vnode3 OMPI_COMM_WORLD_RANK=3
expect vnode1 PMI_RANK=3 VMMIPC_TEST_RANKS_PER_NODE=2
expect vnode2 SLURM_PROCID=5 VMMIPC_TEST_RANKS_PER_NODE=2
expect vnode1 PMIX_RANK=1
# {2,1}, {1,2}, {3,1} and round robin (ranks 0,2,4 | 1,3)
expect vnode0 OMPI_COMM_WORLD_RANK=1 VMMIPC_TEST_LAYOUT=0,0,1
expect vnode1 OMPI_COMM_WORLD_RANK=2 VMMIPC_TEST_LAYOUT=0,0,1
expect vnode1 PMI_RANK=1 VMMIPC_TEST_LAYOUT=0,1,1
expect vnode0 SLURM_PROCID=2 VMMIPC_TEST_LAYOUT=0,0,0,1
expect vnode0 PMIX_RANK=4 VMMIPC_TEST_LAYOUT=0,1,0,1,0
expect vnode1 PMIX_RANK=3 VMMIPC_TEST_LAYOUT=0,1,0,1,0
expect vnode1 OMPI_COMM_WORLD_RANK=2 VMMIPC_TEST_LAYOUT=0,0,1 VMMIPC_TEST_RANKS_PER_NODE=4  # the layout wins
refuse "has 3 node indices, fewer than the ranks: rank 3 has none" OMPI_COMM_WORLD_RANK=3 VMMIPC_TEST_LAYOUT=0,0,1
refuse "is not a node index" OMPI_COMM_WORLD_RANK=1 VMMIPC_TEST_LAYOUT=0,x
refuse "no rank from the launcher" VMMIPC_TEST_LAYOUT=0,1
refuse "not a positive number" OMPI_COMM_WORLD_RANK=1 VMMIPC_TEST_RANKS_PER_NODE=0
[ "$fails" -eq 0 ] && echo "test_vnode: ok"
exit "$fails"
