// Test helpers; driver calls go through the driver vmmipc loaded.
#include "harness/helpers.h"

#include <cuda.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace vt {
namespace {

struct Drv {
  void *lib = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void *, size_t) = nullptr;
  CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t) = nullptr;
  CUresult (*ctx_sync)(void) = nullptr;
  CUresult (*get_access)(unsigned long long *, const CUmemLocation *, CUdeviceptr) = nullptr;
};

// Entry points come from the driver vmmipc loaded, at cuda.h's ABI.
template <typename F>
void Resolve(const char *name, F *fn) {
  void *p = nullptr;
  if (vmmipc_driver_proc(name, 0, &p) == VMMIPC_SUCCESS) *fn = reinterpret_cast<F>(p);
}

Drv &D() {
  static Drv d = [] {
    Drv x;
    Resolve("cuMemcpyHtoD", &x.memcpy_htod);
    Resolve("cuMemcpyDtoH", &x.memcpy_dtoh);
    Resolve("cuMemGetAccess", &x.get_access);
    Resolve("cuCtxSynchronize", &x.ctx_sync);
    // The stand-in's own counters are not a driver entry point.
    const char *path = std::getenv("VMMIPC_CUDA_DRIVER");
    if (path && *path) x.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    return x;
  }();
  return d;
}

}  // namespace

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int Size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

int LayoutNode(int rank) {
  if (const char *l = std::getenv("VMMIPC_TEST_LAYOUT"); l && *l) {
    int field = 0;
    for (const char *p = l; *p; p++) {
      if (field == rank) return std::atoi(p);
      if (*p == ',') field++;
    }
    ADD_FAILURE() << "VMMIPC_TEST_LAYOUT=" << l << " names no node for rank " << rank;
    return -1;
  }
  const char *k = std::getenv("VMMIPC_TEST_RANKS_PER_NODE");
  int per = k ? std::atoi(k) : 0;
  return per > 0 ? rank / per : 0;
}

bool AnyRank(bool yes) {
  int v = yes ? 1 : 0, any = 0;
  MPI_Allreduce(&v, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  return any != 0;
}

bool EveryRank(bool yes) {
  int v = yes ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all != 0;
}

int FdCount() {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (struct dirent *e = readdir(d))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1;  // the directory stream's own fd
}

bool UsingStandin() {
  const char *p = std::getenv("VMMIPC_CUDA_DRIVER");
  return p && std::strstr(p, "standin") != nullptr;
}

bool GetDriverCounts(DriverCounts *c) {
  if (!UsingStandin() || !D().lib) return false;
  using Fn = void (*)(long *, long *, long *);
  Fn fn = reinterpret_cast<Fn>(dlsym(D().lib, "vmmipc_standin_counts"));
  if (!fn) return false;
  fn(&c->allocations, &c->mappings, &c->reservations);
  return true;
}

int LocalRank() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

int UseRankDevice() {
  int n = 0;
  if (vmmipc_device_count(&n) != VMMIPC_SUCCESS || n <= 0) {
    ADD_FAILURE() << "no device: " << vmmipc_last_error();
    return -1;
  }
  int ord = LocalRank() % n;
  vmmipc_result_t r = vmmipc_set_device(ord);
  if (r != VMMIPC_SUCCESS) ADD_FAILURE() << "vmmipc_set_device(" << ord << "): " << vmmipc_last_error();
  return ord;
}

unsigned char PatternByte(unsigned seed, size_t offset) {
  size_t x = offset * 2654435761u + seed * 40503u + (offset >> 12);
  return static_cast<unsigned char>(x ^ (x >> 8) ^ (x >> 16));
}

void CopyToDevice(void *dev_ptr, const void *host, size_t size) {
  ASSERT_NE(D().memcpy_htod, nullptr);
  ASSERT_EQ(D().memcpy_htod(reinterpret_cast<CUdeviceptr>(dev_ptr), host, size), CUDA_SUCCESS);
  // From pageable memory the copy may still be in flight when it returns;
  // another process must see the data once this rank reaches a barrier.
  ASSERT_NE(D().ctx_sync, nullptr);
  ASSERT_EQ(D().ctx_sync(), CUDA_SUCCESS);
}

void CopyToHost(void *host, const void *dev_ptr, size_t size) {
  ASSERT_NE(D().memcpy_dtoh, nullptr);
  ASSERT_EQ(D().memcpy_dtoh(host, reinterpret_cast<CUdeviceptr>(dev_ptr), size), CUDA_SUCCESS);
}

void FillPattern(void *dev_ptr, size_t size, unsigned seed) {
  std::vector<unsigned char> h(size);
  for (size_t i = 0; i < size; i++) h[i] = PatternByte(seed, i);
  CopyToDevice(dev_ptr, h.data(), size);
}

::testing::AssertionResult CheckPattern(const void *dev_ptr, size_t size, unsigned seed) {
  std::vector<unsigned char> h(size);
  if (!D().memcpy_dtoh) return ::testing::AssertionFailure() << "no cuMemcpyDtoH";
  CUresult rc = D().memcpy_dtoh(h.data(), reinterpret_cast<CUdeviceptr>(dev_ptr), size);
  if (rc != CUDA_SUCCESS) return ::testing::AssertionFailure() << "cuMemcpyDtoH failed: " << rc;
  for (size_t i = 0; i < size; i++)
    if (h[i] != PatternByte(seed, i))
      return ::testing::AssertionFailure() << "byte " << i << " of " << size << " is " << int(h[i]) << ", expected "
                                           << int(PatternByte(seed, i)) << " (seed " << seed << ")";
  return ::testing::AssertionSuccess();
}

int AccessFlags(const void *ptr, int ordinal) {
  if (!D().get_access) return -1;
  CUmemLocation loc = {};
  loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
  loc.id = ordinal;
  unsigned long long flags = 0;
  if (D().get_access(&flags, &loc, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) return -1;
  return static_cast<int>(flags);
}

int InChild(int (*fn)(void *), void *arg) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);  // die by the signal, without MPI's backtrace
    _exit(fn(arg));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

}  // namespace vt
