// The transport's raw record I/O (src/transport/conn.c) on a real socket
// pair: what a reader gets when its peer closed with records unread.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "harness/helpers.h"
#include "transport/codec.h"
#include "transport/conn.h"

namespace {

// Linux reports ECONNRESET once to a SOCK_SEQPACKET reader whose peer closed
// with records of the reader's unread, and reports it before the records
// the peer sent. An agreement's verdict can be such a record: the collector
// sends it and destroys its comm while a member's stale frame sits unread.
TEST(Conn, RecordsQueuedBeforeTheirSenderClosedAreStillRead) {
  const int base = vt::FdCount();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  const char stale[] = "stale", verdict[] = "verdict";
  ASSERT_EQ(vmmipc__conn_send(sv[0], stale, sizeof stale, nullptr, 0, nullptr, 0), 0);  // never read
  ASSERT_EQ(vmmipc__conn_send(sv[1], verdict, sizeof verdict, nullptr, 0, nullptr, 0), 0);
  close(sv[1]);  // with "stale" unread
  char buf[64];
  vmmipc__rec_t rec;
  ASSERT_EQ(vmmipc__conn_recv(sv[0], buf, sizeof buf, &rec), 0);
  ASSERT_EQ(rec.len, sizeof verdict);
  EXPECT_EQ(std::memcmp(buf, verdict, sizeof verdict), 0);
  EXPECT_EQ(rec.nfds, 0);
  ASSERT_EQ(vmmipc__conn_recv(sv[0], buf, sizeof buf, &rec), 0);
  EXPECT_EQ(rec.len, 0u);  // then the end of file
  close(sv[0]);
  EXPECT_EQ(vt::FdCount(), base);
}

// With nothing queued, the reset still reads as the peer's hang-up.
TEST(Conn, AResetWithNothingQueuedIsAHangUp) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  const char stale[] = "stale";
  ASSERT_EQ(vmmipc__conn_send(sv[0], stale, sizeof stale, nullptr, 0, nullptr, 0), 0);
  close(sv[1]);
  char buf[64];
  vmmipc__rec_t rec;
  int e = vmmipc__conn_recv(sv[0], buf, sizeof buf, &rec);
  EXPECT_TRUE(e == ECONNRESET || (e == 0 && rec.len == 0)) << e;
  close(sv[0]);
}

// A peek meets the same reset first, and looks past it as the read does:
// the agreement peeks to leave a later collective's frame queued, and an
// END frame's code is peeked at.
TEST(Conn, APeekAfterAResetSeesTheRecordQueuedFirst) {
  const int base = vt::FdCount();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  const char stale[] = "stale";
  ASSERT_EQ(vmmipc__conn_send(sv[0], stale, sizeof stale, nullptr, 0, nullptr, 0), 0);  // never read
  vmmipc__frame_t f;
  std::memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_END;
  f.ctx = VMMIPC__CTX_COLL;
  f.code = VMMIPC_ERR_ABORTED;
  f.seq = 0;
  unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
  vmmipc__frame_encode(&f, head);
  ASSERT_EQ(vmmipc__conn_send(sv[1], head, sizeof head, nullptr, 0, nullptr, 0), 0);
  close(sv[1]);  // with "stale" unread
  uint64_t seq = 99;
  uint32_t code = 0;
  EXPECT_EQ(vmmipc__conn_peek(sv[0], &seq, &code), VMMIPC__KIND_END);
  EXPECT_EQ(seq, 0u);
  EXPECT_EQ(code, static_cast<uint32_t>(VMMIPC_ERR_ABORTED));
  char buf[128];
  vmmipc__rec_t rec;
  ASSERT_EQ(vmmipc__conn_recv(sv[0], buf, sizeof buf, &rec), 0);  // still queued
  EXPECT_EQ(rec.len, sizeof head);
  EXPECT_EQ(vmmipc__conn_peek(sv[0], nullptr, nullptr), -2);  // then the end of file
  close(sv[0]);
  EXPECT_EQ(vt::FdCount(), base);
}

}  // namespace
