#!/bin/sh
# Every ctest entry that launches ranks runs in a session directory of its
# own (cmake/ctest_session.sh: concurrent Open MPI 4 launches share one top
# directory, and one ending can break another starting).
#   test_private_session.sh BUILD_DIR SESSION_SH MPIEXEC NP_FLAG [MPIEXEC_ARGS...]
# 1. Each registered command (BUILD_DIR's CTestTestfile.cmake files) that
#    names the launcher, killrun.sh, chaos.sh or vmmipc-mpirun starts with
#    SESSION_SH. A launch hidden inside another program is not seen.
# 2. Open MPI 4 (OpenRTE) only: a rank launched through SESSION_SH has its
#    top session directory inside the private one, which is gone after.
# 3. A directory left by a launch that was SIGKILLed (its owner is gone) is
#    removed by the next launch; one whose owner lives, one of another host
#    or PID namespace, and one with no owner file yet (being made) are kept.
build=$1 session=$2 mpiexec=$3 npflag=$4
shift 4
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# One add_test line per entry: add_test([=[name]=] "command" "arg"...), or
# add_test(name "command" ...) from an older CMake.
registered=$(find "$build" -name CTestTestfile.cmake -exec cat {} + | grep '^add_test(')
[ -n "$registered" ] || { echo "FAIL: no add_test in the CTestTestfile.cmake files under $build"; exit 1; }
launching=0
while IFS= read -r line; do
  case "$line" in
    *test_private_session.sh*) continue ;;
    *"\"$mpiexec\""*|*/killrun.sh\"*|*/chaos.sh\"*|*/vmmipc-mpirun\"*) ;;
    *) continue ;;
  esac
  launching=$((launching + 1))
  command=$(printf '%s\n' "$line" | sed -e 's/^add_test(\[=\[[^]]*\]=\] //' -e 's/^add_test([^ ]* //')
  case "$command" in
    "\"$session\" "*) ;;
    *) fail "launches ranks without $session: $(printf '%s' "$line" | cut -c1-300)" ;;
  esac
done <<EOF_REGISTERED
$registered
EOF_REGISTERED
[ "$launching" -gt 0 ] || fail "no registered command launches ranks with $mpiexec"
echo "registered launches: $launching, $fails without a session directory of their own"

case "$("$mpiexec" --version 2>&1)" in
  *OpenRTE*)
    top=$("$session" "$mpiexec" "$npflag" 1 "$@" sh -c 'printf %s "$OMPI_MCA_orte_top_session_dir"')
    rc=$?
    base=${TMPDIR:-/tmp}/vmmipc-ctest.
    case "$rc:$top" in
      0:"$base"*/ompi.*)
        private=$(dirname "$top")
        [ ! -e "$private" ] || fail "$private is left after the launch"
        echo "a launch's top session directory: $top (removed after)" ;;
      *) fail "launch through $session: exit $rc, top session directory '$top' (wanted one in ${base}XXXXXX;" \
              "launcher flags that set --tmpdir or another tmpdir base override it)" ;;
    esac ;;
  *) echo "not Open MPI 4 ($mpiexec): no shared session directory to avoid; part 2 skipped" ;;
esac
scratch=$(mktemp -d "${TMPDIR:-/tmp}/vmmipc-stale-check.XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$scratch"' EXIT
where="$(uname -n) $(readlink /proc/self/ns/pid 2> /dev/null)"
gone=4194304 # PID_MAX_LIMIT: Linux gives pids below it, so no process has this one
mkdir "$scratch/vmmipc-ctest.killed" "$scratch/vmmipc-ctest.running" "$scratch/vmmipc-ctest.elsewhere" \
  "$scratch/vmmipc-ctest.new" || fail "mkdir in $scratch"
echo "$where $gone" > "$scratch/vmmipc-ctest.killed/owner"
echo "$where $$" > "$scratch/vmmipc-ctest.running/owner"
echo "another-host pid:[1] $gone" > "$scratch/vmmipc-ctest.elsewhere/owner"
TMPDIR=$scratch "$session" true || fail "$session true: exit $?"
[ ! -e "$scratch/vmmipc-ctest.killed" ] || fail "the directory of a killed launch (owner pid $gone, gone) is left"
[ -d "$scratch/vmmipc-ctest.running" ] || fail "the directory of a running launch (owner pid $$) was removed"
[ -d "$scratch/vmmipc-ctest.elsewhere" ] || fail "the directory of another host's launch was removed"
[ -d "$scratch/vmmipc-ctest.new" ] || fail "a directory without an owner file (being made) was removed"
left=$(find "$scratch" -mindepth 1 -maxdepth 1 | wc -l)
[ "$left" -eq 3 ] || fail "$left entries in $scratch after the launch, wanted 3: $(ls "$scratch")"
echo "a killed launch's directory: removed by the next launch; a running one's, another host's and one being" \
  "made: kept"
[ "$fails" -eq 0 ]
