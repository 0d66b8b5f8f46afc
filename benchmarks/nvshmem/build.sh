#!/usr/bin/env bash
# Builds the NVSHMEM anchors (nvshmem_bench.cu) where NVSHMEM is found. It
# runs outside CMake, so a missing or broken NVSHMEM never stops the rest.
#   benchmarks/nvshmem/build.sh OUTDIR
# Writes OUTDIR/nvshmem_bench and OUTDIR/nvshmem.env (NVSHMEM_HOME and
# NVSHMEM_LIBDIR, to source before running), or says why not:
#   exit 0  built
#   exit 3  skipped: no NVSHMEM, no nvcc or no MPI compiler wrapper (the reason is printed)
#   exit 1  NVSHMEM found but the compile or link failed (the compiler's output is printed)
# NVSHMEM is looked for in $NVSHMEM_HOME, then in the nvidia/nvshmem folder of
# python3's packages (the nvidia-nvshmem-cu12 / -cu13 wheels: include/,
# lib/libnvshmem_device.a, lib/libnvshmem_host.so.3 and the bootstraps).
# Environment: NVCC (nvcc on PATH, else /usr/local/cuda/bin/nvcc), CUDA_ARCH
# (default: the first GPU's compute capability, else 90), MPICC (mpicc), PYTHON (python3).
# At run time: LD_LIBRARY_PATH must hold NVSHMEM_LIBDIR (the bootstrap plugin
# is loaded from there); scripts/gpu/wave4.sh sets that and NVSHMEM's variables.
set -uo pipefail
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
skip() { echo "nvshmem: skipped: $*"; exit 3; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)

home=${NVSHMEM_HOME:-}
if [ -n "$home" ] && [ ! -f "$home/include/nvshmem.h" ]; then
  skip "NVSHMEM_HOME=$home has no include/nvshmem.h"
fi
if [ -z "$home" ]; then
  py=${PYTHON:-python3}
  command -v "$py" >/dev/null 2>&1 || skip "no NVSHMEM_HOME, and no $py to look for the nvidia-nvshmem package"
  home=$("$py" - <<'EOF' 2>/dev/null
import os, site, sys
dirs = list(sys.path)
for f in ("getsitepackages", "getusersitepackages"):
    try:
        d = getattr(site, f)()
        dirs += d if isinstance(d, list) else [d]
    except Exception:
        pass
try:
    import nvidia  # a namespace package: every folder that holds nvidia/
    dirs += [os.path.dirname(p) for p in nvidia.__path__]
except Exception:
    pass
for d in dirs:
    h = os.path.join(d, "nvidia", "nvshmem")
    if os.path.isfile(os.path.join(h, "include", "nvshmem.h")):
        print(h)
        break
EOF
)
  [ -n "$home" ] || skip "NVSHMEM not found (no NVSHMEM_HOME; no nvidia/nvshmem/include/nvshmem.h in $py's packages)"
fi
lib=$home/lib
[ -d "$lib" ] || lib=$home/lib64
[ -f "$lib/libnvshmem_device.a" ] || skip "$home has no lib/libnvshmem_device.a"
host=""
for f in "$lib"/libnvshmem_host.so "$lib"/libnvshmem_host.so.*; do
  if [ -f "$f" ]; then host=$f; break; fi
done
[ -n "$host" ] || skip "$home has no lib/libnvshmem_host.so*"
echo "nvshmem: found $home (device library $lib/libnvshmem_device.a, host library $host)"

nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || skip "no nvcc (NVCC, PATH, /usr/local/cuda/bin)"
mpicc=${MPICC:-mpicc}
command -v "$mpicc" >/dev/null 2>&1 || skip "no $mpicc (the MPI compiler wrapper gives the MPI flags)"
arch=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}
case "$arch" in ''|*[!0-9]*) arch=90 ;; esac # not a compute capability (no GPU, old nvidia-smi): sm_90

# The MPI flags from the wrapper (Open MPI: --showme, MPICH: -show), in nvcc's words.
show=$("$mpicc" --showme 2>/dev/null) || show=$("$mpicc" -show 2>/dev/null) || skip "$mpicc shows no flags"
mpi=()
first=1
for w in $show; do
  if [ "$first" = 1 ]; then first=0; continue; fi # the underlying compiler
  case "$w" in
    -I*|-L*|-l*) mpi+=("$w") ;;
    -Wl,*) mpi+=("-Xlinker" "${w#-Wl,}") ;;
    -pthread) mpi+=("-Xcompiler" "-pthread") ;;
  esac
done

# The wheel ships libnvshmem_host.so.3 alone: a link name for -lnvshmem_host.
# nvlink does not take -l:file, so the device library stays -lnvshmem_device.
linkdir=$out/nvshmem-link
mkdir -p "$linkdir"
ln -sf "$host" "$linkdir/libnvshmem_host.so"
cuda=$(cd "$(dirname "$nvcc")/.." && pwd)
base=("$nvcc" -std=c++17 -O2 -rdc=true -gencode "arch=compute_$arch,code=sm_$arch"
      -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1 -I"$home/include" -I"$root/benchmarks"
      "$here/nvshmem_bench.cu" -o "$out/nvshmem_bench"
      -L"$linkdir" -L"$lib" -lnvshmem_host -lnvshmem_device "${mpi[@]}"
      -Xlinker -rpath -Xlinker "$lib" -Xlinker -rpath -Xlinker "$linkdir")
echo "nvshmem: ${base[*]}"
if ! "${base[@]}"; then
  # Some builds of the host library leave the driver and NVML to the program.
  more=(-L"$cuda/lib64/stubs" -L"$cuda/lib64" -lcuda -lnvidia-ml -ldl -lpthread)
  echo "nvshmem: the link failed; again with ${more[*]}"
  "${base[@]}" "${more[@]}" || { echo "nvshmem: build failed (sm_$arch, $home)"; exit 1; }
fi
{
  echo "NVSHMEM_HOME=$home"
  echo "NVSHMEM_LIBDIR=$lib"
} > "$out/nvshmem.env"
echo "nvshmem: built $out/nvshmem_bench (sm_$arch); run with LD_LIBRARY_PATH=$lib"
