#!/bin/sh
# Runs a job in which one rank is killed, and passes when exactly $1
# survivors printed "KILLTEST OK" and none "KILLTEST FAIL" (the launcher's
# own exit status reports the killed rank, so it is not used).
want=$1
shift
out=$("$@" 2>&1)
printf '%s\n' "$out"
ok=$(printf '%s\n' "$out" | grep -c '^KILLTEST OK')
bad=$(printf '%s\n' "$out" | grep -c '^KILLTEST FAIL')
[ "$ok" -eq "$want" ] && [ "$bad" -eq 0 ]
