// Device-API latencies (issue 23), one JSON line per figure on rank 0:
//   dev_barrier      in-kernel barrier, us per barrier over N barriers
//   dev_signal_wait  in-kernel signal -> wait, one way (ping-pong / 2)
//   host_barrier     vmmipc_win_barrier on a stream, GPU us per barrier
//   host_signal_wait vmmipc_win_signal + vmmipc_win_wait ping-pong, one way
//   allreduce        the one-shot all-reduce of examples/allreduce_oneshot.cu
//                    (one kernel, two device barriers), 8 B to 64 KiB, and
//                    NCCL's ncclAllReduce as the anchor (dlopen'ed; NCCL
//                    refuses ranks that share a GPU: the row says skipped)
// The host rows run on the path VMMIPC_SYNC picks (the "path" field says
// which). Two ranks; on one GPU kernels of the ranks time-slice, so the
// in-kernel rows measure the scheduler, not the interconnect.
//   mpirun -np 2 vmmipc_device_bench [iterations]
#include <cuda_runtime.h>
#include <mpi.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vmmipc.h"
#include "vmmipc_device.cuh"

#define VMM(call)                                                                  \
  do {                                                                             \
    if ((call) != VMMIPC_SUCCESS) {                                                \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                \
    }                                                                              \
  } while (0)

__global__ void k_barriers(vmmipc_win_device_t w, int n, int *bad) {
  for (int i = 0; i < n; i++)
    if (vmmipc_dev_barrier(&w, 0) && threadIdx.x == 0) atomicAdd(bad, 1);
}

// Rank 0 signals 2i+1 and waits for 2i+2; rank 1 answers.
__global__ void k_pingpong(vmmipc_win_device_t w, int peer, int n, int *bad) {
  for (int i = 0; i < n; i++) {
    uint64_t v = 2 * (uint64_t)i + 1;
    if (w.rank == 0) {
      vmmipc_dev_signal(&w, peer, v);
      if (vmmipc_dev_wait(&w, peer, v + 1, 0)) atomicAdd(bad, 1);
    } else {
      if (vmmipc_dev_wait(&w, peer, v, 0)) atomicAdd(bad, 1);
      vmmipc_dev_signal(&w, peer, v + 1);
    }
  }
}

__global__ void k_allreduce(vmmipc_win_device_t w, const float *in, float *out, int n, int *bad) {
  float *mine = static_cast<float *>(vmmipc_dev_ptr(&w, w.rank));
  for (int i = threadIdx.x; i < n; i += blockDim.x) mine[i] = in[i];
  if (vmmipc_dev_barrier(&w, 0) && threadIdx.x == 0) atomicAdd(bad, 1);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float s = 0;
    for (int q = 0; q < w.nranks; q++) s += static_cast<const float *>(vmmipc_dev_ptr(&w, q))[i];
    out[i] = s;
  }
  if (vmmipc_dev_barrier(&w, 0) && threadIdx.x == 0) atomicAdd(bad, 1);
}

// NCCL, loaded at run time: only the few ABI types needed are declared.
struct Nccl {
  void *lib = nullptr, *comm = nullptr;
  int (*GetUniqueId)(void *) = nullptr;
  int (*CommInitRank)(void **, int, ...) = nullptr; // (comm*, nranks, ncclUniqueId by value, rank)
  int (*AllReduce)(const void *, void *, size_t, int, int, void *, cudaStream_t) = nullptr;
  int (*CommDestroy)(void *) = nullptr;
};
struct NcclId {
  char internal[128];
};

static const char *nccl_init(Nccl *x, int rank, int size) {
  x->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!x->lib) return "libnccl.so.2 not found";
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
  int rc = fn(&x->comm, size, id, rank), all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (all) return "ncclCommInitRank failed (ranks sharing a GPU are refused)";
  return nullptr;
}

static void row(const char *what, const char *path, int n, double us) {
  std::printf("{\"bench\": \"device\", \"row\": \"%s\", \"path\": \"%s\", \"iterations\": %d, \"us\": %.3f}\n", what,
              path, n, us);
  std::fflush(stdout);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, ndev = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "vmmipc_device_bench: run with two ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  cudaGetDeviceCount(&ndev);
  cudaSetDevice(rank % ndev);
  cudaFree(nullptr);
  vmmipc_comm_t comm;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, nullptr, nullptr, &win));
  vmmipc_win_device_t dw;
  VMM(vmmipc_win_device(win, &dw));
  int *bad = nullptr;
  cudaMallocManaged(&bad, sizeof(int));
  *bad = 0;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int peer = 1 - rank;
  float ms = 0;
  // In-kernel rows: one warm-up launch, then timed by events around the kernel.
  for (int pass = 0; pass < 2; pass++) {
    MPI_Barrier(MPI_COMM_WORLD);
    cudaEventRecord(e0, s);
    k_barriers<<<1, 32, 0, s>>>(dw, pass ? n : 10, bad);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
  }
  cudaEventElapsedTime(&ms, e0, e1);
  if (rank == 0) row("dev_barrier", "device", n, 1e3 * ms / n);
  for (int pass = 0; pass < 2; pass++) {
    MPI_Barrier(MPI_COMM_WORLD);
    cudaEventRecord(e0, s);
    k_pingpong<<<1, 1, 0, s>>>(dw, peer, pass ? n : 10, bad);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    // The next pass starts its values again at 1: fresh window slots.
    if (!pass) {
      VMM(vmmipc_win_free(win));
      VMM(vmmipc_allgather_map(comm, nullptr, nullptr, &win));
      VMM(vmmipc_win_device(win, &dw));
    }
  }
  cudaEventElapsedTime(&ms, e0, e1);
  if (rank == 0) row("dev_signal_wait", "device", n, 1e3 * ms / n / 2);
  // Host-API rows, on the path VMMIPC_SYNC picks.
  const int hn = n < 2000 ? n : 2000;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 10; i++) VMM(vmmipc_win_barrier(win, s));
  cudaStreamSynchronize(s);
  MPI_Barrier(MPI_COMM_WORLD);
  cudaEventRecord(e0, s);
  for (int i = 0; i < hn; i++) VMM(vmmipc_win_barrier(win, s));
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  cudaEventElapsedTime(&ms, e0, e1);
  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  VMM(vmmipc_win_device_status(win, &st));
  const char *path = st.kernel_calls ? "kernel" : "memops";
  if (rank == 0) row("host_barrier", path, hn, 1e3 * ms / hn);
  MPI_Barrier(MPI_COMM_WORLD);
  cudaEventRecord(e0, s);
  for (int i = 0; i < hn; i++) {
    uint64_t v = 2 * (uint64_t)i + 1;
    if (rank == 0) {
      VMM(vmmipc_win_signal(win, peer, v, s));
      VMM(vmmipc_win_wait(win, peer, v + 1, s));
    } else {
      VMM(vmmipc_win_wait(win, peer, v, s));
      VMM(vmmipc_win_signal(win, peer, v + 1, s));
    }
  }
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  cudaEventElapsedTime(&ms, e0, e1);
  if (rank == 0) row("host_signal_wait", path, hn, 1e3 * ms / hn / 2);
  // One-shot all-reduce vs NCCL, 8 B to 64 KiB of floats.
  const int ar_iters = n < 200 ? n : 200, max_n = 16384;
  vmmipc_buf_t slice;
  VMM(vmmipc_alloc(max_n * sizeof(float), &slice));
  vmmipc_win_t arw;
  VMM(vmmipc_allgather_map(comm, slice, nullptr, &arw));
  vmmipc_win_device_t ad;
  VMM(vmmipc_win_device(arw, &ad));
  float *in = nullptr, *out = nullptr;
  cudaMalloc(&in, max_n * sizeof(float));
  cudaMalloc(&out, max_n * sizeof(float));
  cudaMemset(in, 0, max_n * sizeof(float));
  Nccl nc;
  const char *skip = nccl_init(&nc, rank, size);
  for (int count : {2, 16, 128, 1024, 8192, max_n}) { // 8 B to 64 KiB
    for (int method = 0; method < 2; method++) {
      if (method == 1 && skip) {
        if (rank == 0)
          std::printf("{\"bench\": \"device\", \"row\": \"allreduce\", \"path\": \"nccl\", \"bytes\": %d, "
                      "\"skipped\": \"%s\"}\n", count * 4, skip);
        continue;
      }
      for (int pass = 0; pass < 2; pass++) { // warm-up, then timed
        MPI_Barrier(MPI_COMM_WORLD);
        cudaEventRecord(e0, s);
        for (int i = 0; i < (pass ? ar_iters : 3); i++) {
          if (method == 0)
            k_allreduce<<<1, 512, 0, s>>>(ad, in, out, count, bad);
          else
            nc.AllReduce(in, out, count, 7 /* ncclFloat32 */, 0 /* ncclSum */, nc.comm, s);
        }
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
      }
      cudaEventElapsedTime(&ms, e0, e1);
      if (rank == 0)
        std::printf("{\"bench\": \"device\", \"row\": \"allreduce\", \"path\": \"%s\", \"bytes\": %d, "
                    "\"iterations\": %d, \"us\": %.3f}\n",
                    method ? "nccl" : "vmmipc_oneshot", count * 4, ar_iters, 1e3 * ms / ar_iters);
      std::fflush(stdout);
    }
  }
  if (nc.comm) nc.CommDestroy(nc.comm);
  cudaFree(in);
  cudaFree(out);
  VMM(vmmipc_win_free(arw));
  VMM(vmmipc_buf_free(slice));

  VMM(vmmipc_win_device_status(win, &st));
  int all = 0;
  MPI_Allreduce(bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (all || st.state) std::fprintf(stderr, "rank %d: %d device waits failed, record %d\n", rank, all, st.state);
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  return all ? 1 : 0;
}
