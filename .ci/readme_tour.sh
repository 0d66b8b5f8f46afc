#!/usr/bin/env bash
# Extracts the README's API tour (the first ```c block after "## API tour")
# and compiles it against include/ and cuda.h with the MPI compiler wrapper,
# warnings as errors: the tour a newcomer copies must build.
#   .ci/readme_tour.sh BUILD_DIR   (a configured build: for cuda.h's folder and the MPI wrapper)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: readme_tour.sh BUILD_DIR}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
awk '/^## API tour/{tour=1} tour&&/^```c$/{code=1; next} code&&/^```$/{exit} code{print}' "$root/README.md" > "$out/tour.c"
[ -s "$out/tour.c" ] || { echo "readme_tour: no C block under '## API tour' in README.md" >&2; exit 1; }
cuda_inc=$(sed -n 's/^VMMIPC_CUDA_INCLUDE_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
mpicc=$(sed -n 's/^MPI_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
"${mpicc:-mpicc}" -std=c11 -Wall -Wextra -Werror -c "$out/tour.c" -I"$root/include" ${cuda_inc:+-I"$cuda_inc"} \
  -o "$out/tour.o"
echo "readme_tour: the API tour ($(wc -l < "$out/tour.c") lines) compiles"
