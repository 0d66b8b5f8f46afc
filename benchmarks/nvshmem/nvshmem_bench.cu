// NVSHMEM anchors (issue 30), measured the way vmmipc_device_bench and
// vmmipc_setup --heap measure vmmipc's side, with the same output
// (common/devbench.cuh: a table and --json). Several PEs may share a GPU:
// NVSHMEM allows that only under MPS (with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// summing to at most 100 per GPU); if it refuses, its own message is the
// last thing in the log (nvshmemx_init_attr exits the process).
//   nvshmem.malloc_2m, nvshmem.malloc_free_2m  nvshmem_malloc (+ nvshmem_free) of 2 MiB,
//        host clock from an MPI_Barrier, the slowest rank (vmmipc: heap_alloc + win_free)
//   nvshmem.barrier_all_block  in-kernel barrier, one block of 32 threads per PE,
//        nvshmemx_collective_launch, per barrier (vmmipc: dev_barrier)
//   nvshmem.signal_op          nvshmemx_signal_op SET / nvshmem_signal_wait_until GE,
//        PEs 0 and 1, one way (vmmipc: dev_signal_wait)
//   nvshmem.put_signal         nvshmem_putmem_signal of 8 B / wait, payload checked
//        by the waiter, one way (vmmipc: dev_put_signal_wait)
//   nvshmem.barrier_all_on_stream  per call, back to back on one stream per PE
//        (vmmipc: host_barrier, host_signal_wait)
//   nvshmem.sum_reduce_on_stream   nvshmemx_float_sum_reduce_on_stream on
//        NVSHMEM_TEAM_WORLD, 8 B to 64 KiB, checked (vmmipc: allreduce)
// Bootstrap: a unique id made by PE 0 and sent with MPI_Bcast
// (NVSHMEMX_INIT_WITH_UNIQUEID); no MPI plugin is needed.
//   mpirun -np N nvshmem_bench [--iters 2000] [--reps 10] [--host-iters 500] [--ar-iters 200]
//          [--malloc-reps 50] [--rows malloc,barrier,signal,put,stream,reduce] [--json FILE]
#include <cuda_runtime.h>
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/devbench.cuh"

using devbench::Row;

static constexpr int kMaxFloats = 16384; // 64 KiB

__host__ __device__ inline uint64_t tag(uint64_t v) { return v * 0x9e3779b97f4a7c15ull + 1; }

// One untimed barrier, then n timed.
__global__ void k_barrier(int n, unsigned long long *ns) {
  nvshmemx_barrier_all_block();
  const uint64_t t0 = devbench::globaltimer();
  for (int i = 0; i < n; i++) nvshmemx_barrier_all_block();
  if (threadIdx.x == 0) *ns = devbench::globaltimer() - t0;
}

// One thread; one untimed round trip, then n timed. PE 0 sends
// base+2i+1 and waits for base+2i+2 on its own sig; PE 1 answers.
// put: the value's tag travels as an 8-byte nvshmem_putmem_signal.
__global__ void k_pingpong(uint64_t *sig, uint64_t *payload, uint64_t *src, int peer, uint64_t base, int n, int put,
                           unsigned long long *ns, unsigned long long *bad) {
  const bool first = nvshmem_my_pe() < peer;
  unsigned long long wrong = 0;
  uint64_t t0 = 0;
  for (int i = 0; i <= n; i++) {
    if (i == 1) t0 = devbench::globaltimer();
    const uint64_t a = base + 2 * (uint64_t)i + 1, b = a + 1;
    const uint64_t send = first ? a : b, recv = first ? b : a;
    if (first) {
      if (put) {
        *src = tag(send);
        nvshmem_putmem_signal(payload, src, sizeof *src, sig, send, NVSHMEM_SIGNAL_SET, peer);
      } else {
        nvshmemx_signal_op(sig, send, NVSHMEM_SIGNAL_SET, peer);
      }
    }
    nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, recv);
    if (put && *payload != tag(recv)) wrong++;
    if (!first) {
      if (put) {
        *src = tag(send);
        nvshmem_putmem_signal(payload, src, sizeof *src, sig, send, NVSHMEM_SIGNAL_SET, peer);
      } else {
        nvshmemx_signal_op(sig, send, NVSHMEM_SIGNAL_SET, peer);
      }
    }
  }
  *ns = devbench::globaltimer() - t0;
  *bad = wrong;
}

struct Bench {
  int rank = 0, size = 0, iters = 0, reps = 0, host_iters = 0, ar_iters = 0, malloc_reps = 0;
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  unsigned long long *ns = nullptr, *bad = nullptr; // host-mapped
};

static void malloc_rows(Bench &b, devbench::Report &rep) {
  Row alloc, both;
  alloc.name = "nvshmem.malloc_2m";
  both.name = "nvshmem.malloc_free_2m";
  alloc.what = both.what = "per call (host clock, slowest rank)";
  alloc.path = both.path = "host";
  alloc.bytes = both.bytes = 2l << 20;
  alloc.iters = both.iters = 1;
  alloc.note = "nvshmem_malloc of 2 MiB";
  both.note = "nvshmem_malloc + nvshmem_free of 2 MiB";
  void *p = nvshmem_malloc(2u << 20); // the first one untimed
  if (!p) devbench::die("nvshmem_malloc(2 MiB) returned NULL (NVSHMEM_SYMMETRIC_SIZE too small?)");
  nvshmem_free(p);
  for (int r = 0; r < b.malloc_reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    p = nvshmem_malloc(2u << 20);
    const double t1 = MPI_Wtime();
    if (!p) devbench::die("nvshmem_malloc(2 MiB) returned NULL");
    nvshmem_free(p);
    const double t2 = MPI_Wtime();
    alloc.samples.push_back(devbench::max_over_ranks(t1 - t0));
    both.samples.push_back(devbench::max_over_ranks(t2 - t0));
  }
  rep.add(alloc);
  rep.add(both);
}

static Row barrier_row(Bench &b) {
  Row row;
  row.name = "nvshmem.barrier_all_block";
  row.what = "per barrier";
  row.path = "device";
  row.iters = b.iters;
  row.note = "nvshmemx_barrier_all_block, one block of 32 threads per PE, nvshmemx_collective_launch";
  for (int r = 0; r < b.reps; r++) {
    int n = b.iters;
    unsigned long long *ns = b.ns;
    void *args[] = {&n, &ns};
    MPI_Barrier(MPI_COMM_WORLD);
    int st = nvshmemx_collective_launch((const void *)k_barrier, dim3(1), dim3(32), args, 0, b.s);
    if (st != 0) {
      row.skipped = "nvshmemx_collective_launch returned " + std::to_string(st);
      row.samples.clear();
      return row;
    }
    DB_CUDA(cudaStreamSynchronize(b.s));
    row.samples.push_back(devbench::max_over_ranks((double)*b.ns) * 1e-9 / b.iters);
  }
  return row;
}

static Row pingpong_row(Bench &b, uint64_t *sig, uint64_t *payload, uint64_t *src, uint64_t &base, int put) {
  Row row;
  row.name = put ? "nvshmem.put_signal" : "nvshmem.signal_op";
  row.what = "one way (round trip / 2)";
  row.path = "device";
  row.bytes = put ? 8 : 0;
  row.iters = b.iters;
  row.note = put ? "nvshmem_putmem_signal of 8 B (SIGNAL_SET) / nvshmem_signal_wait_until GE, payload checked; PEs 0, 1"
                 : "nvshmemx_signal_op SIGNAL_SET / nvshmem_signal_wait_until GE, one thread; PEs 0, 1";
  const bool pair = b.rank < 2;
  for (int r = 0; r < b.reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (pair) {
      k_pingpong<<<1, 1, 0, b.s>>>(sig, payload, src, 1 - b.rank, base, b.iters, put, b.ns, b.bad);
      DB_CUDA(cudaGetLastError());
      DB_CUDA(cudaStreamSynchronize(b.s));
    }
    base += 2 * (uint64_t)(b.iters + 1);
    row.samples.push_back(devbench::max_over_ranks(pair ? (double)*b.ns : 0) * 1e-9 / b.iters / 2);
    row.mismatches += devbench::sum_over_ranks(pair ? (long)*b.bad : 0);
  }
  if (put) row.data = row.mismatches ? devbench::MISMATCH : devbench::OK;
  return row;
}

// Events around n calls; the slowest rank's time per call.
template <typename F>
static double stream_batch(Bench &b, int n, F issue) {
  MPI_Barrier(MPI_COMM_WORLD);
  DB_CUDA(cudaEventRecord(b.e0, b.s));
  for (int i = 0; i < n; i++) issue();
  DB_CUDA(cudaEventRecord(b.e1, b.s));
  DB_CUDA(cudaEventSynchronize(b.e1));
  float ms = 0;
  DB_CUDA(cudaEventElapsedTime(&ms, b.e0, b.e1));
  return devbench::max_over_ranks(ms * 1e-3) / n;
}

static Row stream_barrier_row(Bench &b) {
  Row row;
  row.name = "nvshmem.barrier_all_on_stream";
  row.what = "per call";
  row.path = "stream";
  row.iters = b.host_iters;
  row.note = "nvshmemx_barrier_all_on_stream back to back on one stream per PE";
  auto issue = [&] { nvshmemx_barrier_all_on_stream(b.s); };
  stream_batch(b, 10, issue); // warm-up
  for (int r = 0; r < b.reps; r++) row.samples.push_back(stream_batch(b, b.host_iters, issue));
  return row;
}

static void reduce_rows(Bench &b, devbench::Report &rep) {
  float *src = static_cast<float *>(nvshmem_malloc(kMaxFloats * sizeof(float)));
  float *dst = static_cast<float *>(nvshmem_malloc(kMaxFloats * sizeof(float)));
  if (!src || !dst) devbench::die("nvshmem_malloc of the reduction buffers returned NULL");
  std::vector<float> h(kMaxFloats), got(kMaxFloats);
  for (int i = 0; i < kMaxFloats; i++) h[(size_t)i] = (float)((b.rank + 1) * (i % 97 + 1));
  DB_CUDA(cudaMemcpy(src, h.data(), kMaxFloats * sizeof(float), cudaMemcpyHostToDevice));
  nvshmem_barrier_all();
  const float ranks = (float)b.size * (float)(b.size + 1) / 2;
  struct Size {
    Row row;
    int count = 0, status = 0;
  };
  std::vector<Size> all;
  for (int count = 2; count <= kMaxFloats; count *= 2) { // 8 B to 64 KiB
    Size x;
    x.count = count;
    x.row.name = "nvshmem.sum_reduce_on_stream";
    x.row.what = "per call";
    x.row.path = "stream";
    x.row.bytes = (long)count * 4;
    x.row.iters = b.ar_iters;
    x.row.note = "nvshmemx_float_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD), back to back";
    all.push_back(x);
  }
  // Sweeps, as vmmipc_device_bench measures its all-reduce: each round takes
  // one batch of every size in turn, so that a slow spell of the machine
  // moves no size's median alone.
  for (int r = -1; r < b.reps; r++) { // round -1: the warm-up
    for (Size &x : all) {
      if (x.status) continue; // every PE agreed on it (below)
      int st = 0;
      auto issue = [&] {
        int rc = nvshmemx_float_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD, dst, src, (size_t)x.count, b.s);
        if (rc) st = rc;
      };
      if (r < 0) {
        stream_batch(b, 3, issue);
      } else {
        DB_CUDA(cudaMemsetAsync(dst, 0, (size_t)x.count * sizeof(float), b.s)); // the batch must write the result
        const double t = stream_batch(b, b.ar_iters, issue);
        DB_CUDA(cudaMemcpy(got.data(), dst, (size_t)x.count * sizeof(float), cudaMemcpyDeviceToHost));
        long bad = 0;
        for (int i = 0; i < x.count; i++) bad += got[(size_t)i] != (float)(i % 97 + 1) * ranks;
        x.row.mismatches += devbench::sum_over_ranks(bad);
        x.row.samples.push_back(t);
      }
      MPI_Allreduce(&st, &x.status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
  }
  for (Size &x : all) {
    if (x.status) {
      x.row.skipped = "nvshmemx_float_sum_reduce_on_stream returned " + std::to_string(x.status);
      x.row.samples.clear();
    } else {
      x.row.data = x.row.mismatches ? devbench::MISMATCH : devbench::OK;
    }
    rep.add(x.row);
  }
  nvshmem_barrier_all();
  nvshmem_free(dst);
  nvshmem_free(src);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  devbench::Args args{argc, argv};
  Bench b;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.size);
  if (b.size < 2) devbench::die("nvshmem_bench: run with two or more ranks");
  b.iters = (int)args.num("iters", 2000);
  b.reps = (int)args.num("reps", 10);
  b.host_iters = (int)args.num("host-iters", 500);
  b.ar_iters = (int)args.num("ar-iters", 200);
  b.malloc_reps = (int)args.num("malloc-reps", 50);
  if (b.iters < 1 || b.reps < 1 || b.host_iters < 1 || b.ar_iters < 1 || b.malloc_reps < 1)
    devbench::die("--iters, --reps, --host-iters, --ar-iters, --malloc-reps: at least 1");

  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b.rank, MPI_INFO_NULL, &local);
  int lrank = 0, ndev = 0;
  MPI_Comm_rank(local, &lrank);
  DB_CUDA(cudaGetDeviceCount(&ndev));
  DB_CUDA(cudaSetDevice(lrank % ndev));
  DB_CUDA(cudaFree(nullptr));
  devbench::Report rep("nvshmem_bench", argc, argv);
  rep.devices();

  nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
  int rc = 0;
  if (b.rank == 0) rc = nvshmemx_get_uniqueid(&id);
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc) devbench::die("nvshmemx_get_uniqueid returned %d", rc);
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  rc = nvshmemx_set_attr_uniqueid_args(b.rank, b.size, &id, &attr);
  if (rc) devbench::die("nvshmemx_set_attr_uniqueid_args returned %d", rc);
  if (b.rank == 0)
    std::fprintf(stderr, "nvshmem_bench: nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID), %d PEs on %d GPU(s)\n",
                 b.size, rep.gpus());
  rc = nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst) devbench::die("nvshmemx_init_attr returned %d", worst);
  if (nvshmem_my_pe() != b.rank || nvshmem_n_pes() != b.size)
    devbench::die("NVSHMEM PE %d of %d for MPI rank %d of %d", nvshmem_my_pe(), nvshmem_n_pes(), b.rank, b.size);
  char version[64];
  std::snprintf(version, sizeof version, "\"%d.%d.%d\"", NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                NVSHMEM_VENDOR_PATCH_VERSION);
  rep.config("nvshmem_version", version);
  rep.config("iters", std::to_string(b.iters));
  rep.config("reps", std::to_string(b.reps));
  rep.config("host_iters", std::to_string(b.host_iters));
  rep.config("ar_iters", std::to_string(b.ar_iters));
  rep.config("malloc_reps", std::to_string(b.malloc_reps));
  const char *sym = std::getenv("NVSHMEM_SYMMETRIC_SIZE");
  rep.config("nvshmem_symmetric_size", sym ? devbench::json_str(sym) : "null");

  DB_CUDA(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
  DB_CUDA(cudaEventCreate(&b.e0));
  DB_CUDA(cudaEventCreate(&b.e1));
  DB_CUDA(cudaHostAlloc(&b.ns, sizeof *b.ns, cudaHostAllocMapped));
  DB_CUDA(cudaHostAlloc(&b.bad, sizeof *b.bad, cudaHostAllocMapped));
  *b.ns = *b.bad = 0;

  if (args.has("rows", "malloc")) malloc_rows(b, rep);
  if (args.has("rows", "barrier")) rep.add(barrier_row(b));
  if (args.has("rows", "signal") || args.has("rows", "put")) {
    uint64_t *sig = static_cast<uint64_t *>(nvshmem_malloc(sizeof(uint64_t)));
    uint64_t *payload = static_cast<uint64_t *>(nvshmem_malloc(sizeof(uint64_t)));
    uint64_t *src = nullptr;
    if (!sig || !payload) devbench::die("nvshmem_malloc of the signal words returned NULL");
    DB_CUDA(cudaMalloc(&src, sizeof *src));
    DB_CUDA(cudaMemset(sig, 0, sizeof *sig));
    DB_CUDA(cudaMemset(payload, 0, sizeof *payload));
    DB_CUDA(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    uint64_t base = 0;
    if (args.has("rows", "signal")) rep.add(pingpong_row(b, sig, payload, src, base, 0));
    if (args.has("rows", "put")) rep.add(pingpong_row(b, sig, payload, src, base, 1));
    nvshmem_barrier_all();
    cudaFree(src);
    nvshmem_free(payload);
    nvshmem_free(sig);
  }
  if (args.has("rows", "stream")) rep.add(stream_barrier_row(b));
  if (args.has("rows", "reduce")) reduce_rows(b, rep);

  rep.finish();
  int failed = rep.failures();
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  DB_CUDA(cudaStreamSynchronize(b.s));
  cudaFreeHost(b.ns);
  cudaFreeHost(b.bad);
  cudaEventDestroy(b.e0);
  cudaEventDestroy(b.e1);
  cudaStreamDestroy(b.s);
  nvshmem_finalize();
  MPI_Finalize();
  return failed ? 1 : 0;
}
