// Shared test helpers: fd counts, the stand-in's live-object counts, devices.
#ifndef VMMIPC_TEST_HELPERS_H
#define VMMIPC_TEST_HELPERS_H

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <string>

#include "vmmipc.h"

// Asserts that a vmmipc call succeeded, printing vmmipc_last_error() if not.
#define ASSERT_VMM_OK(call)                                                                \
  do {                                                                                     \
    vmmipc_result_t vmm_rc_ = (call);                                                      \
    ASSERT_EQ(vmm_rc_, VMMIPC_SUCCESS) << #call << ": " << vmmipc_strerror(vmm_rc_) << ": " \
                                       << vmmipc_last_error();                             \
  } while (0)
#define EXPECT_VMM_OK(call)                                                                \
  do {                                                                                     \
    vmmipc_result_t vmm_rc_ = (call);                                                      \
    EXPECT_EQ(vmm_rc_, VMMIPC_SUCCESS) << #call << ": " << vmmipc_strerror(vmm_rc_) << ": " \
                                       << vmmipc_last_error();                             \
  } while (0)

namespace vt {

// Whether msg contains what (error-message checks).
inline bool Has(const std::string &msg, const std::string &what) { return msg.find(what) != std::string::npos; }
// Seconds since t0.
inline double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A stress loop's count: n, or a tenth of it in a sanitizer build. There a
// step costs 10-20x more (-O0, shadow checks), and a memory fault shows at
// its first steps; the Open MPI stage and the GPU run the full count.
inline int StressCount(int n) {
#ifdef VMMIPC_TEST_SANITIZED
  return n / 10 > 0 ? n / 10 : 1;
#else
  return n;
#endif
}

int Rank();               // rank in MPI_COMM_WORLD
int Size();               // size of MPI_COMM_WORLD
int FdCount();            // open fds of this process
bool UsingStandin();      // the suites run on the CPU stand-in driver

// Live objects inside the stand-in driver (all zero-based counters); false
// when the real driver is loaded, where these cannot be observed.
struct DriverCounts {
  long allocations = 0, mappings = 0, reservations = 0;
};
bool GetDriverCounts(DriverCounts *c);

// The node layout the harness gave this job (harness/vnode.sh): the
// virtual node of `rank` from VMMIPC_TEST_LAYOUT, else rank /
// VMMIPC_TEST_RANKS_PER_NODE, else 0 (every rank on one node).
int LayoutNode(int rank);
// Whether `yes` holds on some rank / on every rank (collective on
// MPI_COMM_WORLD): a test skips, or takes part, on every rank alike.
bool AnyRank(bool yes);
bool EveryRank(bool yes);

// Makes device (node-local rank % device count) current; returns its ordinal.
int UseRankDevice();
// Node-local rank (MPI_COMM_TYPE_SHARED split of MPI_COMM_WORLD).
int LocalRank();

// Fill/check a byte pattern that depends on a seed and the offset.
unsigned char PatternByte(unsigned seed, size_t offset);
void FillPattern(void *dev_ptr, size_t size, unsigned seed);        // via cuMemcpyHtoD
::testing::AssertionResult CheckPattern(const void *dev_ptr, size_t size, unsigned seed);

// Copy between host and device memory through the loaded driver.
void CopyToDevice(void *dev_ptr, const void *host, size_t size);
void CopyToHost(void *host, const void *dev_ptr, size_t size);

// Access flags (CU_MEM_ACCESS_FLAGS_*) that device `ordinal` has on `ptr`, or -1.
int AccessFlags(const void *ptr, int ordinal);

// Runs `fn` in a forked child (which must not call MPI) and returns its wait
// status; fn's return value becomes the exit code.
int InChild(int (*fn)(void *), void *arg);

}  // namespace vt

#endif
