// vmmipc_buf_wrap: VMM memory mapped by the application with raw driver
// calls is wrapped, shared with every rank of the node and checked byte by
// byte both ways; every refusal names its cause and leaves nothing behind.
#include <cuda.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness/bufs.h"

namespace {

constexpr size_t kMiB = size_t(1) << 20;
using vt::kGran;

template <typename F>
void Get(const char *name, F *fn) {
  void *p = nullptr;
  ASSERT_VMM_OK(vmmipc_driver_proc(name, 0, &p));
  *fn = reinterpret_cast<F>(p);
}

// The driver calls an application makes, from the driver vmmipc loaded.
struct Raw {
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) free_va = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemAlloc) alloc = nullptr;
  decltype(&::cuMemFree) free = nullptr;
  void Load() {
    Get("cuMemCreate", &create);
    Get("cuMemRelease", &release);
    Get("cuMemAddressReserve", &reserve);
    Get("cuMemAddressFree", &free_va);
    Get("cuMemMap", &map);
    Get("cuMemUnmap", &unmap);
    Get("cuMemSetAccess", &set_access);
    Get("cuMemAlloc", &alloc);
    Get("cuMemFree", &free);
  }
};

// A range an application built itself: chunks of the given sizes (0 = a
// hole of one granule left unmapped), reserved once and mapped back to
// back, read-write for `dev`. Torn down by the destructor, as the
// application would.
class AppRange {
 public:
  struct Part {
    size_t size;
    CUmemAllocationHandleType types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  };
  AppRange(const Raw &raw, int dev, const std::vector<Part> &parts) : raw_(raw) {
    for (const Part &p : parts) total_ += p.size ? p.size : kGran;
    EXPECT_EQ(raw_.reserve(&va_, total_, 0, 0, 0), CUDA_SUCCESS);
    CUdeviceptr at = va_;
    for (const Part &p : parts) {
      if (!p.size) {
        at += kGran;
        continue;
      }
      CUmemAllocationProp prop = {};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = dev;
      prop.requestedHandleTypes = p.types;
      CUmemGenericAllocationHandle h = 0;
      EXPECT_EQ(raw_.create(&h, p.size, &prop, 0), CUDA_SUCCESS);
      EXPECT_EQ(raw_.map(at, p.size, 0, h, 0), CUDA_SUCCESS);
      CUmemAccessDesc a = {};
      a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      a.location.id = dev;
      a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      EXPECT_EQ(raw_.set_access(at, p.size, &a, 1), CUDA_SUCCESS);
      maps_.push_back({at, p.size, h});
      at += p.size;
    }
  }
  ~AppRange() { Teardown(); }
  // Unmap, release and free, checking that the driver accepts each call.
  void Teardown() {
    for (const Map &m : maps_) {
      EXPECT_EQ(raw_.unmap(m.at, m.size), CUDA_SUCCESS);
      EXPECT_EQ(raw_.release(m.handle), CUDA_SUCCESS);
    }
    maps_.clear();
    if (va_) {
      EXPECT_EQ(raw_.free_va(va_, total_), CUDA_SUCCESS);
    }
    va_ = 0;
  }
  void *ptr(size_t offset = 0) const { return reinterpret_cast<void *>(va_ + offset); }
  size_t size() const { return total_; }

 private:
  struct Map {
    CUdeviceptr at;
    size_t size;
    CUmemGenericAllocationHandle handle;
  };
  const Raw &raw_;
  CUdeviceptr va_ = 0;
  size_t total_ = 0;
  std::vector<Map> maps_;
};

class Wrap : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = vt::UseRankDevice();
    ASSERT_GE(dev_, 0);
    raw_.Load();
  }
  // A refused wrap: the code, a fragment of the message, no buffer.
  // by_driver: the driver refused a call (its CUresult is in the record).
  void ExpectRefused(void *p, size_t size, vmmipc_result_t code, const std::string &needle, bool by_driver = false) {
    vmmipc_buf_t b = reinterpret_cast<vmmipc_buf_t>(1);
    EXPECT_EQ(vmmipc_buf_wrap(p, size, &b), code) << vmmipc_last_error();
    EXPECT_EQ(b, nullptr);
    std::string msg = vmmipc_last_error();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message \"" << msg << "\" lacks \"" << needle << "\"";
    EXPECT_NE(msg.find("vmmipc_buf_wrap"), std::string::npos) << msg;
    if (by_driver) {
      vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
      EXPECT_EQ(vmmipc_last_error_info(&info), VMMIPC_SUCCESS);
      EXPECT_NE(info.driver_error, 0) << "no CUresult recorded: " << msg;
    }
  }
  int dev_ = -1;
  Raw raw_;
};

// The expected byte at `offset` of rank `owner`'s range after each rank of
// its node (`node`, comm ranks in order) wrote its slice there (slices of
// `slice` bytes, in node-rank order).
unsigned char Expected(int owner, const std::vector<int> &node, size_t slice, size_t offset) {
  size_t k = slice ? offset / slice : node.size();  // the node rank that wrote there
  int writer = k < node.size() ? node[k] : -1;
  if (writer >= 0 && writer != owner) return vt::PatternByte(1000 * writer + owner, offset - k * slice);
  return vt::PatternByte(100 + owner, offset);
}

TEST_F(Wrap, MultiChunkRangeIsMappedByEveryRankAndCheckedBothWays) {
  vt::Baseline base;
  const int me = vt::Rank(), n = vt::Size();
  {
    // Three allocations of different sizes mapped back to back.
    AppRange app(raw_, dev_, {{kGran}, {2 * kGran}, {kGran}});
    ASSERT_EQ(app.size(), 8 * kMiB);
    vt::FillPattern(app.ptr(), app.size(), 100 + me);
    vmmipc_buf_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_buf_wrap(app.ptr(), app.size(), &w));
    int chunks = 0, imported = 1;
    void *p = nullptr;
    size_t size = 0;
    ASSERT_VMM_OK(vmmipc_buf_info(w, &chunks, &imported));
    ASSERT_VMM_OK(vmmipc_buf_ptr(w, &p, &size));
    EXPECT_EQ(chunks, 3);
    EXPECT_EQ(imported, 0);
    EXPECT_EQ(p, app.ptr());
    EXPECT_EQ(size, app.size());

    vmmipc_comm_t comm = nullptr;
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
    vmmipc_win_t win = nullptr;
    ASSERT_VMM_OK(vmmipc_allgather_map(comm, w, nullptr, &win));
    // This node's ranks in comm-rank order (any layout): rank node[k]
    // writes slice k of every node peer's range.
    const std::vector<int> ids = vt::NodeIds(comm);
    std::vector<int> node;
    for (int r = 0; r < n; r++)
      if (ids[r] == ids[me]) node.push_back(r);
    size_t mine = 0;
    while (node[mine] != me) mine++;
    const size_t slice = app.size() / node.size();
    std::vector<void *> peer(n);
    for (int r = 0; r < n; r++) {
      size_t sz = 0;
      ASSERT_VMM_OK(vmmipc_win_query(win, r, &peer[r], &sz));
      if (ids[r] != ids[me]) {
        EXPECT_EQ(peer[r], nullptr) << "rank " << r << " is on another node";
        EXPECT_EQ(sz, 0u) << "rank " << r << " is on another node";
        continue;
      }
      ASSERT_EQ(sz, app.size()) << "rank " << r;
      if (r != me) {
        EXPECT_TRUE(vt::CheckPattern(peer[r], sz, 100 + r)) << "reading rank " << r;
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has read before anyone writes
    for (int r : node) {
      if (r == me) continue;
      // This rank's slice of rank r's range, written and read back.
      char *at = static_cast<char *>(peer[r]) + mine * slice;
      vt::FillPattern(at, slice, 1000 * me + r);
      EXPECT_TRUE(vt::CheckPattern(at, slice, 1000 * me + r)) << "slice of rank " << r;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // every write has landed
    std::vector<unsigned char> h(app.size());
    vt::CopyToHost(h.data(), app.ptr(), h.size());
    size_t bad = 0, first_bad = h.size();
    for (size_t i = 0; i < h.size(); i++)
      if (h[i] != Expected(me, node, slice, i)) {
        bad++;
        if (first_bad == h.size()) first_bad = i;
      }
    EXPECT_EQ(bad, 0u) << "bytes of this rank's range that differ, first at " << first_bad;
    ASSERT_VMM_OK(vmmipc_win_free(win));
    ASSERT_VMM_OK(vmmipc_buf_free(w));
    // The application's mapping outlives the wrapper, data and all.
    std::vector<unsigned char> again(app.size());
    vt::CopyToHost(again.data(), app.ptr(), again.size());
    EXPECT_EQ(again, h);
    ASSERT_VMM_OK(vmmipc_comm_destroy(comm));
  }  // the application unmaps, releases and frees its range
  base.Expect("after wrapping, sharing and tearing down the application's range");
}

TEST_F(Wrap, FreeReleasesOnlyTheWrappersReferenceAndGrowIsRefused) {
  vt::Baseline base;
  {
    AppRange app(raw_, dev_, {{kGran}, {kGran}});
    vt::FillPattern(app.ptr(), app.size(), 7);
    vmmipc_buf_t w = nullptr, w2 = nullptr;
    ASSERT_VMM_OK(vmmipc_buf_wrap(app.ptr(), app.size(), &w));
    ASSERT_VMM_OK(vmmipc_buf_wrap(app.ptr(kGran), kGran, &w2));  // a sub-range of whole mappings
    int chunks = 0;
    vmmipc_buf_info(w2, &chunks, nullptr);
    EXPECT_EQ(chunks, 1);
    EXPECT_EQ(vmmipc_grow(w, 3 * kGran), VMMIPC_ERR_INVALID_ARG);
    EXPECT_NE(std::string(vmmipc_last_error()).find("vmmipc_buf_wrap"), std::string::npos) << vmmipc_last_error();
    void *p = nullptr;
    size_t size = 0;
    vmmipc_buf_ptr(w, &p, &size);
    EXPECT_EQ(size, 2 * kGran) << "a refused grow changes nothing";
    EXPECT_VMM_OK(vmmipc_buf_free(w2));
    EXPECT_VMM_OK(vmmipc_buf_free(w));
    EXPECT_TRUE(vt::CheckPattern(app.ptr(), app.size(), 7)) << "the mapping stays readable";
    vt::FillPattern(app.ptr(), app.size(), 8);  // and writable
    EXPECT_TRUE(vt::CheckPattern(app.ptr(), app.size(), 8));
  }  // each cuMemRelease of the application must succeed: the wrapper's are gone
  base.Expect("after freeing two wrappers");
}

// Memory imported from another process cannot be exported again: wrapping
// it is refused at once (a peer's buffer mapped through a window, and one
// received with vmmipc_bcast_map), and its own buffer still works.
TEST_F(Wrap, MemoryImportedFromAPeerIsNotExportable) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs a peer";
  vt::Baseline base;
  const int me = vt::Rank(), n = vt::Size();
  vmmipc_comm_t comm = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_buf_t own = vt::PatternBuf(2, 300 + me);
  ASSERT_NE(own, nullptr);
  vmmipc_win_t win = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(comm, own, nullptr, &win));
  // A node peer's buffer (the next one on this node; none on a node of
  // one), and a root on a node with two ranks: every rank picks alike.
  const std::vector<int> ids = vt::NodeIds(comm);
  const int root = vt::FirstPair(ids).first;
  if (root < 0) {
    ASSERT_VMM_OK(vmmipc_win_free(win));
    ASSERT_VMM_OK(vmmipc_buf_free(own));
    ASSERT_VMM_OK(vmmipc_comm_destroy(comm));
    GTEST_SKIP() << "needs two ranks on a node";
  }
  int peer = -1;
  for (int k = 1; k < n && peer < 0; k++)
    if (ids[(me + k) % n] == ids[me]) peer = (me + k) % n;
  void *p = nullptr;
  size_t size = 0;
  if (peer >= 0) {
    ASSERT_VMM_OK(vmmipc_win_query(win, peer, &p, &size));
    ASSERT_NE(p, nullptr);
    ExpectRefused(p, size, VMMIPC_ERR_NOT_EXPORTABLE, "imported from another process");
    ExpectRefused(static_cast<char *>(p) + kGran, kGran, VMMIPC_ERR_NOT_EXPORTABLE, "cannot be exported again");
  }
  vmmipc_buf_t mapped = nullptr;
  ASSERT_VMM_OK(vmmipc_bcast_map(comm, own, root, nullptr, &mapped));
  if (me != root && ids[me] == ids[root]) {
    ASSERT_NE(mapped, nullptr);
    ASSERT_VMM_OK(vmmipc_buf_ptr(mapped, &p, &size));
    ExpectRefused(p, size, VMMIPC_ERR_NOT_EXPORTABLE, "imported from another process");
    EXPECT_TRUE(vt::CheckPattern(p, size, 300 + root)) << "the refusal changed nothing";
  }
  ASSERT_VMM_OK(vmmipc_buf_free(mapped));
  ASSERT_VMM_OK(vmmipc_win_free(win));
  ASSERT_VMM_OK(vmmipc_buf_free(own));
  ASSERT_VMM_OK(vmmipc_comm_destroy(comm));
  base.Expect("after the refused wraps");
}

// A node peer's heap slice is memory imported from the peer's process, as
// a window's mapping is: wrapping it is refused too, and so is a range that
// reaches into a peer's segment. Before, the wrap succeeded (its export
// then failed with a driver error, and its retained handle kept the peer's
// step alive past a trim).
TEST_F(Wrap, APeersHeapSliceIsNotExportable) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs a peer";
  vt::Baseline base;
  const int me = vt::Rank(), n = vt::Size();
  vmmipc_comm_t comm = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_heap_config_t cfg = VMMIPC_HEAP_CONFIG_INIT;
  cfg.reserve = 4 * kGran;
  cfg.grow = kGran;
  vmmipc_heap_t heap = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_create(comm, &cfg, &heap));
  vmmipc_win_t win = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(heap, kGran, &win));
  const std::vector<int> ids = vt::NodeIds(comm);
  int peer = -1;
  for (int k = 1; k < n && peer < 0; k++)
    if (ids[(me + k) % n] == ids[me]) peer = (me + k) % n;
  if (peer >= 0) {
    void *p = nullptr;
    size_t size = 0;
    ASSERT_VMM_OK(vmmipc_win_query(win, peer, &p, &size));
    ASSERT_NE(p, nullptr);
    ExpectRefused(p, size, VMMIPC_ERR_NOT_EXPORTABLE, "imported from another process");
  }
  ASSERT_VMM_OK(vmmipc_win_free(win));
  ASSERT_VMM_OK(vmmipc_heap_destroy(heap));
  ASSERT_VMM_OK(vmmipc_comm_destroy(comm));
  base.Expect("after the refused wraps");
}

// The wrapper's reference keeps the physical memory alive: exports made
// after the application unmapped and released still carry the data.
TEST_F(Wrap, ExportsKeepWorkingAfterTheApplicationUnmaps) {
  vt::Baseline base;
  vmmipc_buf_t w = nullptr;
  {
    AppRange app(raw_, dev_, {{kGran}, {2 * kGran}});
    vt::FillPattern(app.ptr(), app.size(), 31);
    ASSERT_VMM_OK(vmmipc_buf_wrap(app.ptr(), app.size(), &w));
  }
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(w, &d));
  size_t c0 = 0, c1 = 0;
  ASSERT_VMM_OK(vmmipc_desc_chunk_size(d, 0, &c0));
  ASSERT_VMM_OK(vmmipc_desc_chunk_size(d, 1, &c1));
  EXPECT_EQ(c0, kGran);
  EXPECT_EQ(c1, 2 * kGran);
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));  // in this process: an alias
  void *q = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(imp, &q, &n);
  EXPECT_EQ(n, 3 * kGran);
  EXPECT_TRUE(vt::CheckPattern(q, n, 31));
  EXPECT_VMM_OK(vmmipc_buf_free(imp));
  EXPECT_VMM_OK(vmmipc_desc_free(d));
  EXPECT_VMM_OK(vmmipc_buf_free(w));
  base.Expect("after the last reference went");
}

TEST_F(Wrap, MemoryWithoutThePosixFdHandleTypeIsRefused) {
  vt::Baseline base;
  {
    AppRange app(raw_, dev_, {{kGran}, {kGran, CU_MEM_HANDLE_TYPE_NONE}});
    ExpectRefused(app.ptr(), app.size(), VMMIPC_ERR_UNSUPPORTED, "chunk 2 (offset 2097152)");
    ExpectRefused(app.ptr(), app.size(), VMMIPC_ERR_UNSUPPORTED,
                  "requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
  }  // chunk 1's retained handle must have been released, or its allocation stays
  base.Expect("after refusing memory without POSIX fds");
}

TEST_F(Wrap, MemoryThatIsNotVmmIsRefused) {
  vt::Baseline base;
  CUdeviceptr plain = 0;
  ASSERT_EQ(raw_.alloc(&plain, 3 * kGran), CUDA_SUCCESS);
  // A granule-aligned range inside it, so that only its kind is wrong.
  CUdeviceptr aligned = (plain + kGran - 1) / kGran * kGran;
  ExpectRefused(reinterpret_cast<void *>(aligned), kGran, VMMIPC_ERR_UNSUPPORTED, "cuMemAlloc/cudaMalloc", true);
  ExpectRefused(reinterpret_cast<void *>(plain), 4096, VMMIPC_ERR_UNSUPPORTED, "not CUDA VMM memory", true);
  EXPECT_EQ(raw_.free(plain), CUDA_SUCCESS);
  // Host memory is not device memory at all.
  static char host[4096];
  ExpectRefused(host, sizeof host, VMMIPC_ERR_INVALID_ARG, "not mapped device memory", true);
  base.Expect("after refusing plain memory");
}

TEST_F(Wrap, ARangeWithAHoleIsRefused) {
  vt::Baseline base;
  {
    AppRange app(raw_, dev_, {{kGran}, {0}, {kGran}});  // mapped, hole, mapped
    ExpectRefused(app.ptr(), app.size(), VMMIPC_ERR_INVALID_ARG, "hole at offset 2097152", true);
    ExpectRefused(app.ptr(kGran), kGran, VMMIPC_ERR_INVALID_ARG, "not mapped device memory", true);
  }
  base.Expect("after refusing a range with a hole");
}

TEST_F(Wrap, ARangeNotAlignedToTheGranularityOrToMappingsIsRefused) {
  vt::Baseline base;
  {
    AppRange app(raw_, dev_, {{2 * kGran}, {kGran}, {0}});  // 4 MiB, 2 MiB, unmapped granule
    ExpectRefused(app.ptr(4096), kGran, VMMIPC_ERR_INVALID_ARG, "not aligned to device");
    ExpectRefused(app.ptr(), 3 * kMiB, VMMIPC_ERR_INVALID_ARG, "granularity of 2097152 bytes");
    // Aligned, but inside the first (4 MiB) mapping, or ending inside it.
    ExpectRefused(app.ptr(kGran), kGran, VMMIPC_ERR_INVALID_ARG, "inside a mapping that starts at");
    ExpectRefused(app.ptr(), kGran, VMMIPC_ERR_INVALID_ARG, "ends 2097152 bytes into chunk 1");
    // Past the last mapping, into the reserved granule after it.
    ExpectRefused(app.ptr(), app.size(), VMMIPC_ERR_INVALID_ARG, "hole at offset 6291456");
  }
  base.Expect("after refusing misaligned ranges");
}

TEST_F(Wrap, BadArgumentsAreInvalid) {
  vmmipc_buf_t b = nullptr;
  EXPECT_EQ(vmmipc_buf_wrap(nullptr, kGran, &b), VMMIPC_ERR_INVALID_ARG);
  int x = 0;
  EXPECT_EQ(vmmipc_buf_wrap(&x, 0, &b), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_buf_wrap(&x, kGran, nullptr), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_buf_wrap(reinterpret_cast<void *>(~uintptr_t(0) - 4095), kGran, &b), VMMIPC_ERR_INVALID_ARG);
}

}  // namespace
