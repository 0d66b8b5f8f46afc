# shellcheck shell=bash
# Sourced by the scripts: Open MPI as root, and no NVLink multicast.
# (cuda.h is found by cmake/cuda_headers.cmake; CUDAToolkit_ROOT, CUDA_HOME
# or CUDA_PATH point it elsewhere.)
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Never let NCCL or PyTorch use NVLink multicast on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
