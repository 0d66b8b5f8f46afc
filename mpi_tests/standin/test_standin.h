// The stand-in's tests share these: the driver loaded through
// cuGetProcAddress_v2 (this process's instance, or a fresh one in a forked
// child), the child runner, and small builders of driver arguments.
#ifndef VMMIPC_TEST_STANDIN_H
#define VMMIPC_TEST_STANDIN_H

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>

namespace sti_test {

inline constexpr size_t kMiB = size_t(1) << 20;
inline constexpr size_t kGran = 2 * kMiB;
inline constexpr auto kFd = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

// ---- loading the driver through cuGetProcAddress ---------------------------

using GetProcFn = CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
// The unversioned CUDA 11.3 symbol: no symbolStatus.
using GetProcV1Fn = CUresult (*)(const char *, void **, int, cuuint64_t);
using CountsFn = void (*)(long *, long *, long *);

// Every entry point these tests call. cuda.h maps some names to versioned
// symbols (cuMemcpyHtoD -> cuMemcpyHtoD_v2); the member follows that mapping,
// while #name stays the base name that cuGetProcAddress is asked for.
#define STI_TEST_FUNCS(X)                                                                                      \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)     \
  X(cuDeviceGetUuid) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceCanAccessPeer)                      \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent)              \
  X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease)       \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAccess)    \
  X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle) X(cuMemGetAllocationPropertiesFromHandle) \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD8) X(cuMemcpyAsync) X(cuMemcpyHtoDAsync)         \
  X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemAlloc) X(cuMemFree) X(cuStreamCreate) X(cuStreamDestroy)   \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)            \
  X(cuEventElapsedTime) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)                   \
  X(cuMemRetainAllocationHandle) X(cuMemGetAddressRange) X(cuPointerGetAttribute) X(cuStreamQuery)            \
  X(cuStreamWaitEvent) X(cuEventQuery) X(cuMemsetD8Async) X(cuMemHostAlloc) X(cuMemFreeHost)                   \
  X(cuStreamWriteValue64) X(cuStreamWaitValue64) X(cuStreamBatchMemOp) X(cuModuleLoadData) X(cuModuleUnload)   \
  X(cuModuleGetFunction) X(cuLaunchKernel)

struct Api {
  void *lib = nullptr;
  GetProcFn getproc = nullptr;
  CountsFn counts = nullptr;
#define STI_MEMBER(name) decltype(&::name) name = nullptr;
  STI_TEST_FUNCS(STI_MEMBER)
#undef STI_MEMBER
};

inline const char *DriverPath() {
  const char *p = std::getenv("VMMIPC_CUDA_DRIVER");
  return (p && *p) ? p : nullptr;
}

// The CUDA version whose ABI matches the prototype cuda.h gives `name`:
// CUDA 13.0 gave cuCtxGetDevice and cuCtxSynchronize a context argument under
// the same base name, so those are asked for at 12.0 (as the library does).
inline int AbiVersion(const char *name) {
  return std::strcmp(name, "cuCtxGetDevice") == 0 || std::strcmp(name, "cuCtxSynchronize") == 0 ? 12000
                                                                                                   : CUDA_VERSION;
}

template <typename F>
inline bool Resolve(GetProcFn gp, const char *name, F *out) {
  void *p = nullptr;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (gp(name, &p, AbiVersion(name), CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p ||
      st != CU_GET_PROC_ADDRESS_SUCCESS)
    return false;
  *out = reinterpret_cast<F>(p);
  return true;
}

// "" on success, else what went wrong.
inline std::string LoadApi(void *lib, Api *api) {
  api->lib = lib;
  void *sym = dlsym(lib, "cuGetProcAddress_v2");
  if (!sym) return "the driver exports no cuGetProcAddress_v2";
  api->getproc = reinterpret_cast<GetProcFn>(sym);
  api->counts = reinterpret_cast<CountsFn>(dlsym(lib, "vmmipc_standin_counts"));
  if (!api->counts) return "the driver exports no vmmipc_standin_counts: not the stand-in";
#define STI_RESOLVE(name) \
  if (!Resolve(api->getproc, #name, &api->name)) return "cuGetProcAddress(\"" #name "\") failed";
  STI_TEST_FUNCS(STI_RESOLVE)
#undef STI_RESOLVE
  return "";
}

struct Loaded {
  Api api;
  std::string error;
};

// The instance this process shares with vt:: helpers (dlopen returns the
// already-loaded library).
inline const Loaded &Main() {
  static Loaded l = [] {
    Loaded x;
    const char *path = DriverPath();
    if (!path) {
      x.error = "VMMIPC_CUDA_DRIVER is not set; these tests only run against the stand-in";
      return x;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      x.error = std::string("dlopen: ") + dlerror();
      return x;
    }
    x.error = LoadApi(lib, &x.api);
    return x;
  }();
  return l;
}

inline const Api &D() { return Main().api; }

// In a forked child only: a second, uninitialised instance of the stand-in,
// whose cuInit reads the child's environment. The library is copied into a
// memfd first: the dynamic loader recognises an already-loaded library by
// its file, so a copy loads as a separate instance with its own state (and,
// unlike dlmopen, shares the sanitizer runtimes of a sanitized build).
inline std::string LoadFresh(Api *api) {
  int src = open(DriverPath(), O_RDONLY | O_CLOEXEC);
  if (src < 0) return std::string("open driver: ") + std::strerror(errno);
  int copy = memfd_create("vmmipc-standin-copy", MFD_CLOEXEC);
  if (copy < 0) {
    close(src);
    return std::string("memfd_create: ") + std::strerror(errno);
  }
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(src, buf, sizeof buf)) > 0)
    if (write(copy, buf, size_t(n)) != n) n = -1;
  close(src);
  if (n < 0) return "copying the driver failed";
  std::string path = "/proc/self/fd/" + std::to_string(copy);
  void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  close(copy);  // the mapping keeps the copy alive
  if (!lib) return std::string("dlopen(copy): ") + dlerror();
  if (lib == Main().api.lib) return "the copy loaded as the same instance";
  return LoadApi(lib, api);
}

struct Counts {
  long a = -1, m = -1, r = -1;
  bool operator==(const Counts &o) const { return a == o.a && m == o.m && r == o.r; }
};
inline std::ostream &operator<<(std::ostream &os, const Counts &c) {
  return os << "{allocations " << c.a << ", mappings " << c.m << ", reservations " << c.r << "}";
}
inline Counts CountsOf(const Api &a) {
  Counts c;
  a.counts(&c.a, &c.m, &c.r);
  return c;
}
inline Counts Zero() { return Counts{0, 0, 0}; }

// The documented UUID of physical stand-in device i.
inline std::array<unsigned char, 16> ExpectedUuid(int i) {
  return {0x56, 0x4d, 0x4d, 0x2d, 0x53, 0x54, 0x4e, (unsigned char)i, 0, 0, 0, 0, 0, 0, 0, (unsigned char)i};
}

inline CUmemAllocationProp Prop(int dev, unsigned types = kFd) {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(types);
  return p;
}

inline CUmemAccessDesc Access(int dev, CUmemAccess_flags flags) {
  CUmemAccessDesc d;
  std::memset(&d, 0, sizeof d);
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = dev;
  d.flags = flags;
  return d;
}

inline CUresult SetAccess(const Api &a, CUdeviceptr p, size_t size, int dev, CUmemAccess_flags flags) {
  CUmemAccessDesc d = Access(dev, flags);
  return a.cuMemSetAccess(p, size, &d, 1);
}

inline unsigned long long GetAccess(const Api &a, CUdeviceptr p, int dev) {
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, dev};
  unsigned long long f = 99;
  if (a.cuMemGetAccess(&f, &loc, p) != CUDA_SUCCESS) return 98;
  return f;
}

inline std::string FdName(int fd) {
  char path[64], buf[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  if (n < 0) return "";
  buf[n] = '\0';
  return buf;
}

inline std::string UuidHex(const std::array<unsigned char, 16> &u) {
  std::string s;
  char b[3];
  for (unsigned char c : u) {
    std::snprintf(b, sizeof b, "%02x", c);
    s += b;
  }
  return s;
}

// ---- forked children ---------------------------------------------------------

struct Child {
  int status = -1;
  std::string out;
};

inline std::string Describe(const Child &c) {
  std::string s = "child ";
  if (WIFEXITED(c.status))
    s += "exited " + std::to_string(WEXITSTATUS(c.status));
  else if (WIFSIGNALED(c.status))
    s += std::string("killed by ") + strsignal(WTERMSIG(c.status));
  else
    s += "status " + std::to_string(c.status);
  return s + ", said \"" + c.out + "\"";
}

inline bool ExitedOk(const Child &c) { return WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0; }
inline bool KilledBy(const Child &c, int sig) { return WIFSIGNALED(c.status) && WTERMSIG(c.status) == sig; }

// Runs body in a forked child; its return value is the child's report.
// Faults in the child kill it with the default action and no core file.
// `parent` runs in the parent right after the fork.
inline Child RunChild(const std::function<std::string()> &body, const std::function<void()> &parent = nullptr) {
  Child c;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    c.out = "pipe failed";
    return c;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    c.out = "fork failed";
    return c;
  }
  if (pid == 0) {
    close(p[0]);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    std::string s;
    try {
      s = body();
    } catch (...) {
      s = "exception";
    }
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = write(p[1], s.data() + off, s.size() - off);
      if (n <= 0) break;
      off += size_t(n);
    }
    _exit(0);
  }
  close(p[1]);
  if (parent) parent();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char buf[512];
  for (;;) {
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
                       .count());
    struct pollfd pf = {p[0], POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, left) == 0) {
      kill(pid, SIGKILL);
      c.out += " [timed out]";
      break;
    }
    ssize_t n = read(p[0], buf, sizeof buf);
    if (n <= 0) break;
    c.out.append(buf, size_t(n));
  }
  close(p[0]);
  while (waitpid(pid, &c.status, 0) < 0 && errno == EINTR) {
  }
  return c;
}

inline void SetEnv(const char *name, const char *value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

// Child side: the stand-in complains on stderr about the invalid settings
// that some cases use on purpose; keep the test log clean.
inline void QuietStderr() {
  int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    dup2(fd, 2);
    close(fd);
  }
}

}  // namespace sti_test

#endif
