// The device API's host side (issue 23): what vmmipc_win_device hands to
// kernels (against vmmipc_win_query, read back from device memory), host
// sync through the library's kernels (emulated by the stand-in; real on a
// GPU), the paths VMMIPC_SYNC picks, a device wait that times out and the
// record the host sees, and the release of waits by a failure value.
#include <cuda.h>
#include <dlfcn.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/testhooks.h"
#include "harness/bufs.h"

namespace {

template <typename F>
void Get(const char *name, F *fn) {
  void *p = nullptr;
  ASSERT_VMM_OK(vmmipc_driver_proc(name, 0, &p));
  *fn = reinterpret_cast<F>(p);
}

std::string Env(const char *k) {
  const char *v = std::getenv(k);
  return v ? v : "";
}
// Whether the library's kernels load in this run (the stand-in emulates
// them unless VMMIPC_STANDIN_CAPS has nokernels; VMMIPC_SYNC=memops never
// loads them).
bool KernelsLoad() {
  return Env("VMMIPC_SYNC") != "memops" && Env("VMMIPC_STANDIN_CAPS").find("nokernels") == std::string::npos;
}

// Whether c's host sync calls take the kernels (the barrier's, or signal's
// and wait's), as its stats report once its first window made the pool.
bool KernelPathOf(vmmipc_comm_t c, bool barrier = false) {
  vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
  EXPECT_VMM_OK(vmmipc_comm_stats(c, &st));
  return (barrier ? st.sync_barrier_path : st.sync_path) == VMMIPC_SYNC_PATH_KERNELS;
}

// Whether every rank of `node` reports its device as an MPS client's.
bool AllMps(CUdevice dev, MPI_Comm node) {
  CUresult (*attr)(int *, CUdevice_attribute, CUdevice) = nullptr;
  Get("cuDeviceGetAttribute", &attr);
  int v = 0;
  if (!attr || attr(&v, static_cast<CUdevice_attribute>(133), dev) != CUDA_SUCCESS) v = 0;
  int all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, node);
  return all != 0;
}

// A counter the stand-in exports, as F; nullptr on a GPU.
template <typename F>
F StandinCounter(const char *name) {
  if (!vt::UsingStandin()) return nullptr;
  void *lib = dlopen(Env("VMMIPC_CUDA_DRIVER").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return nullptr;
  auto fn = reinterpret_cast<F>(dlsym(lib, name));
  dlclose(lib);
  return fn;
}

// The stand-in's live modules and mapped host allocations; false on a GPU.
bool KernelCounts(long *modules, long *host_allocs, long *launches) {
  auto fn = StandinCounter<void (*)(long *, long *, long *)>("vmmipc_standin_kernel_counts");
  if (!fn) return false;
  fn(modules, host_allocs, launches);
  return true;
}

// The stand-in's launches made with programmatic serialization; -1 on a GPU.
long PdlLaunches() {
  auto fn = StandinCounter<long (*)()>("vmmipc_standin_pdl_launches");
  return fn ? fn() : -1;
}

bool Has(const std::string &needle) { return std::string(vmmipc_last_error()).find(needle) != std::string::npos; }

// call() on a new thread, which has no context current: its result, and
// that thread's error message.
template <typename F>
std::pair<vmmipc_result_t, std::string> OnAThreadWithNoContext(F call) {
  std::pair<vmmipc_result_t, std::string> out{VMMIPC_ERR_INVALID_ARG, ""};
  std::thread([&] {
    out.first = call();
    out.second = vmmipc_last_error();
  }).join();
  return out;
}

class Device : public ::testing::Test {
 protected:
  void Make(int timeout_ms) {
    int dev = vt::UseRankDevice();
    ASSERT_GE(dev, 0);
    Get("cuStreamCreate", &streamCreate);
    Get("cuStreamDestroy", &streamDestroy);
    Get("cuStreamSynchronize", &streamSync);
    Get("cuMemcpyDtoH", &dtoh);
    vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms;
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c_));
    MPI_Comm node;
    vmmipc_comm_node_comm(c_, &node);
    MPI_Comm_size(node, &n_);
    MPI_Comm_rank(node, &me_);
    ranks_.resize(n_);
    int mine = vt::Rank();
    MPI_Allgather(&mine, 1, MPI_INT, ranks_.data(), 1, MPI_INT, node);
    // Whether two node ranks share a GPU (then auto takes memory operations).
    vmmipc_uuid_t u;
    ASSERT_VMM_OK(vmmipc_device_uuid(dev, &u));
    std::vector<vmmipc_uuid_t> all(n_);
    MPI_Allgather(&u, sizeof u, MPI_BYTE, all.data(), sizeof u, MPI_BYTE, node);
    for (int a = 0; a < n_; a++)
      for (int b = a + 1; b < n_; b++) shared_ = shared_ || std::memcmp(&all[a], &all[b], sizeof u) == 0;
    one_gpu_ = true;
    for (int a = 1; a < n_; a++) one_gpu_ = one_gpu_ && std::memcmp(&all[a], &all[0], sizeof u) == 0;
    mps_ = AllMps(dev, node);
    ASSERT_EQ(streamCreate(&s_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void SetUp() override { Make(30000); }
  // The comm's paths, known once its first window made the pool.
  void Paths() {
    kernel_ = KernelPathOf(c_);
    barrier_kernel_ = KernelPathOf(c_, true);
  }
  void TearDown() override {
    if (s_) streamDestroy(s_);
    if (c_) EXPECT_VMM_OK(vmmipc_comm_destroy(c_));
  }
  // Every slot of w here (signals, the host barrier's, the device
  // barrier's: 3 per node rank, from node rank 0's) reads 0.
  void ExpectSlotsZero(vmmipc_win_t w) {
    vmmipc_win_device_t d;
    ASSERT_VMM_OK(vmmipc_win_device(w, &d));
    auto in = Read(d.signal_in, d.nranks);
    std::vector<uint64_t> slots(3 * static_cast<size_t>(n_), 1);
    ASSERT_EQ(dtoh(slots.data(), reinterpret_cast<CUdeviceptr>(in[ranks_[0]]), slots.size() * 8), CUDA_SUCCESS);
    for (size_t i = 0; i < slots.size(); i++) EXPECT_EQ(slots[i], 0u) << "slot " << i;
  }
  template <typename T>
  std::vector<T> Read(const T *dev, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(dtoh(v.data(), reinterpret_cast<CUdeviceptr>(dev), n * sizeof(T)), CUDA_SUCCESS);
    return v;
  }
  vmmipc_win_device_status_t Status(vmmipc_win_t w) {
    vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
    EXPECT_VMM_OK(vmmipc_win_device_status(w, &st));
    return st;
  }
  CUresult (*streamCreate)(CUstream *, unsigned) = nullptr;
  CUresult (*streamDestroy)(CUstream) = nullptr;
  CUresult (*streamSync)(CUstream) = nullptr;
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = nullptr;
  vmmipc_comm_t c_ = nullptr;
  CUstream s_ = nullptr;
  int n_ = 0, me_ = 0;
  bool shared_ = false, kernel_ = false, one_gpu_ = false, mps_ = false, barrier_kernel_ = false;
  std::vector<int> ranks_;
};

// Ranks, sizes and pointers as vmmipc_win_query gives them, read back from
// the device arrays; slots of on-node ranks only; made with the window.
TEST_F(Device, ArraysMatchTheWindowAndGoWithIt) {
  long mods0 = 0, host0 = 0, l0 = 0;
  bool counted = KernelCounts(&mods0, &host0, &l0);
  // Sizes differ by rank, and the last rank gives no buffer.
  vmmipc_buf_t b = nullptr;
  if (vt::Rank() != vt::Size() - 1 || vt::Size() == 1) b = vt::PatternBuf(1, 3, 4096 * (vt::Rank() + 1));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  // Everything that could wait for the context happened with the window:
  // the comm's first one allocates its alarm and a chunk of arrays and
  // records (kept until the comm goes), and loads the kernels on their path.
  long mods1 = 0, host1 = 0, l1 = 0;
  if (counted) {
    KernelCounts(&mods1, &host1, &l1);
    EXPECT_EQ(host1, host0 + 2);
    if (KernelsLoad()) {
      EXPECT_GE(mods1, 1) << "the kernels load with the window, never in a host sync call";
    }
  }
  // The window's first call makes its arrays, and may come from a thread
  // with no context current: the upload goes through the comm's own.
  vmmipc_win_device_t first;
  std::memset(&first, 0, sizeof first);
  auto [fr, fmsg] = OnAThreadWithNoContext([&] { return vmmipc_win_device(w, &first); });
  ASSERT_EQ(fr, VMMIPC_SUCCESS) << fmsg;
  vmmipc_win_device_t d;
  std::memset(&d, 0, sizeof d);
  ASSERT_VMM_OK(vmmipc_win_device(w, &d));
  EXPECT_EQ(std::memcmp(&first, &d, sizeof d), 0);
  EXPECT_EQ(d.rank, vt::Rank());
  EXPECT_EQ(d.nranks, vt::Size());
  EXPECT_EQ(d.node_rank, me_);
  EXPECT_EQ(d.node_size, n_);
  EXPECT_EQ(d.timeout_ns, 30000ull * 1000000ull);
  const int N = d.nranks;
  auto ptrs = Read(d.ptrs, N);
  auto sizes = Read(d.sizes, N);
  auto out = Read(d.signal_out, N);
  auto in = Read(d.signal_in, N);
  auto node_ranks = Read(d.node_ranks, n_);
  for (int r = 0; r < N; r++) {
    void *p = nullptr;
    size_t size = 0;
    ASSERT_VMM_OK(vmmipc_win_query(w, r, &p, &size));
    EXPECT_EQ(ptrs[r], p) << "rank " << r;
    EXPECT_EQ(sizes[r], size) << "rank " << r;
    int same = 0;
    vmmipc_comm_same_node(c_, r, &same);
    // A node of one has a signal pad too (signal and wait to oneself).
    EXPECT_EQ(out[r] != nullptr, same != 0) << "rank " << r;
    EXPECT_EQ(in[r] != nullptr, same != 0) << "rank " << r;
  }
  for (int q = 0; q < n_; q++) EXPECT_EQ(node_ranks[q], ranks_[q]);
  EXPECT_NE(d.barrier_in, nullptr);
  // Every slot is distinct, and the arrays are made once.
  for (int r = 0; r < N; r++)
    for (int s = r + 1; s < N; s++) {
      if (out[r]) {
        EXPECT_NE(out[r], out[s]);
      }
    }
  vmmipc_win_device_t again;
  ASSERT_VMM_OK(vmmipc_win_device(w, &again));
  EXPECT_EQ(std::memcmp(&again, &d, sizeof d), 0);
  vmmipc_win_device_status_t st = Status(w);
  EXPECT_EQ(st.state, VMMIPC_DEV_OK);
  long mods = 0, host = 0, l = 0;
  if (counted) {
    KernelCounts(&mods, &host, &l);
    EXPECT_EQ(host, host1) << "vmmipc_win_device allocated";
    EXPECT_EQ(mods, mods1) << "vmmipc_win_device loaded code";
  }
  EXPECT_EQ(vmmipc_win_device(nullptr, &d), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_win_device(w, nullptr), VMMIPC_ERR_INVALID_ARG);
  vmmipc_win_device_status_t bad = VMMIPC_WIN_DEVICE_STATUS_INIT;
  bad.struct_size = 1;
  EXPECT_EQ(vmmipc_win_device_status(w, &bad), VMMIPC_ERR_INVALID_ARG);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
  if (counted) {
    KernelCounts(&mods, &host, &l);
    EXPECT_EQ(host, host1) << "the comm's, until it goes";
  }
}

// Signal, wait and barrier in a ring, on whichever path this run takes;
// the window's stats say which one ran, and the device struct's slots are
// the ones the host calls use. The comm's stats say how the paths were
// picked: by the setting, by support (one path usable), or under auto by
// the trial, whose figures the picks follow, alike on every node rank. The
// stand-in's VMMIPC_STANDIN_KERNEL_US / _MEMOPS_US make one path slow: the
// trial must then pick the other.
TEST_F(Device, HostSyncTakesThePathAndCountsIt) {
  // Nodes of one take part in the collectives only; the skips are alike on
  // every rank (they follow from the environment).
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  if (Env("VMMIPC_SYNC") == "kernel" && !KernelsLoad()) GTEST_SKIP() << "no path to take";
  if (vt::UsingStandin()) {
    EXPECT_EQ(mps_, Env("VMMIPC_STANDIN_MPS") == "1");
  }
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  Paths();
  vmmipc_comm_stats_t cs = VMMIPC_COMM_STATS_INIT;
  ASSERT_VMM_OK(vmmipc_comm_stats(c_, &cs));
  const std::string mode = Env("VMMIPC_SYNC");
  const uint64_t sm = cs.trial_signal_memops_ns, sk = cs.trial_signal_kernels_ns;
  const uint64_t bm = cs.trial_barrier_memops_ns, bk = cs.trial_barrier_kernels_ns;
  if (mode == "memops" || mode == "kernel") {
    EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_SETTING);
    EXPECT_EQ(kernel_, mode == "kernel");
    EXPECT_EQ(barrier_kernel_, mode == "kernel");
    EXPECT_EQ(sm + sk + bm + bk, 0u) << "no trial";
  } else if (!KernelsLoad()) {
    EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_SUPPORT);
    EXPECT_FALSE(kernel_);
    EXPECT_FALSE(barrier_kernel_);
  } else {
    EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_TRIAL);
    EXPECT_GT(sm, 0u);
    EXPECT_GT(sk, 0u);
    auto faster = [](uint64_t memops, uint64_t kernels) { return kernels * 100 <= memops * 95; };
    EXPECT_EQ(kernel_, faster(sm, sk)) << "signal + wait: " << sm << " ns (memops), " << sk << " ns (kernels)";
    if (n_ >= 2) {
      EXPECT_GT(bm, 0u);
      EXPECT_GT(bk, 0u);
      EXPECT_EQ(barrier_kernel_, faster(bm, bk)) << "barrier: " << bm << " ns (memops), " << bk << " ns (kernels)";
    }
    if (!Env("VMMIPC_STANDIN_KERNEL_US").empty()) {
      EXPECT_FALSE(kernel_) << "slow kernels: " << sk << " against " << sm << " ns";
      if (n_ >= 2) {
        EXPECT_FALSE(barrier_kernel_) << "slow kernels: " << bk << " against " << bm << " ns";
      }
    }
    if (!Env("VMMIPC_STANDIN_MEMOPS_US").empty()) {
      EXPECT_TRUE(kernel_) << "slow memops: " << sm << " against " << sk << " ns";
      if (n_ >= 2) {
        EXPECT_TRUE(barrier_kernel_) << "slow memops: " << bm << " against " << bk << " ns";
      }
    }
  }
  // The same picks and figures on every node rank.
  MPI_Comm node;
  vmmipc_comm_node_comm(c_, &node);
  uint64_t mine[7] = {static_cast<uint64_t>(cs.sync_path), static_cast<uint64_t>(cs.sync_barrier_path),
                      static_cast<uint64_t>(cs.sync_decided_by), sm, sk, bm, bk};
  std::vector<uint64_t> all(7 * static_cast<size_t>(n_));
  MPI_Allgather(mine, 7, MPI_UINT64_T, all.data(), 7, MPI_UINT64_T, node);
  for (int q = 0; q < n_; q++)
    for (int i = 0; i < 7; i++) EXPECT_EQ(all[7 * q + i], mine[i]) << "node rank " << q << ", item " << i;
  int right = ranks_[(me_ + 1) % n_], left = ranks_[(me_ + n_ - 1) % n_];
  const int iters = n_ >= 2 ? 20 : 0;
  const long pdl0 = PdlLaunches();
  for (int it = 1; it <= iters; it++) {
    ASSERT_VMM_OK(vmmipc_win_signal(w, right, it, s_));
    ASSERT_VMM_OK(vmmipc_win_wait(w, left, it, s_));
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
    ASSERT_EQ(streamSync(s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_wait_host(w, left, it, 30000));
  }
  // The slot vmmipc_win_signal wrote is the one the device struct names.
  vmmipc_win_device_t d;
  ASSERT_VMM_OK(vmmipc_win_device(w, &d));
  auto in = Read(d.signal_in, d.nranks);
  uint64_t v = 0;
  if (n_ >= 2) {
    ASSERT_EQ(dtoh(&v, reinterpret_cast<CUdeviceptr>(in[left]), 8), CUDA_SUCCESS);
    EXPECT_EQ(v, static_cast<uint64_t>(iters));
  }
  vmmipc_win_device_status_t st = Status(w);
  EXPECT_EQ(st.state, VMMIPC_DEV_OK);
  // Signal and wait on the comm's path; the barrier on its own (auto under
  // MPS, ranks sharing a GPU: kernels).
  const uint64_t pair = 2 * iters, bars = iters;
  EXPECT_EQ(st.kernel_calls, (kernel_ ? pair : 0) + (barrier_kernel_ ? bars : 0));
  EXPECT_EQ(st.memops_calls, (kernel_ ? 0 : pair) + (barrier_kernel_ ? 0 : bars));
  // The stand-in's device is of compute capability 9.0: every kernel-path
  // call is a programmatic dependent launch, unless VMMIPC_SYNC_PDL=0.
  if (pdl0 >= 0) {
    EXPECT_EQ(PdlLaunches() - pdl0, Env("VMMIPC_SYNC_PDL") == "0" ? 0 : static_cast<long>(st.kernel_calls));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
}

// auto's trial (sync/trial.c) runs the host sync calls on two slices of
// the comm's signal pool before its first window exists, and the first two
// windows take those slices: every slot of theirs here (signals, the host
// barrier's, the device barrier's) reads 0, so nothing of the trial
// satisfies a wait of theirs.
TEST_F(Device, TheFirstWindowsSlotsReadZeroAfterTheTrial) {
  vmmipc_win_t w[2] = {nullptr, nullptr};
  for (auto &x : w) ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &x));
  for (auto x : w) ExpectSlotsZero(x);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto x : w) ASSERT_VMM_OK(vmmipc_win_free(x));
}

class DeviceTimeout : public Device {
 protected:
  void SetUp() override { Make(300); }
};

// Rank 0 waits (on its stream, through the wait kernel) for a signal that
// never comes: the kernel gives up at the comm's timeout, so the work after
// it on the stream runs on data that is not ready. That cannot go
// unnoticed: the comm fails. Rank 0's next call reports the timeout naming
// the rank, the record says what it waited for, reading the record does
// not clear the failure, and every rank's next collective fails.
TEST_F(DeviceTimeout, AKernelPathWaitThatTimesOutBreaksTheComm) {
  // Each node with two ranks on the kernel path plays it; the others take
  // part in the collectives only.
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  Paths();
  const bool plays = n_ >= 2 && kernel_ && KernelsLoad();
  if (!vt::AnyRank(plays)) {
    EXPECT_VMM_OK(vmmipc_win_free(w));
    GTEST_SKIP() << "needs two ranks on a node, on the kernel path (memory-operation waits have no deadline)";
  }
  int peer = plays ? ranks_[1] : -1;
  if (plays && me_ == 0) {
    ASSERT_VMM_OK(vmmipc_win_wait(w, peer, 5, s_));
    ASSERT_EQ(streamSync(s_), CUDA_SUCCESS); // the kernel ends at its deadline
    EXPECT_EQ(vmmipc_win_signal(w, peer, 1, s_), VMMIPC_ERR_TIMEOUT);
    EXPECT_TRUE(Has("rank " + std::to_string(peer))) << vmmipc_last_error();
    EXPECT_TRUE(Has("timed out")) << vmmipc_last_error();
    // A read whose clearing upload fails keeps the record (before, it was
    // lost, and no later wait could record again); a read from a thread
    // with no context current works (before, it failed so).
    vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
    vmmipc__test_fail_at("status_upload", 1);
    EXPECT_EQ(vmmipc_win_device_status(w, &st), VMMIPC_ERR_CUDA);
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_TRUE(Has("clearing the window's device record")) << vmmipc_last_error();
    auto [sr, smsg] = OnAThreadWithNoContext([&] { return vmmipc_win_device_status(w, &st); });
    ASSERT_EQ(sr, VMMIPC_SUCCESS) << smsg;
    EXPECT_EQ(st.state, VMMIPC_DEV_TIMEOUT);
    EXPECT_EQ(st.rank, peer);
    EXPECT_EQ(st.barrier, 0);
    EXPECT_EQ(st.value, 5u);
    EXPECT_EQ(st.seen, 0u);
    EXPECT_EQ(Status(w).state, VMMIPC_DEV_OK) << "read, and cleared";
    EXPECT_EQ(vmmipc_win_signal(w, peer, 1, s_), VMMIPC_ERR_TIMEOUT) << "read, but the comm stays failed";
    EXPECT_EQ(vmmipc_win_wait_host(w, peer, 1, 10), VMMIPC_ERR_TIMEOUT);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc_result_t r = vmmipc_win_free(w);  // collective: fails everywhere, freed
  std::string msg = vmmipc_last_error();
  EXPECT_NE(r, VMMIPC_SUCCESS) << msg;
  if (plays && me_ == 0) {
    EXPECT_TRUE(Has("rank " + std::to_string(peer))) << msg;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A node rank that leaves auto's trial once every node rank said it was
// ready (its process stalls or dies there): the ranks waiting for it in
// the ring and the barriers give up at the call's bound, release their own
// waits with the failure value, and the comm's first window fails on every
// rank, within a bound (the timeout is 300 ms), leaving no mapped host
// memory behind; the comm can still be destroyed.
TEST_F(DeviceTimeout, ARankLeavingTheTrialFailsTheFirstWindowInTime) {
  const std::string mode = Env("VMMIPC_SYNC");
  const bool trial = (mode.empty() || mode == "auto") && KernelsLoad() &&
                     Env("VMMIPC_STANDIN_CAPS").find("nomemops") == std::string::npos;
  if (!trial || !vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "no trial here (a setting, or a node of one rank)";
  long host0 = 0;
  bool counted = KernelCounts(nullptr, &host0, nullptr);
  if (n_ >= 2 && me_ == 1) vmmipc__test_fail_at("trial", 1);
  vmmipc_win_t w = nullptr;
  auto t0 = std::chrono::steady_clock::now();
  vmmipc_result_t r = vmmipc_allgather_map(c_, nullptr, nullptr, &w);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string msg = vmmipc_last_error();
  vmmipc__test_fail_at(nullptr, 0);
  EXPECT_NE(r, VMMIPC_SUCCESS) << msg;
  EXPECT_EQ(w, nullptr);
  EXPECT_LT(s, 10.0) << "bounded by the timeout, not a hang";
  if (n_ >= 2 && me_ != 1) {
    EXPECT_TRUE(Has("auto's trial")) << msg;
  }
  if (counted) {
    long host1 = 0;
    KernelCounts(nullptr, &host1, nullptr);
    EXPECT_EQ(host1, host0) << "the pool's alarm and records go with it";
  }
  vmmipc_comm_stats_t cs = VMMIPC_COMM_STATS_INIT;
  ASSERT_VMM_OK(vmmipc_comm_stats(c_, &cs));
  EXPECT_EQ(cs.sync_path, 0) << "no pool, no path";
  EXPECT_EQ(cs.sync_decided_by, 0);
  // Every node rank made the same MPI steps: the comm's next window, with
  // its trial, works (a rank that made fewer would leave the node comm's
  // collectives unmatched, and MPI would fail the job here).
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  ASSERT_VMM_OK(vmmipc_comm_stats(c_, &cs));
  EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_TRIAL);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  MPI_Barrier(MPI_COMM_WORLD);
}

// Whether this job's comms run auto's trial (both paths usable, auto).
bool TrialRuns() {
  const std::string mode = Env("VMMIPC_SYNC");
  return (mode.empty() || mode == "auto") && KernelsLoad() &&
         Env("VMMIPC_STANDIN_CAPS").find("nomemops") == std::string::npos;
}

class DeviceTrial : public Device {
 protected:
  void SetUp() override { Make(6000); }
  // A comm of its own (each runs the trial at its first window), the same
  // timeout; nullptr if it could not be made.
  vmmipc_comm_t Fresh() {
    vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
    cfg.timeout_ms = 6000;
    vmmipc_comm_t c = nullptr;
    EXPECT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
    return c;
  }
  // The comm's first window, with `step`'s nth occurrence armed here where
  // `armed`: it fails on every rank, within half the timeout (no rank
  // waits for another until the 6 s). Its result; its message in *msg.
  vmmipc_result_t FirstWindowFails(const char *step, int nth, bool armed, std::string *msg) {
    if (armed) vmmipc__test_fail_at(step, nth);
    vmmipc_win_t w = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    vmmipc_result_t r = vmmipc_allgather_map(c_, nullptr, nullptr, &w);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    *msg = vmmipc_last_error();
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(w, nullptr);
    EXPECT_NE(r, VMMIPC_SUCCESS) << *msg;
    EXPECT_LT(s, 3.0) << "the waits ended, not the 6 s timeout: " << *msg;
    return r;
  }
};

// The driver refuses one of the trial's calls on one node rank (a launch
// or a batch): node rank 1's nth barrier of the trial fails as refused (2:
// the kernel path's, in the warm-up; 4: memory operations', in the first
// timed round). That path is out on every node rank, none waits for the
// refused rank's signals or arrivals, and the node goes on with the other
// path: the first window succeeds (it used to fail with a timeout), by
// support, its slots read 0, and its barrier works.
TEST_F(DeviceTrial, APathRefusedOnOneRankLeavesTheOtherOnEveryNodeRank) {
  if (!TrialRuns() || !vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "no trial here (a setting, or a node of one rank)";
  for (int nth : {2, 4}) {
    SCOPED_TRACE("barrier " + std::to_string(nth) + " of the trial refused on node rank 1");
    vmmipc_comm_t c = Fresh();
    ASSERT_NE(c, nullptr);
    if (n_ >= 2 && me_ == 1) vmmipc__test_fail_at("barrier_batch", nth);
    vmmipc_win_t w = nullptr;
    vmmipc_result_t r = vmmipc_allgather_map(c, nullptr, nullptr, &w);
    vmmipc__test_fail_at(nullptr, 0);
    ASSERT_VMM_OK(r);
    vmmipc_comm_stats_t cs = VMMIPC_COMM_STATS_INIT;
    ASSERT_VMM_OK(vmmipc_comm_stats(c, &cs));
    if (n_ >= 2) {
      const int other = nth == 2 ? VMMIPC_SYNC_PATH_MEMOPS : VMMIPC_SYNC_PATH_KERNELS;
      EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_SUPPORT);
      EXPECT_EQ(cs.sync_path, other);
      EXPECT_EQ(cs.sync_barrier_path, other);
    }
    ExpectSlotsZero(w);
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_VMM_OK(vmmipc_win_barrier(w, s_));
    EXPECT_EQ(streamSync(s_), CUDA_SUCCESS);
    EXPECT_VMM_OK(vmmipc_win_free(w));
    EXPECT_VMM_OK(vmmipc_comm_destroy(c));
  }
}

// The trial's nth call on node rank 1 is refused (a signal, a wait or a
// barrier, at nth points from the warm-up to the middle of the second
// stage's rounds, with calls of its own still queued). The refused path is
// out everywhere and the node goes on with the other one: the window
// succeeds in time, by support, both rows on the same path; the slots of
// the first two windows (the trial's slices) read 0; and a ring of
// signals and a barrier on that path give the right values.
TEST_F(DeviceTrial, ACallRefusedAnywhereInTheTrialLeavesTheOtherPath) {
  if (!TrialRuns() || !vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "no trial here (a setting, or a node of one rank)";
  for (int nth : {1, 3, 8, 30, 60, 90}) {
    SCOPED_TRACE("call " + std::to_string(nth) + " of the trial refused on node rank 1");
    vmmipc_comm_t c = Fresh();
    ASSERT_NE(c, nullptr);
    if (n_ >= 2 && me_ == 1) vmmipc__test_fail_at("trial_call", nth);
    vmmipc_win_t w[2] = {nullptr, nullptr};
    auto t0 = std::chrono::steady_clock::now();
    vmmipc_result_t r = vmmipc_allgather_map(c, nullptr, nullptr, &w[0]);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string msg = vmmipc_last_error();
    // Whether the call came (a trial cut short, one path far slower, makes fewer).
    int fired = n_ >= 2 && me_ == 1 && !vmmipc__test_fail_pending(), any = 0;
    vmmipc__test_fail_at(nullptr, 0);
    MPI_Comm node;
    vmmipc_comm_node_comm(c_, &node);
    MPI_Allreduce(&fired, &any, 1, MPI_INT, MPI_MAX, node);
    ASSERT_EQ(r, VMMIPC_SUCCESS) << msg;
    EXPECT_LT(s, 3.0) << "no rank waited for the refused one until the 6 s timeout";
    ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &w[1]));
    vmmipc_comm_stats_t cs = VMMIPC_COMM_STATS_INIT;
    ASSERT_VMM_OK(vmmipc_comm_stats(c, &cs));
    if (n_ >= 2 && any) {
      EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_SUPPORT);
      EXPECT_EQ(cs.sync_path, cs.sync_barrier_path) << "one path was refused: both rows take the other";
    } else if (n_ >= 2) {
      EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_TRIAL) << "the trial made fewer calls than " << nth;
    }
    for (auto x : w) ExpectSlotsZero(x);
    MPI_Barrier(MPI_COMM_WORLD);
    if (n_ >= 2) { // a token ring over the node, values 1..3, then a barrier
      const int right = ranks_[(me_ + 1) % n_], left = ranks_[(me_ + n_ - 1) % n_];
      for (uint64_t v = 1; v <= 3; v++) {
        if (me_ == 0) EXPECT_VMM_OK(vmmipc_win_signal(w[0], right, v, s_));
        EXPECT_VMM_OK(vmmipc_win_wait(w[0], left, v, s_));
        if (me_ != 0) EXPECT_VMM_OK(vmmipc_win_signal(w[0], right, v, s_));
      }
      EXPECT_VMM_OK(vmmipc_win_barrier(w[0], s_));
      EXPECT_EQ(streamSync(s_), CUDA_SUCCESS);
      vmmipc_win_device_t d;
      ASSERT_VMM_OK(vmmipc_win_device(w[0], &d));
      uint64_t got = 0;
      ASSERT_EQ(dtoh(&got, reinterpret_cast<CUdeviceptr>(Read(d.signal_in, d.nranks)[left]), 8), CUDA_SUCCESS);
      EXPECT_EQ(got, 3u) << "the last value from rank " << left;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (auto x : w) EXPECT_VMM_OK(vmmipc_win_free(x));
    EXPECT_VMM_OK(vmmipc_comm_destroy(c));
  }
}

// Each path refused on a different node rank (node rank 1's first call,
// a wait of the memory-operation ring; node rank 0's third, the kernel
// ring's first signal): no path is left, and the first window fails on
// every rank, in time, saying so; the comm's next window runs the trial
// again and succeeds.
TEST_F(DeviceTrial, BothPathsRefusedFailTheFirstWindow) {
  if (!TrialRuns() || !vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "no trial here (a setting, or a node of one rank)";
  std::string msg;
  vmmipc_result_t r = FirstWindowFails("trial_call", me_ == 1 ? 1 : 3, n_ >= 2 && me_ <= 1, &msg);
  if (n_ >= 2) {
    EXPECT_EQ(r, VMMIPC_ERR_CUDA) << msg;
    EXPECT_TRUE(Has("both host-sync paths were refused")) << msg;
  }
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  vmmipc_comm_stats_t cs = VMMIPC_COMM_STATS_INIT;
  ASSERT_VMM_OK(vmmipc_comm_stats(c_, &cs));
  if (n_ >= 2) {
    EXPECT_EQ(cs.sync_decided_by, VMMIPC_SYNC_BY_TRIAL);
  }
  ASSERT_VMM_OK(vmmipc_win_free(w));
  MPI_Barrier(MPI_COMM_WORLD);
}

// A node rank aborts its comm in auto's trial (as another thread's
// vmmipc_comm_abort could): its node peers stop waiting for it when its
// END frame comes, not at the comm's timeout (6 s here; the pool's
// agreement after the trial takes a grace, 1.2 s, on every rank), and the
// first window fails with VMMIPC_ERR_ABORTED naming it.
TEST_F(DeviceTrial, ARankAbortingInTheTrialFailsTheFirstWindowAtOnce) {
  if (!TrialRuns() || !vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "no trial here (a setting, or a node of one rank)";
  std::string msg;
  vmmipc_result_t r = FirstWindowFails("trial_abort", 1, n_ >= 2 && me_ == 1, &msg);
  // Every node's node rank 1 aborted: the message names one of them.
  int mine = n_ >= 2 && me_ == 1 ? vt::Rank() : -1, size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> aborters(static_cast<size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, aborters.data(), 1, MPI_INT, MPI_COMM_WORLD);
  bool named = false;
  for (int a : aborters) {
    const std::string who = "rank " + std::to_string(a);
    for (size_t at = msg.find(who); a >= 0 && at != std::string::npos; at = msg.find(who, at + 1))
      named |= at + who.size() == msg.size() || !std::isdigit(static_cast<unsigned char>(msg[at + who.size()]));
  }
  if (n_ >= 2) {
    EXPECT_EQ(r, VMMIPC_ERR_ABORTED) << msg;
    EXPECT_TRUE(named) << msg;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A barrier that one rank never enters times out on the others with a
// barrier record naming a rank that did not arrive; the comm fails.
TEST_F(DeviceTimeout, ABarrierWithoutAPeerIsRecorded) {
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  Paths();
  const bool plays = n_ >= 2 && barrier_kernel_ && KernelsLoad(); // as above
  if (!vt::AnyRank(plays)) {
    EXPECT_VMM_OK(vmmipc_win_free(w));
    GTEST_SKIP() << "needs two ranks on a node, on the kernel path (memory-operation waits have no deadline)";
  }
  const int absent = n_ - 1;
  if (plays && me_ != absent) {
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
    ASSERT_EQ(streamSync(s_), CUDA_SUCCESS);
    EXPECT_EQ(vmmipc_win_barrier(w, s_), VMMIPC_ERR_TIMEOUT);
    EXPECT_TRUE(Has("device barrier")) << vmmipc_last_error();
    vmmipc_win_device_status_t st = Status(w);
    EXPECT_EQ(st.state, VMMIPC_DEV_TIMEOUT);
    EXPECT_EQ(st.barrier, 1);
    EXPECT_EQ(st.value, 1u);
    int known = 0;
    for (int q = 0; q < n_; q++) known |= st.rank == ranks_[q] && q != me_;
    EXPECT_TRUE(known) << st.rank;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_NE(vmmipc_win_free(w), VMMIPC_SUCCESS) << "the timed-out barrier failed the comm";
  MPI_Barrier(MPI_COMM_WORLD);
}

// A slot holding a failure value (top bit set, as the comm writes on a
// failure it detects) releases the wait kernel at once; the next host call
// says so (VMMIPC_ERR_PEER), and the record shows the value.
TEST_F(DeviceTimeout, AFailureValueReleasesTheWait) {
  // A comm of its own: the aborter aborts it while a kernel waits on a slot
  // that nobody signals. The release (sync/release.c) writes
  // VMMIPC_SIGNAL_FAILED into its slots, and the kernel's wait sees the top
  // bit and ends.
  // Ranks off the aborter's node learn of it only from their next
  // collective, within the timeout: 5 s, still far beyond the abort, which
  // comes as soon as the wait kernel runs.
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 5000;
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &w));
  const bool plays = n_ >= 2 && KernelPathOf(c) && KernelsLoad();
  if (!vt::AnyRank(plays)) {
    EXPECT_VMM_OK(vmmipc_win_free(w));
    EXPECT_VMM_OK(vmmipc_comm_destroy(c));
    GTEST_SKIP() << "needs two ranks on a node, on the kernel path";
  }
  // The aborter: node rank 0 of the first node that plays, the same rank
  // on every rank.
  int cand = plays && me_ == 0 ? vt::Rank() : vt::Size(), aborter = 0;
  MPI_Allreduce(&cand, &aborter, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  const bool aborts = vt::Rank() == aborter;
  if (aborts) {
    long before = 0;
    std::thread aborter;
    if (KernelCounts(nullptr, nullptr, &before)) {
      // The stand-in runs a launch on the calling thread to its end: the
      // abort comes from another thread once the wait kernel has started.
      aborter = std::thread([&] {
        long now = before;
        while (KernelCounts(nullptr, nullptr, &now) && now == before) std::this_thread::yield();
        EXPECT_VMM_OK(vmmipc_comm_abort(c));
      });
    }
    EXPECT_VMM_OK(vmmipc_win_wait(w, ranks_[1], 3, s_));
    if (aborter.joinable()) {
      aborter.join();
    } else {
      EXPECT_VMM_OK(vmmipc_comm_abort(c)); // a GPU: the launch returned at once, the kernel waits
    }
    ASSERT_EQ(streamSync(s_), CUDA_SUCCESS) << "the aborted comm released the kernel's wait";
    EXPECT_EQ(vmmipc_win_wait(w, ranks_[1], 3, s_), VMMIPC_ERR_ABORTED);
    vmmipc_win_device_status_t st = Status(w);
    EXPECT_EQ(st.state, VMMIPC_DEV_FAILED);
    EXPECT_EQ(st.rank, ranks_[1]);
    EXPECT_EQ(st.value, 3u);
    EXPECT_EQ(st.seen, VMMIPC_SIGNAL_FAILED);
    EXPECT_EQ(vmmipc_win_free(w), VMMIPC_ERR_ABORTED) << "freed locally";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (!aborts) {
    EXPECT_NE(vmmipc_win_free(w), VMMIPC_SUCCESS) << "a peer aborted: no verdict of success";
  }
  EXPECT_VMM_OK(vmmipc_comm_destroy(c));
  MPI_Barrier(MPI_COMM_WORLD);
}

// The device API's scope (vmmipc_win_device_t.scope): GPU exactly where
// every node rank uses one GPU, system otherwise or when any node rank sets
// VMMIPC_DEV_SCOPE=sys (each node decides for itself); an unknown value, or
// node ranks that ask for different barrier shapes (VMMIPC_SYNC_BARRIER),
// fail the comm's first window on every rank of the comm, naming a rank.
// Read with the comm's first window.
TEST_F(Device, TheScopeIsTheGpuOnlyWhereEveryNodeRankUsesIt) {
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  vmmipc_win_device_t d;
  ASSERT_VMM_OK(vmmipc_win_device(w, &d));
  EXPECT_EQ(d.scope, one_gpu_ ? VMMIPC_DEV_SCOPE_GPU : VMMIPC_DEV_SCOPE_SYS) << "node ranks: " << n_;
  EXPECT_EQ(d.reserved, 0u);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  // A setting made on rank 0 alone reaches rank 0's node only: its ranks
  // take system scope, the other nodes keep their own rule. A check that
  // fails on rank 0's node (a disagreement needs a second rank there) fails
  // the call on every rank: the verdict is comm-wide.
  int with_rank0 = 0, rank0_node_size = n_;
  ASSERT_VMM_OK(vmmipc_comm_same_node(c_, 0, &with_rank0));
  MPI_Bcast(&rank0_node_size, 1, MPI_INT, 0, MPI_COMM_WORLD);
  struct Case {
    const char *var, *value;
    bool all, fails;
  } cases[] = {{"VMMIPC_DEV_SCOPE", "sys", false, false},
               {"VMMIPC_DEV_SCOPE", "gpu", true, true},
               {"VMMIPC_SYNC_BARRIER", "gather", true, false},
               {"VMMIPC_SYNC_BARRIER", "gather", false, rank0_node_size > 1},
               {"VMMIPC_SYNC_BARRIER", "ring", true, true}};
  for (const Case &k : cases) {
    SCOPED_TRACE(std::string(k.var) + "=" + k.value + (k.all ? " on every rank" : " on rank 0"));
    if (k.all || vt::Rank() == 0) setenv(k.var, k.value, 1);
    vmmipc_comm_t c = nullptr;
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c));
    vmmipc_win_t x = nullptr;
    vmmipc_result_t r = vmmipc_allgather_map(c, nullptr, nullptr, &x);
    unsetenv(k.var);
    if (k.fails) {
      EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG);
      EXPECT_TRUE(Has(k.var) || Has("disagree")) << vmmipc_last_error();
    } else {
      ASSERT_VMM_OK(r);
      ASSERT_VMM_OK(vmmipc_win_device(x, &d));
      if (std::string(k.var) == "VMMIPC_DEV_SCOPE" && (k.all || with_rank0)) {
        EXPECT_EQ(d.scope, VMMIPC_DEV_SCOPE_SYS);
      } else {
        EXPECT_EQ(d.scope, one_gpu_ ? VMMIPC_DEV_SCOPE_GPU : VMMIPC_DEV_SCOPE_SYS);
      }
      ASSERT_VMM_OK(vmmipc_win_free(x));
    }
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
  }
}

// VMMIPC_SYNC=kernel where the kernels cannot load fails the call, naming
// the way out; VMMIPC_SYNC with an unknown value is refused.
TEST_F(Device, ForcedKernelsThatCannotLoadFail) {
  if (Env("VMMIPC_SYNC") != "kernel" || Env("VMMIPC_STANDIN_CAPS").find("nokernels") == std::string::npos)
    GTEST_SKIP() << "runs with VMMIPC_SYNC=kernel and VMMIPC_STANDIN_CAPS=nokernels";
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  if (n_ > 1) {
    EXPECT_EQ(vmmipc_win_signal(w, ranks_[(me_ + 1) % n_], 1, s_), VMMIPC_ERR_CUDA);
    EXPECT_TRUE(Has("VMMIPC_SYNC=memops")) << vmmipc_last_error();
  }
  ASSERT_VMM_OK(vmmipc_win_free(w));
}

}  // namespace
