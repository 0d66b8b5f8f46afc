// The Unix-socket transport (src/transport): naming and binding, framing of
// bytes and SCM_RIGHTS batches, credential checks, bounded waits, ABORT
// frames and fd hygiene. The MPI bootstrap (nonce, pids, uids) is done here
// the way src/comm does it, with all of MPI_COMM_WORLD as one node. Payload
// fds are memfds whose contents name the sender, receiver, round and index.
#include "harness/helpers.h"

extern "C" {
#include "transport/tp_internal.h"
}

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace {

constexpr int kTimeoutMs = 30000;

void RandomNonce(unsigned char nonce[16]) {
  size_t got = 0;
  while (got < 16) {
    ssize_t n = getrandom(nonce + got, 16 - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
}

// Runs the collectives the tests use once, so that anything MPI opens lazily
// is open before a test takes its fd baseline.
void WarmMpi() {
  unsigned char b[16] = {};
  MPI_Bcast(b, 16, MPI_UNSIGNED_CHAR, 0, MPI_COMM_WORLD);
  std::vector<int> all(vt::Size());
  int me = vt::Rank();
  MPI_Allgather(&me, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &me, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
}

long long ElapsedMs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

// The bootstrap of src/comm over MPI_COMM_WORLD: rank 0's nonce, open (bind
// and listen) before anything is published, then pids and uids. Collective;
// nullptr on every rank if any rank failed.
vmmipc__tp_t *OpenWorld(int timeout_ms = kTimeoutMs, int ns = VMMIPC_SOCKET_ABSTRACT, const char *dir = nullptr) {
  const int size = vt::Size(), rank = vt::Rank();
  vmmipc__tp_opts_t opts;
  std::memset(&opts, 0, sizeof opts);
  if (rank == 0) RandomNonce(opts.nonce);
  MPI_Bcast(opts.nonce, 16, MPI_UNSIGNED_CHAR, 0, MPI_COMM_WORLD);
  std::vector<int> ranks(size);
  std::iota(ranks.begin(), ranks.end(), 0);
  opts.socket_namespace = ns;
  opts.socket_dir = dir;
  opts.node_rank = rank;
  opts.node_size = size;
  opts.ranks = ranks.data();
  opts.timeout_ms = timeout_ms;
  vmmipc__tp_t *tp = nullptr;
  vmmipc_result_t rc = vmmipc__tp_open(&opts, &tp);
  EXPECT_EQ(rc, VMMIPC_SUCCESS) << vmmipc_last_error();
  int ok = rc == VMMIPC_SUCCESS, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  int pid = static_cast<int>(getpid());
  unsigned uid = static_cast<unsigned>(geteuid());
  std::vector<int> pids_i(size);
  std::vector<unsigned> uids_u(size);
  MPI_Allgather(&pid, 1, MPI_INT, pids_i.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(&uid, 1, MPI_UNSIGNED, uids_u.data(), 1, MPI_UNSIGNED, MPI_COMM_WORLD);
  if (!all_ok) {
    vmmipc__tp_close(tp);
    return nullptr;
  }
  std::vector<pid_t> pids(pids_i.begin(), pids_i.end());
  std::vector<uid_t> uids(uids_u.begin(), uids_u.end());
  EXPECT_VMM_OK(vmmipc__tp_set_peers(tp, pids.data(), uids.data()));
  return tp;
}

// Whether every rank passed `ok` as true.
bool AllRanks(bool ok) {
  int v = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

// ---- messages with checkable bytes and fds ------------------------------------

unsigned Seed(int from, int to, int round) { return static_cast<unsigned>(from * 7919 + to * 104729 + round * 31); }

std::string FdTag(int from, int to, int round, int i) {
  return "vmmipc-tp from " + std::to_string(from) + " to " + std::to_string(to) + " round " + std::to_string(round) +
         " fd " + std::to_string(i);
}

int MakeTaggedFd(const std::string &tag) {
  int fd = memfd_create("vmmipc-tp-test", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (write(fd, tag.data(), tag.size()) != static_cast<ssize_t>(tag.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

struct Msg {
  std::vector<unsigned char> bytes;
  std::vector<int> fds;
  Msg() = default;
  Msg(const Msg &) = delete;
  Msg &operator=(const Msg &) = delete;
  ~Msg() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
  vmmipc__tp_send_t Send(int peer) const {
    vmmipc__tp_send_t s;
    s.peer = peer;
    s.bytes = bytes.empty() ? nullptr : bytes.data();
    s.num_bytes = bytes.size();
    s.fds = fds.empty() ? nullptr : fds.data();
    s.num_fds = static_cast<int>(fds.size());
    return s;
  }
};

std::unique_ptr<Msg> MakeMsg(int from, int to, int round, size_t nbytes, int nfds) {
  auto m = std::make_unique<Msg>();
  m->bytes.resize(nbytes);
  for (size_t i = 0; i < nbytes; i++) m->bytes[i] = vt::PatternByte(Seed(from, to, round), i);
  for (int i = 0; i < nfds; i++) {
    int fd = MakeTaggedFd(FdTag(from, to, round, i));
    EXPECT_GE(fd, 0) << "memfd_create/write: " << std::strerror(errno);
    m->fds.push_back(fd);
  }
  return m;
}

::testing::AssertionResult CheckMsg(const vmmipc__tp_recv_t &r, int from, int to, int round, size_t nbytes,
                                    int nfds) {
  if (r.num_bytes != nbytes || r.num_fds != nfds)
    return ::testing::AssertionFailure() << "from " << from << " round " << round << ": got " << r.num_bytes
                                         << " bytes and " << r.num_fds << " fds, expected " << nbytes << " and "
                                         << nfds;
  if ((nbytes == 0) != (r.bytes == nullptr) || (nfds == 0) != (r.fds == nullptr))
    return ::testing::AssertionFailure() << "bytes/fds pointers do not match the counts";
  const unsigned char *b = static_cast<const unsigned char *>(r.bytes);
  for (size_t i = 0; i < nbytes; i++)
    if (b[i] != vt::PatternByte(Seed(from, to, round), i))
      return ::testing::AssertionFailure() << "from " << from << " round " << round << ": byte " << i << " of "
                                           << nbytes << " differs";
  for (int i = 0; i < nfds; i++) {
    int fd = r.fds[i];
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || !(flags & FD_CLOEXEC))
      return ::testing::AssertionFailure() << "fd " << i << " (" << fd << ") is not open with FD_CLOEXEC";
    std::string want = FdTag(from, to, round, i);
    char buf[128] = {};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n != static_cast<ssize_t>(want.size()) || want != std::string(buf, static_cast<size_t>(n)))
      return ::testing::AssertionFailure() << "fd " << i << " of " << nfds << " holds \"" << buf << "\", expected \""
                                           << want << "\"";
  }
  return ::testing::AssertionSuccess();
}

void FreeRecv(vmmipc__tp_recv_t *r) {
  for (int i = 0; i < r->num_fds; i++) close(r->fds[i]);
  free(r->fds);
  free(r->bytes);
  r->fds = nullptr;
  r->bytes = nullptr;
  r->num_fds = 0;
  r->num_bytes = 0;
}

bool RecvIsEmpty(const vmmipc__tp_recv_t &r) {
  return r.bytes == nullptr && r.fds == nullptr && r.num_bytes == 0 && r.num_fds == 0;
}

vmmipc__tp_recv_t RecvFrom(int peer) {
  vmmipc__tp_recv_t r;
  std::memset(&r, 0, sizeof r);
  r.peer = peer;
  return r;
}

// Soft RLIMIT_NOFILE set for the scope, restored after.
class NofileLimit {
 public:
  explicit NofileLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &old_);
    rlimit l = old_;
    l.rlim_cur = soft < old_.rlim_max ? soft : old_.rlim_max;
    ok_ = setrlimit(RLIMIT_NOFILE, &l) == 0;
  }
  ~NofileLimit() { setrlimit(RLIMIT_NOFILE, &old_); }
  bool ok() const { return ok_; }
  rlim_t hard() const { return old_.rlim_max; }

 private:
  rlimit old_{};
  bool ok_ = false;
};

// ---- raw sockets, for forged peers ---------------------------------------------

// Connects a blocking SOCK_SEQPACKET socket to the address printed by
// vmmipc__tp_address ('@' for the abstract namespace). -1 on failure.
int RawConnect(const char *addr) {
  sockaddr_un sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = std::strlen(addr);
  if (n >= sizeof sa.sun_path) return -1;
  std::memcpy(sa.sun_path, addr, n);
  if (addr[0] == '@') sa.sun_path[0] = '\0';
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n + (addr[0] == '@' ? 0 : 1));
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr *>(&sa), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

vmmipc__tp_hdr_t DataHeader(uint32_t sender, uint32_t receiver, uint64_t seq, uint64_t total_bytes,
                            uint32_t total_fds, uint32_t index, uint32_t frame_bytes, uint32_t frame_fds) {
  vmmipc__tp_hdr_t h;
  std::memset(&h, 0, sizeof h);
  h.magic = VMMIPC__TP_MAGIC;
  h.version = VMMIPC__TP_VERSION;
  h.kind = VMMIPC__TP_KIND_DATA;
  h.sender = sender;
  h.receiver = receiver;
  h.seq = seq;
  h.total_bytes = total_bytes;
  h.total_fds = total_fds;
  h.index = index;
  h.frame_bytes = frame_bytes;
  h.frame_fds = frame_fds;
  return h;
}

// One record: `head` (any length), `payload`, and nfds fds, however
// inconsistent with the header. Returns 0 or an errno value.
int RawSend(int sock, const void *head, size_t head_len, const void *payload, size_t len, const int *fds, int nfds) {
  iovec iov[2];
  iov[0].iov_base = const_cast<void *>(head);
  iov[0].iov_len = head_len;
  iov[1].iov_base = const_cast<void *>(payload);
  iov[1].iov_len = len;
  msghdr m;
  std::memset(&m, 0, sizeof m);
  m.msg_iov = iov;
  m.msg_iovlen = len ? 2 : 1;
  union {
    cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * VMMIPC__TP_MAX_FDS_PER_MSG)];
  } cm;
  if (nfds) {
    std::memset(&cm, 0, sizeof cm);
    m.msg_control = cm.buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t r;
  do r = sendmsg(sock, &m, MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  return r < 0 ? errno : 0;
}

// Sends one frame on a socket that may be non-blocking, waiting for room.
int SendFrameBlocking(int sock, const vmmipc__tp_hdr_t &h, const void *payload, const int *fds) {
  for (;;) {
    int e = vmmipc__tp_frame_send(sock, &h, payload, fds);
    if (e != EAGAIN) return e;
    pollfd p = {sock, POLLOUT, 0};
    poll(&p, 1, 1000);
  }
}

// ---- a transport pair across fork(): the parent is node rank 0, the child
// node rank 1; their comm ranks are 5 and 7 so that messages must name 7. ----

constexpr int kPairRanks[2] = {5, 7};

vmmipc__tp_opts_t PairOpts(const unsigned char nonce[16], int node_rank, int timeout_ms) {
  vmmipc__tp_opts_t o;
  std::memset(&o, 0, sizeof o);
  std::memcpy(o.nonce, nonce, 16);
  o.socket_namespace = VMMIPC_SOCKET_ABSTRACT;
  o.node_rank = node_rank;
  o.node_size = 2;
  o.ranks = kPairRanks;
  o.timeout_ms = timeout_ms;
  return o;
}

vmmipc_result_t PairSetPeers(vmmipc__tp_t *tp, pid_t node0, pid_t node1) {
  pid_t pids[2] = {node0, node1};
  uid_t uids[2] = {geteuid(), geteuid()};
  return vmmipc__tp_set_peers(tp, pids, uids);
}

int WaitChild(pid_t pid, int *status) {
  int r;
  do r = waitpid(pid, status, 0);
  while (r < 0 && errno == EINTR);
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------

// Every rank sends to the next and receives from the previous one, through
// every size class (empty, one frame, many frames) and fd count (none, one,
// exactly one batch, one more than a batch, several batches, 1000).
TEST(Transport, RingOfSizesAndFdCounts) {
  WarmMpi();
  NofileLimit raise(RLIM_INFINITY);  // soft = hard, for 1000 fds out and 1000 in
  const int base = vt::FdCount();
  vmmipc__tp_t *tp = OpenWorld();
  ASSERT_TRUE(AllRanks(tp != nullptr));
  const int rank = vt::Rank(), size = vt::Size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int big = 1000;
  if (raise.hard() != RLIM_INFINITY && static_cast<long>(raise.hard()) < 2 * big + base + 64)
    big = static_cast<int>((static_cast<long>(raise.hard()) - base - 64) / 2);  // reported below
  if (rank == 0 && big < 1000)
    std::fprintf(stderr, "note: hard RLIMIT_NOFILE %ld allows only %d fds per message\n",
                 static_cast<long>(raise.hard()), big);
  const size_t sizes[] = {0, 100, 100 * 1000};
  const int fdcounts[] = {0, 1, 253, 254, 600, big};
  int round = 0;
  for (size_t nbytes : sizes) {
    for (int nfds : fdcounts) {
      auto m = MakeMsg(rank, next, round, nbytes, nfds);
      vmmipc__tp_send_t s = m->Send(next);
      vmmipc__tp_recv_t r = RecvFrom(prev);
      SCOPED_TRACE(std::to_string(nbytes) + " bytes, " + std::to_string(nfds) + " fds");
      EXPECT_VMM_OK(vmmipc__tp_exchange(tp, &s, 1, &r, 1));
      EXPECT_TRUE(CheckMsg(r, prev, rank, round, nbytes, nfds));
      FreeRecv(&r);
      round++;
    }
  }
  EXPECT_EQ(vmmipc__tp_refused(tp), 0);
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Every rank sends to and receives from every other in one call, with the
// lists in a different order on each rank, for several rounds (sequence
// numbers advance per pair).
TEST(Transport, AllToAllInOneExchange) {
  WarmMpi();
  const int base = vt::FdCount();
  vmmipc__tp_t *tp = OpenWorld();
  ASSERT_TRUE(AllRanks(tp != nullptr));
  const int rank = vt::Rank(), size = vt::Size();
  auto nbytes = [](int from, int to, int round) {
    return static_cast<size_t>(((from * 7 + to * 13 + round * 5) % 9) * 17000 + from);
  };
  auto nfds = [](int from, int to, int round) { return ((from * 3 + to * 5 + round) % 7) * 50; };
  for (int round = 0; round < 3; round++) {
    std::vector<std::unique_ptr<Msg>> msgs;
    std::vector<vmmipc__tp_send_t> sends;
    std::vector<vmmipc__tp_recv_t> recvs;
    for (int k = 1; k < size; k++) {
      int to = (rank % 2) ? (rank + size - k) % size : (rank + k) % size;  // odd ranks list them backwards
      msgs.push_back(MakeMsg(rank, to, round, nbytes(rank, to, round), nfds(rank, to, round)));
      sends.push_back(msgs.back()->Send(to));
    }
    // The receive list: every other rank once, rotated by the round.
    for (int k = 0; k < size; k++) {
      int from = (k + round) % size;
      if (from != rank) recvs.push_back(RecvFrom(from));
    }
    ASSERT_VMM_OK(vmmipc__tp_exchange(tp, sends.data(), static_cast<int>(sends.size()), recvs.data(),
                                      static_cast<int>(recvs.size())));
    for (auto &r : recvs) {
      EXPECT_TRUE(CheckMsg(r, r.peer, rank, round, nbytes(r.peer, rank, round), nfds(r.peer, rank, round)));
      FreeRecv(&r);
    }
  }
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// A rank may send to itself; bad argument lists are refused up front and
// leave the receive slots empty.
TEST(Transport, SelfExchangeAndArgumentChecks) {
  const int base = vt::FdCount();
  unsigned char nonce[16];
  RandomNonce(nonce);
  int me = vt::Rank();
  vmmipc__tp_opts_t o;
  std::memset(&o, 0, sizeof o);
  std::memcpy(o.nonce, nonce, 16);
  o.node_rank = 0;
  o.node_size = 1;
  o.ranks = &me;
  o.timeout_ms = 5000;
  vmmipc__tp_t *tp = nullptr;
  ASSERT_VMM_OK(vmmipc__tp_open(&o, &tp));
  vmmipc__tp_recv_t r = RecvFrom(0);
  EXPECT_EQ(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1), VMMIPC_ERR_INVALID_ARG) << "set_peers was not called";
  pid_t pid = getpid();
  uid_t uid = geteuid();
  ASSERT_VMM_OK(vmmipc__tp_set_peers(tp, &pid, &uid));
  auto m = MakeMsg(me, me, 0, 70000, 300);
  vmmipc__tp_send_t s = m->Send(0);
  ASSERT_VMM_OK(vmmipc__tp_exchange(tp, &s, 1, &r, 1));
  EXPECT_TRUE(CheckMsg(r, me, me, 0, 70000, 300));
  FreeRecv(&r);

  vmmipc__tp_send_t two[2] = {s, s};
  r.num_fds = 3;  // garbage in an output slot must be cleared
  EXPECT_EQ(vmmipc__tp_exchange(tp, two, 2, &r, 1), VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(RecvIsEmpty(r));
  EXPECT_NE(std::strstr(vmmipc_last_error(), "two sends"), nullptr) << vmmipc_last_error();
  vmmipc__tp_send_t bad = s;
  bad.peer = 1;
  EXPECT_EQ(vmmipc__tp_exchange(tp, &bad, 1, nullptr, 0), VMMIPC_ERR_INVALID_ARG);
  int closed_fd = MakeTaggedFd("x");
  close(closed_fd);
  bad = s;
  bad.fds = &closed_fd;
  bad.num_fds = 1;
  EXPECT_EQ(vmmipc__tp_exchange(tp, &bad, 1, nullptr, 0), VMMIPC_ERR_INVALID_ARG);
  EXPECT_NE(std::strstr(vmmipc_last_error(), "not open"), nullptr) << vmmipc_last_error();
  vmmipc__tp_close(tp);
  m.reset();
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

// Filesystem sockets: a private 0700 directory per rank holding the socket
// file "s"; everything is gone after close.
TEST(Transport, FilesystemNamespace) {
  WarmMpi();
  char dir[256] = {};
  if (vt::Rank() == 0) {
    std::snprintf(dir, sizeof dir, "/tmp/vmmipc-tp-test-XXXXXX");
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  ASSERT_NE(dir[0], '\0') << "mkdtemp failed on rank 0";
  const int base = vt::FdCount();
  vmmipc__tp_t *tp = OpenWorld(kTimeoutMs, VMMIPC_SOCKET_FILESYSTEM, dir);
  ASSERT_TRUE(AllRanks(tp != nullptr));
  const int rank = vt::Rank(), size = vt::Size();
  char sock[512];
  vmmipc__tp_address(tp, rank, sock, sizeof sock);
  std::string sock_path = sock;
  ASSERT_EQ(sock_path.rfind("/s"), sock_path.size() - 2) << sock_path;
  std::string own_dir = sock_path.substr(0, sock_path.size() - 2);
  EXPECT_EQ(own_dir.rfind(std::string(dir) + "/vmmipc-", 0), 0u) << own_dir;
  struct stat st;
  ASSERT_EQ(lstat(own_dir.c_str(), &st), 0) << own_dir;
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u) << "mode of " << own_dir;
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_EQ(lstat(sock_path.c_str(), &st), 0) << sock_path;
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  auto m = MakeMsg(rank, next, 0, 50000, 300);
  vmmipc__tp_send_t s = m->Send(next);
  vmmipc__tp_recv_t r = RecvFrom(prev);
  EXPECT_VMM_OK(vmmipc__tp_exchange(tp, &s, 1, &r, 1));
  EXPECT_TRUE(CheckMsg(r, prev, rank, 0, 50000, 300));
  FreeRecv(&r);
  m.reset();
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc__tp_close(tp);
  EXPECT_NE(lstat(sock_path.c_str(), &st), 0) << sock_path << " is left behind";
  EXPECT_NE(lstat(own_dir.c_str(), &st), 0) << own_dir << " is left behind";
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(rmdir(dir), 0) << dir << " is not empty after every rank closed: " << std::strerror(errno);
  }
}

// Failures in open leave nothing behind: a path too long for sun_path (before
// anything is created), a name that is taken (bind, mkdir), and running out
// of fds after the directory was made.
TEST(Transport, OpenFailuresCleanUp) {
  const int base = vt::FdCount();
  char dir[256];
  std::snprintf(dir, sizeof dir, "/tmp/vmmipc-tp-open-XXXXXX");
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto dir_is_empty = [](const std::string &d) {
    DIR *dp = opendir(d.c_str());
    if (!dp) return false;
    int n = 0;
    while (dirent *e = readdir(dp))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) n++;
    closedir(dp);
    return n == 0;
  };
  int me = vt::Rank();
  vmmipc__tp_opts_t o;
  std::memset(&o, 0, sizeof o);
  RandomNonce(o.nonce);
  o.node_rank = 0;
  o.node_size = 1;
  o.ranks = &me;
  o.timeout_ms = 1000;

  // sun_path holds 107 characters: this directory exists but is too deep.
  std::string deep = std::string(dir) + "/" + std::string(90, 'd');
  ASSERT_EQ(mkdir(deep.c_str(), 0700), 0);
  o.socket_namespace = VMMIPC_SOCKET_FILESYSTEM;
  o.socket_dir = deep.c_str();
  vmmipc__tp_t *tp = nullptr;
  EXPECT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(tp, nullptr);
  EXPECT_NE(std::strstr(vmmipc_last_error(), deep.c_str()), nullptr) << vmmipc_last_error();
  EXPECT_NE(std::strstr(vmmipc_last_error(), "shorter socket_dir"), nullptr) << vmmipc_last_error();
  EXPECT_TRUE(dir_is_empty(deep));
  rmdir(deep.c_str());

  // The same name twice: the second open fails and leaves the first intact.
  for (int ns : {VMMIPC_SOCKET_ABSTRACT, VMMIPC_SOCKET_FILESYSTEM}) {
    o.socket_namespace = ns;
    o.socket_dir = dir;
    vmmipc__tp_t *first = nullptr, *second = nullptr;
    ASSERT_VMM_OK(vmmipc__tp_open(&o, &first));
    const int with_first = vt::FdCount();
    EXPECT_EQ(vmmipc__tp_open(&o, &second), VMMIPC_ERR_SYSTEM) << "namespace " << ns;
    EXPECT_EQ(second, nullptr);
    EXPECT_NE(std::strstr(vmmipc_last_error(), ns ? "EEXIST" : "EADDRINUSE"), nullptr) << vmmipc_last_error();
    EXPECT_EQ(vt::FdCount(), with_first);
    // The first still works: it can talk to itself.
    pid_t pid = getpid();
    uid_t uid = geteuid();
    ASSERT_VMM_OK(vmmipc__tp_set_peers(first, &pid, &uid));
    auto m = MakeMsg(me, me, 1, 10, 2);
    vmmipc__tp_send_t s = m->Send(0);
    vmmipc__tp_recv_t r = RecvFrom(0);
    EXPECT_VMM_OK(vmmipc__tp_exchange(first, &s, 1, &r, 1));
    EXPECT_TRUE(CheckMsg(r, me, me, 1, 10, 2));
    FreeRecv(&r);
    vmmipc__tp_close(first);
    EXPECT_TRUE(dir_is_empty(dir));
  }

  // Out of fds after mkdir: socket() fails with EMFILE; the directory goes.
  {
    int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(probe, 0);
    close(probe);  // `probe` is the lowest free fd: every fd below it is open
    vmmipc_result_t rc;
    {
      NofileLimit low(static_cast<rlim_t>(probe));
      ASSERT_TRUE(low.ok());
      RandomNonce(o.nonce);
      rc = vmmipc__tp_open(&o, &tp);
    }
    EXPECT_EQ(rc, VMMIPC_ERR_SYSTEM);
    EXPECT_NE(std::strstr(vmmipc_last_error(), "EMFILE"), nullptr) << vmmipc_last_error();
    EXPECT_NE(std::strstr(vmmipc_last_error(), "ulimit -n"), nullptr) << vmmipc_last_error();
    EXPECT_TRUE(dir_is_empty(dir)) << "the socket directory was left behind";
  }
  EXPECT_EQ(rmdir(dir), 0);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

// A process that is no rank connects to rank 0 and sends a well-formed frame
// with an fd: rank 0 refuses the connection (the fd never reaches it) and
// the genuine message from rank 1 still arrives.
TEST(Transport, ForeignProcessIsRefused) {
  WarmMpi();
  const int base = vt::FdCount();
  vmmipc__tp_t *tp = OpenWorld();
  ASSERT_TRUE(AllRanks(tp != nullptr));
  const int rank = vt::Rank();
  if (rank == 1) {
    char addr[256];
    vmmipc__tp_address(tp, 0, addr, sizeof addr);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // no MPI, no gtest here
      int sock = RawConnect(addr);
      if (sock < 0) _exit(2);
      int fd = MakeTaggedFd(FdTag(1, 0, 0, 0));
      const char forged[] = "forged";
      vmmipc__tp_hdr_t h = DataHeader(1, 0, 0, sizeof forged, 1, 0, sizeof forged, 1);
      _exit(vmmipc__tp_frame_send(sock, &h, forged, &fd) == 0 ? 0 : 3);
    }
    int status = 0;
    ASSERT_EQ(WaitChild(child, &status), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the forger failed: status " << status;
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the forged connection and frame are queued at rank 0
  std::unique_ptr<Msg> m;
  if (rank == 0) {
    vmmipc__tp_recv_t r = RecvFrom(1);
    EXPECT_VMM_OK(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1));
    EXPECT_TRUE(CheckMsg(r, 1, 0, 0, 1000, 3));
    FreeRecv(&r);
    EXPECT_EQ(vmmipc__tp_refused(tp), 1);
  } else if (rank == 1) {
    m = MakeMsg(1, 0, 0, 1000, 3);
    vmmipc__tp_send_t s = m->Send(0);
    EXPECT_VMM_OK(vmmipc__tp_exchange(tp, &s, 1, nullptr, 0));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc__tp_close(tp);
  m.reset();
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

// The registered pid but another uid: refused (root only: needs setuid).
TEST(Transport, PeerWithWrongUidIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child under another uid";
  const int base = vt::FdCount();
  unsigned char nonce[16];
  RandomNonce(nonce);
  vmmipc__tp_opts_t o = PairOpts(nonce, 0, 500);
  vmmipc__tp_t *tp = nullptr;
  ASSERT_VMM_OK(vmmipc__tp_open(&o, &tp));
  char addr[256];
  vmmipc__tp_address(tp, 0, addr, sizeof addr);
  int hold[2];
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(hold[1]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    int sock = RawConnect(addr);
    if (sock < 0) _exit(3);
    vmmipc__tp_hdr_t h = DataHeader(1, 0, 0, 0, 0, 0, 0, 0);
    // May fail with EPIPE: the parent can refuse the connection before this.
    (void)vmmipc__tp_frame_send(sock, &h, nullptr, nullptr);
    char c;  // stays alive (a live peer that never sends right) until the parent is done
    while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(hold[0]);
  ASSERT_VMM_OK(PairSetPeers(tp, getpid(), child));
  vmmipc__tp_recv_t r = RecvFrom(1);
  EXPECT_EQ(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1), VMMIPC_ERR_TIMEOUT) << vmmipc_last_error();
  EXPECT_NE(std::strstr(vmmipc_last_error(), "uid 65534"), nullptr) << vmmipc_last_error();
  EXPECT_EQ(vmmipc__tp_refused(tp), 1);
  EXPECT_TRUE(RecvIsEmpty(r));
  close(hold[1]);
  int status = 0;
  ASSERT_EQ(WaitChild(child, &status), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

// The connecting side checks the listener: a socket under rank 1's name held
// by another process (here: this one) is not sent to.
TEST(Transport, ImpostorListenerIsNotSentTo) {
  const int base = vt::FdCount();
  unsigned char nonce[16];
  RandomNonce(nonce);
  vmmipc__tp_opts_t o0 = PairOpts(nonce, 0, 2000), o1 = PairOpts(nonce, 1, 2000);
  vmmipc__tp_t *tp = nullptr, *impostor = nullptr;
  ASSERT_VMM_OK(vmmipc__tp_open(&o0, &tp));
  ASSERT_VMM_OK(vmmipc__tp_open(&o1, &impostor));  // binds rank 1's name in this process
  ASSERT_VMM_OK(PairSetPeers(tp, getpid(), getppid()));  // rank 1 should be our parent process
  auto m = MakeMsg(0, 1, 0, 10, 1);
  vmmipc__tp_send_t s = m->Send(1);
  EXPECT_EQ(vmmipc__tp_exchange(tp, &s, 1, nullptr, 0), VMMIPC_ERR_PEER);
  std::string err = vmmipc_last_error();
  EXPECT_NE(err.find("rank 7"), std::string::npos) << err;
  EXPECT_NE(err.find("pid " + std::to_string(getpid())), std::string::npos) << err;
  EXPECT_NE(err.find("refusing"), std::string::npos) << err;
  EXPECT_EQ(vmmipc__tp_refused(tp), 1);
  vmmipc__tp_close(tp);
  vmmipc__tp_close(impostor);
  m.reset();
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

// Malformed frames from the genuine peer: each is INVALID_DESC naming the
// peer, the fds it carried are closed, and nothing leaks.
TEST(Transport, MalformedFramesAreRejected) {
  enum Forge { kBadMagic, kBadVersion, kWrongSeq, kFdCountMismatch, kWrongSender, kWrongReceiver, kTooLong,
               kShort, kHugeTotals, kSkippedIndex, kBytesMismatch, kUnknownKind, kNumForges };
  const char *names[] = {"bad magic", "bad version", "wrong sequence number", "fd count mismatch", "wrong sender",
                         "wrong receiver", "frame too long", "short frame", "huge totals", "skipped frame index",
                         "byte count mismatch", "unknown kind"};
  const char *expect[] = {"bad magic", "version", "expected message 0", "fds but 3 arrived", "names node rank 0",
                          "addressed to node rank 1", "MSG_TRUNC", "short frame", "more than the limits",
                          "frame 1 arrived where frame 0", "payload bytes but the frame holds", "unknown frame kind"};
  const int base = vt::FdCount();
  for (int f = 0; f < kNumForges; f++) {
    SCOPED_TRACE(names[f]);
    unsigned char nonce[16];
    RandomNonce(nonce);
    vmmipc__tp_opts_t o = PairOpts(nonce, 0, 5000);
    vmmipc__tp_t *tp = nullptr;
    ASSERT_VMM_OK(vmmipc__tp_open(&o, &tp));
    char addr[256];
    vmmipc__tp_address(tp, 0, addr, sizeof addr);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int sock = RawConnect(addr);
      if (sock < 0) _exit(2);
      int fds[3];
      for (int i = 0; i < 3; i++) fds[i] = MakeTaggedFd(FdTag(1, 0, 0, i));
      std::vector<unsigned char> payload(40000, 'x');
      vmmipc__tp_hdr_t h = DataHeader(1, 0, 0, 10, 2, 0, 10, 2);
      int nfds = 2;
      size_t len = 10, head_len = VMMIPC__TP_HEADER_BYTES;
      switch (f) {
        case kBadMagic: h.magic ^= 1; break;
        case kBadVersion: h.version = 99; break;
        case kWrongSeq: h.seq = 4; break;
        case kFdCountMismatch: nfds = 3; break;
        case kWrongSender: h.sender = 0; break;
        case kWrongReceiver: h.receiver = 1; break;
        case kTooLong: h.total_bytes = h.frame_bytes = 40000; len = 40000; break;
        case kShort: head_len = 20; len = 0; break;
        case kHugeTotals: h.total_bytes = uint64_t{1} << 40; break;
        case kSkippedIndex: h.index = 1; break;
        case kBytesMismatch: len = 9; break;
        case kUnknownKind: h.kind = 9; break;
      }
      unsigned char head[VMMIPC__TP_HEADER_BYTES];
      vmmipc__tp_hdr_encode(&h, head);
      _exit(RawSend(sock, head, head_len, payload.data(), len, fds, nfds) == 0 ? 0 : 3);
    }
    ASSERT_VMM_OK(PairSetPeers(tp, getpid(), child));
    int status = 0;
    ASSERT_EQ(WaitChild(child, &status), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    vmmipc__tp_recv_t r = RecvFrom(1);
    EXPECT_EQ(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1), VMMIPC_ERR_INVALID_DESC) << vmmipc_last_error();
    std::string err = vmmipc_last_error();
    EXPECT_NE(err.find("rank 7"), std::string::npos) << err;
    EXPECT_NE(err.find(expect[f]), std::string::npos) << err;
    EXPECT_TRUE(RecvIsEmpty(r));
    EXPECT_EQ(vmmipc__tp_refused(tp), f == kWrongSender ? 1 : 0);
    // The connection is dropped: the next receive fails at once.
    EXPECT_EQ(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1), VMMIPC_ERR_PEER);
    EXPECT_NE(std::strstr(vmmipc_last_error(), "dropped"), nullptr) << vmmipc_last_error();
    vmmipc__tp_close(tp);
    EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  }
}

// A peer (a tp in a forked child) sends one whole message, then only the
// first frame of the next, and is SIGKILLed. With `hold_open`, a grandchild
// keeps the child's socket open, so no end-of-file arrives and only the
// liveness check can tell. Either way: VMMIPC_ERR_PEER naming rank 7 within
// the timeout + 1 s, and no fd leaks.
static void KilledPeer(bool hold_open) {
  const int timeout_ms = 4000;
  const int base = vt::FdCount();
  unsigned char nonce[16];
  RandomNonce(nonce);
  vmmipc__tp_opts_t o = PairOpts(nonce, 0, timeout_ms);
  vmmipc__tp_t *tp = nullptr;
  ASSERT_VMM_OK(vmmipc__tp_open(&o, &tp));
  int hold[2];
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(hold[1]);
    vmmipc__tp_opts_t co = PairOpts(nonce, 1, timeout_ms);
    vmmipc__tp_t *ctp = nullptr;
    if (vmmipc__tp_open(&co, &ctp) != VMMIPC_SUCCESS) _exit(2);
    if (PairSetPeers(ctp, getppid(), getpid()) != VMMIPC_SUCCESS) _exit(3);
    auto m = MakeMsg(1, 0, 0, 5000, 7);
    vmmipc__tp_send_t s = m->Send(0);
    if (vmmipc__tp_exchange(ctp, &s, 1, nullptr, 0) != VMMIPC_SUCCESS) _exit(4);
    // Message 1: 3 frames announced, only the first (with 5 fds) is sent.
    int sock = vmmipc__tp_out_fd(ctp, 0);
    std::vector<unsigned char> payload(VMMIPC__TP_FRAME_MAX_BYTES, 'k');
    vmmipc__tp_hdr_t h = DataHeader(1, 0, 1, 3 * VMMIPC__TP_FRAME_MAX_BYTES, 5, 0, VMMIPC__TP_FRAME_MAX_BYTES, 5);
    if (SendFrameBlocking(sock, h, payload.data(), m->fds.data()) != 0) _exit(5);
    if (hold_open) {
      pid_t g = fork();
      if (g < 0) _exit(6);
      if (g == 0) {  // keeps every socket of the child open until the test is done
        char c;
        while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
        }
        _exit(0);
      }
    }
    raise(SIGKILL);
    _exit(7);
  }
  close(hold[0]);
  ASSERT_VMM_OK(PairSetPeers(tp, getpid(), child));
  vmmipc__tp_recv_t r = RecvFrom(1);
  EXPECT_VMM_OK(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1));
  EXPECT_TRUE(CheckMsg(r, 1, 0, 0, 5000, 7));
  FreeRecv(&r);
  auto t0 = std::chrono::steady_clock::now();
  vmmipc_result_t rc = vmmipc__tp_exchange(tp, nullptr, 0, &r, 1);
  long long ms = ElapsedMs(t0);
  std::string err = vmmipc_last_error();
  EXPECT_EQ(rc, VMMIPC_ERR_PEER) << err;
  EXPECT_LE(ms, timeout_ms + 1000) << err;
  EXPECT_NE(err.find("rank 7"), std::string::npos) << err;
  if (hold_open) {
    EXPECT_NE(err.find("exited"), std::string::npos) << err;
    EXPECT_NE(err.find("pid " + std::to_string(child)), std::string::npos) << err;
  }
  EXPECT_TRUE(RecvIsEmpty(r));
  close(hold[1]);  // lets the grandchild go
  int status = 0;
  ASSERT_EQ(WaitChild(child, &status), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child failed early: status " << status;
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

TEST(Transport, KilledPeerMidMessageHangsUp) { KilledPeer(false); }
TEST(Transport, KilledPeerMidMessageDetectedByLiveness) { KilledPeer(true); }

// Rank 1 never sends: rank 0 gets VMMIPC_ERR_TIMEOUT naming rank 1 within
// the timeout + 1 s. Then rank 0 never receives a large message: rank 1's
// send times out naming rank 0, and its ABORT to the full socket is bounded.
TEST(Transport, TimeoutsNameThePeer) {
  WarmMpi();
  const int timeout_ms = 800;
  const int base = vt::FdCount();
  vmmipc__tp_t *tp = OpenWorld(timeout_ms);
  ASSERT_TRUE(AllRanks(tp != nullptr));
  const int rank = vt::Rank();
  if (rank == 0) {
    vmmipc__tp_recv_t r = RecvFrom(1);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1), VMMIPC_ERR_TIMEOUT);
    long long ms = ElapsedMs(t0);
    std::string err = vmmipc_last_error();
    EXPECT_GE(ms, timeout_ms - 10) << err;
    EXPECT_LE(ms, timeout_ms + 1000) << err;
    EXPECT_NE(err.find("rank 1 (receive"), std::string::npos) << err;
    EXPECT_NE(err.find("800 ms"), std::string::npos) << err;
    EXPECT_NE(err.find("timeout_ms"), std::string::npos) << err;
    EXPECT_TRUE(RecvIsEmpty(r));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    auto m = MakeMsg(1, 0, 0, 8u << 20, 0);  // far more than a socket buffer
    vmmipc__tp_send_t s = m->Send(0);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(vmmipc__tp_exchange(tp, &s, 1, nullptr, 0), VMMIPC_ERR_TIMEOUT);
    long long ms = ElapsedMs(t0);
    std::string err = vmmipc_last_error();
    EXPECT_LE(ms, timeout_ms + 1000) << err;
    EXPECT_NE(err.find("rank 0 (send"), std::string::npos) << err;
    t0 = std::chrono::steady_clock::now();
    int peer = 0;
    vmmipc__tp_abort(tp, &peer, 1);
    EXPECT_LE(ElapsedMs(t0), 400) << "abort must be bounded";
    EXPECT_EQ(err, vmmipc_last_error()) << "abort must keep the current error";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// ABORT: rank 1 gives up with a message; rank 0's receive fails at once
// with it. Then again in the middle of a message that carried fds.
TEST(Transport, AbortReachesThePeer) {
  WarmMpi();
  const int base = vt::FdCount();
  const int rank = vt::Rank();
  for (int mid_message = 0; mid_message < 2; mid_message++) {
    SCOPED_TRACE(mid_message ? "in the middle of a message" : "between messages");
    vmmipc__tp_t *tp = OpenWorld();
    ASSERT_TRUE(AllRanks(tp != nullptr));
    if (rank == 1) {
      std::unique_ptr<Msg> m;
      if (mid_message) {
        m = MakeMsg(1, 0, 0, 100, 10);
        vmmipc__tp_send_t s = m->Send(0);
        EXPECT_VMM_OK(vmmipc__tp_exchange(tp, &s, 1, nullptr, 0));
        auto big = MakeMsg(1, 0, 1, 0, 253);
        vmmipc__tp_hdr_t h = DataHeader(1, 0, 1, 0, 400, 0, 0, 253);
        EXPECT_EQ(SendFrameBlocking(vmmipc__tp_out_fd(tp, 0), h, nullptr, big->fds.data()), 0);
      }
      vmmipc__error(VMMIPC_ERR_CUDA, "cuMemMap failed: injected failure %d", 4242 + mid_message);
      std::string before = vmmipc_last_error();
      auto t0 = std::chrono::steady_clock::now();
      int peer = 0;
      vmmipc__tp_abort(tp, &peer, 1);
      EXPECT_LE(ElapsedMs(t0), 400);
      EXPECT_EQ(before, vmmipc_last_error());
    } else if (rank == 0) {
      vmmipc__tp_recv_t r = RecvFrom(1);
      if (mid_message) {
        EXPECT_VMM_OK(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1));
        EXPECT_TRUE(CheckMsg(r, 1, 0, 0, 100, 10));
        FreeRecv(&r);
      }
      auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1), VMMIPC_ERR_PEER);
      EXPECT_LE(ElapsedMs(t0), kTimeoutMs / 2) << "the ABORT must end the wait";
      std::string want = "rank 1 gave up: cuMemMap failed: injected failure " + std::to_string(4242 + mid_message);
      EXPECT_NE(std::string(vmmipc_last_error()).find(want), std::string::npos) << vmmipc_last_error();
      EXPECT_TRUE(RecvIsEmpty(r));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    vmmipc__tp_close(tp);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Rank 0 cannot take more fds (RLIMIT_NOFILE lowered): recvmsg reports
// MSG_CTRUNC; the receive fails with INVALID_DESC naming rank 1 and every fd
// that did arrive is closed.
TEST(Transport, TruncatedFdsAreReleased) {
  WarmMpi();
  const int base = vt::FdCount();
  vmmipc__tp_t *tp = OpenWorld();
  ASSERT_TRUE(AllRanks(tp != nullptr));
  const int rank = vt::Rank();
  // A first message sets up the connection while fds are plentiful.
  std::unique_ptr<Msg> m;
  if (rank == 1) {
    m = MakeMsg(1, 0, 0, 10, 1);
    vmmipc__tp_send_t s = m->Send(0);
    EXPECT_VMM_OK(vmmipc__tp_exchange(tp, &s, 1, nullptr, 0));
  } else if (rank == 0) {
    vmmipc__tp_recv_t r = RecvFrom(1);
    EXPECT_VMM_OK(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1));
    EXPECT_TRUE(CheckMsg(r, 1, 0, 0, 10, 1));
    FreeRecv(&r);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const int before = vt::FdCount();
    vmmipc__tp_recv_t r = RecvFrom(1);
    vmmipc_result_t rc;
    int during = -1;
    {
      NofileLimit low(static_cast<rlim_t>(before + 16));
      ASSERT_TRUE(low.ok());
      rc = vmmipc__tp_exchange(tp, nullptr, 0, &r, 1);
      during = vt::FdCount();
    }
    std::string err = vmmipc_last_error();
    EXPECT_EQ(rc, VMMIPC_ERR_INVALID_DESC) << err;
    EXPECT_NE(err.find("MSG_CTRUNC"), std::string::npos) << err;
    EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
    EXPECT_NE(err.find("ulimit -n"), std::string::npos) << err;
    EXPECT_TRUE(RecvIsEmpty(r));
    EXPECT_EQ(during, before - 1) << "fds leaked (the dropped connection is the one fewer)";
    // The stream from rank 1 is lost: the next receive fails at once.
    EXPECT_EQ(vmmipc__tp_exchange(tp, nullptr, 0, &r, 1), VMMIPC_ERR_PEER);
  } else if (rank == 1) {
    auto big = MakeMsg(1, 0, 1, 1000, 300);
    vmmipc__tp_send_t s = big->Send(0);
    vmmipc_result_t rc = vmmipc__tp_exchange(tp, &s, 1, nullptr, 0);
    // Both frames may be queued before rank 0 drops the connection, or the
    // second send may find it closed.
    EXPECT_TRUE(rc == VMMIPC_SUCCESS || rc == VMMIPC_ERR_PEER) << vmmipc_last_error();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc__tp_close(tp);
  m.reset();
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}
