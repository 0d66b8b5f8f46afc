#!/usr/bin/env bash
# A partial build installs what it built. Configures a build of the library
# alone (no tests, benchmarks or examples; the Python module as configure
# finds it), then:
#   1. installs before building anything: must stop, naming the target to build;
#   2. builds only the target vmmipc and installs: must succeed with both
#      library variants, the packages and the launcher, and say that the
#      Python module (not built) is left out.
#   .ci/partial_install.sh WORK_DIR [cmake arguments...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?usage: partial_install.sh WORK_DIR [cmake arguments]}
shift
rm -rf "$work"
mkdir -p "$work"
build=$work/build prefix=$work/prefix
cmake -S "$root" -B "$build" -DVMMIPC_BUILD_TESTS=OFF -DVMMIPC_BUILD_BENCHMARKS=OFF -DVMMIPC_BUILD_EXAMPLES=OFF \
  "$@" > "$work/configure.log" 2>&1 || { cat "$work/configure.log" >&2; exit 1; }
fail() { echo "partial_install: $*" >&2; exit 1; }
if cmake --install "$build" --prefix "$prefix" > "$work/install0.log" 2>&1; then
  fail "installing an unbuilt tree succeeded"
fi
tr -s " \n" "  " < "$work/install0.log" | grep -q "build the library first (cmake --build $build --target vmmipc)" ||
  { cat "$work/install0.log" >&2; fail "installing an unbuilt tree did not say what to build"; }
cmake --build "$build" -j2 --target vmmipc > "$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "installing the library alone failed"; }
for f in include/vmmipc.h bin/vmmipc-mpirun; do
  [ -e "$prefix/$f" ] || fail "no $f in the installed tree"
done
for f in libvmmipc.so libvmmipc.a cmake/vmmipc/vmmipcConfig.cmake pkgconfig/vmmipc.pc; do
  [ -n "$(find "$prefix" -path "*/$f" -print -quit)" ] || fail "no $f in the installed tree"
done
if grep -q '^VMMIPC_BUILD_PYTHON:BOOL=ON' "$build/CMakeCache.txt"; then
  grep -q "the Python module is not built, so not installed" "$work/install.log" ||
    { cat "$work/install.log" >&2; fail "the install did not say that the Python module was left out"; }
  [ -z "$(find "$prefix" -name '__init__.py' -print -quit)" ] || fail "a Python package without its extension was installed"
  [ ! -e "$prefix/bin/vmmipc-python" ] || fail "vmmipc-python was installed without the module"
fi
echo "partial_install: an unbuilt tree names the target to build; the library alone installs ($(find "$prefix" -type f | wc -l) files)"
