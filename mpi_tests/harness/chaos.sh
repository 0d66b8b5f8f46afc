#!/usr/bin/env bash
# Runs test_chaos (docs/dev/chaos.md).
#
# One run, judged by its last line (ctest uses this):
#   chaos.sh --one --np N --layout L --seed S --steps K [--kill] [-- test_chaos options]
# exits 0 when the run printed "chaos: ... violations=0" (after a kill: and
# the survivors were checked), 77 when the launcher itself ended the
# survivors of a kill, 1 otherwise.
#
# A campaign: many seeds on random node layouts and rank counts, added up:
#   chaos.sh --runs N --steps K [--seed0 S] [--np "2 3 4 5"] [--kill-share P]
#            [--budget SECONDS] [--logs DIR] [-- test_chaos options]
# Each run also draws the host sync path (VMMIPC_SYNC auto, memops or
# kernel) unless VMMIPC_SYNC is set.
# prints one summary (runs, steps, violations; counts of each layout, rank
# count, operation, fault kind and verdict) and the replay command of every
# failing run; exits 1 if any run failed.
#
# --env FILE: the settings CMake wrote (default: $BUILD_DIR or build/, then
# mpi_tests/chaos.env). Source scripts/env.sh first to run Open MPI as root.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
env_file=${BUILD_DIR:-$root/build}/mpi_tests/chaos.env
one=0 np=0 layout="" seed=1 seed0=1 steps=200 kill=0 runs=10 nps="2 3 4 5" kill_share=0.15 budget=0
logs=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --env) env_file=$2; shift ;;
    --one) one=1 ;;
    --np) np=$2; nps=$2; shift ;;
    --layout) layout=$2; shift ;;
    --seed) seed=$2; shift ;;
    --seed0) seed0=$2; shift ;;
    --steps) steps=$2; shift ;;
    --kill) kill=1 ;;
    --runs) runs=$2; shift ;;
    --kill-share) kill_share=$2; shift ;;
    --budget) budget=$2; shift ;;
    --logs) logs=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "chaos.sh: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
  shift
done
if [ ! -f "$env_file" ]; then
  echo "chaos.sh: no $env_file: build test_chaos first (cmake --build build --target test_chaos)" >&2
  exit 2
fi
# shellcheck source=/dev/null
. "$env_file"
read -r -a mpiexec_args <<<"$CHAOS_MPIEXEC_ARGS"
read -r -a recovery <<<"$CHAOS_RECOVERY"
read -r -a driver_env <<<"${CHAOS_DRIVER_ENV//;/ }"

# run_one NP LAYOUT SEED STEPS KILL LOG: one run; its output goes to LOG.
run_one() {
  local n=$1 lay=$2 sd=$3 k=$4 kl=$5 log=$6 sync=${7:-${VMMIPC_SYNC:-auto}} args=()
  [ "$kl" = 1 ] && args=("${recovery[@]}")
  local opts=(--seed "$sd" --steps "$k")
  [ "$kl" = 1 ] && opts+=(--kill)
  # Open MPI's waits yield the CPU: the test's own barriers do not starve
  # the ranks that time each call (2 cores, up to 5 ranks).
  env "${driver_env[@]}" VMMIPC_TEST_LAYOUT="$lay" VMMIPC_STANDIN_WAIT_MS="${VMMIPC_STANDIN_WAIT_MS:-30000}" \
    OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}" VMMIPC_SYNC="$sync" \
    "$CHAOS_MPIEXEC" "${mpiexec_args[@]}" "${args[@]}" "$CHAOS_NP_FLAG" "$n" "$CHAOS_NODE_SH" "$CHAOS_EXE" \
    "${opts[@]}" ${extra[@]+"${extra[@]}"} >"$log" 2>&1
}

# judge LOG KILL: 0 (passed), 1 (failed) or 77 (the launcher ended the survivors).
judge() {
  local log=$1 kl=$2 last
  last=$(grep '^chaos: seed=' "$log" | tail -n 1)
  if [ -n "$last" ]; then
    case "$last" in *" violations=0 "*) ;; *) return 1 ;; esac
    if [ "$kl" = 1 ] && ! grep -q 'survivors checked' "$log"; then return 1; fi
    return 0
  fi
  if [ "$kl" = 1 ] && grep -Eq 'TERMINATED WITH THE EXIT STRING: Killed \(signal 9\)|process manager error' "$log"; then
    return 77
  fi
  return 1
}

if [ "$one" = 1 ]; then
  [ "$np" -gt 0 ] && [ -n "$layout" ] || { echo "chaos.sh --one needs --np and --layout" >&2; exit 2; }
  log=$(mktemp)
  run_one "$np" "$layout" "$seed" "$steps" "$kill" "$log"
  cat "$log"
  judge "$log" "$kill"
  rc=$?
  if [ "$rc" = 77 ]; then echo "chaos.sh: the launcher ended the survivors before they reported: skipped"; fi
  if [ "$rc" = 1 ] && ! grep -q '^chaos: seed=' "$log"; then
    echo "chaos.sh: the run printed no last line: a rank died or hung (see above)"
  fi
  rm -f "$log"
  exit "$rc"
fi

# A layout for n ranks, drawn from the seed: one node, one rank per node,
# equal blocks, uneven blocks (a node of one among larger ones), round
# robin, or any assignment.
draw_layout() {
  awk -v n="$1" -v s="$2" 'BEGIN {
    srand(s); kind = int(rand() * 6); out = ""
    nodes = 1 + int(rand() * n); if (nodes < 2 && n > 1 && kind >= 2) nodes = 2
    for (r = 0; r < n; r++) {
      if (kind == 0) v = 0
      else if (kind == 1) v = r
      else if (kind == 2) v = int(r * nodes / n)
      else if (kind == 3) v = (r < n - 1) ? 0 : 1
      else if (kind == 4) v = r % nodes
      else v = int(rand() * nodes)
      out = out (r ? "," : "") v
    }
    print out
  }'
}

logs=${logs:-$(mktemp -d "${TMPDIR:-/tmp}/chaos.XXXXXX")}
mkdir -p "$logs"
lines="$logs/last-lines"
: >"$lines"
failed=0 crashes=0 hangs=0 lost=0
t0=$(date +%s)
read -r -a np_list <<<"$nps"
done_runs=0
for ((i = 0; i < runs; i++)); do
  if [ "$budget" -gt 0 ] && [ $(($(date +%s) - t0)) -ge "$budget" ]; then break; fi
  sd=$((seed0 + i))
  n=${np_list[$((sd % ${#np_list[@]}))]}
  lay=$(draw_layout "$n" "$sd")
  kl=$(awk -v s="$sd" -v p="$kill_share" 'BEGIN { srand(s * 7 + 1); print (rand() < p) ? 1 : 0 }')
  sync=${VMMIPC_SYNC:-$(awk -v s="$sd" 'BEGIN { srand(s * 13 + 5); split("auto memops kernel", m, " "); print m[1 + int(rand() * 3)] }')}
  log="$logs/run-$sd.log"
  run_one "$n" "$lay" "$sd" "$steps" "$kl" "$log" "$sync"
  judge "$log" "$kl"
  rc=$?
  done_runs=$((done_runs + 1))
  last=$(grep '^chaos: seed=' "$log" | tail -n 1)
  if [ -n "$last" ]; then echo "$last kill=$kl sync=$sync" >>"$lines"; fi
  if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then
    [ "$rc" = 77 ] && echo "chaos.sh: seed $sd: the launcher ended the survivors (not judged)"
    rm -f "$log"
  else
    failed=$((failed + 1))
    grep -q '^chaos: CRASH' "$log" && crashes=$((crashes + 1))
    grep -q '^chaos: HANG' "$log" && hangs=$((hangs + 1))
    [ -z "$last" ] && lost=$((lost + 1))
    echo "chaos.sh: seed $sd (np $n, layout $lay, kill $kl, VMMIPC_SYNC=$sync) FAILED; log: $log"
    grep -E '^chaos: (VIOLATION|HANG|CRASH|replay)' "$log" | head -n 20
  fi
done
echo "chaos campaign: $done_runs runs in $(($(date +%s) - t0)) s; logs of failing runs in $logs"
awk -v runs="$done_runs" -v failed="$failed" -v crashes="$crashes" -v hangs="$hangs" -v lost="$lost" '
  function add(map, list,   n, i, kv, a) {
    if (list == "-") return
    n = split(list, a, ",")
    for (i = 1; i <= n; i++) { split(a[i], kv, ":"); map[kv[1]] += kv[2] }
  }
  function show(title, map,   k, s) {
    s = ""; for (k in map) s = s (s == "" ? "" : " ") k ":" map[k]
    print "chaos campaign: " title ": " (s == "" ? "-" : s)
  }
  {
    for (f = 2; f <= NF; f++) {
      split($f, kv, "=")
      if (kv[1] == "steps") steps += kv[2]
      else if (kv[1] == "violations") viol += kv[2]
      else if (kv[1] == "layout") layouts[kv[2]]++
      else if (kv[1] == "np") nps[kv[2]]++
      else if (kv[1] == "kill") kills += kv[2]
      else if (kv[1] == "sync") syncs[kv[2]]++
      else if (kv[1] == "ops") add(ops, kv[2])
      else if (kv[1] == "faults") add(fired, kv[2])
      else if (kv[1] == "planned") add(planned, kv[2])
      else if (kv[1] == "verdicts") add(verdicts, kv[2])
      else if (kv[1] == "kinds") add(kinds, kv[2])
      else if (kv[1] == "timeouts") timeouts += kv[2]
      else if (kv[1] == "drained") drained += kv[2]
    }
  }
  END {
    nl = 0; for (k in layouts) nl++
    nf = 0; for (k in fired) if (k != "none") nf++
    printf "chaos campaign: runs=%d failed=%d steps=%d violations=%d layouts=%d fault_kinds_fired=%d runs_with_a_kill=%d\n",
           runs, failed, steps, viol, nl, nf, kills
    printf "chaos campaign: runs that died or hung: crashed=%d hung=%d without_a_last_line=%d (their steps are not counted)\n",
           crashes, hangs, lost
    show("layouts", layouts); show("np", nps); show("sync paths", syncs); show("ops", ops)
    show("faults fired", fired); show("faults planned", planned); show("verdicts", verdicts)
    show("violations by kind", kinds)
    printf "chaos campaign: late messages drained: %d; failures with no fault that were a TIMEOUT everywhere (not violations): %d\n", drained, timeouts
  }' "$lines"
[ "$failed" -eq 0 ]
