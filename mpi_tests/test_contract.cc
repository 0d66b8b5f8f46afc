// The API contract of 0.3 in one process: every result code has its own
// description; input structs from a newer header are accepted only with a
// zero tail; the last error is available as a struct; vmmipc_set_device
// takes one primary-context reference per device.
#include <dlfcn.h>
#include <errno.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "harness/bufs.h"

namespace {

using vt::kGran;

TEST(Contract, EveryResultCodeHasItsOwnDescription) {
  const std::string unknown = vmmipc_strerror(static_cast<vmmipc_result_t>(14));
  EXPECT_EQ(unknown, "unknown vmmipc result code");
  std::set<std::string> seen;
  for (int c = 0; c <= 13; c++) {
    const char *s = vmmipc_strerror(static_cast<vmmipc_result_t>(c));
    ASSERT_NE(s, nullptr) << c;
    EXPECT_NE(std::string(s), unknown) << "code " << c;
    EXPECT_TRUE(seen.insert(s).second) << "code " << c << " repeats \"" << s << "\"";
  }
  EXPECT_EQ(VMMIPC_ERR_BUSY, 11);
  EXPECT_EQ(VMMIPC_ERR_RESOURCE, 12);
  EXPECT_EQ(VMMIPC_ERR_ABORTED, 13);
}

// A struct from a newer header: sizeof + 16 bytes, the unknown tail zero
// (accepted) or not (refused, naming the first non-zero byte).
template <typename T>
struct Grown {
  T known;
  unsigned char tail[16];
};

TEST(Contract, AllocPropsWithAZeroTailAreAcceptedAndOthersNamed) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  vt::Baseline base;
  Grown<vmmipc_alloc_props_t> g;
  std::memset(&g, 0, sizeof g);
  g.known = VMMIPC_ALLOC_PROPS_INIT;
  g.known.struct_size = sizeof g;
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc_ex(kGran, &g.known, &b));
  ASSERT_VMM_OK(vmmipc_buf_free(b));
  g.tail[3] = 1;
  b = nullptr;
  EXPECT_EQ(vmmipc_alloc_ex(kGran, &g.known, &b), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(b, nullptr);
  const std::string want = "vmmipc_alloc_ex: props byte " + std::to_string(sizeof(vmmipc_alloc_props_t) + 3) +
                           " (beyond the " + std::to_string(sizeof(vmmipc_alloc_props_t)) +
                           " bytes this library knows) is not zero";
  EXPECT_NE(std::string(vmmipc_last_error()).find(want), std::string::npos) << vmmipc_last_error();
  base.Expect("alloc props");
}

TEST(Contract, AccessWithAZeroTailIsAcceptedAndOthersNamed) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  vt::Baseline base;
  vmmipc_buf_t b = vt::PatternBuf(1, 7);
  ASSERT_NE(b, nullptr);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  Grown<vmmipc_access_t> g;
  std::memset(&g, 0, sizeof g);
  g.known = VMMIPC_ACCESS_DEFAULT;
  g.known.struct_size = sizeof g;
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_import(d, &g.known, &imp));
  ASSERT_VMM_OK(vmmipc_buf_free(imp));
  g.tail[15] = 0x80;
  imp = nullptr;
  EXPECT_EQ(vmmipc_import(d, &g.known, &imp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(imp, nullptr);
  const std::string want = "access byte " + std::to_string(sizeof(vmmipc_access_t) + 15) + " (beyond the " +
                           std::to_string(sizeof(vmmipc_access_t)) + " bytes";
  EXPECT_NE(std::string(vmmipc_last_error()).find(want), std::string::npos) << vmmipc_last_error();
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
  base.Expect("access");
}

TEST(Contract, ConfigWithAZeroTailIsAcceptedAndOthersNamed) {
  Grown<vmmipc_config_t> g;
  std::memset(&g, 0, sizeof g);
  g.known = VMMIPC_CONFIG_INIT;
  g.known.timeout_ms = 30000;
  g.known.struct_size = sizeof g;
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &g.known, &c));
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
  g.tail[0] = 1;
  c = nullptr;
  EXPECT_EQ(vmmipc_comm_create(MPI_COMM_WORLD, &g.known, &c), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(c, nullptr);
  const std::string want = "vmmipc_comm_create: config byte " + std::to_string(sizeof(vmmipc_config_t)) +
                           " (beyond the " + std::to_string(sizeof(vmmipc_config_t)) +
                           " bytes this library knows) is not zero";
  EXPECT_NE(std::string(vmmipc_last_error()).find(want), std::string::npos) << vmmipc_last_error();
}

TEST(Contract, TheLastErrorAsAStruct) {
  vmmipc_buf_t b = nullptr;
  ASSERT_EQ(vmmipc_alloc_ex(kGran, nullptr, nullptr), VMMIPC_ERR_INVALID_ARG);
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  ASSERT_VMM_OK(vmmipc_last_error_info(&info));
  EXPECT_EQ(info.code, VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(info.rank, -1);
  EXPECT_EQ(info.driver_error, 0);
  EXPECT_EQ(info.os_error, 0);
  ASSERT_NE(info.operation, nullptr);
  EXPECT_STREQ(info.operation, "vmmipc_alloc_ex");
  EXPECT_STREQ(info.message, vmmipc_last_error());
  // An older caller's struct: only its bytes are written.
  struct {
    vmmipc_error_info_t head;
    int guard;
  } old;
  std::memset(&old, 0xab, sizeof old);
  old.head.struct_size = offsetof(vmmipc_error_info_t, rank) + sizeof(int);
  ASSERT_VMM_OK(vmmipc_last_error_info(&old.head));
  EXPECT_EQ(old.head.code, VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(old.head.rank, -1);
  unsigned char rest[sizeof old.head - offsetof(vmmipc_error_info_t, rank) - sizeof(int)];
  std::memcpy(rest, reinterpret_cast<unsigned char *>(&old.head) + offsetof(vmmipc_error_info_t, rank) + sizeof(int),
              sizeof rest);
  for (unsigned char x : rest) EXPECT_EQ(x, 0xab) << "written beyond struct_size";
  EXPECT_EQ(vmmipc_last_error_info(nullptr), VMMIPC_ERR_INVALID_ARG);
  (void)b;
}

TEST(Contract, TheErrnoOfAFailedOsCallIsRecorded) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  vt::Baseline base;
  vmmipc_buf_t b = vt::PatternBuf(1, 3);
  ASSERT_NE(b, nullptr);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  size_t nb = 0;
  int nf = 0;
  ASSERT_VMM_OK(vmmipc_desc_pack(d, nullptr, &nb, nullptr, &nf));
  std::vector<unsigned char> bytes(nb);
  std::vector<int> fds(nf, -1);
  ASSERT_VMM_OK(vmmipc_desc_pack(d, bytes.data(), &nb, fds.data(), &nf));
  ASSERT_EQ(nf, 1);
  const int closed_fd = 1000000;  // no such fd: dup fails with EBADF
  vmmipc_desc_t u = nullptr;
  EXPECT_EQ(vmmipc_desc_unpack(bytes.data(), nb, &closed_fd, 1, &u), VMMIPC_ERR_INVALID_DESC);
  EXPECT_EQ(u, nullptr);
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  ASSERT_VMM_OK(vmmipc_last_error_info(&info));
  EXPECT_EQ(info.code, VMMIPC_ERR_INVALID_DESC);
  EXPECT_EQ(info.os_error, EBADF) << info.message;
  EXPECT_EQ(info.rank, -1);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
  base.Expect("unpack");
}

// One reference per device, however often vmmipc_set_device is called
// (the reference is kept for the life of the process, as cudaSetDevice's).
TEST(Contract, SetDeviceRetainsThePrimaryContextOncePerDevice) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "the retain count is observable on the stand-in only";
  void *lib = dlopen(std::getenv("VMMIPC_CUDA_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  using Fn = int (*)(int);
  Fn retains = reinterpret_cast<Fn>(dlsym(lib, "vmmipc_standin_ctx_retains"));
  ASSERT_NE(retains, nullptr);
  int n = 0;
  ASSERT_VMM_OK(vmmipc_device_count(&n));
  for (int dev = 0; dev < n; dev++) {
    ASSERT_VMM_OK(vmmipc_set_device(dev));
    const int once = retains(dev);
    EXPECT_EQ(once, 1) << "device " << dev;
    for (int k = 0; k < 100; k++) ASSERT_VMM_OK(vmmipc_set_device(dev));
    EXPECT_EQ(retains(dev), once) << "device " << dev << ": a reference per call";
  }
  dlclose(lib);
  ASSERT_GE(vt::UseRankDevice(), 0);
}

}  // namespace
