// Behaviour that depends on how (and which) driver is loaded: the loader's
// fallback, failed loads and their retry, and device capabilities switched
// off in the stand-in. Every case runs in a forked child that has not
// loaded the driver yet (this process never loads it), so that each child
// can choose its own environment.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness/helpers.h"

namespace {

constexpr size_t kGran = 2u << 20;

void ExpectChildExits0(int (*fn)(void *), const char *what) {
  int st = vt::InChild(fn, nullptr);
  ASSERT_TRUE(WIFEXITED(st)) << what << ": child died, status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << what << ": failed check " << WEXITSTATUS(st);
}

int NoGpuDirectRdma(void *) {
  setenv("VMMIPC_STANDIN_CAPS", "nordma", 1);
  if (vmmipc_set_device(0) != VMMIPC_SUCCESS) return 10;
  vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
  props.flags = VMMIPC_ALLOC_GPU_DIRECT_RDMA;
  vmmipc_buf_t b = nullptr;
  if (vmmipc_alloc_ex(kGran, &props, &b) != VMMIPC_ERR_UNSUPPORTED || b) return 11;
  if (!std::strstr(vmmipc_last_error(), "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED is 0")) return 12;
  if (!std::strstr(vmmipc_last_error(), "VMMIPC_ALLOC_GPU_DIRECT_RDMA")) return 13;
  props.flags = 0;  // without the flag the device still allocates
  if (vmmipc_alloc_ex(kGran, &props, &b) != VMMIPC_SUCCESS || !b) return 14;
  if (vmmipc_buf_free(b) != VMMIPC_SUCCESS) return 15;
  return 0;
}

TEST(DriverLoad, GpuDirectRdmaOnADeviceWithoutItIsUnsupported) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "capabilities can be switched off only in the stand-in";
  ExpectChildExits0(NoGpuDirectRdma, "no GPUDirect RDMA");
}

// The stand-in built without cuGetProcAddress_v2, next to the stand-in.
std::string V1Driver() {
  std::string p = std::getenv("VMMIPC_CUDA_DRIVER");
  return p.substr(0, p.rfind('/') + 1) + "libvmmipc_standin_v1.so";
}

int ThroughTheUnversionedLookup(void *) {
  std::string path = V1Driver();
  void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 10;
  if (dlsym(lib, "cuGetProcAddress_v2") || !dlsym(lib, "cuGetProcAddress")) return 11;
  setenv("VMMIPC_CUDA_DRIVER", path.c_str(), 1);
  if (vmmipc_set_device(0) != VMMIPC_SUCCESS) return 12;
  // A round trip through every kind of entry point the table holds.
  void *fn = nullptr;
  if (vmmipc_driver_proc("cuMemcpyHtoD", 0, &fn) != VMMIPC_SUCCESS) return 13;
  auto htod = reinterpret_cast<decltype(&::cuMemcpyHtoD)>(fn);
  if (vmmipc_driver_proc("cuMemcpyDtoH", 0, &fn) != VMMIPC_SUCCESS) return 14;
  auto dtoh = reinterpret_cast<decltype(&::cuMemcpyDtoH)>(fn);
  if (vmmipc_driver_proc("cuNoSuchFunction", 0, &fn) != VMMIPC_ERR_UNSUPPORTED || fn) return 15;
  vmmipc_buf_t b = nullptr, imp = nullptr;
  vmmipc_desc_t d = nullptr;
  if (vmmipc_alloc(kGran, &b) != VMMIPC_SUCCESS) return 16;
  void *p = nullptr, *q = nullptr;
  vmmipc_buf_ptr(b, &p, nullptr);
  std::vector<unsigned char> h(4096, 0x5e), back(4096, 0);
  if (htod(reinterpret_cast<CUdeviceptr>(p), h.data(), h.size()) != CUDA_SUCCESS) return 17;
  if (vmmipc_export(b, &d) != VMMIPC_SUCCESS || vmmipc_import(d, nullptr, &imp) != VMMIPC_SUCCESS) return 18;
  vmmipc_buf_ptr(imp, &q, nullptr);
  if (dtoh(back.data(), reinterpret_cast<CUdeviceptr>(q), back.size()) != CUDA_SUCCESS || back != h) return 19;
  if (vmmipc_buf_free(imp) || vmmipc_desc_free(d) || vmmipc_buf_free(b)) return 20;
  return 0;
}

TEST(DriverLoad, ADriverWithoutGetProcAddressV2IsLoadedThroughTheUnversionedLookup) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "needs the stand-in built without cuGetProcAddress_v2";
  ExpectChildExits0(ThroughTheUnversionedLookup, "unversioned cuGetProcAddress");
}

// cuGetProcAddress takes the names cuda.h documents; the versioned symbols
// its macros map them to are refused, naming the name to pass.
int NamesOfDriverFunctions(void *) {
  if (vmmipc_set_device(0) != VMMIPC_SUCCESS) return 10;
  void *fn = reinterpret_cast<void *>(1);
  vmmipc_result_t r = vmmipc_driver_proc("cuMemcpyHtoD_v2", 0, &fn);
  if (r == VMMIPC_SUCCESS && !vt::UsingStandin()) return 0;  // a driver that takes it too
  if (r != VMMIPC_ERR_INVALID_ARG || fn) return 11;
  if (!std::strstr(vmmipc_last_error(), "\"cuMemcpyHtoD_v2\" is a versioned symbol")) return 12;
  if (!std::strstr(vmmipc_last_error(), "pass the name cuda.h documents, \"cuMemcpyHtoD\"")) return 13;
  if (vmmipc_driver_proc("cuStreamSynchronize_ptsz", 0, &fn) != VMMIPC_ERR_INVALID_ARG) return 14;
  if (!std::strstr(vmmipc_last_error(), "\"cuStreamSynchronize\"")) return 15;
  fn = reinterpret_cast<void *>(1);
  if (vmmipc_driver_proc("cuNoSuchFunction", 0, &fn) != VMMIPC_ERR_UNSUPPORTED || fn) return 16;
  if (!std::strstr(vmmipc_last_error(), "has no function \"cuNoSuchFunction\"")) return 17;
  if (vmmipc_driver_proc("cuMemcpyHtoD", 0, &fn) != VMMIPC_SUCCESS || !fn) return 18;
  return 0;
}

TEST(DriverLoad, AVersionedNameIsRefusedNamingTheNameToPass) {
  ExpectChildExits0(NamesOfDriverFunctions, "driver function names");
}

int FailedLoadsAreRetried(void *) {
  const std::string good = std::getenv("VMMIPC_CUDA_DRIVER");
  int before = vt::FdCount();
  // A driver that is not there, then one whose cuInit fails.
  setenv("VMMIPC_CUDA_DRIVER", "/nonexistent/libcuda-missing.so", 1);
  int n = 0;
  if (vmmipc_device_count(&n) != VMMIPC_ERR_UNSUPPORTED) return 10;
  if (!std::strstr(vmmipc_last_error(), "/nonexistent/libcuda-missing.so")) return 11;
  // The hint names the stand-in where it is: here, the build tree's.
  char standin[PATH_MAX];
  if (!realpath(good.c_str(), standin)) return 19;
  if (!std::strstr(vmmipc_last_error(), ("without a GPU, the CPU stand-in: VMMIPC_CUDA_DRIVER=" + std::string(standin)).c_str()))
    return 20;
  setenv("VMMIPC_CUDA_DRIVER", good.c_str(), 1);
  setenv("VMMIPC_STANDIN_DEVICES", "0", 1);
  if (vmmipc_device_count(&n) != VMMIPC_ERR_UNSUPPORTED) return 12;
  if (!std::strstr(vmmipc_last_error(), "cuInit(0)")) return 13;
  if (!std::strstr(vmmipc_last_error(), "CUDA_ERROR_NO_DEVICE")) return 14;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;  // the CUresult is in the record too
  if (vmmipc_last_error_info(&info) != VMMIPC_SUCCESS || info.driver_error != CUDA_ERROR_NO_DEVICE) return 21;
  // The failed attempt closed the library: it is not loaded any more.
  if (dlopen(good.c_str(), RTLD_NOW | RTLD_NOLOAD)) return 15;
  if (vt::FdCount() != before) return 16;
  // Fixed: the next call loads it (a fresh instance, which reads the
  // environment again).
  setenv("VMMIPC_STANDIN_DEVICES", "3", 1);
  if (vmmipc_device_count(&n) != VMMIPC_SUCCESS || n != 3) return 17;
  // Loaded for good: later changes no longer matter.
  setenv("VMMIPC_CUDA_DRIVER", "/nonexistent/libcuda-missing.so", 1);
  if (vmmipc_device_count(&n) != VMMIPC_SUCCESS || n != 3) return 18;
  return 0;
}

TEST(DriverLoad, AFailedLoadClosesTheLibraryAndTheNextCallTriesAgain) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "the failing cuInit needs the stand-in (VMMIPC_STANDIN_DEVICES=0)";
  ExpectChildExits0(FailedLoadsAreRetried, "retry");
}

int ConcurrentFirstCalls(void *) {
  const char *env = std::getenv("VMMIPC_CUDA_DRIVER");
  const std::string good = env && *env ? env : "libcuda.so.1";
  constexpr int kThreads = 8;
  auto race = [](std::vector<int> *rc, std::vector<std::string> *msg, std::vector<void *> *fn) {
    std::atomic<int> ready{0};
    std::vector<std::thread> t;
    for (int i = 0; i < kThreads; i++)
      t.emplace_back([&, i] {
        ready++;
        while (ready.load() < kThreads) {
        }
        int n = 0;
        (*rc)[i] = vmmipc_device_count(&n);
        (*msg)[i] = vmmipc_last_error();  // per thread
        if ((*rc)[i] == VMMIPC_SUCCESS) vmmipc_driver_proc("cuInit", 0, &(*fn)[i]);
      });
    for (auto &x : t) x.join();
  };
  std::vector<int> rc(kThreads, -1);
  std::vector<std::string> msg(kThreads);
  std::vector<void *> fn(kThreads, nullptr);
  setenv("VMMIPC_CUDA_DRIVER", "/nonexistent/libcuda-missing.so", 1);
  race(&rc, &msg, &fn);
  for (int i = 0; i < kThreads; i++)
    if (rc[i] != VMMIPC_ERR_UNSUPPORTED || msg[i].find("libcuda-missing.so") == std::string::npos) return 10 + i;
  setenv("VMMIPC_CUDA_DRIVER", good.c_str(), 1);
  race(&rc, &msg, &fn);
  for (int i = 0; i < kThreads; i++)
    if (rc[i] != VMMIPC_SUCCESS || !fn[i] || fn[i] != fn[0]) return 20 + i;
  return 0;
}

TEST(DriverLoad, ThreadsRacingToTheFirstLoadAllGetOneAnswer) {
  ExpectChildExits0(ConcurrentFirstCalls, "concurrent loads");
}

}  // namespace
