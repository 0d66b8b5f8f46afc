// The buffer-level caches of issue 11, in one process: the export cache
// (one exported fd per chunk kept, duplicates handed out), the buffer
// identity that descriptors carry, and the mapping cache, which is tested
// directly by importing this process's own exports (the stand-in and the
// real driver both allow that).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "coll/msg.h"
#include "common/testhooks.h"
#include "harness/bufs.h"
#include "desc/desc.h"
#include "vmm/mapcache.h"

namespace {

using vt::kGran;

uint32_t Get32(const std::vector<unsigned char> &b, size_t off) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= uint32_t(b[off + i]) << (8 * i);
  return v;
}
uint64_t Get64(const std::vector<unsigned char> &b, size_t off) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= uint64_t(b[off + i]) << (8 * i);
  return v;
}

std::vector<unsigned char> Pack(vmmipc_desc_t d, std::vector<int> *fds = nullptr) {
  size_t nb = 0;
  int nf = 0;
  EXPECT_VMM_OK(vmmipc_desc_pack(d, nullptr, &nb, nullptr, &nf));
  std::vector<unsigned char> bytes(nb);
  std::vector<int> f(nf, -1);
  EXPECT_VMM_OK(vmmipc_desc_pack(d, bytes.data(), &nb, f.data(), &nf));
  if (fds) *fds = f;
  return bytes;
}

// The identity fields of a packed descriptor (docs/wire-format.md).
struct Identity {
  uint32_t pid;
  uint64_t nonce, serial, generation;
};
Identity IdentityOf(vmmipc_desc_t d) {
  auto b = Pack(d);
  return {Get32(b, 68), Get64(b, 72), Get64(b, 80), Get64(b, 88)};
}

long Cached() {
  long n = -1;
  EXPECT_VMM_OK(vmmipc_export_cache_fds(&n));
  return n;
}

class Caches : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = vt::UseRankDevice();
    ASSERT_GE(dev_, 0);
    const char *env = std::getenv("VMMIPC_EXPORT_CACHE");
    had_env_ = env != nullptr;
    if (env) env_ = env;
    base_ = new vt::Baseline();
    fds0_ = vt::FdCount();
    cached0_ = Cached();
  }
  void TearDown() override {
    vmmipc__test_fail_at(nullptr, 0);
    if (had_env_) setenv("VMMIPC_EXPORT_CACHE", env_.c_str(), 1);
    else unsetenv("VMMIPC_EXPORT_CACHE");
    // Every buffer is freed: the caches hold nothing more than before.
    EXPECT_EQ(Cached(), cached0_);
    EXPECT_EQ(vt::FdCount(), fds0_) << "fds leaked";
    base_->Expect("end of test");
    delete base_;
  }
  // `chunks` chunks of one granule, filled with `seed`; export cache as
  // vmmipc_alloc_props_t.export_cache says.
  vmmipc_buf_t Buf(int chunks, unsigned seed, int export_cache = 1) {
    vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
    props.chunk_size = kGran;
    props.export_cache = export_cache;
    vmmipc_buf_t b = nullptr;
    EXPECT_VMM_OK(vmmipc_alloc_ex(chunks * kGran, &props, &b));
    void *p = nullptr;
    size_t n = 0;
    if (b) vmmipc_buf_ptr(b, &p, &n);
    if (p) vt::FillPattern(p, n, seed);
    return b;
  }
  int dev_ = -1, fds0_ = 0;
  long cached0_ = 0;
  bool had_env_ = false;
  std::string env_;
  vt::Baseline *base_ = nullptr;
};

// ---- export cache --------------------------------------------------------------

TEST_F(Caches, ExportAfterExportHandsOutWorkingDuplicates) {
  vmmipc_buf_t b = Buf(3, 11);
  const int base = vt::FdCount();
  vmmipc_desc_t d1 = nullptr, d2 = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d1));
  EXPECT_EQ(vt::FdCount(), base + 3 + 3) << "three kept, three handed out";
  EXPECT_EQ(Cached(), cached0_ + 3);
  ASSERT_VMM_OK(vmmipc_export(b, &d2));
  EXPECT_EQ(vt::FdCount(), base + 3 + 6) << "the second export only duplicates";
  EXPECT_EQ(Cached(), cached0_ + 3);
  std::vector<int> f1, f2;
  Pack(d1, &f1);
  Pack(d2, &f2);
  for (int x : f1)
    for (int y : f2) EXPECT_NE(x, y) << "each descriptor owns its own fds";
  for (int fd : f1) EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "close-on-exec";
  // Both descriptors import, each on its own, after the other is gone.
  for (vmmipc_desc_t *d : {&d1, &d2}) {
    vmmipc_buf_t imp = nullptr;
    ASSERT_VMM_OK(vmmipc_import(*d, nullptr, &imp));
    ASSERT_VMM_OK(vmmipc_desc_free(*d));
    *d = nullptr;
    void *q = nullptr;
    size_t n = 0;
    vmmipc_buf_ptr(imp, &q, &n);
    EXPECT_TRUE(vt::CheckPattern(q, n, 11));
    vmmipc_buf_free(imp);
  }
  EXPECT_EQ(vt::FdCount(), base + 3) << "only the cached fds stay";
  ASSERT_VMM_OK(vmmipc_buf_free(b));
  EXPECT_EQ(vt::FdCount(), fds0_) << "freeing the buffer closes them (and its memory)";
  EXPECT_EQ(Cached(), cached0_);
}

TEST_F(Caches, AGrownBufferCachesTheNewChunkToo) {
  vmmipc_buf_t b = Buf(2, 12);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  vmmipc_desc_free(d);
  EXPECT_EQ(Cached(), cached0_ + 2);
  for (int force_move = 0; force_move < 2; force_move++) {
    size_t have = 0;
    vmmipc_buf_ptr(b, nullptr, &have);
    if (force_move) vmmipc__test_fail_at("inplace", 1);
    ASSERT_VMM_OK(vmmipc_grow(b, have + kGran));
    ASSERT_VMM_OK(vmmipc_export(b, &d));
    EXPECT_EQ(Cached(), cached0_ + 3 + force_move) << "one more, for the new chunk";
    vmmipc_buf_t imp = nullptr;
    ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));
    void *q = nullptr;
    vmmipc_buf_ptr(imp, &q, nullptr);
    EXPECT_TRUE(vt::CheckPattern(q, 2 * kGran, 12)) << "the cached fds still name the old chunks";
    vmmipc_buf_free(imp);
    vmmipc_desc_free(d);
  }
  ASSERT_VMM_OK(vmmipc_buf_free(b));
}

// Two comms on two threads may export one buffer at once: the cache is
// filled once and every descriptor holds working duplicates.
TEST_F(Caches, ConcurrentExportsOfOneBufferShareOneCachedFdPerChunk) {
  vmmipc_buf_t b = Buf(4, 18);
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; t++)
    th.emplace_back([&, t] {
      for (int r = 0; r < kRounds; r++) {
        vmmipc_desc_t d = nullptr;
        if (vmmipc_export(b, &d) != VMMIPC_SUCCESS) {
          bad[t]++;
          continue;
        }
        int n = 0;
        vmmipc_desc_info(d, nullptr, &n, nullptr);
        std::vector<int> fds;
        Pack(d, &fds);
        for (int fd : fds) bad[t] += fcntl(fd, F_GETFD) < 0;
        bad[t] += n != 4;
        vmmipc_desc_free(d);
      }
    });
  for (auto &x : th) x.join();
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_EQ(Cached(), cached0_ + 4) << "one cached fd per chunk, whichever thread exported first";
  vmmipc_desc_t d = nullptr;
  vmmipc_buf_t imp = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));
  void *q = nullptr;
  vmmipc_buf_ptr(imp, &q, nullptr);
  EXPECT_TRUE(vt::CheckPattern(q, 4 * kGran, 18));
  vmmipc_buf_free(imp);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

// Room for exactly `room` more fds while it lives.
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

TEST_F(Caches, FdLimitErrorsCountTheCachedFds) {
  vmmipc_buf_t held = Buf(3, 13), b = Buf(2, 14);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(held, &d));
  vmmipc_desc_free(d);
  const int before = vt::FdCount();
  vmmipc_result_t r;
  std::string msg;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  {
    FdLimit limit(0);
    r = vmmipc_export(b, &d);
    msg = vmmipc_last_error();
    vmmipc_last_error_info(&info);
  }
  EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << msg;
  EXPECT_EQ(d, nullptr);
  EXPECT_NE(msg.find("chunk 1 of 2: cuMemExportToShareableHandle failed (CUDA_ERROR_"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at the process's file descriptor limit"), std::string::npos) << msg;
  EXPECT_NE(info.driver_error, 0) << "the driver's error is kept: " << msg;
  EXPECT_NE(msg.find("3 fds are held by the export cache"), std::string::npos) << msg;
  EXPECT_NE(msg.find("VMMIPC_EXPORT_CACHE=0"), std::string::npos) << msg;
  EXPECT_EQ(vt::FdCount(), before);
  EXPECT_EQ(Cached(), cached0_ + 3);
  {
    FdLimit limit(1);  // chunk 1's fd is kept, its duplicate finds no room
    r = vmmipc_export(b, &d);
    msg = vmmipc_last_error();
  }
  EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << msg;
  EXPECT_NE(msg.find("chunk 1 of 2: duplicating the cached fd hit the file descriptor limit"), std::string::npos)
      << msg;
  // The fd this call cached and closed again is not counted as held.
  EXPECT_NE(msg.find("; 3 fds are held by the export cache"), std::string::npos) << msg;
  EXPECT_EQ(vt::FdCount(), before) << "the fd kept in this call is closed again";
  EXPECT_EQ(Cached(), cached0_ + 3);
  vmmipc_buf_free(b);
  vmmipc_buf_free(held);
}

// The mapping caches' imported chunks are named in fd-limit messages too:
// on the stand-in each holds an fd.
TEST_F(Caches, FdLimitErrorsCountTheMappingCachesChunks) {
  vmmipc_buf_t src = Buf(2, 15), b = Buf(1, 16);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(src, &d));
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t v = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_import(c, d, nullptr, nullptr, &v, nullptr));
  ASSERT_VMM_OK(vmmipc_buf_free(v));  // idle in the cache, its 2 chunks held
  vmmipc_desc_free(d);
  d = nullptr;
  vmmipc_result_t r;
  std::string msg;
  {
    FdLimit limit(0);
    r = vmmipc_export(b, &d);
    msg = vmmipc_last_error();
  }
  EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << msg;
  EXPECT_NE(msg.find("the mapping caches hold 2 imported chunk(s)"), std::string::npos) << msg;
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  {
    FdLimit limit(0);
    r = vmmipc_export(b, &d);
    msg = vmmipc_last_error();
  }
  EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << msg;
  EXPECT_EQ(msg.find("mapping caches"), std::string::npos) << "the destroyed cache holds nothing: " << msg;
  vmmipc_buf_free(b);
  vmmipc_buf_free(src);
}

TEST_F(Caches, TheSwitchesTurnTheExportCacheOff) {
  struct Case {
    const char *env;  // nullptr: unset
    int props;        // props.export_cache; -2: plain vmmipc_alloc
    bool on;
  };
  const Case cases[] = {{nullptr, -2, true},  {nullptr, -1, true}, {"", -1, true},   {"1", -2, true},
                        {"0", -2, false},     {"0", -1, false},    {"0", 1, true},   {"1", 0, false},
                        {nullptr, 0, false}};
  for (const Case &c : cases) {
    std::string what = std::string("VMMIPC_EXPORT_CACHE=") + (c.env ? c.env : "(unset)") +
                       " export_cache=" + std::to_string(c.props);
    if (c.env) setenv("VMMIPC_EXPORT_CACHE", c.env, 1);
    else unsetenv("VMMIPC_EXPORT_CACHE");
    vmmipc_buf_t b = nullptr;
    if (c.props == -2) {
      ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
    } else {
      vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
      props.export_cache = c.props;
      ASSERT_VMM_OK(vmmipc_alloc_ex(kGran, &props, &b));
    }
    const int base = vt::FdCount();
    for (int i = 1; i <= 3; i++) {
      vmmipc_desc_t d = nullptr;
      ASSERT_EQ(vmmipc_export(b, &d), VMMIPC_SUCCESS) << what << ": " << vmmipc_last_error();
      EXPECT_EQ(vt::FdCount(), base + 1 + (c.on ? 1 : 0)) << what << ", export " << i;
      EXPECT_EQ(Cached(), cached0_ + (c.on ? 1 : 0)) << what;
      vmmipc_desc_free(d);
      EXPECT_EQ(vt::FdCount(), base + (c.on ? 1 : 0)) << what << ": back to the baseline after every call";
    }
    vmmipc_buf_free(b);
  }
  setenv("VMMIPC_EXPORT_CACHE", "yes", 1);
  vmmipc_buf_t b = nullptr;
  EXPECT_EQ(vmmipc_alloc(kGran, &b), VMMIPC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(vmmipc_last_error()).find("VMMIPC_EXPORT_CACHE=\"yes\""), std::string::npos)
      << vmmipc_last_error();
  EXPECT_EQ(b, nullptr);
}

// ---- buffer identity -------------------------------------------------------------

TEST_F(Caches, DescriptorsCarryTheBufferIdentity) {
  vmmipc_buf_t a = Buf(1, 15), b = Buf(1, 16);
  vmmipc_desc_t a1 = nullptr, a2 = nullptr, b1 = nullptr, a3 = nullptr, w1 = nullptr;
  ASSERT_VMM_OK(vmmipc_export(a, &a1));
  ASSERT_VMM_OK(vmmipc_export(a, &a2));
  ASSERT_VMM_OK(vmmipc_export(b, &b1));
  Identity ia1 = IdentityOf(a1), ia2 = IdentityOf(a2), ib1 = IdentityOf(b1);
  EXPECT_EQ(ia1.pid, static_cast<uint32_t>(getpid()));
  EXPECT_NE(ia1.nonce, 0u);
  EXPECT_EQ(ia1.nonce, ib1.nonce) << "one process, one nonce";
  EXPECT_NE(ia1.serial, 0u);
  EXPECT_EQ(ia1.serial, ia2.serial);
  EXPECT_EQ(ia1.generation, ia2.generation);
  EXPECT_NE(ia1.serial, ib1.serial);
  ASSERT_VMM_OK(vmmipc_grow(a, 2 * kGran));
  ASSERT_VMM_OK(vmmipc_export(a, &a3));
  Identity ia3 = IdentityOf(a3);
  EXPECT_EQ(ia3.serial, ia1.serial);
  EXPECT_NE(ia3.generation, ia1.generation) << "grow changes the generation";
  // A wrap of the same memory is a buffer of its own.
  void *p = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(a, &p, &n);
  vmmipc_buf_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_buf_wrap(p, n, &w));
  ASSERT_VMM_OK(vmmipc_export(w, &w1));
  Identity iw = IdentityOf(w1);
  EXPECT_NE(iw.serial, ia1.serial);
  EXPECT_NE(iw.serial, ib1.serial);
  // Serials are never reused: a buffer made after freeing others is new.
  std::vector<uint64_t> seen = {ia1.serial, ib1.serial, iw.serial};
  for (vmmipc_desc_t d : {a1, a2, a3, b1, w1}) vmmipc_desc_free(d);
  vmmipc_buf_free(w);
  vmmipc_buf_free(b);
  vmmipc_buf_t c = Buf(1, 17);
  vmmipc_desc_t c1 = nullptr;
  ASSERT_VMM_OK(vmmipc_export(c, &c1));
  uint64_t sc = IdentityOf(c1).serial;
  for (uint64_t s : seen) EXPECT_NE(sc, s);
  vmmipc_desc_free(c1);
  vmmipc_buf_free(c);
  vmmipc_buf_free(a);
}

// ---- mapping cache ---------------------------------------------------------------

class MapCache : public Caches {
 protected:
  vmmipc__mapcache_stats_t Stats(vmmipc__mapcache_t *c) {
    vmmipc__mapcache_stats_t s;
    vmmipc__mapcache_stats(c, &s);
    return s;
  }
  // Mappings the stand-in holds now (-1 on the real driver).
  long Mappings() {
    vt::DriverCounts c;
    return vt::GetDriverCounts(&c) ? c.mappings : -1;
  }
  vmmipc_buf_t Import(vmmipc__mapcache_t *c, vmmipc_desc_t d, int *hit, const vmmipc_access_t *a = nullptr) {
    vmmipc_buf_t out = nullptr;
    EXPECT_VMM_OK(vmmipc__mapcache_import(c, d, a, nullptr, &out, hit));
    return out;
  }
  void *Ptr(vmmipc_buf_t b) {
    void *p = nullptr;
    vmmipc_buf_ptr(b, &p, nullptr);
    return p;
  }
};

TEST_F(MapCache, AHitSharesTheMappingWithoutMappingAgain) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t b = Buf(3, 21);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  long m0 = Mappings();
  int hit = -1;
  vmmipc_timing_t t = VMMIPC_TIMING_INIT;
  vmmipc_buf_t v1 = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_import(c, d, nullptr, &t, &v1, &hit));
  EXPECT_EQ(hit, 0);
  EXPECT_GT(t.import_s + t.map_s + t.access_s, 0.0) << "a miss reports its phases";
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0 + 3);
  }
  const int fds = vt::FdCount();
  vt::DriverCounts before;
  bool counts = vt::GetDriverCounts(&before);
  vmmipc_buf_t v2 = Import(c, d, &hit);
  EXPECT_EQ(hit, 1);
  EXPECT_EQ(Ptr(v2), Ptr(v1)) << "the same mapping";
  EXPECT_EQ(vt::FdCount(), fds);
  vt::DriverCounts after;
  if (counts && vt::GetDriverCounts(&after)) {
    EXPECT_EQ(after.allocations, before.allocations) << "no import";
    EXPECT_EQ(after.mappings, before.mappings) << "no map";
    EXPECT_EQ(after.reservations, before.reservations) << "no reservation";
  }
  size_t n = 0;
  int chunks = 0, imported = 0;
  vmmipc_buf_ptr(v2, nullptr, &n);
  vmmipc_buf_info(v2, &chunks, &imported);
  EXPECT_EQ(n, 3 * kGran);
  EXPECT_EQ(chunks, 3);
  EXPECT_EQ(imported, 1);
  EXPECT_TRUE(vt::CheckPattern(Ptr(v2), n, 21));
  ASSERT_VMM_OK(vmmipc_buf_free(v1));
  EXPECT_TRUE(vt::CheckPattern(Ptr(v2), n, 21)) << "the other view keeps the mapping";
  ASSERT_VMM_OK(vmmipc_buf_free(v2));
  auto s = Stats(c);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.idle, 1);
  EXPECT_EQ(s.entries, 1);
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0 + 3) << "an idle entry keeps its mapping";
  }
  vmmipc_buf_t v3 = Import(c, d, &hit);  // served from the idle entry
  EXPECT_EQ(hit, 1);
  EXPECT_EQ(Stats(c).idle, 0);
  vmmipc_buf_free(v3);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0) << "destroy releases idle entries";
  }
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(MapCache, ViewsAreImportedBuffersAndNeverExported) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(2, &c));
  vmmipc_buf_t b = Buf(1, 22);
  vmmipc_desc_t d = nullptr, again = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  int hit = 0;
  vmmipc_buf_t v = Import(c, d, &hit);
  EXPECT_EQ(vmmipc_export(v, &again), VMMIPC_ERR_NOT_EXPORTABLE);
  EXPECT_EQ(vmmipc_grow(v, 2 * kGran), VMMIPC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(vmmipc_last_error()).find("the owner grows it"), std::string::npos);
  vmmipc_buf_free(v);
  vmmipc__mapcache_destroy(c);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(MapCache, AGrownBufferIsNeverServedFromAStaleEntry) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(8, &c));
  vmmipc_buf_t b = Buf(1, 23);
  ASSERT_VMM_OK(vmmipc_grow(b, 2 * kGran - 4096));  // two chunks, the second not full
  void *p = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(b, &p, &n);
  vt::FillPattern(p, n, 24);
  int hit = -1;
  std::vector<size_t> sizes = {2 * kGran - 4096, 2 * kGran, 5 * kGran};
  // Grown within the last chunk, then by new chunks (in place or moved).
  for (size_t i = 0; i < sizes.size(); i++) {
    if (i > 0) {
      if (i == 2) vmmipc__test_fail_at("inplace", 1);
      ASSERT_VMM_OK(vmmipc_grow(b, sizes[i]));
      vmmipc_buf_ptr(b, &p, &n);
      vt::FillPattern(p, n, 24 + unsigned(i));
    }
    vmmipc_desc_t d = nullptr;
    ASSERT_VMM_OK(vmmipc_export(b, &d));
    vmmipc_buf_t v = Import(c, d, &hit);
    EXPECT_EQ(hit, 0) << "size " << sizes[i] << ": a new generation is a miss";
    size_t vn = 0;
    vmmipc_buf_ptr(v, nullptr, &vn);
    EXPECT_EQ(vn, sizes[i]);
    EXPECT_TRUE(vt::CheckPattern(Ptr(v), vn, 24 + unsigned(i))) << "size " << sizes[i];
    vmmipc_buf_free(v);
    // The same generation again is a hit.
    v = Import(c, d, &hit);
    EXPECT_EQ(hit, 1);
    vmmipc_buf_free(v);
    vmmipc_desc_free(d);
  }
  auto s = Stats(c);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.idle, 3) << "the stale entries age out like any idle one";
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_buf_free(b);
}

TEST_F(MapCache, TheCacheKeepsAtMostMaxIdleIdleEntries) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(2, &c));
  std::vector<vmmipc_buf_t> bufs;
  std::vector<vmmipc_desc_t> descs;
  for (int i = 0; i < 4; i++) {
    bufs.push_back(Buf(1, 30 + i));
    descs.push_back(nullptr);
    ASSERT_VMM_OK(vmmipc_export(bufs.back(), &descs.back()));
  }
  long m0 = Mappings();
  int hit = -1;
  std::vector<vmmipc_buf_t> views;
  for (int i = 0; i < 4; i++) views.push_back(Import(c, descs[i], &hit));
  EXPECT_EQ(Stats(c).entries, 4) << "entries in use are not bounded";
  for (int i = 0; i < 4; i++) {
    ASSERT_VMM_OK(vmmipc_buf_free(views[i]));
    auto s = Stats(c);
    EXPECT_EQ(s.idle, i < 2 ? i + 1 : 2) << "after freeing view " << i;
    EXPECT_EQ(s.evictions, i < 2 ? 0u : uint64_t(i - 1)) << "after freeing view " << i;
  }
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0 + 2) << "evicted entries released their mappings";
  }
  // The least recently used went first.
  vmmipc_buf_t v = Import(c, descs[3], &hit);
  EXPECT_EQ(hit, 1);
  vmmipc_buf_free(v);
  v = Import(c, descs[0], &hit);
  EXPECT_EQ(hit, 0) << "evicted";
  EXPECT_TRUE(vt::CheckPattern(Ptr(v), kGran, 30));
  vmmipc_buf_free(v);
  EXPECT_EQ(Stats(c).evictions, 3u);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0);
  }
  for (int i = 0; i < 4; i++) {
    vmmipc_desc_free(descs[i]);
    vmmipc_buf_free(bufs[i]);
  }
}

TEST_F(MapCache, MaxIdleZeroCachesNothing) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(0, &c));
  vmmipc_buf_t b = Buf(2, 40);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  long m0 = Mappings();
  int hit = -1;
  vmmipc_buf_t v1 = Import(c, d, &hit);
  EXPECT_EQ(hit, 0);
  vmmipc_buf_t v2 = Import(c, d, &hit);
  EXPECT_EQ(hit, 0);
  EXPECT_NE(Ptr(v1), Ptr(v2)) << "two mappings";
  EXPECT_TRUE(vt::CheckPattern(Ptr(v2), 2 * kGran, 40));
  vmmipc_buf_free(v1);
  vmmipc_buf_free(v2);
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0) << "released with their buffers";
  }
  auto s = Stats(c);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.entries, 0);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(MapCache, AccessIsPartOfTheKey) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t b = Buf(1, 41);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  vmmipc_uuid_t mine;
  ASSERT_VMM_OK(vmmipc_device_uuid(dev_, &mine));
  vmmipc_access_t rw = VMMIPC_ACCESS_DEFAULT, ro = {sizeof(vmmipc_access_t), VMMIPC_PROT_READ, 0, nullptr};
  vmmipc_access_t named = {sizeof(vmmipc_access_t), VMMIPC_PROT_READWRITE, 1, &mine};
  int hit = -1;
  vmmipc_buf_t vrw = Import(c, d, &hit, &rw);
  EXPECT_EQ(hit, 0);
  vmmipc_buf_t vro = Import(c, d, &hit, &ro);
  EXPECT_EQ(hit, 0) << "read-only is another mapping";
  EXPECT_EQ(vt::AccessFlags(Ptr(vro), dev_), CU_MEM_ACCESS_FLAGS_PROT_READ);
  EXPECT_EQ(vt::AccessFlags(Ptr(vrw), dev_), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  vmmipc_buf_t vnamed = Import(c, d, &hit, &named);
  EXPECT_EQ(hit, 1) << "the current device named by UUID resolves to the same access";
  EXPECT_EQ(Ptr(vnamed), Ptr(vrw));
  for (vmmipc_buf_t v : {vrw, vro, vnamed}) vmmipc_buf_free(v);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(MapCache, DescriptorsWithoutIdentityAreNotCached) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t b = Buf(1, 42);
  vmmipc_desc_t d = nullptr, anon = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  std::vector<int> fds;
  auto bytes = Pack(d, &fds);
  std::fill(bytes.begin() + 68, bytes.begin() + 96, 0);  // pid, nonce, serial, generation
  ASSERT_VMM_OK(vmmipc_desc_unpack(bytes.data(), bytes.size(), fds.data(), 1, &anon));
  int hit = -1;
  for (int i = 0; i < 2; i++) {
    vmmipc_buf_t v = Import(c, anon, &hit);
    EXPECT_EQ(hit, 0);
    EXPECT_TRUE(vt::CheckPattern(Ptr(v), kGran, 42));
    vmmipc_buf_free(v);
  }
  EXPECT_EQ(Stats(c).entries, 0);
  // A descriptor without fds (what a collective sends a rank that holds the
  // buffer, issue 21) is served by the entry of its identity; without an
  // entry it is refused (ADescriptorWithoutFdsIsServedOnlyByAnEntry).
  vmmipc_buf_t v = Import(c, d, &hit);
  vmmipc_buf_free(v);
  EXPECT_EQ(Stats(c).entries, 1);
  auto good = Pack(d);
  vmmipc_desc_t nofds = nullptr;
  ASSERT_VMM_OK(vmmipc__desc_decode(good.data(), good.size(), &nofds));  // fds all -1
  v = Import(c, nofds, &hit);
  EXPECT_EQ(hit, 1);
  EXPECT_TRUE(vt::CheckPattern(Ptr(v), kGran, 42));
  vmmipc_buf_free(v);
  // ... but never with an identity taken away: such a descriptor is not cached.
  vmmipc_desc_t anon_nofds = nullptr;
  std::fill(good.begin() + 68, good.begin() + 96, 0);
  ASSERT_VMM_OK(vmmipc__desc_decode(good.data(), good.size(), &anon_nofds));
  v = nullptr;
  EXPECT_EQ(vmmipc__mapcache_import(c, anon_nofds, nullptr, nullptr, &v, &hit), VMMIPC_ERR_INVALID_DESC);
  EXPECT_EQ(v, nullptr);
  EXPECT_EQ(hit, 0);
  vmmipc_desc_free(anon_nofds);
  vmmipc_desc_free(nofds);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_desc_free(anon);
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

TEST_F(MapCache, ViewsOutliveTheCache) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t b = Buf(2, 43);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  long m0 = Mappings();
  int hit = -1;
  vmmipc_buf_t v1 = Import(c, d, &hit), v2 = Import(c, d, &hit);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  EXPECT_TRUE(vt::CheckPattern(Ptr(v1), 2 * kGran, 43));
  ASSERT_VMM_OK(vmmipc_buf_free(v1));
  EXPECT_TRUE(vt::CheckPattern(Ptr(v2), 2 * kGran, 43));
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0 + 2);
  }
  ASSERT_VMM_OK(vmmipc_buf_free(v2));  // the last view releases the entry and the cache
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0);
  }
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

// The owner frees its buffer while an importer caches it: the importer's
// entry keeps the memory (and its data) until the entry goes.
TEST_F(MapCache, AnEntryKeepsTheMemoryOfAFreedOwnerBuffer) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t b = Buf(1, 44);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  int hit = -1;
  vmmipc_buf_t v = Import(c, d, &hit);
  vmmipc_buf_free(v);  // idle now
  ASSERT_VMM_OK(vmmipc_buf_free(b));
  v = Import(c, d, &hit);
  EXPECT_EQ(hit, 1);
  EXPECT_TRUE(vt::CheckPattern(Ptr(v), kGran, 44));
  vmmipc_buf_free(v);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_desc_free(d);
}

// Both caches on: 1000 export/map/unmap cycles keep the fd count and the
// driver's objects flat.
TEST_F(MapCache, ThousandCyclesWithBothCachesStayFlat) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t b = Buf(3, 45);
  int fds = -1;
  vt::DriverCounts first;
  bool counts = false;
  for (int i = 0; i < 1000; i++) {
    vmmipc_desc_t d = nullptr;
    ASSERT_VMM_OK(vmmipc_export(b, &d));
    int hit = -1;
    vmmipc_buf_t v = nullptr;
    ASSERT_VMM_OK(vmmipc__mapcache_import(c, d, nullptr, nullptr, &v, &hit));
    ASSERT_EQ(hit, i > 0) << "cycle " << i;
    ASSERT_VMM_OK(vmmipc_desc_free(d));
    ASSERT_VMM_OK(vmmipc_buf_free(v));
    if (i == 0) {
      fds = vt::FdCount();
      counts = vt::GetDriverCounts(&first);
    } else {
      ASSERT_EQ(vt::FdCount(), fds) << "cycle " << i;
    }
  }
  vt::DriverCounts last;
  if (counts && vt::GetDriverCounts(&last)) {
    EXPECT_EQ(last.allocations, first.allocations);
    EXPECT_EQ(last.mappings, first.mappings);
    EXPECT_EQ(last.reservations, first.reservations);
  }
  auto s = Stats(c);
  EXPECT_EQ(s.hits, 999u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(Cached(), cached0_ + 3);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_buf_free(b);
}

// Views imported on some threads and freed on others, over a few buffers
// and a small bound, while the cache evicts: the counters add up and
// nothing is left behind.
TEST_F(MapCache, ThreadsImportAndFreeViewsConcurrently) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(2, &c));
  constexpr int kBufs = 3, kThreads = 4, kRounds = 100;
  std::vector<vmmipc_buf_t> bufs;
  std::vector<vmmipc_desc_t> descs(kBufs, nullptr);
  for (int i = 0; i < kBufs; i++) {
    bufs.push_back(Buf(1, 50 + i));
    ASSERT_VMM_OK(vmmipc_export(bufs[i], &descs[i]));
  }
  std::vector<std::vector<vmmipc_buf_t>> got(kThreads);
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; t++)
    th.emplace_back([&, t] {
      vmmipc_set_device(dev_);  // the current context is per thread
      for (int r = 0; r < kRounds; r++) {
        int i = (t + r) % kBufs;
        vmmipc_buf_t v = nullptr;
        if (vmmipc__mapcache_import(c, descs[i], nullptr, nullptr, &v, nullptr) != VMMIPC_SUCCESS) {
          bad[t]++;
          continue;
        }
        const unsigned char *p = static_cast<const unsigned char *>(Ptr(v));
        if (vt::UsingStandin() && p[100] != vt::PatternByte(50 + i, 100)) bad[t]++;
        got[t].push_back(v);
        // Free a view another thread imported, now and then.
        if (r % 3 == 2) {
          vmmipc_buf_free(got[t].front());
          got[t].erase(got[t].begin());
        }
      }
    });
  for (auto &x : th) x.join();
  // The rest are freed from threads other than their importer.
  th.clear();
  for (int t = 0; t < kThreads; t++)
    th.emplace_back([&, t] {
      for (vmmipc_buf_t v : got[(t + 1) % kThreads])
        if (vmmipc_buf_free(v) != VMMIPC_SUCCESS) bad[t]++;
    });
  for (auto &x : th) x.join();
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(bad[t], 0) << "thread " << t;
  auto s = Stats(c);
  EXPECT_EQ(s.hits + s.misses, uint64_t(kThreads * kRounds));
  EXPECT_LE(s.idle, 2);
  EXPECT_EQ(s.entries, s.idle) << "no view is left";
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  for (int i = 0; i < kBufs; i++) {
    vmmipc_desc_free(descs[i]);
    vmmipc_buf_free(bufs[i]);
  }
}

// ---- issue 21: bytes, trim, owner notices, hits without fds ----------------------

uint32_t Pid() { return static_cast<uint32_t>(getpid()); }

TEST_F(MapCache, TheByteBoundEvictsLeastRecentlyUsedFirst) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(16, &c));
  vmmipc__mapcache_set_max_bytes(c, 2 * kGran);
  std::vector<vmmipc_buf_t> bufs;
  std::vector<vmmipc_desc_t> descs;
  for (int i = 0; i < 4; i++) {
    bufs.push_back(Buf(i < 3 ? 1 : 3, 50 + i));
    descs.push_back(nullptr);
    ASSERT_VMM_OK(vmmipc_export(bufs.back(), &descs.back()));
  }
  long m0 = Mappings();
  int hit = -1;
  std::vector<vmmipc_buf_t> views;
  for (int i = 0; i < 3; i++) views.push_back(Import(c, descs[i], &hit));
  EXPECT_EQ(Stats(c).bytes, 3 * kGran) << "entries in use are not bounded";
  for (int i = 0; i < 3; i++) ASSERT_VMM_OK(vmmipc_buf_free(views[i]));
  auto s = Stats(c);
  EXPECT_EQ(s.idle, 2);
  EXPECT_EQ(s.idle_bytes, 2 * kGran);
  EXPECT_EQ(s.bytes, 2 * kGran);
  EXPECT_EQ(s.evictions, 1u);
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0 + 2) << "the evicted entry released its mapping";
  }
  vmmipc_buf_t v = Import(c, descs[0], &hit);
  EXPECT_EQ(hit, 0) << "the least recently used went first";
  EXPECT_TRUE(vt::CheckPattern(Ptr(v), kGran, 50));
  vmmipc_buf_free(v);  // now entry 1 is the least recently used
  v = Import(c, descs[2], &hit);
  EXPECT_EQ(hit, 1);
  vmmipc_buf_free(v);
  v = Import(c, descs[1], &hit);
  EXPECT_EQ(hit, 0) << "entry 1 was evicted when entry 0 came back";
  vmmipc_buf_free(v);
  // An entry larger than the bound is kept while in use, released when idle.
  v = Import(c, descs[3], &hit);
  EXPECT_EQ(Stats(c).bytes, 5 * kGran);
  vmmipc_buf_free(v);
  s = Stats(c);
  EXPECT_LE(s.idle_bytes, 2 * kGran);
  EXPECT_EQ(s.bytes, s.idle_bytes);
  // Lowering the bound evicts at once.
  vmmipc_buf_free(Import(c, descs[0], &hit));
  vmmipc_buf_free(Import(c, descs[1], &hit));
  EXPECT_EQ(Stats(c).idle_bytes, 2 * kGran);
  vmmipc__mapcache_set_max_bytes(c, kGran);
  EXPECT_EQ(Stats(c).idle_bytes, kGran);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0);
  }
  for (int i = 0; i < 4; i++) {
    vmmipc_desc_free(descs[i]);
    vmmipc_buf_free(bufs[i]);
  }
}

TEST_F(MapCache, TrimReleasesEveryIdleEntryAndNothingInUse) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(8, &c));
  std::vector<vmmipc_buf_t> bufs;
  std::vector<vmmipc_desc_t> descs;
  for (int i = 0; i < 3; i++) {
    bufs.push_back(Buf(2, 60 + i));
    descs.push_back(nullptr);
    ASSERT_VMM_OK(vmmipc_export(bufs.back(), &descs.back()));
  }
  int hit = -1;
  std::vector<vmmipc_buf_t> views;
  for (int i = 0; i < 3; i++) views.push_back(Import(c, descs[i], &hit));
  vmmipc_buf_free(views[0]);
  vmmipc_buf_free(views[1]);
  long m0 = Mappings();
  int fds0 = vt::FdCount();
  EXPECT_EQ(Stats(c).handles, 6);
  uint64_t released = 0;
  ASSERT_VMM_OK(vmmipc__mapcache_trim(c, &released));
  EXPECT_EQ(released, 4 * kGran);
  auto s = Stats(c);
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.idle, 0);
  EXPECT_EQ(s.bytes, 2 * kGran);
  EXPECT_EQ(s.handles, 2);
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0 - 4) << "two chunks each";
  }
  // The stand-in's imported handles each hold an fd; the driver's none.
  if (vt::UsingStandin()) {
    EXPECT_EQ(vt::FdCount(), fds0 - 4) << "trim closed the idle entries' fds";
  }
  EXPECT_TRUE(vt::CheckPattern(Ptr(views[2]), 2 * kGran, 62)) << "the entry in use still works";
  ASSERT_VMM_OK(vmmipc__mapcache_trim(c, &released));
  EXPECT_EQ(released, 0u);
  vmmipc_buf_free(views[2]);
  ASSERT_VMM_OK(vmmipc__mapcache_trim(c, nullptr));
  EXPECT_EQ(Stats(c).entries, 0);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  for (int i = 0; i < 3; i++) {
    vmmipc_desc_free(descs[i]);
    vmmipc_buf_free(bufs[i]);
  }
}

TEST_F(MapCache, AnOwnerNoticeReleasesIdleEntriesAndDoomsThoseInUse) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(8, &c));
  vmmipc_buf_t a = Buf(1, 70), b = Buf(1, 71);
  vmmipc_desc_t da = nullptr, db = nullptr;
  ASSERT_VMM_OK(vmmipc_export(a, &da));
  ASSERT_VMM_OK(vmmipc_export(b, &db));
  Identity ia = IdentityOf(da), ib = IdentityOf(db);
  int hit = -1;
  vmmipc_buf_t va = Import(c, da, &hit), vb = Import(c, db, &hit);
  vmmipc_buf_free(va);  // a idle, b in use
  long m0 = Mappings();
  vmmipc__freed_id_t ids[2] = {{ia.serial, ia.generation}, {ib.serial, ib.generation}};
  EXPECT_EQ(vmmipc__mapcache_drop(c, Pid() + 1, ia.nonce, ids, 2, 0), 0) << "another process's notice";
  EXPECT_EQ(vmmipc__mapcache_drop(c, Pid(), ia.nonce + 1, ids, 2, 1), 0) << "another nonce";
  EXPECT_EQ(vmmipc__mapcache_drop(c, Pid(), ia.nonce, ids, 2, 0), 2);
  auto s = Stats(c);
  EXPECT_EQ(s.freed, 2u);
  EXPECT_EQ(s.entries, 1) << "b's entry stays while its view lives";
  EXPECT_EQ(s.idle, 0);
  if (m0 >= 0) {
    EXPECT_EQ(Mappings(), m0 - 1) << "a's idle entry was released at once";
  }
  EXPECT_TRUE(vt::CheckPattern(Ptr(vb), kGran, 71)) << "a doomed view still reads";
  vmmipc_buf_t vb2 = Import(c, db, &hit);
  EXPECT_EQ(hit, 0) << "a doomed entry is never hit";
  vmmipc_buf_free(vb);
  s = Stats(c);
  EXPECT_EQ(s.entries, 1) << "the doomed entry went with its last view";
  vmmipc_buf_free(vb2);
  EXPECT_EQ(vmmipc__mapcache_drop(c, Pid(), ib.nonce, nullptr, 0, 1), 1) << "FREED_ALL: every entry of the owner";
  EXPECT_EQ(Stats(c).entries, 0);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_desc_free(da);
  vmmipc_desc_free(db);
  vmmipc_buf_free(a);
  vmmipc_buf_free(b);
}

TEST_F(MapCache, ADescriptorWithoutFdsIsServedOnlyByAnEntry) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(4, &c));
  vmmipc_buf_t b = Buf(3, 80);
  vmmipc_desc_t full = nullptr, meta = nullptr;
  ASSERT_VMM_OK(vmmipc__export_ex(b, 0, &meta));
  EXPECT_EQ(Cached(), cached0_) << "an export without fds opens none";
  std::vector<int> fds;
  Pack(meta, &fds);
  for (int fd : fds) EXPECT_EQ(fd, -1);
  vmmipc_buf_t v = nullptr;
  EXPECT_EQ(vmmipc__mapcache_import(c, meta, nullptr, nullptr, &v, nullptr), VMMIPC_ERR_INVALID_DESC);
  EXPECT_NE(std::string(vmmipc_last_error()).find("without file descriptors"), std::string::npos)
      << vmmipc_last_error();
  EXPECT_EQ(v, nullptr);
  ASSERT_VMM_OK(vmmipc_export(b, &full));
  int hit = -1;
  v = Import(c, full, &hit);
  vmmipc_buf_free(v);
  v = Import(c, meta, &hit);
  EXPECT_EQ(hit, 1);
  EXPECT_EQ(Stats(c).fds_not_sent, 3u);
  EXPECT_TRUE(vt::CheckPattern(Ptr(v), 3 * kGran, 80));
  vmmipc_buf_free(v);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  vmmipc_desc_free(meta);
  vmmipc_desc_free(full);
  vmmipc_buf_free(b);
}

TEST_F(MapCache, PinnedEntriesSurviveBoundsAndTrimAndKeepTheirOrder) {
  vmmipc__mapcache_t *c = nullptr;
  ASSERT_VMM_OK(vmmipc__mapcache_create(2, &c));
  std::vector<vmmipc_buf_t> bufs;
  std::vector<vmmipc_desc_t> descs;
  for (int i = 0; i < 3; i++) {
    bufs.push_back(Buf(1, 90 + i));
    descs.push_back(nullptr);
    ASSERT_VMM_OK(vmmipc_export(bufs.back(), &descs.back()));
  }
  int hit = -1;
  for (int i = 0; i < 2; i++) vmmipc_buf_free(Import(c, descs[i], &hit));  // 0 then 1 idle
  vmmipc__freed_id_t ids[8];
  vmmipc__mapent *pins[8];
  int k = vmmipc__mapcache_pin(c, Pid(), nullptr, ids, pins, 8);
  EXPECT_EQ(k, 2);
  vmmipc_access_t ro = VMMIPC_ACCESS_DEFAULT;
  ro.prot = VMMIPC_PROT_READ;
  vmmipc__freed_id_t other[8];
  vmmipc__mapent *other_pins[8];
  EXPECT_EQ(vmmipc__mapcache_pin(c, Pid(), &ro, other, other_pins, 8), 0) << "access is part of the key";
  EXPECT_EQ(vmmipc__mapcache_pin(c, Pid() + 1, nullptr, other, other_pins, 8), 0) << "another owner";
  ASSERT_VMM_OK(vmmipc__mapcache_trim(c, nullptr));
  EXPECT_EQ(Stats(c).entries, 2) << "pinned entries are in use";
  vmmipc__mapcache_unpin(pins, k);
  EXPECT_EQ(Stats(c).idle, 2);
  // Unpinning made neither more recent: entry 0 is still the LRU one.
  vmmipc_buf_free(Import(c, descs[2], &hit));
  EXPECT_EQ(Stats(c).evictions, 1u);
  vmmipc_buf_t v = Import(c, descs[1], &hit);
  EXPECT_EQ(hit, 1);
  vmmipc_buf_free(v);
  ASSERT_VMM_OK(vmmipc__mapcache_destroy(c));
  for (int i = 0; i < 3; i++) {
    vmmipc_desc_free(descs[i]);
    vmmipc_buf_free(bufs[i]);
  }
}

// ---- the collective message (coll/msg.h) ---------------------------------------

// Decode is strict, and every fd handed to it is closed on failure.
TEST_F(Caches, TheCollectiveMessageIsCheckedStrictly) {
  vmmipc_buf_t b = Buf(2, 95);
  vmmipc_desc_t d = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &d));
  vmmipc__freed_id_t freed[2] = {{7, 1}, {9, 3}}, have[1] = {{11, 2}};
  vmmipc__cmsg_t m = {0, 0x1234, freed, 2, have, 1, d};
  std::vector<unsigned char> bytes(vmmipc__cmsg_bytes(&m));
  vmmipc__cmsg_encode(&m, bytes.data());
  std::vector<int> fds;
  Pack(d, &fds);
  auto dup_fds = [&] {
    std::vector<int> v;
    for (int fd : fds) v.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    return v;
  };
  const int open0 = vt::FdCount();
  {  // round trip
    auto f = dup_fds();
    vmmipc__cmsg_in_t in;
    ASSERT_VMM_OK(vmmipc__cmsg_decode(bytes.data(), bytes.size(), f.data(), 2, &in));
    EXPECT_EQ(in.nonce, 0x1234u);
    ASSERT_EQ(in.num_freed, 2u);
    EXPECT_EQ(in.freed[1].serial, 9u);
    EXPECT_EQ(in.freed[1].generation, 3u);
    ASSERT_EQ(in.num_have, 1u);
    EXPECT_EQ(in.have[0].serial, 11u);
    ASSERT_NE(in.desc, nullptr);
    vmmipc_buf_t v = nullptr;
    ASSERT_VMM_OK(vmmipc_import(in.desc, nullptr, &v));
    void *p = nullptr;
    vmmipc_buf_ptr(v, &p, nullptr);
    EXPECT_TRUE(vt::CheckPattern(p, 2 * kGran, 95));
    vmmipc_buf_free(v);
    vmmipc__cmsg_in_free(&in);
    EXPECT_EQ(vt::FdCount(), open0);
  }
  struct Bad {
    const char *what;
    size_t off;
    unsigned char value;
    long len_delta;
    int nfds;
  } bad[] = {
      {"magic", 0, 0x00, 0, 2},        {"version", 4, 9, 0, 2},        {"unknown flag", 6, 0x08, 0, 2},
      {"no-fds flag with fds", 6, 0x03, 0, 2}, {"reserved", 28, 1, 0, 2}, {"freed count", 16, 3, 0, 2},
      {"truncated", 0, 0x56, -1, 2},   {"trailing", 0, 0x56, 1, 2},    {"fds missing", 0, 0x56, 0, 1},
  };
  for (const Bad &x : bad) {
    std::vector<unsigned char> c = bytes;
    c[x.off] = x.value;
    c.resize(static_cast<size_t>(static_cast<long>(c.size()) + x.len_delta));
    auto f = dup_fds();
    vmmipc__cmsg_in_t in;
    EXPECT_EQ(vmmipc__cmsg_decode(c.data(), c.size(), f.data(), x.nfds, &in), VMMIPC_ERR_INVALID_DESC) << x.what;
    if (x.nfds < 2) close(f[1]);  // not handed over
    EXPECT_EQ(vt::FdCount(), open0) << x.what << ": the fds handed over are closed";
  }
  {  // fds left out: the descriptor comes back without any
    vmmipc__cmsg_t m2 = {VMMIPC__CMSG_NO_FDS, 1, nullptr, 0, nullptr, 0, d};
    std::vector<unsigned char> c(vmmipc__cmsg_bytes(&m2));
    vmmipc__cmsg_encode(&m2, c.data());
    vmmipc__cmsg_in_t in;
    ASSERT_VMM_OK(vmmipc__cmsg_decode(c.data(), c.size(), nullptr, 0, &in));
    ASSERT_NE(in.desc, nullptr);
    EXPECT_EQ(in.desc->fds[0], -1);
    vmmipc__cmsg_in_free(&in);
  }
  {  // nothing at all: a message with no descriptor
    vmmipc__cmsg_t m3 = {0, 1, nullptr, 0, nullptr, 0, nullptr};
    std::vector<unsigned char> c(vmmipc__cmsg_bytes(&m3));
    EXPECT_EQ(c.size(), size_t{VMMIPC__CMSG_HEADER_BYTES});
    vmmipc__cmsg_encode(&m3, c.data());
    vmmipc__cmsg_in_t in;
    ASSERT_VMM_OK(vmmipc__cmsg_decode(c.data(), c.size(), nullptr, 0, &in));
    EXPECT_EQ(in.desc, nullptr);
    vmmipc__cmsg_in_free(&in);
  }
  vmmipc_desc_free(d);
  vmmipc_buf_free(b);
}

}  // namespace
