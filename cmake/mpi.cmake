# The MPI: which one the library is built with (VMMIPC_MPI_FLAVOR: openmpi,
# mpich or unknown), a launcher of the same MPI, and the launcher flags the
# tests, examples and benchmarks use (VMMIPC_MPIEXEC_ARGS).
find_package(MPI REQUIRED COMPONENTS C CXX)
include(${CMAKE_CURRENT_LIST_DIR}/mpi_flavor.cmake)

set(_dirs ${MPI_C_HEADER_DIR} ${MPI_C_INCLUDE_DIRS} ${MPI_C_COMPILER_INCLUDE_DIRS})
vmmipc_mpi_header_flavor(VMMIPC_MPI_FLAVOR "${_dirs}")
vmmipc_mpi_launcher_flavor(_launcher_flavor "${MPIEXEC_EXECUTABLE}")

# Debian and others install several MPIs side by side; FindMPI may pair one
# MPI's compiler wrapper with the default (other) MPI's mpiexec.
if(NOT VMMIPC_MPI_FLAVOR STREQUAL "unknown" AND NOT _launcher_flavor STREQUAL VMMIPC_MPI_FLAVOR)
  set(_names mpiexec.${VMMIPC_MPI_FLAVOR} mpirun.${VMMIPC_MPI_FLAVOR})
  if(VMMIPC_MPI_FLAVOR STREQUAL "mpich")
    list(APPEND _names mpiexec.hydra)
  endif()
  find_program(_vmmipc_mpiexec NAMES ${_names} NO_CACHE)
  if(_vmmipc_mpiexec)
    message(STATUS "vmmipc: ${MPIEXEC_EXECUTABLE} launches another MPI (${_launcher_flavor}) than the library's "
                   "(${VMMIPC_MPI_FLAVOR}); using ${_vmmipc_mpiexec}")
    set(MPIEXEC_EXECUTABLE "${_vmmipc_mpiexec}" CACHE FILEPATH "Executable for running MPI programs." FORCE)
    set(_launcher_flavor ${VMMIPC_MPI_FLAVOR})
  else()
    set(_level WARNING)
    if(VMMIPC_BUILD_TESTS)
      set(_level FATAL_ERROR)
    endif()
    message(${_level} "vmmipc: the library is built with ${VMMIPC_MPI_FLAVOR} (${MPI_C_COMPILER}) but "
                      "MPIEXEC_EXECUTABLE '${MPIEXEC_EXECUTABLE}' launches ${_launcher_flavor}; "
                      "set -DMPIEXEC_EXECUTABLE to the ${VMMIPC_MPI_FLAVOR} launcher")
  endif()
endif()

# Open MPI refuses more ranks than cores without --oversubscribe, and its
# single-copy (CMA) transport needs ptrace rights that containers lack.
# MPICH's Hydra needs neither.
set(VMMIPC_LAUNCHER_FLAGS "auto" CACHE STRING
    "Extra mpiexec flags for the tests, examples and benchmarks, as one string; 'auto': chosen for the launcher's MPI")
if(VMMIPC_LAUNCHER_FLAGS STREQUAL "auto")
  if(_launcher_flavor STREQUAL "openmpi")
    set(VMMIPC_MPIEXEC_ARGS --oversubscribe --mca btl_vader_single_copy_mechanism none)
  else()
    set(VMMIPC_MPIEXEC_ARGS)
  endif()
else()
  separate_arguments(VMMIPC_MPIEXEC_ARGS UNIX_COMMAND "${VMMIPC_LAUNCHER_FLAGS}")
endif()
list(JOIN VMMIPC_MPIEXEC_ARGS " " _args)
message(STATUS "vmmipc: MPI ${VMMIPC_MPI_FLAVOR} (${MPI_C_COMPILER}); launcher ${MPIEXEC_EXECUTABLE} "
               "(${_launcher_flavor}) ${_args}")

# The same launcher and flags for the scripts (demo.sh, run-gpu.sh) and for
# users' commands: <build>/vmmipc-mpirun, installed as <prefix>/bin/vmmipc-mpirun.
list(JOIN VMMIPC_MPIEXEC_ARGS " " VMMIPC_MPIEXEC_ARGS_SH)
set(VMMIPC_LAUNCHER_FLAVOR ${_launcher_flavor})
configure_file(${CMAKE_CURRENT_LIST_DIR}/mpirun.sh.in ${PROJECT_BINARY_DIR}/vmmipc-mpirun @ONLY
               FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

# ctest's MPI launches: each with an Open MPI session directory of its own
# (cmake/ctest_session.sh says why). Every test that launches ranks starts
# its command with VMMIPC_TEST_MPIEXEC, or with VMMIPC_TEST_SESSION before a
# script that launches them; harness.private_session checks every registered
# command that names the launcher or one of those scripts.
set(VMMIPC_TEST_SESSION ${CMAKE_CURRENT_LIST_DIR}/ctest_session.sh)
set(VMMIPC_TEST_MPIEXEC ${VMMIPC_TEST_SESSION} ${MPIEXEC_EXECUTABLE})
