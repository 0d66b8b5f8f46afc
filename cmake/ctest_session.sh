#!/bin/sh
# Runs one ctest entry's command (an MPI launch: ctest_session.sh mpiexec ...)
# with an Open MPI session directory of its own, removed when it ends.
#
# Why: ctest runs several launches at once, and Open MPI 4 puts every launch's
# session directory under one top directory, $TMPDIR/ompi.<host>.<uid>, which
# a launch that ends removes once it is empty. A launch that is creating its
# own directory in that instant fails before any rank runs ("A call to mkdir
# was unable to create the desired directory ... File exists", orte_init
# failed; open-mpi/ompi#8510). CI's test_codec.np1 failed so at stop 38.
# With a private top directory per launch nothing else removes it.
# Open MPI 5 (PRRTE) and MPICH's Hydra ignore the variable. Launcher flags
# that set orte_local_tmpdir_base or orte_remote_tmpdir_base cannot be
# combined with it (Open MPI refuses), and --tmpdir overrides it.
if [ $# -lt 1 ]; then
  echo "usage: ctest_session.sh COMMAND [ARGS...]" >&2
  exit 2
fi
base=${TMPDIR:-/tmp}
# A launch SIGKILLed at its ctest timeout skips the trap below: the next one
# removes its directory. Only directories of this user whose owner file names
# this host and PID namespace (a TMPDIR shared with other hosts or containers
# holds directories whose processes cannot be seen from here) and a process
# that is gone; one still being made has no owner file yet.
where="$(uname -n) $(readlink /proc/self/ns/pid 2> /dev/null)"
for old in "$base"/vmmipc-ctest.*; do
  if [ ! -d "$old" ] || [ ! -O "$old" ] || [ ! -f "$old/owner" ]; then continue; fi
  owner=$(cat "$old/owner" 2> /dev/null) || continue
  pid=${owner##* }
  if [ "${owner% *}" != "$where" ]; then continue; fi
  case "$pid" in '' | *[!0-9]*) continue ;; esac
  kill -0 "$pid" 2> /dev/null || rm -rf "$old"
done
dir=$(mktemp -d "$base/vmmipc-ctest.XXXXXX") || {
  echo "ctest_session.sh: cannot make a session directory in $base" >&2
  exit 1
}
# Removed on every way out but SIGKILL (then by a later launch, above).
trap 'rm -rf "$dir"' EXIT
# Whole or absent to a reader: written aside, then renamed.
echo "$where $$" > "$dir/owner.new" && mv "$dir/owner.new" "$dir/owner"
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
OMPI_MCA_orte_tmpdir_base=$dir
export OMPI_MCA_orte_tmpdir_base
"$@"
