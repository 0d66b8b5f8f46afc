#!/bin/sh
# Every ctest entry that launches ranks runs in a session directory of its
# own (cmake/ctest_session.sh: concurrent Open MPI launches share one top
# directory, and one ending can break another starting).
#   test_private_session.sh CTEST BUILD_DIR SESSION_SH MPIEXEC [MPIEXEC_ARGS...]
# 1. Each registered command that names the launcher, killrun.sh, chaos.sh or
#    vmmipc-mpirun starts with SESSION_SH.
# 2. Open MPI only: a rank launched through SESSION_SH has its top session
#    directory inside the private one, which is gone when the launch ends.
ctest=$1 build=$2 session=$3 mpiexec=$4
shift 4
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

listing=$(cd "$build" && "$ctest" -N -V 2>&1) || { echo "FAIL: $ctest -N -V in $build: $listing"; exit 1; }
commands=$(printf '%s\n' "$listing" | sed -n 's/^[0-9]*: Test command: //p')
[ -n "$commands" ] || { echo "FAIL: $ctest -N -V listed no test commands"; exit 1; }
launching=0
while IFS= read -r cmd; do
  case "$cmd" in
    *test_private_session.sh*) continue ;;
    *"$mpiexec"*|*/killrun.sh*|*/chaos.sh*|*/vmmipc-mpirun*) ;;
    *) continue ;;
  esac
  launching=$((launching + 1))
  case "$cmd" in
    "$session "*) ;;
    *) fail "launches ranks without $session: $cmd" ;;
  esac
done <<EOF_COMMANDS
$commands
EOF_COMMANDS
[ "$launching" -gt 0 ] || fail "no registered command launches ranks with $mpiexec"
echo "registered launches: $launching, $fails without a session directory of their own"

case "$("$mpiexec" --version 2>&1)" in
  *"Open MPI"*|*OpenRTE*)
    top=$("$session" "$mpiexec" -n 1 "$@" sh -c 'printf %s "$OMPI_MCA_orte_top_session_dir"')
    rc=$?
    base=${TMPDIR:-/tmp}/vmmipc-ctest.
    case "$rc:$top" in
      0:"$base"*/ompi.*)
        private=$(dirname "$top")
        [ ! -e "$private" ] || fail "$private is left after the launch"
        echo "a launch's top session directory: $top (removed after)" ;;
      *) fail "launch through $session: exit $rc, top session directory '$top' (wanted one in ${base}XXXXXX)" ;;
    esac ;;
  *) echo "not Open MPI ($mpiexec): it keeps no session directory; part 2 skipped" ;;
esac
[ "$fails" -eq 0 ]
