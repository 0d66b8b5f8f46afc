// The device API on a GPU (ctest label "gpu", real driver only): kernels
// that signal, wait and pass barriers on an allgather_map window, checked
// on data and on result codes. Needs two or more ranks on one node; on one
// GPU the ranks' kernels time-slice, so timeouts are generous.
//   ring      each kernel writes a block into its right neighbour's slice
//             and signals; the neighbour waits and checks every word
//   barriers  VMMIPC_GPU_BARRIERS (default 10000; 1000 where ranks share a
//             GPU without MPS, each barrier a few 2.2 ms time slices) device
//             barriers, none times out; before each, every thread writes a word into the right
//             neighbour's buffer, after it checks one its left neighbour's
//             block wrote (another thread's)
//   timeout   a wait nobody satisfies times out; the host sees the record
//   mixed     a host signal satisfies a device wait; a device signal after
//             a whole block's writes satisfies a host wait and a stream
//             wait, and the data is checked after each (host and kernel)
// Prints one line per check; exits non-zero if any failed on any rank.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu_test.h"
#include "vmmipc.h"
#include "vmmipc_device.cuh"

static const uint64_t kTimeout = 60ull * 1000000000ull; // 60 s: ranks time-slice on one GPU

__host__ __device__ uint64_t word(int it, int from, int i) {
  return (uint64_t)it << 40 ^ (uint64_t)from << 32 ^ (uint64_t)i * 0x9e3779b9u;
}

// One iteration of the ring, one block: wait for the right neighbour's
// ack of the last block, write the block, signal; wait for the left's
// block, check it, ack it. Data is signalled as 2 it - 1 and acks as 2 it,
// so that with two ranks (left == right, one slot) values still only grow.
__global__ void ring_step(vmmipc_win_device_t w, int left, int right, int it, int words, int *res) {
  __shared__ int ok;
  if (threadIdx.x == 0) ok = it == 1 ? VMMIPC_DEV_OK : vmmipc_dev_wait(&w, right, 2 * (uint64_t)it - 2, kTimeout);
  __syncthreads();
  if (ok != VMMIPC_DEV_OK) {
    if (threadIdx.x == 0) res[0] = 100 + ok;
    return;
  }
  uint64_t *dst = static_cast<uint64_t *>(vmmipc_dev_ptr(&w, right));
  for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = word(it, w.rank, i);
  __syncthreads();
  if (threadIdx.x == 0) {
    vmmipc_dev_signal(&w, right, 2 * (uint64_t)it - 1);
    ok = vmmipc_dev_wait(&w, left, 2 * (uint64_t)it - 1, kTimeout);
  }
  __syncthreads();
  if (ok != VMMIPC_DEV_OK) {
    if (threadIdx.x == 0) res[0] = 200 + ok;
    return;
  }
  const uint64_t *mine = static_cast<const uint64_t *>(vmmipc_dev_ptr(&w, w.rank));
  int bad = 0;
  for (int i = threadIdx.x; i < words; i += blockDim.x) bad += mine[i] != word(it, left, i);
  if (bad) atomicAdd(&res[1], bad);
  __syncthreads();
  if (threadIdx.x == 0) vmmipc_dev_signal(&w, left, 2 * (uint64_t)it); // ack: the block may be overwritten
}

// Barriers in pairs: words written before the first are read after it;
// nobody writes again before the second.
__global__ void barriers(vmmipc_win_device_t w, int left, int right, int count, int *res) {
  uint64_t *dst = static_cast<uint64_t *>(vmmipc_dev_ptr(&w, right));
  const uint64_t *mine = static_cast<const uint64_t *>(vmmipc_dev_ptr(&w, w.rank));
  const int t = threadIdx.x, other = (t + 1) % blockDim.x;
  for (int i = 0; i < count; i += 2) {
    dst[t] = word(i, w.rank, t);
    int r = vmmipc_dev_barrier(&w, kTimeout);
    if (r == VMMIPC_DEV_OK && mine[other] != word(i, left, other)) atomicAdd(&res[2], 1);
    if (r == VMMIPC_DEV_OK) r = vmmipc_dev_barrier(&w, kTimeout);
    if (r != VMMIPC_DEV_OK) {
      if (t == 0) {
        res[0] = r;
        res[1] = i;
      }
      return;
    }
  }
}

// One block writes `words` words into rank's buffer, then signals value.
__global__ void write_and_signal(vmmipc_win_device_t w, int rank, uint64_t value, int words, int tag) {
  uint64_t *dst = static_cast<uint64_t *>(vmmipc_dev_ptr(&w, rank));
  for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = word(tag, w.rank, i);
  __syncthreads();
  if (threadIdx.x == 0) vmmipc_dev_signal(&w, rank, value);
}

// Counts the words of this rank's buffer that are not what `from` wrote.
__global__ void check_words(vmmipc_win_device_t w, int from, int words, int tag, int *bad) {
  const uint64_t *mine = static_cast<const uint64_t *>(vmmipc_dev_ptr(&w, w.rank));
  int n = 0;
  for (int i = threadIdx.x; i < words; i += blockDim.x) n += mine[i] != word(tag, from, i);
  if (n) atomicAdd(bad, n);
}

__global__ void wait_one(vmmipc_win_device_t w, int rank, uint64_t value, uint64_t timeout_ns, int *res) {
  res[0] = vmmipc_dev_wait(&w, rank, value, timeout_ns);
}


int main(int argc, char **argv) {
  int size = 0;
  if (!GpuTestStart(&argc, &argv, "test_device_gpu", &size)) return 77;
  const int rank = rank_;
  // Time-slicing (ranks sharing a GPU, not all MPS clients): 10,000
  // barriers took 58 s at 2 ranks and over 60 s at 3 on an H100.
  int dev = 0, mps = 0, least_mps = 0;
  CUDA(cudaGetDevice(&dev));
  if (cudaDeviceGetAttribute(&mps, static_cast<cudaDeviceAttr>(133), dev) != cudaSuccess) mps = 0; // MPS enabled
  MPI_Allreduce(&mps, &least_mps, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  cudaUUID_t u{}, first{};
  cudaDeviceProp prop{};
  CUDA(cudaGetDeviceProperties(&prop, dev));
  u = prop.uuid;
  first = u;
  MPI_Bcast(&first, sizeof first, MPI_BYTE, 0, MPI_COMM_WORLD);
  int same = std::memcmp(&u, &first, sizeof u) == 0, all_same = 0;
  MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  const bool slices = all_same && !least_mps;
  const char *nb = std::getenv("VMMIPC_GPU_BARRIERS");
  const int nbarriers = nb && *nb ? std::atoi(nb) : slices ? 1000 : 10000;

  vmmipc_comm_t comm;
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &comm));
  const int words = 64 * 1024; // 512 KiB per block
  vmmipc_buf_t buf;
  VMM(vmmipc_alloc(words * sizeof(uint64_t), &buf));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, buf, nullptr, &win));
  vmmipc_win_device_t dw;
  VMM(vmmipc_win_device(win, &dw));
  int *res = nullptr;
  CUDA(cudaMallocManaged(&res, 4 * sizeof(int)));
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;

  // ring, 200 iterations
  std::memset(res, 0, 4 * sizeof(int));
  const int iters = 200;
  for (int it = 1; it <= iters; it++) ring_step<<<1, 512>>>(dw, left, right, it, words, res);
  SyncBounded(0, "ring");
  CHECK(res[0] == 0 && res[1] == 0, "ring: code %d, %d words wrong", res[0], res[1]);
  if (rank == 0) std::printf("ring: %d iterations of %d words checked\n", iters, words);
  MPI_Barrier(MPI_COMM_WORLD);

  // barriers
  std::memset(res, 0, 4 * sizeof(int));
  barriers<<<1, 128>>>(dw, left, right, nbarriers, res);
  SyncBounded(0, "barriers");
  CHECK(res[0] == 0, "barriers: code %d at barrier %d", res[0], res[1]);
  CHECK(res[2] == 0, "barriers: %d words written before a barrier were not seen after it", res[2]);
  if (rank == 0) std::printf("barriers: %d device barriers, a word per thread checked after every other one\n", nbarriers);
  MPI_Barrier(MPI_COMM_WORLD);

  // timeout: rank 0 waits for a value rank 1 never signals
  if (rank == 0) {
    res[0] = -1;
    wait_one<<<1, 1>>>(dw, 1, 1ull << 40, 50ull * 1000000ull, res);
    SyncBounded(0, "timeout");
    CHECK(res[0] == VMMIPC_DEV_TIMEOUT, "timeout: the wait returned %d", res[0]);
    CHECK(vmmipc_win_signal(win, 1, 1, nullptr) == VMMIPC_ERR_TIMEOUT, "the next host call succeeded");
    CHECK(std::string(vmmipc_last_error()).find("rank 1") != std::string::npos, "%s", vmmipc_last_error());
    vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
    VMM(vmmipc_win_device_status(win, &st));
    CHECK(st.state == VMMIPC_DEV_TIMEOUT && st.rank == 1 && st.value == 1ull << 40 && st.barrier == 0,
          "record: state %d rank %d value %llu", st.state, st.rank, (unsigned long long)st.value);
    std::printf("timeout: recorded and reported (%s)\n", vmmipc_last_error());
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // mixed: host signal -> device wait (rank 0 waits for rank 1), device
  // signal after a block's writes -> host wait, then -> stream wait (rank 1
  // waits for rank 0), the data checked after each
  const uint64_t hv = 1000, dv = 2000;
  if (rank == 1) VMM(vmmipc_win_signal(win, 0, hv, nullptr));
  if (rank == 0) {
    res[0] = -1;
    wait_one<<<1, 1>>>(dw, 1, hv, kTimeout, res);
    SyncBounded(0, "mixed: the device wait");
    CHECK(res[0] == VMMIPC_DEV_OK, "mixed: the device wait for a host signal returned %d", res[0]);
    write_and_signal<<<1, 512>>>(dw, 1, dv, words, 7001);
    SyncBounded(0, "mixed: the device signal");
    VMM(vmmipc_win_wait_host(win, 1, dv + 1, 60000)); // rank 1 read it: write again
    write_and_signal<<<1, 512>>>(dw, 1, dv + 2, words, 7002);
    SyncBounded(0, "mixed: the second device signal");
  }
  if (rank == 1) {
    VMM(vmmipc_win_wait_host(win, 0, dv, 60000));
    void *mine = nullptr;
    VMM(vmmipc_win_query(win, 1, &mine, nullptr));
    uint64_t *host = static_cast<uint64_t *>(std::malloc(words * sizeof(uint64_t)));
    CUDA(cudaMemcpy(host, mine, words * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < words; i++) bad += host[i] != word(7001, 0, i);
    std::free(host);
    CHECK(bad == 0, "mixed: %d words wrong after a host wait for a device signal", bad);
    VMM(vmmipc_win_signal(win, 0, dv + 1, nullptr));
    res[3] = 0;
    VMM(vmmipc_win_wait(win, 0, dv + 2, nullptr));
    check_words<<<1, 512>>>(dw, 0, words, 7002, &res[3]);
    SyncBounded(0, "mixed: the stream wait");
    CHECK(res[3] == 0, "mixed: %d words wrong after a stream wait for a device signal", res[3]);
    vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
    VMM(vmmipc_win_device_status(win, &st));
    CHECK(st.state == VMMIPC_DEV_OK, "mixed: a record %d", st.state);
    std::printf("mixed: host->device and device->host signals, data checked after a host and a stream wait "
                "(host sync path: %s, device scope: %s)\n",
                SyncPathName(st), dw.scope == VMMIPC_DEV_SCOPE_GPU ? "gpu" : "sys");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  CUDA(cudaFree(res));
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_buf_free(buf));
  VMM(vmmipc_comm_destroy(comm));
  return GpuTestEnd("test_device_gpu");
}
