# Header, libraries, an exported CMake package (vmmipc::vmmipc) and pkg-config.
include(CMakePackageConfigHelpers)
install(FILES ${PROJECT_SOURCE_DIR}/include/vmmipc.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
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
        DESTINATION ${VMMIPC_CMAKE_DIR})
configure_file(${PROJECT_SOURCE_DIR}/cmake/vmmipc.pc.in ${PROJECT_BINARY_DIR}/vmmipc.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/vmmipc.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
