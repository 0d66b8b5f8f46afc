#!/usr/bin/env bash
# Issue 30 on a GPU machine, one device call per invocation: device sync at
# the hardware floor on a shared GPU, against NVSHMEM in the same run.
#   scripts/gpu/wave4.sh PARTS OUTDIR
# PARTS, comma-separated (each builds what it needs first):
#   bench     all of the below, in one batch of at most DEADLINE_S (400 s)
#   floors    vmmipc_floor_bench (raw floors, payload-checked) at NPS ranks, under MPS
#   vmmipc    vmmipc_device_bench at NPS ranks under MPS: every row on the memops path, the host
#             rows again on the kernel path (and at 2 ranks under auto); the host rows with the
#             other memops barrier shapes (VMMIPC_SYNC_BARRIER=gather, dissem) and the device rows at
#             system scope (VMMIPC_DEV_SCOPE=sys): variants, reported next to the defaults; the
#             heap's 2 MiB rows
#   anchors   nvshmem_bench (benchmarks/nvshmem/build.sh) at NPS ranks under MPS, one PE per rank,
#             CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / ranks; a refusal is recorded with its words
#   examples  allreduce_oneshot, plain and --graph (1000 replays per size, each checked), 2 and 8 ranks
#   workload  the heap's mixed workload (1000 windows at 2 ranks, 300 at 8) under MPS
#   nomps     after MPS is stopped: the device rows and the floors at 2 ranks, few iterations; the host
#             rows on the kernel path and under auto
# Every launch is time-bounded (timeout) within the deadline, and a failed
# step does not stop the next; status.txt records each exit status.
# Output: the tree (JSON, logs, status.txt, machine.txt, summary.txt) in
# TREE_DIR (default ${TMPDIR:-/tmp}/vmmipc-wave4/<parts>), and in OUTDIR exactly
# two files: wave4-<parts>.tgz (the whole tree) and wave4-<parts>-summary.txt
# (status, then report.py summary: issue 30's goals as ratios to the anchors of
# the same run, and the tables). The GPU machine returns only a few files.
# Environment: NPS ("2 8 4"), DEADLINE_S (400), BUILD_DIR (build-wave4),
# TREE_DIR, ITERS (in-kernel round trips per batch, 2000), REPS (10).
# Runs as the machine's user (root there: Open MPI's run-as-root variables are set).
set -uo pipefail
parts=${1:?usage: wave4.sh PARTS OUTDIR}
outdir=${2:?usage: wave4.sh PARTS OUTDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
case ",$parts," in *,bench,*) parts=floors,vmmipc,anchors,examples,workload,nomps ;; esac
for p in ${parts//,/ }; do
  case "$p" in floors|vmmipc|anchors|examples|workload|nomps) ;; *) echo "wave4: unknown part $p" >&2; exit 2 ;; esac
done
tag=${1//,/+}
tree=${TREE_DIR:-${TMPDIR:-/tmp}/vmmipc-wave4/$tag}
rm -rf "$tree" && mkdir -p "$tree" "$outdir" || exit 2
outdir=$(cd "$outdir" && pwd)
want() { case ",$parts," in *,"$1",*) return 0 ;; *) return 1 ;; esac; }

# shellcheck source=scripts/env.sh
. scripts/env.sh
unset VMMIPC_CUDA_DRIVER
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
build=${BUILD_DIR:-$root/build-wave4}
b=$build/benchmarks
nps=${NPS:-2 8 4}
iters=${ITERS:-2000} reps=${REPS:-10}
deadline=${DEADLINE_S:-400}
start=$(date +%s)
status=$tree/status.txt
log() { echo "[wave4 $(($(date +%s) - start)) s] $*" | tee -a "$status" >&2; }
left() { echo $((deadline - ($(date +%s) - start))); }

# step NAME CAP LOGFILE CMD...: CMD with a limit of CAP or what is left, never past the deadline.
step() {
  local name=$1 cap=$2 logf=$3 rc t0
  shift 3
  local lim
  lim=$(left)
  [ "$cap" -lt "$lim" ] && lim=$cap
  if [ "$lim" -lt 5 ]; then log "$name: skipped (deadline of $deadline s reached)"; return 124; fi
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$lim" "$@" > "$logf" 2>&1
  rc=$?
  log "$name: exit $rc after $(($(date +%s) - t0)) s (limit $lim s; $(basename "$logf"))"
  return "$rc"
}

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
  echo "parts: $parts; ranks: $nps"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader
  nvcc --version 2>/dev/null | tail -1
  mpirun --version 2>&1 | head -1
  command -v nvidia-cuda-mps-control || echo "no nvidia-cuda-mps-control"
} > "$tree/machine.txt" 2>&1
cat "$tree/machine.txt" >> "$status"

# shellcheck disable=SC2054 # "self,vader" is one argument
case "$(mpirun --version 2>&1)" in
  *"Open MPI"*|*OpenRTE*) ompi=1 mpi=(mpirun --bind-to none --oversubscribe --mca btl self,vader
                                      --mca btl_vader_single_copy_mechanism none) ;;
  *) ompi=0 mpi=(mpirun) ;;
esac
# launch N [VAR=value ...]: sets L to the command that starts N ranks with
# those variables and MPS's (Open MPI: -x each; MPICH's Hydra passes the
# environment); the program and its arguments follow "${L[@]}".
launch() {
  local n=$1 a v x=() set=()
  shift
  for a in "$@"; do set+=("$a"); done
  if [ "$ompi" = 1 ]; then
    for v in CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY VMMIPC_BENCH_MPS; do
      [ -n "${!v+set}" ] && x+=(-x "$v")
    done
    for a in "$@"; do x+=(-x "${a%%=*}"); done
  fi
  L=(env "${set[@]}" "${mpi[@]}" "${x[@]}" -np "$n")
}

# ---- build: the library, the benchmarks, the example; NVSHMEM alongside ----
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
targets=()
want floors && targets+=(vmmipc_floor_bench)
want nomps && targets+=(vmmipc_floor_bench vmmipc_device_bench)
want vmmipc && targets+=(vmmipc_device_bench vmmipc_setup)
want workload && targets+=(vmmipc_setup)
want examples && targets+=(allreduce_oneshot)
if want anchors; then
  (NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc) timeout 300 benchmarks/nvshmem/build.sh "$build/nvshmem" \
    > "$tree/nvshmem_build.log" 2>&1; echo $? > "$tree/nvshmem_build.rc") &
  nvs_pid=$!
fi
if [ "${#targets[@]}" -gt 0 ]; then
  step configure 120 "$tree/configure.log" cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVMMIPC_TEST_DRIVER=real -DVMMIPC_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DVMMIPC_BUILD_TESTS=OFF \
    -DVMMIPC_BUILD_STANDIN=OFF -DVMMIPC_BUILD_PYTHON=OFF &&
    step build 240 "$tree/build.log" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
fi
if want anchors; then
  wait "$nvs_pid"
  log "nvshmem build: exit $(cat "$tree/nvshmem_build.rc" 2>/dev/null || echo '?'): $(tail -1 "$tree/nvshmem_build.log")"
fi

# ---- MPS ----
mps_dir=${TMPDIR:-/tmp}/vmmipc-wave4-mps
mps_on=0 mps_ours=0
start_mps() {
  local env_lines
  if env_lines=$(scripts/mps.sh start "$mps_dir" 2>> "$tree/mps.log"); then
    eval "$env_lines"
    mps_on=1
    [ -f "$mps_dir/started-by-mps.sh" ] && mps_ours=1
    log "MPS: on ($(grep -m1 -E 'started|already runs' "$tree/mps.log" | sed 's/^mps: //'))"
  else
    log "MPS: not available ($(tail -1 "$tree/mps.log" | sed 's/^mps: //')); the rows below run without it"
  fi
}
stop_mps() {
  [ "$mps_on" = 1 ] || return 0
  cp -r "$mps_dir/log" "$tree/mps-log" 2>/dev/null
  if [ "$mps_ours" = 1 ]; then scripts/mps.sh stop "$mps_dir" >> "$tree/mps.log" 2>&1; log "MPS: stopped (exit $?)"; fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  mps_on=0
}
trap 'stop_mps' EXIT
if want floors || want vmmipc || want anchors || want examples || want workload; then start_mps; fi
export VMMIPC_BENCH_MPS=$mps_on
sfx=""
[ "$mps_on" = 1 ] || sfx=_nomps

# NVSHMEM's run-time settings (docs/dev and DEVICE.md: what worked on this machine).
nvs_env=()
if [ -f "$build/nvshmem/nvshmem.env" ]; then
  nvs_lib=$(sed -n 's/^NVSHMEM_LIBDIR=//p' "$build/nvshmem/nvshmem.env")
  nvs_env=(LD_LIBRARY_PATH="$nvs_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVSHMEM_REMOTE_TRANSPORT=none
           NVSHMEM_DISABLE_NVLS=1 NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
           NVSHMEM_SYMMETRIC_SIZE="${NVSHMEM_SYMMETRIC_SIZE:-512M}")
fi
ensure_json() { # BASE BENCHMARK RANKS RC: BASE.json, or one that says why the launch left none
  [ -s "$1.json" ] || skip_json "$1.json" "$2" "$3" "$1.log" "$4"
}
# A JSON that says why a launch left none (so the report shows the reason, never a silent gap).
skip_json() { # FILE BENCHMARK RANKS LOG RC
  local why
  # The programs' own words first (devbench: "rank N: ..."; vmmipc_setup: "[rank N] error: ..."; NVSHMEM's
  # messages), then any error line that is not the launcher's boilerplate.
  why=$(grep -E "^(rank [0-9]+: |\[rank [0-9]+\] error)|NVSHMEM|nvshmem|while loading shared" "$4" 2>/dev/null | head -3)
  [ -n "$why" ] || why=$(grep -iE "error|refus|fail|unsupported" "$4" 2>/dev/null |
                         grep -vE "MPI_ABORT|mpirun|mpiexec|Primary job|exited with non-zero" | head -3)
  why=$(echo "$why" | tr '\n"' '  ' | tr -d '\134' | cut -c1-400)
  printf '{"benchmark": "%s", "ranks": %s, "mps": %s, "skipped": "exit %s%s (log %s)"}\n' "$2" "$3" \
    "$([ "$mps_on" = 1 ] && echo true || echo false)" "$5" "${why:+: $why}" "$(basename "$4")" > "$1"
}

for n in $nps; do
  pct=$((100 / n))
  if want vmmipc; then
    f=$tree/device_np${n}_memops$sfx
    launch "$n" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct VMMIPC_SYNC=memops
    step "device_bench np$n memops (every row)" 60 "$f.log" "${L[@]}" "$b/vmmipc_device_bench" --iters "$iters" \
      --reps "$reps" --rows dev,put,host,allreduce,graph --timeout-s 10 --json "$f.json"
    ensure_json "$f" vmmipc_device_bench "$n" $?
    for path in kernel auto; do # the host rows on the other paths (auto: what it picks, a path per row)
      f=$tree/device_np${n}_$path$sfx
      launch "$n" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct VMMIPC_SYNC=$path
      step "device_bench np$n $path (host rows)" 30 "$f.log" "${L[@]}" "$b/vmmipc_device_bench" --reps "$reps" \
        --rows host --timeout-s 10 --json "$f.json"
      ensure_json "$f" vmmipc_device_bench "$n" $?
    done
    # Variants, side by side with the defaults above: the memops barrier's other shapes, and the device
    # rows at system scope (what the GPU scope saves).
    for shape in gather dissem; do
      f=$tree/device_np${n}_memops_$shape$sfx
      launch "$n" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct VMMIPC_SYNC=memops VMMIPC_SYNC_BARRIER=$shape
      step "device_bench np$n memops barrier $shape (host rows)" 30 "$f.log" "${L[@]}" "$b/vmmipc_device_bench" \
        --reps "$reps" --rows host --timeout-s 10 --json "$f.json"
      ensure_json "$f" vmmipc_device_bench "$n" $?
    done
    f=$tree/device_np${n}_memops_scope_sys$sfx
    launch "$n" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct VMMIPC_SYNC=memops VMMIPC_DEV_SCOPE=sys
    step "device_bench np$n scope sys (device rows)" 30 "$f.log" "${L[@]}" "$b/vmmipc_device_bench" --iters "$iters" \
      --reps "$reps" --rows dev,put --timeout-s 10 --json "$f.json"
    ensure_json "$f" vmmipc_device_bench "$n" $?
  fi
  if want anchors; then
    f=$tree/nvshmem_np$n$sfx
    if [ ! -x "$build/nvshmem/nvshmem_bench" ]; then
      skip_json "$f.json" nvshmem_bench "$n" "$tree/nvshmem_build.log" "$(cat "$tree/nvshmem_build.rc" 2>/dev/null)"
      log "nvshmem np$n: not built (nvshmem_build.log)"
    else
      launch "$n" "${nvs_env[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct
      step "nvshmem np$n" 60 "$f.log" "${L[@]}" "$build/nvshmem/nvshmem_bench" --iters "$iters" --reps "$reps" \
        --json "$f.json"
      ensure_json "$f" nvshmem_bench "$n" $?
    fi
  fi
  if want vmmipc; then
    f=$tree/heap_np$n$sfx
    launch "$n"
    step "heap 2 MiB rows np$n" 45 "$f.log" "${L[@]}" "$b/vmmipc_setup" --heap-only --reps 50 --heap-windows 20 \
      --heap-json "$f.json"
    ensure_json "$f" vmmipc_heap "$n" $?
  fi
  if want floors; then
    f=$tree/floor_np$n$sfx
    launch "$n" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct
    step "floors np$n" 45 "$f.log" "${L[@]}" "$b/vmmipc_floor_bench" --iters "$iters" --reps "$reps" --timeout-s 10 \
      --json "$f.json"
    ensure_json "$f" vmmipc_floor_bench "$n" $?
  fi
done

if want examples; then
  for n in 2 8; do
    launch "$n" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / n))
    step "allreduce_oneshot np$n" 40 "$tree/allreduce_np$n$sfx.log" "${L[@]}" "$build/examples/allreduce_oneshot" 3
    step "allreduce_oneshot --graph np$n" 60 "$tree/allreduce_graph_np$n$sfx.log" "${L[@]}" \
      "$build/examples/allreduce_oneshot" 1000 --graph
  done
fi
if want workload; then
  for nw in 2:1000 8:300; do
    n=${nw%%:*} w=${nw##*:}
    f=$tree/heap_workload_np$n$sfx
    launch "$n"
    step "heap workload np$n ($w windows)" 90 "$f.log" "${L[@]}" "$b/vmmipc_setup" --heap-only --reps 20 \
      --heap-windows "$w" --heap-json "$f.json"
    ensure_json "$f" vmmipc_heap "$n" $?
  done
fi

if want nomps; then
  stop_mps
  if answer=$(scripts/mps.sh status 2>&1); then
    log "nomps: skipped (an MPS daemon not started here still runs: $answer)"
  else
    export VMMIPC_BENCH_MPS=0
    # Kernels of the two ranks time-slice: a wait costs a scheduler slice (about 2.2 ms).
    f=$tree/device_np2_memops_nomps
    launch 2 VMMIPC_SYNC=memops
    step "device_bench np2 without MPS" 60 "$f.log" "${L[@]}" "$b/vmmipc_device_bench" \
      --iters 20 --reps 3 --host-iters 100 --rows dev,put,host --timeout-s 20 --json "$f.json"
    ensure_json "$f" vmmipc_device_bench 2 $?
    for path in kernel auto; do # the host rows on the kernel path, and what auto's trial picks here
      f=$tree/device_np2_${path}_nomps
      launch 2 VMMIPC_SYNC=$path
      step "device_bench np2 $path without MPS (host rows)" 30 "$f.log" "${L[@]}" "$b/vmmipc_device_bench" \
        --reps 3 --host-iters 100 --rows host --timeout-s 20 --json "$f.json"
      ensure_json "$f" vmmipc_device_bench 2 $?
    done
    f=$tree/floor_np2_nomps
    launch 2
    step "floors np2 without MPS" 60 "$f.log" "${L[@]}" "$b/vmmipc_floor_bench" --iters 20 --reps 3 \
      --memops-iters 200 --check-iters 20 --rows kernel,memops --timeout-s 20 --json "$f.json"
    ensure_json "$f" vmmipc_floor_bench 2 $?
  fi
fi
stop_mps

# ---- report: checks, summary, tarball ----
for f in "$tree"/*.json; do
  [ -e "$f" ] || continue
  python3 benchmarks/report.py check "$f" >> "$tree/check.log" 2>&1 || echo "check: $(basename "$f") FAILED" >> "$tree/check.log"
done
{
  echo "# wave4 $parts ($(date -u +%FT%TZ)); tree: $tree"
  echo
  sed 's/^/    /' "$status"
  echo
  [ -f "$tree/check.log" ] && { echo "JSON checks:"; sed 's/^/    /' "$tree/check.log"; echo; }
  grep -h "allreduce_oneshot:" "$tree"/allreduce*.log 2>/dev/null | sed 's/^/    /'
  echo
  # Launches with one setting changed (the report's "Settings" tables and i30.variant rows).
  echo "Variant launches (VMMIPC_SYNC_BARRIER=gather/dissem: host rows; VMMIPC_DEV_SCOPE=sys: device rows):"
  for f in "$tree"/device_np*_memops_gather*.json "$tree"/device_np*_memops_dissem*.json \
           "$tree"/device_np*_memops_scope_sys*.json; do
    [ -e "$f" ] && echo "    $(basename "$f")"
  done
  echo
  python3 benchmarks/report.py summary "$tree" 2>&1
} > "$tree/summary.txt"
log "total $(($(date +%s) - start)) s"
tar czf "$outdir/wave4-$tag.tgz" -C "$(dirname "$tree")" "$(basename "$tree")"
cp "$tree/summary.txt" "$outdir/wave4-$tag-summary.txt"
echo "wave4: $outdir/wave4-$tag.tgz and $outdir/wave4-$tag-summary.txt" >&2
