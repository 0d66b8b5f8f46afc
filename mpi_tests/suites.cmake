# Every test suite, registered in one place. The stand-in's own tests run
# only against the stand-in; everything else runs on both drivers.
if(VMMIPC_TEST_DRIVER STREQUAL "standin")
  vmmipc_mpi_test(test_standin NP 1 2 SOURCES standin/test_standin.cc)
endif()
vmmipc_mpi_test(test_loader NP 1 SOURCES test_loader.cc)
