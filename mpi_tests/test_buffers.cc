// Buffers and descriptors in one process: alloc, grow, export, pack/unpack,
// validation, import with rollback at every chunk, fd accounting, re-export.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "common/testhooks.h"
#include <cuda.h>
#include "vmm/vmm.h"

#include "harness/helpers.h"

namespace {

constexpr size_t kMiB = 1 << 20;
constexpr size_t kGran = 2 * kMiB;

class Buffers : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = vt::UseRankDevice();
    ASSERT_GE(dev_, 0);
    fds0_ = vt::FdCount();
    have_counts_ = vt::GetDriverCounts(&counts0_);
  }
  void TearDown() override {
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(vt::FdCount(), fds0_) << "fds leaked";
    ExpectDriverBaseline();
  }
  void ExpectDriverBaseline() {
    vt::DriverCounts now;
    if (!have_counts_ || !vt::GetDriverCounts(&now)) return;
    EXPECT_EQ(now.allocations, counts0_.allocations) << "allocations leaked";
    EXPECT_EQ(now.mappings, counts0_.mappings) << "mappings leaked";
    EXPECT_EQ(now.reservations, counts0_.reservations) << "reservations leaked";
  }
  // A buffer of `chunks` chunks of one granule each, filled with `seed`,
  // grown chunk by chunk; export_cache as vmmipc_alloc_props_t has it.
  vmmipc_buf_t Chunky(int chunks, unsigned seed, int export_cache = -1) {
    vmmipc_buf_t b = nullptr;
    vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
    props.export_cache = export_cache;
    EXPECT_VMM_OK(vmmipc_alloc_ex(kGran, &props, &b));
    for (int i = 2; b && i <= chunks; i++) EXPECT_VMM_OK(vmmipc_grow(b, i * kGran));
    void *p = nullptr;
    size_t n = 0;
    if (b) vmmipc_buf_ptr(b, &p, &n);
    if (p) vt::FillPattern(p, n, seed);
    return b;
  }
  std::vector<unsigned char> Pack(vmmipc_desc_t d, std::vector<int> *fds) {
    size_t nb = 0;
    int nf = 0;
    EXPECT_VMM_OK(vmmipc_desc_pack(d, nullptr, &nb, nullptr, &nf));
    std::vector<unsigned char> bytes(nb);
    fds->assign(nf, -1);
    EXPECT_VMM_OK(vmmipc_desc_pack(d, bytes.data(), &nb, fds->data(), &nf));
    return bytes;
  }
  // A Chunky buffer, its export and that descriptor's wire form (the fds
  // are the descriptor's own); Drop frees the descriptor and the buffer.
  struct Packed {
    vmmipc_buf_t b = nullptr;
    vmmipc_desc_t d = nullptr;
    std::vector<unsigned char> bytes;
    std::vector<int> fds;
  };
  Packed ExportPacked(int chunks, unsigned seed) {
    Packed x;
    x.b = Chunky(chunks, seed);
    EXPECT_VMM_OK(vmmipc_export(x.b, &x.d));
    if (x.d) x.bytes = Pack(x.d, &x.fds);
    return x;
  }
  void Drop(Packed &x) {
    vmmipc_desc_free(x.d);
    vmmipc_buf_free(x.b);
  }
  int dev_ = -1, fds0_ = 0;
  bool have_counts_ = false;
  vt::DriverCounts counts0_;
};

void Put32(std::vector<unsigned char> &b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; i++) b[off + i] = static_cast<unsigned char>(v >> (8 * i));
}
void Put64(std::vector<unsigned char> &b, size_t off, uint64_t v) {
  for (int i = 0; i < 8; i++) b[off + i] = static_cast<unsigned char>(v >> (8 * i));
}

TEST_F(Buffers, AllocRoundsUpToTheGranularity) {
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(1, &b));
  void *p = nullptr;
  size_t n = 0;
  int chunks = 0, imported = 1;
  ASSERT_VMM_OK(vmmipc_buf_ptr(b, &p, &n));
  ASSERT_VMM_OK(vmmipc_buf_info(b, &chunks, &imported));
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(chunks, 1);
  EXPECT_EQ(imported, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kGran, 0u);
  vt::FillPattern(p, kGran, 7);  // the whole granule is mapped
  EXPECT_TRUE(vt::CheckPattern(p, kGran, 7));
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  size_t cs = 0;
  ASSERT_VMM_OK(vmmipc_desc_chunk_size(d, 0, &cs));
  EXPECT_EQ(cs, kGran);
  ASSERT_VMM_OK(vmmipc_desc_free(d));
  ASSERT_VMM_OK(vmmipc_buf_free(b));
}

TEST_F(Buffers, EmptyBufferExportsAndImportsAsEmpty) {
  vmmipc_buf_t b = nullptr, imp = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(0, &b));
  void *p = reinterpret_cast<void *>(1);
  size_t n = 1;
  ASSERT_VMM_OK(vmmipc_buf_ptr(b, &p, &n));
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(n, 0u);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  std::vector<int> fds;
  auto bytes = Pack(d, &fds);
  EXPECT_EQ(bytes.size(), 96u);
  EXPECT_TRUE(fds.empty());
  vmmipc_desc_t u = nullptr;
  ASSERT_VMM_OK(vmmipc_desc_unpack(bytes.data(), bytes.size(), nullptr, 0, &u));
  ASSERT_VMM_OK(vmmipc_import(u, nullptr, &imp));
  ASSERT_VMM_OK(vmmipc_buf_ptr(imp, &p, &n));
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(n, 0u);
  vmmipc_buf_free(imp);
  vmmipc_desc_free(u);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(Buffers, GrowKeepsTheDataInPlaceOrMoved) {
  for (int force_move = 0; force_move < 2; force_move++) {
    vmmipc_buf_t b = Chunky(1, 11);
    ASSERT_NE(b, nullptr);
    void *before = nullptr, *after = nullptr;
    size_t n = 0;
    vmmipc_buf_ptr(b, &before, &n);
    if (force_move) vmmipc__test_fail_at("inplace", 1);
    ASSERT_VMM_OK(vmmipc_grow(b, 3 * kGran - 5));
    int chunks = 0;
    vmmipc_buf_info(b, &chunks, nullptr);
    EXPECT_EQ(chunks, 2);
    vmmipc_buf_ptr(b, &after, &n);
    EXPECT_EQ(n, 3 * kGran - 5);
    if (force_move) {
      EXPECT_NE(after, before) << "the move path must relocate";
    }
    EXPECT_TRUE(vt::CheckPattern(after, kGran, 11)) << (force_move ? "moved" : "in place");
    vt::FillPattern(after, n, 12);  // the whole new range is writable
    EXPECT_TRUE(vt::CheckPattern(after, n, 12));
    EXPECT_EQ(vmmipc_grow(b, kGran), VMMIPC_ERR_INVALID_ARG) << "grow cannot shrink";
    vmmipc_buf_free(b);
  }
}

// The driver's address reservation calls, as a test makes them.
struct Va {
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) release = nullptr;
  bool Load() {
    void *fn = nullptr;
    if (vmmipc_driver_proc("cuMemAddressReserve", 0, &fn) != VMMIPC_SUCCESS) return false;
    reserve = reinterpret_cast<decltype(reserve)>(fn);
    if (vmmipc_driver_proc("cuMemAddressFree", 0, &fn) != VMMIPC_SUCCESS) return false;
    release = reinterpret_cast<decltype(release)>(fn);
    return true;
  }
  // Reserves the granule right after `b` (0 when it is taken).
  CUdeviceptr After(vmmipc_buf_t b) const {
    void *p = nullptr;
    size_t n = 0;
    vmmipc_buf_ptr(b, &p, &n);
    CUdeviceptr want = reinterpret_cast<CUdeviceptr>(p) + (n + kGran - 1) / kGran * kGran, got = 0;
    if (reserve(&got, kGran, kGran, want, 0) != CUDA_SUCCESS) return 0;
    if (got == want) return got;
    release(got, kGran);
    return 0;
  }
};

// A one-chunk buffer filled with `seed` whose next granule of address space
// is free (probed with the reserve that vmmipc_grow makes), so that a grow
// by one granule can happen in place; nullptr when none turned up. That
// granule comes back reserved in *gap: host allocations (a sanitizer's
// above all) could take it otherwise; release it right before the grow.
vmmipc_buf_t GrowableInPlace(const Va &va, unsigned seed, CUdeviceptr *gap) {
  std::vector<vmmipc_buf_t> tried;
  vmmipc_buf_t found = nullptr;
  *gap = 0;
  for (int i = 0; i < 32 && !found; i++) {
    vmmipc_buf_t b = nullptr;
    if (vmmipc_alloc(kGran, &b) != VMMIPC_SUCCESS) break;
    void *p = nullptr;
    vmmipc_buf_ptr(b, &p, nullptr);
    vt::FillPattern(p, kGran, seed);
    if ((*gap = va.After(b)) != 0) {
      found = b;
    } else {
      tried.push_back(b);
    }
  }
  for (vmmipc_buf_t b : tried) vmmipc_buf_free(b);
  return found;
}

// Every step of a grow that fails leaves the buffer as it was and nothing
// behind: in place (where the new range must be unmapped before it is
// freed, and is free again afterwards) and moved (forced by keeping the
// address space after the buffer reserved).
TEST_F(Buffers, GrowRollsBackAtEveryStep) {
  Va va;
  ASSERT_TRUE(va.Load());
  struct Case {
    const char *step;
    bool in_place;
    const char *needle;
  };
  const Case cases[] = {{"alloc", true, "injected failure at alloc"},
                        {"map", true, "chunk 2 of 2: cuMemMap"},
                        {"access", true, "injected failure at access"},
                        {"record", true, "injected failure at record"},
                        {"alloc", false, "injected failure at alloc"},
                        {"reserve", false, "injected failure at reserve"},
                        {"map", false, "chunk 1 of 2: cuMemMap"},
                        {"access", false, "injected failure at access"}};
  for (const Case &c : cases) {
    const std::string what = std::string(c.step) + (c.in_place ? " in place" : " moved");
    CUdeviceptr gap = 0;
    vmmipc_buf_t b = GrowableInPlace(va, 60, &gap);
    if (!b) GTEST_SKIP() << "no buffer with free address space after it turned up";
    void *before = nullptr, *after = nullptr;
    size_t n = 0;
    vmmipc_buf_ptr(b, &before, nullptr);
    if (c.in_place) va.release(gap, kGran);  // else it blocks the in-place path
    vt::DriverCounts c0, c1;
    bool counts = vt::GetDriverCounts(&c0);
    int fds = vt::FdCount();
    vmmipc__test_fail_at(c.step, 1);
    EXPECT_NE(vmmipc_grow(b, 2 * kGran), VMMIPC_SUCCESS) << what;
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(vt::FdCount(), fds) << what;
    if (counts && vt::GetDriverCounts(&c1)) {
      EXPECT_EQ(c1.allocations, c0.allocations) << what;
      EXPECT_EQ(c1.mappings, c0.mappings) << what;
      EXPECT_EQ(c1.reservations, c0.reservations) << what;
    }
    if (c.in_place) {
      gap = va.After(b);
      EXPECT_NE(gap, 0u) << what << ": the range after the buffer is free again";
    }
    EXPECT_NE(std::string(vmmipc_last_error()).find(c.needle), std::string::npos) << what << ": "
                                                                                 << vmmipc_last_error();
    EXPECT_EQ(std::string(vmmipc_last_error()).find("descriptor"), std::string::npos)
        << what << ": an import's hint where no descriptor is involved: " << vmmipc_last_error();
    vmmipc_error_info_t info = {};
    info.struct_size = sizeof info;
    ASSERT_VMM_OK(vmmipc_last_error_info(&info));
    EXPECT_STREQ(info.operation, "vmmipc_grow") << what << ": " << info.message;
    int chunks = 0;
    vmmipc_buf_ptr(b, &after, &n);
    vmmipc_buf_info(b, &chunks, nullptr);
    EXPECT_EQ(after, before) << what;
    EXPECT_EQ(n, kGran) << what;
    EXPECT_EQ(chunks, 1) << what;
    EXPECT_TRUE(vt::CheckPattern(after, kGran, 60)) << what;
    // The same grow then succeeds, in place or moved as asked.
    if (c.in_place && gap) {
      va.release(gap, kGran);
      gap = 0;
    }
    ASSERT_VMM_OK(vmmipc_grow(b, 2 * kGran));
    vmmipc_buf_ptr(b, &after, &n);
    EXPECT_EQ(after == before, c.in_place) << what;
    EXPECT_TRUE(vt::CheckPattern(after, kGran, 60)) << what;
    EXPECT_VMM_OK(vmmipc_buf_free(b));
    if (gap) va.release(gap, kGran);
  }
}

TEST_F(Buffers, AnExposedBufferIsNeitherFreedNorGrown) {
  vmmipc_buf_t b = Chunky(1, 61);
  b->exposed = 2;  // what two open windows of the collective layer record
  EXPECT_EQ(vmmipc_buf_free(b), VMMIPC_ERR_BUSY);
  EXPECT_NE(std::string(vmmipc_last_error()).find("exposed by 2 open window(s); hint: vmmipc_win_free them first"),
            std::string::npos)
      << vmmipc_last_error();
  EXPECT_EQ(vmmipc_grow(b, 2 * kGran), VMMIPC_ERR_BUSY);
  EXPECT_NE(std::string(vmmipc_last_error()).find("vmmipc_grow: the buffer is exposed by 2"), std::string::npos)
      << vmmipc_last_error();
  void *p = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(b, &p, &n);
  EXPECT_EQ(n, kGran);
  EXPECT_TRUE(vt::CheckPattern(p, n, 61)) << "still there";
  b->exposed = 0;
  EXPECT_VMM_OK(vmmipc_buf_free(b));
}

// A driver call that fails during free is reported (the first one, naming
// the call and the chunk), and everything else is still released.
TEST_F(Buffers, FreeReportsAFailedDriverCallAndReleasesTheRest) {
  // The unmap of chunk 2 reports a failure (injected: the real driver
  // accepts unmapping a range that is not mapped any more, as the H200 run
  // of 2026-12-01 showed, so no honest driver call fails here on both).
  vmmipc_buf_t b = Chunky(3, 62);
  vmmipc__test_fail_at("unmap", 2);
  EXPECT_EQ(vmmipc_buf_free(b), VMMIPC_ERR_CUDA);
  vmmipc__test_fail_at(nullptr, 0);
  std::string msg = vmmipc_last_error();
  EXPECT_NE(msg.find("vmmipc_buf_free: chunk 2 of 3: cuMemUnmap"), std::string::npos) << msg;
  // TearDown checks that the other chunks, the mappings and the
  // reservations were released all the same.
}

// With the export cache off, every export asks the driver for new fds and
// nothing stays open once the descriptors are freed (the cache on:
// test_caches).
TEST_F(Buffers, ExportWithTheCacheOffOpensNewFdsAndLeavesNoneBehind) {
  vmmipc_buf_t b = Chunky(3, 3, 0);
  ASSERT_NE(b, nullptr);
  int base = vt::FdCount();
  vmmipc_desc_t d1 = nullptr, d2 = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d1));
  EXPECT_EQ(vt::FdCount(), base + 3);
  ASSERT_VMM_OK(vmmipc_export(b, &d2));
  EXPECT_EQ(vt::FdCount(), base + 6);
  long cached = -1;
  ASSERT_VMM_OK(vmmipc_export_cache_fds(&cached));
  EXPECT_EQ(cached, 0);
  std::vector<int> f1, f2;
  Pack(d1, &f1);
  Pack(d2, &f2);
  for (int x : f1)
    for (int y : f2) EXPECT_NE(x, y) << "every export gives fresh fds";
  size_t size = 0;
  int chunks = 0;
  ASSERT_VMM_OK(vmmipc_desc_info(d1, &size, &chunks, nullptr));
  EXPECT_EQ(size, 3 * kGran);
  EXPECT_EQ(chunks, 3);
  vmmipc_desc_free(d1);
  EXPECT_EQ(vt::FdCount(), base + 3);
  vmmipc_desc_free(d2);
  EXPECT_EQ(vt::FdCount(), base);
  vmmipc_buf_free(b);
}

TEST_F(Buffers, UnpackDuplicatesTheCallersFds) {
  Packed x = ExportPacked(2, 5);
  ASSERT_NE(x.d, nullptr);
  vmmipc_desc_t u = nullptr;
  int base = vt::FdCount();
  ASSERT_VMM_OK(vmmipc_desc_unpack(x.bytes.data(), x.bytes.size(), x.fds.data(), 2, &u));
  EXPECT_EQ(vt::FdCount(), base + 2);
  vmmipc_desc_free(u);
  EXPECT_EQ(vt::FdCount(), base);
  for (int fd : x.fds) EXPECT_GE(fcntl(fd, F_GETFD), 0) << "the caller's fds stay open";
  Drop(x);
}

// Each malformed form is rejected with INVALID_DESC and leaves no fd; the
// genuine descriptor still imports afterwards.
TEST_F(Buffers, MalformedDescriptorsAreRejected) {
  vmmipc_buf_t b = Chunky(3, 9);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  std::vector<int> fds;
  const auto good = Pack(d, &fds);
  ASSERT_EQ(good.size(), 96u + 3 * 8);
  struct Case {
    const char *name;
    std::vector<unsigned char> bytes;
    int nfds;
    const char *needle;
  };
  std::vector<Case> cases;
  auto with = [&](const char *name, auto edit, int nfds = 3, const char *needle = "") {
    Case c{name, good, nfds, needle};
    edit(c.bytes);
    cases.push_back(c);
  };
  with("fd count differs from the chunk count", [](auto &) {}, 2, "file descriptors");
  with("zero chunk size", [](auto &v) { Put64(v, 96 + 8, 0); }, 3, "chunk 2 of 3");
  with("chunk not a multiple of the granularity", [](auto &v) { Put64(v, 96, kGran + 4096); }, 3, "multiple");
  with("total overflows", [](auto &v) {
    Put64(v, 96 + 8, ~0ull - kGran + 1);
    Put64(v, 96 + 16, ~0ull - kGran + 1);
  }, 3, "overflow");
  with("size larger than the sum", [](auto &v) { Put64(v, 48, 3 * kGran + 1); }, 3, "does not fit");
  with("size with no chunks", [](auto &v) {
    Put32(v, 64, 0);
    v.resize(96);
  }, 0, "no chunks");
  with("unknown version", [](auto &v) { v[4] = 3; }, 3, "version 3");
  with("version 1 (0.1, no identity)", [](auto &v) {
    v[4] = 1;
    v[6] = 72;
    v.erase(v.begin() + 72, v.begin() + 96);
  }, 3, "unknown wire version 1");
  with("pid without a serial", [](auto &v) { Put64(v, 80, 0); }, 3, "incomplete buffer identity");
  with("serial without a pid", [](auto &v) { Put32(v, 68, 0); }, 3, "incomplete buffer identity");
  with("no nonce", [](auto &v) { Put64(v, 72, 0); }, 3, "incomplete buffer identity");
  with("pid out of range", [](auto &v) { Put32(v, 68, 0x80000000u); }, 3, "incomplete buffer identity");
  with("a generation alone", [](auto &v) {
    Put32(v, 68, 0);
    Put64(v, 72, 0);
    Put64(v, 80, 0);
  }, 3, "incomplete buffer identity");
  with("unknown handle type", [](auto &v) { Put32(v, 8, 2); }, 3, "handle type");
  with("bad magic", [](auto &v) { v[0] ^= 0xff; }, 3, "magic");
  with("unknown flags", [](auto &v) { Put32(v, 12, 1); }, 3, "flags");
  with("truncated header", [](auto &v) { v.resize(40); }, 3, "truncated");
  with("truncated chunk table", [](auto &v) { v.resize(v.size() - 8); }, 3, "truncated");
  with("trailing bytes", [](auto &v) { v.push_back(0); }, 3, "trailing");
  with("bad granularity", [](auto &v) { Put64(v, 56, 3000); }, 3, "granularity");
  for (const Case &c : cases) {
    int before = vt::FdCount();
    vmmipc_desc_t u = nullptr;
    vmmipc_result_t r = vmmipc_desc_unpack(c.bytes.data(), c.bytes.size(), fds.data(), c.nfds, &u);
    EXPECT_EQ(r, VMMIPC_ERR_INVALID_DESC) << c.name << ": " << vmmipc_last_error();
    EXPECT_EQ(u, nullptr) << c.name;
    EXPECT_NE(std::string(vmmipc_last_error()).find(c.needle), std::string::npos)
        << c.name << ": message \"" << vmmipc_last_error() << "\" lacks \"" << c.needle << "\"";
    vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;  // the call is named, as every failure's
    ASSERT_VMM_OK(vmmipc_last_error_info(&info));
    EXPECT_STREQ(info.operation, "vmmipc_desc_unpack") << c.name << ": " << info.message;
    EXPECT_EQ(vt::FdCount(), before) << c.name;
  }
  vmmipc_desc_t u = nullptr;
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_desc_unpack(good.data(), good.size(), fds.data(), 3, &u));
  ASSERT_VMM_OK(vmmipc_import(u, nullptr, &imp));
  void *p = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(imp, &p, &n);
  EXPECT_TRUE(vt::CheckPattern(p, n, 9));
  vmmipc_buf_free(imp);
  vmmipc_desc_free(u);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

// fds that are not VMM exports fail at import (or at unpack for a closed fd).
TEST_F(Buffers, ForeignFdsFailCleanly) {
  vmmipc_buf_t b = Chunky(1, 4);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  std::vector<int> real;
  auto bytes = Pack(d, &real);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  char tmpl[] = "/tmp/vmmipc-test-XXXXXX";
  int file = mkostemp(tmpl, O_CLOEXEC);
  ASSERT_GE(file, 0);
  unlink(tmpl);
  ASSERT_EQ(ftruncate(file, kGran), 0);
  for (int fd : {p[0], file}) {
    int before = vt::FdCount();
    vmmipc_desc_t u = nullptr;
    vmmipc_buf_t imp = nullptr;
    ASSERT_VMM_OK(vmmipc_desc_unpack(bytes.data(), bytes.size(), &fd, 1, &u));
    vmmipc_result_t r = vmmipc_import(u, nullptr, &imp);
    EXPECT_NE(r, VMMIPC_SUCCESS);
    EXPECT_EQ(imp, nullptr);
    EXPECT_NE(std::string(vmmipc_last_error()).find("chunk 1 of 1"), std::string::npos) << vmmipc_last_error();
    EXPECT_NE(std::string(vmmipc_last_error()).find("cuMemImportFromShareableHandle"), std::string::npos);
    vmmipc_desc_free(u);
    EXPECT_EQ(vt::FdCount(), before);
  }
  close(p[0]);
  close(p[1]);
  close(file);
  int closed = p[0];  // now closed
  vmmipc_desc_t u = nullptr;
  EXPECT_EQ(vmmipc_desc_unpack(bytes.data(), bytes.size(), &closed, 1, &u), VMMIPC_ERR_INVALID_DESC)
      << vmmipc_last_error();
  EXPECT_NE(std::string(vmmipc_last_error()).find("EBADF"), std::string::npos) << vmmipc_last_error();
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));  // the genuine one still imports
  vmmipc_buf_free(imp);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

// A peer-controlled size that does not match the exported chunk fails at the
// map of that chunk, and everything done before is rolled back.
TEST_F(Buffers, ForgedChunkSizeFailsAtTheMapAndRollsBack) {
  vmmipc_buf_t b = Chunky(3, 6);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  std::vector<int> fds;
  auto bytes = Pack(d, &fds);
  Put64(bytes, 96 + 8, 2 * kGran);  // chunk 2 claims two granules
  Put64(bytes, 48, 4 * kGran);
  int before = vt::FdCount();
  vmmipc_desc_t u = nullptr;
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_desc_unpack(bytes.data(), bytes.size(), fds.data(), 3, &u));
  EXPECT_EQ(vmmipc_import(u, nullptr, &imp), VMMIPC_ERR_CUDA);
  std::string msg = vmmipc_last_error();
  EXPECT_NE(msg.find("chunk 2 of 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuMemMap"), std::string::npos) << msg;
  EXPECT_EQ(imp, nullptr);
  vmmipc_desc_free(u);
  EXPECT_EQ(vt::FdCount(), before);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

// Injected failures at every chunk of every import step roll back fully.
TEST_F(Buffers, ImportRollsBackAtEveryChunk) {
  vmmipc_buf_t b = Chunky(3, 8);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  for (const char *step : {"import", "map"})
    for (int k = 1; k <= 3; k++) {
      vmmipc_buf_t imp = nullptr;
      vmmipc__test_fail_at(step, k);
      EXPECT_NE(vmmipc_import(d, nullptr, &imp), VMMIPC_SUCCESS) << step << " " << k;
      vmmipc__test_fail_at(nullptr, 0);
      std::string want = "chunk " + std::to_string(k) + " of 3";
      EXPECT_NE(std::string(vmmipc_last_error()).find(want), std::string::npos) << vmmipc_last_error();
      if (std::string(step) == "map") {
        EXPECT_NE(std::string(vmmipc_last_error()).find("the descriptor may be forged"), std::string::npos)
            << vmmipc_last_error();
      }
      EXPECT_EQ(imp, nullptr);
    }
  for (const char *step : {"access", "reserve"}) {
    vmmipc_buf_t imp = nullptr;
    vmmipc__test_fail_at(step, 1);
    EXPECT_NE(vmmipc_import(d, nullptr, &imp), VMMIPC_SUCCESS) << step;
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(imp, nullptr);
  }
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
  // TearDown checks that no fd, allocation, mapping or reservation is left.
}

// No host memory for a record (a buffer's, a descriptor's, a reservation's
// entry): NO_MEMORY that names the call, no output, nothing left behind.
TEST_F(Buffers, NoMemoryForARecordNamesTheCall) {
  Packed x = ExportPacked(2, 12);
  ASSERT_NE(x.d, nullptr);
  struct Case {
    const char *op;
    int nth;  // which record of the call fails
  };
  for (const Case &c : {Case{"vmmipc_alloc", 1}, Case{"vmmipc_alloc", 2}, Case{"vmmipc_import", 1},
                        Case{"vmmipc_import", 2}, Case{"vmmipc_export", 1}, Case{"vmmipc_desc_unpack", 1}}) {
    const std::string what = std::string(c.op) + " record " + std::to_string(c.nth);
    const std::string op = c.op;
    vmmipc_buf_t nb = nullptr;
    vmmipc_desc_t nd = nullptr;
    vmmipc__test_fail_at("record", c.nth);
    vmmipc_result_t r = op == "vmmipc_alloc"    ? vmmipc_alloc(kGran, &nb)
                        : op == "vmmipc_import" ? vmmipc_import(x.d, nullptr, &nb)
                        : op == "vmmipc_export" ? vmmipc_export(x.b, &nd)
                                                : vmmipc_desc_unpack(x.bytes.data(), x.bytes.size(), x.fds.data(), 2, &nd);
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(r, VMMIPC_ERR_NO_MEMORY) << what << ": " << vmmipc_last_error();
    vmmipc_error_info_t info = {};
    info.struct_size = sizeof info;
    ASSERT_VMM_OK(vmmipc_last_error_info(&info));
    EXPECT_STREQ(info.operation, c.op) << what << ": " << info.message;
    EXPECT_NE(std::string(info.message).find("injected failure at record"), std::string::npos) << info.message;
    EXPECT_EQ(nb, nullptr) << what;
    EXPECT_EQ(nd, nullptr) << what;
  }
  Drop(x);
  // TearDown checks that no fd, allocation, mapping or reservation is left.
}

TEST_F(Buffers, ExportFailurePartwayClosesTheFdsItOpened) {
  vmmipc_buf_t b = Chunky(3, 2);
  for (int k = 1; k <= 3; k++) {
    int before = vt::FdCount();
    vmmipc_desc_t d = nullptr;
    vmmipc__test_fail_at("export", k);
    EXPECT_EQ(vmmipc_export(b, &d), VMMIPC_ERR_CUDA);
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(d, nullptr);
    EXPECT_NE(std::string(vmmipc_last_error()).find("chunk " + std::to_string(k) + " of 3"), std::string::npos);
    EXPECT_EQ(vt::FdCount(), before);
  }
  vmmipc_buf_free(b);
}

// Room for exactly `room` more fds while it lives: every hole below the
// highest open fd is filled, and the soft limit allows `room` numbers above.
class FdLimit {
 public:
  explicit FdLimit(int room) {
    EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &old_), 0);
    int highest = 0;
    for (int fd = 0; fd < 65536; fd++)
      if (fcntl(fd, F_GETFD) >= 0) highest = fd;
    for (;;) {
      int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      EXPECT_GE(fd, 0);
      if (fd < 0 || fd > highest) {
        if (fd >= 0) close(fd);
        break;
      }
      fillers_.push_back(fd);
    }
    rlimit low = old_;
    low.rlim_cur = highest + 1 + room;
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  }
  ~FdLimit() {
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &old_), 0);
    for (int fd : fillers_) close(fd);
  }

 private:
  rlimit old_{};
  std::vector<int> fillers_;
};

TEST_F(Buffers, ExportUnderALowFdLimitFailsCleanly) {
  vmmipc_buf_t b = Chunky(3, 1, 0);  // the export cache off: one fd per chunk
  ASSERT_NE(b, nullptr);
  int before = vt::FdCount();
  vmmipc_desc_t d = nullptr;
  vmmipc_result_t r;
  std::string msg;
  {
    FdLimit limit(2);  // the third chunk's export must fail
    r = vmmipc_export(b, &d);
    msg = vmmipc_last_error();
  }
  EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << msg;
  EXPECT_EQ(d, nullptr);
  EXPECT_NE(msg.find("file descriptor limit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chunk 3 of 3"), std::string::npos) << msg;
  EXPECT_EQ(vt::FdCount(), before);
  vmmipc_buf_free(b);
}

// The driver needs an fd per import; at the limit it fails with
// CUDA_ERROR_OPERATING_SYSTEM, which vmmipc reports as the fd limit.
TEST_F(Buffers, ImportAtTheFdLimitSaysSoAndRollsBack) {
  vmmipc_buf_t b = Chunky(3, 2);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  vt::DriverCounts c0;
  bool counts = vt::GetDriverCounts(&c0);
  int before = vt::FdCount();
  vmmipc_buf_t imp = nullptr;
  vmmipc_result_t r;
  std::string msg;
  // The stand-in keeps one fd per imported chunk: with room for one, chunk
  // 1 imports and chunk 2 finds none. How many fds the real driver needs
  // per import is not known, so there the first import gets no room.
  const int room = vt::UsingStandin() ? 1 : 0;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  {
    FdLimit limit(room);
    r = vmmipc_import(d, nullptr, &imp);
    msg = vmmipc_last_error();
    vmmipc_last_error_info(&info);
  }
  if (!vt::UsingStandin() && r == VMMIPC_SUCCESS) {
    // Seen on H200 (driver 580, 2026-12-01): an import in a process that has
    // imported before opens no fd, so the limit is not reached here.
    vmmipc_buf_free(imp);
    vmmipc_desc_free(d);
    vmmipc_buf_free(b);
    GTEST_SKIP() << "the real driver imported without needing a new fd: the limit cannot be provoked here";
  }
  EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << msg;
  EXPECT_EQ(imp, nullptr);
  EXPECT_NE(msg.find("file descriptor limit (RLIMIT_NOFILE"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chunk " + std::to_string(room + 1) + " of 3"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("not a CUDA VMM allocation"), std::string::npos) << "the wrong hint: " << msg;
  EXPECT_NE(info.driver_error, 0) << "the driver's error is kept: " << msg;
  EXPECT_NE(msg.find("CUDA_ERROR_"), std::string::npos) << msg;
  EXPECT_EQ(vt::FdCount(), before);
  vt::DriverCounts c1;
  if (counts && vt::GetDriverCounts(&c1)) {
    EXPECT_EQ(c1.allocations, c0.allocations) << "the chunk imported before the failure is released";
    EXPECT_EQ(c1.mappings, c0.mappings);
    EXPECT_EQ(c1.reservations, c0.reservations);
  }
  ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));  // with fds to spare it works
  vmmipc_buf_free(imp);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

// The host identity is read once per process: with no fd to spare, an
// import still compares it (and refuses a descriptor from another host
// for that reason, not for the fd limit).
TEST_F(Buffers, HostIdentityNeedsNoFdOnceRead) {
  vmmipc_buf_t b = Chunky(1, 3);
  vmmipc_desc_t d = nullptr, foreign = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  std::vector<int> fds;
  auto bytes = Pack(d, &fds);
  bytes[32] ^= 0x5a;  // the host identity
  ASSERT_VMM_OK(vmmipc_desc_unpack(bytes.data(), bytes.size(), fds.data(), 1, &foreign));
  vmmipc_buf_t imp = nullptr;
  vmmipc_result_t r;
  std::string msg;
  {
    FdLimit limit(0);
    r = vmmipc_import(foreign, nullptr, &imp);
    msg = vmmipc_last_error();
  }
  EXPECT_EQ(r, VMMIPC_ERR_INVALID_DESC) << msg;
  EXPECT_NE(msg.find("another host"), std::string::npos) << msg;
  EXPECT_EQ(imp, nullptr);
  vmmipc_desc_free(foreign);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(Buffers, ImportInTheExportingProcessIsAnAliasThatOutlivesTheOriginal) {
  vmmipc_buf_t b = Chunky(2, 21);
  vmmipc_desc_t d = nullptr;
  vmmipc_buf_t alias = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  ASSERT_VMM_OK(vmmipc_import(d, nullptr, &alias));
  vmmipc_desc_free(d);
  void *p = nullptr, *q = nullptr;
  size_t n = 0, m = 0;
  vmmipc_buf_ptr(b, &p, &n);
  vmmipc_buf_ptr(alias, &q, &m);
  EXPECT_NE(p, q);
  EXPECT_EQ(n, m);
  EXPECT_TRUE(vt::CheckPattern(q, m, 21));
  vt::FillPattern(q, m, 22);  // a write through the alias shows in the original
  EXPECT_TRUE(vt::CheckPattern(p, n, 22));
  vmmipc_buf_free(b);
  EXPECT_TRUE(vt::CheckPattern(q, m, 22)) << "the alias keeps the memory alive";
  vmmipc_buf_free(alias);
}

TEST_F(Buffers, ImportedMemoryIsNotExportable) {
  vmmipc_buf_t b = Chunky(1, 30);
  vmmipc_desc_t d = nullptr, again = nullptr;
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));
  int before = vt::FdCount();
  EXPECT_EQ(vmmipc_export(imp, &again), VMMIPC_ERR_NOT_EXPORTABLE);
  std::string msg = vmmipc_last_error();
  EXPECT_NE(msg.find("forward the descriptor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("copy"), std::string::npos) << msg;
  EXPECT_EQ(vt::FdCount(), before);
  // Only the owner grows a buffer: an import is refused and left as it was.
  EXPECT_EQ(vmmipc_grow(imp, 2 * kGran), VMMIPC_ERR_INVALID_ARG);
  msg = vmmipc_last_error();
  EXPECT_NE(msg.find("the owner grows it"), std::string::npos) << msg;
  void *q = nullptr;
  size_t n = 0;
  int chunks = 0;
  vmmipc_buf_ptr(imp, &q, &n);
  vmmipc_buf_info(imp, &chunks, nullptr);
  EXPECT_EQ(n, kGran);
  EXPECT_EQ(chunks, 1);
  EXPECT_TRUE(vt::CheckPattern(q, kGran, 30));
  vmmipc_buf_free(imp);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(Buffers, AnInvisibleDeviceUuidIsAnErrorThatNamesIt) {
  vmmipc_buf_t b = Chunky(1, 1);
  vmmipc_desc_t d = nullptr;
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  vmmipc_uuid_t bogus;
  std::memset(bogus.bytes, 0xab, sizeof bogus.bytes);
  vmmipc_access_t a = {sizeof(vmmipc_access_t), VMMIPC_PROT_READWRITE, 1, &bogus};
  EXPECT_EQ(vmmipc_import(d, &a, &imp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(vmmipc_last_error()).find("GPU-abababab-abab"), std::string::npos) << vmmipc_last_error();
  // Naming the current device by UUID works.
  vmmipc_uuid_t mine;
  ASSERT_VMM_OK(vmmipc_device_uuid(dev_, &mine));
  a.devices = &mine;
  ASSERT_VMM_OK(vmmipc_import(d, &a, &imp));
  vmmipc_buf_free(imp);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

int WriteThrough(void *ptr) {
  vt::FillPattern(ptr, 64, 1);  // faults on a read-only mapping
  return 0;
}

TEST_F(Buffers, ReadOnlyImportRefusesWrites) {
  vmmipc_buf_t b = Chunky(1, 40);
  vmmipc_desc_t d = nullptr;
  vmmipc_buf_t ro = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  vmmipc_access_t a = {sizeof(vmmipc_access_t), VMMIPC_PROT_READ, 0, nullptr};
  ASSERT_VMM_OK(vmmipc_import(d, &a, &ro));
  void *q = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(ro, &q, &n);
  EXPECT_EQ(vt::AccessFlags(q, dev_), CU_MEM_ACCESS_FLAGS_PROT_READ);
  EXPECT_TRUE(vt::CheckPattern(q, n, 40));
  if (vt::UsingStandin()) {
    int st = vt::InChild([](void *p) { return WriteThrough(p); }, q);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) << "status " << st;
  }
  vmmipc_buf_free(ro);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

// ---- vmmipc_alloc_ex and vmmipc_granularity ----------------------------------

std::vector<size_t> ChunkSizes(vmmipc_buf_t b) {
  vmmipc_desc_t d = nullptr;
  std::vector<size_t> out;
  EXPECT_VMM_OK(vmmipc_export(b, &d));
  int n = 0;
  vmmipc_desc_info(d, nullptr, &n, nullptr);
  for (int i = 0; i < n; i++) {
    size_t cs = 0;
    EXPECT_VMM_OK(vmmipc_desc_chunk_size(d, i, &cs));
    out.push_back(cs);
  }
  vmmipc_desc_free(d);
  return out;
}

TEST_F(Buffers, AllocKeepsOneChunkAndAllocExDefaultsTo64MiBChunks) {
  vmmipc_buf_t one = nullptr, ex = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(130 * kMiB, &one));
  EXPECT_EQ(ChunkSizes(one), std::vector<size_t>({130 * kMiB}));
  ASSERT_VMM_OK(vmmipc_alloc_ex(130 * kMiB - 5, nullptr, &ex));  // NULL: the defaults
  EXPECT_EQ(ChunkSizes(ex), std::vector<size_t>({64 * kMiB, 64 * kMiB, 2 * kMiB}));
  void *p = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(ex, &p, &n);
  EXPECT_EQ(n, 130 * kMiB - 5);
  // Both ends of the range, across the chunk boundaries, are one mapping.
  char *c = static_cast<char *>(p);
  vt::FillPattern(c + 64 * kMiB - kGran, 2 * kGran, 3);
  EXPECT_TRUE(vt::CheckPattern(c + 64 * kMiB - kGran, 2 * kGran, 3));
  vt::FillPattern(c + 128 * kMiB - kGran, 2 * kGran - 5, 4);
  EXPECT_TRUE(vt::CheckPattern(c + 128 * kMiB - kGran, 2 * kGran - 5, 4));
  EXPECT_EQ(vt::AccessFlags(c + 100 * kMiB, dev_), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  vmmipc_buf_free(ex);
  vmmipc_buf_free(one);
}

TEST_F(Buffers, AllocExChunkSizeAlsoShapesGrowth) {
  vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
  props.chunk_size = 2 * kGran;
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc_ex(5 * kGran, &props, &b));
  EXPECT_EQ(ChunkSizes(b), std::vector<size_t>({2 * kGran, 2 * kGran, kGran}));
  void *p = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(b, &p, &n);
  vt::FillPattern(p, n, 44);
  for (int force_move = 0; force_move < 2; force_move++) {
    if (force_move) vmmipc__test_fail_at("inplace", 1);
    size_t want = n + 5 * kGran - 100;  // needs 5 more granules: chunks of 2, 2 and 1
    ASSERT_VMM_OK(vmmipc_grow(b, want));
    vmmipc_buf_ptr(b, &p, &n);
    EXPECT_EQ(n, want);
    EXPECT_TRUE(vt::CheckPattern(p, 5 * kGran, 44)) << (force_move ? "moved" : "in place");
  }
  EXPECT_EQ(ChunkSizes(b), std::vector<size_t>({2 * kGran, 2 * kGran, kGran, 2 * kGran, 2 * kGran, kGran, 2 * kGran,
                                                2 * kGran, kGran}));
  vt::FillPattern(p, n, 45);
  EXPECT_TRUE(vt::CheckPattern(p, n, 45));
  vmmipc_buf_free(b);
}

TEST_F(Buffers, AllocExOnADeviceNamedByUuid) {
  int count = 0;
  ASSERT_VMM_OK(vmmipc_device_count(&count));
  int other = (dev_ + 1) % count;
  vmmipc_uuid_t u;
  ASSERT_VMM_OK(vmmipc_device_uuid(other, &u));
  vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
  props.device = &u;
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc_ex(kGran, &props, &b));
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  vmmipc_uuid_t owner;
  vmmipc_desc_info(d, nullptr, nullptr, &owner);
  EXPECT_EQ(std::memcmp(owner.bytes, u.bytes, 16), 0) << "the chunks live on the named device";
  void *p = nullptr;
  vmmipc_buf_ptr(b, &p, nullptr);
  EXPECT_EQ(vt::AccessFlags(p, other), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(Buffers, AllocExValidatesItsProperties) {
  vmmipc_buf_t b = reinterpret_cast<vmmipc_buf_t>(1);
  struct Case {
    const char *name;
    vmmipc_alloc_props_t props;
    const char *needle;
  };
  vmmipc_uuid_t bogus;
  std::memset(bogus.bytes, 0xcd, sizeof bogus.bytes);
  const vmmipc_alloc_props_t init = VMMIPC_ALLOC_PROPS_INIT;
  std::vector<Case> cases;
  auto with = [&](const char *name, auto edit, const char *needle) {
    Case c{name, init, needle};
    edit(c.props);
    cases.push_back(c);
  };
  with("struct_size 0", [](auto &p) { p.struct_size = 0; }, "VMMIPC_ALLOC_PROPS_INIT");
  with("struct_size of 0.1", [](auto &p) { p.struct_size = offsetof(vmmipc_alloc_props_t, export_cache); },
       "struct_size");
  with("struct_size huge", [](auto &p) { p.struct_size = 1 << 20; }, "struct_size");
  with("chunk not a multiple", [](auto &p) { p.chunk_size = kGran + 4096; }, "not a multiple");
  with("unknown flag", [](auto &p) { p.flags = 0x6; }, "unknown allocation flags 0x6");
  with("export_cache 2", [](auto &p) { p.export_cache = 2; }, "export_cache");
  with("unknown device", [&](auto &p) { p.device = &bogus; }, "GPU-cdcdcdcd");
  for (const Case &c : cases) {
    b = reinterpret_cast<vmmipc_buf_t>(1);
    EXPECT_EQ(vmmipc_alloc_ex(kGran, &c.props, &b), VMMIPC_ERR_INVALID_ARG) << c.name;
    EXPECT_EQ(b, nullptr) << c.name;
    EXPECT_NE(std::string(vmmipc_last_error()).find(c.needle), std::string::npos)
        << c.name << ": " << vmmipc_last_error();
  }
  EXPECT_EQ(vmmipc_alloc_ex(kGran, &init, nullptr), VMMIPC_ERR_INVALID_ARG);
  // A larger struct from a newer header is accepted while its unknown tail
  // (padding included) is zero (test_contract: a non-zero one is refused).
  struct Bigger {
    vmmipc_alloc_props_t p;
    int future;
  } big;
  std::memset(&big, 0, sizeof big);
  big.p = init;
  big.p.struct_size = sizeof big;
  ASSERT_VMM_OK(vmmipc_alloc_ex(0, &big.p, &b));
  void *p = reinterpret_cast<void *>(1);
  vmmipc_buf_ptr(b, &p, nullptr);
  EXPECT_EQ(p, nullptr) << "size 0 is an empty buffer";
  vmmipc_buf_free(b);
}

TEST_F(Buffers, GpuDirectRdmaFlagReachesEveryChunk) {
  void *fn = nullptr;
  ASSERT_VMM_OK(vmmipc_driver_proc("cuPointerGetAttribute", 0, &fn));
  auto attr = reinterpret_cast<decltype(&::cuPointerGetAttribute)>(fn);
  vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
  props.flags = VMMIPC_ALLOC_GPU_DIRECT_RDMA;
  props.chunk_size = kGran;
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc_ex(2 * kGran, &props, &b));
  ASSERT_VMM_OK(vmmipc_grow(b, 3 * kGran));
  void *p = nullptr;
  vmmipc_buf_ptr(b, &p, nullptr);
  for (int i = 0; i < 3; i++) {
    int capable = -1;
    ASSERT_EQ(attr(&capable, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
                   reinterpret_cast<CUdeviceptr>(p) + i * kGran),
              CUDA_SUCCESS);
    EXPECT_EQ(capable, 1) << "chunk " << i + 1;
  }
  vmmipc_buf_free(b);
}

TEST_F(Buffers, GranularityOfEachDevice) {
  int count = 0;
  ASSERT_VMM_OK(vmmipc_device_count(&count));
  for (int i = 0; i < count; i++) {
    size_t min = 0, rec = 0;
    ASSERT_VMM_OK(vmmipc_granularity(i, &min, &rec));
    EXPECT_EQ(min, kGran) << "device " << i;  // both H200 and the stand-in
    EXPECT_EQ(rec, kGran) << "device " << i;
    min = 0;
    ASSERT_VMM_OK(vmmipc_granularity(i, &min, nullptr));
    EXPECT_EQ(min, kGran);
  }
  size_t g = 0;
  EXPECT_EQ(vmmipc_granularity(count, &g, &g), VMMIPC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(vmmipc_last_error()).find("out of range"), std::string::npos);
  EXPECT_EQ(vmmipc_granularity(0, nullptr, nullptr), VMMIPC_ERR_INVALID_ARG);
}

TEST_F(Buffers, NullArgumentsAreInvalid) {
  EXPECT_EQ(vmmipc_alloc(1, nullptr), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_export(nullptr, nullptr), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_import(nullptr, nullptr, nullptr), VMMIPC_ERR_INVALID_ARG);
  // The *_free calls accept NULL, as free() does.
  EXPECT_EQ(vmmipc_buf_free(nullptr), VMMIPC_SUCCESS);
  EXPECT_EQ(vmmipc_desc_free(nullptr), VMMIPC_SUCCESS);
  EXPECT_EQ(vmmipc_win_free(nullptr), VMMIPC_SUCCESS);
  EXPECT_EQ(vmmipc_comm_destroy(nullptr), VMMIPC_SUCCESS);
  vmmipc_access_t bad = {sizeof(vmmipc_access_t), static_cast<vmmipc_prot_t>(7), 0, nullptr};
  vmmipc_buf_t b = Chunky(1, 1), imp = nullptr;
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  EXPECT_EQ(vmmipc_import(d, &bad, &imp), VMMIPC_ERR_INVALID_ARG);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
  EXPECT_STRNE(vmmipc_strerror(VMMIPC_ERR_TIMEOUT), vmmipc_strerror(VMMIPC_ERR_PEER));
}

}  // namespace
