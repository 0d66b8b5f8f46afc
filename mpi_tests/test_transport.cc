// The Unix-socket transport (src/transport): names and the mesh, framing of
// bytes and SCM_RIGHTS batches, contexts and epochs, credential checks,
// bounded waits, ABORT, stale frames, and fd hygiene on every path.
//
// Most tests bootstrap a tp over MPI_COMM_WORLD the way src/comm/create.c
// does (open, allgather addresses, pids and uids, connect), with the whole
// world as one node. Payload fds are memfds whose contents name the sender,
// receiver, round and slot. A rank injects raw frames as a verified peer
// through vmmipc__tp_conn. Tests that kill a peer build a 2-rank tp across
// fork() (node ranks 0 and 1 with comm ranks 5 and 7, so that messages must
// name 7).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/testhooks.h"
#include "harness/helpers.h"
#include "transport/tp.h"

// ---- unlink() seen from the test ----------------------------------------------
// Every unlink() of this process (the library's included: it is linked in
// statically) passes here, so that a test can check that a failed open
// removes nothing it did not create.
static std::atomic<int> g_unlink_watch{0}, g_unlink_calls{0};
static char g_unlink_last[128];

extern "C" int unlink(const char *path) noexcept {
  if (g_unlink_watch.load()) {
    g_unlink_calls++;
    size_t i = 0;
    for (; i + 1 < sizeof g_unlink_last && path[i]; i++) g_unlink_last[i] = path[i];
    g_unlink_last[i] = '\0';
  }
  return static_cast<int>(syscall(SYS_unlinkat, AT_FDCWD, path, 0));
}

namespace {

using vt::Has;

constexpr int kTimeoutMs = 30000;
constexpr uint32_t kMaxB = VMMIPC__FRAME_MAX_BYTES;
constexpr uint32_t kMaxF = VMMIPC__FRAME_MAX_FDS;
constexpr int kP2P = VMMIPC__CTX_P2P, kColl = VMMIPC__CTX_COLL;

// Runs the collectives the tests use once, so that anything MPI opens lazily
// is open before a test takes its fd baseline.
void WarmMpi() {
  unsigned char b[VMMIPC__ADDR_BYTES] = {};
  MPI_Bcast(b, sizeof b, MPI_UNSIGNED_CHAR, 0, MPI_COMM_WORLD);
  std::vector<unsigned char> all(sizeof b * static_cast<size_t>(vt::Size()));
  MPI_Allgather(b, sizeof b, MPI_UNSIGNED_CHAR, all.data(), sizeof b, MPI_UNSIGNED_CHAR, MPI_COMM_WORLD);
  int me = vt::Rank();
  std::vector<int> ints(static_cast<size_t>(vt::Size()));
  MPI_Allgather(&me, 1, MPI_INT, ints.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &me, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
}

long long ElapsedMs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

bool AllRanks(bool ok) {
  int v = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

std::string LastError() { return vmmipc_last_error(); }

uint64_t RandomId() {
  uint64_t v = 0;
  while (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
  }
  return v;
}

// ---- bootstrap over MPI_COMM_WORLD -------------------------------------------

struct WorldOpts {
  int timeout_ms = kTimeoutMs;  // this rank's
  int ns = VMMIPC_SOCKET_ABSTRACT;
  const char *dir = nullptr;
};

// Opens this rank's tp (binds its listener); collective only for the comm id.
vmmipc__tp_t *OpenOnly(const WorldOpts &w, std::vector<int> *ranks) {
  const int size = vt::Size(), rank = vt::Rank();
  uint64_t id = rank == 0 ? RandomId() : 0;
  MPI_Bcast(&id, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  ranks->resize(static_cast<size_t>(size));
  std::iota(ranks->begin(), ranks->end(), 0);
  vmmipc__tp_opts_t o;
  std::memset(&o, 0, sizeof o);
  o.socket_namespace = w.ns;
  o.socket_dir = w.dir;
  o.node_rank = rank;
  o.node_size = size;
  o.ranks = ranks->data();
  o.timeout_ms = w.timeout_ms;
  o.comm_id = id;
  vmmipc__tp_t *tp = nullptr;
  vmmipc_result_t rc = vmmipc__tp_open(&o, &tp);
  EXPECT_EQ(rc, VMMIPC_SUCCESS) << LastError();
  return tp;
}

// Publishes the addresses, pids and uids, and connects the mesh.
// Collective; closes tp and returns false on every rank if any rank failed.
bool ConnectWorld(vmmipc__tp_t **tp) {
  const int size = vt::Size();
  unsigned char addr[VMMIPC__ADDR_BYTES] = {};
  if (*tp) std::memcpy(addr, vmmipc__tp_addr(*tp), sizeof addr);
  std::vector<unsigned char> addrs(sizeof addr * static_cast<size_t>(size));
  MPI_Allgather(addr, sizeof addr, MPI_UNSIGNED_CHAR, addrs.data(), sizeof addr, MPI_UNSIGNED_CHAR, MPI_COMM_WORLD);
  int pid = static_cast<int>(getpid());
  unsigned uid = static_cast<unsigned>(geteuid());
  std::vector<int> pids_i(static_cast<size_t>(size));
  std::vector<unsigned> uids_u(static_cast<size_t>(size));
  MPI_Allgather(&pid, 1, MPI_INT, pids_i.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(&uid, 1, MPI_UNSIGNED, uids_u.data(), 1, MPI_UNSIGNED, MPI_COMM_WORLD);
  if (!AllRanks(*tp != nullptr)) {
    vmmipc__tp_close(*tp);
    *tp = nullptr;
    return false;
  }
  std::vector<pid_t> pids(pids_i.begin(), pids_i.end());
  std::vector<uid_t> uids(uids_u.begin(), uids_u.end());
  vmmipc_result_t rc = vmmipc__tp_connect(*tp, addrs.data(), pids.data(), uids.data());
  EXPECT_EQ(rc, VMMIPC_SUCCESS) << LastError();
  if (!AllRanks(rc == VMMIPC_SUCCESS)) {
    vmmipc__tp_close(*tp);
    *tp = nullptr;
    return false;
  }
  return true;
}

// A connected tp on every rank, or nullptr on every rank.
struct World {
  vmmipc__tp_t *tp = nullptr;
  std::vector<int> ranks;
  explicit World(const WorldOpts &w = WorldOpts()) {
    tp = OpenOnly(w, &ranks);
    ConnectWorld(&tp);
  }
  ~World() { vmmipc__tp_close(tp); }
  World(const World &) = delete;
  World &operator=(const World &) = delete;
  vmmipc__conn_t *conn() const { return vmmipc__tp_conn(tp); }
  vmmipc__tp_stats_t Stats() const {
    vmmipc__tp_stats_t s;
    vmmipc__tp_stats(tp, &s);
    return s;
  }
};

// ---- messages with checkable bytes and fds --------------------------------------

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

// A message this rank sends: it owns (and closes) its fds.
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
  vmmipc__tp_send_t To(int peer) const {
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
  if (!r.done) return ::testing::AssertionFailure() << "from " << from << " round " << round << ": not done";
  if (r.num_bytes != nbytes || r.num_fds != nfds)
    return ::testing::AssertionFailure() << "from " << from << " round " << round << ": got " << r.num_bytes
                                         << " bytes and " << r.num_fds << " fds, expected " << nbytes << " and "
                                         << nfds;
  if ((nbytes == 0) != (r.bytes == nullptr) || (nfds == 0) != (r.fds == nullptr))
    return ::testing::AssertionFailure() << "bytes/fds pointers do not match the counts";
  for (size_t i = 0; i < nbytes; i++)
    if (r.bytes[i] != vt::PatternByte(Seed(from, to, round), i))
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
  if (r->fds) vmmipc__close_fds(r->fds, r->num_fds);
  free(r->fds);
  free(r->bytes);
  r->fds = nullptr;
  r->bytes = nullptr;
  r->num_fds = 0;
  r->num_bytes = 0;
}

bool RecvIsEmpty(const vmmipc__tp_recv_t &r) {
  return r.bytes == nullptr && r.fds == nullptr && r.num_bytes == 0 && r.num_fds == 0 && r.done == 0;
}

// Receive slots that free whatever they hold on every path.
struct Recvs {
  std::vector<vmmipc__tp_recv_t> v;
  Recvs() = default;
  explicit Recvs(std::initializer_list<int> peers) {
    for (int p : peers) Add(p);
  }
  ~Recvs() { Free(); }
  Recvs(const Recvs &) = delete;
  Recvs &operator=(const Recvs &) = delete;
  void Add(int peer) {
    vmmipc__tp_recv_t r;
    std::memset(&r, 0, sizeof r);
    r.peer = peer;
    v.push_back(r);
  }
  void Free() {
    for (auto &r : v) FreeRecv(&r);
  }
  vmmipc__tp_recv_t &operator[](size_t i) { return v[i]; }
};

struct Result {
  vmmipc_result_t rc;
  int aborted_by;
  long long ms;
  std::string err;
};

// One exchange.
Result Xchg(vmmipc__tp_t *tp, int ctx, uint64_t epoch, const std::vector<vmmipc__tp_send_t> &sends, Recvs *recvs,
            vmmipc_result_t local = VMMIPC_SUCCESS) {
  vmmipc__tp_xchg_t x;
  std::memset(&x, 0, sizeof x);
  x.ctx = ctx;
  x.epoch = epoch;
  x.sends = sends.empty() ? nullptr : sends.data();
  x.num_sends = static_cast<int>(sends.size());
  x.recvs = recvs && !recvs->v.empty() ? recvs->v.data() : nullptr;
  x.num_recvs = recvs ? static_cast<int>(recvs->v.size()) : 0;
  x.local = local;
  x.aborted_by = 7777;
  auto t0 = std::chrono::steady_clock::now();
  Result r;
  r.rc = vmmipc__tp_exchange(tp, &x);
  r.ms = ElapsedMs(t0);
  r.aborted_by = x.aborted_by;
  r.err = r.rc ? LastError() : std::string();
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

// ---- raw frames from a verified rank --------------------------------------------

vmmipc__frame_t Frame(const vmmipc__conn_t *c, int to, int ctx, int kind, uint64_t seq, uint64_t total_bytes,
                      uint32_t total_fds, uint32_t index) {
  vmmipc__frame_t f;
  std::memset(&f, 0, sizeof f);
  f.kind = static_cast<uint16_t>(kind);
  f.ctx = static_cast<uint16_t>(ctx);
  f.sender = static_cast<uint32_t>(c->node_rank);
  f.receiver = static_cast<uint32_t>(to);
  f.comm_id = c->comm_id;
  f.seq = seq;
  f.total_bytes = total_bytes;
  f.total_fds = total_fds;
  f.index = index;
  vmmipc__frame_cut(total_bytes, total_fds, index, &f.frame_bytes, &f.frame_fds);
  return f;
}

// One record on a (non-blocking) connection: `head` of any length, a
// payload and fds, however inconsistent; waits up to 10 s for room.
// Returns 0 or an errno value.
int RawSend(int sock, const void *head, size_t head_len, const void *payload, size_t len, const int *fds, int nfds) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
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
      char buf[CMSG_SPACE(sizeof(int) * kMaxF)];
    } cm;
    if (nfds) {
      std::memset(&cm, 0, sizeof cm);
      m.msg_control = cm.buf;
      m.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(nfds));
      cmsghdr *c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(nfds));
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * static_cast<size_t>(nfds));
    }
    if (sendmsg(sock, &m, MSG_NOSIGNAL) >= 0) return 0;
    if (errno == EINTR) continue;
    if (errno != EAGAIN || ElapsedMs(t0) > 10000) return errno;
    pollfd p = {sock, POLLOUT, 0};
    poll(&p, 1, 100);
  }
}

// Sends frame f with a payload of its frame_bytes (bytes `fill`) and the
// given fds over this rank's connection to node rank `to` in context `ctx`.
int Inject(const vmmipc__conn_t *c, int to, int ctx, const vmmipc__frame_t &f, const int *fds, int nfds,
           unsigned char fill = 'k', long extra_bytes = 0) {
  unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
  vmmipc__frame_encode(&f, head);
  std::vector<unsigned char> payload(f.frame_bytes + extra_bytes, fill);
  return RawSend(c->fd[ctx - 1][to], head, sizeof head, payload.data(), payload.size(), fds, nfds);
}

// ---- /proc/net/unix ----------------------------------------------------------------

// Names of listening Unix sockets ("@name" for abstract ones).
std::set<std::string> ListeningNames() {
  std::set<std::string> out;
  FILE *f = std::fopen("/proc/net/unix", "re");
  if (!f) return out;
  char line[512];
  if (!std::fgets(line, sizeof line, f)) {  // header
    std::fclose(f);
    return out;
  }
  while (std::fgets(line, sizeof line, f)) {
    char path[256] = "";
    unsigned long flags = 0;
    // Num RefCount Protocol Flags Type St Inode Path
    if (std::sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %255s", &flags, path) == 2 && (flags & 0x10000))
      out.insert(path);
  }
  std::fclose(f);
  return out;
}

std::string AddrText(const unsigned char *addr) {
  char buf[200] = "";
  vmmipc__conn_addr_text(addr, buf, sizeof buf);
  return buf;
}

bool IsHex32(const std::string &s) {
  if (s.size() != 32) return false;
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}

int DirEntries(const std::string &d) {
  DIR *dp = opendir(d.c_str());
  if (!dp) return -1;
  int n = 0;
  while (dirent *e = readdir(dp))
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) n++;
  closedir(dp);
  return n;
}

// Connects a blocking SOCK_SEQPACKET socket to an address as vmmipc prints it.
int RawConnect(const std::string &addr) {
  sockaddr_un sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (addr.size() >= sizeof sa.sun_path) return -1;
  std::memcpy(sa.sun_path, addr.data(), addr.size());
  bool abstract = addr[0] == '@';
  if (abstract) sa.sun_path[0] = '\0';
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + addr.size() + (abstract ? 0 : 1));
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr *>(&sa), len) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int WaitChild(pid_t pid, int *status) {
  int r;
  do r = waitpid(pid, status, 0);
  while (r < 0 && errno == EINTR);
  return r;
}

// Reads exactly n bytes from a pipe, waiting at most 20 s.
bool ReadFull(int fd, void *buf, size_t n) {
  auto t0 = std::chrono::steady_clock::now();
  size_t got = 0;
  while (got < n && ElapsedMs(t0) < 20000) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    ssize_t k = read(fd, static_cast<char *>(buf) + got, n - got);
    if (k > 0) got += static_cast<size_t>(k);
    else if (k == 0 || errno != EINTR) return false;
  }
  return got == n;
}

bool WriteFull(int fd, const void *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = write(fd, static_cast<const char *>(buf) + done, n - done);
    if (k > 0) done += static_cast<size_t>(k);
    else if (k < 0 && errno != EINTR) return false;
  }
  return true;
}

// ---- a pair of node ranks across fork() ---------------------------------------------

constexpr int kPairRanks[2] = {5, 7};

vmmipc__tp_opts_t PairOpts(int node_rank, uint64_t comm_id, int timeout_ms) {
  vmmipc__tp_opts_t o;
  std::memset(&o, 0, sizeof o);
  o.socket_namespace = VMMIPC_SOCKET_ABSTRACT;
  o.node_rank = node_rank;
  o.node_size = 2;
  o.ranks = kPairRanks;
  o.timeout_ms = timeout_ms;
  o.comm_id = comm_id;
  return o;
}

}  // namespace

// =====================================================================================
// Data paths
// =====================================================================================

// Every rank sends to the next and receives from the previous one, through
// every size class (empty, one frame, exactly one frame, one byte more, many
// frames) and fd count (none, one, one batch, one more, several, 1000),
// alternating the two contexts.
TEST(Transport, RingOfSizesAndFdCounts) {
  WarmMpi();
  NofileLimit raise(RLIM_INFINITY);  // soft = hard, for 1000 fds out and 1000 in
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank(), size = vt::Size();
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int big = 1000;
    if (raise.hard() != RLIM_INFINITY && static_cast<long>(raise.hard()) < 2 * big + base + 64)
      big = static_cast<int>((static_cast<long>(raise.hard()) - base - 64) / 2);
    if (rank == 0 && big < 1000)
      std::fprintf(stderr, "note: hard RLIMIT_NOFILE %ld allows only %d fds per message\n",
                   static_cast<long>(raise.hard()), big);
    const size_t sizes[] = {0, 100, kMaxB, kMaxB + 1, 100 * 1000};
    const int fdcounts[] = {0, 1, static_cast<int>(kMaxF), static_cast<int>(kMaxF) + 1, 600, big};
    int round = 0;
    for (size_t nbytes : sizes) {
      for (int nfds : fdcounts) {
        const int ctx = round % 2 ? kColl : kP2P;
        SCOPED_TRACE(std::to_string(nbytes) + " bytes, " + std::to_string(nfds) + " fds, context " +
                     std::to_string(ctx));
        auto m = MakeMsg(rank, next, round, nbytes, nfds);
        Recvs r{prev};
        Result x = Xchg(w.tp, ctx, static_cast<uint64_t>(round) + 1, {m->To(next)}, &r);
        EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
        EXPECT_EQ(x.aborted_by, -1);
        EXPECT_TRUE(CheckMsg(r[0], prev, rank, round, nbytes, nfds));
        round++;
      }
    }
    vmmipc__tp_stats_t s = w.Stats();
    EXPECT_EQ(s.stale_frames, 0u);
    EXPECT_EQ(s.stale_fds, 0u);
    EXPECT_EQ(s.refused, 0u);
    // Nobody closes while a peer may still wait (as the comm layer's
    // agreement ensures): a COLL exchange watches the peers it only sends
    // to, and their hang-up would end it.
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Every rank sends to and receives from every other in one call, with the
// lists in a different order on each rank, in both contexts, for several
// rounds (P2P numbers advance per pair; COLL epochs per call).
TEST(Transport, AllToAllInOneExchangeInBothContexts) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank(), size = vt::Size();
    auto nbytes = [](int from, int to, int round) {
      return static_cast<size_t>(((from * 7 + to * 13 + round * 5) % 9) * 17000 + from);
    };
    auto nfds = [](int from, int to, int round) { return ((from * 3 + to * 5 + round) % 7) * 50; };
    for (int round = 0; round < 6; round++) {
      const int ctx = round % 2 ? kColl : kP2P;
      SCOPED_TRACE("round " + std::to_string(round));
      std::vector<std::unique_ptr<Msg>> msgs;
      std::vector<vmmipc__tp_send_t> sends;
      for (int k = 1; k < size; k++) {
        int to = (rank % 2) ? (rank + size - k) % size : (rank + k) % size;  // odd ranks list them backwards
        msgs.push_back(MakeMsg(rank, to, round, nbytes(rank, to, round), nfds(rank, to, round)));
        sends.push_back(msgs.back()->To(to));
      }
      Recvs r;
      for (int k = 0; k < size; k++) {  // every other rank once, rotated by the round
        int from = (k + round) % size;
        if (from != rank) r.Add(from);
      }
      Result x = Xchg(w.tp, ctx, static_cast<uint64_t>(round) + 1, sends, &r);
      ASSERT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      for (auto &rv : r.v)
        EXPECT_TRUE(CheckMsg(rv, rv.peer, rank, round, nbytes(rv.peer, rank, round), nfds(rv.peer, rank, round)));
    }
    EXPECT_EQ(w.Stats().stale_frames, 0u);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// A P2P message queued while a COLL exchange runs is delivered to the next
// P2P receive, not to the collective, and the other way round.
TEST(Transport, ContextsNeverMix) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    // Round 0: P2P message X first, then collective Y (epoch 1).
    if (rank == 1) {
      auto x = MakeMsg(1, 0, 100, 300, 2);
      EXPECT_EQ(Xchg(w.tp, kP2P, 0, {x->To(0)}, nullptr).rc, VMMIPC_SUCCESS) << LastError();
      auto y = MakeMsg(1, 0, 200, 400, 3);
      EXPECT_EQ(Xchg(w.tp, kColl, 1, {y->To(0)}, nullptr).rc, VMMIPC_SUCCESS) << LastError();
    }
    MPI_Barrier(MPI_COMM_WORLD);  // X and Y are both queued at rank 0
    if (rank == 0) {
      Recvs y{1};
      Result r = Xchg(w.tp, kColl, 1, {}, &y);
      EXPECT_EQ(r.rc, VMMIPC_SUCCESS) << r.err;
      EXPECT_TRUE(CheckMsg(y[0], 1, 0, 200, 400, 3)) << "the collective got the point-to-point message";
      Recvs x{1};
      r = Xchg(w.tp, kP2P, 0, {}, &x);
      EXPECT_EQ(r.rc, VMMIPC_SUCCESS) << r.err;
      EXPECT_TRUE(CheckMsg(x[0], 1, 0, 100, 300, 2));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // Round 1: collective Y2 (epoch 2) first, then P2P X2; received P2P first.
    if (rank == 1) {
      auto y = MakeMsg(1, 0, 201, 40000, 254);
      EXPECT_EQ(Xchg(w.tp, kColl, 2, {y->To(0)}, nullptr).rc, VMMIPC_SUCCESS) << LastError();
      auto x = MakeMsg(1, 0, 101, 5, 1);
      EXPECT_EQ(Xchg(w.tp, kP2P, 0, {x->To(0)}, nullptr).rc, VMMIPC_SUCCESS) << LastError();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      Recvs x{1};
      Result r = Xchg(w.tp, kP2P, 0, {}, &x);
      EXPECT_EQ(r.rc, VMMIPC_SUCCESS) << r.err;
      EXPECT_TRUE(CheckMsg(x[0], 1, 0, 101, 5, 1)) << "the point-to-point receive got the collective's message";
      Recvs y{1};
      r = Xchg(w.tp, kColl, 2, {}, &y);
      EXPECT_EQ(r.rc, VMMIPC_SUCCESS) << r.err;
      EXPECT_TRUE(CheckMsg(y[0], 1, 0, 201, 40000, 254));
      vmmipc__tp_stats_t s = w.Stats();
      EXPECT_EQ(s.stale_frames, 0u);
      EXPECT_EQ(s.stale_fds, 0u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// =====================================================================================
// Arguments, names, open and mesh
// =====================================================================================

// Bad argument lists are refused up front: they clear the receive slots,
// send nothing to anybody, and consume no message number.
TEST(Transport, ArgumentChecks) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank(), size = vt::Size();
    if (rank == 0) {
      auto m = MakeMsg(0, 1, 0, 10, 1);
      vmmipc__tp_send_t s = m->To(1);
      auto refused = [&](int ctx, std::vector<vmmipc__tp_send_t> sends, std::vector<int> recv_peers,
                         const std::string &fragment) {
        Recvs r;
        for (int p : recv_peers) r.Add(p);
        for (auto &rv : r.v) {  // garbage in the output slots must be cleared
          rv.bytes = reinterpret_cast<unsigned char *>(&rv);
          rv.fds = reinterpret_cast<int *>(&rv);
          rv.num_bytes = 3;
          rv.num_fds = 3;
          rv.done = 1;
        }
        Result x = Xchg(w.tp, ctx, 1, sends, &r);
        EXPECT_EQ(x.rc, VMMIPC_ERR_INVALID_ARG) << fragment;
        EXPECT_TRUE(Has(x.err, fragment)) << x.err;
        EXPECT_EQ(x.aborted_by, -1);
        for (auto &rv : r.v) EXPECT_TRUE(RecvIsEmpty(rv)) << fragment;
      };
      refused(0, {s}, {}, "bad arguments");
      refused(3, {s}, {}, "bad arguments");
      vmmipc__tp_send_t t = s;
      t.peer = -1;
      refused(kColl, {t}, {}, "send 0 to node rank -1");
      t.peer = size;
      refused(kColl, {t}, {}, "send 0 to node rank " + std::to_string(size));
      t.peer = 0;
      refused(kP2P, {t}, {}, "send 0 to node rank 0");
      refused(kColl, {s, s}, {}, "send 1 to node rank 1");
      refused(kColl, {}, {0}, "receive 0 from node rank 0");
      refused(kColl, {}, {1, 1}, "receive 1 from node rank 1");
      refused(kColl, {}, {size}, "receive 0 from node rank");
      t = s;
      t.bytes = nullptr;
      refused(kColl, {t}, {}, "is malformed or exceeds the limits");
      t = s;
      t.num_fds = -1;
      refused(kColl, {t}, {}, "is malformed or exceeds the limits");
      t = s;
      t.fds = nullptr;
      refused(kColl, {t}, {}, "is malformed or exceeds the limits");
      t = s;
      t.num_bytes = VMMIPC__MSG_MAX_BYTES + 1;  // never read: refused on the count
      refused(kColl, {t}, {}, "(1073741825 bytes, 1 fds) is malformed or exceeds the limits");
      std::vector<int> many(VMMIPC__MSG_MAX_FDS + 1, m->fds[0]);
      t = s;
      t.fds = many.data();
      t.num_fds = static_cast<int>(many.size());
      refused(kColl, {t}, {}, "exceeds the limits");
      int closed_fd = MakeTaggedFd("x");
      close(closed_fd);
      int two[2] = {m->fds[0], closed_fd};
      t = s;
      t.fds = two;
      t.num_fds = 2;
      refused(kColl, {t}, {}, "(2 of 2) of the message to rank 1 is not open");
      two[1] = -1;
      refused(kColl, {t}, {}, "fd -1 (2 of 2) of the message to rank 1 is not open");
      // Null lists with counts, negative counts.
      vmmipc__tp_xchg_t x;
      std::memset(&x, 0, sizeof x);
      x.ctx = kColl;
      x.num_sends = 1;
      EXPECT_EQ(vmmipc__tp_exchange(w.tp, &x), VMMIPC_ERR_INVALID_ARG);
      x.num_sends = 0;
      x.num_recvs = 1;
      EXPECT_EQ(vmmipc__tp_exchange(w.tp, &x), VMMIPC_ERR_INVALID_ARG);
      x.num_recvs = -1;
      EXPECT_EQ(vmmipc__tp_exchange(w.tp, &x), VMMIPC_ERR_INVALID_ARG);
      x.num_recvs = 0;
      x.num_sends = -1;
      EXPECT_EQ(vmmipc__tp_exchange(w.tp, &x), VMMIPC_ERR_INVALID_ARG);
      // Nothing at all to do is fine.
      x.num_sends = 0;
      EXPECT_EQ(vmmipc__tp_exchange(w.tp, &x), VMMIPC_SUCCESS) << LastError();
      // None of that reached rank 1: its first P2P message is this one.
      Result ok = Xchg(w.tp, kP2P, 0, {s}, nullptr);
      EXPECT_EQ(ok.rc, VMMIPC_SUCCESS) << ok.err;
    } else if (rank == 1) {
      Recvs r{0};
      Result x = Xchg(w.tp, kP2P, 0, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 0, 1, 0, 10, 1));
      vmmipc__tp_stats_t st = w.Stats();
      EXPECT_EQ(st.stale_frames, 0u) << "a refused call sent something";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";

  // Opening: bad node tables and namespaces.
  int me = vt::Rank();
  vmmipc__tp_opts_t o = PairOpts(0, 1, 1000);
  vmmipc__tp_t *tp = reinterpret_cast<vmmipc__tp_t *>(&o);
  o.node_rank = 2;
  EXPECT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(tp, nullptr);
  EXPECT_TRUE(Has(LastError(), "node rank 2 of 2")) << LastError();
  o = PairOpts(0, 1, 1000);
  o.socket_namespace = 5;
  EXPECT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(Has(LastError(), "socket namespace 5")) << LastError();
  o = PairOpts(0, 1, 1000);
  o.socket_namespace = VMMIPC_SOCKET_FILESYSTEM;
  EXPECT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(Has(LastError(), "need a socket_dir")) << LastError();
  o = PairOpts(0, 1, 1000);
  o.ranks = nullptr;
  EXPECT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked by a refused open";

  // A node of one: no socket at all; nothing to exchange with.
  o = PairOpts(0, 1, 1000);
  o.node_size = 1;
  o.ranks = &me;
  ASSERT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_SUCCESS) << LastError();
  EXPECT_EQ(vt::FdCount(), base) << "a node of one needs no socket";
  EXPECT_EQ(vmmipc__tp_conn(tp)->listen_fd, -1);
  pid_t pid = getpid();
  uid_t uid = geteuid();
  EXPECT_EQ(vmmipc__tp_connect(tp, vmmipc__tp_addr(tp), &pid, &uid), VMMIPC_SUCCESS) << LastError();
  EXPECT_EQ(Xchg(tp, kColl, 1, {}, nullptr).rc, VMMIPC_SUCCESS);
  auto m = MakeMsg(me, me, 0, 1, 0);
  Result self = Xchg(tp, kP2P, 0, {m->To(0)}, nullptr);
  EXPECT_EQ(self.rc, VMMIPC_ERR_INVALID_ARG) << "no message to oneself";
  vmmipc__tp_close(tp);
  m.reset();
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Abstract names: "@vmmipc-" and 128 random bits, different on every rank
// and every open; listening only between open and the end of the mesh.
TEST(Transport, AbstractNamesAreRandomAndGoneAfterTheMesh) {
  WarmMpi();
  const int base = vt::FdCount();
  std::vector<int> ranks;
  vmmipc__tp_t *tp = OpenOnly(WorldOpts(), &ranks);
  ASSERT_TRUE(AllRanks(tp != nullptr));
  std::string name = AddrText(vmmipc__tp_addr(tp));
  ASSERT_EQ(name.rfind("@vmmipc-", 0), 0u) << name;
  EXPECT_TRUE(IsHex32(name.substr(8))) << name;
  EXPECT_EQ(ListeningNames().count(name), 1u) << name << " is not listening after open";
  // A second open of the same rank draws a new name.
  vmmipc__tp_t *again = OpenOnly(WorldOpts(), &ranks);
  ASSERT_NE(again, nullptr);
  EXPECT_NE(AddrText(vmmipc__tp_addr(again)), name);
  vmmipc__tp_close(again);
  // Names differ across ranks.
  char mine[64] = {};
  std::snprintf(mine, sizeof mine, "%s", name.c_str());
  std::vector<char> all(64 * static_cast<size_t>(vt::Size()));
  MPI_Allgather(mine, 64, MPI_CHAR, all.data(), 64, MPI_CHAR, MPI_COMM_WORLD);
  std::set<std::string> distinct;
  for (int r = 0; r < vt::Size(); r++) distinct.insert(std::string(&all[64 * static_cast<size_t>(r)]));
  EXPECT_EQ(distinct.size(), static_cast<size_t>(vt::Size()));
  ASSERT_TRUE(ConnectWorld(&tp));
  // After the mesh nothing listens: a connect is refused by the kernel.
  EXPECT_EQ(vmmipc__tp_conn(tp)->listen_fd, -1);
  EXPECT_EQ(ListeningNames().count(name), 0u) << name << " still listens after the mesh";
  int s = RawConnect(name);
  EXPECT_LT(s, 0) << "something still accepts at " << name;
  EXPECT_EQ(errno, ECONNREFUSED);
  if (s >= 0) close(s);
  // Two connections per peer, one per context.
  const int n = vt::Size(), me = vt::Rank();
  for (int p = 0; p < n; p++) {
    const vmmipc__conn_t *c = vmmipc__tp_conn(tp);
    if (p == me) {
      EXPECT_EQ(c->fd[0][p], -1);
      EXPECT_EQ(c->fd[1][p], -1);
    } else {
      EXPECT_GE(c->fd[0][p], 0) << "P2P connection to " << p;
      EXPECT_GE(c->fd[1][p], 0) << "COLL connection to " << p;
    }
  }
  EXPECT_EQ(vt::FdCount(), base + 2 * (n - 1));
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Filesystem sockets: a private directory with a random name, mode exactly
// 0700 whatever the umask, owned by us, holding the socket file "s"; both
// are gone once the mesh is connected, and nothing is left in socket_dir.
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
  const int rank = vt::Rank(), size = vt::Size();
  // Odd ranks give the directory with trailing slashes.
  std::string given = std::string(dir) + (rank % 2 ? "//" : "");
  WorldOpts wo;
  wo.ns = VMMIPC_SOCKET_FILESYSTEM;
  wo.dir = given.c_str();
  // A umask that narrows mkdir's 0700 to 0500: open must fix the mode on
  // the directory it made (fchmod), never through a path.
  // (Not for other users: a socket file without owner write cannot be
  // connected to, and the umask applies to it too.)
  mode_t old_mask = umask(geteuid() == 0 ? 0277 : 0077);
  std::vector<int> ranks;
  vmmipc__tp_t *tp = OpenOnly(wo, &ranks);
  umask(old_mask);
  ASSERT_TRUE(AllRanks(tp != nullptr));
  const vmmipc__conn_t *c = vmmipc__tp_conn(tp);
  ASSERT_NE(c->dir_path, nullptr);
  ASSERT_NE(c->sock_path, nullptr);
  std::string own_dir = c->dir_path, sock_path = c->sock_path;
  EXPECT_EQ(own_dir.rfind(std::string(dir) + "/vmmipc-", 0), 0u) << own_dir;
  EXPECT_TRUE(IsHex32(own_dir.substr(std::strlen(dir) + 8))) << own_dir;
  EXPECT_EQ(sock_path, own_dir + "/s");
  EXPECT_EQ(AddrText(vmmipc__tp_addr(tp)), sock_path);
  struct stat st;
  ASSERT_EQ(lstat(own_dir.c_str(), &st), 0) << own_dir;
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u) << "mode of " << own_dir;
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_EQ(lstat(sock_path.c_str(), &st), 0) << sock_path;
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  ASSERT_TRUE(ConnectWorld(&tp));
  EXPECT_NE(lstat(sock_path.c_str(), &st), 0) << sock_path << " is left after the mesh";
  EXPECT_NE(lstat(own_dir.c_str(), &st), 0) << own_dir << " is left after the mesh";
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(DirEntries(dir), 0) << "something is left in " << dir;
  {
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    auto m = MakeMsg(rank, next, 0, 50000, 300);
    Recvs r{prev};
    Result x = Xchg(tp, kColl, 1, {m->To(next)}, &r);
    EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    EXPECT_TRUE(CheckMsg(r[0], prev, rank, 0, 50000, 300));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(rmdir(dir), 0) << dir << ": " << std::strerror(errno);
  }
}

// Binds a socket at the path in arg and exits: the file stays, with nobody
// listening (a socket file another process replaced).
int BindAndExit(void *arg) {
  const char *path = static_cast<const char *>(arg);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  return fd >= 0 && bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0 ? 0 : 1;
}

// A socket file replaced by another process fails the mesh at once on
// every rank: the ranks connecting to it are refused (naming the path), its
// own rank notices that the file is no longer the one it bound (naming the
// path), and the others see those ranks hang up. With a 60 s timeout, a
// TIMEOUT result would mean a rank waited it out.
TEST(Transport, AReplacedSocketFileFailsAtOnceNamingThePath) {
  WarmMpi();
  char dir[256] = {};
  if (vt::Rank() == 0) {
    std::snprintf(dir, sizeof dir, "/tmp/vmmipc-tp-test-XXXXXX");
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  ASSERT_NE(dir[0], '\0') << "mkdtemp failed on rank 0";
  const int base = vt::FdCount();
  const int rank = vt::Rank(), size = vt::Size(), victim = size - 1;
  WorldOpts wo;
  wo.ns = VMMIPC_SOCKET_FILESYSTEM;
  wo.dir = dir;
  wo.timeout_ms = 60000;
  std::vector<int> ranks;
  vmmipc__tp_t *tp = OpenOnly(wo, &ranks);
  ASSERT_TRUE(AllRanks(tp != nullptr));
  std::string own_dir = vmmipc__tp_conn(tp)->dir_path, path = vmmipc__tp_conn(tp)->sock_path;
  if (rank == victim) {
    ASSERT_EQ(unlink(path.c_str()), 0);
    int st = vt::InChild(BindAndExit, const_cast<char *>(path.c_str()));
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the other process could not bind " << path;
  }
  std::string victim_path = path;
  {
    std::vector<char> buf(path.begin(), path.end());
    buf.resize(256, '\0');
    MPI_Bcast(buf.data(), 256, MPI_CHAR, victim, MPI_COMM_WORLD);
    victim_path = buf.data();
  }
  unsigned char addr[VMMIPC__ADDR_BYTES];
  std::memcpy(addr, vmmipc__tp_addr(tp), sizeof addr);
  std::vector<unsigned char> addrs(sizeof addr * static_cast<size_t>(size));
  MPI_Allgather(addr, sizeof addr, MPI_UNSIGNED_CHAR, addrs.data(), sizeof addr, MPI_UNSIGNED_CHAR, MPI_COMM_WORLD);
  int pid = static_cast<int>(getpid());
  std::vector<int> pids_i(static_cast<size_t>(size));
  MPI_Allgather(&pid, 1, MPI_INT, pids_i.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<pid_t> pids(pids_i.begin(), pids_i.end());
  std::vector<uid_t> uids(static_cast<size_t>(size), geteuid());
  vmmipc_result_t rc = vmmipc__tp_connect(tp, addrs.data(), pids.data(), uids.data());
  const std::string err = LastError();
  EXPECT_EQ(rc, VMMIPC_ERR_PEER) << err;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  ASSERT_EQ(vmmipc_last_error_info(&info), VMMIPC_SUCCESS);
  if (rank == victim) {
    EXPECT_TRUE(Has(err, "its socket file " + victim_path + " was replaced")) << err;
    EXPECT_EQ(info.rank, victim) << err;
  } else {
    EXPECT_GE(info.rank, 0) << "a peer failure names a rank: " << err;
    EXPECT_NE(info.rank, rank) << err;
  }
  int named = rank != victim && Has(err, "at " + victim_path), others = 0;
  MPI_Allreduce(&named, &others, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GE(others, 1) << "no rank that connects to the replaced file named it";
  vmmipc__tp_close(tp);
  struct stat st;
  if (rank == victim) {
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << "the other process's file was removed";
    unlink(path.c_str());
    rmdir(own_dir.c_str());
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(DirEntries(dir), 0) << "something is left in " << dir;
    EXPECT_EQ(rmdir(dir), 0) << dir << ": " << std::strerror(errno);
  }
}

// Failures in open leave nothing behind and remove nothing they did not
// make: a path too long for sun_path, a missing socket_dir, one that is not
// a directory, and running out of fds after the directory was made.
TEST(Transport, OpenFailuresCleanUp) {
  const int base = vt::FdCount();
  char dir[256];
  std::snprintf(dir, sizeof dir, "/tmp/vmmipc-tp-open-XXXXXX");
  ASSERT_NE(mkdtemp(dir), nullptr);
  int me = vt::Rank();
  vmmipc__tp_opts_t o;
  std::memset(&o, 0, sizeof o);
  o.node_rank = 0;
  o.node_size = 2;  // a listener is made only when there are peers
  int ranks[2] = {me, me + 100};
  o.ranks = ranks;
  o.timeout_ms = 1000;
  o.comm_id = RandomId();
  o.socket_namespace = VMMIPC_SOCKET_FILESYSTEM;
  vmmipc__tp_t *tp = nullptr;

  // sun_path holds 107 characters: this directory exists but is too deep.
  std::string deep = std::string(dir) + "/" + std::string(70, 'd');
  ASSERT_EQ(mkdir(deep.c_str(), 0700), 0);
  o.socket_dir = deep.c_str();
  EXPECT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(tp, nullptr);
  EXPECT_TRUE(Has(LastError(), deep)) << LastError();
  EXPECT_TRUE(Has(LastError(), "shorter socket_dir")) << LastError();
  EXPECT_TRUE(Has(LastError(), "rank " + std::to_string(me))) << LastError();
  EXPECT_EQ(DirEntries(deep), 0);
  rmdir(deep.c_str());

  // A socket_dir that does not exist, or is a file: nothing was made, so
  // nothing may be removed either.
  std::string missing = std::string(dir) + "/missing";
  std::string file = std::string(dir) + "/file";
  int ffd = open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(ffd, 0);
  close(ffd);
  struct {
    std::string parent;
    const char *err;
  } cases[] = {{missing, "ENOENT"}, {file, "ENOTDIR"}};
  for (const auto &k : cases) {
    SCOPED_TRACE(k.parent);
    o.socket_dir = k.parent.c_str();
    g_unlink_calls = 0;
    g_unlink_watch = 1;
    vmmipc_result_t rc = vmmipc__tp_open(&o, &tp);
    g_unlink_watch = 0;
    EXPECT_EQ(rc, VMMIPC_ERR_SYSTEM);
    EXPECT_EQ(tp, nullptr);
    EXPECT_TRUE(Has(LastError(), k.err)) << LastError();
    EXPECT_TRUE(Has(LastError(), "must be an existing directory")) << LastError();
    EXPECT_EQ(g_unlink_calls.load(), 0) << "a failed open unlinked \"" << g_unlink_last
                                        << "\", which it did not create";
  }
  EXPECT_EQ(unlink(file.c_str()), 0);

  // No random bytes for the directory's name: nothing was made, so nothing
  // may be removed (the paths were never written; before, they were
  // unlinked and removed all the same).
  {
    o.socket_dir = dir;
    g_unlink_calls = 0;
    g_unlink_watch = 1;
    vmmipc__test_fail_at("random", 1);
    vmmipc_result_t rc = vmmipc__tp_open(&o, &tp);
    g_unlink_watch = 0;
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(rc, VMMIPC_ERR_SYSTEM);
    EXPECT_EQ(tp, nullptr);
    EXPECT_TRUE(Has(LastError(), "naming the socket directory: no random bytes")) << LastError();
    EXPECT_EQ(g_unlink_calls.load(), 0) << "a failed open unlinked \"" << g_unlink_last << "\"";
    EXPECT_EQ(DirEntries(dir), 0);
  }

  // Out of fds after mkdir: the directory goes again.
  for (int ns : {VMMIPC_SOCKET_FILESYSTEM, VMMIPC_SOCKET_ABSTRACT}) {
    SCOPED_TRACE(ns);
    o.socket_namespace = ns;
    o.socket_dir = dir;
    int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(probe, 0);
    close(probe);  // `probe` is the lowest free fd: at this limit, nothing more opens
    vmmipc_result_t rc;
    {
      NofileLimit low(static_cast<rlim_t>(probe));
      ASSERT_TRUE(low.ok());
      rc = vmmipc__tp_open(&o, &tp);
    }
    EXPECT_EQ(rc, VMMIPC_ERR_RESOURCE);
    EXPECT_EQ(tp, nullptr);
    EXPECT_TRUE(Has(LastError(), "EMFILE")) << LastError();
    EXPECT_EQ(DirEntries(dir), 0) << "the socket directory was left behind";
  }
  EXPECT_EQ(rmdir(dir), 0);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

// vmmipc__tp_connect checks what it is given before it connects, and the
// credentials of every listener it reaches: a socket at a published address
// that belongs to another process (an impostor, if anyone could bind the
// name first) is never sent to.
TEST(Transport, MeshChecksItsTableAndEveryListener) {
  const int base = vt::FdCount();
  uid_t uid = geteuid();
  uid_t uids[2] = {uid, uid};
  auto fresh = [&](int timeout_ms = 1000) {
    vmmipc__tp_opts_t o = PairOpts(0, RandomId(), timeout_ms);
    vmmipc__tp_t *tp = nullptr;
    EXPECT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_SUCCESS) << LastError();
    return tp;
  };
  // Rank 7's listener: an abstract socket this process binds and listens on.
  char name[64];
  std::snprintf(name, sizeof name, "vmmipc-test-impostor-%d-%llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(RandomId()));
  int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_un sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, name, std::strlen(name));
  socklen_t sl = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(name));
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr *>(&sa), sl), 0) << std::strerror(errno);
  ASSERT_EQ(listen(lfd, 8), 0);
  unsigned char addrs[2 * VMMIPC__ADDR_BYTES] = {};
  auto set_addr1 = [&](int ns, const char *path, size_t len) {
    unsigned char *a = addrs + VMMIPC__ADDR_BYTES;
    std::memset(a, 0, VMMIPC__ADDR_BYTES);
    a[0] = static_cast<unsigned char>(ns);
    a[1] = static_cast<unsigned char>(len);
    a[2] = static_cast<unsigned char>(len >> 8);
    std::memcpy(a + 3, path, len);
  };
  std::string abstract_path = std::string(1, '\0') + name;
  set_addr1(VMMIPC_SOCKET_ABSTRACT, abstract_path.data(), abstract_path.size());

  vmmipc__tp_t *tp = fresh();
  std::memcpy(addrs, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  pid_t pids[2] = {getpid(), 0};
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(Has(LastError(), "rank 7 has pid 0")) << LastError();
  pids[1] = getpid();
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_ERR_PEER);
  EXPECT_TRUE(Has(LastError(), "ranks 5 and 7 both have pid")) << LastError();
  pids[0] = getppid();
  pids[1] = getpid();
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(Has(LastError(), "its own pid or uid is wrong")) << LastError();
  vmmipc__tp_close(tp);

  // The listener at rank 7's address is this process, not rank 7 (our parent).
  tp = fresh();
  std::memcpy(addrs, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  pids[0] = getpid();
  pids[1] = getppid();
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_ERR_PEER);
  std::string err = LastError();
  EXPECT_TRUE(Has(err, "connecting to rank 7")) << err;
  EXPECT_TRUE(Has(err, "belongs to pid " + std::to_string(getpid()))) << err;
  EXPECT_TRUE(Has(err, "refusing to send to it")) << err;
  vmmipc__tp_stats_t s;
  vmmipc__tp_stats(tp, &s);
  EXPECT_EQ(s.refused, 1u);
  vmmipc__tp_close(tp);

  // A published address of the other namespace, and one where nobody listens.
  tp = fresh();
  std::memcpy(addrs, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  set_addr1(VMMIPC_SOCKET_FILESYSTEM, "/tmp/x/s", 8);
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(Has(LastError(), "rank 7 published an address (/tmp/x/s) of another socket namespace")) << LastError();
  vmmipc__tp_close(tp);
  tp = fresh();
  std::memcpy(addrs, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  std::string nobody = abstract_path + "-nobody";
  set_addr1(VMMIPC_SOCKET_ABSTRACT, nobody.data(), nobody.size());
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_ERR_PEER);
  EXPECT_TRUE(Has(LastError(), "ECONNREFUSED")) << LastError();
  EXPECT_TRUE(Has(LastError(), "nobody listens there")) << LastError();
  vmmipc__tp_close(tp);

  // This process as rank 7; rank 5 (our parent process: alive) never
  // connects: the mesh times out naming it, within the bound.
  vmmipc__tp_opts_t o = PairOpts(1, RandomId(), 500);
  ASSERT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_SUCCESS) << LastError();
  std::memcpy(addrs + VMMIPC__ADDR_BYTES, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  pids[0] = getppid();
  pids[1] = getpid();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_ERR_TIMEOUT);
  long long ms = ElapsedMs(t0);
  EXPECT_GE(ms, 450);
  EXPECT_LE(ms, 500 + 1000);
  EXPECT_TRUE(Has(LastError(), "rank 7 setting up connections timed out waiting for rank 5 (it has not connected "
                               "here)"))
      << LastError();
  vmmipc__tp_close(tp);

  close(lfd);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

// A process that is no rank (a forked child: same uid, unknown pid)
// connects to rank 0's listener before the mesh and sends a well-formed
// HELLO with an fd: rank 0 refuses and counts it; its fd never arrives.
TEST(Transport, ForeignProcessDuringTheMeshIsRefused) {
  WarmMpi();
  const int base = vt::FdCount();
  const int rank = vt::Rank(), n = vt::Size();
  std::vector<int> ranks;
  vmmipc__tp_t *tp = OpenOnly(WorldOpts(), &ranks);
  ASSERT_TRUE(AllRanks(tp != nullptr));
  pid_t child = -1;
  int hold[2] = {-1, -1}, ready[2] = {-1, -1};
  if (rank == 0) {
    std::string addr = AddrText(vmmipc__tp_addr(tp));
    uint64_t comm_id = vmmipc__tp_conn(tp)->comm_id;
    ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    std::fflush(nullptr);
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // no MPI, no gtest here
      close(hold[1]);
      close(ready[0]);
      int sock = RawConnect(addr);
      if (sock < 0) _exit(2);
      int fd = MakeTaggedFd("forged");
      vmmipc__frame_t f;
      std::memset(&f, 0, sizeof f);
      f.kind = VMMIPC__KIND_HELLO;
      f.ctx = VMMIPC__CTX_COLL;
      f.sender = 1;  // claims to be node rank 1
      f.receiver = 0;
      f.comm_id = comm_id;
      unsigned char h[VMMIPC__FRAME_HEADER_BYTES];
      vmmipc__frame_encode(&f, h);
      if (RawSend(sock, h, sizeof h, nullptr, 0, &fd, 1) != 0) _exit(3);
      char c = 1;
      if (!WriteFull(ready[1], &c, 1)) _exit(4);
      while (read(hold[0], &c, 1) < 0 && errno == EINTR) {  // keeps the connection until told
      }
      _exit(0);
    }
    close(hold[0]);
    close(ready[1]);
    char c = 0;
    EXPECT_TRUE(ReadFull(ready[0], &c, 1)) << "the foreign process did not connect";
  }
  ASSERT_TRUE(ConnectWorld(&tp));
  vmmipc__tp_stats_t s;
  vmmipc__tp_stats(tp, &s);
  const vmmipc__conn_t *c = vmmipc__tp_conn(tp);
  const int pipes = rank == 0 ? 2 : 0;
  EXPECT_EQ(vt::FdCount(), base + pipes + 2 * (n - 1)) << "only the mesh's connections are open";
  if (rank == 0) {
    EXPECT_EQ(s.refused, 1u);
    EXPECT_TRUE(Has(c->last_refusal, "pid " + std::to_string(child))) << c->last_refusal;
    EXPECT_TRUE(Has(c->last_refusal, "is no lower rank")) << c->last_refusal;
  } else {
    EXPECT_EQ(s.refused, 0u);
  }
  {  // The mesh works.
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    auto m = MakeMsg(rank, next, 0, 100, 3);
    Recvs r{prev};
    Result x = Xchg(tp, kColl, 1, {m->To(next)}, &r);
    EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    EXPECT_TRUE(CheckMsg(r[0], prev, rank, 0, 100, 3));
  }
  if (rank == 0) {
    close(hold[1]);
    close(ready[0]);
    int status = 0;
    ASSERT_EQ(WaitChild(child, &status), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the foreign process failed: status " << status;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// A lower rank's first record that is empty but carries an fd is a
// malformed HELLO, not a hang-up (SOCK_SEQPACKET reads it as 0 bytes, the fd
// installed): the mesh fails at once naming that rank, and the fd is closed.
// Before, it was refused as "closed before its HELLO", its fd kept for the
// life of the process, and the mesh waited out its timeout.
TEST(Transport, AnEmptyFirstRecordWithFdsIsAMalformedHello) {
  const int timeout_ms = 3000;
  const int base = vt::FdCount();
  vmmipc__tp_opts_t o = PairOpts(1, RandomId(), timeout_ms);
  vmmipc__tp_t *tp = nullptr;
  ASSERT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_SUCCESS) << LastError();
  const std::string addr = AddrText(vmmipc__tp_addr(tp));
  int hold[2];
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  std::fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // node rank 0 in the parent's table; no MPI, no gtest here
    close(hold[1]);
    int sock = RawConnect(addr);
    if (sock < 0) _exit(2);
    int fd = MakeTaggedFd("empty");
    if (RawSend(sock, "", 0, nullptr, 0, &fd, 1) != 0) _exit(3);
    char ch;
    while (read(hold[0], &ch, 1) < 0 && errno == EINTR) {  // keeps the connection until told
    }
    _exit(0);
  }
  close(hold[0]);
  unsigned char addrs[2 * VMMIPC__ADDR_BYTES];  // node rank 1 dials nobody: rank 0 dials it
  std::memcpy(addrs, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  std::memcpy(addrs + VMMIPC__ADDR_BYTES, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  pid_t pids[2] = {child, getpid()};
  uid_t uids[2] = {geteuid(), geteuid()};
  auto t0 = std::chrono::steady_clock::now();
  vmmipc_result_t rc = vmmipc__tp_connect(tp, addrs, pids, uids);
  const long ms = ElapsedMs(t0);
  const std::string err = LastError();
  close(hold[1]);
  int status = 0;
  EXPECT_EQ(WaitChild(child, &status), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child failed: status " << status;
  EXPECT_EQ(rc, VMMIPC_ERR_INVALID_DESC) << err;
  EXPECT_TRUE(Has(err, "rank 5 sent short frame: 0 bytes")) << err;
  EXPECT_LT(ms, timeout_ms) << "a malformed HELLO fails at once: " << err;
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "the fd that came with the empty record is held";
}

// =====================================================================================
// Hostile and broken peers
// =====================================================================================

// Malformed frames from a verified rank: each fails the receive with
// VMMIPC_ERR_INVALID_DESC naming the rank and the fault, closes the fds
// that came with it and the connections to that rank; the next call fails
// at once.
TEST(Transport, MalformedFramesFromAVerifiedRankAreRejected) {
  WarmMpi();
  const int rank = vt::Rank();
  const int base = vt::FdCount();
  enum Forge {
    kBadMagic, kOldVersion, kUnknownKind, kUnknownCtx, kOtherCtx, kReserved, kWrongSender, kWrongReceiver,
    kWrongComm, kBytesMismatch, kFdsMismatch, kHello, kDataCode, kHugeTotals, kIndexBeyond, kOtherCut,
    kTooLong, kShort, kFutureEpoch, kNotContinuing, kNoFirstFrame, kBadAbort, kEmpty, kNumForges
  };
  const char *names[] = {"bad magic", "old version", "unknown kind", "unknown context", "other context",
                         "reserved field", "wrong sender", "wrong receiver", "wrong comm", "byte count mismatch",
                         "fd count mismatch", "HELLO", "DATA with a code", "huge totals", "index beyond",
                         "another cut", "too long", "short", "future epoch", "not continuing", "no first frame",
                         "bad ABORT", "empty with fds"};
  const char *expect[] = {"bad magic", "frame version 1", "unknown frame kind 9", "unknown context 3",
                          "context 1 on a connection of context 2", "reserved header field",
                          "names node rank 0 as its sender, but came from node rank 1",
                          "addressed to node rank 1, not to 0", "belongs to communicator",
                          "announces 10 payload bytes but the frame holds 9", "announces 2 fds but 3 came",
                          "a HELLO frame after the connection was set up", "DATA frame with result code 4",
                          "exceeds the limits", "frame 1 of a message of 1 frame(s)", "is cut into",
                          "MSG_TRUNC", "short frame", "message #2 arrived while this rank expects at most #1",
                          "does not continue message #1", "without its first frame", "ABORT with result code 0",
                          "short frame: 0 bytes"};  // a read of 0 bytes with fds is no hang-up
  static_assert(sizeof names / sizeof *names == kNumForges, "names");
  static_assert(sizeof expect / sizeof *expect == kNumForges, "expectations");
  for (int k = 0; k < kNumForges; k++) {
    SCOPED_TRACE(names[k]);
    World w;
    ASSERT_NE(w.tp, nullptr);
    const vmmipc__conn_t *c = w.conn();
    if (rank == 1) {
      int fds[3];
      for (int i = 0; i < 3; i++) fds[i] = MakeTaggedFd(FdTag(1, 0, k, i));
      vmmipc__frame_t f = Frame(c, 0, kColl, VMMIPC__KIND_DATA, 1, 10, 2, 0);  // 10 bytes, 2 fds
      int nfds = 2, ctx = kColl;
      long extra = 0;
      unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
      switch (k) {
        case kUnknownKind: f.kind = 9; break;
        case kUnknownCtx: f.ctx = 3; break;
        case kOtherCtx: f.ctx = kP2P; break;
        case kWrongSender: f.sender = 0; break;
        case kWrongReceiver: f.receiver = 1; break;
        case kWrongComm: f.comm_id ^= 1; break;
        case kBytesMismatch: extra = -1; break;
        case kFdsMismatch: nfds = 3; break;
        case kHello: f = Frame(c, 0, kColl, VMMIPC__KIND_HELLO, 0, 0, 0, 0), nfds = 0; break;
        case kDataCode: f.code = 4; break;
        case kHugeTotals: f = Frame(c, 0, kColl, VMMIPC__KIND_DATA, 1, uint64_t{1} << 40, 2, 0); break;
        case kIndexBeyond: f.index = 1, f.frame_bytes = 0, f.frame_fds = 0, nfds = 0; break;
        case kOtherCut: f = Frame(c, 0, kColl, VMMIPC__KIND_DATA, 1, 40000, 2, 0), f.frame_bytes = 100; break;
        case kTooLong: f = Frame(c, 0, kColl, VMMIPC__KIND_DATA, 1, 40000, 2, 0), extra = 8000; break;
        case kFutureEpoch: f.seq = 2; break;
        case kNotContinuing: {
          vmmipc__frame_t first = Frame(c, 0, kColl, VMMIPC__KIND_DATA, 1, 40000, 2, 0);
          EXPECT_EQ(Inject(c, 0, kColl, first, fds, 2), 0);
          f = first;  // frame 0 again, where frame 1 is due
          break;
        }
        case kNoFirstFrame: f = Frame(c, 0, kColl, VMMIPC__KIND_DATA, 1, 40000, 0, 1), nfds = 0; break;
        case kBadAbort: f = Frame(c, 0, kColl, VMMIPC__KIND_ABORT, 1, 4, 0, 0), f.code = 0, nfds = 0; break;
        default: break;
      }
      vmmipc__frame_encode(&f, head);
      if (k == kBadMagic) head[0] ^= 1;
      if (k == kOldVersion) head[4] = 1;
      if (k == kReserved) head[10] = 1;
      std::vector<unsigned char> payload(f.frame_bytes + extra, 'm');
      int e = k == kShort   ? RawSend(c->fd[ctx - 1][0], head, 20, nullptr, 0, fds, nfds)
              : k == kEmpty ? RawSend(c->fd[ctx - 1][0], head, 0, nullptr, 0, fds, nfds)
                            : RawSend(c->fd[ctx - 1][0], head, sizeof head, payload.data(), payload.size(), fds, nfds);
      EXPECT_EQ(e, 0) << std::strerror(e);
      for (int fd : fds) close(fd);  // what was sent is the receiver's now
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the forged records are queued at rank 0
    if (rank == 0) {
      const int before = vt::FdCount();
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 1, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_ERR_INVALID_DESC) << x.err;
      EXPECT_TRUE(Has(x.err, "receiving from rank 1: ")) << x.err;
      EXPECT_TRUE(Has(x.err, expect[k])) << x.err;
      EXPECT_TRUE(Has(x.err, "the connection was closed")) << x.err;
      EXPECT_TRUE(RecvIsEmpty(r[0]));
      EXPECT_EQ(vt::FdCount(), before - 2) << "the forged fds are closed, and both connections to rank 1";
      EXPECT_EQ(w.conn()->fd[0][1], -1);
      EXPECT_EQ(w.conn()->fd[1][1], -1);
      Result again = Xchg(w.tp, kP2P, 0, {}, &r);
      EXPECT_EQ(again.rc, VMMIPC_ERR_PEER) << again.err;
      EXPECT_TRUE(Has(again.err, "the connection with rank 1 is closed (rank 1 broke the protocol: ")) << again.err;
      EXPECT_LE(again.ms, 1000) << "a closed connection fails at once";
      EXPECT_EQ(w.Stats().refused, 0u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// A peer (a tp in a forked child) sends one whole message, then only the
// first frame of the next (with fds), and is SIGKILLed. With `hold_open` a
// grandchild keeps the child's sockets open, so no end of file arrives and
// only the liveness check can tell. Either way: VMMIPC_ERR_PEER naming rank
// 7 within the timeout + 1 s, and every fd that arrived is closed.
static void KilledPeer(bool hold_open) {
  const int timeout_ms = 4000;
  const int base = vt::FdCount();
  const uint64_t id = RandomId();
  vmmipc__tp_opts_t o = PairOpts(0, id, timeout_ms);
  vmmipc__tp_t *tp = nullptr;
  ASSERT_EQ(vmmipc__tp_open(&o, &tp), VMMIPC_SUCCESS) << LastError();
  int addr_pipe[2], hold[2];
  ASSERT_EQ(pipe2(addr_pipe, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  std::fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(hold[1]);
    close(addr_pipe[0]);
    unsigned char addrs[2 * VMMIPC__ADDR_BYTES];
    std::memcpy(addrs, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
    vmmipc__tp_close(tp);  // the parent's copy: closes our fds, removes nothing
    vmmipc__tp_opts_t co = PairOpts(1, id, timeout_ms);
    vmmipc__tp_t *ctp = nullptr;
    if (vmmipc__tp_open(&co, &ctp) != VMMIPC_SUCCESS) _exit(2);
    std::memcpy(addrs + VMMIPC__ADDR_BYTES, vmmipc__tp_addr(ctp), VMMIPC__ADDR_BYTES);
    if (!WriteFull(addr_pipe[1], addrs + VMMIPC__ADDR_BYTES, VMMIPC__ADDR_BYTES)) _exit(3);
    pid_t pids[2] = {getppid(), getpid()};
    uid_t uids[2] = {geteuid(), geteuid()};
    if (vmmipc__tp_connect(ctp, addrs, pids, uids) != VMMIPC_SUCCESS) _exit(4);
    auto m = MakeMsg(7, 5, 0, 5000, 7);
    if (Xchg(ctp, kColl, 1, {m->To(0)}, nullptr).rc != VMMIPC_SUCCESS) _exit(5);
    // Epoch 2: 3 frames announced, only the first (with 5 fds) is sent.
    vmmipc__frame_t f = Frame(vmmipc__tp_conn(ctp), 0, kColl, VMMIPC__KIND_DATA, 2, 3 * kMaxB, 5, 0);
    if (Inject(vmmipc__tp_conn(ctp), 0, kColl, f, m->fds.data(), 5) != 0) _exit(6);
    if (hold_open) {
      pid_t g = fork();
      if (g < 0) _exit(7);
      if (g == 0) {  // keeps every socket of the child open until the test is done
        char c;
        while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
        }
        _exit(0);
      }
    }
    raise(SIGKILL);
    _exit(8);
  }
  close(hold[0]);
  close(addr_pipe[1]);
  unsigned char addrs[2 * VMMIPC__ADDR_BYTES];
  std::memcpy(addrs, vmmipc__tp_addr(tp), VMMIPC__ADDR_BYTES);
  EXPECT_TRUE(ReadFull(addr_pipe[0], addrs + VMMIPC__ADDR_BYTES, VMMIPC__ADDR_BYTES));
  close(addr_pipe[0]);
  pid_t pids[2] = {getpid(), child};
  uid_t uids[2] = {geteuid(), geteuid()};
  EXPECT_EQ(vmmipc__tp_connect(tp, addrs, pids, uids), VMMIPC_SUCCESS) << LastError();
  {
    Recvs r{1};
    Result x = Xchg(tp, kColl, 1, {}, &r);
    EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    EXPECT_TRUE(CheckMsg(r[0], 7, 5, 0, 5000, 7));
  }
  {
    const int before = vt::FdCount();
    Recvs r{1};
    Result x = Xchg(tp, kColl, 2, {}, &r);
    EXPECT_EQ(x.rc, VMMIPC_ERR_PEER) << x.err;
    if (!hold_open) {  // the hang-up drops the connections, and the half message with them
      EXPECT_EQ(vt::FdCount(), before - 2) << "the 5 fds of the half message are held";
    }
    EXPECT_LE(x.ms, timeout_ms + 1000) << x.err;
    EXPECT_TRUE(Has(x.err, "rank 7")) << x.err;
    if (hold_open) {
      EXPECT_TRUE(Has(x.err, "rank 7 (pid " + std::to_string(child) + ") exited while rank 5 waited on it")) << x.err;
    } else {
      EXPECT_TRUE(Has(x.err, "rank 7 hung up")) << x.err;
    }
    EXPECT_TRUE(RecvIsEmpty(r[0]));
  }
  close(hold[1]);  // lets the grandchild go
  int status = 0;
  ASSERT_EQ(WaitChild(child, &status), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child failed early: status " << status;
  vmmipc__tp_close(tp);
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
}

TEST(Transport, KilledPeerMidMessageHangsUp) { KilledPeer(false); }
TEST(Transport, KilledPeerMidMessageIsFoundByLiveness) { KilledPeer(true); }

// Rank 1 never sends: rank 0 gets VMMIPC_ERR_TIMEOUT naming rank 1 within
// the timeout + 1 s. Then rank 0 never receives a large message: rank 1's
// send times out naming rank 0, its ABORT to the full socket is bounded,
// and its error stays the current one.
TEST(Transport, TimeoutsNameThePeerAndAreBounded) {
  WarmMpi();
  const int timeout_ms = 800;
  const int base = vt::FdCount();
  {
    WorldOpts wo;
    wo.timeout_ms = timeout_ms;
    World w(wo);
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    if (rank == 0) {
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 1, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_ERR_TIMEOUT) << x.err;
      EXPECT_GE(x.ms, timeout_ms - 10) << x.err;
      EXPECT_LE(x.ms, timeout_ms + 1000) << x.err;
      EXPECT_TRUE(Has(x.err, "rank 0 timed out after 800 ms waiting for rank 1 (receive: nothing arrived)")) << x.err;
      EXPECT_TRUE(Has(x.err, "timeout_ms")) << x.err;
      EXPECT_TRUE(RecvIsEmpty(r[0]));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      auto m = MakeMsg(1, 0, 0, 8u << 20, 0);  // far more than a socket holds
      Result x = Xchg(w.tp, kColl, 2, {m->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_ERR_TIMEOUT) << x.err;
      EXPECT_LE(x.ms, timeout_ms + 1000) << "bounded, the ABORT's attempt included: " << x.err;
      EXPECT_TRUE(Has(x.err, "rank 1 timed out after 800 ms waiting for rank 0 (send: ")) << x.err;
      EXPECT_TRUE(Has(x.err, " of 256 frames taken)")) << x.err;
      EXPECT_EQ(x.err.rfind("rank 1 timed out", 0), 0u) << "the ABORT must keep the current error: " << x.err;
      // Rank 0's ABORT of epoch 1 was waiting here: dropped as stale.
      EXPECT_EQ(w.Stats().stale_frames, 1u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// ABORT: a rank that already failed (x.local) tells its peers instead of
// sending data; they return VMMIPC_ERR_PEER with its message well before
// the timeout: between messages, in the middle of a message with fds, and
// to a peer that only sends to it (and is stuck on a full socket).
TEST(Transport, AbortReachesThePeer) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank(), n = vt::Size();
    const long long fast = kTimeoutMs / 6;  // "well before the timeout", generous on 2 cores
    for (int mid_message = 0; mid_message < 2; mid_message++) {
      SCOPED_TRACE(mid_message ? "in the middle of a message" : "between messages");
      const uint64_t epoch = 1 + static_cast<uint64_t>(mid_message);
      const std::string text = "cuMemMap failed: injected failure " + std::to_string(4242 + mid_message);
      if (rank == 1) {
        if (mid_message) {  // frame 0 of 2, with 10 fds
          auto part = MakeMsg(1, 0, 9, 0, 10);
          vmmipc__frame_t f = Frame(w.conn(), 0, kColl, VMMIPC__KIND_DATA, epoch, 2 * kMaxB, 10, 0);
          EXPECT_EQ(Inject(w.conn(), 0, kColl, f, part->fds.data(), 10), 0);
        }
        vmmipc__error(VMMIPC_ERR_CUDA, "%s", text.c_str());
        auto m = MakeMsg(1, 0, 0, 100, 2);
        Recvs r{0};
        Result x = Xchg(w.tp, kColl, epoch, {m->To(0)}, &r, VMMIPC_ERR_CUDA);
        EXPECT_EQ(x.rc, VMMIPC_ERR_CUDA);
        EXPECT_EQ(LastError(), text) << "the caller's error stays the current one";
        EXPECT_LE(x.ms, 1000) << "telling the peers is bounded (200 ms)";
        EXPECT_TRUE(RecvIsEmpty(r[0]));
      } else if (rank == 0) {
        const vmmipc__tp_stats_t s0 = w.Stats();
        auto m = MakeMsg(0, 1, 0, 100, 2);
        Recvs r{1};
        Result x = Xchg(w.tp, kColl, epoch, {m->To(1)}, &r);
        EXPECT_EQ(x.rc, VMMIPC_ERR_PEER) << x.err;
        EXPECT_LE(x.ms, fast) << "the ABORT must end the wait";
        EXPECT_EQ(x.aborted_by, 1);
        EXPECT_TRUE(Has(x.err, "rank 1 gave up (a CUDA driver call failed): " + text)) << x.err;
        EXPECT_TRUE(RecvIsEmpty(r[0]));
        const vmmipc__tp_stats_t s1 = w.Stats();
        EXPECT_EQ(s1.stale_fds - s0.stale_fds, mid_message ? 10u : 0u) << "the half message's fds";
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    // Rank 0 only sends (8 MiB: it gets stuck on the full socket); rank 1,
    // which was to receive, fails and says so; rank 0 hears it on the
    // connection it only watches.
    if (rank == 1) {
      vmmipc__error(VMMIPC_ERR_NO_MEMORY, "no host memory for the window (injected)");
      Recvs r{0};
      Result x = Xchg(w.tp, kColl, 3, {}, &r, VMMIPC_ERR_NO_MEMORY);
      EXPECT_EQ(x.rc, VMMIPC_ERR_NO_MEMORY);
    } else if (rank == 0) {
      auto m = MakeMsg(0, 1, 3, 8u << 20, 3);
      Result x = Xchg(w.tp, kColl, 3, {m->To(1)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_ERR_PEER) << x.err;
      EXPECT_LE(x.ms, fast) << x.err;
      EXPECT_EQ(x.aborted_by, 1);
      EXPECT_TRUE(Has(x.err, "rank 1 gave up (out of host memory): no host memory for the window (injected)")) << x.err;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // Everybody with everybody; rank 1 fails. Rank 0 hears it from rank 1;
    // the others finish, or hear it from someone, quickly either way.
    if (n > 2) {
      std::vector<std::unique_ptr<Msg>> msgs;
      std::vector<vmmipc__tp_send_t> sends;
      Recvs r;
      for (int p = 0; p < n; p++) {
        if (p == rank) continue;
        msgs.push_back(MakeMsg(rank, p, 4, 1000, 1));
        sends.push_back(msgs.back()->To(p));
        r.Add(p);
      }
      if (rank == 1) vmmipc__error(VMMIPC_ERR_CUDA, "rank one cannot export (injected)");
      Result x = Xchg(w.tp, kColl, 4, sends, &r, rank == 1 ? VMMIPC_ERR_CUDA : VMMIPC_SUCCESS);
      if (rank == 1) {
        EXPECT_EQ(x.rc, VMMIPC_ERR_CUDA);
      } else {
        EXPECT_TRUE(x.rc == VMMIPC_ERR_PEER || x.rc == VMMIPC_SUCCESS) << x.err;
        EXPECT_LE(x.ms, fast) << x.err;
        if (rank == 0) {
          EXPECT_EQ(x.rc, VMMIPC_ERR_PEER);
        }
        if (x.rc) {
          EXPECT_TRUE(Has(x.err, "rank one cannot export (injected)")) << "the first failure travels: " << x.err;
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Valgrind does not apply a lowered RLIMIT_NOFILE to fds the kernel
// installs, so MSG_CTRUNC cannot be provoked under it.
static bool UnderValgrind() {
  const char *p = std::getenv("LD_PRELOAD");
  return p && (std::strstr(p, "vgpreload") || std::strstr(p, "valgrind"));
}

// Rank 0 cannot take more fds (RLIMIT_NOFILE lowered): recvmsg reports
// MSG_CTRUNC; the receive fails naming rank 1 and the fd limit, every fd
// that did arrive is closed, and the connection stays usable: the rest of
// that message is dropped (counted) at the next epoch, whose message arrives.
TEST(Transport, TruncatedFdsAreReleased) {
  WarmMpi();
  if (!AllRanks(!UnderValgrind()))
    GTEST_SKIP() << "valgrind runs here: it does not apply a lowered RLIMIT_NOFILE to fds the kernel installs, so "
                    "MSG_CTRUNC cannot be provoked";
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    if (rank == 1) {
      auto m = MakeMsg(1, 0, 0, 10, 1);
      EXPECT_EQ(Xchg(w.tp, kColl, 1, {m->To(0)}, nullptr).rc, VMMIPC_SUCCESS) << LastError();
    } else if (rank == 0) {
      Recvs r{1};
      EXPECT_EQ(Xchg(w.tp, kColl, 1, {}, &r).rc, VMMIPC_SUCCESS) << LastError();
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 0, 10, 1));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      // 300 fds: 253 in frame 0 and 47 in frame 1. Both frames fit in the
      // socket: this is done before rank 0 reads (the barrier below).
      auto big = MakeMsg(1, 0, 1, 1000, 300);
      Result x = Xchg(w.tp, kColl, 2, {big->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // both frames are queued at rank 0
    int arrived = -1;
    if (rank == 0) {
      const int before = vt::FdCount();
      Recvs r{1};
      Result x;
      {
        NofileLimit low(static_cast<rlim_t>(before + 16));
        ASSERT_TRUE(low.ok());
        x = Xchg(w.tp, kColl, 2, {}, &r);
      }
      vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;  // the OS error is in the record too
      EXPECT_EQ(vmmipc_last_error_info(&info), VMMIPC_SUCCESS);
      EXPECT_EQ(info.os_error, EMFILE) << x.err;
      EXPECT_EQ(x.rc, VMMIPC_ERR_RESOURCE) << x.err;
      EXPECT_TRUE(Has(x.err, "receiving from rank 1: ")) << x.err;
      EXPECT_TRUE(Has(x.err, "MSG_CTRUNC")) << x.err;
      EXPECT_TRUE(Has(x.err, "RLIMIT_NOFILE")) << x.err;
      EXPECT_TRUE(Has(x.err, "ulimit -n")) << x.err;
      EXPECT_TRUE(RecvIsEmpty(r[0]));
      EXPECT_EQ(vt::FdCount(), before) << "fds leaked, or the connection was dropped";
      size_t at = x.err.find("(MSG_CTRUNC: ");
      if (at != std::string::npos) arrived = std::atoi(x.err.c_str() + at + 13);
      EXPECT_GE(arrived, 0) << x.err;
      EXPECT_LT(arrived, 253) << x.err;
      EXPECT_TRUE(Has(x.err, std::to_string(arrived) + " of 253 arrived and were closed")) << x.err;
      EXPECT_EQ(w.Stats().stale_fds, static_cast<uint64_t>(arrived));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // The next epoch on the same connection.
    if (rank == 1) {
      auto m = MakeMsg(1, 0, 2, 5, 2);
      Result x = Xchg(w.tp, kColl, 3, {m->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_EQ(w.Stats().stale_frames, 1u) << "rank 0's ABORT of epoch 2 is dropped here";
    } else if (rank == 0) {
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 3, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 2, 5, 2));
      vmmipc__tp_stats_t s = w.Stats();
      EXPECT_EQ(s.stale_frames, 1u) << "frame 1 of the truncated message";
      EXPECT_EQ(s.stale_fds, static_cast<uint64_t>(arrived) + 47u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Frames of earlier epochs queued before an exchange (a whole message and
// half of one), and the half message an earlier exchange was left with, are
// dropped at the next epoch: their fds closed and counted; the message of
// the epoch arrives.
TEST(Transport, StaleFramesAreDroppedClosedAndCounted) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    WorldOpts wo;
    wo.timeout_ms = 1500;
    World w(wo);
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    // Epoch 3 after leftovers of epochs 1 (whole, 3 fds) and 2 (frame 0 of 2, 5 fds).
    if (rank == 1) {
      auto old = MakeMsg(1, 0, 90, 0, 8);
      vmmipc__frame_t f = Frame(w.conn(), 0, kColl, VMMIPC__KIND_DATA, 1, 7, 3, 0);
      EXPECT_EQ(Inject(w.conn(), 0, kColl, f, old->fds.data(), 3), 0);
      f = Frame(w.conn(), 0, kColl, VMMIPC__KIND_DATA, 2, 40000, 5, 0);
      EXPECT_EQ(Inject(w.conn(), 0, kColl, f, old->fds.data() + 3, 5), 0);
      auto m = MakeMsg(1, 0, 3, 333, 4);
      Result x = Xchg(w.tp, kColl, 3, {m->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      const int before = vt::FdCount();
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 3, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 3, 333, 4));
      vmmipc__tp_stats_t s = w.Stats();
      EXPECT_EQ(s.stale_frames, 2u);
      EXPECT_EQ(s.stale_fds, 8u);
      r.Free();
      EXPECT_EQ(vt::FdCount(), before);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // Epoch 4 times out with half a message in (frame 0 of 2: 32768 bytes
    // and 253 fds of 40000 and 260): the timeout says how much.
    if (rank == 1) {
      auto part = MakeMsg(1, 0, 91, 0, 253);
      vmmipc__frame_t f = Frame(w.conn(), 0, kColl, VMMIPC__KIND_DATA, 4, 40000, 260, 0);
      EXPECT_EQ(Inject(w.conn(), 0, kColl, f, part->fds.data(), 253), 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      const int before = vt::FdCount();
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 4, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_ERR_TIMEOUT) << x.err;
      EXPECT_TRUE(Has(x.err, "rank 1 (receive: 32768 of 40000 bytes and 253 of 260 fds arrived)")) << x.err;
      EXPECT_TRUE(RecvIsEmpty(r[0]));
      EXPECT_EQ(vt::FdCount(), before + 253) << "the half message is held until the next call";
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // Epoch 5: the rest of epoch 4's message (frame 1, 7 fds), then epoch 5's.
    if (rank == 1) {
      auto rest = MakeMsg(1, 0, 92, 0, 7);
      vmmipc__frame_t f = Frame(w.conn(), 0, kColl, VMMIPC__KIND_DATA, 4, 40000, 260, 1);
      EXPECT_EQ(Inject(w.conn(), 0, kColl, f, rest->fds.data(), 7), 0);
      auto m = MakeMsg(1, 0, 5, 50000, 260);
      Result x = Xchg(w.tp, kColl, 5, {m->To(0)}, nullptr);  // all of it fits in the socket
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_EQ(w.Stats().stale_frames, 1u) << "rank 0's ABORT of epoch 4";
    }
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 (1.5 s timeout) need not wait for rank 1 to be scheduled
    if (rank == 0) {
      const vmmipc__tp_stats_t s0 = w.Stats();
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 5, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 5, 50000, 260));
      vmmipc__tp_stats_t s = w.Stats();
      EXPECT_EQ(s.stale_frames - s0.stale_frames, 1u);
      EXPECT_EQ(s.stale_fds - s0.stale_fds, 260u) << "253 held from epoch 4, and 7 in its last frame";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// A peer that keeps sending stale frames (an earlier epoch's) faster than
// this rank reads them: every read of a connection returns to its caller's
// checks after a bounded number of records, so the exchange still times out
// on time, and one read of the agreement and the stale drop come back. The
// test hook makes rank 0 pause before each record, so that rank 1 surely
// outpaces it. For each of the three, rank 1 fills the socket first, then
// keeps it full until rank 0 is done (at most 5 s).
TEST(Transport, AFloodOfStaleFramesCannotPinTheReader) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    WorldOpts wo;
    wo.timeout_ms = 600;
    World w(wo);
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
    const unsigned char payload[7] = {'s', 't', 'a', 'l', 'e', '!', '!'};
    const vmmipc__frame_t stale = Frame(w.conn(), 0, kColl, VMMIPC__KIND_DATA, 1, sizeof payload, 0, 0);
    vmmipc__frame_encode(&stale, head);
    auto send_one = [&]() {
      iovec iov[2] = {{head, sizeof head}, {const_cast<unsigned char *>(payload), sizeof payload}};
      msghdr m;
      std::memset(&m, 0, sizeof m);
      m.msg_iov = iov;
      m.msg_iovlen = 2;
      return sendmsg(w.conn()->fd[kColl - 1][0], &m, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0 ? 0 : errno;
    };
    // Rank 1 floods while rank 0 runs `read` (timed). False if rank 1's
    // first fill of the socket took too few records for the test.
    long capacity = 0;
    auto flooded = [&](const std::function<void()> &read) {
      long queued = 0;
      if (rank == 1) {
        int e;
        while ((e = send_one()) == 0) queued++;
        EXPECT_EQ(e, EAGAIN) << std::strerror(e);
      }
      MPI_Bcast(&queued, 1, MPI_LONG, 1, MPI_COMM_WORLD);
      if (!capacity) capacity = queued;  // later fills top up what rank 0 read
      if (capacity <= 2 * VMMIPC__TP_RECORDS_PER_TURN) return false;
      if (rank == 1) {
        MPI_Request stop;
        int token = 0, done = 0;
        MPI_Irecv(&token, 1, MPI_INT, 0, 91, MPI_COMM_WORLD, &stop);
        auto t0 = std::chrono::steady_clock::now();
        while (!done && ElapsedMs(t0) < 5000) {
          if (send_one() == EAGAIN) {
            pollfd p = {w.conn()->fd[kColl - 1][0], POLLOUT, 0};
            poll(&p, 1, 1);
          }
          MPI_Test(&stop, &done, MPI_STATUS_IGNORE);
        }
        if (!done) MPI_Wait(&stop, MPI_STATUS_IGNORE);
      } else if (rank == 0) {
        vmmipc__test_record_pause_us(300);
        read();
        vmmipc__test_record_pause_us(0);
        int token = 1;
        MPI_Send(&token, 1, MPI_INT, 1, 91, MPI_COMM_WORLD);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      return true;
    };

    const bool enough = flooded([&] {
      const uint64_t stale0 = w.Stats().stale_frames;
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 3, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_ERR_TIMEOUT) << x.err;
      EXPECT_TRUE(Has(x.err, "rank 0 timed out after 600 ms waiting for rank 1")) << x.err;
      EXPECT_LT(x.ms, 600 + 1500) << "the flood held the exchange past its deadline";
      EXPECT_GE(w.Stats().stale_frames - stale0, static_cast<uint64_t>(VMMIPC__TP_RECORDS_PER_TURN));
      EXPECT_TRUE(RecvIsEmpty(r[0]));
    });
    if (!enough) GTEST_SKIP() << "the socket holds too few records for this test";
    ASSERT_TRUE(flooded([&] {
      auto t0 = std::chrono::steady_clock::now();
      vmmipc__tp_read_t rd = vmmipc__tp_read_coll(w.tp, 1, 3);
      EXPECT_LT(ElapsedMs(t0), 1000) << "one read of the agreement did not come back";
      EXPECT_TRUE(rd == VMMIPC__TP_READ_MORE || rd == VMMIPC__TP_READ_NOTHING) << rd << ": " << LastError();
    }));
    ASSERT_TRUE(flooded([&] {
      // Counted, not timed: 16 turns of 64 records at most (the pauses
      // alone take 0.3 s of the flood's 5 s).
      const uint64_t stale0 = w.Stats().stale_frames;
      auto t0 = std::chrono::steady_clock::now();
      vmmipc__tp_drop_stale(w.tp, 3);
      const long long ms = ElapsedMs(t0);
      const uint64_t dropped = w.Stats().stale_frames - stale0;
      EXPECT_GT(dropped, 0u);
      EXPECT_LE(dropped, 16u * VMMIPC__TP_RECORDS_PER_TURN) << "the stale drop read on for " << ms << " ms";
    }));
    if (rank == 0) {
      EXPECT_NE(w.conn()->fd[kColl - 1][1], -1) << "stale frames are no break of the protocol";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// A point-to-point receive whose peer aborted after sending the awaited
// message still takes it, however much came ahead of it: here 140 stale
// frames, more than two reads' worth of records (VMMIPC__TP_RECORDS_PER_TURN
// each), then the message, then the END frames on both connections. The
// END seen first on the collective connection makes the exchange read on
// until nothing more moves before it decides.
TEST(Transport, AMessageAheadOfAnEndIsTakenBehindManyStaleFrames) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    const int stale_n = 140;
    static_assert(140 > 2 * VMMIPC__TP_RECORDS_PER_TURN, "more than two reads' worth");
    // Message 0 (point to point) first, so that frames numbered 0 are stale.
    if (rank == 1) {
      auto m = MakeMsg(1, 0, 40, 10, 0);
      EXPECT_EQ(Xchg(w.tp, kP2P, 0, {m->To(0)}, nullptr).rc, VMMIPC_SUCCESS);
    } else if (rank == 0) {
      Recvs r{1};
      Result x = Xchg(w.tp, kP2P, 0, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 40, 10, 0));
    }
    int fits = 1;
    if (rank == 1) {
      unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
      const unsigned char one = 's';
      const vmmipc__frame_t f = Frame(w.conn(), 0, kP2P, VMMIPC__KIND_DATA, 0, 1, 0, 0);
      vmmipc__frame_encode(&f, head);
      for (int i = 0; i < stale_n && fits; i++) {
        iovec iov[2] = {{head, sizeof head}, {const_cast<unsigned char *>(&one), 1}};
        msghdr mh;
        std::memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov;
        mh.msg_iovlen = 2;
        fits = sendmsg(w.conn()->fd[kP2P - 1][0], &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0;
      }
      if (fits) {
        auto m = MakeMsg(1, 0, 41, 500, 2);
        EXPECT_EQ(Xchg(w.tp, kP2P, 0, {m->To(0)}, nullptr).rc, VMMIPC_SUCCESS);  // fits: queued
        vmmipc__tp_abort_all(w.tp, VMMIPC_ERR_ABORTED, "rank 1 aborted (test)");
      }
    }
    MPI_Bcast(&fits, 1, MPI_INT, 1, MPI_COMM_WORLD);
    if (!fits) GTEST_SKIP() << "the socket holds fewer than " << stale_n << " small records";
    if (rank == 0) {
      const uint64_t stale0 = w.Stats().stale_frames;
      Recvs r{1};
      Result x = Xchg(w.tp, kP2P, 0, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 41, 500, 2));
      EXPECT_EQ(w.Stats().stale_frames - stale0, static_cast<uint64_t>(stale_n));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Point-to-point numbers: a send that times out half-way leaves half a
// message queued (its ABORT does not fit either), a send that fails
// locally sends nothing but uses its number (a gap); the receiver drops the
// half message when the next one begins, accepts the gap, and keeps going.
TEST(Transport, PointToPointNumbersSkipGapsAndDropHalfMessages) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    WorldOpts wo;
    wo.timeout_ms = vt::Rank() == 1 ? 2000 : kTimeoutMs;
    World w(wo);
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    if (rank == 1) {
      auto m0 = MakeMsg(1, 0, 0, 1u << 20, 600);  // message #0: 32 frames, fds in the first 3
      Result x = Xchg(w.tp, kP2P, 0, {m0->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_ERR_TIMEOUT) << x.err;
      EXPECT_TRUE(Has(x.err, "waiting for rank 0 (send: ")) << x.err;
      vmmipc__error(VMMIPC_ERR_NO_MEMORY, "injected");
      auto m1 = MakeMsg(1, 0, 1, 10, 1);  // message #1: never leaves
      x = Xchg(w.tp, kP2P, 0, {m1->To(0)}, nullptr, VMMIPC_ERR_NO_MEMORY);
      EXPECT_EQ(x.rc, VMMIPC_ERR_NO_MEMORY);
      EXPECT_LE(x.ms, 1000);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      // The socket is full until rank 0 reads: wait for that (rank 1's
      // timeout is short) rather than for rank 0 to be scheduled in time.
      pollfd p = {w.conn()->fd[kP2P - 1][0], POLLOUT, 0};
      EXPECT_EQ(poll(&p, 1, 60000), 1) << "rank 0 never read";
      auto m2 = MakeMsg(1, 0, 2, 100, 2);
      Result x = Xchg(w.tp, kP2P, 0, {m2->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      auto m3 = MakeMsg(1, 0, 3, 3, 3);
      x = Xchg(w.tp, kP2P, 0, {m3->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    } else if (rank == 0) {
      Recvs r{1};
      Result x = Xchg(w.tp, kP2P, 0, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 2, 100, 2)) << "message #2 after half of #0 and no #1";
      vmmipc__tp_stats_t s = w.Stats();
      EXPECT_EQ(s.stale_fds, 600u) << "the half message's fds";
      EXPECT_EQ(s.stale_frames, 0u);
      Recvs r3{1};
      x = Xchg(w.tp, kP2P, 0, {}, &r3);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r3[0], 1, 0, 3, 3, 3));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// =====================================================================================
// Reading the collective connection in the agreement (verdict.c)
// =====================================================================================

// The agreement after a receive whose fds were cut short (RLIMIT_NOFILE)
// reads the rest of that message (frame 1, its fds cut short too) through
// vmmipc__tp_read_coll. A shortage of this rank is not the peer's fault:
// the record is dropped (fds closed and counted) and the connection kept,
// as the exchange and vmmipc__tp_drop_stale do; the next epoch's message
// arrives.
TEST(Transport, TruncatedFdsWhileAgreeingKeepTheConnection) {
  WarmMpi();
  if (!AllRanks(!UnderValgrind()))
    GTEST_SKIP() << "valgrind runs here: it does not apply a lowered RLIMIT_NOFILE to fds the kernel installs, so "
                    "MSG_CTRUNC cannot be provoked";
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    if (rank == 1) {  // 300 fds: 253 in frame 0, 47 in frame 1; both fit in the socket
      auto big = MakeMsg(1, 0, 1, 1000, 300);
      Result x = Xchg(w.tp, kColl, 2, {big->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // both frames are queued at rank 0
    if (rank == 0) {
      const int before = vt::FdCount();
      Recvs r{1};
      Result x;
      vmmipc__tp_read_t rd;
      std::string rd_err;
      {
        NofileLimit low(static_cast<rlim_t>(before + 16));
        ASSERT_TRUE(low.ok());
        x = Xchg(w.tp, kColl, 2, {}, &r);  // frame 0 cut short
        rd = vmmipc__tp_read_coll(w.tp, 1, 2);  // frame 1 cut short, as the agreement's wait reads it
        rd_err = LastError();
      }
      EXPECT_EQ(x.rc, VMMIPC_ERR_RESOURCE) << x.err;
      EXPECT_EQ(rd, VMMIPC__TP_READ_NOTHING) << rd_err;
      EXPECT_NE(w.conn()->fd[kColl - 1][1], -1) << "the connection with rank 1 was dropped: " << rd_err;
      EXPECT_NE(w.conn()->fd[kP2P - 1][1], -1);
      EXPECT_EQ(vt::FdCount(), before) << "fds leaked, or the connection was dropped";
      EXPECT_EQ(w.Stats().stale_frames, 1u) << "frame 1";
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      auto m = MakeMsg(1, 0, 2, 5, 2);
      Result x = Xchg(w.tp, kColl, 3, {m->To(0)}, nullptr);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
    } else if (rank == 0) {
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 3, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 2, 5, 2));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Rank 1 sends its message of epoch 3 now, while rank 0 is between its peek
// and its read (the test hook), and says when it is queued.
static void PeerSendsTheNextEpochNow(void *) {
  int token = 0;
  MPI_Send(&token, 1, MPI_INT, 1, 77, MPI_COMM_WORLD);
  MPI_Recv(&token, 1, MPI_INT, 1, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

// vmmipc__tp_read_coll peeks at the connection, then reads. A frame of the
// next collective (the peer had its verdict first) that comes after a peek
// that saw nothing stays queued for that collective: it is no break of the
// protocol, and the connection stays.
TEST(Transport, AFrameOfTheNextCollectiveAfterThePeekStaysQueued) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    if (rank == 1) {
      int token = 0;
      MPI_Recv(&token, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      auto m = MakeMsg(1, 0, 3, 100, 2);
      Result x = Xchg(w.tp, kColl, 3, {m->To(0)}, nullptr);  // fits in the socket: queued when it returns
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      MPI_Send(&token, 1, MPI_INT, 0, 78, MPI_COMM_WORLD);
    } else if (rank == 0) {
      vmmipc__test_on_peeked(PeerSendsTheNextEpochNow, nullptr);
      vmmipc__tp_read_t rd = vmmipc__tp_read_coll(w.tp, 1, 2);
      std::string err = LastError();
      vmmipc__test_on_peeked(nullptr, nullptr);
      EXPECT_EQ(rd, VMMIPC__TP_READ_NOTHING) << err;
      EXPECT_NE(w.conn()->fd[kColl - 1][1], -1) << "the connection with rank 1 was dropped: " << err;
      EXPECT_EQ(vmmipc__tp_read_coll(w.tp, 1, 2), VMMIPC__TP_READ_AHEAD) << "left queued: " << LastError();
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 3, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_SUCCESS) << x.err;
      EXPECT_TRUE(CheckMsg(r[0], 1, 0, 3, 100, 2));
      EXPECT_EQ(w.Stats().stale_frames, 0u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// What the agreement's read of a peer reports names that peer in the error
// record (vmmipc_last_error_info's rank), as the exchange does: a frame that
// breaks the protocol, the connection closed after it, and a hang-up.
TEST(Transport, TheAgreementsReadNamesThePeerThatBrokeOrHungUp) {
  WarmMpi();
  const int base = vt::FdCount();
  const int rank = vt::Rank();
  auto info_of = []() {
    vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
    EXPECT_EQ(vmmipc_last_error_info(&info), VMMIPC_SUCCESS);
    return info;
  };
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    if (rank == 1) {  // a HELLO on a connection long set up
      vmmipc__frame_t f = Frame(w.conn(), 0, kColl, VMMIPC__KIND_HELLO, 0, 0, 0, 0);
      EXPECT_EQ(Inject(w.conn(), 0, kColl, f, nullptr, 0), 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      EXPECT_EQ(vmmipc__tp_read_coll(w.tp, 1, 2), VMMIPC__TP_READ_GONE) << LastError();
      vmmipc_error_info_t info = info_of();
      EXPECT_EQ(info.code, VMMIPC_ERR_INVALID_DESC) << info.message;
      EXPECT_EQ(info.rank, 1) << info.message;
      EXPECT_EQ(w.conn()->fd[kColl - 1][1], -1) << "the connection was not dropped after a break of the protocol";
      EXPECT_EQ(vmmipc__tp_read_coll(w.tp, 1, 2), VMMIPC__TP_READ_GONE) << LastError();
      info = info_of();
      EXPECT_EQ(info.code, VMMIPC_ERR_PEER) << info.message;
      EXPECT_TRUE(Has(info.message, "the connection with rank 1 is closed")) << info.message;
      EXPECT_EQ(info.rank, 1) << info.message;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    if (rank == 1) {
      EXPECT_EQ(shutdown(w.conn()->fd[kColl - 1][0], SHUT_WR), 0) << std::strerror(errno);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      EXPECT_EQ(vmmipc__tp_read_coll(w.tp, 1, 2), VMMIPC__TP_READ_GONE) << LastError();
      vmmipc_error_info_t info = info_of();
      EXPECT_EQ(info.code, VMMIPC_ERR_PEER) << info.message;
      EXPECT_TRUE(Has(info.message, "rank 1 hung up (end of file)")) << info.message;
      EXPECT_EQ(info.rank, 1) << info.message;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// =====================================================================================
// Dropped connections
// =====================================================================================

// Rank 1 sends frame 0 (253 fds) of a 260-fd message, then aborts (END).
// Rank 0's exchange fails ABORTED and drops the connections with rank 1;
// the half message goes with them (its fds hold rank 1's memory), not at
// the comm's destroy: nothing reads that connection again, so neither
// vmmipc__tp_drop_stale nor vmmipc__tp_seal would.
TEST(Transport, AHalfMessageGoesWithItsDroppedConnection) {
  WarmMpi();
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    const int rank = vt::Rank();
    if (rank == 1) {
      auto part = MakeMsg(1, 0, 93, 0, 253);
      vmmipc__frame_t f = Frame(w.conn(), 0, kColl, VMMIPC__KIND_DATA, 2, 40000, 260, 0);
      EXPECT_EQ(Inject(w.conn(), 0, kColl, f, part->fds.data(), 253), 0);
      vmmipc__tp_abort_all(w.tp, VMMIPC_ERR_ABORTED, "rank 1 aborted (test)");
    }
    MPI_Barrier(MPI_COMM_WORLD);  // both records are queued at rank 0
    if (rank == 0) {
      const int before = vt::FdCount();
      Recvs r{1};
      Result x = Xchg(w.tp, kColl, 2, {}, &r);
      EXPECT_EQ(x.rc, VMMIPC_ERR_ABORTED) << x.err;
      EXPECT_EQ(x.aborted_by, 1);
      EXPECT_TRUE(RecvIsEmpty(r[0]));
      EXPECT_EQ(w.conn()->fd[kColl - 1][1], -1);
      vmmipc__tp_drop_stale(w.tp, 2);  // what a failed collective does next
      vmmipc__tp_seal(w.tp);           // and a comm that failed
      EXPECT_EQ(vt::FdCount(), before - 2) << "the half message's 253 fds are closed with the 2 connections";
      EXPECT_EQ(w.Stats().stale_fds, 253u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Waits for every rank without spinning (MPI_Barrier polls busily), so
// that a rank that measures a wait does not compete with its peers for
// the CPU.
static void QuietBarrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  int done = 0;
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) poll(nullptr, 0, 1);
}

// vmmipc__tp_abort_all tells every connection within one budget (200 ms in
// all), however many are full: rank 1 fills its sockets to every peer in
// both contexts (nobody reads them), and its END frames wait 200 ms in all,
// not 100 ms per connection (2 x (n - 1) x 100 ms, 400 at 3 ranks: no poll
// reports room before a reader takes a record). At 2 ranks both are 200 ms.
TEST(Transport, EndFramesToFullSocketsShareOneBudget) {
  WarmMpi();
  const int n = vt::Size();
  if (n < 3) GTEST_SKIP() << "needs 3 ranks: at 2 one budget and one per connection are both 200 ms";
  const int base = vt::FdCount();
  {
    World w;
    ASSERT_NE(w.tp, nullptr);
    if (vt::Rank() == 1) {
      std::vector<unsigned char> rec(VMMIPC__FRAME_HEADER_BYTES + kMaxB, 'f');
      for (int p = 0; p < n; p++)
        for (int ctx : {kP2P, kColl}) {
          if (p == 1) continue;
          int fd = w.conn()->fd[ctx - 1][p], sent = 0;
          while (send(fd, rec.data(), rec.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) sent++;
          EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
          EXPECT_GT(sent, 0);
        }
      auto t0 = std::chrono::steady_clock::now();
      vmmipc__tp_abort_all(w.tp, VMMIPC_ERR_ABORTED, "rank 1 aborted (test)");
      long long ms = ElapsedMs(t0);
      EXPECT_GE(ms, 190) << "it waited for room";
      EXPECT_LT(ms, 2 * (n - 1) * 100 - 10) << "one wait per full connection";
    }
    QuietBarrier();
  }
  EXPECT_EQ(vt::FdCount(), base) << "fds leaked";
  MPI_Barrier(MPI_COMM_WORLD);
}
