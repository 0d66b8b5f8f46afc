// The driver behaviours vmmipc relies on, checked against whichever driver is
// loaded. The same suite passes on the CPU stand-in and on the real driver,
// which is what shows that the stand-in emulates the real one.
#include <cuda.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "harness/helpers.h"
#include "harness/rawchan.h"

namespace {

struct Api {
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*free_va)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*exp)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
  CUresult (*imp)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
  CUresult (*props)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
  CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
};

template <typename F>
void Get(const char *name, F *fn) {
  void *p = nullptr;
  ASSERT_VMM_OK(vmmipc_driver_proc(name, 0, &p));
  *fn = reinterpret_cast<F>(p);
}

class DriverContract : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = vt::UseRankDevice();
    ASSERT_GE(dev_, 0);
    Get("cuMemCreate", &a_.create);
    Get("cuMemRelease", &a_.release);
    Get("cuMemAddressReserve", &a_.reserve);
    Get("cuMemAddressFree", &a_.free_va);
    Get("cuMemMap", &a_.map);
    Get("cuMemUnmap", &a_.unmap);
    Get("cuMemExportToShareableHandle", &a_.exp);
    Get("cuMemImportFromShareableHandle", &a_.imp);
    Get("cuMemGetAllocationPropertiesFromHandle", &a_.props);
    Get("cuMemGetAllocationGranularity", &a_.gran);
  }
  CUmemAllocationProp Prop(CUmemAllocationHandleType t = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev_;
    p.requestedHandleTypes = t;
    return p;
  }
  int dev_ = -1;
  Api a_{};
};

constexpr size_t k2M = 2u << 20;

TEST_F(DriverContract, GranularityIsTwoMiB) {
  CUmemAllocationProp p = Prop();
  size_t min = 0, rec = 0;
  ASSERT_EQ(a_.gran(&min, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  ASSERT_EQ(a_.gran(&rec, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(min, k2M);
  EXPECT_EQ(rec, k2M);
}

TEST_F(DriverContract, ReExportOfAnImportIsInvalidValue) {
  CUmemAllocationProp p = Prop();
  CUmemGenericAllocationHandle h = 0, imp = 0;
  ASSERT_EQ(a_.create(&h, k2M, &p, 0), CUDA_SUCCESS);
  int fd = -1, fd2 = -1;
  ASSERT_EQ(a_.exp(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  ASSERT_EQ(a_.imp(&imp, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  close(fd);  // the driver keeps its own reference
  EXPECT_EQ(a_.exp(&fd2, imp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
  // The import still maps after the fd is closed.
  CUdeviceptr va = 0;
  ASSERT_EQ(a_.reserve(&va, k2M, k2M, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(a_.map(va, k2M, 0, imp, 0), CUDA_SUCCESS);
  a_.unmap(va, k2M);
  a_.free_va(va, k2M);
  a_.release(imp);
  a_.release(h);
}

TEST_F(DriverContract, MapWithAMismatchedSizeFails) {
  CUmemAllocationProp p = Prop();
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(a_.create(&h, k2M, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(a_.reserve(&va, 2 * k2M, k2M, 0, 0), CUDA_SUCCESS);
  CUresult rc = a_.map(va, 2 * k2M, 0, h, 0);
  EXPECT_NE(rc, CUDA_SUCCESS);
  if (rc == CUDA_SUCCESS) a_.unmap(va, 2 * k2M);
  a_.free_va(va, 2 * k2M);
  a_.release(h);
}

TEST_F(DriverContract, ImportOfAForeignFdFails) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = a_.imp(&h, reinterpret_cast<void *>(static_cast<uintptr_t>(p[0])), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_NE(rc, CUDA_SUCCESS);
  std::printf("[rank %d] import of a pipe fd: CUresult %d\n", vt::Rank(), static_cast<int>(rc));
  if (rc == CUDA_SUCCESS) a_.release(h);
  close(p[0]);
  close(p[1]);
}

TEST_F(DriverContract, FabricHandlesWithoutImexAreRefused) {
  CUmemAllocationProp p = Prop(CU_MEM_HANDLE_TYPE_FABRIC);
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = a_.create(&h, k2M, &p, 0);
  std::printf("[rank %d] cuMemCreate with the fabric handle type: CUresult %d\n", vt::Rank(), static_cast<int>(rc));
  if (rc == CUDA_SUCCESS) {
    a_.release(h);
    GTEST_SKIP() << "this machine has an IMEX channel: fabric handles work here";
  }
  EXPECT_EQ(rc, CUDA_ERROR_NOT_PERMITTED);
}

// Between two processes: the importer reads the owner's location, which is
// the importer's ordinal of the owner's GPU (compared by UUID), or -2 when
// the importer cannot see that GPU (under OWN_GPU on two GPUs).
TEST_F(DriverContract, OwnerLocationSeenByTheImporter) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Rank 0 owns; rank 1 finds the owner's GPU among the devices it sees.
  vmmipc_uuid_t owner{};
  if (vt::Rank() == 0) EXPECT_VMM_OK(vmmipc_device_uuid(dev_, &owner));
  MPI_Bcast(owner.bytes, 16, MPI_BYTE, 0, MPI_COMM_WORLD);
  char owner_str[VMMIPC_UUID_STRING_LEN] = "";
  vmmipc_uuid_format(&owner, owner_str);
  int seen_as = -2, visible = 0;
  if (vt::Rank() == 1) {
    EXPECT_VMM_OK(vmmipc_device_count(&visible));
    for (int i = 0; i < visible && seen_as < 0; i++) {
      vmmipc_uuid_t u{};
      EXPECT_VMM_OK(vmmipc_device_uuid(i, &u));
      if (std::memcmp(u.bytes, owner.bytes, 16) == 0) seen_as = i;
    }
  }
  MPI_Bcast(&seen_as, 1, MPI_INT, 1, MPI_COMM_WORLD);

  vt::RawChannel ch;
  CUmemGenericAllocationHandle h = 0;
  if (vt::Rank() == 0) {
    CUmemAllocationProp p = Prop();
    ASSERT_EQ(a_.create(&h, k2M, &p, 0), CUDA_SUCCESS);
    int fd = -1;
    ASSERT_EQ(a_.exp(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    ASSERT_TRUE(ch.Send({}, {fd}));
    close(fd);
  } else if (vt::Rank() == 1) {
    std::vector<unsigned char> bytes;
    std::vector<int> fds;
    ASSERT_TRUE(ch.Recv(&bytes, &fds));
    ASSERT_EQ(fds.size(), 1u);
    CUmemGenericAllocationHandle imp = 0;
    ASSERT_EQ(a_.imp(&imp, reinterpret_cast<void *>(static_cast<uintptr_t>(fds[0])),
                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_SUCCESS);
    close(fds[0]);
    CUmemAllocationProp got = {};
    ASSERT_EQ(a_.props(&got, imp), CUDA_SUCCESS);
    const char *cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    std::printf("[rank 1] owner %s: location id %d (CUDA_VISIBLE_DEVICES=%s, %d visible, owner seen as %d)\n",
                owner_str, got.location.id, cvd ? cvd : "unset", visible, seen_as);
    EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    if (seen_as >= 0)
      EXPECT_EQ(got.location.id, seen_as) << "the importer's ordinal of the owner's GPU " << owner_str;
    else
      EXPECT_EQ(got.location.id, -2) << "an owner this process cannot see";
    a_.release(imp);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (h) a_.release(h);
  // Under OWN_GPU the point is an owner the importer cannot see, which takes
  // two GPUs: with one, both ranks were given the same one.
  if (std::getenv("VMMIPC_TEST_OWN_GPU") && seen_as >= 0)
    GTEST_SKIP() << "both ranks see the same physical GPU (" << owner_str
                 << "): an owner invisible to the importer (location id -2) needs two GPUs";
}

// ---- what vmmipc_buf_wrap relies on (facts measured on an H200, driver 580) ----

class DriverContractAddresses : public DriverContract {
 protected:
  void SetUp() override {
    DriverContract::SetUp();
    Get("cuMemRetainAllocationHandle", &retain_);
    Get("cuMemGetAddressRange", &range_);
    Get("cuPointerGetAttribute", &attr_);
    Get("cuMemSetAccess", &access_);
    Get("cuMemAlloc", &alloc_);
    Get("cuMemFree", &free_);
  }
  decltype(&::cuMemRetainAllocationHandle) retain_ = nullptr;
  decltype(&::cuMemGetAddressRange) range_ = nullptr;
  decltype(&::cuPointerGetAttribute) attr_ = nullptr;
  decltype(&::cuMemSetAccess) access_ = nullptr;
  decltype(&::cuMemAlloc) alloc_ = nullptr;
  decltype(&::cuMemFree) free_ = nullptr;
};

TEST_F(DriverContractAddresses, RetainAddressRangeAndHandleTypes) {
  CUmemAllocationProp fd = Prop(), none = Prop(CU_MEM_HANDLE_TYPE_NONE);
  CUmemGenericAllocationHandle a = 0, b = 0, r = 0;
  ASSERT_EQ(a_.create(&a, 2 * k2M, &fd, 0), CUDA_SUCCESS);
  ASSERT_EQ(a_.create(&b, k2M, &none, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(a_.reserve(&va, 4 * k2M, 0, 0, 0), CUDA_SUCCESS);  // 4 MiB of a, 2 MiB of b, a 2 MiB hole
  ASSERT_EQ(a_.map(va, 2 * k2M, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(a_.map(va + 2 * k2M, k2M, 0, b, 0), CUDA_SUCCESS);
  CUmemAccessDesc rw = {};
  rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  rw.location.id = dev_;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(access_(va, 3 * k2M, &rw, 1), CUDA_SUCCESS) << "one call over two whole mappings";

  // The handle cuMemCreate gave, from the start or the middle of a mapping.
  ASSERT_EQ(retain_(&r, reinterpret_cast<void *>(va)), CUDA_SUCCESS);
  EXPECT_EQ(r, a);
  EXPECT_EQ(a_.release(r), CUDA_SUCCESS);
  ASSERT_EQ(retain_(&r, reinterpret_cast<void *>(va + k2M + 4096)), CUDA_SUCCESS);
  EXPECT_EQ(r, a) << "mid-mapping";
  CUmemAllocationProp got = {};
  ASSERT_EQ(a_.props(&got, r), CUDA_SUCCESS);
  EXPECT_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(got.location.id, dev_);
  EXPECT_EQ(a_.release(r), CUDA_SUCCESS);
  ASSERT_EQ(retain_(&r, reinterpret_cast<void *>(va + 2 * k2M)), CUDA_SUCCESS);
  EXPECT_EQ(r, b);
  ASSERT_EQ(a_.props(&got, r), CUDA_SUCCESS);
  EXPECT_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_NONE);
  int fdv = -1;
  EXPECT_EQ(a_.exp(&fdv, r, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE)
      << "no export without the POSIX fd handle type";
  EXPECT_EQ(a_.release(r), CUDA_SUCCESS);
  // A hole inside the reservation: no handle, no range.
  EXPECT_EQ(retain_(&r, reinterpret_cast<void *>(va + 3 * k2M)), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(range_(&base, &size, va + 3 * k2M + 100), CUDA_ERROR_NOT_FOUND);
  // The range around an address is the whole mapping.
  ASSERT_EQ(range_(&base, &size, va + k2M + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, va);
  EXPECT_EQ(size, 2 * k2M);
  ASSERT_EQ(range_(&base, &size, va + 2 * k2M + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, va + 2 * k2M);
  EXPECT_EQ(size, k2M);
  size_t msize = 0;
  CUdeviceptr mbase = 0;
  unsigned long long types = 0;
  int legacy = -1;
  ASSERT_EQ(attr_(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + k2M), CUDA_SUCCESS);
  EXPECT_EQ(msize, 2 * k2M);
  ASSERT_EQ(attr_(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, va + k2M), CUDA_SUCCESS);
  EXPECT_EQ(mbase, va);
  ASSERT_EQ(attr_(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va), CUDA_SUCCESS);
  EXPECT_EQ(types, 1u);
  types = 0;
  ASSERT_EQ(attr_(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va + 2 * k2M), CUDA_SUCCESS);
  EXPECT_EQ(types, 0u);
  ASSERT_EQ(attr_(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va), CUDA_SUCCESS);
  EXPECT_EQ(legacy, 0);

  // cuMemAlloc memory: a range, but no VMM handle.
  CUdeviceptr plain = 0;
  ASSERT_EQ(alloc_(&plain, k2M), CUDA_SUCCESS);
  EXPECT_EQ(retain_(&r, reinterpret_cast<void *>(plain)), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(range_(&base, &size, plain + 5), CUDA_SUCCESS);
  EXPECT_EQ(base, plain);
  EXPECT_EQ(size, k2M);
  types = 99;
  ASSERT_EQ(attr_(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, plain), CUDA_SUCCESS);
  EXPECT_EQ(types, 0u);
  EXPECT_EQ(free_(plain), CUDA_SUCCESS);

  EXPECT_EQ(a_.unmap(va, 3 * k2M), CUDA_SUCCESS);
  EXPECT_EQ(a_.release(a), CUDA_SUCCESS);
  EXPECT_EQ(a_.release(b), CUDA_SUCCESS);
  EXPECT_EQ(a_.free_va(va, 4 * k2M), CUDA_SUCCESS);
}

// GPU only: memory of a stream-ordered pool (even with POSIX fds allowed)
// has no VMM handle, and vmmipc_buf_wrap says so.
TEST_F(DriverContractAddresses, WrapRefusesStreamOrderedPoolMemory) {
  if (vt::UsingStandin()) GTEST_SKIP() << "the stand-in has no stream-ordered pools (cuMemPoolCreate)";
  decltype(&::cuMemPoolCreate) pool_create = nullptr;
  decltype(&::cuMemPoolDestroy) pool_destroy = nullptr;
  decltype(&::cuMemAllocFromPoolAsync) pool_alloc = nullptr;
  decltype(&::cuMemFreeAsync) free_async = nullptr;
  decltype(&::cuStreamSynchronize) sync = nullptr;
  Get("cuMemPoolCreate", &pool_create);
  Get("cuMemPoolDestroy", &pool_destroy);
  Get("cuMemAllocFromPoolAsync", &pool_alloc);
  Get("cuMemFreeAsync", &free_async);
  Get("cuStreamSynchronize", &sync);
  CUmemPoolProps pp = {};
  pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  pp.location.id = dev_;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(pool_create(&pool, &pp), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(pool_alloc(&p, 2 * k2M, pool, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(sync(nullptr), CUDA_SUCCESS);
  CUmemGenericAllocationHandle r = 0;
  EXPECT_EQ(retain_(&r, reinterpret_cast<void *>(p)), CUDA_ERROR_INVALID_VALUE);
  int before = vt::FdCount();
  vmmipc_buf_t b = nullptr;
  EXPECT_EQ(vmmipc_buf_wrap(reinterpret_cast<void *>(p), 2 * k2M, &b), VMMIPC_ERR_UNSUPPORTED);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(std::string(vmmipc_last_error()).find("stream-ordered pool"), std::string::npos) << vmmipc_last_error();
  EXPECT_EQ(vt::FdCount(), before);
  EXPECT_EQ(free_async(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(sync(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pool_destroy(pool), CUDA_SUCCESS);
}

}  // namespace
