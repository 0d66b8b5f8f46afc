#!/usr/bin/env bash
# The Python module from an install prefix: installs the build into a
# prefix, moves the prefix (the module finds libvmmipc relative to itself),
# then runs the pytest suites (np 2 and 4) and the example from there on the
# CPU stand-in (the example through the installed bin/vmmipc-mpirun and
# bin/vmmipc-python). Fails if the build did not make the module.
#   .ci/python.sh BUILD_DIR WORK_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1 work=$2
cache="$build/CMakeCache.txt"
if ! grep -q '^VMMIPC_BUILD_PYTHON:BOOL=ON' "$cache"; then
  echo "ci/python: $build did not build the Python module (VMMIPC_BUILD_PYTHON is off; see its configure log)" >&2
  exit 1
fi
py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$cache")
pydir=$(sed -n 's/^VMMIPC_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$cache")
mpirun="$build/vmmipc-mpirun"   # this build's launcher and flags
standin=$(find "$build/mpi_tests/standin" -name 'libvmmipc_standin.so' | head -1)
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
mv "$work/prefix" "$work/moved"
site="$work/moved/$pydir"
[ -f "$site/vmmipc/__init__.pyi" ] && [ -f "$site/vmmipc/py.typed" ] || { echo "ci/python: no stubs in $site" >&2; exit 1; }
export PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 VMMIPC_CUDA_DRIVER="$standin"
cd "$work"   # not the source tree: the installed package is the one imported
"$py" -c "import vmmipc, sys; assert vmmipc.__file__.startswith('$site'), vmmipc.__file__; print('ci/python: vmmipc', vmmipc.version, 'from', vmmipc.__file__)"
for np in 2 4; do
  rc=0
  tests=("$root/python/tests")
  "$mpirun" "$np" "$py" "$root/python/tests/run.py" -q --color=no -p no:cacheprovider "${tests[@]}" || rc=$?
  # 5: pytest collected nothing, which is a failure here, not a pass.
  if [ "$rc" -eq 5 ]; then echo "ci/python: pytest collected no tests (np $np)" >&2; exit 1; fi
  if [ "$rc" -ne 0 ]; then echo "ci/python: pytest failed (np $np, exit $rc)" >&2; exit "$rc"; fi
  # The example as the docs run it: the installed launcher and vmmipc-python
  # (the module's interpreter, the module on its path), nothing else set.
  env -u PYTHONPATH -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    "$work/moved/bin/vmmipc-mpirun" "$np" "$work/moved/bin/vmmipc-python" "$root/examples/python/allgather.py"
done
echo "ci/python: ok"
