# Every test suite, registered in one place. The stand-in's own tests run
# only against the stand-in; everything else runs on both drivers.
# Every suite that makes a comm also runs on the node layouts
# (LAYOUTS ${VMMIPC_TEST_LAYOUTS}: {2,1}, {1,2}, {3,1}, {1,1,1}, round robin;
# cmake/test_layouts.cmake). The suites of the stand-in, the driver
# (test_xproc, test_driver_contract) and the transport (its rank table is
# the test's own) make none: VMMIPC_NODE_ID is no input of theirs, so a
# layout would run them unchanged, and they have none.
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_standin NP 1 2 SOURCES standin/test_standin.cc standin/test_standin_async.cc)
endif()
# The harness's node per rank (harness/vnode.sh), every launcher's variable.
add_test(NAME harness.vnode COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/harness/test_vnode.sh)
set_tests_properties(harness.vnode PROPERTIES TIMEOUT 30)
# Every entry that launches ranks does so in a session directory of its own
# (cmake/ctest_session.sh).
add_test(NAME harness.private_session
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/harness/test_private_session.sh ${PROJECT_BINARY_DIR}
                 ${VMMIPC_TEST_SESSION} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${VMMIPC_MPIEXEC_ARGS})
set_tests_properties(harness.private_session PROPERTIES TIMEOUT 60)
vmmipc_mpi_test(test_loader NP 1 SOURCES test_loader.cc)
vmmipc_mpi_test(test_buffers NP 1 SOURCES test_buffers.cc)
vmmipc_mpi_test(test_xproc NP 2 SOURCES test_xproc.cc)
vmmipc_mpi_test(test_xproc NP 2 OWN_GPU)
vmmipc_mpi_test(test_comm NP 1 2 3 4 SOURCES test_comm.cc LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_comm NP 4 VNODES 2)
vmmipc_mpi_test(test_coll NP 1 2 3 4 SOURCES test_coll.cc TIMEOUT 240 LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_coll NP 4 VNODES 2 TIMEOUT 240)
vmmipc_mpi_test(test_codec NP 1 SOURCES test_codec.cc)
vmmipc_mpi_test(test_conn NP 1 SOURCES test_conn.cc)
vmmipc_mpi_test(test_transport NP 2 3 4 SOURCES test_transport.cc)
vmmipc_mpi_test(test_hostile NP 2 4 SOURCES test_hostile.cc LAYOUTS ${VMMIPC_TEST_LAYOUTS})
# A node peer's malformed collective messages, forged as raw frames. On the
# memory-operation path (no trial), a forged signal pool used to pass; {2,1}
# adds a rank off the node.
vmmipc_mpi_test(test_forged NP 2 SOURCES test_forged.cc ENV VMMIPC_SYNC=memops LAYOUTS 0,0,1)
vmmipc_mpi_test(test_driver_contract NP 2 SOURCES test_driver_contract.cc)
vmmipc_mpi_test(test_driver_contract NP 2 OWN_GPU)
vmmipc_mpi_test(test_faults NP 2 3 4 SOURCES test_faults.cc test_faults_tables.cc TIMEOUT 240 LAYOUTS ${VMMIPC_TEST_LAYOUTS})
# The six tests of a collector that stalls, comes late or is stuck, and of
# withdrawals (37 s of waiting a run, 29% of stage 1's test_agree time) run
# at np 2 and 3 and on {2,1} and {1,2}: all node peers, a collector with a
# node peer and a rank off its node, a collector alone. {3,1}, {1,1,1}, round
# robin and vnodes2 add no path of theirs and run the rest.
set(agree_timing_tests
    Agree.AfterAStuckCollectorEveryRanksNextCallFailsAtOnce:Agree.AMemberThatWithdrewAfterAnotherWasToldGetsTheSameVerdict
    :Agree.ALateCollectorGivesOneVerdict:Agree.ACollectorThatStallsPastTheGracesNamesItselfNotTheSilentRank
    :Agree.AWithdrawalCausedByASilentRankNamesTheSilentRank:Agree.ACollectorThatStallsBeforeAnnouncingGivesOneVerdict)
string(REPLACE ";" "" agree_timing_tests "${agree_timing_tests}")
vmmipc_mpi_test(test_agree NP 2 3 SOURCES test_agree.cc TIMEOUT 240 LAYOUTS 0,0,1 0,1,1)
vmmipc_mpi_test(test_agree LAYOUTS 0,0,0,1 0,1,2 0,1,0,1,0 TIMEOUT 240 ENV GTEST_FILTER=-${agree_timing_tests})
vmmipc_mpi_test(test_agree NP 4 VNODES 2 TIMEOUT 240 ENV GTEST_FILTER=-${agree_timing_tests})
vmmipc_mpi_test(test_release NP 1 2 3 SOURCES test_release.cc LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_release NP 4 VNODES 2)
vmmipc_mpi_test(test_sync NP 1 2 3 4 SOURCES test_sync.cc TIMEOUT 300 LAYOUTS ${VMMIPC_TEST_LAYOUTS})
# Host sync runs on the path auto's trial measures faster (VMMIPC_SYNC=auto);
# each path is also forced.
vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops TIMEOUT 300)
vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_SYNC=kernel SUFFIX .kernel TIMEOUT 300)
vmmipc_mpi_test(test_device NP 1 2 3 SOURCES test_device.cc LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_device NP 2 3 ENV VMMIPC_SYNC=kernel SUFFIX .kernel)
vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_SYNC=kernel VMMIPC_SYNC_PDL=0 SUFFIX .kernel_nopdl)
vmmipc_mpi_test(test_sync NP 2 VNODES 1 TIMEOUT 300)
# The failure value, CUDA graphs (the stand-in's capture), and host sync
# next to a user's waiting kernel (a binary of its own: its first host sync
# call is the test's), on each path.
vmmipc_mpi_test(test_sync_release NP 1 2 3 SOURCES test_sync_release.cc
                LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_sync_release NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_sync_release NP 2 ENV VMMIPC_SYNC=kernel SUFFIX .kernel)
vmmipc_mpi_test(test_sync_graph NP 2 3 4 SOURCES test_sync_graph.cc
                LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_sync_graph NP 2 ENV VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_sync_user_kernel NP 1 2 3 SOURCES test_sync_user_kernel.cc ENV VMMIPC_STANDIN_WAIT_MS=8000
                LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_sync_user_kernel NP 2 ENV VMMIPC_STANDIN_WAIT_MS=8000 VMMIPC_SYNC=memops SUFFIX .memops)
vmmipc_mpi_test(test_sync_user_kernel NP 2 ENV VMMIPC_STANDIN_WAIT_MS=8000 VMMIPC_SYNC=kernel SUFFIX .kernel)
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_STANDIN_CAPS=nomemops VMMIPC_SYNC=memops SUFFIX .nomemops)
  vmmipc_mpi_test(test_sync NP 2 ENV VMMIPC_STANDIN_CAPS=nokernels SUFFIX .nokernels)
  vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_STANDIN_CAPS=nokernels SUFFIX .nokernels)
  vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_STANDIN_CAPS=nokernels VMMIPC_SYNC=kernel SUFFIX .forced)
  # Both ranks on one device: the device API's GPU scope.
  vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_STANDIN_DEVICES=1 SUFFIX .one_gpu)
  # auto's trial with one path made slow: it must pick the other
  vmmipc_mpi_test(test_device NP 2 3 ENV VMMIPC_STANDIN_DEVICES=1 VMMIPC_STANDIN_KERNEL_US=5000 SUFFIX .slow_kernels)
  vmmipc_mpi_test(test_device NP 2 ENV VMMIPC_STANDIN_MEMOPS_US=5000 SUFFIX .slow_memops)
endif()
vmmipc_mpi_test(test_wrap NP 1 2 3 4 SOURCES test_wrap.cc LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_driver_load NP 1 SOURCES test_driver_load.cc)
vmmipc_mpi_test(test_caches NP 1 SOURCES test_caches.cc)
# An aborted comm's calls after MPI_Finalize (its own main), on one node and on two.
vmmipc_mpi_test(test_after_finalize NP 2 SOURCES test_after_finalize.cc)
vmmipc_mpi_test(test_after_finalize NP 2 VNODES 1)
vmmipc_mpi_test(test_after_finalize NP 2 ENV TEST_THREAD_LEVEL=funneled SUFFIX .funneled)
# A thread MPI does not allow is refused before it is counted (its own main, MPI_THREAD_FUNNELED).
vmmipc_mpi_test(test_thread_level NP 2 SOURCES test_thread_level.cc)
vmmipc_mpi_test(test_heap NP 1 2 4 SOURCES test_heap.cc TIMEOUT 240)
# On the node layouts, without the two tests of a rank that never comes or
# comes past the timeout (11 s of waiting a run): they exercise the heap's
# comm-wide MPI allgather and its verdict, whose path no node shape changes,
# and the np 2, np 4 and vnodes2 entries run them.
vmmipc_mpi_test(test_heap LAYOUTS ${VMMIPC_TEST_LAYOUTS} TIMEOUT 240
                ENV GTEST_FILTER=-Heap.ARankThatNeverComesIsNamed:Heap.ALateRankFailsLikeTheOthers)
vmmipc_mpi_test(test_heap NP 4 VNODES 2 TIMEOUT 240)
# The last rank's wall clock ten minutes ahead, on its own virtual node: the
# heap decides by messages, never by clocks (not with a sanitizer, whose
# runtime must be the first library loaded).
if(NOT VMMIPC_SANITIZE)
  add_library(vmmipc_skewclock MODULE harness/skewclock.c)
  target_link_libraries(vmmipc_skewclock PRIVATE ${CMAKE_DL_LIBS})
  vmmipc_mpi_test(test_heap NP 2 VNODES 1 SUFFIX .skew
                  ENV LD_PRELOAD=$<TARGET_FILE:vmmipc_skewclock> VMMIPC_TEST_SKEW_RANK=1 VMMIPC_TEST_SKEW_S=600)
endif()
vmmipc_mpi_test(test_contract NP 1 SOURCES test_contract.cc)
# A collective one rank never calls, with a short timeout as while developing.
vmmipc_mpi_test(test_mismatch NP 2 3 SOURCES test_mismatch.cc ENV VMMIPC_TIMEOUT_MS=1000 TIMEOUT 60
                LAYOUTS ${VMMIPC_TEST_LAYOUTS})
vmmipc_mpi_test(test_cache_release NP 2 3 SOURCES test_cache_release.cc LAYOUTS ${VMMIPC_TEST_LAYOUTS})
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
set(_killrun ${VMMIPC_TEST_SESSION} ${CMAKE_CURRENT_SOURCE_DIR}/harness/killrun.sh)
vmmipc_test_processors(procs3 3)
vmmipc_test_processors(procs4 4)
foreach(victim 0 last)
  add_test(NAME test_kill.np3.victim_${victim}
           COMMAND ${_killrun} 2 ${MPIEXEC_EXECUTABLE} ${_recovery}
                   ${VMMIPC_MPIEXEC_ARGS} ${MPIEXEC_NUMPROC_FLAG} 3 $<TARGET_FILE:test_kill>)
  set_tests_properties(test_kill.np3.victim_${victim} PROPERTIES TIMEOUT 120 PROCESSORS ${procs3} SKIP_RETURN_CODE 77
                       ENVIRONMENT "${VMMIPC_TEST_ENV};VMMIPC_TEST_VICTIM=${victim};VMMIPC_STANDIN_WAIT_MS=80000")
endforeach()
# The dead rank on another node than the collector: its node peer tells the
# collector (a death notice), so every survivor still learns at once.
add_test(NAME test_kill.np4.vnodes2.victim_last
         COMMAND ${_killrun} 3 ${MPIEXEC_EXECUTABLE} ${_recovery}
                 ${VMMIPC_MPIEXEC_ARGS} ${MPIEXEC_NUMPROC_FLAG} 4 ${CMAKE_CURRENT_SOURCE_DIR}/harness/vnode.sh
                 $<TARGET_FILE:test_kill>)
set_tests_properties(test_kill.np4.vnodes2.victim_last PROPERTIES TIMEOUT 120 PROCESSORS ${procs4} SKIP_RETURN_CODE 77
                     LABELS layouts
                     ENVIRONMENT "${VMMIPC_TEST_ENV};VMMIPC_TEST_VICTIM=last;VMMIPC_STANDIN_WAIT_MS=80000;VMMIPC_TEST_RANKS_PER_NODE=2")
# A rank SIGKILLed at a random moment of a loop of map collectives (issue 29):
# every survivor fails one call at once naming it, then frees everything.
add_test(NAME test_kill.np4.loop
         COMMAND ${_killrun} 3 ${MPIEXEC_EXECUTABLE} ${_recovery}
                 ${VMMIPC_MPIEXEC_ARGS} ${MPIEXEC_NUMPROC_FLAG} 4 $<TARGET_FILE:test_kill>)
set_tests_properties(test_kill.np4.loop PROPERTIES TIMEOUT 120 PROCESSORS ${procs4} SKIP_RETURN_CODE 77
                     ENVIRONMENT "${VMMIPC_TEST_ENV};VMMIPC_TEST_VICTIM=2;VMMIPC_TEST_KILL_LOOP=1;VMMIPC_STANDIN_WAIT_MS=80000")
# The same on uneven and interleaved layouts where the dead rank has a node
# peer to see it die and the collector lives: on another node than the
# collector ({1,2}) and interleaved (round robin). A rank alone on its node
# has nobody to see it die (MPI gives no death notice), and ranks off a dead
# collector's node have nobody to tell them: those learn at the agreement's
# timeout, which test_faults' TheAgreementIsBoundedAndBreaksTheComm checks
# on every layout.
foreach(case 0,1,1:last 0,1,0,1,0:last)
  string(REPLACE ":" ";" case "${case}")
  list(GET case 0 layout)
  list(GET case 1 victim)
  vmmipc_layout_name(${layout} lname np)
  math(EXPR survivors "${np} - 1")
  vmmipc_test_processors(procs ${np})
  set(t test_kill.np${np}.${lname}.victim_${victim})
  add_test(NAME ${t}
           COMMAND ${_killrun} ${survivors} ${MPIEXEC_EXECUTABLE} ${_recovery}
                   ${VMMIPC_MPIEXEC_ARGS} ${MPIEXEC_NUMPROC_FLAG} ${np} ${VMMIPC_TEST_VNODE} $<TARGET_FILE:test_kill>)
  set_tests_properties(${t} PROPERTIES TIMEOUT 120 PROCESSORS ${procs} SKIP_RETURN_CODE 77 LABELS layouts
                       ENVIRONMENT "${VMMIPC_TEST_ENV};VMMIPC_TEST_VICTIM=${victim};VMMIPC_STANDIN_WAIT_MS=80000;VMMIPC_TEST_LAYOUT=${layout}")
endforeach()
