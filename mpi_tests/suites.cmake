# Every test suite, registered in one place. The stand-in's own tests run
# only against the stand-in; everything else runs on both drivers.
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_standin NP 1 2 SOURCES standin/test_standin.cc)
endif()
vmmipc_mpi_test(test_loader NP 1 SOURCES test_loader.cc)
vmmipc_mpi_test(test_buffers NP 1 SOURCES test_buffers.cc)
vmmipc_mpi_test(test_xproc NP 2 SOURCES test_xproc.cc)
vmmipc_mpi_test(test_xproc NP 2 OWN_GPU)
vmmipc_mpi_test(test_comm NP 1 2 3 4 SOURCES test_comm.cc)
vmmipc_mpi_test(test_comm NP 4 VNODES 2)
vmmipc_mpi_test(test_coll NP 1 2 3 4 SOURCES test_coll.cc TIMEOUT 240)
vmmipc_mpi_test(test_coll NP 4 VNODES 2 TIMEOUT 240)
vmmipc_mpi_test(test_transport NP 2 3 4 SOURCES test_transport.cc)
vmmipc_mpi_test(test_driver_contract NP 2 SOURCES test_driver_contract.cc)
vmmipc_mpi_test(test_driver_contract NP 2 OWN_GPU)
# One GPU for two ranks, as on a one-GPU machine: checks that need two GPUs
# skip with their reason, everything else still runs.
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_xproc NP 2 OWN_GPU SUFFIX .one_gpu ENV VMMIPC_STANDIN_DEVICES=1)
  vmmipc_mpi_test(test_driver_contract NP 2 OWN_GPU SUFFIX .one_gpu ENV VMMIPC_STANDIN_DEVICES=1)
endif()
