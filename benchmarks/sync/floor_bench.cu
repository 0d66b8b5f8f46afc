// The raw floors of signalling between two processes (issue 30): how fast a
// one-way signal can be, by the memory operations used, on VMM memory
// shared through POSIX fds (each rank's 2 MiB buffer of an allgather_map
// window; the library is not on the timed path). Ranks 0 and 1 ping-pong;
// other ranks only hold their GPU context (as under MPS with N ranks).
//
// Every kernel row writes an 8-byte payload into the peer's buffer with a
// plain store before the flag, and the waiter reads it with a plain load
// after its wait and checks it, so a variant that is fast but does not
// order the data shows as MISMATCH when the hardware reorders it (an "ok"
// does not prove an unordered variant ordered); the same variant is also
// timed without the payload (bytes 0). Timing: inside the kernel with
// %globaltimer, after one untimed round trip, one way = round trip / 2; a
// batch is the slower of the two ranks; median over --reps batches.
//
// Rows (path "kernel" unless said):
//   floor.sys.release_acquire  st.release.sys / ld.acquire.sys
//   floor.sys.fence_release    __threadfence_system + st.release.sys / ld.acquire.sys (vmmipc_dev_signal today)
//   floor.sys.relaxed_fence    fence.acq_rel.sys + st.relaxed.sys / ld.relaxed.sys + fence.acq_rel.sys
//   floor.gpu.release_acquire  st.release.gpu / ld.acquire.gpu (the narrowest scope for peers on one GPU)
//   floor.gpu.fence_release    __threadfence + st.release.gpu / ld.acquire.gpu
//   floor.gpu.relaxed_fence    fence.acq_rel.gpu + st.relaxed.gpu / ld.relaxed.gpu + fence.acq_rel.gpu
//   floor.volatile.threadfence __threadfence + volatile store / volatile load + __threadfence
//   floor.volatile.none        volatile store / volatile load, no fence (NVSHMEM's signal_op SET on P2P)
//   floor.gpu.release_relaxed  st.release.gpu / ld.relaxed.gpu polls, one fence.acq_rel.gpu once seen
//   floor.gpu.release_volatile st.release.gpu / volatile polls, one fence.acq_rel.gpu once seen
//   floor.gpu.release_only     st.release.gpu / volatile polls, no fence: what the writer's release
//                              costs alone (not ordered for the reader: its payload check may fail)
//   floor.gpu.acquire_only     volatile store, no fence / ld.acquire.gpu: what the reader's acquire
//                              costs alone (not ordered for the writer)
//   floor.memops               cuStreamWriteValue64 / cuStreamWaitValue64 GEQ, host-issued (path memops)
//   floor.memops.checked       the same with a check kernel after every wait (its data verdict)
//   floor.mixed_stream.{gpu,sys}  rank 0 a kernel at that scope, rank 1 stream memops + check kernel:
//                              does a device signal order the payload for a stream wait, and back?
//   floor.mixed_host.{gpu,sys} rank 0 a kernel, rank 1 the host polling with copies (as
//                              vmmipc_win_wait_host) and answering with stream memops
//
//   mpirun -np 2 vmmipc_floor_bench [--iters 2000] [--reps 10] [--memops-iters 2000]
//          [--check-iters 200] [--timeout-s 20] [--rows kernel,memops,mixed] [--json FILE]
#include <cuda.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/devbench.cuh"
#include "vmmipc.h"

using devbench::Row;

#define VMM(call)                                                                   \
  do {                                                                              \
    if ((call) != VMMIPC_SUCCESS) devbench::die("%s: %s", #call, vmmipc_last_error()); \
  } while (0)

enum Variant { SYS_RA, SYS_FENCE_RA, SYS_RELAXED_FENCE, GPU_RA, GPU_FENCE_RA, GPU_RELAXED_FENCE, VOL_FENCE, VOL_NONE,
               GPU_REL_RELAXED, GPU_REL_VOLATILE, GPU_REL_ONLY, GPU_ACQ_ONLY, NVARIANTS };

static const char *const kName[NVARIANTS] = {
    "floor.sys.release_acquire", "floor.sys.fence_release", "floor.sys.relaxed_fence",   "floor.gpu.release_acquire",
    "floor.gpu.fence_release",   "floor.gpu.relaxed_fence", "floor.volatile.threadfence", "floor.volatile.none",
    "floor.gpu.release_relaxed", "floor.gpu.release_volatile", "floor.gpu.release_only",    "floor.gpu.acquire_only"};
static const char *const kOps[NVARIANTS] = {
    "st.release.sys / ld.acquire.sys",
    "__threadfence_system + st.release.sys / ld.acquire.sys",
    "fence.acq_rel.sys + st.relaxed.sys / ld.relaxed.sys + fence.acq_rel.sys",
    "st.release.gpu / ld.acquire.gpu",
    "__threadfence + st.release.gpu / ld.acquire.gpu",
    "fence.acq_rel.gpu + st.relaxed.gpu / ld.relaxed.gpu + fence.acq_rel.gpu",
    "__threadfence + volatile store / volatile load + __threadfence",
    "volatile store / volatile load, no fence",
    "st.release.gpu / ld.relaxed.gpu + fence.acq_rel.gpu once seen",
    "st.release.gpu / volatile load + fence.acq_rel.gpu once seen",
    "st.release.gpu / volatile load, no fence (the reader is not ordered)",
    "volatile store, no fence / ld.acquire.gpu (the writer is not ordered)"};

// The variants that do not order the payload by construction: a MISMATCH
// there is the row's finding, not a failure of the run.
static bool unordered(int v) { return v == VOL_NONE || v == GPU_REL_ONLY || v == GPU_ACQ_ONLY; }

// Slots in each rank's buffer: a flag and, 4 KiB on, its payload.
static constexpr size_t kSlot = 8192, kPayloadOff = 4096;
enum { SLOT_MEMOPS = NVARIANTS, SLOT_MIXED_STREAM = NVARIANTS + 1, SLOT_MIXED_HOST = NVARIANTS + 3, NSLOTS = NVARIANTS + 5 };

__host__ __device__ inline uint64_t tag(uint64_t v) { return v * 0x9e3779b97f4a7c15ull + 1; }

template <int V>
__device__ __forceinline__ void store_flag(uint64_t *p, uint64_t v) {
  if constexpr (V == SYS_RA) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else if constexpr (V == SYS_FENCE_RA) {
    __threadfence_system();
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else if constexpr (V == SYS_RELAXED_FENCE) {
    asm volatile("fence.acq_rel.sys;\n\tst.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else if constexpr (V == GPU_RA || V == GPU_REL_RELAXED || V == GPU_REL_VOLATILE || V == GPU_REL_ONLY) {
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else if constexpr (V == GPU_FENCE_RA) {
    __threadfence();
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else if constexpr (V == GPU_RELAXED_FENCE) {
    asm volatile("fence.acq_rel.gpu;\n\tst.relaxed.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else if constexpr (V == VOL_FENCE) {
    __threadfence();
    *reinterpret_cast<volatile uint64_t *>(p) = v;
  } else {
    asm volatile("" ::: "memory"); // the compiler keeps the payload store first; the hardware is not asked to
    *reinterpret_cast<volatile uint64_t *>(p) = v;
  }
}

template <int V>
__device__ __forceinline__ uint64_t load_flag(const uint64_t *p) {
  uint64_t v;
  if constexpr (V == SYS_RA || V == SYS_FENCE_RA) {
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (V == SYS_RELAXED_FENCE) {
    asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (V == GPU_RA || V == GPU_FENCE_RA || V == GPU_ACQ_ONLY) {
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (V == GPU_RELAXED_FENCE || V == GPU_REL_RELAXED) {
    asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else {
    v = *reinterpret_cast<const volatile uint64_t *>(p);
  }
  return v;
}

template <int V>
__device__ __forceinline__ void after_wait() {
  if constexpr (V == SYS_RELAXED_FENCE) {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
  } else if constexpr (V == GPU_RELAXED_FENCE || V == GPU_REL_RELAXED || V == GPU_REL_VOLATILE) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  } else if constexpr (V == VOL_FENCE) {
    __threadfence();
  } else {
    asm volatile("" ::: "memory"); // acquire variants: already ordered; volatile.none: the compiler only
  }
}

// Spins until *p >= v; false at the deadline (checked every 256 polls).
template <int V>
__device__ __forceinline__ bool wait_ge(const uint64_t *p, uint64_t v, uint64_t deadline) {
  for (unsigned k = 1;; k++) {
    if (load_flag<V>(p) >= v) {
      after_wait<V>();
      return true;
    }
    if ((k & 255u) == 0 && devbench::globaltimer() > deadline) return false;
  }
}

struct Out {
  unsigned long long ns, bad, timeouts;
};

// One round trip untimed, then n timed. The initiator sends base+2i+1 and
// waits for base+2i+2; the responder the other way round.
template <int V>
__global__ void k_pingpong(uint64_t *in, uint64_t *out, int initiator, uint64_t base, int n, int payload,
                           uint64_t timeout_ns, Out *res) {
  const uint64_t *in_pl = in + kPayloadOff / 8;
  uint64_t *out_pl = out + kPayloadOff / 8;
  const uint64_t deadline = devbench::globaltimer() + timeout_ns;
  unsigned long long bad = 0, timeouts = 0;
  uint64_t t0 = 0;
  for (int i = 0; i <= n; i++) {
    if (i == 1) t0 = devbench::globaltimer();
    const uint64_t a = base + 2 * (uint64_t)i + 1, b = a + 1;
    const uint64_t send = initiator ? a : b, recv = initiator ? b : a;
    if (initiator) {
      if (payload) *out_pl = tag(send);
      store_flag<V>(out, send);
    }
    if (!wait_ge<V>(in, recv, deadline)) {
      timeouts = 1;
      break;
    }
    if (payload && *in_pl != tag(recv)) bad++;
    if (!initiator) {
      if (payload) *out_pl = tag(send);
      store_flag<V>(out, send);
    }
  }
  res->ns = devbench::globaltimer() - t0;
  res->bad = bad;
  res->timeouts = timeouts;
}

__global__ void k_check(const uint64_t *payload, uint64_t want, unsigned long long *bad) {
  if (*reinterpret_cast<const volatile uint64_t *>(payload) != want) atomicAdd(bad, 1ull);
}

typedef CUresult (*write64_t)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*wait64_t)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

struct Ctx {
  int rank = 0, size = 0;
  uint64_t *own = nullptr, *peer = nullptr; // flag slot 0 of this rank's buffer and of the peer's (ranks 0, 1)
  uint64_t base[NSLOTS] = {0};
  cudaStream_t s = nullptr, s2 = nullptr;
  Out *out = nullptr; // host-mapped
  unsigned long long *bad = nullptr; // device
  write64_t write64 = nullptr;
  wait64_t wait64 = nullptr;
  uint64_t timeout_ns = 0;
  uint64_t *slot(uint64_t *b, int k) const { return b + k * (kSlot / 8); }
};

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

template <int V>
static void launch(Ctx &c, int slot, int initiator, int n, int payload) {
  k_pingpong<V><<<1, 1, 0, c.s>>>(c.slot(c.own, slot), c.slot(c.peer, slot), initiator, c.base[slot], n, payload,
                                   c.timeout_ns, c.out);
  DB_CUDA(cudaGetLastError());
}

static void launch_variant(Ctx &c, int v, int slot, int initiator, int n, int payload) {
  switch (v) {
    case SYS_RA: launch<SYS_RA>(c, slot, initiator, n, payload); break;
    case SYS_FENCE_RA: launch<SYS_FENCE_RA>(c, slot, initiator, n, payload); break;
    case SYS_RELAXED_FENCE: launch<SYS_RELAXED_FENCE>(c, slot, initiator, n, payload); break;
    case GPU_RA: launch<GPU_RA>(c, slot, initiator, n, payload); break;
    case GPU_FENCE_RA: launch<GPU_FENCE_RA>(c, slot, initiator, n, payload); break;
    case GPU_RELAXED_FENCE: launch<GPU_RELAXED_FENCE>(c, slot, initiator, n, payload); break;
    case VOL_FENCE: launch<VOL_FENCE>(c, slot, initiator, n, payload); break;
    case GPU_REL_RELAXED: launch<GPU_REL_RELAXED>(c, slot, initiator, n, payload); break;
    case GPU_REL_VOLATILE: launch<GPU_REL_VOLATILE>(c, slot, initiator, n, payload); break;
    case GPU_REL_ONLY: launch<GPU_REL_ONLY>(c, slot, initiator, n, payload); break;
    case GPU_ACQ_ONLY: launch<GPU_ACQ_ONLY>(c, slot, initiator, n, payload); break;
    default: launch<VOL_NONE>(c, slot, initiator, n, payload); break;
  }
}

// Batch results of ranks 0 and 1 into one sample: the slower rank's one way.
static void collect(Ctx &c, bool ran, int n, Row &row, long &timeouts) {
  double ns = ran ? (double)c.out->ns : 0;
  long bad = ran ? (long)c.out->bad : 0, to = ran ? (long)c.out->timeouts : 0;
  double worst = devbench::max_over_ranks(ns);
  row.mismatches += devbench::sum_over_ranks(bad);
  timeouts += devbench::sum_over_ranks(to);
  row.samples.push_back(worst * 1e-9 / n / 2);
}

static void finish_row(Row &row, long timeouts, bool checked) {
  if (timeouts) {
    row.skipped = "a wait passed its deadline (" + std::to_string(timeouts) + " batch(es)); no figure";
    row.samples.clear();
    return;
  }
  if (checked) row.data = row.mismatches ? devbench::MISMATCH : devbench::OK;
}

static Row kernel_row(Ctx &c, int v, int payload, int n, int reps) {
  Row row;
  row.name = kName[v];
  row.what = "one way (round trip / 2)";
  row.path = "kernel";
  row.bytes = payload ? 8 : 0;
  row.iters = n;
  row.note = kOps[v];
  long timeouts = 0;
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    const bool ran = c.rank < 2;
    if (ran) {
      launch_variant(c, v, v, c.rank == 0, n, payload);
      DB_CUDA(cudaStreamSynchronize(c.s));
    }
    c.base[v] += 2 * (uint64_t)(n + 1);
    collect(c, ran, n, row, timeouts);
  }
  finish_row(row, timeouts, payload != 0);
  if (unordered(v) && row.data == devbench::MISMATCH) {
    row.note += "; MISMATCH expected: unordered by construction";
    row.expected = true;
  }
  return row;
}

// The stream side of a ping-pong, n + 1 round trips from base (the first
// untimed), enqueued at once; check: a kernel compares the payload after
// every wait. Events around the timed part.
static void memops_side(Ctx &c, int slot, int initiator, int n, bool check, cudaEvent_t e0, cudaEvent_t e1) {
  uint64_t *in = c.slot(c.own, slot), *out = c.slot(c.peer, slot);
  uint64_t *in_pl = in + kPayloadOff / 8, *out_pl = out + kPayloadOff / 8;
  const uint64_t base = c.base[slot];
  for (int i = 0; i <= n; i++) {
    const uint64_t a = base + 2 * (uint64_t)i + 1, b = a + 1;
    const uint64_t send = initiator ? a : b, recv = initiator ? b : a;
    if (initiator) {
      if (c.write64(c.s, dptr(out_pl), tag(send), CU_STREAM_WRITE_VALUE_DEFAULT) ||
          c.write64(c.s, dptr(out), send, CU_STREAM_WRITE_VALUE_DEFAULT))
        devbench::die("cuStreamWriteValue64 failed");
    }
    if (c.wait64(c.s, dptr(in), recv, CU_STREAM_WAIT_VALUE_GEQ)) devbench::die("cuStreamWaitValue64 failed");
    if (check) k_check<<<1, 1, 0, c.s>>>(in_pl, tag(recv), c.bad);
    if (!initiator) {
      if (c.write64(c.s, dptr(out_pl), tag(send), CU_STREAM_WRITE_VALUE_DEFAULT) ||
          c.write64(c.s, dptr(out), send, CU_STREAM_WRITE_VALUE_DEFAULT))
        devbench::die("cuStreamWriteValue64 failed");
    }
    if (i == 0 && e0) DB_CUDA(cudaEventRecord(e0, c.s));
  }
  if (e1) DB_CUDA(cudaEventRecord(e1, c.s));
}

static long take_bad(Ctx &c) {
  unsigned long long b = 0;
  DB_CUDA(cudaMemcpy(&b, c.bad, sizeof b, cudaMemcpyDeviceToHost));
  DB_CUDA(cudaMemset(c.bad, 0, sizeof b));
  return devbench::sum_over_ranks((long)b);
}

static Row memops_row(Ctx &c, int n, int reps, bool check) {
  Row row;
  row.name = check ? "floor.memops.checked" : "floor.memops";
  row.what = "one way (round trip / 2)";
  row.path = "memops";
  row.bytes = 8;
  row.iters = n;
  row.note = check ? "cuStreamWriteValue64 x2 / cuStreamWaitValue64 GEQ, host-issued, a check kernel after each wait"
                   : "cuStreamWriteValue64 x2 (payload, flag) / cuStreamWaitValue64 GEQ, host-issued";
  cudaEvent_t e0, e1;
  DB_CUDA(cudaEventCreate(&e0));
  DB_CUDA(cudaEventCreate(&e1));
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    float ms = 0;
    if (c.rank < 2) {
      memops_side(c, SLOT_MEMOPS, c.rank == 0, n, check, e0, e1);
      DB_CUDA(cudaEventSynchronize(e1));
      DB_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    }
    c.base[SLOT_MEMOPS] += 2 * (uint64_t)(n + 1);
    row.samples.push_back(devbench::max_over_ranks(ms * 1e-3) / n / 2);
    if (check) row.mismatches += take_bad(c);
  }
  if (check) row.data = row.mismatches ? devbench::MISMATCH : devbench::OK;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return row;
}

// Rank 0: a kernel at the variant's scope; rank 1: stream memops with a check kernel.
static Row mixed_stream_row(Ctx &c, int v, int slot, int n, int reps) {
  Row row;
  row.name = std::string("floor.mixed_stream.") + (v == GPU_RA ? "gpu" : "sys");
  row.what = "one way (round trip / 2)";
  row.path = "kernel+memops";
  row.bytes = 8;
  row.iters = n;
  row.note = std::string("rank 0: ") + kOps[v] + "; rank 1: cuStreamWaitValue64 + check kernel, cuStreamWriteValue64 x2";
  long timeouts = 0;
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (c.rank == 0) {
      launch_variant(c, v, slot, 1, n, 1);
    } else if (c.rank == 1) {
      memops_side(c, slot, 0, n, true, nullptr, nullptr);
    }
    if (c.rank < 2) DB_CUDA(cudaStreamSynchronize(c.s));
    c.base[slot] += 2 * (uint64_t)(n + 1);
    collect(c, c.rank == 0, n, row, timeouts);
    row.mismatches += take_bad(c);
  }
  finish_row(row, timeouts, true);
  return row;
}

// Reads one word of device memory as vmmipc_win_wait_host does: a copy on
// a private stream, then a synchronize.
static uint64_t host_read(Ctx &c, const uint64_t *p, uint64_t *pinned) {
  DB_CUDA(cudaMemcpyAsync(pinned, p, sizeof *pinned, cudaMemcpyDeviceToHost, c.s2));
  DB_CUDA(cudaStreamSynchronize(c.s2));
  return *pinned;
}

static Row mixed_host_row(Ctx &c, int v, int slot, int n, int reps) {
  Row row;
  row.name = std::string("floor.mixed_host.") + (v == GPU_RA ? "gpu" : "sys");
  row.what = "one way (round trip / 2)";
  row.path = "kernel+host";
  row.bytes = 8;
  row.iters = n;
  row.note = std::string("rank 0: ") + kOps[v] + "; rank 1: the host polls with copies, checks, answers with memops";
  uint64_t *pinned = nullptr;
  DB_CUDA(cudaMallocHost(&pinned, sizeof *pinned));
  long timeouts = 0;
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    long bad = 0, late = 0;
    if (c.rank == 0) {
      launch_variant(c, v, slot, 1, n, 1);
      DB_CUDA(cudaStreamSynchronize(c.s));
    } else if (c.rank == 1) {
      uint64_t *in = c.slot(c.own, slot), *out = c.slot(c.peer, slot);
      const double deadline = MPI_Wtime() + (double)c.timeout_ns * 1e-9;
      for (int i = 0; i <= n && !late; i++) {
        const uint64_t a = c.base[slot] + 2 * (uint64_t)i + 1;
        while (host_read(c, in, pinned) < a)
          if (MPI_Wtime() > deadline) {
            late = 1;
            break;
          }
        if (late) break;
        if (host_read(c, in + kPayloadOff / 8, pinned) != tag(a)) bad++;
        if (c.write64(c.s, dptr(out + kPayloadOff / 8), tag(a + 1), CU_STREAM_WRITE_VALUE_DEFAULT) ||
            c.write64(c.s, dptr(out), a + 1, CU_STREAM_WRITE_VALUE_DEFAULT))
          devbench::die("cuStreamWriteValue64 failed");
      }
      DB_CUDA(cudaStreamSynchronize(c.s));
    }
    c.base[slot] += 2 * (uint64_t)(n + 1);
    row.mismatches += devbench::sum_over_ranks(bad);
    timeouts += devbench::sum_over_ranks(late);
    collect(c, c.rank == 0, n, row, timeouts);
  }
  cudaFreeHost(pinned);
  finish_row(row, timeouts, true);
  return row;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  devbench::Args args{argc, argv};
  Ctx c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size);
  if (c.size < 2) devbench::die("vmmipc_floor_bench: run with two or more ranks (ranks 0 and 1 ping-pong)");
  const int n = (int)args.num("iters", 2000), reps = (int)args.num("reps", 10);
  const int mn = (int)args.num("memops-iters", 2000), cn = (int)args.num("check-iters", 200);
  c.timeout_ns = (uint64_t)args.num("timeout-s", 20) * 1000000000ull;
  if (n < 1 || reps < 1 || mn < 1 || cn < 1) devbench::die("--iters, --reps, --memops-iters, --check-iters: at least 1");

  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &local);
  int lrank = 0, ndev = 0;
  MPI_Comm_rank(local, &lrank);
  DB_CUDA(cudaGetDeviceCount(&ndev));
  DB_CUDA(cudaSetDevice(lrank % ndev));
  DB_CUDA(cudaFree(nullptr));
  devbench::Report rep("vmmipc_floor_bench", argc, argv);
  rep.devices();
  rep.config("iters", std::to_string(n));
  rep.config("reps", std::to_string(reps));
  rep.config("memops_iters", std::to_string(mn));
  rep.config("check_iters", std::to_string(cn));
  rep.config("pair", "[0, 1]");

  cudaDriverEntryPointQueryResult q;
  void *fw = nullptr, *fwait = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fw, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      !fw || cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &fwait, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      !fwait)
    devbench::die("the driver has no cuStreamWriteValue64 / cuStreamWaitValue64");
  c.write64 = reinterpret_cast<write64_t>(fw);
  c.wait64 = reinterpret_cast<wait64_t>(fwait);

  // The memory: each rank's 2 MiB VMM buffer, exported as a POSIX fd and
  // mapped by every peer (vmmipc_allgather_map); zeroed before any use.
  vmmipc_comm_t comm;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_buf_t buf;
  VMM(vmmipc_alloc(2u << 20, &buf));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, buf, nullptr, &win));
  void *own = nullptr, *peer = nullptr;
  VMM(vmmipc_win_query(win, c.rank, &own, nullptr));
  if (c.rank < 2) VMM(vmmipc_win_query(win, 1 - c.rank, &peer, nullptr));
  c.own = static_cast<uint64_t *>(own);
  c.peer = static_cast<uint64_t *>(peer);
  DB_CUDA(cudaMemset(own, 0, NSLOTS * kSlot));
  DB_CUDA(cudaDeviceSynchronize());
  DB_CUDA(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
  DB_CUDA(cudaStreamCreateWithFlags(&c.s2, cudaStreamNonBlocking));
  DB_CUDA(cudaHostAlloc(&c.out, sizeof *c.out, cudaHostAllocMapped));
  DB_CUDA(cudaMalloc(&c.bad, sizeof *c.bad));
  DB_CUDA(cudaMemset(c.bad, 0, sizeof *c.bad));
  MPI_Barrier(MPI_COMM_WORLD);

  if (args.has("rows", "kernel"))
    for (int v = 0; v < NVARIANTS; v++) {
      rep.add(kernel_row(c, v, 0, n, reps));
      rep.add(kernel_row(c, v, 1, n, reps));
    }
  if (args.has("rows", "memops")) {
    rep.add(memops_row(c, mn, reps, false));
    rep.add(memops_row(c, cn, reps < 3 ? reps : 3, true));
  }
  if (args.has("rows", "mixed")) {
    rep.add(mixed_stream_row(c, GPU_RA, SLOT_MIXED_STREAM, cn, reps < 3 ? reps : 3));
    rep.add(mixed_stream_row(c, SYS_RA, SLOT_MIXED_STREAM + 1, cn, reps < 3 ? reps : 3));
    rep.add(mixed_host_row(c, GPU_RA, SLOT_MIXED_HOST, cn < 100 ? cn : 100, reps < 3 ? reps : 3));
    rep.add(mixed_host_row(c, SYS_RA, SLOT_MIXED_HOST + 1, cn < 100 ? cn : 100, reps < 3 ? reps : 3));
  }
  rep.finish();
  int failed = rep.failures();
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);

  DB_CUDA(cudaStreamSynchronize(c.s));
  cudaFree(c.bad);
  cudaFreeHost(c.out);
  cudaStreamDestroy(c.s);
  cudaStreamDestroy(c.s2);
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_buf_free(buf));
  VMM(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  // A MISMATCH on a variant that claims to order the data (or on a memops
  // or mixed row) fails the run: exit status 3, so that scripts flag it.
  return failed ? 3 : 0;
}
