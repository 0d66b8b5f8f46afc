#!/usr/bin/env bash
# Wave 4's long GPU runs, in parallel lanes so that they fit one device call
# each (docs/dev/gpu-validation.md records what ran):
#   scripts/gpu/wave4_lanes.sh mps|nomps|final|closing|sync|sync-nomps|seal|seal-mps|refuse|layouts-mps|ends|mesh OUTDIR
# mps   under a private MPS daemon (scripts/mps.sh), two lanes at once:
#         1. the Python suites (python, python_heap) at 2 and 4 ranks, REPEAT (10)
#            runs in a row each;
#         2. the node-layout matrix once (LAYOUTS_S), the Python examples
#            (torch, numba), the GPU programs and the device, sync and graph
#            suites (GPU_S), then the chaos campaign on the real driver in
#            what is left (CHAOS_RUNS x CHAOS_STEPS steps at most);
# final under MPS, one after another: the chaos campaign alone (CHAOS_S), the
#       entries that changed since (CHANGED_S), node layouts in what is left
#       (LAYOUTS_SKIP: a ctest -E regex of those already run);
# closing  the chaos campaign alone under MPS (CHAOS_S, from seed CHAOS_SEED0), then the nomps part
#       in what is left;
# sync  the GPU programs, sync, device, graph and Python entries under MPS (SYNC_S), the sync and
#       device layout entries (SYNC_LAYOUTS_S), then the same entries without MPS;
# sync-nomps  only the last of these: sync's entries without MPS;
# seal  without MPS: replays of the chaos seeds 11015, 11051 and 11009, the failure-path suites
#       (FAULTS_S), a campaign in what is left; seal-mps: under MPS a campaign (CHAOS_S), then the
#       node layouts but the sync and device ones;
# refuse  without MPS: the failure-path suites (FAULTS_S), then the node layouts but the sync and
#       device ones; layouts-mps: under MPS, the node layouts (LAYOUTS_SKIP leaves some out);
# ends  without MPS the failure-path suites and their layouts; under MPS the Python suites, the
#       layouts of test_faults, test_agree and test_heap, and a campaign in what is left;
# tell  without MPS: the failure-path suites, the Python suites, then the layouts of test_faults,
#       test_agree and test_heap in what is left (the tenth session's change: an aborted rank tells);
# idle  the eleventh session's abort change: without MPS the failure-path suites, the Python suites and
#       test_faults' and test_after_finalize's layouts; under MPS the Python suites and test_faults;
# verify  the thirteenth session's fixes (agreements keyed by call, transport drops, barrier count,
#       wait_host on a failed peer): without MPS the failure-path suites (FAULTS_S) and the Python
#       suites (PY_S); under MPS the sync, device and Python suites (SYNC_S), then the failure-path
#       suites in what is left;
# pick  the entries that match PICK_MPS under MPS (PICK_MPS_S), then those that match PICK_NOMPS
#       without it (what an earlier call did not reach);
# mesh  the seventeenth session's mesh news: without MPS the layouts of the suites that create and
#       break comms (LAYOUTS_S), then under MPS the chaos campaign in what is left (from CHAOS_SEED0);
# nomps without MPS, two lanes: every ctest entry but the layouts, the chaos
#       campaign and the Python suites; the Python suites REPEAT runs in a row.
# Layout entries that passed are listed in build-real/layouts-passed[-mps].txt, and
# a later call on the same warm machine runs only the others (LAYOUTS_SKIP adds
# a ctest -E regex; LAYOUTS_FRESH=1 forgets the list). CHAOS_RUNS=0 leaves the
# mps part's campaign out.
# Builds build-real/ first (kept on a warm machine). Every lane is bounded by
# DEADLINE_S (540); OUTDIR gets lanes-PART.txt (summary) and lanes-PART.tgz.
set -uo pipefail
part=${1:?mps|nomps|final|closing|sync|sync-nomps|seal|seal-mps|refuse|layouts-mps|ends|tell|idle|verify|pick|mesh} out=$(mkdir -p "${2:?outdir}" && cd "$2" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
# shellcheck source=scripts/env.sh
. scripts/env.sh
unset VMMIPC_CUDA_DRIVER
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONDONTWRITEBYTECODE=1
build=${BUILD_DIR:-$root/build-real} logs=$out/lanes-$part sum=$out/lanes-$part.txt
mkdir -p "$logs"
deadline=${DEADLINE_S:-540} repeat=${REPEAT:-10} start=$(date +%s)
log() { echo "[lanes $(($(date +%s) - start)) s] $*" | tee -a "$sum" >&2; }
left() { echo $((deadline - ($(date +%s) - start))); }
# step NAME CAP LOGFILE CMD...: bounded by CAP and by what is left of the deadline.
step() {
  local name=$1 cap=$2 logf=$3 rc lim t0
  shift 3
  lim=$(left)
  [ "$cap" -lt "$lim" ] && lim=$cap
  if [ "$lim" -lt 10 ]; then log "$name: skipped (deadline reached)"; return 124; fi
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$lim" "$@" > "$logf" 2>&1
  rc=$?
  log "$name: exit $rc after $(($(date +%s) - t0)) s (limit $lim s; $(basename "$logf"))"
  { echo "--- $name"; grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|^chaos|violations=|Test #.*(Passed|Failed)" "$logf" |
      grep -vE "Test #.*Passed" | tail -40; } >> "$sum"
  return "$rc"
}
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader
} >> "$sum" 2>&1
ulimit -Sn "$(ulimit -Hn)"
if [ ! -x "$build/mpi_tests/test_chaos" ]; then
  step configure 90 "$logs/configure.log" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVMMIPC_TEST_DRIVER=real -DVMMIPC_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DPython3_EXECUTABLE="$(command -v python3)"
fi
step build 200 "$logs/build.log" cmake --build "$build" -j "$(nproc)"
ct=(ctest --test-dir "$build" --output-on-failure --timeout 150)
passed=$build/layouts-passed$([ "$part" = refuse ] || echo -mps).txt
[ "${LAYOUTS_FRESH:-0}" = 1 ] && rm -f "$passed"
# The -E regex of the layout entries not to run again: LAYOUTS_SKIP and those passed before.
layouts_skip() {
  { [ -n "${LAYOUTS_SKIP:-}" ] && echo "$LAYOUTS_SKIP"; [ -s "$passed" ] && sed 's/[.]/[.]/g; s/^/^/; s/$/$/' "$passed"; } |
    paste -sd'|' | sed 's/^$/^$/'
}
# layouts CAP JOBS: the node-layout entries not yet passed here; records those that pass.
layouts() {
  local n
  n=$("${ct[@]}" -N -L layouts -E "$(layouts_skip)" | grep -c 'Test *#')
  log "layouts: $n entries to run ($(grep -c . "$passed" 2> /dev/null || echo 0) passed before here)"
  step layouts "$1" "$logs/layouts.log" "${ct[@]}" -j "$2" -L layouts -E "$(layouts_skip)"
  sed -n 's/.*Test *#[0-9]*: \([^ ]*\) [.]*.*Passed.*/\1/p' "$logs/layouts.log" >> "$passed"
  log "layouts: $(grep -c . "$passed") passed here in all; still to run: $("${ct[@]}" -N -L layouts -E "$(layouts_skip)" | grep -c 'Test *#')"
}
py='^python(_heap)?\.np[24]$'
mps_dir=${TMPDIR:-/tmp}/vmmipc-lanes-mps
mps_on() {
  local env_lines
  if env_lines=$(scripts/mps.sh start "$mps_dir" 2> "$logs/mps.log"); then eval "$env_lines"; log "MPS on"; else
    log "MPS not available: $(tail -1 "$logs/mps.log")"; exit 1; fi
}
mps_off() {
  scripts/mps.sh stop "$mps_dir" >> "$logs/mps.log" 2>&1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  log "MPS stopped"
}
# chaos CAP RUNS SEED0: the campaign, bounded by CAP seconds.
chaos() {
  step chaos "$1" "$logs/chaos.log" env BUILD_DIR="$build" mpi_tests/harness/chaos.sh \
    --env "$build/mpi_tests/chaos.env" --runs "$2" --steps "${CHAOS_STEPS:-100}" --seed0 "$3" \
    --np "2 3 4" --kill-share 0.1 --budget "$(($1 - 15))" --logs "$logs/chaos-runs"
}
if [ "$part" = mps ]; then
  mps_on
  step python-x"$repeat" "$deadline" "$logs/python.log" "${ct[@]}" -j 2 -R "$py" --repeat "until-fail:$repeat" &
  # Two lanes of ranks at a time beside the Python ones: busy-polling ranks must not outnumber the cores.
  layouts "${LAYOUTS_S:-200}" 2
  step examples-gpu-sync "${GPU_S:-120}" "$logs/gpu.log" "${ct[@]}" -j 2 -LE layouts \
    -R 'example\.python|python_heap|gpu|persistent|test_device|test_sync' -E "$py"
  [ "${CHAOS_RUNS:-40}" -gt 0 ] && chaos "$(($(left) - 20))" "${CHAOS_RUNS:-40}" 7000
  wait
  mps_off
elif [ "$part" = final ]; then
  # Under MPS: the campaign alone (its leak check reads the whole GPU's memory), then the entries that
  # changed after the mps part, then node layouts in what is left.
  mps_on
  chaos "${CHAOS_S:-130}" "${CHAOS_RUNS:-60}" "${CHAOS_SEED0:-8000}"
  step changed "${CHANGED_S:-70}" "$logs/changed.log" "${ct[@]}" -j 3 -LE layouts \
    -R 'numba_ring|^test_agree\.np[23]$|^test_device\.np3$|^test_sync\.np3$'
  layouts "$(($(left) - 10))" 4
  mps_off
elif [ "$part" = sync ] || [ "$part" = sync-nomps ]; then
  # The host-sync kernels changed: the GPU programs, the sync, device, graph and Python entries under MPS,
  # the sync and device layout entries, then the same entries without MPS.
  sync_re='example[.]|gpu|persistent|test_device|test_sync|^python'
  if [ "$part" = sync ]; then
    mps_on
    step sync-mps "${SYNC_S:-170}" "$logs/sync-mps.log" "${ct[@]}" -j 2 -LE layouts -R "$sync_re"
    step sync-layouts-mps "${SYNC_LAYOUTS_S:-90}" "$logs/sync-layouts-mps.log" "${ct[@]}" -j 3 -L layouts \
      -R 'test_sync|test_device'
    mps_off
  fi
  step sync-nomps "$(($(left) - 10))" "$logs/sync-nomps.log" "${ct[@]}" -j 2 -LE layouts -R "$sync_re"
elif [ "$part" = seal ] || [ "$part" = seal-mps ]; then
  # The seventh session's fixes (a failed comm refuses and drops what peers still send it; the collector
  # decides when a withdrawal comes). seal, without MPS: the replays of the no-MPS violations, alone (the
  # leak check reads the whole GPU's memory), the suites of the comm's failure paths, then a campaign in
  # what is left. seal-mps, under MPS: a campaign, then those suites' node layouts.
  faults_re='^test_(faults|agree|comm|kill|hostile|transport|coll|heap)[.]'
  if [ "$part" = seal ]; then
    # replay NAME SYNC ARGS...: one run of chaos.sh --one, as the campaign ran it.
    replay() {
      local name=$1 sync=$2
      shift 2
      step "$name" 90 "$logs/$name.log" env BUILD_DIR="$build" VMMIPC_SYNC="$sync" mpi_tests/harness/chaos.sh \
        --env "$build/mpi_tests/chaos.env" --one --np 4 --steps "${CHAOS_STEPS:-100}" "$@"
    }
    for i in 1 2 3; do
      replay "replay-11015-$i" memops --layout 0,0,0,1 --seed 11015
      replay "replay-11009-$i" auto --layout 0,1,2,3 --seed 11009 --kill
    done
    for sync in auto memops kernel; do replay "replay-11051-$sync" "$sync" --layout 0,1,0,0 --seed 11051; done
    step faults-nomps "${FAULTS_S:-150}" "$logs/faults-nomps.log" "${ct[@]}" -j 6 -LE 'layouts|chaos' -R "$faults_re"
    [ "$(left)" -gt 75 ] && chaos "$(($(left) - 15))" "${CHAOS_RUNS:-60}" "${CHAOS_SEED0:-12000}"
  else
    mps_on
    chaos "${CHAOS_S:-200}" "${CHAOS_RUNS:-60}" "${CHAOS_SEED0:-12500}"
    layouts_skip_re=${LAYOUTS_SKIP:-}
    LAYOUTS_SKIP="${layouts_skip_re:+$layouts_skip_re|}^test_(sync|device|graph|persistent|pdl)"
    layouts "$(($(left) - 10))" 4
    mps_off
  fi
elif [ "$part" = refuse ]; then
  # The eighth session's change (a refused send reads past what its peer queued before its END frame):
  # the failure-path suites, then the layouts never run without MPS (kernels time-slice: not the
  # sync and device ones).
  step faults-nomps "${FAULTS_S:-150}" "$logs/faults-nomps.log" "${ct[@]}" -j 6 -LE 'layouts|chaos' \
    -R '^test_(faults|agree|comm|kill|hostile|transport|coll|heap)[.]'
  LAYOUTS_SKIP="${LAYOUTS_SKIP:+$LAYOUTS_SKIP|}^test_(sync|device|graph|persistent|pdl)"
  layouts "$(($(left) - 10))" 4
elif [ "$part" = ends ]; then
  # The ninth session's change (a node peer tells the collector of an abort it saw): without MPS the
  # failure-path suites and their node layouts; under MPS the Python suites and the same layouts, then a
  # campaign in what is left.
  faults_re='^test_(faults|agree|comm|kill|hostile|transport|coll|heap)[.]'
  step faults-nomps "${FAULTS_S:-150}" "$logs/faults-nomps.log" "${ct[@]}" -j 6 -LE 'layouts|chaos' -R "$faults_re"
  step faults-layouts-nomps "${LAYOUTS_S:-100}" "$logs/faults-layouts-nomps.log" "${ct[@]}" -j 4 -L layouts \
    -R '^test_(faults|agree|heap|comm)[.]'
  mps_on
  step python-mps "${PY_S:-110}" "$logs/python-mps.log" "${ct[@]}" -j 2 -R "$py"
  step faults-layouts-mps "${LAYOUTS_S:-100}" "$logs/faults-layouts-mps.log" "${ct[@]}" -j 4 -L layouts \
    -R '^test_(faults|agree|heap)[.]'
  [ "$(left)" -gt 60 ] && chaos "$(($(left) - 15))" "${CHAOS_RUNS:-40}" "${CHAOS_SEED0:-13000}"
  mps_off
elif [ "$part" = tell ] || [ "$part" = idle ]; then
  # Without MPS: the failure-path suites, Python, then those suites' layouts (in what is left for tell).
  if [ "$part" = tell ]; then suites='faults|agree|comm|kill|hostile|transport|coll|heap|codec|buffers' lay='faults|agree|heap'
  else suites='faults|agree|comm|kill|hostile|heap|after_finalize' lay='faults|after_finalize'; fi
  step faults-nomps "${FAULTS_S:-150}" "$logs/faults-nomps.log" "${ct[@]}" -j 6 -LE 'layouts|chaos' -R "^test_($suites)[.]"
  step python-nomps "${PY_S:-70}" "$logs/python-nomps.log" "${ct[@]}" -j 2 -R "$py"
  step faults-layouts-nomps "${LAYOUTS_S:-$(($(left) - 10))}" "$logs/faults-layouts-nomps.log" "${ct[@]}" -j 4 \
    -L layouts -R "^test_($lay)[.]"
fi
if [ "$part" = verify ]; then
  fp='^test_(faults|agree|comm|kill|hostile|heap|transport|mismatch|release|coll|conn|after_finalize)[.]'
  step faults-nomps "${FAULTS_S:-170}" "$logs/faults-nomps.log" "${ct[@]}" -j 6 -LE 'layouts|chaos' -R "$fp"
  step python-nomps "${PY_S:-80}" "$logs/python-nomps.log" "${ct[@]}" -j 2 -R "$py"
  mps_on
  step sync-mps "${SYNC_S:-170}" "$logs/sync-mps.log" "${ct[@]}" -j 3 -LE 'layouts|chaos' \
    -R '^test_(sync|sync_release|device)[.]|^python'
  step faults-mps "$(($(left) - 15))" "$logs/faults-mps.log" "${ct[@]}" -j 6 -LE 'layouts|chaos' -R "$fp"
  mps_off
elif [ "$part" = idle ]; then
  mps_on
  step python-mps "${PY_S:-70}" "$logs/python-mps.log" "${ct[@]}" -j 2 -R "$py"
  step faults-mps "$(($(left) - 15))" "$logs/faults-mps.log" "${ct[@]}" -j 3 -LE layouts -R '^test_faults[.]'
  mps_off
elif [ "$part" = layouts-mps ]; then
  mps_on
  layouts "$(($(left) - 15))" 4
  mps_off
elif [ "$part" = pick ]; then
  mps_on
  step pick-mps "${PICK_MPS_S:-120}" "$logs/pick-mps.log" "${ct[@]}" -j 2 -LE layouts -R "${PICK_MPS:-^$}"
  mps_off
  step pick-nomps "$(($(left) - 15))" "$logs/pick-nomps.log" "${ct[@]}" -j 2 -LE layouts -R "${PICK_NOMPS:-^$}"
elif [ "$part" = mesh ]; then
  # The seventeenth session's mesh news (every comm_create on a node): without MPS the node layouts of
  # the suites that create and break comms, then under MPS the chaos campaign in what is left.
  step mesh-layouts-nomps "${LAYOUTS_S:-300}" "$logs/mesh-layouts-nomps.log" "${ct[@]}" -j 4 -L layouts \
    -R '^test_(comm|agree|faults|kill|hostile|after_finalize|heap|coll)[.]'
  mps_on
  [ "$(left)" -gt 60 ] && chaos "$(($(left) - 15))" "${CHAOS_RUNS:-40}" "${CHAOS_SEED0:-18000}"
  mps_off
elif [ "$part" = closing ]; then
  mps_on
  chaos "${CHAOS_S:-150}" "${CHAOS_RUNS:-60}" "${CHAOS_SEED0:-9000}"
  mps_off
fi
if [ "$part" = nomps ] || [ "$part" = closing ]; then
  step ctest-nomps "$deadline" "$logs/ctest-nomps.log" "${ct[@]}" -j 6 -LE 'layouts|chaos' -E "$py" &
  step "python-nomps-x$repeat" "$deadline" "$logs/python-nomps.log" "${ct[@]}" -j 2 -R "$py" \
    --repeat "until-fail:$repeat"
  wait
fi
tar czf "$out/lanes-$part.tgz" -C "$out" "lanes-$part"
rm -rf "$logs"
log "done"
