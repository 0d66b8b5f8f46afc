// What the window-synchronisation suites share: the driver calls they make
// through the driver vmmipc loaded, the stand-in's test exports, and the
// address of a window's signal slot.
#ifndef VMMIPC_TEST_SYNCDRV_H
#define VMMIPC_TEST_SYNCDRV_H

#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "harness/helpers.h"

namespace vt {

struct SyncDrv {
  CUresult (*streamCreate)(CUstream *, unsigned) = nullptr;
  CUresult (*streamDestroy)(CUstream) = nullptr;
  CUresult (*streamSync)(CUstream) = nullptr;
  CUresult (*htod)(CUdeviceptr, const void *, size_t, CUstream) = nullptr;
  CUresult (*dtoh)(void *, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*waitValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned) = nullptr;
  // Loads them; false (with a test failure) if one is missing.
  bool Load() {
    return Get("cuStreamCreate", &streamCreate) && Get("cuStreamDestroy", &streamDestroy) &&
           Get("cuStreamSynchronize", &streamSync) && Get("cuMemcpyHtoDAsync", &htod) &&
           Get("cuMemcpyDtoHAsync", &dtoh) && Get("cuStreamWaitValue64", &waitValue64);
  }
  // A 64-bit word of device memory, read or written synchronously on `s`.
  uint64_t Read(CUdeviceptr at, CUstream s) {
    uint64_t v = 0;
    EXPECT_EQ(dtoh(&v, at, sizeof v, s), CUDA_SUCCESS);
    EXPECT_EQ(streamSync(s), CUDA_SUCCESS);
    return v;
  }
  void Write(CUdeviceptr at, uint64_t v, CUstream s) {
    EXPECT_EQ(htod(at, &v, sizeof v, s), CUDA_SUCCESS);
    EXPECT_EQ(streamSync(s), CUDA_SUCCESS);
  }

 private:
  template <typename F>
  static bool Get(const char *name, F *fn) {
    void *p = nullptr;
    vmmipc_result_t r = vmmipc_driver_proc(name, 0, &p);
    EXPECT_EQ(r, VMMIPC_SUCCESS) << name << ": " << vmmipc_last_error();
    *fn = reinterpret_cast<F>(p);
    return p != nullptr;
  }
};

// An export of the stand-in (nullptr on the real driver).
template <typename F>
F StandinFn(const char *name) {
  if (!UsingStandin()) return nullptr;
  void *lib = dlopen(std::getenv("VMMIPC_CUDA_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return nullptr;
  void *p = dlsym(lib, name);
  dlclose(lib);  // still loaded: vmmipc holds it
  return reinterpret_cast<F>(p);
}

// The slot of window w that `rank` signals this rank through (its entry of
// signal_in, read from the device arrays).
inline CUdeviceptr SlotIn(vmmipc_win_t w, int rank, SyncDrv &d, CUstream s) {
  vmmipc_win_device_t dw;
  EXPECT_EQ(vmmipc_win_device(w, &dw), VMMIPC_SUCCESS) << vmmipc_last_error();
  std::vector<uint64_t> in(static_cast<size_t>(dw.nranks));
  EXPECT_EQ(d.dtoh(in.data(), reinterpret_cast<CUdeviceptr>(dw.signal_in), in.size() * 8, s), CUDA_SUCCESS);
  EXPECT_EQ(d.streamSync(s), CUDA_SUCCESS);
  return static_cast<CUdeviceptr>(in[static_cast<size_t>(rank)]);
}

}  // namespace vt

#endif
