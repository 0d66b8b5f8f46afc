# Which MPI a header or a launcher belongs to. Installed next to the package
# config, which uses vmmipc_mpi_header_flavor to check that a consumer finds
# the MPI vmmipc was built with.

# openmpi, mpich or unknown, from the macros of <dir>/mpi.h.
function(vmmipc_mpi_header_flavor out header_dirs)
  set(flavor unknown)
  foreach(dir IN LISTS header_dirs)
    if(EXISTS "${dir}/mpi.h")
      file(STRINGS "${dir}/mpi.h" hits REGEX "#define (OPEN_MPI|MPICH_VERSION|MPICH_NAME) ")
      if(hits MATCHES "OPEN_MPI")
        set(flavor openmpi)
      elseif(hits MATCHES "MPICH")
        set(flavor mpich)
      endif()
      break()
    endif()
  endforeach()
  set(${out} ${flavor} PARENT_SCOPE)
endfunction()

# openmpi, mpich (Hydra) or unknown, from `<launcher> --version`.
function(vmmipc_mpi_launcher_flavor out launcher)
  set(flavor unknown)
  if(launcher)
    execute_process(COMMAND "${launcher}" --version OUTPUT_VARIABLE text ERROR_VARIABLE text
                    RESULT_VARIABLE rc TIMEOUT 20)
    if(text MATCHES "Open MPI|OpenRTE")
      set(flavor openmpi)
    elseif(text MATCHES "HYDRA|MPICH|Intel\\(R\\) MPI")
      set(flavor mpich)
    endif()
  endif()
  set(${out} ${flavor} PARENT_SCOPE)
endfunction()
