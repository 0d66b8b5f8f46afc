# Finds what the Python module needs: a Python 3 interpreter with its
# development files (Development.Module) and mpi4py (its C API headers).
# VMMIPC_BUILD_PYTHON defaults to ON when they are found. Python3_EXECUTABLE
# picks the interpreter; without it, an interpreter that lacks mpi4py (a
# pyenv or venv one first on PATH) is passed over for the system's
# /usr/bin/python3 when that one has it.
# Sets VMMIPC_PYTHON_FOUND, VMMIPC_MPI4PY_INCLUDE_DIR and the install folder
# VMMIPC_PYTHON_INSTALL_DIR (cache; relative to the prefix, or absolute).
# mpi4py's include folder, if `python` has an mpi4py built with the same MPI
# as the library (an MPI_Comm of another MPI is another type); else "".
function(vmmipc_mpi4py_include python out)
  set(${out} "" PARENT_SCOPE)
  execute_process(COMMAND ${python} -c "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(mpi4py.get_include()); print(MPI.get_vendor()[0])"
                  OUTPUT_VARIABLE lines ERROR_QUIET RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    return()
  endif()
  string(REPLACE "\n" ";" lines "${lines}")
  list(GET lines 0 inc)
  list(GET lines -1 vendor)
  set(flavor unknown)
  if(vendor STREQUAL "Open MPI")
    set(flavor openmpi)
  elseif(vendor MATCHES "MPICH")
    set(flavor mpich)
  endif()
  if(NOT VMMIPC_MPI_FLAVOR STREQUAL "unknown" AND NOT flavor STREQUAL VMMIPC_MPI_FLAVOR)
    message(STATUS "vmmipc: ${python}'s mpi4py is built with ${vendor}, the library with ${VMMIPC_MPI_FLAVOR}")
    return()
  endif()
  if(EXISTS "${inc}/mpi4py/mpi4py.h")
    set(${out} "${inc}" PARENT_SCOPE)
  endif()
endfunction()

set(VMMIPC_PYTHON_FOUND OFF)
if(VMMIPC_SANITIZE AND NOT DEFINED VMMIPC_BUILD_PYTHON)
  # An instrumented extension cannot load into an interpreter that is not.
  set(VMMIPC_BUILD_PYTHON OFF CACHE BOOL "Build the Python module (needs Python 3 development files and mpi4py)")
  message(STATUS "vmmipc: Python module not built: a sanitizer build (VMMIPC_SANITIZE)")
elseif(NOT DEFINED VMMIPC_BUILD_PYTHON OR VMMIPC_BUILD_PYTHON)
  set(_vmp_user_python "${Python3_EXECUTABLE}")
  find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
  set(_vmp_inc "")
  if(Python3_FOUND)
    vmmipc_mpi4py_include(${Python3_EXECUTABLE} _vmp_inc)
  endif()
  if(NOT _vmp_inc AND NOT _vmp_user_python AND EXISTS /usr/bin/python3
     AND NOT Python3_EXECUTABLE STREQUAL "/usr/bin/python3")
    vmmipc_mpi4py_include(/usr/bin/python3 _vmp_inc)
    if(_vmp_inc)
      message(STATUS "vmmipc: ${Python3_EXECUTABLE} has no mpi4py for this MPI; using /usr/bin/python3 for the Python module")
      set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python interpreter" FORCE)
      set(Python3_EXECUTABLE /usr/bin/python3)
      unset(_Python3_EXECUTABLE CACHE)
      unset(_Python3_INCLUDE_DIR CACHE)
      unset(_Python3_INTERPRETER_PROPERTIES CACHE)
      unset(_Python3_INTERPRETER_SIGNATURE CACHE)
      unset(_Python3_DEVELOPMENT_MODULE_SIGNATURE CACHE)
      find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
    endif()
  endif()
  if(Python3_FOUND AND _vmp_inc)
    set(VMMIPC_PYTHON_FOUND ON)
    set(VMMIPC_MPI4PY_INCLUDE_DIR "${_vmp_inc}")
    message(STATUS "vmmipc: Python module for ${Python3_EXECUTABLE} (${Python3_VERSION}), mpi4py in ${_vmp_inc}; "
                   "run scripts with ${PROJECT_BINARY_DIR}/python/vmmipc-python (that interpreter, the module on "
                   "its path)")
  elseif(NOT Python3_FOUND)
    set(_vmp_why "no Python 3 with development files (python3-dev); set Python3_EXECUTABLE")
  else()
    set(_vmp_why "${Python3_EXECUTABLE} has no mpi4py built with this MPI (python3-mpi4py); set Python3_EXECUTABLE")
  endif()
endif()
option(VMMIPC_BUILD_PYTHON "Build the Python module (needs Python 3 development files and mpi4py)"
       ${VMMIPC_PYTHON_FOUND})
if(VMMIPC_BUILD_PYTHON AND NOT VMMIPC_PYTHON_FOUND)
  message(FATAL_ERROR "vmmipc: VMMIPC_BUILD_PYTHON is ON but ${_vmp_why}")
elseif(NOT VMMIPC_BUILD_PYTHON AND DEFINED _vmp_why)
  message(STATUS "vmmipc: Python module not built: ${_vmp_why}")
endif()
if(VMMIPC_BUILD_PYTHON)
  set(VMMIPC_PYTHON_INSTALL_DIR "lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/site-packages"
      CACHE PATH "Where 'cmake --install' puts the Python package vmmipc (relative to the prefix, or absolute)")
  # vmmipc-python: the interpreter above with the module on its path, in the
  # build tree next to the package and installed in <prefix>/bin (relative
  # to itself there: the installed tree stays relocatable).
  set(VMP_SITE "$here")
  configure_file(${CMAKE_CURRENT_LIST_DIR}/python.sh.in ${PROJECT_BINARY_DIR}/python/vmmipc-python @ONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  if(IS_ABSOLUTE "${VMMIPC_PYTHON_INSTALL_DIR}")
    set(VMP_SITE "${VMMIPC_PYTHON_INSTALL_DIR}")
  else()
    file(RELATIVE_PATH VMP_SITE "/p/${CMAKE_INSTALL_BINDIR}" "/p/${VMMIPC_PYTHON_INSTALL_DIR}")
    set(VMP_SITE "$here/${VMP_SITE}")
  endif()
  configure_file(${CMAKE_CURRENT_LIST_DIR}/python.sh.in ${PROJECT_BINARY_DIR}/python/installed/vmmipc-python @ONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endif()
