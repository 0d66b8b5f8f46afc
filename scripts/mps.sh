#!/usr/bin/env bash
# A private CUDA MPS control daemon for one job, so that the kernels of
# several ranks on one GPU run at once instead of time-slicing:
#   scripts/mps.sh start  [DIR]   start one (pipe in DIR/pipe, log in DIR/log), as the calling user;
#                                 a no-op, said so, where an MPS daemon already answers
#   scripts/mps.sh stop   [DIR]   stop the daemon that `start` started in DIR (nothing else)
#   scripts/mps.sh status [DIR]   whether MPS runs, and whose; exit 0 if it does, 1 if not
#   scripts/mps.sh env    [DIR]   the variables of DIR's daemon, as for start
# DIR: $VMMIPC_MPS_DIR, else ${TMPDIR:-/tmp}/vmmipc-mps-<uid>.
# start and env print `export ...` lines on stdout (use: eval "$(scripts/mps.sh start DIR)")
# and everything else on stderr, including how to pass the variables to
# the ranks. Exit status: 0 done; 1 failed (the daemon's log follows);
# 2 usage; 3 MPS is not available here (no nvidia-cuda-mps-control, or no
# GPU): callers run without it.
# Under MPS a fatal fault in one client ends every client on that GPU, and
# spin-waiting kernels of several ranks must all be resident: give each rank
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / (ranks per GPU).
set -uo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
cmd=${1:-}
[ $# -le 2 ] || usage
case "$cmd" in start|stop|status|env) ;; -h|--help) usage 0 ;; *) usage ;; esac
dir=${2:-${VMMIPC_MPS_DIR:-${TMPDIR:-/tmp}/vmmipc-mps-$(id -u)}}
case "$dir" in /*) ;; *) dir=$PWD/$dir ;; esac
pipe=$dir/pipe log=$dir/log mark=$dir/started-by-mps.sh
say() { echo "mps: $*" >&2; }
ctl=$(command -v nvidia-cuda-mps-control || true)

# Whether a control daemon answers on a pipe directory.
answers() {
  [ -S "$1/control" ] || return 1
  [ -n "$ctl" ] || return 1
  echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$1" timeout 5 "$ctl" >/dev/null 2>&1
}

exports() { # PIPE_DIR [LOG_DIR]
  echo "export CUDA_MPS_PIPE_DIRECTORY='$1'"
  [ -z "${2:-}" ] || echo "export CUDA_MPS_LOG_DIRECTORY='$2'"
  say "clients need the same variables; on one node mpirun's ranks inherit them, and to pass them on:"
  say "  Open MPI: mpirun -x CUDA_MPS_PIPE_DIRECTORY${2:+ -x CUDA_MPS_LOG_DIRECTORY} ..."
  say "  MPICH:    mpiexec -genvlist CUDA_MPS_PIPE_DIRECTORY${2:+,CUDA_MPS_LOG_DIRECTORY} ..."
  say "  and per rank CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\$((100 / ranks per GPU)) when kernels spin-wait"
}

# A daemon other than DIR's that clients would reach: the one named by
# CUDA_MPS_PIPE_DIRECTORY, or the system default.
other() {
  local d
  for d in ${CUDA_MPS_PIPE_DIRECTORY:+"$CUDA_MPS_PIPE_DIRECTORY"} /tmp/nvidia-mps; do
    [ "$d" = "$pipe" ] && continue
    if answers "$d"; then echo "$d"; return 0; fi
  done
  return 1
}

log_tail() { [ -f "$log/control.log" ] && tail -n 15 "$log/control.log" | sed 's/^/mps:   /' >&2; }

case "$cmd" in
  start)
    [ -n "$ctl" ] || { say "MPS is not available: nvidia-cuda-mps-control is not on PATH"; exit 3; }
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
      say "MPS is not available: no GPU (nvidia-smi -L lists none)"; exit 3
    fi
    if answers "$pipe"; then
      say "MPS already runs in $dir (started earlier); nothing started"
      exports "$pipe" "$log"; exit 0
    fi
    if d=$(other); then
      say "MPS already runs (control pipe $d, not started by this script); nothing started, and stop will leave it"
      exports "$d"; exit 0
    fi
    if [ ${#pipe} -gt 100 ]; then say "$pipe is too long for a Unix socket path; give a shorter DIR"; exit 1; fi
    if ! { mkdir -p "$pipe" "$log" && chmod 700 "$dir"; }; then say "cannot make $pipe and $log"; exit 1; fi
    # Its output to a file: a daemon that kept our stdout would hold up $(scripts/mps.sh start).
    if ! CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$log" "$ctl" -d </dev/null >"$log/start.out" 2>&1; then
      say "nvidia-cuda-mps-control -d failed (pipe $pipe, log $log): $(tr '\n' ' ' < "$log/start.out")"; log_tail; exit 1
    fi
    for _ in $(seq 50); do answers "$pipe" && break; sleep 0.2; done
    if ! answers "$pipe"; then
      say "the control daemon does not answer on $pipe after 10 s"; log_tail; exit 1
    fi
    printf 'started=%s\nuser=%s\npipe=%s\nlog=%s\n' "$(date -u +%FT%TZ)" "$(id -un)" "$pipe" "$log" > "$mark"
    say "started a private MPS control daemon as $(id -un): pipe $pipe, log $log (stop: scripts/mps.sh stop $dir)"
    exports "$pipe" "$log"
    ;;
  env)
    if answers "$pipe"; then exports "$pipe" "$log"; exit 0; fi
    if d=$(other); then exports "$d"; exit 0; fi
    say "no MPS daemon answers (neither in $dir nor elsewhere)"; exit 1
    ;;
  stop)
    if [ ! -f "$mark" ]; then
      say "nothing to stop: this script started no daemon in $dir"
      if d=$(other); then say "(MPS still runs from $d: not ours, left alone)"; fi
      exit 0
    fi
    if answers "$pipe"; then
      echo quit | CUDA_MPS_PIPE_DIRECTORY="$pipe" timeout 10 "$ctl" >/dev/null 2>&1
      for _ in $(seq 50); do answers "$pipe" || break; sleep 0.2; done
      if answers "$pipe"; then say "the daemon in $dir still answers 10 s after quit (clients still running?)"; log_tail; exit 1; fi
      say "stopped the MPS control daemon of $dir"
    else
      say "the daemon of $dir had already stopped"
    fi
    rm -f "$mark"
    ;;
  status)
    if answers "$pipe"; then
      who="started by this script"; [ -f "$mark" ] || who="not started by this script"
      say "MPS runs in $dir ($who); servers: $(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$pipe" timeout 5 "$ctl" 2>/dev/null | tr '\n' ' ')"
      exit 0
    fi
    if d=$(other); then say "MPS runs from $d (not $dir)"; exit 0; fi
    if [ -z "$ctl" ]; then say "MPS is not available: nvidia-cuda-mps-control is not on PATH"; else say "MPS does not run"; fi
    exit 1
    ;;
esac
