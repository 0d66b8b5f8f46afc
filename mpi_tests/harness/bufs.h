// Small helpers for suites that move buffers between ranks.
#ifndef VMMIPC_TEST_BUFS_H
#define VMMIPC_TEST_BUFS_H

#include <utility>
#include <vector>

#include "harness/helpers.h"

namespace vt {

constexpr size_t kGran = 2u << 20;

// A buffer of `size` bytes (default: `chunks` granules) built chunk by
// chunk with vmmipc_grow, so that it has ceil(size / granule) chunks, filled
// with `seed`.
inline vmmipc_buf_t PatternBuf(int chunks, unsigned seed, size_t size = 0) {
  if (!size) size = static_cast<size_t>(chunks) * kGran;
  vmmipc_buf_t b = nullptr;
  EXPECT_VMM_OK(vmmipc_alloc(size < kGran ? size : kGran, &b));
  for (size_t have = kGran; b && have < size; have += kGran)
    EXPECT_VMM_OK(vmmipc_grow(b, size < have + kGran ? size : have + kGran));
  void *p = nullptr;
  size_t n = 0;
  if (b) vmmipc_buf_ptr(b, &p, &n);
  if (p) FillPattern(p, n, seed);
  return b;
}

// Whether every rank got the same result code.
inline bool SameEverywhere(vmmipc_result_t r) {
  int v = static_cast<int>(r), lo = 0, hi = 0;
  MPI_Allreduce(&v, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

// The verdict every rank reports alike: the result `code`, the same in
// vmmipc_last_error_info, naming `rank` (and the call `op` unless NULL).
// Collective (every rank compares its result). Returns the message.
inline std::string ExpectVerdict(vmmipc_result_t r, vmmipc_result_t code, int rank, const char *op,
                                 const std::string &how = "") {
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  EXPECT_EQ(vmmipc_last_error_info(&info), VMMIPC_SUCCESS);
  const std::string at = how + ": " + info.message;
  EXPECT_EQ(r, code) << at;
  EXPECT_TRUE(SameEverywhere(r)) << at;
  EXPECT_EQ(info.code, r) << at;
  EXPECT_EQ(info.rank, rank) << at;
  if (op) {
    EXPECT_STREQ(info.operation, op) << at;
  }
  return info.message;
}

// A comm for suites that count fds and driver objects: no mapping cache
// (it would keep some), and its signal pool, which lives as long as the
// comm, made now (by a first window) so that the baselines exclude it.
inline vmmipc_comm_t CountedComm(int timeout_ms) {
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  cfg.map_cache_entries = 0;
  vmmipc_comm_t c = nullptr;
  EXPECT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
  vmmipc_win_t w = nullptr;
  if (c) EXPECT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &w));
  if (w) EXPECT_VMM_OK(vmmipc_win_free(w));
  return c;
}

// Whether comm rank r is on this rank's node.
inline bool SameNode(vmmipc_comm_t c, int r) {
  int s = 0;
  vmmipc_comm_same_node(c, r, &s);
  return s != 0;
}

// Whether comm ranks 0 to k - 1 share a node, as rank 0 sees it
// (collective: every rank gets the same answer).
inline bool FirstRanksShareANode(vmmipc_comm_t c, int k) {
  int yes = Size() >= k;
  for (int r = 1; yes && r < k; r++) yes = SameNode(c, r);
  MPI_Bcast(&yes, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return yes != 0;
}

// The nodes as the comm split them, the same list on every rank
// (collective): for each comm rank, the lowest comm rank of its node. Tests
// pick their roles from it, so that every rank picks alike on any layout.
inline std::vector<int> NodeIds(vmmipc_comm_t c) {
  int me = Rank(), lowest = me;
  for (int r = 0; r < me && lowest == me; r++)
    if (SameNode(c, r)) lowest = r;
  std::vector<int> ids(static_cast<size_t>(Size()));
  MPI_Allgather(&lowest, 1, MPI_INT, ids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return ids;
}
// How many ranks the node of comm rank r has, from NodeIds.
inline int NodeSizeOf(const std::vector<int> &ids, int r) {
  int k = 0;
  for (int id : ids) k += id == ids[static_cast<size_t>(r)];
  return k;
}
// The lowest two ranks of the first node with two ranks, or {-1, -1}.
inline std::pair<int, int> FirstPair(const std::vector<int> &ids) {
  for (size_t a = 0; a < ids.size(); a++)
    for (size_t b = a + 1; b < ids.size(); b++)
      if (ids[a] == ids[b]) return {static_cast<int>(a), static_cast<int>(b)};
  return {-1, -1};
}
// The highest rank whose node has another rank, or -1.
inline int LastWithPeers(const std::vector<int> &ids) {
  for (int r = static_cast<int>(ids.size()) - 1; r >= 0; r--)
    if (NodeSizeOf(ids, r) > 1) return r;
  return -1;
}

// One verdict: `want` on this rank, the same code on every rank (a split
// verdict fails), and a message that names `names`. Collective.
inline void ExpectOneVerdict(vmmipc_result_t r, vmmipc_result_t want, const char *names) {
  std::string msg = vmmipc_last_error();
  EXPECT_EQ(r, want) << msg;
  EXPECT_TRUE(SameEverywhere(r)) << "split verdict: " << msg;
  EXPECT_TRUE(Has(msg, names)) << msg;
}

// Every rank in step, then `c` destroyed and this process's fds back at
// `fds_before`, then in step again (a rank that hung up early would be seen
// as a failure by the others). Collective.
inline void DestroyInStep(vmmipc_comm_t c, int fds_before, const char *what = "fds leaked") {
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_VMM_OK(vmmipc_comm_destroy(c));
  EXPECT_EQ(FdCount(), fds_before) << what;
  MPI_Barrier(MPI_COMM_WORLD);
}

// The fds the export caches of live buffers hold (documented, counted).
inline long CachedFds() {
  long n = 0;
  vmmipc_export_cache_fds(&n);
  return n;
}

// Baseline of fds and stand-in objects, checked (on every rank) at the end.
// The fds that buffers' export caches hold are not leaks: they are counted
// apart, so a buffer alive across the check may have exported meanwhile.
class Baseline {
 public:
  Baseline() : c_(), fds_(FdCount() - CachedFds()), have_(GetDriverCounts(&c_)) {}
  void Expect(const char *where) const {
    EXPECT_EQ(FdCount() - CachedFds(), fds_) << "fds leaked (beyond those export caches hold): " << where;
    DriverCounts now;
    if (have_ && GetDriverCounts(&now)) {
      EXPECT_EQ(now.allocations, c_.allocations) << where;
      EXPECT_EQ(now.mappings, c_.mappings) << where;
      EXPECT_EQ(now.reservations, c_.reservations) << where;
    }
  }

 private:
  // c_ before have_: have_'s initialiser fills c_.
  DriverCounts c_;
  int fds_;
  bool have_;
};

}  // namespace vt

#endif
