#!/usr/bin/env bash
# Checks what the build needs by trying it, not by asking a package manager:
#   cmake >= 3.25 on PATH; a C11 and a C++17 compiler and make or ninja;
#   an MPI: compiler wrappers that build an MPI program, and its launcher
#   (Open MPI or MPICH; VMMIPC_MPI=openmpi|mpich picks one of several);
#   for `deps.sh test` also Google Test, as CMake finds it (package or sources).
# What works is never reinstalled, and when any MPI is present no other is
# installed. What is missing is installed with apt-get when that is possible
# (root or sudo without a password, and a reachable archive); otherwise, or
# with VMMIPC_NO_INSTALL=1, it names what is missing and how to get it, and
# fails. cuda.h is looked for when configuring (see docs/install.md).
#   deps.sh [demo|test]   (default: test)
set -uo pipefail
want=${1:-test}
case "$want" in demo|test) ;; *) echo "usage: deps.sh [demo|test]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/mpi.sh"
say() { echo "deps: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Each check sets `found` (what works) or `missing` (what is not there),
# `pkgs` (the Debian/Ubuntu packages that provide it) and `how` (other ways).
check_cmake() {
  pkgs="cmake" how="or 'python3 -m pip install --user cmake' (any cmake >= 3.25 on PATH)"
  local v
  if ! command -v cmake >/dev/null 2>&1; then missing="cmake (none on PATH)"; return 1; fi
  v=$(cmake --version 2>/dev/null | sed -n '1s/^cmake version \([0-9][0-9.]*\).*/\1/p')
  if [ -z "$v" ] || [ "$(printf '%s\n3.25\n' "$v" | sort -V | head -1)" != "3.25" ]; then
    missing="cmake >= 3.25 ($(command -v cmake) is ${v:-unreadable})"
    return 1
  fi
  found="cmake $v ($(command -v cmake))"
}

check_compilers() {
  pkgs="build-essential" how="or a C11/C++17 compiler pair in CC/CXX and make or ninja on PATH"
  local cc cxx tool
  cc=$(vmmipc_first "${CC:-cc}" gcc clang || true)
  cxx=$(vmmipc_first "${CXX:-c++}" g++ clang++ || true)
  tool=$(vmmipc_first make ninja || true)
  printf '#if !defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L\n#error C11\n#endif\nint main(void) { return 0; }\n' > "$tmp/t.c"
  printf '#include <optional>\n#include <thread>\nint main() { std::optional<int> o{0}; return *o; }\n' > "$tmp/t.cc"
  missing=""
  if [ -z "$cc" ] || ! "$cc" -std=c11 "$tmp/t.c" -o "$tmp/c.out" >/dev/null 2>&1; then missing="a C11 compiler (${CC:-cc})"; fi
  if [ -z "$cxx" ] || ! "$cxx" -std=c++17 "$tmp/t.cc" -o "$tmp/cxx.out" >/dev/null 2>&1; then
    missing="${missing:+$missing, }a C++17 compiler (${CXX:-c++})"
  fi
  [ -n "$tool" ] || missing="${missing:+$missing, }make or ninja"
  [ -z "$missing" ] || return 1
  found="compilers: $(basename "$cc") ($("$cc" -dumpfullversion -dumpversion 2>/dev/null | head -1)), $(basename "$cxx"), $(basename "$tool")"
}

check_mpi() {
  local flavor
  vmmipc_mpi_find || exit 2
  flavor=${VMMIPC_MPI:-$VMMIPC_MPI_FLAVOR}
  # Complete the MPI that is there; Open MPI only where none is.
  case "$flavor" in
    mpich) pkgs="mpich libmpich-dev" ;;
    *) pkgs="openmpi-bin libopenmpi-dev" ;;
  esac
  how="or load an MPI environment module (its mpicc, mpicxx and mpiexec first on PATH)"
  missing=""
  if [ -z "$VMMIPC_MPICC" ] || [ -z "$VMMIPC_MPICXX" ]; then
    missing="MPI compiler wrappers (mpicc, mpicxx${VMMIPC_MPI:+ .$VMMIPC_MPI})"
  else
    printf '#include <mpi.h>\nint main(int c, char **v) { MPI_Init(&c, &v); return MPI_Finalize(); }\n' > "$tmp/m.c"
    "$VMMIPC_MPICC" "$tmp/m.c" -o "$tmp/m.out" >/dev/null 2>&1 || missing="a working MPI C compiler ($VMMIPC_MPICC cannot build an MPI program)"
  fi
  [ -n "$VMMIPC_MPIEXEC" ] || missing="${missing:+$missing, }an MPI launcher (mpiexec or mpirun${VMMIPC_MPI:+ .$VMMIPC_MPI})"
  [ -z "$missing" ] || return 1
  local name=$VMMIPC_MPI_FLAVOR
  case "$name" in openmpi) name="Open MPI" ;; mpich) name="MPICH" ;; esac
  found="MPI: $name ($(basename "$VMMIPC_MPICC"), $(basename "$VMMIPC_MPICXX"), $VMMIPC_MPIEXEC)"
}

check_gtest() {
  pkgs="libgtest-dev" how="or set VMMIPC_GTEST_SOURCE_DIR to a googletest source tree"
  local src=${VMMIPC_GTEST_SOURCE_DIR:-}
  # As mpi_tests/gtest.cmake does: the package CMake finds, else sources.
  mkdir -p "$tmp/g"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(probe CXX)\nfind_package(GTest QUIET)\nif(NOT TARGET GTest::gtest)\n  message(FATAL_ERROR "no GTest")\nendif()\n' > "$tmp/g/CMakeLists.txt"
  if [ -z "$src" ] && cmake -S "$tmp/g" -B "$tmp/g/b" >/dev/null 2>&1; then
    found="Google Test: package found by CMake"
    return 0
  fi
  for d in ${src:+"$src"} /usr/src/googletest; do
    if [ -f "$d/CMakeLists.txt" ]; then found="Google Test: sources in $d"; return 0; fi
  done
  missing="Google Test (no package that CMake finds, no sources${src:+ in $src})"
  return 1
}

# The Python module's tests: Python 3 with its headers, mpi4py and pytest.
# Optional: where it cannot be installed (no apt, as on the GPU machine) the
# build leaves the module out or its tests report what is missing.
check_python() {
  pkgs="python3-dev python3-mpi4py python3-pytest" how="(optional: the Python module and its tests)"
  local py
  for py in /usr/bin/python3 python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    if "$py" -c 'import sysconfig, os, mpi4py, pytest; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' >/dev/null 2>&1; then
      found="Python module test needs: $py with headers, mpi4py and pytest"
      return 0
    fi
  done
  missing="Python 3 headers, mpi4py or pytest (for the Python module)"
  return 1
}

checks=(cmake compilers mpi)
[ "$want" = test ] && checks+=(gtest)
# Python only where apt can add it; elsewhere it is never a reason to fail.
if [ "$want" = test ] && command -v apt-get >/dev/null 2>&1 && [ "${VMMIPC_NO_INSTALL:-0}" != 1 ]; then
  checks+=(python)
fi

# First pass: what is there.
todo=() todo_pkgs=()
for c in "${checks[@]}"; do
  found="" missing="" pkgs="" how=""
  if "check_$c"; then
    say "$found: ok"
  else
    read -ra p <<<"$pkgs"
    todo+=("$c") todo_pkgs+=("${p[@]}")
    say "missing: $missing"
  fi
done
((${#todo[@]})) || exit 0

# Whether we may and can install.
why=""
sudo=()
if [ "${VMMIPC_NO_INSTALL:-0}" = 1 ]; then
  why="VMMIPC_NO_INSTALL=1"
elif ! command -v apt-get >/dev/null 2>&1; then
  why="no apt-get on this system"
elif [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n); else why="not root, and no sudo without a password"; fi
fi
if [ -z "$why" ]; then
  log="$tmp/apt.log"
  say "installing with apt-get: ${todo_pkgs[*]}"
  if ! "${sudo[@]}" apt-get update >"$log" 2>&1; then
    why="apt-get update failed (no network?): $(tail -1 "$log")"
  elif ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${todo_pkgs[@]}" >>"$log" 2>&1; then
    why="apt-get install failed: $(tail -1 "$log")"
  fi
fi

# What is still missing, and how to get it.
left=0
for c in "${todo[@]}"; do
  found="" missing="" pkgs="" how=""
  if "check_$c"; then
    say "$found: installed, ok"
    continue
  fi
  [ "$c" = python ] || left=1   # optional: reported, never fatal
  if [ -z "$why" ]; then
    say "$missing: still missing after installing $pkgs"
  else
    say "$missing: install $pkgs (Debian/Ubuntu) $how"
  fi
done
if ((left)); then
  say "${why:+could not install ($why); }get the above, then run again"
  exit 1
fi
