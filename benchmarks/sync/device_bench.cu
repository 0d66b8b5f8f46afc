// Device-API latencies (issues 23 and 30), any number of ranks (2 or more):
//   dev_barrier          in-kernel vmmipc_dev_barrier, every rank, per barrier
//   dev_signal_wait      vmmipc_dev_signal -> vmmipc_dev_wait, ranks 0 and 1, one way
//   dev_put_signal_wait  the same after an 8-byte store into the peer's buffer,
//                        which the waiter checks after its wait (data ok/MISMATCH)
//   host_barrier         vmmipc_win_barrier on a stream, every rank, per barrier
//   host_signal_wait     vmmipc_win_signal + vmmipc_win_wait, ranks 0 and 1, one way
//   allreduce            the one-shot all-reduce of examples/allreduce_oneshot.cuh
//                        (one kernel, a flag per block and peer), 8 B to 64 KiB, checked
//   allreduce_graph      the same kernel captured once in a CUDA graph and replayed
//   empty_kernel         an empty kernel of one block, back to back: the floor under
//                        any one-kernel all-reduce on this machine
//   allreduce (nccl)     ncclAllReduce as an anchor (dlopen'ed; NCCL refuses ranks
//                        that share a GPU: the row says skipped)
// The host rows run on the path VMMIPC_SYNC picks ("path" says which: one
// launch per path). The JSON's config records VMMIPC_SYNC_BARRIER and
// VMMIPC_DEV_SCOPE (barrier_shape, dev_scope_setting) and the window's scope
// (dev_scope): the report keeps launches with other settings apart. In-kernel rows are timed inside the kernel with
// %globaltimer after one untimed round (a batch is the slowest rank's);
// host and all-reduce rows by CUDA events around a batch issued back to
// back (the all-reduce rows in sweeps: each round one batch of every size
// and launch). Median over --reps batches. Without MPS, kernels of ranks sharing
// a GPU time-slice: the in-kernel rows then measure the scheduler.
//   mpirun -np N vmmipc_device_bench [--iters 2000] [--reps 10] [--host-iters 500]
//          [--ar-iters 200] [--rows dev,put,host,allreduce,graph,nccl] [--timeout-s 20] [--json FILE]
// (a lone number as the first argument is --iters, as before.)
#include <cuda_runtime.h>
#include <mpi.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "allreduce_oneshot.cuh"
#include "common/devbench.cuh"
#include "vmmipc.h"
#include "vmmipc_device.cuh"

using devbench::Row;

#define VMM(call)                                                                   \
  do {                                                                              \
    if ((call) != VMMIPC_SUCCESS) devbench::die("%s: %s", #call, vmmipc_last_error()); \
  } while (0)

static constexpr size_t kPayloadOff = 1u << 20; // the ping-pong's payload, clear of the all-reduce's part
static constexpr int kMaxFloats = oneshot::kMaxFloats; // 64 KiB

struct Res {
  unsigned long long ns, bad, failed;
};

__host__ __device__ inline uint64_t tag(uint64_t v) { return v * 0x9e3779b97f4a7c15ull + 1; }

// One untimed barrier, then n timed; every thread of the one block calls.
__global__ void k_barriers(vmmipc_win_device_t w, int n, uint64_t timeout_ns, Res *res) {
  unsigned long long failed = vmmipc_dev_barrier(&w, timeout_ns) != VMMIPC_DEV_OK;
  const uint64_t t0 = devbench::globaltimer();
  for (int i = 0; i < n && !failed; i++) failed = vmmipc_dev_barrier(&w, timeout_ns) != VMMIPC_DEV_OK;
  if (threadIdx.x == 0) {
    res->ns = devbench::globaltimer() - t0;
    res->bad = 0;
    res->failed = failed;
  }
}

// One thread. One untimed round trip, then n timed: the lower rank signals
// base+2i+1 and waits for base+2i+2. payload: an 8-byte store into the
// peer's buffer before each signal, checked by the peer after its wait.
__global__ void k_pingpong(vmmipc_win_device_t w, int peer, uint64_t base, int n, int payload, uint64_t timeout_ns,
                           Res *res) {
  const uint64_t *mine = reinterpret_cast<const uint64_t *>(static_cast<char *>(vmmipc_dev_ptr(&w, w.rank)) +
                                                            kPayloadOff);
  uint64_t *theirs = reinterpret_cast<uint64_t *>(static_cast<char *>(vmmipc_dev_ptr(&w, peer)) + kPayloadOff);
  const bool first = w.rank < peer;
  unsigned long long bad = 0, failed = 0;
  uint64_t t0 = 0;
  for (int i = 0; i <= n; i++) {
    if (i == 1) t0 = devbench::globaltimer();
    const uint64_t a = base + 2 * (uint64_t)i + 1, b = a + 1;
    const uint64_t send = first ? a : b, recv = first ? b : a;
    if (first) {
      if (payload) *theirs = tag(send);
      vmmipc_dev_signal(&w, peer, send);
    }
    if (vmmipc_dev_wait(&w, peer, recv, timeout_ns) != VMMIPC_DEV_OK) {
      failed = 1;
      break;
    }
    if (payload && *mine != tag(recv)) bad++;
    if (!first) {
      if (payload) *theirs = tag(send);
      vmmipc_dev_signal(&w, peer, send);
    }
  }
  res->ns = devbench::globaltimer() - t0;
  res->bad = bad;
  res->failed = failed;
}

__global__ void k_empty() {}

// NCCL, loaded at run time: only the few ABI types needed are declared.
struct Nccl {
  void *lib = nullptr, *comm = nullptr;
  int (*GetUniqueId)(void *) = nullptr;
  int (*AllReduce)(const void *, void *, size_t, int, int, void *, cudaStream_t) = nullptr;
  int (*CommDestroy)(void *) = nullptr;
};
struct NcclId {
  char internal[128];
};

static const char *nccl_init(Nccl *x, int rank, int size) {
  x->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  int have = x->lib != nullptr, all = 0;
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) return "libnccl.so.2 not found";
  x->GetUniqueId = reinterpret_cast<int (*)(void *)>(dlsym(x->lib, "ncclGetUniqueId"));
  void *init = dlsym(x->lib, "ncclCommInitRank");
  x->AllReduce =
      reinterpret_cast<int (*)(const void *, void *, size_t, int, int, void *, cudaStream_t)>(dlsym(x->lib, "ncclAllReduce"));
  x->CommDestroy = reinterpret_cast<int (*)(void *)>(dlsym(x->lib, "ncclCommDestroy"));
  if (!x->GetUniqueId || !init || !x->AllReduce || !x->CommDestroy) return "NCCL lacks an entry point";
  NcclId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0 && x->GetUniqueId(&id)) std::memset(&id, 0, sizeof id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  auto fn = reinterpret_cast<int (*)(void **, int, NcclId, int)>(init);
  int rc = fn(&x->comm, size, id, rank);
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (all) return "ncclCommInitRank failed (ranks sharing a GPU are refused)";
  return nullptr;
}

struct Bench {
  int rank = 0, size = 0, peer = 0, iters = 0, reps = 0, host_iters = 0, ar_iters = 0;
  uint64_t timeout_ns = 0, sig_base = 0; // signal values of the pair (0, 1), growing over the run
  vmmipc_win_t win = nullptr;
  vmmipc_win_device_t dw;
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  Res *res = nullptr; // host-mapped
  bool pair() const { return rank < 2; }
};

// One sample from a kernel's result on the ranks that ran it.
static void kernel_sample(Bench &b, bool ran, double per, Row &row, long &failed) {
  double ns = ran ? (double)b.res->ns : 0;
  row.samples.push_back(devbench::max_over_ranks(ns) * 1e-9 / per);
  row.mismatches += devbench::sum_over_ranks(ran ? (long)b.res->bad : 0);
  failed += devbench::sum_over_ranks(ran ? (long)b.res->failed : 0);
}

static void settle(Row &row, long failed, bool checked) {
  if (failed) {
    row.skipped = "a device wait gave up (" + std::to_string(failed) + " rank-batches); no figure";
    row.samples.clear();
  } else if (checked) {
    row.data = row.mismatches ? devbench::MISMATCH : devbench::OK;
  }
}

static Row dev_barrier_row(Bench &b) {
  Row row;
  row.name = "dev_barrier";
  row.what = "per barrier";
  row.path = "device";
  row.iters = b.iters;
  row.note = "one block of 32 threads per rank, every rank";
  long failed = 0;
  for (int r = 0; r < b.reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    k_barriers<<<1, 32, 0, b.s>>>(b.dw, b.iters, b.timeout_ns, b.res);
    DB_CUDA(cudaGetLastError());
    DB_CUDA(cudaStreamSynchronize(b.s));
    kernel_sample(b, true, b.iters, row, failed);
  }
  settle(row, failed, false);
  return row;
}

static Row dev_pingpong_row(Bench &b, int payload) {
  Row row;
  row.name = payload ? "dev_put_signal_wait" : "dev_signal_wait";
  row.what = "one way (round trip / 2)";
  row.path = "device";
  row.bytes = payload ? 8 : 0;
  row.iters = b.iters;
  row.note = payload ? "an 8-byte store into the peer's buffer, vmmipc_dev_signal; the peer checks it after "
                       "vmmipc_dev_wait; ranks 0 and 1"
                     : "vmmipc_dev_signal / vmmipc_dev_wait, one thread, ranks 0 and 1";
  long failed = 0;
  for (int r = 0; r < b.reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (b.pair()) {
      k_pingpong<<<1, 1, 0, b.s>>>(b.dw, b.peer, b.sig_base, b.iters, payload, b.timeout_ns, b.res);
      DB_CUDA(cudaGetLastError());
      DB_CUDA(cudaStreamSynchronize(b.s));
    }
    b.sig_base += 2 * (uint64_t)(b.iters + 1);
    kernel_sample(b, b.pair(), 2.0 * b.iters, row, failed);
  }
  settle(row, failed, payload != 0);
  return row;
}

// Events around a batch on this rank's stream; the slowest rank's time.
static double event_batch(Bench &b, bool run, void (*issue)(Bench &, int), int n) {
  MPI_Barrier(MPI_COMM_WORLD);
  float ms = 0;
  if (run) {
    DB_CUDA(cudaEventRecord(b.e0, b.s));
    issue(b, n);
    DB_CUDA(cudaEventRecord(b.e1, b.s));
    DB_CUDA(cudaEventSynchronize(b.e1));
    DB_CUDA(cudaEventElapsedTime(&ms, b.e0, b.e1));
  }
  return devbench::max_over_ranks(ms * 1e-3);
}

static void issue_barriers(Bench &b, int n) {
  for (int i = 0; i < n; i++) VMM(vmmipc_win_barrier(b.win, b.s));
}

static void issue_signal_wait(Bench &b, int n) {
  for (int i = 0; i < n; i++) {
    const uint64_t a = b.sig_base + 2 * (uint64_t)i + 1;
    if (b.rank == 0) {
      VMM(vmmipc_win_signal(b.win, b.peer, a, b.s));
      VMM(vmmipc_win_wait(b.win, b.peer, a + 1, b.s));
    } else {
      VMM(vmmipc_win_wait(b.win, b.peer, a, b.s));
      VMM(vmmipc_win_signal(b.win, b.peer, a + 1, b.s));
    }
  }
}

static vmmipc_win_device_status_t host_calls(Bench &b) {
  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  VMM(vmmipc_win_device_status(b.win, &st));
  return st;
}

// The path of the calls made between two counts of the window's stats;
// "auto/" first where VMMIPC_SYNC left the choice to the library, so that
// its pick is a row of its own next to the paths forced.
static std::string host_path(const vmmipc_win_device_status_t &from, const vmmipc_win_device_status_t &to) {
  const uint64_t k = to.kernel_calls - from.kernel_calls, m = to.memops_calls - from.memops_calls;
  const char *env = std::getenv("VMMIPC_SYNC");
  const bool picked = !env || !*env || std::strcmp(env, "auto") == 0;
  return std::string(picked ? "auto/" : "") + (k ? (m ? "mixed" : "kernel") : "memops");
}

static void host_rows(Bench &b, devbench::Report &rep) {
  const vmmipc_win_device_status_t before = host_calls(b);
  issue_barriers(b, 10); // warm-up: the path's first-call costs
  DB_CUDA(cudaStreamSynchronize(b.s));
  Row bar;
  bar.name = "host_barrier";
  bar.what = "per barrier";
  bar.iters = b.host_iters;
  bar.note = "vmmipc_win_barrier back to back on one stream per rank, every rank";
  for (int r = 0; r < b.reps; r++) bar.samples.push_back(event_batch(b, true, issue_barriers, b.host_iters) / b.host_iters);
  const vmmipc_win_device_status_t barriers = host_calls(b);
  Row sw;
  sw.name = "host_signal_wait";
  sw.what = "one way (round trip / 2)";
  sw.bytes = 0;
  sw.iters = b.host_iters;
  sw.note = "vmmipc_win_signal + vmmipc_win_wait on one stream each, ranks 0 and 1";
  if (b.pair()) { // warm-up round trip
    issue_signal_wait(b, 1);
    DB_CUDA(cudaStreamSynchronize(b.s));
  }
  b.sig_base += 2;
  for (int r = 0; r < b.reps; r++) {
    sw.samples.push_back(event_batch(b, b.pair(), issue_signal_wait, b.host_iters) / b.host_iters / 2);
    b.sig_base += 2 * (uint64_t)b.host_iters;
  }
  // The paths of rank 0's calls (ranks 2.. made no signal calls).
  bar.path = host_path(before, barriers);
  sw.path = host_path(barriers, host_calls(b));
  rep.add(bar);
  rep.add(sw);
}

struct AllReduce {
  float *in = nullptr, *out = nullptr;
  std::vector<float> host;
  int *status = nullptr; // [oneshot::kMaxBlocks]: sticky, a block's wait that gave up
  vmmipc_win_device_t dw;
  int count = 0;
  cudaGraphExec_t graph = nullptr;
  Nccl *nccl = nullptr;
  bool pdl = false; // oneshot::launch with programmatic serialization
};
static AllReduce g_ar;

static void issue_allreduce(Bench &b, int n) {
  for (int i = 0; i < n; i++)
    DB_CUDA(oneshot::launch(b.s, g_ar.pdl, g_ar.dw, g_ar.in, g_ar.out, g_ar.count, g_ar.status));
}
static void issue_empty(Bench &b, int n) {
  for (int i = 0; i < n; i++) k_empty<<<1, 32, 0, b.s>>>();
  DB_CUDA(cudaGetLastError());
}
static void issue_graph(Bench &b, int n) {
  for (int i = 0; i < n; i++) DB_CUDA(cudaGraphLaunch(g_ar.graph, b.s));
}
static void issue_nccl(Bench &b, int n) {
  for (int i = 0; i < n; i++)
    g_ar.nccl->AllReduce(g_ar.in, g_ar.out, (size_t)g_ar.count, 7 /* ncclFloat32 */, 0 /* ncclSum */, g_ar.nccl->comm,
                         b.s);
}

// Counts wrong elements of out (every rank's input is (rank + 1) * (i % 97 + 1)).
static long allreduce_bad(Bench &b, int count) {
  std::vector<float> got((size_t)count);
  DB_CUDA(cudaMemcpy(got.data(), g_ar.out, (size_t)count * sizeof(float), cudaMemcpyDeviceToHost));
  const float ranks = (float)b.size * (float)(b.size + 1) / 2;
  long bad = 0;
  for (int i = 0; i < count; i++) bad += got[(size_t)i] != (float)(i % 97 + 1) * ranks;
  return devbench::sum_over_ranks(bad);
}

// One all-reduce row in the making: what it launches and its samples so far.
struct Series {
  Row row;
  int count = 0;
  bool pdl = false;
  cudaGraphExec_t graph = nullptr;
  void (*issue)(Bench &, int) = nullptr;
  long failed = 0; // rank-batches in which a block's wait gave up
};

static Series series(int count, const char *name, const char *path, void (*issue)(Bench &, int), bool pdl,
                     const char *note, int iters) {
  Series x;
  x.row.name = name;
  x.row.what = "per call";
  x.row.path = path;
  x.row.bytes = (long)count * 4;
  x.row.iters = iters;
  x.row.note = note;
  x.count = count;
  x.pdl = pdl;
  x.issue = issue;
  return x;
}

static void use_series(const Series &x) {
  g_ar.count = x.count;
  g_ar.pdl = x.pdl;
  g_ar.graph = x.graph;
}

// 1 if a block's wait gave up since the last call here (its status is then
// cleared, on the stream, before any later kernel), else 0.
static long take_gave_up(Bench &b) {
  int st[oneshot::kMaxBlocks];
  DB_CUDA(cudaMemcpy(st, g_ar.status, sizeof st, cudaMemcpyDeviceToHost));
  long f = 0;
  for (int v : st) f += v != VMMIPC_DEV_OK;
  if (f) DB_CUDA(cudaMemsetAsync(g_ar.status, 0, sizeof st, b.s));
  return f ? 1 : 0;
}

// The rows of every size, measured in sweeps: each of the --reps rounds
// takes one batch of every row in turn, so that a slow spell of the
// machine (a few ms) costs each row at most a sample or two, not its
// median (size by size, one size's batches came back to back and a spell
// could move that size alone). Every batch's result and block status are
// checked; a wait that gave up in the warm-up fails every row. Rows
// already skipped (NCCL refused) are left as they are.
static void allreduce_sweeps(Bench &b, std::vector<Series> &all) {
  DB_CUDA(cudaMemsetAsync(g_ar.status, 0, oneshot::kMaxBlocks * sizeof(int), b.s));
  for (Series &x : all) { // warm-up
    if (!x.row.skipped.empty()) continue;
    use_series(x);
    x.issue(b, 3);
  }
  DB_CUDA(cudaStreamSynchronize(b.s));
  const long warm = devbench::sum_over_ranks(take_gave_up(b));
  for (Series &x : all) x.failed += warm;
  for (int r = 0; r < b.reps; r++) {
    for (Series &x : all) {
      if (!x.row.skipped.empty()) continue;
      use_series(x);
      DB_CUDA(cudaMemsetAsync(g_ar.out, 0, (size_t)x.count * sizeof(float), b.s)); // the batch must write it
      x.row.samples.push_back(event_batch(b, true, x.issue, b.ar_iters) / b.ar_iters);
      x.row.mismatches += allreduce_bad(b, x.count);
      x.failed += devbench::sum_over_ranks(take_gave_up(b));
    }
  }
  for (Series &x : all)
    if (x.row.skipped.empty()) settle(x.row, x.failed, true);
}

// The launch floor: what an all-reduce of one kernel per call cannot beat.
static Row empty_row(Bench &b) {
  Row row;
  row.name = "empty_kernel";
  row.what = "per call";
  row.path = "cuda";
  row.iters = b.ar_iters;
  row.note = "an empty kernel of one block, back to back on one stream per rank (every rank at once)";
  issue_empty(b, 3);
  DB_CUDA(cudaStreamSynchronize(b.s));
  for (int r = 0; r < b.reps; r++) row.samples.push_back(event_batch(b, true, issue_empty, b.ar_iters) / b.ar_iters);
  return row;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  devbench::Args args{argc, argv};
  Bench b;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.size);
  if (b.size < 2) devbench::die("vmmipc_device_bench: run with two or more ranks");
  const bool lone = argc > 1 && argv[1][0] >= '0' && argv[1][0] <= '9';
  b.iters = (int)(lone ? std::atol(argv[1]) : args.num("iters", 2000));
  b.reps = (int)args.num("reps", 10);
  b.host_iters = (int)args.num("host-iters", 500);
  b.ar_iters = (int)args.num("ar-iters", 200);
  b.timeout_ns = (uint64_t)args.num("timeout-s", 20) * 1000000000ull;
  if (b.iters < 1 || b.reps < 1 || b.host_iters < 1 || b.ar_iters < 1)
    devbench::die("--iters, --reps, --host-iters, --ar-iters: at least 1");
  b.peer = b.rank < 2 ? 1 - b.rank : -1;

  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b.rank, MPI_INFO_NULL, &local);
  int lrank = 0, lsize = 0, ndev = 0;
  MPI_Comm_rank(local, &lrank);
  MPI_Comm_size(local, &lsize);
  if (lsize != b.size) devbench::die("vmmipc_device_bench: every rank must be on one node");
  DB_CUDA(cudaGetDeviceCount(&ndev));
  DB_CUDA(cudaSetDevice(lrank % ndev));
  DB_CUDA(cudaFree(nullptr));
  devbench::Report rep("vmmipc_device_bench", argc, argv);
  rep.devices();
  rep.config("iters", std::to_string(b.iters));
  rep.config("reps", std::to_string(b.reps));
  rep.config("host_iters", std::to_string(b.host_iters));
  rep.config("ar_iters", std::to_string(b.ar_iters));

  vmmipc_comm_t comm;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_buf_t buf;
  VMM(vmmipc_alloc(2u << 20, &buf)); // all-reduce slices from 0, the ping-pong's payload at 1 MiB
  VMM(vmmipc_allgather_map(comm, buf, nullptr, &b.win));
  VMM(vmmipc_win_device(b.win, &b.dw));
  // The settings this launch ran with (wave4.sh runs variants of them): the report keeps them apart.
  const char *shape = std::getenv("VMMIPC_SYNC_BARRIER"), *scope = std::getenv("VMMIPC_DEV_SCOPE");
  rep.config("barrier_shape", devbench::json_str(shape && *shape ? shape : "flat"));
  rep.config("dev_scope_setting", devbench::json_str(scope && *scope ? scope : "auto"));
  rep.config("dev_scope", devbench::json_str(b.dw.scope == VMMIPC_DEV_SCOPE_GPU ? "gpu" : "sys"));
  // How the host-sync paths were picked, and auto's trial figures (ns; 0: no trial).
  vmmipc_comm_stats_t cs = VMMIPC_COMM_STATS_INIT;
  VMM(vmmipc_comm_stats(comm, &cs));
  auto path_name = [](int p) { return devbench::json_str(p == VMMIPC_SYNC_PATH_KERNELS ? "kernel" : "memops"); };
  rep.config("sync_path", path_name(cs.sync_path));
  rep.config("sync_barrier_path", path_name(cs.sync_barrier_path));
  rep.config("sync_decided_by", devbench::json_str(cs.sync_decided_by == VMMIPC_SYNC_BY_TRIAL     ? "trial"
                                                   : cs.sync_decided_by == VMMIPC_SYNC_BY_SETTING ? "setting"
                                                                                                  : "support"));
  rep.config("trial_signal_ns", "[" + std::to_string(cs.trial_signal_memops_ns) + ", " +
                                    std::to_string(cs.trial_signal_kernels_ns) + "]");
  rep.config("trial_barrier_ns", "[" + std::to_string(cs.trial_barrier_memops_ns) + ", " +
                                     std::to_string(cs.trial_barrier_kernels_ns) + "]");
  DB_CUDA(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
  DB_CUDA(cudaEventCreate(&b.e0));
  DB_CUDA(cudaEventCreate(&b.e1));
  DB_CUDA(cudaHostAlloc(&b.res, sizeof *b.res, cudaHostAllocMapped));
  MPI_Barrier(MPI_COMM_WORLD);

  if (args.has("rows", "dev")) {
    rep.add(dev_barrier_row(b));
    rep.add(dev_pingpong_row(b, 0));
  }
  if (args.has("rows", "put")) rep.add(dev_pingpong_row(b, 1));
  if (args.has("rows", "host")) host_rows(b, rep);

  const bool ar = args.has("rows", "allreduce"), graph = args.has("rows", "graph"), nccl = args.has("rows", "nccl");
  if (ar || graph || nccl) {
    g_ar.dw = b.dw;
    DB_CUDA(cudaMalloc(&g_ar.in, kMaxFloats * sizeof(float)));
    DB_CUDA(cudaMalloc(&g_ar.out, kMaxFloats * sizeof(float)));
    DB_CUDA(cudaMalloc(&g_ar.status, oneshot::kMaxBlocks * sizeof(int)));
    // The all-reduce's flags and call counts start at 0 on every rank before any kernel.
    void *mine = nullptr;
    VMM(vmmipc_win_query(b.win, b.rank, &mine, nullptr));
    DB_CUDA(cudaMemset(static_cast<char *>(mine) + oneshot::kDataBytes, 0, oneshot::sync_bytes(b.size)));
    DB_CUDA(cudaDeviceSynchronize());
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<float> h(kMaxFloats);
    for (int i = 0; i < kMaxFloats; i++) h[(size_t)i] = (float)((b.rank + 1) * (i % 97 + 1));
    DB_CUDA(cudaMemcpy(g_ar.in, h.data(), kMaxFloats * sizeof(float), cudaMemcpyHostToDevice));
    Nccl nc;
    const char *skip = nccl ? nccl_init(&nc, b.rank, b.size) : nullptr;
    g_ar.nccl = &nc;
    if (ar) rep.add(empty_row(b));
    std::vector<Series> all; // in the report's order: by size, then oneshot, plain, graph, nccl
    std::vector<cudaGraph_t> graphs;
    const bool pdl = oneshot::pdl_supported();
    for (int count = 2; count <= kMaxFloats; count *= 2) { // 8 B to 64 KiB
      if (ar) { // the example's launch (PDL where the device takes it), and the plain one beside it
        all.push_back(series(count, "allreduce", "vmmipc_oneshot", issue_allreduce, pdl,
                             pdl ? "one kernel per call: copy in, a flag per block and peer, sum; PDL launch"
                                 : "one kernel per call: copy in, a flag per block and peer, sum",
                             b.ar_iters));
        if (pdl)
          all.push_back(series(count, "allreduce", "vmmipc_oneshot_plain", issue_allreduce, false,
                               "the same kernel, launched without programmatic serialization", b.ar_iters));
      }
      if (graph) {
        // A plain launch captured, as the example's graph mode does.
        Series x = series(count, "allreduce_graph", "vmmipc_oneshot", issue_graph, false,
                          "the same kernel captured once in a CUDA graph; per replay", b.ar_iters);
        cudaGraph_t g;
        use_series(x);
        DB_CUDA(cudaStreamBeginCapture(b.s, cudaStreamCaptureModeThreadLocal));
        issue_allreduce(b, 1);
        DB_CUDA(cudaStreamEndCapture(b.s, &g));
        DB_CUDA(cudaGraphInstantiate(&x.graph, g, 0));
        graphs.push_back(g);
        all.push_back(x);
      }
      if (nccl && skip) {
        Series x = series(count, "allreduce", "nccl", issue_nccl, false, "", 0);
        x.row.skipped = skip;
        all.push_back(x);
      } else if (nccl) {
        all.push_back(series(count, "allreduce", "nccl", issue_nccl, false, "ncclAllReduce, float sum", b.ar_iters));
      }
    }
    allreduce_sweeps(b, all);
    for (const Series &x : all) rep.add(x.row);
    for (const Series &x : all)
      if (x.graph) DB_CUDA(cudaGraphExecDestroy(x.graph));
    for (cudaGraph_t g : graphs) DB_CUDA(cudaGraphDestroy(g));
    g_ar.graph = nullptr;
    if (nc.comm) nc.CommDestroy(nc.comm);
    cudaFree(g_ar.in);
    cudaFree(g_ar.out);
    cudaFree(g_ar.status);
  }

  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  VMM(vmmipc_win_device_status(b.win, &st));
  if (st.state)
    std::fprintf(stderr, "rank %d: a device wait gave up: state %d, rank %d, value %llu, seen %llu\n", b.rank,
                 st.state, st.rank, (unsigned long long)st.value, (unsigned long long)st.seen);
  rep.finish();
  int failed = rep.failures() + (st.state != 0);
  int all = 0;
  MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  cudaFreeHost(b.res);
  cudaEventDestroy(b.e0);
  cudaEventDestroy(b.e1);
  cudaStreamDestroy(b.s);
  VMM(vmmipc_win_free(b.win));
  VMM(vmmipc_buf_free(buf));
  VMM(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  return all ? 1 : 0;
}
