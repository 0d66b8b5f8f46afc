#!/usr/bin/env bash
# Installs a build (with its stand-in component) to one prefix, moves the
# installed tree elsewhere, and builds this consumer against the moved tree
# six ways: CMake with vmmipc::vmmipc and vmmipc::vmmipc_static, in a C
# project and in a C++-only one, and pkg-config with vmmipc and vmmipc-static.
# Runs each with 2 ranks under the installed launcher (bin/vmmipc-mpirun,
# without the run-as-root variables the CI sets: it must set them itself)
# on the installed stand-in, and checks that each links one MPI and the
# library it asked for; and that a failed driver load names the installed
# stand-in.
#   .ci/consumer/run.sh BUILD_DIR WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/installed" >/dev/null
cmake --install "$build" --prefix "$work/installed" --component standin >/dev/null
mv "$work/installed" "$work/moved"
prefix=$work/moved
pc=$(dirname "$(find "$prefix" -name vmmipc.pc)")
libdir=$(dirname "$pc")
standin=$libdir/vmmipc/libvmmipc_standin.so
[ -f "$standin" ] || { echo "consumer: no stand-in at $standin" >&2; exit 1; }
mpirun=(env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$prefix/bin/vmmipc-mpirun")
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")

passed=0 failed=0
check() { # NAME EXE STATIC(0|1)
  local name=$1 exe=$2 static=$3 libs mpis
  libs=$(ldd "$exe")
  mpis=$(grep -c -E 'libmpi\.so|libmpich\.so' <<<"$libs" || true)
  if [ "$mpis" != 1 ]; then
    echo "consumer $name: links $mpis MPI libraries:" >&2
    grep -E 'libmpi|libmpich' <<<"$libs" >&2 || true
    failed=$((failed + 1)); return
  fi
  if [ "$static" = 1 ] && grep -q 'libvmmipc\.so' <<<"$libs"; then
    echo "consumer $name: asked for the static library but links libvmmipc.so" >&2
    failed=$((failed + 1)); return
  fi
  if [ "$static" = 0 ] && ! grep -q "libvmmipc\.so.* => $libdir/" <<<"$libs"; then
    echo "consumer $name: does not load libvmmipc.so from $libdir:" >&2
    grep vmmipc <<<"$libs" >&2 || true
    failed=$((failed + 1)); return
  fi
  if VMMIPC_CUDA_DRIVER=$standin "${mpirun[@]}" 2 "$exe" > "$work/$name.log" 2>&1 &&
     [ "$(grep -c 'mapped 2 buffer' "$work/$name.log")" = 2 ]; then
    echo "consumer $name: ok ($(grep -m1 "^consumer: vmmipc" "$work/$name.log"))"
    passed=$((passed + 1))
  else
    echo "consumer $name: FAILED:" >&2
    cat "$work/$name.log" >&2
    failed=$((failed + 1))
  fi
}

cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
# A C project, and a C++-only one (cxx/: no C language enabled).
for kind in shared static cxx-shared cxx-static; do
  static=0 src=$here compiler=(-DCMAKE_C_COMPILER="$cc")
  case $kind in *static) static=1 ;; esac
  case $kind in cxx-*) src=$here/cxx compiler=(-DCMAKE_CXX_COMPILER="$cxx") ;; esac
  cmake -S "$src" -B "$work/cmake-$kind" -DCMAKE_PREFIX_PATH="$prefix" "${compiler[@]}" \
    -DCONSUMER_STATIC=$static > "$work/cmake-$kind.log" 2>&1 || { cat "$work/cmake-$kind.log" >&2; exit 1; }
  cmake --build "$work/cmake-$kind" > "$work/cmake-$kind-build.log" 2>&1 ||
    { cat "$work/cmake-$kind-build.log" >&2; exit 1; }
  check "cmake-$kind" "$work/cmake-$kind/consumer" $static
done
export PKG_CONFIG_PATH=$pc
# shellcheck disable=SC2046 # pkg-config prints a list of flags
"$cc" "$here/main.c" -o "$work/pc-shared" $(pkg-config --cflags --libs vmmipc) -Wl,-rpath,"$(pkg-config --variable=libdir vmmipc)"
check pc-shared "$work/pc-shared" 0
# shellcheck disable=SC2046
"$cc" "$here/main.c" -o "$work/pc-static" $(pkg-config --cflags --libs vmmipc-static)
check pc-static "$work/pc-static" 1
# No driver: the message names the stand-in installed next to the library.
if VMMIPC_CUDA_DRIVER=/nonexistent/libcuda.so.1 "${mpirun[@]}" 1 "$work/cmake-shared/consumer" > "$work/nodriver.log" 2>&1 ||
   ! grep -qF "without a GPU, the CPU stand-in: VMMIPC_CUDA_DRIVER=$(realpath "$standin")" "$work/nodriver.log"; then
  echo "consumer: a failed driver load does not name the installed stand-in:" >&2
  cat "$work/nodriver.log" >&2
  failed=$((failed + 1))
else
  echo "consumer: a failed driver load names $(realpath "$standin")"
  passed=$((passed + 1))
fi
echo "consumer: $passed passed, $failed failed"
[ "$failed" = 0 ]
