// Device memory from the test's side: driver calls through the driver
// vmmipc loaded (the stand-in or libcuda), byte patterns that tell which
// step and which rank wrote a buffer, and an application's own VMM range
// for vmmipc_buf_wrap.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "test_chaos.h"

namespace chaos {

struct Drv {
  decltype(&::cuMemcpyHtoD) htod = nullptr;
  decltype(&::cuMemcpyDtoH) dtoh = nullptr;
  CUresult (*ctx_sync)(void) = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;
  decltype(&::cuStreamSynchronize) stream_sync = nullptr;
  decltype(&::cuMemGetInfo) mem_info = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) free_va = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
};

namespace {

template <typename F>
void Get(const char *name, F *fn) {
  void *p = nullptr;
  if (vmmipc_driver_proc(name, 0, &p) == VMMIPC_SUCCESS) *fn = reinterpret_cast<F>(p);
  if (!*fn) {
    std::fprintf(stderr, "chaos: the driver has no %s: %s\n", name, vmmipc_last_error());
    std::abort();
  }
}

constexpr uint32_t kMagic = 0x43484153;  // "CHAS"
constexpr size_t kStamp = 16;            // magic, owner, tag
constexpr size_t kRegion = size_t(64) << 10;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

unsigned char Byte(uint64_t tag, int owner, size_t i) {
  uint64_t w = Mix(tag * 0x100000001b3ull ^ (static_cast<uint64_t>(owner) << 48) ^ (i / 8));
  return static_cast<unsigned char>(w >> ((i % 8) * 8));
}

// The two regions a pattern covers: the head and the tail (all of a small
// buffer), so that checks stay cheap on large buffers.
void Regions(size_t size, size_t *head, size_t *tail_at) {
  *head = size < kRegion ? size : kRegion;
  *tail_at = size > 2 * kRegion ? size - kRegion : *head;
}

void Expected(std::vector<unsigned char> *h, size_t from, size_t n, uint64_t tag, int owner, size_t size) {
  h->resize(n);
  for (size_t i = 0; i < n; i++) (*h)[i] = Byte(tag, owner, from + i);
  if (from == 0 && size >= kStamp && n >= kStamp) {
    uint32_t m = kMagic, o = static_cast<uint32_t>(owner);
    std::memcpy(h->data(), &m, 4);
    std::memcpy(h->data() + 4, &o, 4);
    std::memcpy(h->data() + 8, &tag, 8);
  }
}

}  // namespace

const Drv &D() {
  static Drv d = [] {
    Drv x;
    Get("cuMemcpyHtoD", &x.htod);
    Get("cuMemcpyDtoH", &x.dtoh);
    Get("cuCtxSynchronize", &x.ctx_sync);
    Get("cuStreamCreate", &x.stream_create);
    Get("cuStreamDestroy", &x.stream_destroy);
    Get("cuStreamSynchronize", &x.stream_sync);
    Get("cuMemCreate", &x.create);
    Get("cuMemRelease", &x.release);
    Get("cuMemAddressReserve", &x.reserve);
    Get("cuMemAddressFree", &x.free_va);
    Get("cuMemMap", &x.map);
    Get("cuMemUnmap", &x.unmap);
    Get("cuMemSetAccess", &x.set_access);
    void *p = nullptr;  // the stand-in may not serve it: device memory is then not counted
    if (vmmipc_driver_proc("cuMemGetInfo", 0, &p) == VMMIPC_SUCCESS) x.mem_info = reinterpret_cast<decltype(x.mem_info)>(p);
    return x;
  }();
  return d;
}

bool Standin() {
  const char *p = std::getenv("VMMIPC_CUDA_DRIVER");
  return p && std::strstr(p, "standin") != nullptr;
}

int CopyIn(void *dev, const void *host, size_t n) {
  CUresult rc = D().htod(reinterpret_cast<CUdeviceptr>(dev), host, n);
  // From pageable memory the copy may still be in flight when it returns;
  // a peer reads it after the next MPI barrier.
  return rc ? rc : D().ctx_sync();
}

int CopyOut(void *host, const void *dev, size_t n) { return D().dtoh(host, reinterpret_cast<CUdeviceptr>(dev), n); }
int CtxSync() { return D().ctx_sync(); }

void *StreamCreate() {
  CUstream s = nullptr;
  return D().stream_create(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS ? s : nullptr;
}
void StreamDestroy(void *s) {
  if (s) D().stream_destroy(static_cast<CUstream>(s));
}
int StreamSync(void *s) { return D().stream_sync(static_cast<CUstream>(s)); }

long long DeviceUsed() {
  if (Standin() || !D().mem_info) return -1;
  size_t free_b = 0, total = 0;
  if (D().mem_info(&free_b, &total) != CUDA_SUCCESS) return -1;
  return static_cast<long long>(total - free_b);
}

void FillPattern(void *dev, size_t size, uint64_t tag, int owner) {
  if (!dev || !size) return;
  size_t head, tail_at;
  Regions(size, &head, &tail_at);
  std::vector<unsigned char> h;
  Expected(&h, 0, head, tag, owner, size);
  int rc = CopyIn(dev, h.data(), head);
  if (!rc && tail_at < size) {
    Expected(&h, tail_at, size - tail_at, tag, owner, size);
    rc = CopyIn(static_cast<char *>(dev) + tail_at, h.data(), size - tail_at);
  }
  if (rc) std::fprintf(stderr, "chaos: writing a pattern failed: CUresult %d\n", rc);
}

int CheckPattern(const void *dev, size_t size, uint64_t tag, int owner, std::string *why) {
  if (!dev || !size) {
    *why = "no memory to check";
    return 1;
  }
  size_t head, tail_at;
  Regions(size, &head, &tail_at);
  std::vector<unsigned char> want, got;
  for (int part = 0; part < 2; part++) {
    size_t from = part ? tail_at : 0, n = part ? size - tail_at : head;
    if (!n) continue;
    Expected(&want, from, n, tag, owner, size);
    got.resize(n);
    int rc = CopyOut(got.data(), static_cast<const char *>(dev) + from, n);
    if (rc) {
      *why = "cuMemcpyDtoH failed: CUresult " + std::to_string(rc);
      return 1;
    }
    for (size_t i = 0; i < n; i++)
      if (got[i] != want[i]) {
        int o = -1;
        uint64_t t = ReadStamp(dev, size, &o);
        *why = "byte " + std::to_string(from + i) + " of " + std::to_string(size) + " is " + std::to_string(got[i]) +
               ", expected " + std::to_string(want[i]) + " (pattern of tag " + std::to_string(tag) + ", rank " +
               std::to_string(owner) + "; the buffer's stamp says tag " + std::to_string(t) + ", rank " +
               std::to_string(o) + ")";
        return 1;
      }
  }
  return 0;
}

uint64_t ReadStamp(const void *dev, size_t size, int *owner) {
  *owner = -1;
  if (!dev || size < kStamp) return 0;
  unsigned char b[kStamp];
  if (CopyOut(b, dev, kStamp)) return 0;
  uint32_t m = 0, o = 0;
  uint64_t tag = 0;
  std::memcpy(&m, b, 4);
  std::memcpy(&o, b + 4, 4);
  std::memcpy(&tag, b + 8, 8);
  if (m != kMagic) return 0;
  *owner = static_cast<int>(o);
  return tag;
}

int RawMake(int device, size_t chunk, int chunks, RawRange *out) {
  const Drv &d = D();
  RawRange r;
  r.chunk = chunk;
  r.size = chunk * static_cast<size_t>(chunks);
  CUdeviceptr va = 0;
  CUresult rc = d.reserve(&va, r.size, 0, 0, 0);
  if (rc) return rc;
  r.ptr = reinterpret_cast<void *>(va);
  for (int i = 0; i < chunks && !rc; i++) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr at = va + chunk * static_cast<size_t>(i);
    rc = d.create(&h, chunk, &prop, 0);
    if (rc) break;
    rc = d.map(at, chunk, 0, h, 0);
    if (rc) {
      d.release(h);
      break;
    }
    r.maps.push_back({static_cast<uintptr_t>(at), h});
    CUmemAccessDesc a = {};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = device;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    rc = d.set_access(at, chunk, &a, 1);
  }
  if (rc) {
    RawFree(&r);
    return rc;
  }
  *out = r;
  return 0;
}

void RawFree(RawRange *r) {
  const Drv &d = D();
  for (const auto &m : r->maps) {
    d.unmap(static_cast<CUdeviceptr>(m.first), r->chunk);
    d.release(m.second);
  }
  r->maps.clear();
  if (r->ptr) d.free_va(reinterpret_cast<CUdeviceptr>(r->ptr), r->size);
  r->ptr = nullptr;
}

}  // namespace chaos
