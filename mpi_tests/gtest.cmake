# Google Test: an installed package, else Debian's source tree.
set(VMMIPC_GTEST_SOURCE_DIR /usr/src/googletest CACHE PATH "Google Test sources, used when no package is found")
find_package(GTest QUIET)
if(NOT TARGET GTest::gtest)
  if(NOT EXISTS ${VMMIPC_GTEST_SOURCE_DIR}/CMakeLists.txt)
    message(FATAL_ERROR "Google Test not found: install libgtest-dev, or set VMMIPC_GTEST_SOURCE_DIR "
                        "to a googletest source tree, or configure with -DVMMIPC_BUILD_TESTS=OFF")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${VMMIPC_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  add_library(GTest::gtest ALIAS gtest)
endif()
