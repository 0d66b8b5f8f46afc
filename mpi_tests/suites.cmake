# Every test suite, registered in one place. The stand-in's own tests run
# only against the stand-in; everything else runs on both drivers.
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_standin NP 1 2 SOURCES standin/test_standin.cc standin/test_standin_async.cc)
endif()
vmmipc_mpi_test(test_loader NP 1 SOURCES test_loader.cc)
vmmipc_mpi_test(test_buffers NP 1 SOURCES test_buffers.cc)
vmmipc_mpi_test(test_xproc NP 2 SOURCES test_xproc.cc)
vmmipc_mpi_test(test_xproc NP 2 OWN_GPU)
vmmipc_mpi_test(test_comm NP 1 2 3 4 SOURCES test_comm.cc)
vmmipc_mpi_test(test_comm NP 4 VNODES 2)
vmmipc_mpi_test(test_coll NP 1 2 3 4 SOURCES test_coll.cc TIMEOUT 240)
vmmipc_mpi_test(test_coll NP 4 VNODES 2 TIMEOUT 240)
vmmipc_mpi_test(test_codec NP 1 SOURCES test_codec.cc)
vmmipc_mpi_test(test_conn NP 1 SOURCES test_conn.cc)
vmmipc_mpi_test(test_transport NP 2 3 4 SOURCES test_transport.cc)
vmmipc_mpi_test(test_hostile NP 2 4 SOURCES test_hostile.cc)
vmmipc_mpi_test(test_driver_contract NP 2 SOURCES test_driver_contract.cc)
vmmipc_mpi_test(test_driver_contract NP 2 OWN_GPU)
vmmipc_mpi_test(test_faults NP 2 3 4 SOURCES test_faults.cc TIMEOUT 240)
vmmipc_mpi_test(test_agree NP 2 3 SOURCES test_agree.cc TIMEOUT 240)
vmmipc_mpi_test(test_agree NP 4 VNODES 2 TIMEOUT 240)
vmmipc_mpi_test(test_sync NP 1 2 3 4 SOURCES test_sync.cc TIMEOUT 300)
# Host sync runs on kernels by default (VMMIPC_SYNC=auto; memory operations
# where node ranks share a GPU, as 3 and 4 ranks on the stand-in's 2 do);
# each path is also forced.
vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops TIMEOUT 300)
vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_SYNC=kernel SUFFIX .kernel TIMEOUT 300)
vmmipc_mpi_test(test_device NP 1 2 3 SOURCES test_device.cc)
vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_device NP 2 3 ENV VMMIPC_SYNC=kernel SUFFIX .kernel)
vmmipc_mpi_test(test_sync NP 2 VNODES 1 TIMEOUT 300)
# The failure value, CUDA graphs (the stand-in's capture), and host sync
# next to a user's waiting kernel (a binary of its own: its first host sync
# call is the test's), on each path.
vmmipc_mpi_test(test_sync_release NP 1 2 3 SOURCES test_sync_release.cc)
vmmipc_mpi_test(test_sync_release NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_sync_release NP 2 ENV VMMIPC_SYNC=kernel SUFFIX .kernel)
vmmipc_mpi_test(test_sync_graph NP 2 3 4 SOURCES test_sync_graph.cc)
vmmipc_mpi_test(test_sync_graph NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_sync_user_kernel NP 1 2 3 SOURCES test_sync_user_kernel.cc ENV VMMIPC_STANDIN_WAIT_MS=8000)
vmmipc_mpi_test(test_sync_user_kernel NP 2 ENV VMMIPC_STANDIN_WAIT_MS=8000 VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_sync_user_kernel NP 2 ENV VMMIPC_STANDIN_WAIT_MS=8000 VMMIPC_SYNC=kernel SUFFIX .kernel)
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_STANDIN_CAPS=nomemops VMMIPC_SYNC=memops SUFFIX .nomemops)
  vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_STANDIN_CAPS=nokernels SUFFIX .nokernels)
  vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_STANDIN_CAPS=nokernels SUFFIX .nokernels)
  vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_STANDIN_CAPS=nokernels VMMIPC_SYNC=kernel SUFFIX .forced)
  # Both ranks on one device: the device API's GPU scope.
  vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_STANDIN_DEVICES=1 SUFFIX .one_gpu)
endif()
vmmipc_mpi_test(test_wrap NP 1 2 3 4 SOURCES test_wrap.cc)
vmmipc_mpi_test(test_driver_load NP 1 SOURCES test_driver_load.cc)
vmmipc_mpi_test(test_caches NP 1 SOURCES test_caches.cc)
vmmipc_mpi_test(test_heap NP 1 2 4 SOURCES test_heap.cc TIMEOUT 240)
vmmipc_mpi_test(test_heap NP 4 VNODES 2 TIMEOUT 240)
vmmipc_mpi_test(test_contract NP 1 SOURCES test_contract.cc)
# A collective one rank never calls, with a short timeout as while developing.
vmmipc_mpi_test(test_mismatch NP 2 3 SOURCES test_mismatch.cc ENV VMMIPC_TIMEOUT_MS=1000 TIMEOUT 60)
vmmipc_mpi_test(test_cache_release NP 2 3 SOURCES test_cache_release.cc)
vmmipc_mpi_test(test_cache_release NP 4 VNODES 2)
# One GPU for two ranks, as on a one-GPU machine: checks that need two GPUs
# skip with their reason, everything else still runs.
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_xproc NP 2 OWN_GPU SUFFIX .one_gpu ENV VMMIPC_STANDIN_DEVICES=1)
  vmmipc_mpi_test(test_driver_contract NP 2 OWN_GPU SUFFIX .one_gpu ENV VMMIPC_STANDIN_DEVICES=1)
endif()
# A rank SIGKILLed in a collective, under a launcher that lets the job go on
# (its own main: the job cannot finalize; harness/killrun.sh counts the
# survivors' verdicts). Victim 0 is the agreement's collector.
add_executable(test_kill test_kill.cc)
target_link_libraries(test_kill PRIVATE vmmipc_testlib MPI::MPI_CXX)
if(_launcher_flavor STREQUAL "openmpi")
  set(_recovery --mca orte_enable_recovery 1)
else()
  set(_recovery -disable-auto-cleanup)
endif()
foreach(victim 0 last)
  add_test(NAME test_kill.np3.victim_${victim}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harness/killrun.sh 2 ${MPIEXEC_EXECUTABLE} ${_recovery}
                   ${VMMIPC_MPIEXEC_ARGS} ${MPIEXEC_NUMPROC_FLAG} 3 $<TARGET_FILE:test_kill>)
  set_tests_properties(test_kill.np3.victim_${victim} PROPERTIES TIMEOUT 120 PROCESSORS 3 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${VMMIPC_TEST_ENV};VMMIPC_TEST_VICTIM=${victim};VMMIPC_STANDIN_WAIT_MS=80000")
endforeach()
# The dead rank on another node than the collector: its node peer tells the
# collector (a death notice), so every survivor still learns at once.
add_test(NAME test_kill.np4.vnodes2.victim_last
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harness/killrun.sh 3 ${MPIEXEC_EXECUTABLE} ${_recovery}
                 ${VMMIPC_MPIEXEC_ARGS} ${MPIEXEC_NUMPROC_FLAG} 4 ${CMAKE_CURRENT_SOURCE_DIR}/harness/vnode.sh
                 $<TARGET_FILE:test_kill>)
set_tests_properties(test_kill.np4.vnodes2.victim_last PROPERTIES TIMEOUT 120 PROCESSORS 4 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${VMMIPC_TEST_ENV};VMMIPC_TEST_VICTIM=last;VMMIPC_STANDIN_WAIT_MS=80000;VMMIPC_TEST_RANKS_PER_NODE=2")
