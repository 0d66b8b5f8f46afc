// The stand-in's asynchronous stream work (VMMIPC_STANDIN_ASYNC): each case
// runs in a forked child on a fresh instance with the mode it needs, so the
// cases hold whatever mode the suite itself runs with. With late:60000 no
// work completes by itself during a case: it completes when something waits
// for it, which makes "not done yet" checks deterministic.
#include <gtest/gtest.h>
#include <dirent.h>

#include <atomic>
#include <thread>
#include <vector>

#include "harness/helpers.h"
#include "standin/test_standin.h"
#include "vmmipc_win_device.h"

namespace {

using namespace sti_test;

#define CHILD_CHECK(cond)                                                                \
  do {                                                                                   \
    if (!(cond)) return std::string("line ") + std::to_string(__LINE__) + ": " #cond;    \
  } while (0)
#define CHILD_OK(call) CHILD_CHECK((call) == CUDA_SUCCESS)

constexpr const char *kNever = "late:60000";  // nothing completes unless waited for

// A fresh instance with VMMIPC_STANDIN_ASYNC=mode and device 0 current.
std::string Fresh(const char *mode, Api *a) {
  SetEnv("VMMIPC_STANDIN_ASYNC", mode);
  std::string err = LoadFresh(a);
  if (!err.empty()) return err;
  CUcontext c = nullptr;
  if (a->cuInit(0) != CUDA_SUCCESS || a->cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
      a->cuCtxSetCurrent(c) != CUDA_SUCCESS)
    return "cuInit or the context failed";
  return "";
}

// A read-write VMM mapping of one granule: shared with forked processes.
std::string MapShared(const Api &a, CUdeviceptr *va) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = Prop(0);
  if (a.cuMemCreate(&h, kGran, &p, 0) || a.cuMemAddressReserve(va, kGran, 0, 0, 0) || a.cuMemMap(*va, kGran, 0, h, 0) ||
      SetAccess(a, *va, kGran, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) || a.cuMemRelease(h))
    return "mapping failed";
  return "";
}

unsigned char *Bytes(CUdeviceptr p) { return reinterpret_cast<unsigned char *>(p); }
uint64_t Load(CUdeviceptr p) { return __atomic_load_n(reinterpret_cast<uint64_t *>(p), __ATOMIC_SEQ_CST); }
void Store(CUdeviceptr p, uint64_t v) { __atomic_store_n(reinterpret_cast<uint64_t *>(p), v, __ATOMIC_SEQ_CST); }

int Threads() {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  while (struct dirent *e = readdir(d))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

void ExpectChild(const std::function<std::string()> &body) {
  Child c = RunChild(body);
  EXPECT_TRUE(ExitedOk(c)) << Describe(c);
  EXPECT_EQ(c.out, "");
}

class StandinAsync : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(Main().error, "");
    // Children only: one rank is enough.
    if (vt::Rank() != 0) GTEST_SKIP() << "runs on rank 0";
    const char *caps = std::getenv("VMMIPC_STANDIN_CAPS");
    if (caps && *caps) GTEST_SKIP() << "needs the default capabilities, but VMMIPC_STANDIN_CAPS=" << caps;
  }
};

TEST_F(StandinAsync, ModesFromTheEnvironment) {
  for (const char *bad : {"bogus", "random:", "random:x", "random:-1", "late:0", "late:60001", "late:x", "LATE"}) {
    Child c = RunChild([&] {
      QuietStderr();
      SetEnv("VMMIPC_STANDIN_ASYNC", bad);
      Api a;
      std::string err = LoadFresh(&a);
      return err.empty() ? std::to_string(a.cuInit(0)) : err;
    });
    EXPECT_EQ(c.out, std::to_string(CUDA_ERROR_INVALID_VALUE)) << "VMMIPC_STANDIN_ASYNC=" << bad << ": " << Describe(c);
  }
  const char *const goods[] = {"off",  "random", "random:7", "random:18446744073709551615",
                               "late", "late:5", "",         nullptr};
  for (const char *good : goods) {
    Child c = RunChild([&] {
      SetEnv("VMMIPC_STANDIN_ASYNC", good);
      Api a;
      std::string err = LoadFresh(&a);
      return err.empty() ? std::to_string(a.cuInit(0)) : err;
    });
    EXPECT_EQ(c.out, "0") << "VMMIPC_STANDIN_ASYNC=" << (good ? good : "(unset)") << ": " << Describe(c);
  }
}

// off: every call has done its work when it returns, and no thread is made.
TEST_F(StandinAsync, OffDoesTheWorkBeforeEachCallReturns) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh("off", &a);
    if (!err.empty()) return err;
    CUdeviceptr buf = 0, flag = 0;
    CUstream s = nullptr;
    CUevent e = nullptr;
    CHILD_OK(a.cuMemAlloc(&buf, 4096));
    CHILD_CHECK(MapShared(a, &flag).empty());
    int threads = Threads();
    CHILD_OK(a.cuStreamCreate(&s, 0));
    CHILD_OK(a.cuEventCreate(&e, 0));
    std::vector<unsigned char> in(4096, 0x5a), out(4096, 0);
    CHILD_OK(a.cuMemcpyHtoDAsync(buf, in.data(), in.size(), s));
    CHILD_CHECK(Bytes(buf)[4095] == 0x5a);
    CHILD_OK(a.cuMemsetD8Async(buf, 0x11, 16, s));
    CHILD_CHECK(Bytes(buf)[15] == 0x11);
    CHILD_OK(a.cuMemsetD8(buf + 16, 0x12, 16));
    CHILD_CHECK(Bytes(buf)[31] == 0x12);
    CHILD_OK(a.cuMemcpyDtoDAsync(buf + 2048, buf, 32, s));
    CHILD_CHECK(Bytes(buf)[2048 + 31] == 0x12);
    CHILD_OK(a.cuMemcpyDtoHAsync(out.data(), buf, 32, s));
    CHILD_CHECK(out[0] == 0x11);
    CHILD_OK(a.cuStreamWriteValue64(s, flag, 7, 0));
    CHILD_CHECK(Load(flag) == 7);
    CHILD_OK(a.cuEventRecord(e, s));
    CHILD_OK(a.cuEventQuery(e));
    CHILD_OK(a.cuStreamQuery(s));
    // A wait that cannot complete fails the call itself, at its deadline.
    setenv("VMMIPC_STANDIN_WAIT_MS", "50", 1);
    CHILD_CHECK(a.cuStreamWaitValue64(s, flag, 8, CU_STREAM_WAIT_VALUE_EQ) == CUDA_ERROR_LAUNCH_TIMEOUT);
    CHILD_OK(a.cuStreamQuery(s));
    CHILD_CHECK(Threads() == threads);
    CHILD_OK(a.cuEventDestroy(e));
    CHILD_OK(a.cuStreamDestroy(s));
    CHILD_OK(a.cuMemFree(buf));
    return std::string();
  });
}

// Stream work completes in order, once waited for; every synchronising call
// waits for what it should.
TEST_F(StandinAsync, WorkCompletesInOrderWhenWaitedFor) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh(kNever, &a);
    if (!err.empty()) return err;
    CUdeviceptr buf = 0;
    CUstream s = nullptr, s2 = nullptr;
    CUevent e = nullptr, e0 = nullptr;
    CHILD_OK(a.cuMemAlloc(&buf, 4096));
    CHILD_OK(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHILD_OK(a.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHILD_OK(a.cuEventCreate(&e, 0));
    CHILD_OK(a.cuEventCreate(&e0, 0));
    std::vector<unsigned char> in(1024, 0x33), out(1024, 0);
    // cuStreamSynchronize: a copy, a memset over part of it, a copy back.
    CHILD_OK(a.cuMemcpyHtoDAsync(buf, in.data(), in.size(), s));
    CHILD_OK(a.cuMemsetD8Async(buf, 0x44, 10, s));
    CHILD_OK(a.cuMemcpyDtoHAsync(out.data(), buf, out.size(), s));
    CHILD_CHECK(a.cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
    CHILD_CHECK(Bytes(buf)[100] == 0 && out[100] == 0);
    CHILD_OK(a.cuStreamSynchronize(s));
    CHILD_CHECK(out[9] == 0x44 && out[10] == 0x33 && out[1023] == 0x33);
    CHILD_OK(a.cuStreamQuery(s));
    // An event recorded on an idle stream captures no work: complete at once
    // (Python's close polls such events without waiting).
    CHILD_OK(a.cuEventRecord(e0, s));
    CHILD_OK(a.cuEventQuery(e0));
    // Events: complete when the work before the record is; timed when it ran.
    CHILD_OK(a.cuEventRecord(e0, s));
    CHILD_OK(a.cuMemsetD8Async(buf, 0x55, 10, s));
    CHILD_OK(a.cuEventRecord(e, s));
    CHILD_CHECK(a.cuEventQuery(e) == CUDA_ERROR_NOT_READY);
    float ms = -1;
    CHILD_CHECK(a.cuEventElapsedTime(&ms, e0, e) == CUDA_ERROR_NOT_READY);
    CHILD_OK(a.cuEventSynchronize(e));
    CHILD_OK(a.cuEventQuery(e));
    CHILD_CHECK(Bytes(buf)[0] == 0x55);
    CHILD_OK(a.cuEventElapsedTime(&ms, e0, e));
    CHILD_CHECK(ms >= 0);
    // cuStreamWaitEvent: s2's copy waits for s's memset, which it hurries.
    CHILD_OK(a.cuMemsetD8Async(buf + 100, 0x66, 1, s));
    CHILD_OK(a.cuEventRecord(e, s));
    CHILD_OK(a.cuStreamWaitEvent(s2, e, 0));
    CHILD_OK(a.cuMemcpyDtoHAsync(out.data(), buf + 100, 1, s2));
    CHILD_CHECK(out[0] != 0x66);
    CHILD_OK(a.cuStreamSynchronize(s2));
    CHILD_CHECK(out[0] == 0x66);
    // cuCtxSynchronize, and its CUDA 13 form: every stream of the context.
    CHILD_OK(a.cuMemsetD8Async(buf + 2000, 0x77, 1, s));
    CHILD_OK(a.cuMemsetD8Async(buf + 2001, 0x78, 1, s2));
    CHILD_OK(a.cuMemsetD8(buf + 2002, 0x79, 1));
    CHILD_CHECK(Bytes(buf)[2000] == 0 && Bytes(buf)[2001] == 0 && Bytes(buf)[2002] == 0);
    CHILD_OK(a.cuCtxSynchronize());
    CHILD_CHECK(Bytes(buf)[2000] == 0x77 && Bytes(buf)[2001] == 0x78 && Bytes(buf)[2002] == 0x79);
    CUresult (*sync13)(CUcontext) = nullptr;
    CUdriverProcAddressQueryResult st;
    CHILD_OK(a.getproc("cuCtxSynchronize", reinterpret_cast<void **>(&sync13), 13000, 0, &st));
    CHILD_OK(a.cuMemsetD8Async(buf + 2003, 0x7a, 1, s2));
    CHILD_OK(sync13(nullptr));
    CHILD_CHECK(Bytes(buf)[2003] == 0x7a);
    // A destroyed stream and event: their queued work still completes.
    CHILD_OK(a.cuMemsetD8Async(buf + 3000, 0x7b, 1, s));
    CHILD_OK(a.cuEventRecord(e, s));
    CHILD_OK(a.cuStreamDestroy(s));
    CHILD_OK(a.cuEventDestroy(e));
    CHILD_OK(a.cuCtxSynchronize());
    CHILD_CHECK(Bytes(buf)[3000] == 0x7b);
    CHILD_OK(a.cuEventDestroy(e0));
    CHILD_OK(a.cuStreamDestroy(s2));
    CHILD_OK(a.cuMemFree(buf));
    return std::string();
  });
}

// CUDA's "API synchronization behavior": which synchronous copies wait.
TEST_F(StandinAsync, SynchronousCopiesWaitAsCudaDocuments) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh(kNever, &a);
    if (!err.empty()) return err;
    CUdeviceptr buf = 0;
    CHILD_OK(a.cuMemAlloc(&buf, 4096));
    std::vector<unsigned char> src(64, 0x21);
    // From pageable memory: staged, and it returns before the data lands...
    CHILD_OK(a.cuMemsetD8(buf + 1000, 0x20, 1));
    CHILD_OK(a.cuMemcpyHtoD(buf, src.data(), src.size()));
    CHILD_CHECK(Bytes(buf)[0] == 0);
    // ...after the legacy stream's earlier work.
    CHILD_CHECK(Bytes(buf)[1000] == 0x20);
    std::fill(src.begin(), src.end(), 0x22);
    CHILD_OK(a.cuCtxSynchronize());
    CHILD_CHECK(Bytes(buf)[0] == 0x21 && Bytes(buf)[63] == 0x21);
    // From page-locked memory: synchronous.
    void *pinned = nullptr;
    CHILD_OK(a.cuMemHostAlloc(&pinned, 64, 0));
    std::memset(pinned, 0x23, 64);
    CHILD_OK(a.cuMemcpyHtoD(buf, pinned, 64));
    CHILD_CHECK(Bytes(buf)[0] == 0x23);
    // Into host memory: returns when done.
    unsigned char back[64] = {0};
    CHILD_OK(a.cuMemcpyDtoH(back, buf, sizeof back));
    CHILD_CHECK(back[63] == 0x23);
    // Device to device, and memset of device memory: no wait at all.
    CHILD_OK(a.cuMemcpyDtoD(buf + 2048, buf, 64));
    CHILD_OK(a.cuMemsetD8(buf + 3000, 0x24, 8));
    CHILD_CHECK(Bytes(buf)[2048] == 0 && Bytes(buf)[3000] == 0);
    CHILD_OK(a.cuCtxSynchronize());
    CHILD_CHECK(Bytes(buf)[2048] == 0x23 && Bytes(buf)[3007] == 0x24);
    // Asynchronous copies read page-locked memory when they run, and stage
    // pageable memory at the call.
    CUstream s = nullptr;
    CHILD_OK(a.cuStreamCreate(&s, 0));
    std::memset(pinned, 0x25, 64);
    CHILD_OK(a.cuMemcpyHtoDAsync(buf, pinned, 64, s));
    std::memset(pinned, 0x26, 64);
    std::fill(src.begin(), src.end(), 0x27);
    CHILD_OK(a.cuMemcpyHtoDAsync(buf + 64, src.data(), 64, s));
    std::fill(src.begin(), src.end(), 0x28);
    CHILD_OK(a.cuStreamSynchronize(s));
    CHILD_CHECK(Bytes(buf)[0] == 0x26 && Bytes(buf)[64] == 0x27);
    // Between host buffers cuMemcpyAsync is synchronous.
    unsigned char h1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, h2[8] = {0};
    CHILD_OK(a.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(h2), reinterpret_cast<CUdeviceptr>(h1), 8, s));
    CHILD_CHECK(h2[7] == 8);
    CHILD_OK(a.cuStreamDestroy(s));
    CHILD_OK(a.cuMemFreeHost(pinned));
    CHILD_OK(a.cuMemFree(buf));
    return std::string();
  });
}

// The legacy default stream waits for the blocking streams' earlier work and
// they for its; non-blocking streams are exempt; the per-thread default
// stream is a blocking stream. A stream wait on a flag holds each one.
TEST_F(StandinAsync, LegacyStreamOrdersWithBlockingStreams) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh("random:5", &a);
    if (!err.empty()) return err;
    CUdeviceptr mem = 0;
    CHILD_CHECK(MapShared(a, &mem).empty());
    CUdeviceptr flag[4] = {mem, mem + 8, mem + 16, mem + 24}, buf = mem + 4096;
    CUstream b = nullptr, n = nullptr;
    CHILD_OK(a.cuStreamCreate(&b, 0));
    CHILD_OK(a.cuStreamCreate(&n, CU_STREAM_NON_BLOCKING));
    auto held = [&](CUstream s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // room to go wrong
      return a.cuStreamQuery(s) == CUDA_ERROR_NOT_READY;
    };
    // Legacy work after a blocking stream's wait.
    CHILD_OK(a.cuStreamWaitValue64(b, flag[0], 1, CU_STREAM_WAIT_VALUE_GEQ));
    CHILD_OK(a.cuMemsetD8(buf, 7, 1));
    CHILD_CHECK(held(nullptr) && Bytes(buf)[0] == 0);
    Store(flag[0], 1);
    CHILD_OK(a.cuStreamSynchronize(nullptr));
    CHILD_CHECK(Bytes(buf)[0] == 7);
    // A blocking stream's work after a legacy wait.
    CHILD_OK(a.cuStreamWaitValue64(nullptr, flag[1], 1, CU_STREAM_WAIT_VALUE_GEQ));
    CHILD_OK(a.cuMemsetD8Async(buf + 1, 8, 1, b));
    CHILD_CHECK(held(b) && Bytes(buf)[1] == 0);
    Store(flag[1], 1);
    CHILD_OK(a.cuStreamSynchronize(b));
    CHILD_CHECK(Bytes(buf)[1] == 8);
    // A non-blocking stream holds nothing up.
    CHILD_OK(a.cuStreamWaitValue64(n, flag[2], 1, CU_STREAM_WAIT_VALUE_GEQ));
    CHILD_OK(a.cuMemsetD8(buf + 2, 9, 1));
    CHILD_OK(a.cuStreamSynchronize(nullptr));
    CHILD_CHECK(Bytes(buf)[2] == 9 && a.cuStreamQuery(n) == CUDA_ERROR_NOT_READY);
    Store(flag[2], 1);
    CHILD_OK(a.cuStreamSynchronize(n));
    // The per-thread default stream is blocking.
    CHILD_OK(a.cuStreamWaitValue64(CU_STREAM_PER_THREAD, flag[3], 1, CU_STREAM_WAIT_VALUE_GEQ));
    CHILD_OK(a.cuMemsetD8Async(buf + 3, 10, 1, CU_STREAM_LEGACY));
    CHILD_CHECK(held(CU_STREAM_LEGACY) && Bytes(buf)[3] == 0);
    Store(flag[3], 1);
    CHILD_OK(a.cuStreamSynchronize(CU_STREAM_LEGACY));
    CHILD_CHECK(Bytes(buf)[3] == 10);
    CHILD_OK(a.cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHILD_OK(a.cuStreamDestroy(b));
    CHILD_OK(a.cuStreamDestroy(n));
    CHILD_OK(a.cuMemUnmap(mem, kGran));
    CHILD_OK(a.cuMemAddressFree(mem, kGran));
    return std::string();
  });
}

// Work progresses without the host calling the driver: a stream wait ends
// when another process writes the flag, and the write queued behind it
// lands. Late work also completes by itself, after its delay.
TEST_F(StandinAsync, WorkProgressesOnItsOwnAcrossProcesses) {
  for (const char *mode : {"random:11", "late:100"}) {
    ExpectChild([mode] {
      Api a;
      std::string err = Fresh(mode, &a);
      if (!err.empty()) return err;
      CUdeviceptr mem = 0;
      CHILD_CHECK(MapShared(a, &mem).empty());
      CUstream s = nullptr;
      CHILD_OK(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
      CHILD_OK(a.cuStreamWaitValue64(s, mem, 1, CU_STREAM_WAIT_VALUE_GEQ));
      CHILD_OK(a.cuStreamWriteValue64(s, mem + 8, 5, 0));
      pid_t writer = fork();
      if (writer == 0) {
        Store(mem, 1);  // the other process: shares the page, never calls the driver
        _exit(0);
      }
      int status = 0;
      waitpid(writer, &status, 0);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (Load(mem + 8) != 5 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      CHILD_CHECK(Load(mem + 8) == 5);
      CHILD_OK(a.cuStreamDestroy(s));
      CHILD_OK(a.cuMemUnmap(mem, kGran));
      CHILD_OK(a.cuMemAddressFree(mem, kGran));
      return std::string();
    });
  }
}

// The emulated kernels run on the stream, with the arguments of the launch.
TEST_F(StandinAsync, LaunchesRunOnTheStreamWithTheirArguments) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh(kNever, &a);
    if (!err.empty()) return err;
    static const char image[] = ".version 8.0\n.entry vmmipc_k_wait\n";
    CUmodule mod = nullptr;
    CUfunction f = nullptr;
    CHILD_OK(a.cuModuleLoadData(&mod, image));
    CHILD_OK(a.cuModuleGetFunction(&f, mod, "vmmipc_k_signal"));
    uint64_t slot = 0;
    uint64_t *outs[1] = {&slot};
    vmmipc_win_device_t w;
    std::memset(&w, 0, sizeof w);
    w.nranks = 1;
    w.node_size = 1;
    w.signal_out = outs;
    int rank = 0;
    uint64_t value = 42;
    void *args[] = {&w, &rank, &value};
    CUstream s = nullptr;
    CHILD_OK(a.cuStreamCreate(&s, 0));
    CHILD_OK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
    value = 43;
    w.nranks = 0;
    CHILD_CHECK(__atomic_load_n(&slot, __ATOMIC_SEQ_CST) == 0 && a.cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
    CHILD_OK(a.cuStreamSynchronize(s));
    CHILD_CHECK(slot == 42);
    CHILD_OK(a.cuStreamDestroy(s));
    CHILD_OK(a.cuModuleUnload(mod));
    return std::string();
  });
}

// A worker per stream, for as long as the stream has a handle or work.
TEST_F(StandinAsync, ADestroyedStreamsWorkerLeaves) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh("random:23", &a);
    if (!err.empty()) return err;
    CUdeviceptr buf = 0;
    CHILD_OK(a.cuMemAlloc(&buf, 64));
    const int before = Threads();
    CUstream s[4];
    for (int i = 0; i < 4; i++) {
      CHILD_OK(a.cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
      CHILD_OK(a.cuMemsetD8Async(buf + i, 1, 1, s[i]));
    }
    for (int i = 0; i < 4; i++) CHILD_OK(a.cuStreamSynchronize(s[i]));
    CHILD_CHECK(Threads() == before + 4);
    for (int i = 0; i < 4; i++) CHILD_OK(a.cuStreamDestroy(s[i]));
    // A thread's per-thread default stream goes when the thread exits.
    CUcontext ctx = nullptr;
    CHILD_OK(a.cuCtxGetCurrent(&ctx));
    bool ok = false;
    std::thread t([&] {
      ok = a.cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
           a.cuMemsetD8Async(buf + 8, 2, 1, CU_STREAM_PER_THREAD) == CUDA_SUCCESS &&
           a.cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS && Bytes(buf)[8] == 2;
    });
    t.join();
    CHILD_CHECK(ok);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (Threads() != before && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHILD_CHECK(Threads() == before);
    CHILD_OK(a.cuMemFree(buf));
    return std::string();
  });
}

// The calls that the real driver makes wait for queued work do: a queued
// copy never touches memory that was freed or unmapped under it.
TEST_F(StandinAsync, FreeAndUnmapWaitForQueuedWork) {
  for (int which = 0; which < 3; which++) {
    ExpectChild([which] {
      Api a;
      std::string err = Fresh("random:13", &a);
      if (!err.empty()) return err;
      CUdeviceptr flag = 0, va = 0, plain = 0;
      void *pinned = nullptr;
      CHILD_CHECK(MapShared(a, &flag).empty());
      CHILD_CHECK(MapShared(a, &va).empty());
      CHILD_OK(a.cuMemAlloc(&plain, 4096));
      CHILD_OK(a.cuMemHostAlloc(&pinned, 4096, 0));
      CUstream s = nullptr;
      CHILD_OK(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
      CHILD_OK(a.cuStreamWaitValue64(s, flag, 1, CU_STREAM_WAIT_VALUE_GEQ));
      if (which == 0) CHILD_OK(a.cuMemsetD8Async(plain, 1, 4096, s));
      if (which == 1) CHILD_OK(a.cuMemsetD8Async(va, 1, 4096, s));
      if (which == 2) CHILD_OK(a.cuMemcpyDtoHAsync(pinned, plain, 4096, s));
      std::atomic<bool> released{false};
      std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        released = true;
        Store(flag, 1);
      });
      CUresult rc = which == 0 ? a.cuMemFree(plain) : which == 1 ? a.cuMemUnmap(va, kGran) : a.cuMemFreeHost(pinned);
      bool waited = released.load();
      t.join();
      CHILD_OK(rc);
      CHILD_CHECK(waited);
      CHILD_OK(a.cuStreamDestroy(s));
      if (which != 0) CHILD_OK(a.cuMemFree(plain));
      if (which != 1) CHILD_OK(a.cuMemUnmap(va, kGran));
      if (which != 2) CHILD_OK(a.cuMemFreeHost(pinned));
      CHILD_OK(a.cuMemUnmap(flag, kGran));
      CHILD_OK(a.cuMemAddressFree(va, kGran));
      CHILD_OK(a.cuMemAddressFree(flag, kGran));
      return std::string();
    });
  }
}

// A module load waits while a kernel of its context runs, as the driver
// does; a queued launch counts as running, and the load hurries it.
TEST_F(StandinAsync, ModuleLoadWaitsForAQueuedLaunch) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh(kNever, &a);
    if (!err.empty()) return err;
    CUdeviceptr flag = 0;
    CHILD_CHECK(MapShared(a, &flag).empty());
    static const char image[] = ".entry vmmipc_k_wait\n";
    CUmodule mod = nullptr, again = nullptr;
    CUfunction f = nullptr;
    CHILD_OK(a.cuModuleLoadData(&mod, image));
    CHILD_OK(a.cuModuleGetFunction(&f, mod, "vmmipc_k_wait"));
    uint64_t *ins[1] = {reinterpret_cast<uint64_t *>(flag)};
    vmmipc_win_device_t w;
    std::memset(&w, 0, sizeof w);
    w.nranks = 1;
    w.node_size = 1;
    w.signal_in = ins;
    w.timeout_ns = 30000000000ull;
    int rank = 0;
    uint64_t value = 1, timeout = 0;
    void *claim = nullptr, *record = nullptr;
    void *args[] = {&w, &rank, &value, &timeout, &claim, &record};
    CUstream s = nullptr;
    CHILD_OK(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHILD_OK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
    std::atomic<bool> released{false};
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      released = true;
      Store(flag, 1);
    });
    CUresult rc = a.cuModuleLoadData(&again, image);
    bool waited = released.load();
    t.join();
    CHILD_OK(rc);
    CHILD_CHECK(waited);
    CHILD_OK(a.cuStreamSynchronize(s));
    CHILD_OK(a.cuModuleUnload(again));
    CHILD_OK(a.cuModuleUnload(mod));
    CHILD_OK(a.cuStreamDestroy(s));
    CHILD_OK(a.cuMemUnmap(flag, kGran));
    CHILD_OK(a.cuMemAddressFree(flag, kGran));
    return std::string();
  });
}

// A wait that gives up is its stream's sticky error; the stream's later work
// does not run, and the synchronising calls report it.
TEST_F(StandinAsync, AFailedWaitIsTheStreamsError) {
  ExpectChild([] {
    setenv("VMMIPC_STANDIN_WAIT_MS", "50", 1);
    Api a;
    std::string err = Fresh("random:17", &a);
    if (!err.empty()) return err;
    CUdeviceptr flag = 0, buf = 0;
    CHILD_CHECK(MapShared(a, &flag).empty());
    CHILD_OK(a.cuMemAlloc(&buf, 64));
    CUstream s = nullptr, ok = nullptr;
    CHILD_OK(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHILD_OK(a.cuStreamCreate(&ok, CU_STREAM_NON_BLOCKING));
    CHILD_OK(a.cuStreamWaitValue64(s, flag, 1, CU_STREAM_WAIT_VALUE_EQ));
    CHILD_OK(a.cuMemsetD8Async(buf, 3, 1, s));
    CHILD_CHECK(a.cuStreamSynchronize(s) == CUDA_ERROR_LAUNCH_TIMEOUT);
    CHILD_CHECK(a.cuStreamQuery(s) == CUDA_ERROR_LAUNCH_TIMEOUT);
    CHILD_CHECK(a.cuMemsetD8Async(buf, 3, 1, s) == CUDA_ERROR_LAUNCH_TIMEOUT);
    CHILD_CHECK(a.cuCtxSynchronize() == CUDA_ERROR_LAUNCH_TIMEOUT);
    CHILD_CHECK(Bytes(buf)[0] == 0);
    CHILD_OK(a.cuMemsetD8Async(buf + 1, 4, 1, ok));
    CHILD_OK(a.cuStreamSynchronize(ok));
    CHILD_CHECK(Bytes(buf)[1] == 4);
    CHILD_OK(a.cuStreamDestroy(s));
    CHILD_OK(a.cuStreamDestroy(ok));
    return std::string();
  });
}

// A forked child has no workers, and its parent's queued work is not its own.
TEST_F(StandinAsync, ForkedChildDropsItsParentsQueuedWork) {
  ExpectChild([] {
    Api a;
    std::string err = Fresh(kNever, &a);
    if (!err.empty()) return err;
    CUdeviceptr buf = 0;
    CHILD_CHECK(MapShared(a, &buf).empty());
    CUstream s = nullptr;
    CHILD_OK(a.cuStreamCreate(&s, 0));
    CHILD_OK(a.cuMemsetD8Async(buf, 1, 1, s));
    int p[2];
    CHILD_CHECK(pipe(p) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      char r = a.cuStreamQuery(s) == CUDA_SUCCESS && a.cuMemsetD8Async(buf + 1, 2, 1, s) == CUDA_SUCCESS &&
                       a.cuStreamSynchronize(s) == CUDA_SUCCESS && Bytes(buf)[0] == 0 && Bytes(buf)[1] == 2
                   ? 'y'
                   : 'n';
      (void)!write(p[1], &r, 1);
      _exit(0);
    }
    char r = 0;
    CHILD_CHECK(read(p[0], &r, 1) == 1);
    waitpid(pid, nullptr, 0);
    close(p[0]);
    close(p[1]);
    CHILD_CHECK(r == 'y');
    CHILD_OK(a.cuStreamSynchronize(s));
    CHILD_CHECK(Bytes(buf)[0] == 1);
    CHILD_OK(a.cuStreamDestroy(s));
    CHILD_OK(a.cuMemUnmap(buf, kGran));
    CHILD_OK(a.cuMemAddressFree(buf, kGran));
    return std::string();
  });
}

}  // namespace
