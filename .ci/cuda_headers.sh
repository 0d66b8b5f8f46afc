#!/usr/bin/env bash
# Checks every way cmake/cuda_headers.cmake documents for finding cuda.h:
# with the real toolkit hidden (an empty folder mounted over it in a private
# mount namespace), a copy of its cuda.h is offered one way at a time, and a
# probe project must find exactly that copy; with none, or one older than
# CUDA 12, it must stop with its one error. Needs root (unshare -m).
#   .ci/cuda_headers.sh [WORK_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$root/build-cuda-headers}
if [ -z "${VMMIPC_IN_NS:-}" ]; then
  header=$(find /usr/local/cuda/include/cuda.h "${CUDA_HOME:-/nonexistent}/include/cuda.h" 2>/dev/null | head -1 || true)
  [ -n "$header" ] || { echo "cuda_headers: no cuda.h to copy; skipped"; exit 0; }
  if ! unshare -m true 2>/dev/null; then echo "cuda_headers: unshare -m not permitted; skipped"; exit 0; fi
  rm -rf "$work"
  mkdir -p "$work"
  cp "$header" "$work/cuda.h"
  VMMIPC_IN_NS=1 exec unshare -m "$0" "$work"
fi

# Hide every toolkit the search could reach by itself.
mkdir -p "$work/empty"
for d in /usr/local/cuda /usr/local/cuda-*; do
  [ -d "$d" ] && mount --bind "$work/empty" "$(readlink -f "$d")"
done
unset CUDAToolkit_ROOT CUDA_HOME CUDA_PATH
mkdir -p "$work/tk/include" "$work/old/include" "$work/probe"
cp "$work/cuda.h" "$work/tk/include/"
sed 's/^#define CUDA_VERSION [0-9]*/#define CUDA_VERSION 11080/' "$work/cuda.h" > "$work/old/include/cuda.h"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(probe NONE)\ninclude(%s/cmake/cuda_headers.cmake)\n' \
  "$root" > "$work/probe/CMakeLists.txt"
venv() { # DIR SUBDIR: a virtual environment with cuda.h in site-packages/SUBDIR
  python3 -m venv --without-pip "$1"
  local sp
  sp=$("$1/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$sp/$2"
  cp "$work/cuda.h" "$sp/$2/"
  echo "$sp/$2"
}

passed=0 failed=0
# expect NAME WANT(dir|error) [env ...] [-- cmake args]
expect() {
  local name=$1 want=$2 envs=() args=()
  shift 2
  while (($#)) && [ "$1" != -- ]; do envs+=("$1"); shift; done
  (($#)) && shift && args=("$@")
  rm -rf "$work/probe/b"
  local rc=0 got
  env ${envs[@]+"${envs[@]}"} cmake -S "$work/probe" -B "$work/probe/b" ${args[@]+"${args[@]}"} > "$work/$name.log" 2>&1 || rc=$?
  got=$(sed -n 's/^-- vmmipc: cuda.h [0-9]* in //p' "$work/$name.log")
  if { [ "$want" = error ] && [ "$rc" != 0 ] && [ "$(grep -c 'CMake Error' "$work/$name.log")" = 1 ] &&
       grep -q 'vmmipc: ' "$work/$name.log"; } || { [ "$want" != error ] && [ "$rc" = 0 ] && [ "$got" = "$want" ]; }; then
    echo "cuda_headers $name: ok (${got:-one vmmipc error})"
    passed=$((passed + 1))
  else
    echo "cuda_headers $name: FAILED (rc $rc, found '${got}', wanted '$want'):" >&2
    tail -20 "$work/$name.log" >&2
    failed=$((failed + 1))
  fi
}

expect none error
expect CUDAToolkit_ROOT-variable "$work/tk/include" -- -DCUDAToolkit_ROOT="$work/tk"
expect CUDAToolkit_ROOT-environment "$work/tk/include" CUDAToolkit_ROOT="$work/tk"
expect CUDA_HOME "$work/tk/include" CUDA_HOME="$work/tk"
expect CUDA_PATH "$work/tk/include" CUDA_PATH="$work/tk"
expect VMMIPC_CUDA_INCLUDE_DIR "$work/tk/include" -- -DVMMIPC_CUDA_INCLUDE_DIR="$work/tk/include"
mkdir -p "$work/tk/bin" && printf '#!/bin/sh\nexit 0\n' > "$work/tk/bin/nvcc" && chmod +x "$work/tk/bin/nvcc"
expect nvcc-on-PATH "$work/tk/include" PATH="$work/tk/bin:$PATH"
rm -r "$work/tk/bin"
expect wheel-cu13 "$(venv "$work/venv13" nvidia/cu13/include)" PATH="$work/venv13/bin:$PATH"
expect wheel-cu12 "$(venv "$work/venv12" nvidia/cu12/include)" PATH="$work/venv12/bin:$PATH"
expect wheel-cuda_runtime "$(venv "$work/venvrt" nvidia/cuda_runtime/include)" PATH="$work/venvrt/bin:$PATH"
expect older-than-12 error CUDA_HOME="$work/old"
echo "cuda_headers: $passed passed, $failed failed"
[ "$failed" = 0 ]
