// Tests of the CPU stand-in driver itself. The driver is loaded the way the
// library loads it: dlopen(VMMIPC_CUDA_DRIVER), then every entry point by
// base name through cuGetProcAddress_v2.
//
// The stand-in reads its environment once, at the first cuInit, so cases
// that need another environment run in a forked child that loads a fresh,
// uninitialised copy of the stand-in (see LoadFresh). Children never call
// MPI or gtest and leave with _exit.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "driver/cu.h"  // VMMIPC__CU_FUNCS: the entry points the library needs
#include "harness/helpers.h"
#include "standin/test_standin.h"

namespace {

using namespace sti_test;

// ---- SCM_RIGHTS --------------------------------------------------------------

bool SendFd(int sock, int fd) {
  char byte = 'F';
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  std::memset(&u, 0, sizeof u);
  struct msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = u.buf;
  msg.msg_controllen = sizeof u.buf;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &msg, MSG_NOSIGNAL) == 1;
}

int RecvFd(int sock) {
  char byte;
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  struct msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = u.buf;
  msg.msg_controllen = sizeof u.buf;
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

// ---- fixture -------------------------------------------------------------------

// Runs in this process's stand-in instance with device 0 current, and checks
// after each test that no driver object and no fd was left behind.
class Standin : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(Main().error, "");
    const char *caps = std::getenv("VMMIPC_STANDIN_CAPS");
    if (caps && *caps)
      GTEST_SKIP() << "in-process stand-in tests need the default capabilities, but VMMIPC_STANDIN_CAPS=" << caps;
    ASSERT_EQ(d().cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(d().cuDeviceGetCount(&ndev_), CUDA_SUCCESS);
    ASSERT_GE(ndev_, 1);
    ASSERT_EQ(d().cuDevicePrimaryCtxRetain(&ctx0_, 0), CUDA_SUCCESS);
    ASSERT_EQ(d().cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
    retained_ = true;
    ASSERT_EQ(CountsOf(d()), Zero()) << "an earlier test leaked driver objects";
    fd_baseline_ = vt::FdCount();
  }
  void TearDown() override {
    if (!retained_) return;
    EXPECT_EQ(CountsOf(d()), Zero()) << "driver objects left behind";
    EXPECT_EQ(vt::FdCount(), fd_baseline_) << "fds left behind";
    EXPECT_EQ(d().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  }
  const Api &d() const { return D(); }

  // Creates an allocation, reserves exactly its size and maps it there with
  // `flags` for device `dev`.
  void MapNew(size_t size, int dev, CUmemAccess_flags flags, CUmemGenericAllocationHandle *h, CUdeviceptr *va) {
    CUmemAllocationProp p = Prop(dev);
    ASSERT_EQ(d().cuMemCreate(h, size, &p, 0), CUDA_SUCCESS);
    ASSERT_EQ(d().cuMemAddressReserve(va, size, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(d().cuMemMap(*va, size, 0, *h, 0), CUDA_SUCCESS);
    ASSERT_EQ(SetAccess(d(), *va, size, dev, flags), CUDA_SUCCESS);
  }
  void UnmapAll(size_t size, CUmemGenericAllocationHandle h, CUdeviceptr va) {
    EXPECT_EQ(d().cuMemUnmap(va, size), CUDA_SUCCESS);
    EXPECT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
    EXPECT_EQ(d().cuMemAddressFree(va, size), CUDA_SUCCESS);
  }
  // The physical index of visible device `ord` (from its documented UUID).
  int PhysOf(int ord) {
    CUuuid u;
    if (d().cuDeviceGetUuid(&u, ord) != CUDA_SUCCESS) return -1;
    return static_cast<unsigned char>(u.bytes[15]);
  }

  int ndev_ = 0;
  CUcontext ctx0_ = nullptr;
  bool retained_ = false;
  int fd_baseline_ = -1;
};

// ---- loading and entry points ------------------------------------------------

TEST(StandinLoad, ExportsOnlyTheLookupFunctionsAndCounters) {
  ASSERT_EQ(Main().error, "");
  void *lib = D().lib;
  EXPECT_NE(dlsym(lib, "cuGetProcAddress_v2"), nullptr);
  EXPECT_NE(dlsym(lib, "cuGetProcAddress"), nullptr);
  EXPECT_NE(dlsym(lib, "vmmipc_standin_counts"), nullptr);
  for (const char *hidden : {"cuInit", "cuMemCreate", "cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuDeviceGetUuid_v2",
                             "sti", "sti_enter", "sti_alloc_find"})
    EXPECT_EQ(dlsym(lib, hidden), nullptr) << hidden << " is exported";
}

TEST(StandinGetProc, ResolvesEveryEntryPointTheLibraryNeeds) {
  ASSERT_EQ(Main().error, "");
  GetProcFn gp = D().getproc;
  GetProcV1Fn gp1 = reinterpret_cast<GetProcV1Fn>(dlsym(D().lib, "cuGetProcAddress"));
  ASSERT_NE(gp1, nullptr);
  // Each name at the version the library asks for it.
  std::vector<std::pair<const char *, int>> names;
#define STI_NAME(name) names.emplace_back(#name, vmmipc__cu_abi_version(#name));
  VMMIPC__CU_FUNCS(STI_NAME)
#undef STI_NAME
  ASSERT_GE(names.size(), 24u);
  for (const auto &[n, version] : names) {
    void *p = nullptr, *p1 = nullptr;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(gp(n, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS) << n << " at " << version;
    EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS) << n;
    EXPECT_NE(p, nullptr) << n;
    // The unversioned export (4 arguments) is the loader's fallback and
    // answers the same.
    EXPECT_EQ(gp1(n, &p1, version, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_SUCCESS) << n;
    EXPECT_EQ(p1, p) << n;
  }
  {
    void *p1 = reinterpret_cast<void *>(1);
    EXPECT_EQ(gp1("cuNoSuchFunction", &p1, CUDA_VERSION, 0), CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(p1, nullptr);
  }
  // Base names select the CUDA 13 variants: distinct names, distinct functions.
  void *htod = nullptr, *dtoh = nullptr;
  CUdriverProcAddressQueryResult st;
  ASSERT_EQ(gp("cuMemcpyHtoD", &htod, CUDA_VERSION, 0, &st), CUDA_SUCCESS);
  ASSERT_EQ(gp("cuMemcpyDtoH", &dtoh, CUDA_VERSION, 0, &st), CUDA_SUCCESS);
  EXPECT_NE(htod, dtoh);
  EXPECT_EQ(reinterpret_cast<void *>(D().cuMemcpyHtoD), htod);
}

TEST(StandinGetProc, UnknownNamesAreNotFound) {
  ASSERT_EQ(Main().error, "");
  for (const char *n : {"cuLaunchCooperativeKernel", "cuMemAllocAsync", "cuNoSuchFunction", ""}) {
    void *p = reinterpret_cast<void *>(0x1);
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    EXPECT_EQ(D().getproc(n, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_ERROR_NOT_FOUND) << n;
    EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) << n;
    EXPECT_EQ(p, nullptr) << n;
  }
  void *p = nullptr;
  EXPECT_EQ(D().getproc(nullptr, &p, CUDA_VERSION, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().getproc("cuInit", nullptr, CUDA_VERSION, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(StandinGetProc, VersionSelectsTheAbi) {
  ASSERT_EQ(Main().error, "");
  GetProcFn gp = D().getproc;
  auto get = [&](const char *name, int version, CUdriverProcAddressQueryResult *st) {
    void *p = nullptr;
    *st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult rc = gp(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, st);
    return rc == CUDA_SUCCESS ? p : nullptr;
  };
  CUdriverProcAddressQueryResult st;
  // Below the version that introduced a function: found, but too new.
  EXPECT_EQ(get("cuMemCreate", 10010, &st), nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_NE(get("cuMemCreate", 10020, &st), nullptr);
  // cuGetProcAddress itself: the 11.3 signature below 12.0, _v2 from 12.0 on.
  void *gp11 = get("cuGetProcAddress", 11030, &st), *gp12 = get("cuGetProcAddress", 12000, &st);
  EXPECT_EQ(gp11, dlsym(D().lib, "cuGetProcAddress"));
  EXPECT_EQ(gp12, reinterpret_cast<void *>(gp));
  // CUDA 13.0 gave cuCtxGetDevice and cuCtxSynchronize a context argument.
  for (const char *n : {"cuCtxGetDevice", "cuCtxSynchronize"}) {
    void *v12 = get(n, 12000, &st), *v12_9 = get(n, 12090, &st), *v13 = get(n, 13000, &st);
    EXPECT_NE(v12, nullptr) << n;
    EXPECT_EQ(v12, v12_9) << n;
    EXPECT_NE(v13, nullptr) << n;
    EXPECT_NE(v13, v12) << n << ": 13.0 serves another ABI";
  }
}

TEST(StandinErrors, RealNamesAndDescriptions) {
  ASSERT_EQ(Main().error, "");
  struct Case {
    CUresult rc;
    const char *name;
  };
#define STI_CASE(rc) Case{rc, #rc}
  for (const Case &c :
       {STI_CASE(CUDA_SUCCESS), STI_CASE(CUDA_ERROR_INVALID_VALUE), STI_CASE(CUDA_ERROR_OUT_OF_MEMORY),
        STI_CASE(CUDA_ERROR_NOT_INITIALIZED), STI_CASE(CUDA_ERROR_NO_DEVICE), STI_CASE(CUDA_ERROR_INVALID_DEVICE),
        STI_CASE(CUDA_ERROR_INVALID_CONTEXT), STI_CASE(CUDA_ERROR_INVALID_HANDLE), STI_CASE(CUDA_ERROR_NOT_FOUND),
        STI_CASE(CUDA_ERROR_NOT_SUPPORTED), STI_CASE(CUDA_ERROR_NOT_PERMITTED),
        STI_CASE(CUDA_ERROR_OPERATING_SYSTEM), STI_CASE(CUDA_ERROR_UNKNOWN)}) {
    const char *name = nullptr, *text = nullptr;
    EXPECT_EQ(D().cuGetErrorName(c.rc, &name), CUDA_SUCCESS) << c.name;
    EXPECT_STREQ(name, c.name);
    EXPECT_EQ(D().cuGetErrorString(c.rc, &text), CUDA_SUCCESS) << c.name;
    EXPECT_TRUE(text && *text) << c.name;
  }
#undef STI_CASE
  const char *s = D().cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s) == CUDA_SUCCESS ? s : nullptr;
  EXPECT_STREQ(s, "invalid argument");
  const char *unknown = "x";
  EXPECT_EQ(D().cuGetErrorName(static_cast<CUresult>(12345), &unknown), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(unknown, nullptr);
}

// ---- initialisation, devices and capabilities (fresh instances in children) -

TEST(StandinInit, NothingWorksBeforeCuInit) {
  ASSERT_EQ(Main().error, "");
  Child c = RunChild([] {
    SetEnv("VMMIPC_STANDIN_DEVICES", nullptr);
    SetEnv("CUDA_VISIBLE_DEVICES", nullptr);
    SetEnv("VMMIPC_STANDIN_CAPS", nullptr);
    Api a;
    std::string e = LoadFresh(&a);
    if (!e.empty()) return e;
    // Each call is its own statement: the report must follow call order.
    int n = -1, ver = 0;
    CUcontext ctx = nullptr;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = Prop(0);
    const char *name = nullptr;
    std::string r = "pre=" + std::to_string(a.cuDeviceGetCount(&n));
    r += "," + std::to_string(a.cuCtxGetCurrent(&ctx));
    r += "," + std::to_string(a.cuMemCreate(&h, kGran, &p, 0));
    r += " ver=" + std::to_string(a.cuDriverGetVersion(&ver));
    r += ":" + std::to_string(ver);
    r += " name=" + std::to_string(a.cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name));
    r += std::string(":") + (name ? name : "");
    r += " badflags=" + std::to_string(a.cuInit(1));
    r += " init=" + std::to_string(a.cuInit(0));
    SetEnv("CUDA_VISIBLE_DEVICES", "1");  // read once: later cuInit calls ignore it
    r += "," + std::to_string(a.cuInit(0));
    r += " n=" + std::to_string(a.cuDeviceGetCount(&n));
    r += ":" + std::to_string(n);
    r += " rel=" + std::to_string(a.cuDevicePrimaryCtxRetain(&ctx, 0));
    r += "," + std::to_string(a.cuDevicePrimaryCtxRelease(0));
    r += "," + std::to_string(a.cuDevicePrimaryCtxRelease(0));
    return r;
  });
  EXPECT_TRUE(ExitedOk(c)) << Describe(c);
  EXPECT_EQ(c.out,
            "pre=3,3,3 ver=0:13000 name=0:CUDA_ERROR_NOT_INITIALIZED badflags=1 init=0,0 n=0:2 rel=0,0,201");
}

// What a fresh stand-in reports with VMMIPC_STANDIN_DEVICES=devices and
// CUDA_VISIBLE_DEVICES=cvd (nullptr: unset): "rc=<cuInit result>" on failure,
// else the physical index of each visible ordinal, read from its UUID.
std::string ProbeDevices(const char *devices, const char *cvd) {
  QuietStderr();
  SetEnv("VMMIPC_STANDIN_DEVICES", devices);
  SetEnv("CUDA_VISIBLE_DEVICES", cvd);
  SetEnv("VMMIPC_STANDIN_CAPS", nullptr);
  Api a;
  std::string e = LoadFresh(&a);
  if (!e.empty()) return e;
  CUresult rc = a.cuInit(0);
  if (rc != CUDA_SUCCESS) return "rc=" + std::to_string(rc);
  int n = -1;
  if (a.cuDeviceGetCount(&n) != CUDA_SUCCESS) return "cuDeviceGetCount failed";
  std::string ids;
  for (int i = 0; i < n; i++) {
    CUdevice dev = -1;
    CUuuid u;
    if (a.cuDeviceGet(&dev, i) != CUDA_SUCCESS || dev != i) return "cuDeviceGet(" + std::to_string(i) + ") != ordinal";
    if (a.cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) return "cuDeviceGetUuid failed";
    int phys = static_cast<unsigned char>(u.bytes[15]);
    if (std::memcmp(u.bytes, ExpectedUuid(phys).data(), 16) != 0) return "undocumented UUID";
    ids += (i ? "," : "") + std::to_string(phys);
  }
  CUdevice dev;
  if (a.cuDeviceGet(&dev, n) != CUDA_ERROR_INVALID_DEVICE) return "cuDeviceGet(count) accepted";
  return "rc=0 ids=" + ids;
}

TEST(StandinDevices, CountAndCudaVisibleDevices) {
  ASSERT_EQ(Main().error, "");
  struct Case {
    const char *devices, *cvd, *expect;
  };
  const Case cases[] = {
      {nullptr, nullptr, "rc=0 ids=0,1"},  // default: two devices
      {"4", nullptr, "rc=0 ids=0,1,2,3"},
      {"8", nullptr, "rc=0 ids=0,1,2,3,4,5,6,7"},
      {"0", nullptr, "rc=100"},  // CUDA_ERROR_NO_DEVICE
      {"9", nullptr, "rc=1"},    // out of range: CUDA_ERROR_INVALID_VALUE
      {"two", nullptr, "rc=1"},
      {"4", "2,0", "rc=0 ids=2,0"},  // ordinals renumber in list order
      {"4", "", "rc=100"},           // empty: no devices
      {"4", "-1", "rc=100"},
      {"4", "1,7,0", "rc=0 ids=1"},  // stops at the first invalid entry
      {"4", "1x,0", "rc=100"},
      {"4", "3,3,1", "rc=0 ids=3"},  // a repeated device ends the list too
      {"4", "GPU-564d4d2d-5354-4e03-0000-000000000003,1", "rc=0 ids=3,1"},  // full UUID
      {"4", "GPU-564D4D2D-5354-4E02-0000-000000000002", "rc=0 ids=2"},      // any case
      {"4", "GPU-564d4d2d-5354-4e01", "rc=0 ids=1"},                        // unambiguous prefix
      {"4", "0,GPU-564d4d2d-5354-4e03-00", "rc=0 ids=0,3"},
      {"4", "GPU-564d4d2d,0", "rc=100"},  // ambiguous prefix: invalid, list ends
      {"4", "0,GPU-deadbeef,1", "rc=0 ids=0"},
      {"4", "GPU-", "rc=100"},
      {"2", "GPU-564d4d2d-5354-4e03", "rc=100"},  // device 3 does not exist with 2
  };
  for (const Case &k : cases) {
    Child c = RunChild([&] { return ProbeDevices(k.devices, k.cvd); });
    EXPECT_TRUE(ExitedOk(c)) << Describe(c);
    EXPECT_EQ(c.out, k.expect) << "VMMIPC_STANDIN_DEVICES=" << (k.devices ? k.devices : "(unset)")
                               << " CUDA_VISIBLE_DEVICES=" << (k.cvd ? k.cvd : "(unset)");
  }
}

// What a fresh stand-in with VMMIPC_STANDIN_CAPS=caps reports for device 0.
std::string ProbeCaps(const char *caps) {
  QuietStderr();
  SetEnv("VMMIPC_STANDIN_DEVICES", nullptr);
  SetEnv("CUDA_VISIBLE_DEVICES", nullptr);
  SetEnv("VMMIPC_STANDIN_CAPS", caps);
  Api a;
  std::string e = LoadFresh(&a);
  if (!e.empty()) return e;
  CUresult rc = a.cuInit(0);
  if (rc != CUDA_SUCCESS) return "rc=" + std::to_string(rc);
  int vmm = -1, fd = -1, fabric = -1, rdma = -1, rdma_vmm = -1;
  a.cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0);
  a.cuDeviceGetAttribute(&rdma_vmm, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0);
  a.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
  a.cuDeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0);
  a.cuDeviceGetAttribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0);
  CUmemGenericAllocationHandle h;
  CUmemAllocationProp pfd = Prop(0, kFd), pnone = Prop(0, CU_MEM_HANDLE_TYPE_NONE);
  CUresult rfd = a.cuMemCreate(&h, kGran, &pfd, 0);
  if (rfd == CUDA_SUCCESS) a.cuMemRelease(h);
  CUresult rnone = a.cuMemCreate(&h, kGran, &pnone, 0);
  if (rnone == CUDA_SUCCESS) a.cuMemRelease(h);
  CUmemAllocationProp prdma = Prop(0, kFd);
  prdma.allocFlags.gpuDirectRDMACapable = 1;
  CUresult rrdma = a.cuMemCreate(&h, kGran, &prdma, 0);
  if (rrdma == CUDA_SUCCESS) a.cuMemRelease(h);
  return "vmm=" + std::to_string(vmm) + " fd=" + std::to_string(fd) + " fabric=" + std::to_string(fabric) +
         " rdma=" + std::to_string(rdma) + "," + std::to_string(rdma_vmm) + " create_fd=" + std::to_string(rfd) +
         " create_none=" + std::to_string(rnone) + " create_rdma=" + std::to_string(rrdma);
}

TEST(StandinDevices, CapabilitiesFromTheEnvironment) {
  ASSERT_EQ(Main().error, "");
  struct Case {
    const char *caps, *expect;
  };
  const Case cases[] = {
      {nullptr, "vmm=1 fd=1 fabric=0 rdma=1,1 create_fd=0 create_none=0 create_rdma=0"},
      {"", "vmm=1 fd=1 fabric=0 rdma=1,1 create_fd=0 create_none=0 create_rdma=0"},
      // CUDA_ERROR_NOT_SUPPORTED is 801
      {"novmm", "vmm=0 fd=1 fabric=0 rdma=1,1 create_fd=801 create_none=801 create_rdma=801"},
      {"nofd", "vmm=1 fd=0 fabric=0 rdma=1,1 create_fd=801 create_none=0 create_rdma=801"},
      {"novmm,nofd", "vmm=0 fd=0 fabric=0 rdma=1,1 create_fd=801 create_none=801 create_rdma=801"},
      {"nordma", "vmm=1 fd=1 fabric=0 rdma=0,0 create_fd=0 create_none=0 create_rdma=801"},
      {"bogus", "rc=1"},
  };
  for (const Case &k : cases) {
    Child c = RunChild([&] { return ProbeCaps(k.caps); });
    EXPECT_TRUE(ExitedOk(c)) << Describe(c);
    EXPECT_EQ(c.out, k.expect) << "VMMIPC_STANDIN_CAPS=" << (k.caps ? k.caps : "(unset)");
  }
}

TEST_F(Standin, DeviceQueries) {
  for (int i = 0; i < ndev_; i++) {
    char name[64] = {0};
    EXPECT_EQ(d().cuDeviceGetName(name, sizeof name, i), CUDA_SUCCESS);
    EXPECT_NE(std::string(name).find("stand-in"), std::string::npos) << name;
    int v = -1;
    EXPECT_EQ(d().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, i), CUDA_SUCCESS);
    EXPECT_EQ(v, 1);
    EXPECT_EQ(d().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, i),
              CUDA_SUCCESS);
    EXPECT_EQ(v, 1);
    EXPECT_EQ(d().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, i), CUDA_SUCCESS);
    EXPECT_EQ(v, 0);
    EXPECT_EQ(d().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, i), CUDA_SUCCESS);
    EXPECT_EQ(v, 1);
    int can = -1;
    EXPECT_EQ(d().cuDeviceCanAccessPeer(&can, i, i), CUDA_SUCCESS);
    EXPECT_EQ(can, 0) << "a device is not its own peer";
  }
  int v;
  char name[8];
  CUuuid u;
  EXPECT_EQ(d().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, ndev_), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(d().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuDeviceGetName(name, sizeof name, -1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(d().cuDeviceGetUuid(&u, ndev_), CUDA_ERROR_INVALID_DEVICE);
  // Distinct, documented UUIDs.
  for (int i = 0; i < ndev_; i++)
    for (int j = i + 1; j < ndev_; j++) EXPECT_NE(PhysOf(i), PhysOf(j));
}

// ---- contexts ------------------------------------------------------------------

TEST_F(Standin, ContextsArePerDeviceAndCurrentPerThread) {
  CUcontext again = nullptr;
  ASSERT_EQ(d().cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, ctx0_) << "one primary context per device";
  EXPECT_EQ(d().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CUcontext cur = nullptr;
  CUdevice dev = -1;
  EXPECT_EQ(d().cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx0_);
  EXPECT_EQ(d().cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(d().cuCtxSynchronize(), CUDA_SUCCESS);
  // A context the driver never gave out.
  int bogus = 0;
  EXPECT_EQ(d().cuCtxSetCurrent(reinterpret_cast<CUcontext>(&bogus)), CUDA_ERROR_INVALID_CONTEXT);
  // Another thread starts without a current context.
  std::string other;
  std::thread t([&] {
    CUcontext c = reinterpret_cast<CUcontext>(&bogus);
    CUdevice dv;
    unsigned char byte = 0;
    other = std::to_string(d().cuCtxGetCurrent(&c));
    other += c ? " ctx" : " null";
    other += " dev=" + std::to_string(d().cuCtxGetDevice(&dv));
    other += " sync=" + std::to_string(d().cuCtxSynchronize());
    other += " copy=" + std::to_string(d().cuMemcpyHtoD(1, &byte, 1));
  });
  t.join();
  EXPECT_EQ(other, "0 null dev=201 sync=201 copy=201");  // CUDA_ERROR_INVALID_CONTEXT
  EXPECT_EQ(d().cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d().cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(d().cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
}

// The CUDA 13 variants behind "cuCtxGetDevice" / "cuCtxSynchronize" at
// cudaVersion 13000 take a context, NULL meaning the current one.
TEST_F(Standin, Cuda13ContextVariants) {
  using GetDeviceV2 = CUresult (*)(CUdevice *, CUcontext);
  using SyncV2 = CUresult (*)(CUcontext);
  GetDeviceV2 get_device = nullptr;
  SyncV2 sync = nullptr;
  void *p = nullptr;
  CUdriverProcAddressQueryResult st;
  ASSERT_EQ(d().getproc("cuCtxGetDevice", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
  get_device = reinterpret_cast<GetDeviceV2>(p);
  ASSERT_EQ(d().getproc("cuCtxSynchronize", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
  sync = reinterpret_cast<SyncV2>(p);
  CUdevice dev = -1;
  EXPECT_EQ(get_device(&dev, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(get_device(&dev, ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(sync(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(sync(ctx0_), CUDA_SUCCESS);
  int bogus = 0;
  EXPECT_EQ(get_device(&dev, reinterpret_cast<CUcontext>(&bogus)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(sync(reinterpret_cast<CUcontext>(&bogus)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(get_device(nullptr, ctx0_), CUDA_ERROR_INVALID_VALUE);
  // Another thread, with no current context, may still name one.
  std::string other;
  std::thread t([&] {
    CUdevice dv = -1;
    other = std::to_string(get_device(&dv, nullptr));
    other += " " + std::to_string(get_device(&dv, ctx0_));
    other += ":" + std::to_string(dv);
    other += " " + std::to_string(sync(nullptr));
    other += " " + std::to_string(sync(ctx0_));
  });
  t.join();
  EXPECT_EQ(other, "201 0:0 201 0");
}

// ---- granularity, create, reserve -----------------------------------------------

TEST_F(Standin, GranularityIsTwoMiB) {
  for (int i = 0; i < ndev_; i++) {
    CUmemAllocationProp p = Prop(i);
    size_t g = 0;
    EXPECT_EQ(d().cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    EXPECT_EQ(g, kGran);
    g = 0;
    EXPECT_EQ(d().cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
    EXPECT_EQ(g, kGran);
  }
  size_t g;
  CUmemAllocationProp p = Prop(ndev_);
  EXPECT_EQ(d().cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_DEVICE);
  p = Prop(0);
  EXPECT_EQ(d().cuMemGetAllocationGranularity(&g, &p, static_cast<CUmemAllocationGranularity_flags>(7)),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Standin, CreateValidatesItsArguments) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = Prop(0);
  for (size_t bad : {size_t(0), kMiB, 3 * kMiB, kGran + 4096})
    EXPECT_EQ(d().cuMemCreate(&h, bad, &p, 0), CUDA_ERROR_INVALID_VALUE) << bad;
  EXPECT_EQ(d().cuMemCreate(&h, kGran, &p, 1), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp q = Prop(ndev_);
  EXPECT_EQ(d().cuMemCreate(&h, kGran, &q, 0), CUDA_ERROR_INVALID_DEVICE);
  q = Prop(-1);
  EXPECT_EQ(d().cuMemCreate(&h, kGran, &q, 0), CUDA_ERROR_INVALID_DEVICE);
  q = Prop(0);
  q.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_EQ(d().cuMemCreate(&h, kGran, &q, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemCreate(&h, kGran, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CountsOf(d()), Zero());
  EXPECT_EQ(vt::FdCount(), fd_baseline_);
  // Handles: only live ones are accepted, once.
  EXPECT_EQ(d().cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemRelease(12345), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d().cuMemCreate(&h, kGran, &p, 0), CUDA_SUCCESS);
  EXPECT_NE(h, 0u);
  EXPECT_EQ(CountsOf(d()), (Counts{1, 0, 0}));
  EXPECT_EQ(vt::FdCount(), fd_baseline_ + 1) << "one memfd per allocation";
  EXPECT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Standin, FabricHandlesAreNotPermitted) {
  int v = -1;
  EXPECT_EQ(d().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = Prop(0, CU_MEM_HANDLE_TYPE_FABRIC);
  EXPECT_EQ(d().cuMemCreate(&h, kGran, &p, 0), CUDA_ERROR_NOT_PERMITTED);
  p = Prop(0, CU_MEM_HANDLE_TYPE_FABRIC | kFd);
  EXPECT_EQ(d().cuMemCreate(&h, kGran, &p, 0), CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(CountsOf(d()), Zero());
}

TEST_F(Standin, ReserveAlignsAndHonoursAFreeHint) {
  CUdeviceptr a = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&a, 4 * kMiB, 64 * kMiB, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(a % (64 * kMiB), 0u);
  EXPECT_EQ(CountsOf(d()), (Counts{0, 0, 1}));
  EXPECT_EQ(d().cuMemAddressFree(a, 2 * kMiB), CUDA_ERROR_INVALID_VALUE) << "size must match";
  EXPECT_EQ(d().cuMemAddressFree(a + kGran, 2 * kMiB), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemAddressFree(a, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(a, 4 * kMiB), CUDA_ERROR_INVALID_VALUE) << "freed twice";
  CUdeviceptr x;
  EXPECT_EQ(d().cuMemAddressReserve(&x, 3 * kMiB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemAddressReserve(&x, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemAddressReserve(&x, kGran, 3 * kMiB, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemAddressReserve(&x, kGran, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);

  // In-place growth: a hint right after a reservation is honoured when free.
  CUdeviceptr big = 0, lo = 0, hi = 0, other = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&big, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemAddressFree(big, 8 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemAddressReserve(&lo, 4 * kMiB, 0, big, 0), CUDA_SUCCESS);
  EXPECT_EQ(lo, big);
  ASSERT_EQ(d().cuMemAddressReserve(&hi, 4 * kMiB, 0, lo + 4 * kMiB, 0), CUDA_SUCCESS);
  EXPECT_EQ(hi, lo + 4 * kMiB);
  // A hint into a taken range is only a hint: another range comes back.
  ASSERT_EQ(d().cuMemAddressReserve(&other, 2 * kMiB, 0, lo, 0), CUDA_SUCCESS);
  EXPECT_TRUE(other + 2 * kMiB <= lo || other >= hi + 4 * kMiB) << "overlaps a live reservation";
  EXPECT_EQ(CountsOf(d()), (Counts{0, 0, 3}));
  EXPECT_EQ(d().cuMemAddressFree(lo, 8 * kMiB), CUDA_ERROR_INVALID_VALUE) << "two reservations are not one";
  EXPECT_EQ(d().cuMemAddressFree(lo, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(hi, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(other, 2 * kMiB), CUDA_SUCCESS);
}

// ---- map, access, copies -----------------------------------------------------------

TEST_F(Standin, MapSetAccessCopyRoundTrip) {
  CUmemGenericAllocationHandle a = 0, b = 0;
  CUmemAllocationProp p = Prop(0);
  ASSERT_EQ(d().cuMemCreate(&a, 4 * kMiB, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemCreate(&b, 2 * kMiB, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va, 4 * kMiB, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va + 4 * kMiB, 2 * kMiB, 0, b, 0), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{2, 2, 1}));
  EXPECT_EQ(GetAccess(d(), va, 0), 0u) << "no access until cuMemSetAccess";
  // One call over both mappings.
  ASSERT_EQ(SetAccess(d(), va, 6 * kMiB, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_EQ(GetAccess(d(), va, 0), unsigned(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  EXPECT_EQ(GetAccess(d(), va + 5 * kMiB, 0), unsigned(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));

  void *ptr = reinterpret_cast<void *>(va);
  ASSERT_NO_FATAL_FAILURE(vt::FillPattern(ptr, 6 * kMiB, 7));
  EXPECT_TRUE(vt::CheckPattern(ptr, 6 * kMiB, 7));
  // Device memory is the host memory at the same address.
  const unsigned char *bytes = static_cast<const unsigned char *>(ptr);
  EXPECT_EQ(bytes[5 * kMiB + 3], vt::PatternByte(7, 5 * kMiB + 3));
  // DtoD from chunk a into chunk b, then memset.
  ASSERT_EQ(d().cuMemcpyDtoD(va + 4 * kMiB, va, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_TRUE(vt::CheckPattern(reinterpret_cast<void *>(va + 4 * kMiB), 2 * kMiB, 7));
  ASSERT_EQ(d().cuMemsetD8(va + kMiB, 0xab, 4096), CUDA_SUCCESS);
  std::vector<unsigned char> h(4096);
  ASSERT_EQ(d().cuMemcpyDtoH(h.data(), va + kMiB, h.size()), CUDA_SUCCESS);
  EXPECT_EQ(h, std::vector<unsigned char>(4096, 0xab));
  EXPECT_EQ(vt::FdCount(), fd_baseline_ + 2);

  // Copies check that the device side is device memory.
  unsigned char host[16] = {0};
  EXPECT_EQ(d().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(host), host, sizeof host), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemcpyDtoH(host, va + 6 * kMiB - 8, 16), CUDA_ERROR_INVALID_VALUE) << "runs past the mappings";
  EXPECT_EQ(d().cuMemcpyDtoH(host, va + 6 * kMiB - 16, 16), CUDA_SUCCESS);

  // One unmap over both mappings; the handles still hold the allocations.
  ASSERT_EQ(d().cuMemUnmap(va, 6 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{2, 0, 1}));
  EXPECT_EQ(d().cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(va, 8 * kMiB), CUDA_SUCCESS);
}

TEST_F(Standin, MapRequiresTheWholeAllocationInsideAReservation) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = Prop(0);
  ASSERT_EQ(d().cuMemCreate(&h, 4 * kMiB, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemMap(va, 2 * kMiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "smaller than the allocation";
  EXPECT_EQ(d().cuMemMap(va, 6 * kMiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "larger than the allocation";
  EXPECT_EQ(d().cuMemMap(va, 4 * kMiB, 2 * kMiB, h, 0), CUDA_ERROR_INVALID_VALUE) << "offset";
  EXPECT_EQ(d().cuMemMap(va + kMiB, 4 * kMiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "unaligned";
  EXPECT_EQ(d().cuMemMap(va + 6 * kMiB, 4 * kMiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "past the reservation";
  EXPECT_EQ(d().cuMemMap(va, 4 * kMiB, 0, h, 1), CUDA_ERROR_INVALID_VALUE) << "flags";
  EXPECT_EQ(d().cuMemMap(va, 4 * kMiB, 0, h + 1, 0), CUDA_ERROR_INVALID_VALUE) << "bad handle";
  EXPECT_EQ(CountsOf(d()), (Counts{1, 0, 1}));
  ASSERT_EQ(d().cuMemMap(va + 2 * kMiB, 4 * kMiB, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemMap(va, 4 * kMiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "overlaps a mapping";
  EXPECT_EQ(CountsOf(d()), (Counts{1, 1, 1}));
  ASSERT_EQ(d().cuMemUnmap(va + 2 * kMiB, 4 * kMiB), CUDA_SUCCESS);
  // Outside any reservation.
  CUdeviceptr gone = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&gone, 4 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemAddressFree(gone, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemMap(gone, 4 * kMiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemMap(va, 4 * kMiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE) << "released handle";
  EXPECT_EQ(d().cuMemAddressFree(va, 8 * kMiB), CUDA_SUCCESS);
}

TEST_F(Standin, UnmapAndAddressFreeRules) {
  CUmemGenericAllocationHandle a = 0, b = 0;
  CUmemAllocationProp p = Prop(0);
  ASSERT_EQ(d().cuMemCreate(&a, kGran, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemCreate(&b, kGran, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va, kGran, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va + kGran, kGran, 0, b, 0), CUDA_SUCCESS);
  ASSERT_EQ(SetAccess(d(), va, 2 * kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemUnmap(va, kMiB), CUDA_ERROR_INVALID_VALUE) << "part of a mapping";
  EXPECT_EQ(d().cuMemUnmap(va, 3 * kMiB), CUDA_ERROR_INVALID_VALUE) << "one and a half mappings";
  EXPECT_EQ(d().cuMemUnmap(va, 8 * kMiB), CUDA_ERROR_INVALID_VALUE) << "runs into unmapped space";
  EXPECT_EQ(d().cuMemUnmap(va + 4 * kMiB, kGran), CUDA_ERROR_INVALID_VALUE) << "nothing mapped there";
  EXPECT_EQ(d().cuMemAddressFree(va, 8 * kMiB), CUDA_ERROR_INVALID_VALUE) << "still mapped";
  EXPECT_EQ(CountsOf(d()), (Counts{2, 2, 1}));
  ASSERT_EQ(d().cuMemUnmap(va + kGran, kGran), CUDA_SUCCESS);
  // The unmapped range is reserved, inaccessible memory again.
  Child c = RunChild([&] {
    volatile unsigned char *q = reinterpret_cast<volatile unsigned char *>(va + kGran);
    return std::to_string(q[0]);
  });
  EXPECT_TRUE(KilledBy(c, SIGSEGV)) << Describe(c);
  unsigned char byte = 0;
  EXPECT_EQ(d().cuMemcpyHtoD(va + kGran, &byte, 1), CUDA_ERROR_INVALID_VALUE) << "copy into unmapped space";
  ASSERT_EQ(d().cuMemUnmap(va, kGran), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(va, 8 * kMiB), CUDA_SUCCESS);
}

TEST_F(Standin, SetAccessRules) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_NO_FATAL_FAILURE(MapNew(kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, &h, &va));
  EXPECT_EQ(SetAccess(d(), va, kGran, ndev_, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(SetAccess(d(), va, kGran, -1, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(SetAccess(d(), va, kGran, 0, static_cast<CUmemAccess_flags>(2)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(SetAccess(d(), va, 2 * kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_ERROR_INVALID_VALUE)
      << "beyond the mapping";
  CUmemAccessDesc host = Access(0, CU_MEM_ACCESS_FLAGS_PROT_READ);
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_EQ(d().cuMemSetAccess(va, kGran, &host, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemSetAccess(va, kGran, &host, 0), CUDA_ERROR_INVALID_VALUE);
  // A failed call changes nothing.
  EXPECT_EQ(GetAccess(d(), va, 0), unsigned(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  unsigned long long f;
  CUmemLocation bad{CU_MEM_LOCATION_TYPE_DEVICE, ndev_};
  EXPECT_EQ(d().cuMemGetAccess(&f, &bad, va), CUDA_ERROR_INVALID_DEVICE);
  CUmemLocation dev0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  EXPECT_EQ(d().cuMemGetAccess(&f, &dev0, va + kGran), CUDA_ERROR_INVALID_VALUE) << "not mapped";
  UnmapAll(kGran, h, va);
}

TEST_F(Standin, ReadOnlyMappingFaultsOnWrite) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_NO_FATAL_FAILURE(MapNew(kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, &h, &va));
  ASSERT_NO_FATAL_FAILURE(vt::FillPattern(reinterpret_cast<void *>(va), kGran, 3));
  ASSERT_EQ(SetAccess(d(), va, kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_SUCCESS);
  EXPECT_EQ(GetAccess(d(), va, 0), unsigned(CU_MEM_ACCESS_FLAGS_PROT_READ));
  volatile unsigned char *q = reinterpret_cast<volatile unsigned char *>(va);

  Child read = RunChild([&] { return q[100] == vt::PatternByte(3, 100) ? std::string("read ok") : "wrong byte"; });
  EXPECT_TRUE(ExitedOk(read)) << Describe(read);
  EXPECT_EQ(read.out, "read ok");
  Child write = RunChild([&] {
    q[100] = 1;
    return std::string("wrote");
  });
  EXPECT_TRUE(KilledBy(write, SIGSEGV)) << Describe(write);
  // The driver's own copy is a plain memcpy and faults the same way.
  // (From pageable memory it may land after the call returns: the context
  // synchronisation makes it land in the child.)
  Child copy = RunChild([&] {
    unsigned char byte = 1;
    CUresult rc = d().cuMemcpyHtoD(va + 100, &byte, 1);
    return "copy returned " + std::to_string(rc) + ", sync " + std::to_string(d().cuCtxSynchronize());
  });
  EXPECT_TRUE(KilledBy(copy, SIGSEGV)) << Describe(copy);
  EXPECT_TRUE(vt::CheckPattern(reinterpret_cast<void *>(va), kGran, 3)) << "a faulting write changed memory";

  // PROT_NONE: even reads fault.
  ASSERT_EQ(SetAccess(d(), va, kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE), CUDA_SUCCESS);
  Child none = RunChild([&] { return std::to_string(q[0]); });
  EXPECT_TRUE(KilledBy(none, SIGSEGV)) << Describe(none);
  UnmapAll(kGran, h, va);
}

// Contexts, peer access and per-device access flags of a second device.
TEST_F(Standin, SecondDevice) {
  if (ndev_ < 2) GTEST_SKIP() << "needs 2 visible stand-in devices, this process sees " << ndev_;
  CUcontext c1 = nullptr;
  CUdevice dev = -1;
  ASSERT_EQ(d().cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  EXPECT_NE(c1, ctx0_);
  EXPECT_EQ(d().cuCtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT_EQ(d().cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(d().cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(d().cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  int can = -1;
  EXPECT_EQ(d().cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  EXPECT_EQ(d().cuDeviceCanAccessPeer(&can, 1, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);

  // Flags are recorded per device; the CPU protection is their union.
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_NO_FATAL_FAILURE(MapNew(kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READ, &h, &va));
  EXPECT_EQ(GetAccess(d(), va, 1), 0u) << "device 1 was given nothing";
  volatile unsigned char *q = reinterpret_cast<volatile unsigned char *>(va);
  Child ro = RunChild([&] {
    q[100] = 0x5a;
    return std::string("wrote");
  });
  EXPECT_TRUE(KilledBy(ro, SIGSEGV)) << Describe(ro);
  CUmemAccessDesc both[2] = {Access(0, CU_MEM_ACCESS_FLAGS_PROT_READ), Access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
  ASSERT_EQ(d().cuMemSetAccess(va, kGran, both, 2), CUDA_SUCCESS);
  EXPECT_EQ(GetAccess(d(), va, 0), unsigned(CU_MEM_ACCESS_FLAGS_PROT_READ));
  EXPECT_EQ(GetAccess(d(), va, 1), unsigned(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  Child rw = RunChild([&] {
    q[100] = 0x5a;  // MAP_SHARED: the parent sees it
    return std::string("wrote");
  });
  EXPECT_TRUE(ExitedOk(rw)) << Describe(rw);
  EXPECT_EQ(q[100], 0x5a);
  UnmapAll(kGran, h, va);
}

// As the driver: an event records only on a stream of its own context (a
// default stream stands for the current context's).
TEST_F(Standin, AnEventRecordsOnlyOnItsOwnContextsStreams) {
  if (ndev_ < 2) GTEST_SKIP() << "needs 2 visible stand-in devices, this process sees " << ndev_;
  CUcontext c1 = nullptr;
  ASSERT_EQ(d().cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  CUstream s0 = nullptr;
  ASSERT_EQ(d().cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(d().cuCtxSetCurrent(c1), CUDA_SUCCESS);
  CUevent e1 = nullptr;
  ASSERT_EQ(d().cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventRecord(e1, s0), CUDA_ERROR_INVALID_HANDLE) << "device 0's stream";
  EXPECT_EQ(d().cuEventRecord(e1, nullptr), CUDA_SUCCESS) << "device 1's legacy stream";
  ASSERT_EQ(d().cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventRecord(e1, nullptr), CUDA_ERROR_INVALID_HANDLE) << "device 0's legacy stream";
  EXPECT_EQ(d().cuEventSynchronize(e1), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventDestroy(e1), CUDA_SUCCESS);
  EXPECT_EQ(d().cuStreamDestroy(s0), CUDA_SUCCESS);
  EXPECT_EQ(d().cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

TEST_F(Standin, ReleasedAllocationLivesUntilItsLastMappingGoes) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_NO_FATAL_FAILURE(MapNew(kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, &h, &va));
  ASSERT_NO_FATAL_FAILURE(vt::FillPattern(reinterpret_cast<void *>(va), kGran, 5));
  EXPECT_EQ(vt::FdCount(), fd_baseline_ + 1);
  ASSERT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{1, 1, 1})) << "the mapping holds the allocation";
  EXPECT_EQ(vt::FdCount(), fd_baseline_ + 1);
  EXPECT_TRUE(vt::CheckPattern(reinterpret_cast<void *>(va), kGran, 5));
  ASSERT_EQ(d().cuMemUnmap(va, kGran), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{0, 0, 1}));
  EXPECT_EQ(vt::FdCount(), fd_baseline_) << "the memfd closes with the last reference";
  EXPECT_EQ(d().cuMemAddressFree(va, kGran), CUDA_SUCCESS);
}

// ---- address queries: which allocation backs an address ---------------------------

TEST_F(Standin, RetainGivesTheHandleBehindAnyAddressOfAMapping) {
  CUmemGenericAllocationHandle a = 0, b = 0, r = 0;
  CUmemAllocationProp p = Prop(0);
  ASSERT_EQ(d().cuMemCreate(&a, 4 * kMiB, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemCreate(&b, 2 * kMiB, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va, 4 * kMiB, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va + 4 * kMiB, 2 * kMiB, 0, b, 0), CUDA_SUCCESS);
  // Start, middle and end of a mapping all give the handle cuMemCreate gave.
  for (CUdeviceptr at : {va, va + kMiB + 4096, va + 4 * kMiB - 1}) {
    ASSERT_EQ(d().cuMemRetainAllocationHandle(&r, reinterpret_cast<void *>(at)), CUDA_SUCCESS);
    EXPECT_EQ(r, a);
    EXPECT_EQ(d().cuMemRelease(r), CUDA_SUCCESS);
  }
  ASSERT_EQ(d().cuMemRetainAllocationHandle(&r, reinterpret_cast<void *>(va + 4 * kMiB)), CUDA_SUCCESS);
  EXPECT_EQ(r, b);
  EXPECT_EQ(d().cuMemRelease(r), CUDA_SUCCESS);
  // A hole in the reservation, plain memory, host memory: no handle.
  EXPECT_EQ(d().cuMemRetainAllocationHandle(&r, reinterpret_cast<void *>(va + 6 * kMiB)), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr plain = 0;
  ASSERT_EQ(d().cuMemAlloc(&plain, kGran), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRetainAllocationHandle(&r, reinterpret_cast<void *>(plain)), CUDA_ERROR_INVALID_VALUE);
  int local = 0;
  EXPECT_EQ(d().cuMemRetainAllocationHandle(&r, &local), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemRetainAllocationHandle(nullptr, reinterpret_cast<void *>(va)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemFree(plain), CUDA_SUCCESS);
  // A retain is one more reference: the handle survives one release.
  ASSERT_EQ(d().cuMemRetainAllocationHandle(&r, reinterpret_cast<void *>(va)), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemRelease(a), CUDA_SUCCESS);
  CUmemAllocationProp got = {};
  EXPECT_EQ(d().cuMemGetAllocationPropertiesFromHandle(&got, a), CUDA_SUCCESS) << "still held by the retain";
  ASSERT_EQ(d().cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(a), CUDA_ERROR_INVALID_VALUE) << "no reference left";
  EXPECT_EQ(CountsOf(d()), (Counts{2, 2, 1})) << "the mapping holds the allocation";
  // While mapped, a released handle can be retained again, with its value.
  ASSERT_EQ(d().cuMemRetainAllocationHandle(&r, reinterpret_cast<void *>(va + kMiB)), CUDA_SUCCESS);
  EXPECT_EQ(r, a);
  ASSERT_EQ(d().cuMemUnmap(va, 6 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{2, 0, 1})) << "both handles hold their allocations";
  EXPECT_EQ(d().cuMemRelease(r), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(va, 8 * kMiB), CUDA_SUCCESS);
}

TEST_F(Standin, AddressRangeAndPointerAttributes) {
  CUmemGenericAllocationHandle a = 0, nofd = 0;
  CUmemAllocationProp p = Prop(0), pn = Prop(0, CU_MEM_HANDLE_TYPE_NONE);
  ASSERT_EQ(d().cuMemCreate(&a, 4 * kMiB, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemCreate(&nofd, 2 * kMiB, &pn, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0, plain = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va, 4 * kMiB, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va + 4 * kMiB, 2 * kMiB, 0, nofd, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemAlloc(&plain, 3 * kMiB + 5), CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(d().cuMemGetAddressRange(&base, &size, va + kMiB + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, va);
  EXPECT_EQ(size, 4 * kMiB);
  ASSERT_EQ(d().cuMemGetAddressRange(&base, &size, va + 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(base, va + 4 * kMiB);
  EXPECT_EQ(size, 2 * kMiB);
  EXPECT_EQ(d().cuMemGetAddressRange(&base, &size, va + 6 * kMiB), CUDA_ERROR_NOT_FOUND) << "a hole";
  ASSERT_EQ(d().cuMemGetAddressRange(&base, nullptr, plain + 7), CUDA_SUCCESS);
  EXPECT_EQ(base, plain);
  ASSERT_EQ(d().cuMemGetAddressRange(nullptr, &size, plain + 7), CUDA_SUCCESS);
  EXPECT_EQ(size, 3 * kMiB + 5);

  size_t msize = 0;
  CUdeviceptr mbase = 0;
  unsigned long long types = 99;
  int legacy = -1, mapped = -1;
  CUmemoryPool pool = reinterpret_cast<CUmemoryPool>(1);
  ASSERT_EQ(d().cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + kMiB), CUDA_SUCCESS);
  EXPECT_EQ(msize, 4 * kMiB);
  ASSERT_EQ(d().cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, va + kMiB), CUDA_SUCCESS);
  EXPECT_EQ(mbase, va);
  ASSERT_EQ(d().cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va), CUDA_SUCCESS);
  EXPECT_EQ(types, 1u);
  ASSERT_EQ(d().cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va + 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(types, 0u) << "created without POSIX fds";
  ASSERT_EQ(d().cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, plain), CUDA_SUCCESS);
  EXPECT_EQ(types, 0u);
  ASSERT_EQ(d().cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va), CUDA_SUCCESS);
  EXPECT_EQ(legacy, 0);
  ASSERT_EQ(d().cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, va), CUDA_SUCCESS);
  EXPECT_EQ(mapped, 1);
  ASSERT_EQ(d().cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, plain), CUDA_SUCCESS);
  EXPECT_EQ(pool, nullptr) << "no stream-ordered pools in the stand-in";
  EXPECT_EQ(d().cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + 6 * kMiB),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_BUFFER_ID, va), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(d().cuPointerGetAttribute(nullptr, CU_POINTER_ATTRIBUTE_MAPPED, va), CUDA_ERROR_INVALID_VALUE);

  EXPECT_EQ(d().cuMemFree(plain), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemUnmap(va, 6 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(nofd), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(va, 8 * kMiB), CUDA_SUCCESS);
}

TEST_F(Standin, GpuDirectRdmaFlagIsRecorded) {
  CUmemGenericAllocationHandle h = 0, plain = 0;
  CUmemAllocationProp p = Prop(0), q = Prop(0);
  p.allocFlags.gpuDirectRDMACapable = 1;
  ASSERT_EQ(d().cuMemCreate(&h, kGran, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemCreate(&plain, kGran, &q, 0), CUDA_SUCCESS);
  CUmemAllocationProp got = {};
  ASSERT_EQ(d().cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.allocFlags.gpuDirectRDMACapable, 1);
  ASSERT_EQ(d().cuMemGetAllocationPropertiesFromHandle(&got, plain), CUDA_SUCCESS);
  EXPECT_EQ(got.allocFlags.gpuDirectRDMACapable, 0);
  CUdeviceptr va = 0;
  ASSERT_EQ(d().cuMemAddressReserve(&va, 2 * kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va, kGran, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemMap(va + kGran, kGran, 0, plain, 0), CUDA_SUCCESS);
  int capable = -1;
  ASSERT_EQ(d().cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, va), CUDA_SUCCESS);
  EXPECT_EQ(capable, 1);
  ASSERT_EQ(d().cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, va + kGran),
            CUDA_SUCCESS);
  EXPECT_EQ(capable, 0);
  ASSERT_EQ(d().cuMemUnmap(va, 2 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(plain), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemAddressFree(va, 2 * kGran), CUDA_SUCCESS);
}

// ---- export / import -----------------------------------------------------------------

TEST_F(Standin, ExportGivesANewFdEachCall) {
  CUmemGenericAllocationHandle h = 0, none = 0;
  CUmemAllocationProp p = Prop(0), pn = Prop(0, CU_MEM_HANDLE_TYPE_NONE);
  ASSERT_EQ(d().cuMemCreate(&h, 4 * kMiB, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemCreate(&none, kGran, &pn, 0), CUDA_SUCCESS);
  int fd1 = -1, fd2 = -1;
  ASSERT_EQ(d().cuMemExportToShareableHandle(&fd1, h, kFd, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemExportToShareableHandle(&fd2, h, kFd, 0), CUDA_SUCCESS);
  EXPECT_GE(fd1, 0);
  EXPECT_GE(fd2, 0);
  EXPECT_NE(fd1, fd2);
  EXPECT_EQ(vt::FdCount(), fd_baseline_ + 4);
  struct stat s1, s2;
  ASSERT_EQ(fstat(fd1, &s1), 0);
  ASSERT_EQ(fstat(fd2, &s2), 0);
  EXPECT_EQ(s1.st_ino, s2.st_ino) << "both name the same memory";
  EXPECT_EQ(size_t(s1.st_size), 4 * kMiB);
  EXPECT_EQ(fcntl(fd1, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  // The memfd name carries the owner's UUID.
  const std::string want = "/memfd:vmmipc-standin:" + UuidHex(ExpectedUuid(PhysOf(0)));
  EXPECT_EQ(FdName(fd1).rfind(want, 0), 0u) << FdName(fd1);
  close(fd1);
  close(fd2);
  int fd = -1;
  EXPECT_EQ(d().cuMemExportToShareableHandle(&fd, none, kFd, 0), CUDA_ERROR_INVALID_VALUE) << "not requested";
  EXPECT_EQ(d().cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemExportToShareableHandle(&fd, h, kFd, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemExportToShareableHandle(nullptr, h, kFd, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(d().cuMemRelease(none), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemExportToShareableHandle(&fd, h, kFd, 0), CUDA_ERROR_INVALID_VALUE) << "released";
}

TEST_F(Standin, ExportReportsOperatingSystemErrorWhenOutOfFds) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = Prop(0);
  ASSERT_EQ(d().cuMemCreate(&h, kGran, &p, 0), CUDA_SUCCESS);
  // In a child, so the lowered limit cannot disturb MPI or other tests.
  Child c = RunChild([&] {
    struct rlimit lim = {0, 0};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 256;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return std::string("setrlimit failed");
    int spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    while (spare >= 0 && fcntl(spare, F_DUPFD_CLOEXEC, 0) >= 0) {
    }
    if (errno != EMFILE) return std::string("could not exhaust the fd table");
    int fd = -1;
    errno = 0;
    CUresult rc = d().cuMemExportToShareableHandle(&fd, h, kFd, 0);
    int err = errno;
    return std::to_string(rc) + " errno=" + (err == EMFILE ? "EMFILE" : std::to_string(err));
  });
  EXPECT_TRUE(ExitedOk(c)) << Describe(c);
  EXPECT_EQ(c.out, "304 errno=EMFILE");  // CUDA_ERROR_OPERATING_SYSTEM
  EXPECT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(Standin, ImportInTheSameProcessAliasesThePages) {
  CUmemGenericAllocationHandle h = 0, imp = 0;
  CUdeviceptr a = 0, b = 0;
  ASSERT_NO_FATAL_FAILURE(MapNew(4 * kMiB, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, &h, &a));
  int fd = -1;
  ASSERT_EQ(d().cuMemExportToShareableHandle(&fd, h, kFd, 0), CUDA_SUCCESS);
  ASSERT_EQ(d().cuMemImportFromShareableHandle(&imp, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)), kFd),
            CUDA_SUCCESS);
  EXPECT_NE(imp, h) << "a new record";
  close(fd);  // the driver keeps its own reference
  CUmemAllocationProp prop;
  ASSERT_EQ(d().cuMemGetAllocationPropertiesFromHandle(&prop, imp), CUDA_SUCCESS);
  EXPECT_EQ(prop.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(prop.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(prop.location.id, 0);
  EXPECT_EQ(prop.requestedHandleTypes, kFd);
  ASSERT_EQ(d().cuMemAddressReserve(&b, 4 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemMap(b, 2 * kMiB, 0, imp, 0), CUDA_ERROR_INVALID_VALUE) << "size from fstat is enforced";
  ASSERT_EQ(d().cuMemMap(b, 4 * kMiB, 0, imp, 0), CUDA_SUCCESS);
  ASSERT_EQ(SetAccess(d(), b, 4 * kMiB, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{2, 2, 2}));
  ASSERT_NO_FATAL_FAILURE(vt::FillPattern(reinterpret_cast<void *>(a), 4 * kMiB, 9));
  EXPECT_TRUE(vt::CheckPattern(reinterpret_cast<void *>(b), 4 * kMiB, 9));
  ASSERT_EQ(d().cuMemsetD8(b + 1000, 0x11, 10), CUDA_SUCCESS);
  ASSERT_EQ(d().cuCtxSynchronize(), CUDA_SUCCESS);  // a memset of device memory returns before it is done
  EXPECT_EQ(reinterpret_cast<const unsigned char *>(a)[1005], 0x11);
  // Imported memory cannot be exported again.
  int again = -1;
  EXPECT_EQ(d().cuMemExportToShareableHandle(&again, imp, kFd, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(again, -1);
  // Releasing the imported handle first: its mapping keeps the record.
  EXPECT_EQ(d().cuMemRelease(imp), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{2, 2, 2}));
  EXPECT_EQ(d().cuMemUnmap(b, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(CountsOf(d()), (Counts{1, 1, 2}));
  EXPECT_EQ(d().cuMemAddressFree(b, 4 * kMiB), CUDA_SUCCESS);
  UnmapAll(4 * kMiB, h, a);
}

TEST_F(Standin, ImportRejectsWhatIsNotAStandinExport) {
  auto try_import = [&](int fd) {
    CUmemGenericAllocationHandle h = 0;
    CUresult rc = d().cuMemImportFromShareableHandle(&h, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)), kFd);
    if (rc == CUDA_SUCCESS) d().cuMemRelease(h);
    return rc;
  };
  int pfd[2];
  ASSERT_EQ(pipe2(pfd, O_CLOEXEC), 0);
  EXPECT_EQ(try_import(pfd[0]), CUDA_ERROR_INVALID_VALUE) << "pipe";
  EXPECT_EQ(try_import(pfd[1]), CUDA_ERROR_INVALID_VALUE) << "pipe";
  close(pfd[0]);
  close(pfd[1]);
  EXPECT_EQ(try_import(pfd[0]), CUDA_ERROR_INVALID_VALUE) << "closed fd";
  EXPECT_EQ(try_import(-1), CUDA_ERROR_INVALID_VALUE);

  char path[] = "/tmp/vmmipc-standin-test-XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(file, kGran), 0);
  EXPECT_EQ(try_import(file), CUDA_ERROR_INVALID_VALUE) << "regular file";
  close(file);

  int other = memfd_create("something-else", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, kGran), 0);
  EXPECT_EQ(try_import(other), CUDA_ERROR_INVALID_VALUE) << "foreign memfd";
  close(other);
  int badhex = memfd_create("vmmipc-standin:zz4d4d2d53544e000000000000000000", MFD_CLOEXEC);
  ASSERT_GE(badhex, 0);
  ASSERT_EQ(ftruncate(badhex, kGran), 0);
  EXPECT_EQ(try_import(badhex), CUDA_ERROR_INVALID_VALUE) << "name without a UUID";
  close(badhex);

  std::string name = "vmmipc-standin:" + UuidHex(ExpectedUuid(PhysOf(0)));
  int odd = memfd_create(name.c_str(), MFD_CLOEXEC);
  ASSERT_GE(odd, 0);
  ASSERT_EQ(ftruncate(odd, kMiB), 0);
  EXPECT_EQ(try_import(odd), CUDA_ERROR_INVALID_VALUE) << "not a whole number of granules";
  // The name is the contract: a memfd named like an export is accepted.
  ASSERT_EQ(ftruncate(odd, kGran), 0);
  EXPECT_EQ(try_import(odd), CUDA_SUCCESS);
  close(odd);

  // A read-only reopening of a genuine export cannot be mapped writable.
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = Prop(0);
  ASSERT_EQ(d().cuMemCreate(&h, kGran, &p, 0), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(d().cuMemExportToShareableHandle(&fd, h, kFd, 0), CUDA_SUCCESS);
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  int ro = open(proc.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  EXPECT_EQ(try_import(ro), CUDA_ERROR_INVALID_VALUE) << "read-only fd";
  CUmemGenericAllocationHandle x = 0;
  EXPECT_EQ(d().cuMemImportFromShareableHandle(&x, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)),
                                               CU_MEM_HANDLE_TYPE_FABRIC),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(try_import(fd), CUDA_SUCCESS);
  close(ro);
  close(fd);
  EXPECT_EQ(d().cuMemRelease(h), CUDA_SUCCESS);
}

// A child with its own CUDA_VISIBLE_DEVICES imports an fd received over
// SCM_RIGHTS and reports the owner's location id, and whether it reads the
// parent's pattern through its own mapping.
std::string ImportInChild(int sock, const std::string &cvd, unsigned seed, size_t size) {
  SetEnv("VMMIPC_STANDIN_DEVICES", "8");
  SetEnv("CUDA_VISIBLE_DEVICES", cvd.c_str());
  SetEnv("VMMIPC_STANDIN_CAPS", nullptr);
  Api a;
  std::string e = LoadFresh(&a);
  if (!e.empty()) return e;
  if (a.cuInit(0) != CUDA_SUCCESS) return "cuInit failed";
  int fd = RecvFd(sock);
  if (fd < 0) return "no fd received";
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = a.cuMemImportFromShareableHandle(&h, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)), kFd);
  close(fd);
  if (rc != CUDA_SUCCESS) return "import: " + std::to_string(rc);
  CUmemAllocationProp prop;
  if (a.cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS) return "props failed";
  CUcontext ctx;
  CUdeviceptr va = 0;
  if (a.cuDevicePrimaryCtxRetain(&ctx, 0) || a.cuCtxSetCurrent(ctx) || a.cuMemAddressReserve(&va, size, 0, 0, 0) ||
      a.cuMemMap(va, size, 0, h, 0) || SetAccess(a, va, size, 0, CU_MEM_ACCESS_FLAGS_PROT_READ))
    return "map failed";
  std::vector<unsigned char> host(size);
  bool same = a.cuMemcpyDtoH(host.data(), va, size) == CUDA_SUCCESS;
  for (size_t i = 0; same && i < size; i++) same = host[i] == vt::PatternByte(seed, i);
  a.cuMemUnmap(va, size);
  a.cuMemRelease(h);
  a.cuMemAddressFree(va, size);
  Counts left = CountsOf(a);
  return "id=" + std::to_string(prop.location.id) + " data=" + (same ? "ok" : "bad") +
         (left == Zero() ? "" : " leaked");
}

TEST_F(Standin, OwnerLocationIdInAnotherProcess) {
  const int owner = PhysOf(0);
  ASSERT_GE(owner, 0);
  const int other = (owner + 1) % 8;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_NO_FATAL_FAILURE(MapNew(kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, &h, &va));
  ASSERT_NO_FATAL_FAILURE(vt::FillPattern(reinterpret_cast<void *>(va), kGran, 21));
  struct Case {
    std::string cvd, expect;
  };
  // Owner hidden: -2 (CU_DEVICE_INVALID), as on the real driver; owner
  // visible as ordinal 1 there: 1.
  const Case cases[] = {{std::to_string(other), "id=-2 data=ok"},
                        {std::to_string(other) + "," + std::to_string(owner), "id=1 data=ok"}};
  for (const Case &k : cases) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int fd = -1;
    ASSERT_EQ(d().cuMemExportToShareableHandle(&fd, h, kFd, 0), CUDA_SUCCESS);
    Child c = RunChild([&] { return ImportInChild(sv[1], k.cvd, 21, kGran); },
                       [&] {
                         EXPECT_TRUE(SendFd(sv[0], fd));
                         close(fd);
                       });
    close(sv[0]);
    close(sv[1]);
    EXPECT_TRUE(ExitedOk(c)) << Describe(c);
    EXPECT_EQ(c.out, k.expect) << "CUDA_VISIBLE_DEVICES=" << k.cvd << " in the importer";
  }
  UnmapAll(kGran, h, va);
}

// ---- plain memory, streams, events, legacy IPC ----------------------------------

TEST_F(Standin, PlainMemoryStreamsAndEvents) {
  CUdeviceptr buf = 0;
  ASSERT_EQ(d().cuMemAlloc(&buf, 1000), CUDA_SUCCESS);
  std::vector<unsigned char> in(1000), out(1000);
  for (size_t i = 0; i < in.size(); i++) in[i] = vt::PatternByte(4, i);
  CUstream s = nullptr;
  ASSERT_EQ(d().cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemcpyHtoDAsync(buf, in.data(), in.size(), s), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemcpyDtoHAsync(out.data(), buf, out.size(), s), CUDA_SUCCESS);
  EXPECT_EQ(d().cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(out, in);
  EXPECT_EQ(d().cuMemcpyDtoDAsync(buf + 500, buf, 500, s), CUDA_SUCCESS);
  std::fill(out.begin(), out.end(), 0);
  // The legacy stream's copy follows the blocking stream's.
  EXPECT_EQ(d().cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(out.data()), buf + 500, 500, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d().cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_TRUE(std::equal(in.begin(), in.begin() + 500, out.begin()));
  EXPECT_EQ(d().cuMemcpyDtoH(out.data(), buf + 950, 100), CUDA_ERROR_INVALID_VALUE) << "past the buffer";
  EXPECT_EQ(d().cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(d().cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(d().cuMemcpyHtoDAsync(buf, in.data(), 1, s), CUDA_ERROR_INVALID_HANDLE) << "destroyed stream";
  EXPECT_EQ(d().cuMemFree(buf + 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d().cuMemFree(buf), CUDA_SUCCESS);
  EXPECT_EQ(d().cuMemFree(buf), CUDA_ERROR_INVALID_VALUE);

  CUevent e0 = nullptr, e1 = nullptr, notime = nullptr;
  ASSERT_EQ(d().cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(d().cuEventCreate(&e1, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(d().cuEventCreate(&notime, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(d().cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_INVALID_HANDLE) << "not recorded";
  EXPECT_EQ(d().cuEventRecord(e0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventSynchronize(e0), CUDA_SUCCESS);  // its time is when it ran
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(d().cuEventRecord(e1, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventRecord(notime, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventSynchronize(e1), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 10000.0f);
  EXPECT_EQ(d().cuEventElapsedTime(&ms, e0, notime), CUDA_ERROR_INVALID_HANDLE) << "timing disabled";
  EXPECT_EQ(d().cuEventCreate(&e0, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  for (CUevent e : {e0, e1, notime}) EXPECT_EQ(d().cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(d().cuEventDestroy(e0), CUDA_ERROR_INVALID_HANDLE);

  CUipcMemHandle ipc;
  CUdeviceptr opened = 0;
  EXPECT_EQ(d().cuIpcGetMemHandle(&ipc, buf), CUDA_ERROR_NOT_SUPPORTED);
  std::memset(&ipc, 0, sizeof ipc);
  EXPECT_EQ(d().cuIpcOpenMemHandle(&opened, ipc, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(d().cuIpcCloseMemHandle(opened), CUDA_ERROR_NOT_SUPPORTED);
}

// ---- threads -------------------------------------------------------------------------

TEST_F(Standin, ConcurrentThreadsLeaveNothingBehind) {
  constexpr int kThreads = 4, kRounds = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      const Api &a = d();
      if (a.cuCtxSetCurrent(ctx0_) != CUDA_SUCCESS) failures++;
      for (int r = 0; r < kRounds; r++) {
        size_t size = kGran * size_t(1 + (t + r) % 3);
        CUmemGenericAllocationHandle h = 0;
        CUdeviceptr va = 0;
        CUmemAllocationProp p = Prop(0);
        unsigned char byte = 0;
        bool ok = a.cuMemCreate(&h, size, &p, 0) == CUDA_SUCCESS &&
                  a.cuMemAddressReserve(&va, size, 0, 0, 0) == CUDA_SUCCESS &&
                  a.cuMemMap(va, size, 0, h, 0) == CUDA_SUCCESS &&
                  SetAccess(a, va, size, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS &&
                  a.cuMemsetD8(va, (unsigned char)(t * 16 + r), size) == CUDA_SUCCESS &&
                  a.cuMemcpyDtoH(&byte, va + size - 1, 1) == CUDA_SUCCESS && byte == (unsigned char)(t * 16 + r) &&
                  a.cuMemUnmap(va, size) == CUDA_SUCCESS && a.cuMemRelease(h) == CUDA_SUCCESS &&
                  a.cuMemAddressFree(va, size) == CUDA_SUCCESS;
        if (!ok) failures++;
      }
    });
  for (auto &th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(CountsOf(d()), Zero());
}

// ---- two ranks: real sharing between processes ------------------------------------

TEST_F(Standin, TwoRanksShareAnAllocation) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs 2 MPI ranks (runs in test_standin.np2)";
  const int rank = vt::Rank();
  // Let MPI open whatever it opens lazily before fds are counted.
  MPI_Barrier(MPI_COMM_WORLD);
  fd_baseline_ = vt::FdCount();

  // Rank 1 listens on an abstract Unix socket whose random name rank 0 picks.
  char name[32] = {0};
  if (rank == 0) {
    std::random_device rd;
    std::snprintf(name, sizeof name, "vmmipc-standin-%08x%08x", rd(), rd());
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name, std::strlen(name));
  socklen_t alen = socklen_t(offsetof(struct sockaddr_un, sun_path) + 1 + std::strlen(name));

  const size_t size = 4 * kMiB;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  int ok = 1, listener = -1;
  if (rank == 0) {
    CUmemAllocationProp p = Prop(0);
    ok = d().cuMemCreate(&h, size, &p, 0) == CUDA_SUCCESS && d().cuMemAddressReserve(&va, size, 0, 0, 0) == 0 &&
         d().cuMemMap(va, size, 0, h, 0) == 0 && SetAccess(d(), va, size, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == 0;
    EXPECT_TRUE(ok) << "rank 0 setup";
    if (ok) vt::FillPattern(reinterpret_cast<void *>(va), size, 31);
  } else if (rank == 1) {
    listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ok = listener >= 0 && bind(listener, reinterpret_cast<sockaddr *>(&addr), alen) == 0 && listen(listener, 1) == 0;
    EXPECT_TRUE(ok) << "rank 1 listen: " << std::strerror(errno);
  }
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all) {
    if (rank == 0) {
      int fd = -1, sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      EXPECT_EQ(d().cuMemExportToShareableHandle(&fd, h, kFd, 0), CUDA_SUCCESS);
      EXPECT_EQ(connect(sock, reinterpret_cast<sockaddr *>(&addr), alen), 0) << std::strerror(errno);
      EXPECT_TRUE(SendFd(sock, fd));
      close(sock);
      close(fd);
    } else if (rank == 1) {
      int sock = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      int fd = sock >= 0 ? RecvFd(sock) : -1;
      EXPECT_GE(fd, 0) << "no fd from rank 0";
      if (sock >= 0) close(sock);
      CUmemGenericAllocationHandle imp = 0;
      CUdeviceptr mine = 0;
      const int dev = 1 % ndev_;
      if (fd >= 0) {
        EXPECT_EQ(
            d().cuMemImportFromShareableHandle(&imp, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)), kFd),
            CUDA_SUCCESS);
        close(fd);
        CUmemAllocationProp prop;
        EXPECT_EQ(d().cuMemGetAllocationPropertiesFromHandle(&prop, imp), CUDA_SUCCESS);
        EXPECT_EQ(prop.location.id, 0) << "rank 0's device 0 is visible here as ordinal 0";
        EXPECT_EQ(d().cuMemAddressReserve(&mine, size, 0, 0, 0), CUDA_SUCCESS);
        EXPECT_EQ(d().cuMemMap(mine, size, 0, imp, 0), CUDA_SUCCESS);
        EXPECT_EQ(SetAccess(d(), mine, size, dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
        EXPECT_TRUE(vt::CheckPattern(reinterpret_cast<void *>(mine), size, 31)) << "rank 0's data";
        vt::FillPattern(reinterpret_cast<void *>(mine), size, 32);
        EXPECT_EQ(d().cuMemUnmap(mine, size), CUDA_SUCCESS);
        EXPECT_EQ(d().cuMemRelease(imp), CUDA_SUCCESS);
        EXPECT_EQ(d().cuMemAddressFree(mine, size), CUDA_SUCCESS);
      }
    }
  }
  if (listener >= 0) close(listener);
  MPI_Barrier(MPI_COMM_WORLD);  // rank 1 has written its pattern
  if (rank == 0 && ok) {
    if (all) {
      EXPECT_TRUE(vt::CheckPattern(reinterpret_cast<void *>(va), size, 32)) << "rank 1's data";
    }
    UnmapAll(size, h, va);
  }
  EXPECT_TRUE(all) << "some rank failed its setup";
}

}  // namespace
