// The driver loader: run-time loading, a missing driver, capabilities.
// Each case that changes the environment runs in a forked child, before the
// driver is loaded there, because the loader initialises once per process.
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "harness/helpers.h"

namespace {

int MissingDriver(void *) {
  setenv("VMMIPC_CUDA_DRIVER", "/nonexistent/libcuda-missing.so", 1);
  int n = 0;
  if (vmmipc_device_count(&n) != VMMIPC_ERR_UNSUPPORTED) return 10;
  if (!std::strstr(vmmipc_last_error(), "/nonexistent/libcuda-missing.so")) return 11;
  if (!std::strstr(vmmipc_last_error(), "VMMIPC_CUDA_DRIVER")) return 12;
  // Every later call gets the same answer, from any entry point.
  vmmipc_buf_t b = nullptr;
  if (vmmipc_set_device(0) != VMMIPC_ERR_UNSUPPORTED) return 13;
  if (vmmipc_alloc(1, &b) != VMMIPC_ERR_UNSUPPORTED || b) return 14;
  if (!std::strstr(vmmipc_last_error(), "/nonexistent/libcuda-missing.so")) return 15;
  return 0;
}

int NotADriver(void *) {
  setenv("VMMIPC_CUDA_DRIVER", "libc.so.6", 1);  // loads, but has no cuGetProcAddress
  int n = 0;
  if (vmmipc_device_count(&n) != VMMIPC_ERR_UNSUPPORTED) return 20;
  if (!std::strstr(vmmipc_last_error(), "cuGetProcAddress")) return 21;
  return 0;
}

int NoVmm(void *) {
  setenv("VMMIPC_STANDIN_CAPS", "novmm", 1);
  vmmipc_buf_t b = nullptr;
  if (vmmipc_set_device(0) != VMMIPC_SUCCESS) return 30;
  if (vmmipc_alloc(1, &b) != VMMIPC_ERR_UNSUPPORTED || b) return 31;
  if (!std::strstr(vmmipc_last_error(), "virtual memory")) return 32;
  return 0;
}

int NoPosixFd(void *) {
  setenv("VMMIPC_STANDIN_CAPS", "nofd", 1);
  vmmipc_buf_t b = nullptr;
  if (vmmipc_set_device(0) != VMMIPC_SUCCESS) return 40;
  if (vmmipc_alloc(1, &b) != VMMIPC_ERR_UNSUPPORTED || b) return 41;
  if (!std::strstr(vmmipc_last_error(), "POSIX file descriptor")) return 42;
  return 0;
}

// The CUDA toolkit's stub libcuda answers every call with
// CUDA_ERROR_STUB_LIBRARY: the message says so and names the file, not an
// old driver.
int StubDriver(void *) {
  setenv("VMMIPC_STANDIN_CAPS", "stub", 1);
  int n = 0;
  if (vmmipc_device_count(&n) != VMMIPC_ERR_UNSUPPORTED) return 60;
  const std::string msg = vmmipc_last_error();
  if (msg.find("CUDA_ERROR_STUB_LIBRARY (34)") == std::string::npos) return 61;
  if (msg.find("stub for linking, not the driver") == std::string::npos) return 62;
  if (msg.find("VMMIPC_CUDA_DRIVER") == std::string::npos) return 63;
  if (msg.find("older") != std::string::npos) return 64;
  const char *file = std::getenv("VMMIPC_CUDA_DRIVER");  // the stand-in, by its full path
  if (!file || msg.find(file) == std::string::npos) return 65;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  if (vmmipc_last_error_info(&info) != VMMIPC_SUCCESS) return 66;
  if (info.code != VMMIPC_ERR_UNSUPPORTED || info.driver_error != 34 || info.rank != -1) return 67;
  return 0;
}

// A driver older than the headers lacks a symbol the library needs: the
// message says so, and the record holds cuGetProcAddress's CUresult.
int OldDriver(void *) {
  setenv("VMMIPC_STANDIN_CAPS", "old11", 1);
  int n = 0;
  if (vmmipc_device_count(&n) != VMMIPC_ERR_UNSUPPORTED) return 70;
  const std::string msg = vmmipc_last_error();
  if (msg.find("cuGetProcAddress(\"") == std::string::npos) return 71;
  if (msg.find("the driver is older than the CUDA") == std::string::npos) return 72;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  if (vmmipc_last_error_info(&info) != VMMIPC_SUCCESS) return 73;
  if (info.code != VMMIPC_ERR_UNSUPPORTED || info.driver_error != 500 /* CUDA_ERROR_NOT_FOUND */) return 74;
  return 0;
}

int NoContext(void *) {
  vmmipc_buf_t b = nullptr;
  if (vmmipc_alloc(1, &b) != VMMIPC_ERR_INVALID_ARG) return 50;
  if (!std::strstr(vmmipc_last_error(), "vmmipc_set_device")) return 51;
  return 0;
}

void ExpectChildExits0(int (*fn)(void *), const char *what) {
  int st = vt::InChild(fn, nullptr);
  ASSERT_TRUE(WIFEXITED(st)) << what << ": child died, status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << what << ": failed check " << WEXITSTATUS(st);
}

TEST(Loader, MissingDriverIsUnsupportedAndNamesThePath) { ExpectChildExits0(MissingDriver, "missing driver"); }

TEST(Loader, ALibraryWithoutTheDriverApiIsRefused) { ExpectChildExits0(NotADriver, "not a driver"); }

TEST(Loader, AStubLibcudaIsNamedAsOne) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "needs the stand-in's stub mode";
  ExpectChildExits0(StubDriver, "stub driver");
}

TEST(Loader, ADriverOlderThanTheHeadersIsNamedAsOne) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "needs the stand-in's old-driver mode";
  ExpectChildExits0(OldDriver, "old driver");
}

TEST(Loader, AllocWithoutACurrentDeviceSaysWhatToCall) { ExpectChildExits0(NoContext, "no context"); }

TEST(Loader, DevicesWithoutVmmOrPosixFdsAreUnsupported) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "capabilities can be switched off only in the stand-in";
  ExpectChildExits0(NoVmm, "no VMM");
  ExpectChildExits0(NoPosixFd, "no POSIX fd");
}

TEST(Loader, LoadsTheDriverAndListsDevicesWithUuids) {
  int n = 0;
  ASSERT_VMM_OK(vmmipc_device_count(&n));
  ASSERT_GT(n, 0);
  vmmipc_uuid_t a, b;
  ASSERT_VMM_OK(vmmipc_device_uuid(0, &a));
  char s[VMMIPC_UUID_STRING_LEN];
  vmmipc_uuid_format(&a, s);
  EXPECT_EQ(std::strncmp(s, "GPU-", 4), 0);
  EXPECT_EQ(std::strlen(s), 40u);
  if (n > 1) {
    ASSERT_VMM_OK(vmmipc_device_uuid(1, &b));
    EXPECT_NE(std::memcmp(a.bytes, b.bytes, 16), 0);
  }
  EXPECT_EQ(vmmipc_device_uuid(n, &b), VMMIPC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(vmmipc_last_error()).find("out of range"), std::string::npos);
  EXPECT_EQ(vmmipc_set_device(-1), VMMIPC_ERR_INVALID_ARG);
  ASSERT_VMM_OK(vmmipc_set_device(0));
  // The string and the macros name one version.
  const std::string v = std::to_string(VMMIPC_VERSION_MAJOR) + "." + std::to_string(VMMIPC_VERSION_MINOR) + "." +
                        std::to_string(VMMIPC_VERSION_PATCH);
  EXPECT_EQ(v, vmmipc_version());
}

}  // namespace
