// The transport's codec (src/transport/codec.c), without sockets: frame
// headers to bytes and back with every receiver check, the deterministic cut
// of a message into frames, and the per-peer assembler fed with real fds
// (memfds whose contents say which frame and slot they travelled in), so
// that every fd is seen either delivered in order or closed.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "desc/desc.h"
#include "harness/helpers.h"
#include "transport/codec.h"

namespace {

constexpr uint64_t kComm = 0x0123456789abcdefull;
constexpr uint32_t kMaxB = VMMIPC__FRAME_MAX_BYTES;
constexpr uint32_t kMaxF = VMMIPC__FRAME_MAX_FDS;

uint32_t Get32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
uint64_t Get64(const unsigned char *p) { return Get32(p) | static_cast<uint64_t>(Get32(p + 4)) << 32; }
uint16_t Get16(const unsigned char *p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// A DATA frame from node rank 1 to node rank 0, frame `index` of a message
// of the given totals, cut as every sender cuts it.
vmmipc__frame_t Data(uint64_t seq, uint64_t total_bytes, uint32_t total_fds, uint32_t index = 0,
                     uint16_t ctx = VMMIPC__CTX_COLL) {
  vmmipc__frame_t f;
  std::memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_DATA;
  f.ctx = ctx;
  f.sender = 1;
  f.receiver = 0;
  f.comm_id = kComm;
  f.seq = seq;
  f.total_bytes = total_bytes;
  f.total_fds = total_fds;
  f.index = index;
  vmmipc__frame_cut(total_bytes, total_fds, index, &f.frame_bytes, &f.frame_fds);
  return f;
}

vmmipc__frame_t Abort(uint64_t seq, const std::string &text, uint32_t code = VMMIPC_ERR_CUDA) {
  vmmipc__frame_t f;
  std::memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_ABORT;
  f.ctx = VMMIPC__CTX_COLL;
  f.code = code;
  f.sender = 1;
  f.receiver = 0;
  f.comm_id = kComm;
  f.seq = seq;
  f.total_bytes = f.frame_bytes = static_cast<uint32_t>(text.size());
  return f;
}

vmmipc__frame_t Hello(uint16_t ctx) {
  vmmipc__frame_t f;
  std::memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_HELLO;
  f.ctx = ctx;
  f.sender = 1;
  f.receiver = 0;
  f.comm_id = kComm;
  return f;
}

// The record a sender puts on the wire: header and frame_bytes of payload
// (plus `extra` bytes, or minus when negative).
std::vector<unsigned char> Record(const vmmipc__frame_t &f, long extra = 0) {
  std::vector<unsigned char> r(VMMIPC__FRAME_HEADER_BYTES + f.frame_bytes + extra, 'p');
  vmmipc__frame_encode(&f, r.data());
  return r;
}

vmmipc__frame_expect_t Want(uint16_t ctx = VMMIPC__CTX_COLL) {
  vmmipc__frame_expect_t w;
  std::memset(&w, 0, sizeof w);
  w.sender = 1;
  w.receiver = 0;
  w.comm_id = kComm;
  w.ctx = ctx;
  return w;
}

struct Decoded {
  int rc = 0;
  vmmipc__frame_t f{};
  std::string why;
};

Decoded Decode(const std::vector<unsigned char> &rec, int nfds, const vmmipc__frame_expect_t &want = Want()) {
  Decoded d;
  char why[400] = "";
  d.rc = vmmipc__frame_decode(rec.data(), rec.size(), nfds, &want, &d.f, why, sizeof why);
  d.why = why;
  return d;
}

::testing::AssertionResult Rejected(const Decoded &d, const char *fragment) {
  if (d.rc == 0) return ::testing::AssertionFailure() << "accepted; expected a refusal mentioning \"" << fragment << "\"";
  if (d.why.find(fragment) == std::string::npos)
    return ::testing::AssertionFailure() << "refused with \"" << d.why << "\", expected \"" << fragment << "\"";
  return ::testing::AssertionSuccess();
}

// ---- fds with identities ----------------------------------------------------

// A memfd whose contents name it ("tag"), so that delivery order is visible.
int TaggedFd(const std::string &tag) {
  int fd = memfd_create("vmmipc-codec-test", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (write(fd, tag.data(), tag.size()) != static_cast<ssize_t>(tag.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string TagOf(int fd) {
  char buf[64] = {};
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("<unreadable>");
}

std::string Tag(uint64_t seq, uint32_t index, uint32_t slot) {
  return "seq " + std::to_string(seq) + " frame " + std::to_string(index) + " fd " + std::to_string(slot);
}

// Fresh fds for frame `f` (ownership passes to the assembler on feed).
std::vector<int> FdsFor(const vmmipc__frame_t &f) {
  std::vector<int> v;
  for (uint32_t i = 0; i < f.frame_fds; i++) {
    int fd = TaggedFd(Tag(f.seq, f.index, i));
    EXPECT_GE(fd, 0) << std::strerror(errno);
    v.push_back(fd);
  }
  return v;
}

// The payload of frame `index` of message `seq`: bytes that depend on both
// and on the offset within the message.
std::vector<unsigned char> Payload(const vmmipc__frame_t &f) {
  std::vector<unsigned char> p(f.frame_bytes);
  uint64_t off = static_cast<uint64_t>(f.index) * kMaxB;
  for (size_t i = 0; i < p.size(); i++) p[i] = vt::PatternByte(static_cast<unsigned>(f.seq), off + i);
  return p;
}

// An assembler with its stale-fd counter; frees everything it holds at the end.
struct Asm {
  vmmipc__asm_t a;
  uint64_t stale = 0;
  std::string why;
  Asm() { std::memset(&a, 0, sizeof a); }
  ~Asm() { vmmipc__asm_reset(&a); }
  vmmipc__asm_rc_t Feed(uint64_t lo, uint64_t hi, const vmmipc__frame_t &f) {
    std::vector<int> fds = FdsFor(f);
    std::vector<unsigned char> p = Payload(f);
    char w[400] = "";
    vmmipc__asm_rc_t rc = vmmipc__asm_feed(&a, lo, hi, &f, p.data(), fds.data(), static_cast<int>(fds.size()),
                                           &stale, w, sizeof w);
    why = w;
    return rc;
  }
  vmmipc__asm_rc_t FeedAbort(uint64_t lo, uint64_t hi, const vmmipc__frame_t &f, const std::string &text) {
    char w[400] = "";
    vmmipc__asm_rc_t rc = vmmipc__asm_feed(&a, lo, hi, &f, text.data(), nullptr, 0, &stale, w, sizeof w);
    why = w;
    return rc;
  }
};

// Takes a complete message and checks every byte, and every fd by its tag in
// delivery order (frame by frame, slot by slot); closes and frees it all.
::testing::AssertionResult TakeAndCheck(Asm &m, uint64_t seq, uint64_t total_bytes, uint32_t total_fds) {
  unsigned char *bytes = nullptr;
  size_t nb = 0;
  int *fds = nullptr, nf = 0;
  uint64_t got_seq = ~0ull;
  vmmipc__asm_take(&m.a, &bytes, &nb, &fds, &nf, &got_seq);
  ::testing::AssertionResult res = ::testing::AssertionSuccess();
  if (got_seq != seq || nb != total_bytes || nf != static_cast<int>(total_fds)) {
    res = ::testing::AssertionFailure() << "took message #" << got_seq << " of " << nb << " bytes and " << nf
                                        << " fds; expected #" << seq << ", " << total_bytes << ", " << total_fds;
  } else if ((nb == 0) != (bytes == nullptr) || (nf == 0) != (fds == nullptr)) {
    res = ::testing::AssertionFailure() << "buffers do not match the counts";
  } else {
    for (size_t i = 0; i < nb && res; i++)
      if (bytes[i] != vt::PatternByte(static_cast<unsigned>(seq), i))
        res = ::testing::AssertionFailure() << "byte " << i << " of " << nb << " differs";
    for (int i = 0; i < nf && res; i++) {
      std::string want = Tag(seq, static_cast<uint32_t>(i) / kMaxF, static_cast<uint32_t>(i) % kMaxF);
      if (TagOf(fds[i]) != want)
        res = ::testing::AssertionFailure() << "fd " << i << " holds \"" << TagOf(fds[i]) << "\", expected \"" << want
                                            << "\"";
    }
  }
  vmmipc__close_fds(fds, nf);
  free(fds);
  free(bytes);
  return res;
}

// ============================================================================
// Header encode / decode
// ============================================================================

TEST(Codec, EveryFieldRoundTripsAtItsOffset) {
  // Frame 1 of a message of 100000 bytes and 300 fds: 32768 bytes, 47 fds.
  vmmipc__frame_t f = Data(0x1122334455667788ull, 100000, 300, 1);
  f.sender = 0x0a0b0c0d;
  f.receiver = 0x01020304;
  f.comm_id = 0xf1e2d3c4b5a69788ull;
  ASSERT_EQ(f.frame_bytes, kMaxB);
  ASSERT_EQ(f.frame_fds, 47u);
  std::vector<unsigned char> rec = Record(f);
  const unsigned char *h = rec.data();
  EXPECT_EQ(Get32(h + 0), VMMIPC__FRAME_MAGIC);
  EXPECT_EQ(std::memcmp(h, "vmtp", 4), 0);
  EXPECT_EQ(Get16(h + 4), VMMIPC__FRAME_VERSION);
  EXPECT_EQ(Get16(h + 6), VMMIPC__KIND_DATA);
  EXPECT_EQ(Get16(h + 8), VMMIPC__CTX_COLL);
  EXPECT_EQ(Get16(h + 10), 0);
  EXPECT_EQ(Get32(h + 12), 0u);
  EXPECT_EQ(Get32(h + 16), 0x0a0b0c0du);
  EXPECT_EQ(Get32(h + 20), 0x01020304u);
  EXPECT_EQ(Get64(h + 24), 0xf1e2d3c4b5a69788ull);
  EXPECT_EQ(Get64(h + 32), 0x1122334455667788ull);
  EXPECT_EQ(Get64(h + 40), 100000u);
  EXPECT_EQ(Get32(h + 48), 300u);
  EXPECT_EQ(Get32(h + 52), 1u);
  EXPECT_EQ(Get32(h + 56), kMaxB);
  EXPECT_EQ(Get32(h + 60), 47u);

  vmmipc__frame_expect_t w = Want();
  w.sender = f.sender;
  w.receiver = f.receiver;
  w.comm_id = f.comm_id;
  Decoded d = Decode(rec, 47, w);
  ASSERT_EQ(d.rc, 0) << d.why;
  EXPECT_EQ(std::memcmp(&d.f, &f, sizeof f), 0) << "decode(encode(f)) != f";
  unsigned char again[VMMIPC__FRAME_HEADER_BYTES];
  vmmipc__frame_encode(&d.f, again);
  EXPECT_EQ(std::memcmp(again, rec.data(), sizeof again), 0) << "encode(decode(x)) != x";
}

TEST(Codec, EveryKindAndContextDecodes) {
  for (uint16_t ctx : {VMMIPC__CTX_P2P, VMMIPC__CTX_COLL}) {
    SCOPED_TRACE(ctx);
    Decoded d = Decode(Record(Data(3, 0, 0, 0, ctx)), 0, Want(ctx));
    EXPECT_EQ(d.rc, 0) << d.why;
    EXPECT_EQ(d.f.frame_bytes, 0u);
    // A HELLO names its context; the expectation "any" (0) takes both.
    d = Decode(Record(Hello(ctx)), 0, Want(0));
    EXPECT_EQ(d.rc, 0) << d.why;
    EXPECT_EQ(d.f.kind, VMMIPC__KIND_HELLO);
    EXPECT_EQ(d.f.ctx, ctx);
    vmmipc__frame_t a = Abort(9, "gave up");
    a.ctx = ctx;
    d = Decode(Record(a), 0, Want(ctx));
    EXPECT_EQ(d.rc, 0) << d.why;
    EXPECT_EQ(d.f.code, static_cast<uint32_t>(VMMIPC_ERR_CUDA));
  }
}

// VERDICT and END (version 3): one frame of text, no fds, never part of a
// message; VERDICT in the collective context only, END with seq 0.
TEST(Codec, VerdictAndEndFrames) {
  vmmipc__frame_t v = Abort(7, "verdict text", 0);
  v.kind = VMMIPC__KIND_VERDICT;
  Decoded d = Decode(Record(v), 0);
  EXPECT_EQ(d.rc, 0) << d.why;
  auto bad = [&](auto mutate, int nfds, const char *why) {
    vmmipc__frame_t f = v;
    mutate(f);
    return Rejected(Decode(Record(f), nfds), why);
  };
  EXPECT_TRUE(bad([](auto &f) { f.frame_fds = f.total_fds = 1; }, 1, "malformed VERDICT frame"));
  EXPECT_TRUE(bad([](auto &f) { f.index = 1; }, 0, "malformed VERDICT frame"));
  EXPECT_TRUE(bad([](auto &f) { f.total_bytes = 99; }, 0, "malformed VERDICT frame"));
  EXPECT_TRUE(bad([](auto &f) { f.code = 65; }, 0, "malformed VERDICT frame"));
  std::vector<unsigned char> big(VMMIPC__VERDICT_MAX_BYTES + 1, 'v');
  vmmipc__frame_t f = v;
  f.total_bytes = f.frame_bytes = static_cast<uint32_t>(big.size());
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "malformed VERDICT frame"));
  vmmipc__frame_t p2p = v;
  p2p.ctx = VMMIPC__CTX_P2P;
  EXPECT_TRUE(Rejected(Decode(Record(p2p), 0, Want(VMMIPC__CTX_P2P)), "malformed VERDICT frame"));
  // The assembler takes no VERDICT.
  vmmipc__asm_t a;
  std::memset(&a, 0, sizeof a);
  uint64_t stale = 0;
  char w[200] = "";
  EXPECT_EQ(vmmipc__asm_feed(&a, 0, 10, &v, "verdict text", nullptr, 0, &stale, w, sizeof w), VMMIPC__ASM_BAD);
  EXPECT_NE(std::string(w).find("not part of a message"), std::string::npos) << w;
  // END (the sender aborted the comm): text, a known code, seq 0, no fds.
  vmmipc__frame_t end = Abort(0, "rank 1 aborted the communicator", VMMIPC_ERR_ABORTED);
  end.kind = VMMIPC__KIND_END;
  d = Decode(Record(end), 0);
  EXPECT_EQ(d.rc, 0) << d.why;
  vmmipc__frame_t e2 = end;
  e2.seq = 3;
  EXPECT_TRUE(Rejected(Decode(Record(e2), 0), "malformed END frame"));
  e2 = end;
  e2.code = 0;
  EXPECT_TRUE(Rejected(Decode(Record(e2), 0), "malformed END frame"));
  EXPECT_EQ(vmmipc__asm_feed(&a, 0, 10, &end, "x", nullptr, 0, &stale, w, sizeof w), VMMIPC__ASM_BAD);
  vmmipc__asm_reset(&a);
}

// One valid frame at a time, with one field broken.
TEST(Codec, DecodeRejectsEachMalformedField) {
  const vmmipc__frame_t good = Data(5, 40000, 300, 0);  // 32768 bytes, 253 fds
  ASSERT_EQ(Decode(Record(good), 253).rc, 0);
  auto with = [&](auto mutate) {
    vmmipc__frame_t f = good;
    mutate(f);
    return f;
  };
  // Raw bytes the encoder cannot produce.
  {
    std::vector<unsigned char> r = Record(good);
    r[0] ^= 1;
    EXPECT_TRUE(Rejected(Decode(r, 253), "bad magic"));
    r = Record(good);
    r[4] = 1;  // version 1: the old transport
    EXPECT_TRUE(Rejected(Decode(r, 253), "frame version 1"));
    r = Record(good);
    r[4] = 2;  // version 2: before VERDICT frames and the comm-wide ABORT
    EXPECT_TRUE(Rejected(Decode(r, 253), "frame version 2"));
    r = Record(good);
    r[10] = 1;
    EXPECT_TRUE(Rejected(Decode(r, 253), "reserved header field"));
    r = Record(good);
    r[11] = 0x80;
    EXPECT_TRUE(Rejected(Decode(r, 253), "reserved header field"));
  }
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.kind = 0; })), 253), "unknown frame kind 0"));
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.kind = 6; })), 253), "unknown frame kind 6"));
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.ctx = 0; })), 253), "unknown context 0"));
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.ctx = 3; })), 253), "unknown context 3"));
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.ctx = VMMIPC__CTX_P2P; })), 253),
                       "context 1 on a connection of context 2"));
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.sender = 0; })), 253),
                       "names node rank 0 as its sender, but came from node rank 1"));
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.receiver = 2; })), 253), "addressed to node rank 2, not to 0"));
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.comm_id ^= 1; })), 253), "belongs to communicator"));
  // Lengths and fd counts against the record.
  EXPECT_TRUE(Rejected(Decode(Record(good, -1), 253), "announces 32768 payload bytes but the frame holds 32767"));
  EXPECT_TRUE(Rejected(Decode(Record(good, 1), 253), "announces 32768 payload bytes but the frame holds 32769"));
  EXPECT_TRUE(Rejected(Decode(Record(good), 252), "announces 253 fds but 252 came"));
  EXPECT_TRUE(Rejected(Decode(Record(good), 0), "announces 253 fds but 0 came"));
  EXPECT_TRUE(Rejected(Decode(Record(good), -1), "but -1 came"));
  // Short records: none of the header is trusted.
  for (size_t len : {size_t{0}, size_t{1}, size_t{63}}) {
    std::vector<unsigned char> r = Record(good);
    r.resize(len);
    EXPECT_TRUE(Rejected(Decode(r, 0), "short frame")) << len;
  }
  EXPECT_TRUE(Rejected(Decode(Record(with([](auto &f) { f.code = 1; })), 253), "DATA frame with result code 1"));
}

TEST(Codec, DataFramesMustMatchTheDeterministicCut) {
  // The limits themselves are legal; one more is not.
  vmmipc__frame_t f = Data(1, VMMIPC__MSG_MAX_BYTES, 0);
  EXPECT_EQ(Decode(Record(f), 0).rc, 0);
  f = Data(1, VMMIPC__MSG_MAX_BYTES + 1, 0);
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "exceeds the limits"));
  f = Data(1, 0, VMMIPC__MSG_MAX_FDS);
  EXPECT_EQ(Decode(Record(f), kMaxF).rc, 0);
  f = Data(1, 0, VMMIPC__MSG_MAX_FDS + 1);
  EXPECT_TRUE(Rejected(Decode(Record(f), kMaxF), "exceeds the limits"));
  f = Data(1, ~0ull, ~0u);
  EXPECT_TRUE(Rejected(Decode(Record(f), kMaxF), "exceeds the limits"));
  // The last frame of a message exists; the one after does not.
  f = Data(1, 2 * kMaxB + 1, 0, 2);
  EXPECT_EQ(f.frame_bytes, 1u);
  EXPECT_EQ(Decode(Record(f), 0).rc, 0);
  f.index = 3;
  f.frame_bytes = 0;
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "frame 3 of a message of 3 frame(s)"));
  f = Data(1, 100, 0, 0);
  f.index = 1;
  f.frame_bytes = 0;
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "frame 1 of a message of 1 frame(s)"));
  f.index = ~0u;
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "of a message of 1 frame(s)"));
  // A cut that differs from the deterministic one, in bytes or in fds.
  f = Data(1, 40000, 0, 0);
  f.frame_bytes = 20000;
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "is cut into 32768 bytes and 0 fds there"));
  f = Data(1, 40000, 0, 1);
  f.frame_bytes = kMaxB;  // frame 1 holds the remaining 7232 bytes
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "cut into 7232 bytes"));
  f = Data(1, 10, 300, 0);
  f.frame_fds = 47;  // the fds go first in batches of 253
  EXPECT_TRUE(Rejected(Decode(Record(f), 47), "cut into 10 bytes and 253 fds"));
  f = Data(1, 10, 300, 1);
  EXPECT_EQ(f.frame_fds, 47u);
  EXPECT_EQ(f.frame_bytes, 0u);
  EXPECT_EQ(Decode(Record(f), 47).rc, 0);
  f.frame_fds = 0;  // fds that the message announces must come with it
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "cut into 0 bytes and 47 fds"));
  // More fds than SCM_MAX_FD in one frame cannot be the cut.
  f = Data(1, 0, 300, 0);
  f.frame_fds = 300;
  EXPECT_TRUE(Rejected(Decode(Record(f), 300), "cut into 0 bytes and 253 fds"));
}

TEST(Codec, HelloCarriesNothing) {
  EXPECT_TRUE(Rejected(Decode(Record(Hello(VMMIPC__CTX_P2P)), 0, Want(VMMIPC__CTX_COLL)), "context 1 on a connection"));
  auto bad = [](auto mutate) {
    vmmipc__frame_t f = Hello(VMMIPC__CTX_COLL);
    mutate(f);
    return f;
  };
  const char *frag = "a HELLO frame carries data";
  EXPECT_TRUE(Rejected(Decode(Record(bad([](auto &f) { f.code = 1; })), 0, Want(0)), frag));
  EXPECT_TRUE(Rejected(Decode(Record(bad([](auto &f) { f.seq = 1; })), 0, Want(0)), frag));
  EXPECT_TRUE(Rejected(Decode(Record(bad([](auto &f) { f.total_bytes = 1; })), 0, Want(0)), frag));
  EXPECT_TRUE(Rejected(Decode(Record(bad([](auto &f) { f.total_fds = 1; })), 0, Want(0)), frag));
  EXPECT_TRUE(Rejected(Decode(Record(bad([](auto &f) { f.index = 1; })), 0, Want(0)), frag));
  EXPECT_TRUE(Rejected(Decode(Record(bad([](auto &f) { f.frame_bytes = 4; })), 0, Want(0)), frag));
  EXPECT_TRUE(Rejected(Decode(Record(bad([](auto &f) { f.frame_fds = 1; })), 1, Want(0)), frag));
}

TEST(Codec, AbortShapesAndCodes) {
  const std::string text = "rank 1: cuMemMap failed";
  EXPECT_EQ(Decode(Record(Abort(0, text, 1)), 0).rc, 0);
  EXPECT_EQ(Decode(Record(Abort(0, text, 64)), 0).rc, 0);
  EXPECT_EQ(Decode(Record(Abort(0, "")), 0).rc, 0);  // no text is allowed
  EXPECT_EQ(Decode(Record(Abort(0, std::string(VMMIPC__ABORT_MAX_BYTES, 'x'))), 0).rc, 0);
  EXPECT_TRUE(Rejected(Decode(Record(Abort(0, text, 0)), 0), "ABORT with result code 0"));
  EXPECT_TRUE(Rejected(Decode(Record(Abort(0, text, 65)), 0), "ABORT with result code 65"));
  EXPECT_TRUE(Rejected(Decode(Record(Abort(0, std::string(VMMIPC__ABORT_MAX_BYTES + 1, 'x'))), 0),
                       "malformed ABORT frame (1024 bytes"));
  vmmipc__frame_t f = Abort(0, text);
  f.index = 1;
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "malformed ABORT frame"));
  f = Abort(0, text);
  f.frame_fds = 1;
  EXPECT_TRUE(Rejected(Decode(Record(f), 1), "malformed ABORT frame"));
  f = Abort(0, text);
  f.total_fds = 1;
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "malformed ABORT frame"));
  f = Abort(0, text);
  f.total_bytes = text.size() + 1;
  EXPECT_TRUE(Rejected(Decode(Record(f), 0), "malformed ABORT frame"));
  // The last message number is nobody's: a point-to-point receiver would
  // wrap to 0 expecting the message after it.
  EXPECT_TRUE(Rejected(Decode(Record(Abort(UINT64_MAX, text)), 0), "an ABORT frame with message number 2^64-1"));
  EXPECT_TRUE(Rejected(Decode(Record(Data(UINT64_MAX, 8, 0)), 0), "a DATA frame with message number 2^64-1"));
  EXPECT_EQ(Decode(Record(Abort(UINT64_MAX - 1, text)), 0).rc, 0);
}

TEST(Codec, ReasonIsOptional) {
  std::vector<unsigned char> r = Record(Data(1, 0, 0));
  r[0] ^= 1;
  vmmipc__frame_expect_t w = Want();
  vmmipc__frame_t f;
  EXPECT_EQ(vmmipc__frame_decode(r.data(), r.size(), 0, &w, &f, nullptr, 0), -1);
  char why[8] = "unset";
  EXPECT_EQ(vmmipc__frame_decode(r.data(), r.size(), 0, &w, &f, why, sizeof why), -1);
  EXPECT_EQ(std::strlen(why), sizeof why - 1) << "the reason is cut to the buffer";
}

// ============================================================================
// The cut
// ============================================================================

TEST(Codec, FrameCountAtTheBoundaries) {
  struct Case {
    uint64_t bytes;
    uint32_t fds;
    uint64_t frames;
  } cases[] = {
      {0, 0, 1},           {1, 0, 1},           {kMaxB - 1, 0, 1},   {kMaxB, 0, 1},       {kMaxB + 1, 0, 2},
      {2 * kMaxB, 0, 2},   {2 * kMaxB + 1, 0, 3}, {0, 1, 1},          {0, kMaxF - 1, 1},   {0, kMaxF, 1},
      {0, kMaxF + 1, 2},   {0, 2 * kMaxF, 2},   {0, 2 * kMaxF + 1, 3}, {kMaxB + 1, 3 * kMaxF, 3},
      {5 * kMaxB, kMaxF + 1, 5}, {VMMIPC__MSG_MAX_BYTES, 0, VMMIPC__MSG_MAX_BYTES / kMaxB},
      {0, VMMIPC__MSG_MAX_FDS, (VMMIPC__MSG_MAX_FDS + kMaxF - 1) / kMaxF},
  };
  for (const Case &c : cases)
    EXPECT_EQ(vmmipc__frame_count(c.bytes, c.fds), c.frames) << c.bytes << " bytes, " << c.fds << " fds";
}

TEST(Codec, CutsAddUpAndEveryFrameButAnEmptyMessageCarriesSomething) {
  const uint64_t sizes[] = {0, 1, kMaxB - 1, kMaxB, kMaxB + 1, 3 * kMaxB, 3 * kMaxB + 7, 100000};
  const uint32_t fdcounts[] = {0, 1, kMaxF - 1, kMaxF, kMaxF + 1, 2 * kMaxF, 600, 1000};
  for (uint64_t b : sizes) {
    for (uint32_t fd : fdcounts) {
      SCOPED_TRACE(std::to_string(b) + " bytes, " + std::to_string(fd) + " fds");
      uint64_t n = vmmipc__frame_count(b, fd), sb = 0, sf = 0;
      for (uint32_t i = 0; i < n; i++) {
        uint32_t cb, cf;
        vmmipc__frame_cut(b, fd, i, &cb, &cf);
        EXPECT_LE(cb, kMaxB);
        EXPECT_LE(cf, kMaxF);
        if (n > 1) {
          EXPECT_TRUE(cb > 0 || cf > 0) << "frame " << i << " is empty";
        }
        // Full frames first: only the last frame of each kind is partial.
        if (sb + cb < b) {
          EXPECT_EQ(cb, kMaxB) << "frame " << i;
        }
        if (sf + cf < fd) {
          EXPECT_EQ(cf, kMaxF) << "frame " << i;
        }
        sb += cb;
        sf += cf;
      }
      EXPECT_EQ(sb, b);
      EXPECT_EQ(sf, fd);
      uint32_t cb = 1, cf = 1;
      vmmipc__frame_cut(b, fd, static_cast<uint32_t>(n), &cb, &cf);
      EXPECT_EQ(cb, 0u) << "beyond the last frame";
      EXPECT_EQ(cf, 0u) << "beyond the last frame";
    }
  }
  uint32_t cb = 1, cf = 1;
  vmmipc__frame_cut(kMaxB + 1, kMaxF + 1, 1, &cb, &cf);
  EXPECT_EQ(cb, 1u);
  EXPECT_EQ(cf, 1u);
  vmmipc__frame_cut(0, 0, 0, &cb, &cf);
  EXPECT_EQ(cb, 0u);
  EXPECT_EQ(cf, 0u);
}

// ============================================================================
// The assembler
// ============================================================================

class Assembler : public ::testing::Test {
 protected:
  void SetUp() override { base_ = vt::FdCount(); }
  void TearDown() override { EXPECT_EQ(vt::FdCount(), base_) << "fds leaked"; }
  int base_ = 0;
};

TEST_F(Assembler, MultiFrameMessageArrivesWhole) {
  Asm m;
  // 70000 bytes and 600 fds: three frames (by bytes and by fds alike).
  const uint64_t B = 70000;
  const uint32_t F = 600;
  ASSERT_EQ(vmmipc__frame_count(B, F), 3u);
  EXPECT_EQ(m.Feed(7, 7, Data(7, B, F, 0)), VMMIPC__ASM_MORE) << m.why;
  EXPECT_EQ(m.a.fds_done, kMaxF);
  EXPECT_EQ(m.Feed(7, 7, Data(7, B, F, 1)), VMMIPC__ASM_MORE) << m.why;
  EXPECT_EQ(vt::FdCount(), base_ + static_cast<int>(2 * kMaxF)) << "the assembler holds what arrived";
  EXPECT_EQ(m.Feed(7, 7, Data(7, B, F, 2)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 7, B, F));
  EXPECT_EQ(m.stale, 0u);
  EXPECT_EQ(m.a.active, 0);
  // The assembler is ready for the next message; an empty one is one frame.
  EXPECT_EQ(m.Feed(8, 8, Data(8, 0, 0)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 8, 0, 0));
  // Only fds, across the 253 boundary.
  EXPECT_EQ(m.Feed(9, 9, Data(9, 0, kMaxF + 1, 0)), VMMIPC__ASM_MORE) << m.why;
  EXPECT_EQ(m.Feed(9, 9, Data(9, 0, kMaxF + 1, 1)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 9, 0, kMaxF + 1));
  // Exactly one full frame of each.
  EXPECT_EQ(m.Feed(10, 10, Data(10, kMaxB, kMaxF, 0)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 10, kMaxB, kMaxF));
}

TEST_F(Assembler, StaleFramesAreClosedAndCounted) {
  Asm m;
  EXPECT_EQ(m.Feed(5, 5, Data(4, 10, 3)), VMMIPC__ASM_STALE);
  EXPECT_EQ(m.stale, 3u);
  EXPECT_EQ(vt::FdCount(), base_) << "stale fds are closed at once";
  EXPECT_EQ(m.Feed(5, 5, Data(0, 40000, 300, 1)), VMMIPC__ASM_STALE) << "even a frame that starts nowhere";
  EXPECT_EQ(m.stale, 3u + 47u);
  EXPECT_EQ(m.FeedAbort(5, 5, Abort(4, "old"), "old"), VMMIPC__ASM_STALE) << "an old ABORT is stale too";
  EXPECT_EQ(m.a.active, 0);
  // The current message is untouched by all that.
  EXPECT_EQ(m.Feed(5, 5, Data(5, 10, 3)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 5, 10, 3));
}

TEST_F(Assembler, LeftoverOfAnEarlierCallIsDropped) {
  Asm m;
  EXPECT_EQ(m.Feed(3, 3, Data(3, 40000, 300, 0)), VMMIPC__ASM_MORE);  // the call at epoch 3 gave up here
  EXPECT_EQ(vt::FdCount(), base_ + static_cast<int>(kMaxF));
  // The next call, at epoch 4: its first frame finds the half message of 3.
  EXPECT_EQ(m.Feed(4, 4, Data(4, 1, 2)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_EQ(m.stale, kMaxF);
  EXPECT_TRUE(TakeAndCheck(m, 4, 1, 2));
}

TEST_F(Assembler, SeqAboveHiBreaksTheProtocol) {
  Asm m;
  EXPECT_EQ(m.Feed(5, 5, Data(6, 10, 4)), VMMIPC__ASM_BAD);
  EXPECT_NE(m.why.find("message #6 arrived while this rank expects at most #5"), std::string::npos) << m.why;
  EXPECT_EQ(m.stale, 0u) << "a refused frame is not stale";
  EXPECT_EQ(vt::FdCount(), base_) << "its fds are closed";
  EXPECT_EQ(m.FeedAbort(5, 5, Abort(6, "x"), "x"), VMMIPC__ASM_BAD) << "an ABORT from the future too";
}

// Point-to-point: numbers may skip (a send that failed before any frame
// went out), and a new message replaces one its sender gave up.
TEST_F(Assembler, GapsAreAcceptedAndANewMessageReplacesAnIncompleteOne) {
  Asm m;
  EXPECT_EQ(m.Feed(0, UINT64_MAX, Data(3, 1, 1, 0, VMMIPC__CTX_P2P)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 3, 1, 1));
  EXPECT_EQ(m.Feed(4, UINT64_MAX, Data(4, 3 * kMaxB, 10, 0, VMMIPC__CTX_P2P)), VMMIPC__ASM_MORE) << m.why;
  EXPECT_EQ(m.Feed(4, UINT64_MAX, Data(4, 3 * kMaxB, 10, 1, VMMIPC__CTX_P2P)), VMMIPC__ASM_MORE) << m.why;
  EXPECT_EQ(vt::FdCount(), base_ + 10);
  EXPECT_EQ(m.Feed(4, UINT64_MAX, Data(6, 5, 2, 0, VMMIPC__CTX_P2P)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_EQ(m.stale, 10u) << "the given-up message's fds";
  EXPECT_TRUE(TakeAndCheck(m, 6, 5, 2));
}

TEST_F(Assembler, FramesThatDoNotContinueAreRefused) {
  const uint64_t B = 3 * kMaxB;
  {
    Asm m;
    ASSERT_EQ(m.Feed(5, 9, Data(5, B, 10, 0)), VMMIPC__ASM_MORE);
    EXPECT_EQ(m.Feed(5, 9, Data(5, B, 10, 2)), VMMIPC__ASM_BAD) << "frame 1 skipped";
    EXPECT_NE(m.why.find("frame 2 (of 98304 bytes, 10 fds) does not continue message #5 at frame 1"),
              std::string::npos)
        << m.why;
    vmmipc__frame_t f = Data(5, B + kMaxB, 10, 1);  // the totals changed under way
    EXPECT_EQ(m.Feed(5, 9, f), VMMIPC__ASM_BAD);
    EXPECT_NE(m.why.find("does not continue message #5"), std::string::npos) << m.why;
    f = Data(5, B, 11, 0);  // the same message number started again
    EXPECT_EQ(m.Feed(5, 9, f), VMMIPC__ASM_BAD);
    EXPECT_NE(m.why.find("does not continue"), std::string::npos) << m.why;
    EXPECT_EQ(m.Feed(5, 9, Data(6, B, 10, 1)), VMMIPC__ASM_BAD) << "a later message, not from its start";
    EXPECT_NE(m.why.find("frame 1 of message #6 arrived while message #5 was incomplete"), std::string::npos)
        << m.why;
    EXPECT_EQ(m.stale, 0u);
    EXPECT_EQ(vt::FdCount(), base_ + 10) << "refused frames' fds are closed; the partial message is kept";
    // The frame that does continue is still taken.
    EXPECT_EQ(m.Feed(5, 9, Data(5, B, 10, 1)), VMMIPC__ASM_MORE) << m.why;
    EXPECT_EQ(m.Feed(5, 9, Data(5, B, 10, 2)), VMMIPC__ASM_DONE) << m.why;
    EXPECT_TRUE(TakeAndCheck(m, 5, B, 10));
  }
  {
    Asm m;
    EXPECT_EQ(m.Feed(5, 9, Data(5, B, 10, 1)), VMMIPC__ASM_BAD);
    EXPECT_NE(m.why.find("frame 1 of message #5 without its first frame"), std::string::npos) << m.why;
    ASSERT_EQ(m.Feed(3, 9, Data(6, B, 10, 0)), VMMIPC__ASM_MORE);
    EXPECT_EQ(m.Feed(3, 9, Data(4, 1, 1, 0)), VMMIPC__ASM_BAD);
    EXPECT_NE(m.why.find("message #4 arrived after message #6 had begun: the stream went backwards"),
              std::string::npos)
        << m.why;
  }  // the partial message of 6 is closed by reset
}

TEST_F(Assembler, AbortEndsAMessageAndDropsWhatArrived) {
  Asm m;
  ASSERT_EQ(m.Feed(5, 5, Data(5, 2 * kMaxB, 7, 0)), VMMIPC__ASM_MORE);
  EXPECT_EQ(vt::FdCount(), base_ + 7);
  EXPECT_EQ(m.FeedAbort(5, 5, Abort(5, "rank 1 failed"), "rank 1 failed"), VMMIPC__ASM_ABORT);
  EXPECT_EQ(m.stale, 7u);
  EXPECT_EQ(m.a.active, 0);
  EXPECT_EQ(vt::FdCount(), base_);
  // An ABORT of a later message also ends the one under way.
  ASSERT_EQ(m.Feed(5, 9, Data(6, 2 * kMaxB, 2, 0)), VMMIPC__ASM_MORE);
  EXPECT_EQ(m.FeedAbort(5, 9, Abort(8, ""), ""), VMMIPC__ASM_ABORT);
  EXPECT_EQ(m.stale, 9u);
  // An ABORT with no message under way.
  EXPECT_EQ(m.FeedAbort(5, 9, Abort(9, "x"), "x"), VMMIPC__ASM_ABORT);
  EXPECT_EQ(m.stale, 9u);
}

// MSG_CTRUNC cut a frame's fds short: the rest of that message is dropped,
// and the next one is taken.
TEST_F(Assembler, SkipDropsTheRestOfAMessage) {
  Asm m;
  const uint32_t F = 3 * kMaxF;
  ASSERT_EQ(m.Feed(0, UINT64_MAX, Data(2, 0, F, 0, VMMIPC__CTX_P2P)), VMMIPC__ASM_MORE);
  // Frame 1 lost its fds on the way in (the receiver closed what came):
  vmmipc__asm_skip(&m.a, 2, &m.stale);
  EXPECT_EQ(m.stale, kMaxF) << "what the half message held";
  EXPECT_EQ(vt::FdCount(), base_);
  EXPECT_EQ(m.Feed(0, UINT64_MAX, Data(2, 0, F, 2, VMMIPC__CTX_P2P)), VMMIPC__ASM_STALE) << m.why;
  EXPECT_EQ(m.stale, 2u * kMaxF);
  EXPECT_EQ(vt::FdCount(), base_);
  EXPECT_EQ(m.Feed(0, UINT64_MAX, Data(3, 4, 1, 0, VMMIPC__CTX_P2P)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 3, 4, 1));
  EXPECT_EQ(m.a.skipping, 0);
  // The very first frame of a message truncated: nothing is held, and its
  // later frames are dropped all the same.
  vmmipc__asm_skip(&m.a, 4, &m.stale);
  EXPECT_EQ(m.Feed(0, UINT64_MAX, Data(4, 0, F, 1, VMMIPC__CTX_P2P)), VMMIPC__ASM_STALE) << m.why;
  EXPECT_EQ(m.Feed(0, UINT64_MAX, Data(4, 0, F, 2, VMMIPC__CTX_P2P)), VMMIPC__ASM_STALE) << m.why;
  EXPECT_EQ(m.stale, 4u * kMaxF);
  EXPECT_EQ(m.Feed(0, UINT64_MAX, Data(5, 0, 0, 0, VMMIPC__CTX_P2P)), VMMIPC__ASM_DONE) << m.why;
  EXPECT_TRUE(TakeAndCheck(m, 5, 0, 0));
}

TEST_F(Assembler, DropAndResetCloseWhatIsHeld) {
  {
    Asm m;
    ASSERT_EQ(m.Feed(1, 1, Data(1, 0, 2 * kMaxF, 0)), VMMIPC__ASM_MORE);
    EXPECT_EQ(vt::FdCount(), base_ + static_cast<int>(kMaxF));
    vmmipc__asm_drop(&m.a, 1, &m.stale);
    EXPECT_EQ(m.stale, kMaxF);
    EXPECT_EQ(vt::FdCount(), base_);
    EXPECT_EQ(m.Feed(1, 1, Data(1, 0, 2 * kMaxF, 1)), VMMIPC__ASM_STALE) << "drop with skip: the rest goes too";
    vmmipc__asm_drop(&m.a, 0, &m.stale);  // nothing held: nothing happens
    EXPECT_EQ(m.stale, 2u * kMaxF);
  }
  {
    Asm m;
    ASSERT_EQ(m.Feed(1, 1, Data(1, 2 * kMaxB, 100, 0)), VMMIPC__ASM_MORE);
    EXPECT_EQ(vt::FdCount(), base_ + 100);
  }  // reset (the destructor) closes them
  EXPECT_EQ(vt::FdCount(), base_);
}

}  // namespace

// A peer's empty point-to-point message (no bytes: the assembler hands over
// NULL) is a malformed descriptor, the sender's fault: VMMIPC_ERR_INVALID_DESC,
// its fds closed. Before, the receive returned VMMIPC_ERR_INVALID_ARG
// ("vmmipc_desc_unpack: bytes is NULL"), as if its caller had erred
// (fuzz_frame, in CI). The public call still refuses a NULL argument.
TEST(Codec, AnEmptyDescriptorMessageIsMalformedNotTheCallersError) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  int fds[1] = {p[0]};
  vmmipc_desc_t d = nullptr;
  EXPECT_EQ(vmmipc__desc_adopt(nullptr, 0, fds, 1, &d), VMMIPC_ERR_INVALID_DESC) << vmmipc_last_error();
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(fcntl(p[0], F_GETFD), -1) << "the message's fd was not closed";
  close(p[1]);
  EXPECT_EQ(vmmipc__desc_adopt(nullptr, 0, nullptr, 0, &d), VMMIPC_ERR_INVALID_DESC);
  EXPECT_EQ(vmmipc_desc_unpack(nullptr, 0, nullptr, 0, &d), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(d, nullptr);
}
