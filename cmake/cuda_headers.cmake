# Finds cuda.h, the one CUDA file the library needs to build (the driver is
# loaded at run time, so nothing is linked). Sets VMMIPC_CUDA_INCLUDE_DIR and
# VMMIPC_CUDA_HEADER_VERSION (e.g. 13000), or stops with one error that names
# every way to provide the header. Looked for, in this order:
#   -DVMMIPC_CUDA_INCLUDE_DIR=<dir with cuda.h>
#   CUDAToolkit_ROOT (CMake variable or environment), CUDA_HOME, CUDA_PATH
#   the toolkit of an nvcc on PATH, /usr/local/cuda
#   NVIDIA's CUDA wheels in the site-packages of the python3 on PATH
#   the compiler's default include path (e.g. /usr/include)
set(VMMIPC_CUDA_MIN_VERSION 12000)
if(VMMIPC_CUDA_INCLUDE_DIR AND NOT EXISTS "${VMMIPC_CUDA_INCLUDE_DIR}/cuda.h")
  message(STATUS "vmmipc: ${VMMIPC_CUDA_INCLUDE_DIR} has no cuda.h; looking again")
  unset(VMMIPC_CUDA_INCLUDE_DIR CACHE)
endif()

set(_vmmipc_cuda_roots)
foreach(_root IN ITEMS "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}" "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}")
  if(_root)
    list(APPEND _vmmipc_cuda_roots "${_root}")
  endif()
endforeach()
find_program(VMMIPC_NVCC nvcc NO_CACHE)
if(VMMIPC_NVCC)
  get_filename_component(_nvcc_dir "${VMMIPC_NVCC}" REALPATH)
  get_filename_component(_nvcc_dir "${_nvcc_dir}" DIRECTORY)
  get_filename_component(_nvcc_root "${_nvcc_dir}" DIRECTORY)
  list(APPEND _vmmipc_cuda_roots "${_nvcc_root}")
endif()
list(APPEND _vmmipc_cuda_roots /usr/local/cuda)

# Wheels: CUDA 13 puts its headers in nvidia/cu13/include, CUDA 12's runtime
# wheel in nvidia/cuda_runtime/include.
set(_vmmipc_wheel_dirs)
find_program(VMMIPC_PYTHON3 python3 NO_CACHE)
if(VMMIPC_PYTHON3)
  execute_process(
    COMMAND "${VMMIPC_PYTHON3}" -c
            "import site, sysconfig; p = site.getsitepackages() + [site.getusersitepackages(), sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]; print(';'.join(dict.fromkeys(p)))"
    OUTPUT_VARIABLE _vmmipc_site RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 20)
  if(_rc EQUAL 0)
    foreach(_sp IN LISTS _vmmipc_site)
      foreach(_sub IN ITEMS nvidia/cu13/include nvidia/cu12/include nvidia/cuda_runtime/include)
        list(APPEND _vmmipc_wheel_dirs "${_sp}/${_sub}")
      endforeach()
    endforeach()
  endif()
endif()

find_path(VMMIPC_CUDA_INCLUDE_DIR cuda.h
  HINTS ${_vmmipc_cuda_roots}
  PATH_SUFFIXES include targets/x86_64-linux/include targets/sbsa-linux/include
  NO_DEFAULT_PATH
  DOC "Directory of cuda.h (the CUDA driver API header)")
find_path(VMMIPC_CUDA_INCLUDE_DIR cuda.h HINTS ${_vmmipc_wheel_dirs} NO_DEFAULT_PATH)
find_path(VMMIPC_CUDA_INCLUDE_DIR cuda.h)

set(_vmmipc_cuda_ways
  "  -DCUDAToolkit_ROOT=<toolkit>, or the environment variable CUDA_HOME or CUDA_PATH (cuda.h in <toolkit>/include)\n"
  "  a CUDA toolkit in /usr/local/cuda, or an nvcc on PATH (its toolkit's include/)\n"
  "  NVIDIA's CUDA wheels in the python3 on PATH: site-packages/nvidia/cu13/include (CUDA 13, e.g. from PyTorch) or nvidia/cuda_runtime/include (pip install nvidia-cuda-runtime-cu12)\n"
  "  -DVMMIPC_CUDA_INCLUDE_DIR=<directory that holds cuda.h>\n"
  "Only the header is needed: the driver is loaded at run time. docs/install.md has the details.")
string(CONCAT _vmmipc_cuda_ways ${_vmmipc_cuda_ways})

if(NOT VMMIPC_CUDA_INCLUDE_DIR)
  message(FATAL_ERROR "vmmipc: cuda.h (the CUDA 12 or 13 driver API header) not found. Give it one of these ways:\n"
                      "${_vmmipc_cuda_ways}")
endif()
file(STRINGS "${VMMIPC_CUDA_INCLUDE_DIR}/cuda.h" _vmmipc_cuda_line REGEX "^#define CUDA_VERSION [0-9]+" LIMIT_COUNT 1)
string(REGEX MATCH "[0-9]+" VMMIPC_CUDA_HEADER_VERSION "${_vmmipc_cuda_line}")
if(NOT VMMIPC_CUDA_HEADER_VERSION OR VMMIPC_CUDA_HEADER_VERSION LESS VMMIPC_CUDA_MIN_VERSION)
  set(_found "${VMMIPC_CUDA_INCLUDE_DIR}/cuda.h")
  unset(VMMIPC_CUDA_INCLUDE_DIR CACHE)
  message(FATAL_ERROR "vmmipc: ${_found} is CUDA '${VMMIPC_CUDA_HEADER_VERSION}', older than ${VMMIPC_CUDA_MIN_VERSION} "
                      "(or not the driver API header). Give a CUDA 12 or 13 cuda.h one of these ways:\n${_vmmipc_cuda_ways}")
endif()
message(STATUS "vmmipc: cuda.h ${VMMIPC_CUDA_HEADER_VERSION} in ${VMMIPC_CUDA_INCLUDE_DIR}")
