# Sourced by the scripts: where the CUDA headers are, and Open MPI as root.
if [ -z "${CUDAToolkit_ROOT:-}" ] && [ -d /usr/local/cuda ]; then
  export CUDAToolkit_ROOT=/usr/local/cuda
fi
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Never let NCCL or PyTorch use NVLink multicast on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
