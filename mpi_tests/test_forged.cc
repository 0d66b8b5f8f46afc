// A node peer that sends a malformed collective message (forged here as a
// raw frame, as a buggy or hostile rank of the job could send it): the call
// fails on every rank with VMMIPC_ERR_INVALID_DESC naming the sender,
// nothing of the message is used or kept, and the comm goes on working.
#include <mpi.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coll/msg.h"
#include "comm/comm.h"
#include "common/host.h"
#include "desc/desc.h"
#include "harness/bufs.h"
#include "harness/forge.h"

namespace {

using vt::kGran;

// A comm with no mapping cache and, unless `pool`, no signal pool yet.
vmmipc_comm_t Comm(bool pool) {
  if (pool) return vt::CountedComm(10000);
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 10000;
  cfg.map_cache_entries = 0;
  vmmipc_comm_t c = nullptr;
  EXPECT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
  return c;
}

// Queues `m` (with `fds`) in comm rank `to`'s socket from this rank, as the
// message of the next collective's first exchange: `to` takes it for this
// rank's, and this rank's real one, coming after it, as stale.
void Forge(vmmipc_comm_t c, int to, const vmmipc__cmsg_t &m, const int *fds, int num_fds) {
  std::vector<unsigned char> bytes(vmmipc__cmsg_bytes(&m));
  vmmipc__cmsg_encode(&m, bytes.data());
  // The next collective's sequence (comm/guard.c).
  ASSERT_EQ(vt::SendCollFrame(c, to, VMMIPC__KIND_DATA, c->epoch + 1, bytes.data(), bytes.size(), fds, num_fds), 0);
}

// After the failure the comm works: a window of every rank's pattern, read
// back on each node peer.
void MapsAndReads(vmmipc_comm_t c) {
  int me = vt::Rank();
  vmmipc_buf_t b = vt::PatternBuf(1, 700 + me);
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c, b, nullptr, &w));
  for (int q = 0; q < vt::Size(); q++) {
    if (!vt::SameNode(c, q)) continue;
    void *ptr = nullptr;
    size_t sz = 0;
    EXPECT_VMM_OK(vmmipc_win_query(w, q, &ptr, &sz));
    EXPECT_EQ(sz, kGran);
    EXPECT_TRUE(vt::CheckPattern(ptr, sz, 700 + q)) << "rank " << q;
  }
  EXPECT_VMM_OK(vmmipc_win_free(w));
  EXPECT_VMM_OK(vmmipc_buf_free(b));
}

// A buffer of one granule and its exported descriptor.
struct Exported {
  vmmipc_buf_t buf = nullptr;
  vmmipc_desc_t desc = nullptr;
  Exported() {
    EXPECT_VMM_OK(vmmipc_alloc(kGran, &buf));
    if (buf) EXPECT_VMM_OK(vmmipc_export(buf, &desc));
  }
  ~Exported() {
    vmmipc_desc_free(desc);
    vmmipc_buf_free(buf);
  }
};

// Each test: a buffer of rank 1's whose descriptor it forges with, then a
// comm with ranks 0 and 1 on one node (else it skips); after the failure the
// comm still works, and is destroyed in step with no fd left.
class Forged : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(vt::UseRankDevice(), 0);
    real_ = std::make_unique<Exported>();  // before the count: its fds are not the comm's
    ASSERT_NE(real_->desc, nullptr);
  }
  bool Begin(bool pool) {
    before_ = vt::FdCount();
    c_ = Comm(pool);
    if (c_ && vt::FirstRanksShareANode(c_, 2)) return true;
    if (c_) EXPECT_VMM_OK(vmmipc_comm_destroy(c_));
    c_ = nullptr;
    return false;
  }
  void End() {
    MapsAndReads(c_);
    vt::DestroyInStep(c_, before_);
  }
  std::unique_ptr<Exported> real_;
  vmmipc_comm_t c_ = nullptr;
  int before_ = 0;
};

// Rank 1's signal pool, as rank 0 gets it, is a descriptor of no chunks
// (which maps at address 0). Before, the first window succeeded, and every
// later signal toward rank 1 went to address 0 plus a slot's offset (a
// sticky illegal-address fault on a GPU).
TEST_F(Forged, ASignalPoolSmallerThanTheSlotsIsRefused) {
  if (!Begin(false)) GTEST_SKIP() << "needs ranks 0 and 1 on one node";
  vmmipc_comm_t c = c_;
  const Exported &real = *real_;
  if (vt::Rank() == 1) {
    vmmipc_desc_t empty = nullptr;
    ASSERT_VMM_OK(vmmipc__desc_new(0, "a test", &empty));
    empty->handle_type = real.desc->handle_type;
    empty->flags = real.desc->flags;
    empty->owner = real.desc->owner;
    memcpy(empty->host, real.desc->host, sizeof empty->host);
    empty->granularity = real.desc->granularity;
    vmmipc__cmsg_t m = {0, vmmipc__process_nonce(), nullptr, 0, nullptr, 0, empty};
    Forge(c, 0, m, nullptr, 0);
    vmmipc_desc_free(empty);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc_win_t w = nullptr;
  vmmipc_result_t r = vmmipc_allgather_map(c, nullptr, nullptr, &w);
  std::string msg = vt::ExpectVerdict(r, VMMIPC_ERR_INVALID_DESC, 1, "vmmipc_allgather_map", "forged pool");
  EXPECT_TRUE(vt::Has(msg, "signal pool of 0 bytes")) << msg;
  EXPECT_EQ(w, nullptr);
  End();
}

// Rank 1 sends its descriptor to an allgather_desc without its fds (a flag
// only a map collective's second round may carry). Before, rank 0 got
// SUCCESS and a descriptor whose fds were all -1.
TEST_F(Forged, ADescriptorWithoutItsFdsOutsideAMapCollectiveIsRefused) {
  if (!Begin(true)) GTEST_SKIP() << "needs ranks 0 and 1 on one node";
  vmmipc_comm_t c = c_;
  const Exported &real = *real_;
  if (vt::Rank() == 1) {
    vmmipc__cmsg_t m = {VMMIPC__CMSG_NO_FDS, vmmipc__process_nonce(), nullptr, 0, nullptr, 0, real.desc};
    Forge(c, 0, m, nullptr, 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<vmmipc_desc_t> out(static_cast<size_t>(vt::Size()), nullptr);
  vmmipc_result_t r = vmmipc_allgather_desc(c, real.desc, out.data());
  std::string msg = vt::ExpectVerdict(r, VMMIPC_ERR_INVALID_DESC, 1, "vmmipc_allgather_desc", "no fds");
  EXPECT_TRUE(vt::Has(msg, "without its fds")) << msg;
  for (vmmipc_desc_t d : out) EXPECT_EQ(d, nullptr) << "an output after a failure";
  End();
}

// Rank 1 sends a descriptor (with its fds) in the first round of a map
// collective, where only lists of held buffers travel. Before, every rank's
// verdict blamed rank 0, the receiver.
TEST_F(Forged, ADescriptorInAMapCollectivesFirstRoundBlamesItsSender) {
  if (!Begin(true)) GTEST_SKIP() << "needs ranks 0 and 1 on one node";
  vmmipc_comm_t c = c_;
  const Exported &real = *real_;
  if (vt::Rank() == 1) {
    vmmipc__cmsg_t m = {0, vmmipc__process_nonce(), nullptr, 0, nullptr, 0, real.desc};
    Forge(c, 0, m, real.desc->fds, real.desc->num_chunks);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc_win_t w = nullptr;
  vmmipc_result_t r = vmmipc_allgather_map(c, nullptr, nullptr, &w);
  std::string msg = vt::ExpectVerdict(r, VMMIPC_ERR_INVALID_DESC, 1, "vmmipc_allgather_map", "round 1");
  EXPECT_TRUE(vt::Has(msg, "rank 1 sent a descriptor in the first round")) << msg;
  EXPECT_EQ(w, nullptr);
  End();
}

}  // namespace
