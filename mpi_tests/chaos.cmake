# test_chaos, the randomized fault campaign (docs/dev/chaos.md): the
# program, the settings harness/chaos.sh reads (chaos.env), and a few runs
# of it under the ctest label "chaos".
add_executable(test_chaos test_chaos.cc test_chaos_plan.cc test_chaos_data.cc test_chaos_ops.cc test_chaos_calls.cc
                          test_chaos_colls.cc test_chaos_peers.cc
                          test_chaos_faults.cc test_chaos_account.cc test_chaos_check.cc test_chaos_state.cc
                          test_chaos_teardown.cc test_chaos_report.cc)
target_include_directories(test_chaos PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_chaos PRIVATE vmmipc_testlib MPI::MPI_CXX ${CMAKE_DL_LIBS} Threads::Threads)
if(_launcher_flavor STREQUAL "openmpi")
  set(_chaos_recovery "--mca orte_enable_recovery 1")
else()
  set(_chaos_recovery "-disable-auto-cleanup")
endif()
string(REPLACE ";" " " _chaos_args "${VMMIPC_MPIEXEC_ARGS}")
set(_chaos_node ${CMAKE_CURRENT_SOURCE_DIR}/harness/chaos_node.sh)
target_compile_definitions(test_chaos PRIVATE CHAOS_MPIEXEC="${MPIEXEC_EXECUTABLE}" CHAOS_NP_FLAG="${MPIEXEC_NUMPROC_FLAG}"
                           CHAOS_MPIEXEC_ARGS="${_chaos_args}" CHAOS_RECOVERY="${_chaos_recovery}"
                           CHAOS_NODE_SH="${_chaos_node}")
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/chaos.env CONTENT
"# Written by CMake (mpi_tests/chaos.cmake) for harness/chaos.sh.
CHAOS_EXE='$<TARGET_FILE:test_chaos>'
CHAOS_MPIEXEC='${MPIEXEC_EXECUTABLE}'
CHAOS_NP_FLAG='${MPIEXEC_NUMPROC_FLAG}'
CHAOS_MPIEXEC_ARGS='${_chaos_args}'
CHAOS_RECOVERY='${_chaos_recovery}'
CHAOS_NODE_SH='${_chaos_node}'
CHAOS_DRIVER_ENV='${VMMIPC_TEST_ENV}'
")
# A few seeds for 80-150 steps each, across node layouts (uneven,
# interleaved, one rank per node) and one run with a rank killed; long
# campaigns are chaos.sh --runs (docs/dev/chaos.md).
set(_chaos_sh ${VMMIPC_TEST_SESSION} ${CMAKE_CURRENT_SOURCE_DIR}/harness/chaos.sh)
foreach(run "2;0,0;1;150" "3;0,0,1;2;120" "4;0,1,0,1;3;120" "5;0,1,0,2,0;4;100" "3;0,1,2;5;100")
  list(GET run 0 np)
  list(GET run 1 layout)
  list(GET run 2 seed)
  list(GET run 3 steps)
  string(REPLACE "," "" name ${layout})
  add_test(NAME test_chaos.np${np}.layout${name}
           COMMAND ${_chaos_sh} --env ${CMAKE_CURRENT_BINARY_DIR}/chaos.env --one --np ${np} --layout ${layout}
                   --seed ${seed} --steps ${steps})
  set_tests_properties(test_chaos.np${np}.layout${name} PROPERTIES TIMEOUT 240 PROCESSORS ${np} LABELS chaos)
endforeach()
add_test(NAME test_chaos.np3.layout100.kill
         COMMAND ${_chaos_sh} --env ${CMAKE_CURRENT_BINARY_DIR}/chaos.env --one --np 3 --layout 1,0,0 --seed 6
                 --steps 80 --kill)
set_tests_properties(test_chaos.np3.layout100.kill PROPERTIES TIMEOUT 240 PROCESSORS 3 LABELS chaos
                     SKIP_RETURN_CODE 77)
# What test_chaos found, kept as a plain test: a root whose sockets are full.
vmmipc_mpi_test(test_full_socket NP 3 SOURCES test_full_socket.cc)
