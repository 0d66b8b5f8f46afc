# Header, libraries, an exported CMake package (vmmipc::vmmipc and
# vmmipc::vmmipc_static), pkg-config files (vmmipc, vmmipc-static), and the
# CPU stand-in driver as the optional component "standin". Everything is
# relocatable: the CMake package and the .pc files find the prefix from
# their own location.
include(CMakePackageConfigHelpers)
install(FILES ${PROJECT_SOURCE_DIR}/include/vmmipc.h ${PROJECT_SOURCE_DIR}/include/vmmipc_win_device.h
              ${PROJECT_SOURCE_DIR}/include/vmmipc_device.cuh DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS vmmipc vmmipc_static EXPORT vmmipcTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(VMMIPC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/vmmipc)
install(EXPORT vmmipcTargets NAMESPACE vmmipc:: DESTINATION ${VMMIPC_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/vmmipcConfig.cmake.in
  ${PROJECT_BINARY_DIR}/vmmipcConfig.cmake INSTALL_DESTINATION ${VMMIPC_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/vmmipcConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/vmmipcConfig.cmake ${PROJECT_BINARY_DIR}/vmmipcConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/mpi_flavor.cmake
        DESTINATION ${VMMIPC_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own folder; MPI comes
# from the .pc of the MPI the library was built with (ompi-c or mpich), or,
# for another MPI, from the flags CMake found for it.
file(RELATIVE_PATH VMMIPC_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(REGEX REPLACE "/$" "" VMMIPC_PC_TO_PREFIX "${VMMIPC_PC_TO_PREFIX}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(VMMIPC_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
  set(VMMIPC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  set(VMMIPC_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(VMMIPC_PC_PREFIX "\${pcfiledir}/${VMMIPC_PC_TO_PREFIX}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(VMMIPC_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(VMMIPC_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(VMMIPC_PC_REQUIRES "")
set(VMMIPC_PC_MPI_CFLAGS "")
set(VMMIPC_PC_MPI_LIBS "")
if(VMMIPC_MPI_FLAVOR STREQUAL "openmpi")
  set(VMMIPC_PC_REQUIRES "ompi-c")
elseif(VMMIPC_MPI_FLAVOR STREQUAL "mpich")
  set(VMMIPC_PC_REQUIRES "mpich")
else()
  foreach(dir IN LISTS MPI_C_INCLUDE_DIRS)
    string(APPEND VMMIPC_PC_MPI_CFLAGS " -I${dir}")
  endforeach()
  foreach(lib IN LISTS MPI_C_LIBRARIES)
    string(APPEND VMMIPC_PC_MPI_LIBS " ${lib}")
  endforeach()
endif()
foreach(kind shared static)
  set(VMMIPC_PC_KIND ${kind})
  if(kind STREQUAL "shared")
    set(VMMIPC_PC_NAME vmmipc)
    set(VMMIPC_PC_LIBS "-L\${libdir} -lvmmipc")
    set(VMMIPC_PC_LIBS_PRIVATE "Libs.private: -ldl -lpthread")
  else()
    # The archive by path, so that a shared libvmmipc next to it is not picked.
    set(VMMIPC_PC_NAME vmmipc-static)
    set(VMMIPC_PC_LIBS "\${libdir}/libvmmipc.a -ldl -lpthread")
    set(VMMIPC_PC_LIBS_PRIVATE "")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/vmmipc.pc.in ${PROJECT_BINARY_DIR}/${VMMIPC_PC_NAME}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${VMMIPC_PC_NAME}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# The launcher of the library's MPI with the flags that let it run anywhere
# (more ranks than cores, containers, root): cmake/mpirun.sh.in.
install(PROGRAMS ${PROJECT_BINARY_DIR}/vmmipc-mpirun DESTINATION ${CMAKE_INSTALL_BINDIR})

# The CPU stand-in, for running installed programs without a GPU; never
# installed by default, and never under the name of the real driver:
#   cmake --install build --component standin
#   VMMIPC_CUDA_DRIVER=<prefix>/lib/vmmipc/libvmmipc_standin.so ./app
if(TARGET vmmipc_standin)
  install(TARGETS vmmipc_standin LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/vmmipc
          COMPONENT standin EXCLUDE_FROM_ALL)
endif()
