// Buffers and descriptors between two processes over a plain Unix socket
// (the raw-fd path): every byte of a moved 3-chunk buffer, writes back,
// read-only access, forwarding, and an owner the importer cannot see.
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/testhooks.h"
#include <cuda.h>

#include "harness/helpers.h"
#include "harness/rawchan.h"

namespace {

constexpr size_t kGran = 2u << 20;

std::vector<unsigned char> Pack(vmmipc_desc_t d, std::vector<int> *fds) {
  size_t nb = 0;
  int nf = 0;
  vmmipc_desc_pack(d, nullptr, &nb, nullptr, &nf);
  std::vector<unsigned char> bytes(nb);
  fds->assign(nf, -1);
  EXPECT_VMM_OK(vmmipc_desc_pack(d, bytes.data(), &nb, fds->data(), &nf));
  return bytes;
}

class CrossProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (vt::Size() < 2) GTEST_SKIP() << "needs 2 ranks";
    dev_ = vt::UseRankDevice();
    ASSERT_GE(dev_, 0);
    fds0_ = vt::FdCount();
  }
  void TearDown() override {
    if (vt::Size() < 2) return;
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_EQ(vt::FdCount(), fds0_) << "fds leaked";
  }
  // Rank 0 exports `b` to rank 1, which unpacks it.
  vmmipc_desc_t Ship(vt::RawChannel &ch, vmmipc_buf_t b) {
    vmmipc_desc_t out = nullptr;
    if (vt::Rank() == 0) {
      vmmipc_desc_t d = nullptr;
      EXPECT_VMM_OK(vmmipc_export(b, &d));
      std::vector<int> fds;
      auto bytes = Pack(d, &fds);
      EXPECT_TRUE(ch.Send(bytes, fds));
      vmmipc_desc_free(d);  // the receiver holds its own fds now
    } else if (vt::Rank() == 1) {
      std::vector<unsigned char> bytes;
      std::vector<int> fds;
      EXPECT_TRUE(ch.Recv(&bytes, &fds));
      EXPECT_VMM_OK(vmmipc_desc_unpack(bytes.data(), bytes.size(), fds.data(), static_cast<int>(fds.size()), &out));
      for (int fd : fds) close(fd);  // unpack duplicated them
    }
    return out;
  }
  int dev_ = -1, fds0_ = 0;
};

TEST_F(CrossProcess, MovedThreeChunkBufferIsSeenByteForByteBothWays) {
  vt::RawChannel ch;
  ASSERT_TRUE(vt::Rank() > 1 || ch.ok());
  vmmipc_buf_t b = nullptr;
  void *p = nullptr;
  size_t n = 0;
  const size_t size = 3 * kGran - 100;
  if (vt::Rank() == 0) {
    ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
    vmmipc_buf_ptr(b, &p, nullptr);
    void *first = p;
    ASSERT_VMM_OK(vmmipc_grow(b, 2 * kGran));
    vmmipc__test_fail_at("inplace", 1);  // force the relocating path
    ASSERT_VMM_OK(vmmipc_grow(b, size));
    int chunks = 0;
    vmmipc_buf_info(b, &chunks, nullptr);
    ASSERT_EQ(chunks, 3);
    vmmipc_buf_ptr(b, &p, &n);
    ASSERT_NE(p, first) << "the buffer should have moved";
    vt::FillPattern(p, n, 77);
  }
  vmmipc_desc_t d = Ship(ch, b);
  vmmipc_buf_t imp = nullptr;
  if (vt::Rank() == 1) {
    ASSERT_NE(d, nullptr);
    int chunks = 0;
    vmmipc_desc_info(d, &n, &chunks, nullptr);
    EXPECT_EQ(n, size);
    EXPECT_EQ(chunks, 3);
    ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));
    vmmipc_desc_free(d);
    vmmipc_buf_ptr(imp, &p, &n);
    EXPECT_TRUE(vt::CheckPattern(p, n, 77));
    // Write the second half; the owner must see it.
    std::vector<unsigned char> h(n / 2);
    for (size_t i = 0; i < h.size(); i++) h[i] = vt::PatternByte(78, i);
    vt::CopyToDevice(static_cast<char *>(p) + n / 2, h.data(), h.size());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (vt::Rank() == 0) {
    std::vector<unsigned char> h(n);
    vt::CopyToHost(h.data(), p, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
      unsigned char want = i < n / 2 ? vt::PatternByte(77, i) : vt::PatternByte(78, i - n / 2);
      bad += h[i] != want;
    }
    EXPECT_EQ(bad, 0u) << "bytes that differ after the importer's write";
    vmmipc_buf_free(b);
  }
  if (imp) vmmipc_buf_free(imp);
}

TEST_F(CrossProcess, ReadOnlyImportReportsReadAccess) {
  vt::RawChannel ch;
  vmmipc_buf_t b = nullptr;
  if (vt::Rank() == 0) {
    ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
    void *p = nullptr;
    vmmipc_buf_ptr(b, &p, nullptr);
    vt::FillPattern(p, kGran, 5);
  }
  vmmipc_desc_t d = Ship(ch, b);
  if (vt::Rank() == 1) {
    vmmipc_access_t a = {sizeof(vmmipc_access_t), VMMIPC_PROT_READ, 0, nullptr};
    vmmipc_buf_t ro = nullptr;
    ASSERT_VMM_OK(vmmipc_import(d, &a, &ro));
    void *q = nullptr;
    vmmipc_buf_ptr(ro, &q, nullptr);
    EXPECT_EQ(vt::AccessFlags(q, dev_), CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_TRUE(vt::CheckPattern(q, kGran, 5));
    vmmipc_buf_free(ro);
    vmmipc_desc_free(d);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (b) vmmipc_buf_free(b);
}

// A received descriptor can be packed and sent on (forwarded), while the
// imported buffer cannot be exported.
TEST_F(CrossProcess, ReceivedDescriptorsForwardButImportsDoNotExport) {
  vt::RawChannel ch;
  vmmipc_buf_t b = nullptr;
  if (vt::Rank() == 0) {
    ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
    void *p = nullptr;
    vmmipc_buf_ptr(b, &p, nullptr);
    vt::FillPattern(p, kGran, 15);
  }
  vmmipc_desc_t d = Ship(ch, b);
  if (vt::Rank() == 1) {
    vmmipc_buf_t imp = nullptr;
    vmmipc_desc_t again = nullptr;
    ASSERT_VMM_OK(vmmipc_import(d, nullptr, &imp));
    EXPECT_EQ(vmmipc_export(imp, &again), VMMIPC_ERR_NOT_EXPORTABLE);
    // Forward: pack the received descriptor and rebuild it, as a relay would.
    std::vector<int> fds;
    auto bytes = Pack(d, &fds);
    vmmipc_desc_t fwd = nullptr;
    ASSERT_VMM_OK(vmmipc_desc_unpack(bytes.data(), bytes.size(), fds.data(), static_cast<int>(fds.size()), &fwd));
    vmmipc_buf_t imp2 = nullptr;
    ASSERT_VMM_OK(vmmipc_import(fwd, nullptr, &imp2));
    void *q = nullptr;
    vmmipc_buf_ptr(imp2, &q, nullptr);
    EXPECT_TRUE(vt::CheckPattern(q, kGran, 15));
    vmmipc_buf_free(imp2);
    vmmipc_buf_free(imp);
    vmmipc_desc_free(fwd);
    vmmipc_desc_free(d);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (b) vmmipc_buf_free(b);
}

// Under OWN_GPU each rank sees one device; the importer maps the owner's
// memory for its own device, named by default or by UUID.
TEST_F(CrossProcess, ImporterThatCannotSeeTheOwnerStillMapsIt) {
  int count = 0;
  ASSERT_VMM_OK(vmmipc_device_count(&count));
  vt::RawChannel ch;
  vmmipc_buf_t b = nullptr;
  vmmipc_uuid_t owner{};
  if (vt::Rank() == 0) {
    ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
    void *p = nullptr;
    vmmipc_buf_ptr(b, &p, nullptr);
    vt::FillPattern(p, kGran, 50);
    ASSERT_VMM_OK(vmmipc_device_uuid(dev_, &owner));
  }
  MPI_Bcast(owner.bytes, 16, MPI_BYTE, 0, MPI_COMM_WORLD);
  vmmipc_desc_t d = Ship(ch, b);
  if (vt::Rank() == 1) {
    vmmipc_uuid_t got{};
    vmmipc_desc_info(d, nullptr, nullptr, &got);
    EXPECT_EQ(std::memcmp(got.bytes, owner.bytes, 16), 0) << "the descriptor names the owner GPU";
    vmmipc_uuid_t mine;
    ASSERT_VMM_OK(vmmipc_device_uuid(dev_, &mine));
    vmmipc_access_t a = {sizeof(vmmipc_access_t), VMMIPC_PROT_READWRITE, 1, &mine};
    vmmipc_buf_t imp = nullptr;
    ASSERT_VMM_OK(vmmipc_import(d, &a, &imp));
    void *q = nullptr;
    vmmipc_buf_ptr(imp, &q, nullptr);
    EXPECT_TRUE(vt::CheckPattern(q, kGran, 50));
    vmmipc_buf_free(imp);
    if (count == 1) {
      // Asking for the owner's device by UUID names it: it is not visible here.
      vmmipc_access_t bad = {sizeof(vmmipc_access_t), VMMIPC_PROT_READWRITE, 1, &owner};
      if (std::memcmp(owner.bytes, mine.bytes, 16) != 0) {
        EXPECT_EQ(vmmipc_import(d, &bad, &imp), VMMIPC_ERR_INVALID_ARG);
        char s[VMMIPC_UUID_STRING_LEN];
        vmmipc_uuid_format(&owner, s);
        EXPECT_NE(std::string(vmmipc_last_error()).find(s), std::string::npos) << vmmipc_last_error();
      }
    }
    vmmipc_desc_free(d);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (b) vmmipc_buf_free(b);
}

}  // namespace
