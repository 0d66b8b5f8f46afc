// A hostile neighbour: a process of the same user (started by rank 0
// before any comm exists; it never calls MPI) that, for the whole test,
//   - squats names: binds abstract names in the old predictable scheme
//     ("@vmmipc-<nonce>-<rank>") and variations of every rank's
//     "@vmmipc-<hex>" name it sees in /proc/net/unix, and makes directories
//     with guessed names in the filesystem-mode socket_dir;
//   - floods backlogs: connects to every listener of the ranks it finds
//     (abstract names in /proc/net/unix, socket files in socket_dir), up to
//     ~2000 connections held, each sending a forged HELLO with an fd, and
//     reconnects as connections are dropped.
// Meanwhile the ranks create comms in both socket modes and run collectives
// with data checks. Every call must succeed with the right data, fds must
// be back at baseline after destroy, and the refused connections must show
// in vmmipc_comm_stats.
//
// To make the flood reach every listener deterministically, this file
// interposes MPI_Iallgather (the MPI profiling interface): while a rank
// holds a listener whose name is not published yet (comm_create's address
// exchange), it waits until a connection is pending on it. Only the flooder
// can have made it: nobody else knows the name, and the ranks connect only
// after the exchange.
//
// For the safety of other jobs on a shared machine, the flooder attacks only
// listeners owned by this job's ranks (it maps socket inodes to their pids),
// and squats only names derived from theirs.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "harness/bufs.h"
#include "transport/codec.h"

namespace {

using vt::kGran;

// ---- the wait inside comm_create's address exchange -------------------------------

std::atomic<int> g_hold{0};      // wait for the flood before publishing
std::atomic<int> g_hold_hits{0}, g_hold_misses{0};
char g_sock_dir[200];            // filesystem mode: the test's socket_dir

// This process's listening Unix socket whose name vmmipc chose, or -1.
int OwnVmmipcListener() {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    int fd = std::atoi(e->d_name);
    if (fd == dirfd(d)) continue;
    int acc = 0;
    socklen_t al = sizeof acc;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) != 0 || !acc) continue;
    sockaddr_un sa;
    socklen_t sl = sizeof sa;
    std::memset(&sa, 0, sizeof sa);
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&sa), &sl) != 0 || sa.sun_family != AF_UNIX) continue;
    static const char abs_prefix[] = "vmmipc-";
    bool ours = sa.sun_path[0] == '\0' && std::strncmp(sa.sun_path + 1, abs_prefix, sizeof abs_prefix - 1) == 0;
    size_t dl = std::strlen(g_sock_dir);
    if (dl && std::strncmp(sa.sun_path, g_sock_dir, dl) == 0 && sa.sun_path[dl] == '/') ours = true;
    if (ours) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

}  // namespace

// The MPI profiling interface: every MPI_Iallgather of this program (the
// library's included) comes here first.
extern "C" int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                              int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request) {
  if (g_hold.load()) {
    int lfd = OwnVmmipcListener();
    if (lfd >= 0) {
      pollfd p = {lfd, POLLIN, 0};
      int r;
      do r = poll(&p, 1, 20000);
      while (r < 0 && errno == EINTR);
      (r == 1 ? g_hold_hits : g_hold_misses)++;
    }
  }
  return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

namespace {

// ---- the flooder --------------------------------------------------------------------

constexpr int kMaxHeld = 2000;     // connections held at once
constexpr int kPerTarget = 600;    // more than a backlog (512) holds
constexpr int kMaxSquats = 256;
constexpr int kMaxDirs = 64;
constexpr const char *kFlooderEnv = "VMMIPC_HOSTILE_FLOODER";  // set for the flooder's process only

// Shared with the flooder (a memfd that rank 0 maps before starting it).
struct Shared {
  std::atomic<long> scans, targets, connects, backlog_full, dropped, forged, squats, dirs;
  std::atomic<int> held_max;
  int nsquat;
  char squat[kMaxSquats][108];  // abstract names bound, without the leading NUL
  int ndir;
  char dir[kMaxDirs][256];
};
static_assert(std::atomic<long>::is_always_lock_free, "shared atomics across processes");

volatile sig_atomic_t g_term = 0;
void OnTerm(int) { g_term = 1; }

struct Target {
  bool abstract;
  std::string name;  // "@hex-name" or a path
  int held = 0;
};

struct Held {
  int fd;
  std::string target;
};

class Flooder {
 public:
  Flooder(Shared *sh, const std::vector<pid_t> &ranks, const std::string &dir)
      : sh_(sh), ranks_(ranks.begin(), ranks.end()), dir_(dir) {}

  int Run(int ready_fd) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = OnTerm;
    sigaction(SIGTERM, &sa, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive rank 0
    CloseInheritedFds(ready_fd);
    rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    forged_fd_ = memfd_create("vmmipc-forged", MFD_CLOEXEC);
    // Names guessed before any rank exists.
    Squat("vmmipc-" + std::string(32, '0'));
    Squat("vmmipc-" + std::string(32, 'f') + "-0");
    MakeDir("vmmipc-" + std::string(32, '0'));
    char c = 1;
    if (write(ready_fd, &c, 1) != 1) return 2;
    close(ready_fd);
    while (!g_term) {
      sh_->scans++;
      Scan();
      for (auto &kv : targets_) Flood(&kv.second);
      Reap(3);  // also paces the loop: ~3 ms per round
    }
    for (const Held &h : held_) close(h.fd);
    for (int fd : squat_fds_) close(fd);
    for (int i = 0; i < sh_->ndir; i++) rmdir(sh_->dir[i]);
    if (forged_fd_ >= 0) close(forged_fd_);
    return 0;
  }

 private:
  // Only the pipe to rank 0 and stdio stay: no copy of rank 0's MPI sockets.
  static void CloseInheritedFds(int keep) {
    std::vector<int> fds;
    if (DIR *d = opendir("/proc/self/fd")) {
      while (dirent *e = readdir(d)) {
        int fd = std::atoi(e->d_name);
        if (e->d_name[0] != '.' && fd > 2 && fd != keep && fd != dirfd(d)) fds.push_back(fd);
      }
      closedir(d);
    }
    for (int fd : fds) close(fd);
  }

  // Whether socket inode `ino` belongs to one of the ranks (cached).
  bool OwnedByARank(unsigned long ino) {
    auto it = inode_ours_.find(ino);
    if (it != inode_ours_.end()) return it->second;
    char want[64];
    std::snprintf(want, sizeof want, "socket:[%lu]", ino);
    bool ours = false;
    for (pid_t pid : ranks_) {
      char path[64];
      std::snprintf(path, sizeof path, "/proc/%d/fd", static_cast<int>(pid));
      DIR *d = opendir(path);
      if (!d) continue;
      while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char link[128];
        std::string fdp = std::string(path) + "/" + e->d_name;
        ssize_t n = readlink(fdp.c_str(), link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = '\0';
        if (std::strcmp(link, want) == 0) {
          ours = true;
          break;
        }
      }
      closedir(d);
      if (ours) break;
    }
    // Final either way: a name appears in /proc/net/unix only after bind(),
    // when the socket is in its owner's fd table already.
    inode_ours_[ino] = ours;
    return ours;
  }

  void Scan() {
    std::set<std::string> live;
    if (FILE *f = std::fopen("/proc/net/unix", "re")) {
      char line[512];
      while (std::fgets(line, sizeof line, f)) {
        char path[256] = "";
        unsigned long flags = 0, ino = 0;
        if (std::sscanf(line, "%*s %*s %*s %lx %*s %*s %lu %255s", &flags, &ino, path) != 3) continue;
        if (!(flags & 0x10000) || std::strncmp(path, "@vmmipc-", 8) != 0) continue;
        if (!OwnedByARank(ino)) continue;  // never another job's, nor our own squats
        live.insert(path);
        if (!targets_.count(path)) {
          targets_[path] = Target{true, path, 0};
          sh_->targets++;
          Guess(path + 8);
        }
      }
      std::fclose(f);
    }
    if (!dir_.empty()) {
      if (DIR *d = opendir(dir_.c_str())) {
        while (dirent *e = readdir(d)) {
          if (std::strncmp(e->d_name, "vmmipc-", 7) != 0 || own_dirs_.count(e->d_name)) continue;
          std::string s = dir_ + "/" + e->d_name + "/s";
          struct stat st;
          if (lstat(s.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
          live.insert(s);
          if (!targets_.count(s)) {
            targets_[s] = Target{false, s, 0};
            sh_->targets++;
            Guess(e->d_name + 7);
          }
        }
        closedir(d);
      }
    }
    for (auto it = targets_.begin(); it != targets_.end();)  // listeners that are gone
      it = live.count(it->first) || it->second.held ? std::next(it) : targets_.erase(it);
  }

  // Names and directories around a rank's random part `hex`: the old
  // scheme's "<nonce>-<rank>", and near misses.
  void Guess(const std::string &hex) {
    for (int r = 0; r < 4; r++) Squat("vmmipc-" + hex + "-" + std::to_string(r));
    std::string near = hex;
    if (!near.empty()) near.back() = near.back() == '0' ? '1' : '0';
    Squat("vmmipc-" + near);
    MakeDir("vmmipc-" + near);
    MakeDir("vmmipc-" + hex + "-0");
    MakeDir("vmmipc-" + hex + "-1");
  }

  void Squat(const std::string &name) {
    if (sh_->nsquat >= kMaxSquats || name.size() + 1 >= sizeof(sockaddr_un::sun_path)) return;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    sockaddr_un sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path + 1, name.data(), name.size());
    socklen_t sl = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    if (bind(fd, reinterpret_cast<sockaddr *>(&sa), sl) != 0 || listen(fd, 1) != 0) {
      close(fd);
      return;
    }
    squat_fds_.push_back(fd);
    std::snprintf(sh_->squat[sh_->nsquat], sizeof sh_->squat[0], "%s", name.c_str());
    sh_->nsquat++;
    sh_->squats++;
  }

  void MakeDir(const std::string &name) {
    if (dir_.empty() || sh_->ndir >= kMaxDirs) return;
    std::string p = dir_ + "/" + name;
    if (mkdir(p.c_str(), 0700) != 0) return;
    own_dirs_.insert(name);
    std::snprintf(sh_->dir[sh_->ndir], sizeof sh_->dir[0], "%s", p.c_str());
    sh_->ndir++;
    sh_->dirs++;
  }

  void Flood(Target *t) {
    sockaddr_un sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, t->name.data(), t->name.size());
    if (t->abstract) sa.sun_path[0] = '\0';
    socklen_t sl = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + t->name.size() + (t->abstract ? 0 : 1));
    while (t->held < kPerTarget && static_cast<int>(held_.size()) < kMaxHeld && !g_term) {
      int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) return;
      if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sl) != 0) {
        if (errno == EAGAIN) sh_->backlog_full++;
        close(fd);
        return;  // full, or nobody listens any more
      }
      sh_->connects++;
      SendForgedHello(fd);
      held_.push_back(Held{fd, t->name});
      t->held++;
      if (static_cast<int>(held_.size()) > sh_->held_max) sh_->held_max = static_cast<int>(held_.size());
    }
  }

  // A well-formed HELLO claiming node rank 0, with an fd: it must never
  // reach a rank (the connection is refused by its credentials first).
  void SendForgedHello(int fd) {
    vmmipc__frame_t f;
    std::memset(&f, 0, sizeof f);
    f.kind = VMMIPC__KIND_HELLO;
    f.ctx = VMMIPC__CTX_COLL;
    f.receiver = 1;
    unsigned char h[VMMIPC__FRAME_HEADER_BYTES];
    vmmipc__frame_encode(&f, h);
    iovec iov = {h, sizeof h};
    msghdr m;
    std::memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    union {
      cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    if (forged_fd_ >= 0) {
      std::memset(&cm, 0, sizeof cm);
      m.msg_control = cm.buf;
      m.msg_controllen = sizeof cm.buf;
      cmsghdr *c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &forged_fd_, sizeof(int));
    }
    if (sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0) sh_->forged++;
  }

  // Drops the connections the ranks closed (refused, or reset when their
  // listener went away); waits up to `ms` for that.
  void Reap(int ms) {
    std::vector<pollfd> p(held_.size());
    for (size_t i = 0; i < held_.size(); i++) p[i] = {held_[i].fd, POLLIN, 0};
    if (p.empty()) {
      poll(nullptr, 0, ms);
      return;
    }
    if (poll(p.data(), p.size(), ms) <= 0) return;
    std::vector<Held> keep;
    keep.reserve(held_.size());
    for (size_t i = 0; i < held_.size(); i++) {
      if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {  // a rank never sends: this is the end
        close(held_[i].fd);
        auto it = targets_.find(held_[i].target);
        if (it != targets_.end()) it->second.held--;
        sh_->dropped++;
      } else {
        keep.push_back(held_[i]);
      }
    }
    held_.swap(keep);
  }

  Shared *sh_;
  std::set<pid_t> ranks_;
  std::string dir_;
  int forged_fd_ = -1;
  std::map<std::string, Target> targets_;
  std::vector<Held> held_;
  std::vector<int> squat_fds_;
  std::set<std::string> own_dirs_;
  std::map<unsigned long, bool> inode_ours_;
};

std::set<std::string> BoundUnixNames() {
  std::set<std::string> out;
  if (FILE *f = std::fopen("/proc/net/unix", "re")) {
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      char path[256] = "";
      if (std::sscanf(line, "%*s %*s %*s %*s %*s %*s %*s %255s", path) == 1) out.insert(path);
    }
    std::fclose(f);
  }
  return out;
}

int DirEntries(const char *d) {
  DIR *dp = opendir(d);
  if (!dp) return -1;
  int n = 0;
  while (dirent *e = readdir(dp))
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) n++;
  closedir(dp);
  return n;
}

// ---- the ranks' work ------------------------------------------------------------------

bool SameNode(vmmipc_comm_t c, int r) {
  int s = 0;
  vmmipc_comm_same_node(c, r, &s);
  return s != 0;
}

// Sizes differ per rank and round; small, so that filling and checking them
// stays cheap on 2 shared cores (the chunk counts come from the granularity:
// a size just over n granules has n + 1 chunks).
size_t SizeOf(int r, int round) { return static_cast<size_t>((r + round) % 2) * kGran + 65536u + 4096u * r; }

// Collectives with data checks; every call must succeed.
void Collectives(vmmipc_comm_t c, int rounds) {
  const int me = vt::Rank(), n = vt::Size();
  for (int round = 0; round < rounds; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    // allgather_map: every rank reads every node peer's buffer.
    {
      unsigned seed = 100u * static_cast<unsigned>(round) + 1;
      vmmipc_buf_t b = vt::PatternBuf(0, seed + static_cast<unsigned>(me), SizeOf(me, round));
      vmmipc_win_t w = nullptr;
      ASSERT_VMM_OK(vmmipc_allgather_map(c, b, nullptr, &w));
      for (int r = 0; r < n; r++) {
        void *p = nullptr;
        size_t sz = 0;
        ASSERT_VMM_OK(vmmipc_win_query(w, r, &p, &sz));
        if (!SameNode(c, r)) continue;
        EXPECT_EQ(sz, SizeOf(r, round)) << "rank " << r;
        EXPECT_TRUE(vt::CheckPattern(p, sz, seed + static_cast<unsigned>(r))) << "rank " << r;
      }
      ASSERT_VMM_OK(vmmipc_win_free(w));
      vmmipc_buf_free(b);
    }
    // bcast_map from a root that moves.
    {
      const int root = round % n;
      unsigned seed = 5000u + static_cast<unsigned>(round);
      vmmipc_buf_t b = me == root ? vt::PatternBuf(0, seed, kGran + 8192) : nullptr;
      vmmipc_buf_t out = nullptr;
      ASSERT_VMM_OK(vmmipc_bcast_map(c, b, root, nullptr, &out));
      if (me != root && SameNode(c, root)) {
        ASSERT_NE(out, nullptr);
        void *p = nullptr;
        size_t sz = 0;
        vmmipc_buf_ptr(out, &p, &sz);
        EXPECT_EQ(sz, kGran + 8192);
        EXPECT_TRUE(vt::CheckPattern(p, sz, seed));
      } else {
        EXPECT_EQ(out, nullptr);
      }
      if (out) vmmipc_buf_free(out);
      MPI_Barrier(MPI_COMM_WORLD);  // the root's buffer outlives every reader's mapping
      if (b) vmmipc_buf_free(b);
    }
    // scatter_map: each rank gets its own slice.
    {
      const int root = (round + 1) % n;
      std::vector<vmmipc_buf_t> bufs(static_cast<size_t>(n), nullptr);
      if (me == root)
        for (int r = 0; r < n; r++) bufs[r] = vt::PatternBuf(0, 7000u + 10u * static_cast<unsigned>(round) + r, 32768 + r);
      vmmipc_buf_t out = nullptr;
      ASSERT_VMM_OK(vmmipc_scatter_map(c, bufs.data(), root, nullptr, &out));
      if (me != root && SameNode(c, root)) {
        ASSERT_NE(out, nullptr);
        void *p = nullptr;
        size_t sz = 0;
        vmmipc_buf_ptr(out, &p, &sz);
        EXPECT_EQ(sz, 32768u + me);
        EXPECT_TRUE(vt::CheckPattern(p, sz, 7000u + 10u * static_cast<unsigned>(round) + me));
        vmmipc_buf_free(out);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      for (auto b : bufs)
        if (b) vmmipc_buf_free(b);
    }
    // allgather_desc: metadata, and one import per peer.
    {
      unsigned seed = 9000u + 10u * static_cast<unsigned>(round);
      int chunks = (me + round) % 3 + 1;
      vmmipc_buf_t b = vt::PatternBuf(0, seed + static_cast<unsigned>(me), (chunks - 1) * kGran + 4096);
      vmmipc_desc_t mine = nullptr;
      ASSERT_VMM_OK(vmmipc_export(b, &mine));
      std::vector<vmmipc_desc_t> all(static_cast<size_t>(n), nullptr);
      ASSERT_VMM_OK(vmmipc_allgather_desc(c, mine, all.data()));
      for (int r = 0; r < n; r++) {
        if (!SameNode(c, r)) continue;
        ASSERT_NE(all[r], nullptr) << "rank " << r;
        int nc = 0;
        size_t sz = 0;
        vmmipc_desc_info(all[r], &sz, &nc, nullptr);
        EXPECT_EQ(nc, (r + round) % 3 + 1) << "rank " << r;
        EXPECT_EQ(sz, static_cast<size_t>(nc - 1) * kGran + 4096) << "rank " << r;
        vmmipc_buf_t imp = nullptr;
        ASSERT_VMM_OK(vmmipc_import(all[r], nullptr, &imp));
        void *p = nullptr;
        vmmipc_buf_ptr(imp, &p, &sz);
        EXPECT_TRUE(vt::CheckPattern(p, sz, seed + static_cast<unsigned>(r))) << "rank " << r;
        vmmipc_buf_free(imp);
      }
      for (auto d : all)
        if (d) vmmipc_desc_free(d);
      vmmipc_desc_free(mine);
      MPI_Barrier(MPI_COMM_WORLD);
      vmmipc_buf_free(b);
    }
  }
}

long long SumOverRanks(long long v) {
  long long s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GE(vt::UseRankDevice(), 0); }
};

TEST_F(Hostile, SquattersAndFloodersCannotStopAJob) {
  const int me = vt::Rank(), n = vt::Size();
  // A rank alone on its node opens no socket: nothing to attack there.
  int node_n = 0;
  for (int r = 0; r < n; r++) node_n += vt::LayoutNode(r) == vt::LayoutNode(me);
  const bool listens = node_n > 1;
  const long long listeners = SumOverRanks(listens ? 1 : 0);
  if (n > 1 && listeners == 0) GTEST_SKIP() << "every node has one rank: no rank opens a socket to attack";
  // The socket_dir of filesystem mode, shared by the ranks and the flooder.
  char dir[sizeof g_sock_dir] = {};
  if (me == 0) {
    std::snprintf(dir, sizeof dir, "/tmp/vmmipc-hostile-XXXXXX");
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  ASSERT_NE(dir[0], '\0');
  std::snprintf(g_sock_dir, sizeof g_sock_dir, "%s", dir);
  int pid = static_cast<int>(getpid());
  std::vector<int> pids(static_cast<size_t>(n));
  MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);

  Shared *sh = nullptr;
  pid_t flooder = -1;
  if (me == 0) {
    int shm = memfd_create("vmmipc-hostile-shared", MFD_CLOEXEC);
    ASSERT_GE(shm, 0) << std::strerror(errno);
    ASSERT_EQ(ftruncate(shm, sizeof(Shared)), 0) << std::strerror(errno);
    void *mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
    ASSERT_NE(mem, MAP_FAILED);
    sh = new (mem) Shared();
    int ready[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    // Everything the child needs is made here: between fork and exec it
    // calls only async-signal-safe functions.
    std::string spec = std::string(kFlooderEnv) + "=" + std::to_string(ready[1]) + ":" + std::to_string(shm) + ":";
    for (int r = 0; r < n; r++) spec += (r ? "," : "") + std::to_string(pids[static_cast<size_t>(r)]);
    spec += std::string(":") + dir;
    std::vector<char *> envp;
    for (char **e = environ; *e; e++) envp.push_back(*e);
    envp.push_back(&spec[0]);
    envp.push_back(nullptr);
    char name[] = "test_hostile-flooder";
    char *argv[] = {name, nullptr};
    std::fflush(nullptr);
    flooder = fork();
    ASSERT_GE(flooder, 0);
    if (flooder == 0) {  // the same program, fresh: see RunFlooderIfAsked
      fcntl(ready[1], F_SETFD, 0);
      fcntl(shm, F_SETFD, 0);
      execve("/proc/self/exe", argv, envp.data());
      _exit(127);
    }
    close(shm);
    close(ready[1]);
    char c = 0;
    pollfd p = {ready[0], POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 20000), 1) << "the flooder did not start";
    ASSERT_EQ(read(ready[0], &c, 1), 1) << "the flooder did not start";
    close(ready[0]);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the flooder runs from here on

  long long refused_total = 0;
  const int creates = 3, rounds = 4;
  for (int ns : {VMMIPC_SOCKET_ABSTRACT, VMMIPC_SOCKET_FILESYSTEM}) {
    SCOPED_TRACE(ns == VMMIPC_SOCKET_ABSTRACT ? "abstract sockets" : "filesystem sockets");
    for (int k = 0; k < creates; k++) {
      SCOPED_TRACE("comm " + std::to_string(k));
      vt::Baseline base;
      vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
      cfg.socket_namespace = ns;
      cfg.socket_dir = dir;
      cfg.timeout_ms = 30000;
      vmmipc_comm_t c = nullptr;
      const int hits0 = g_hold_hits, misses0 = g_hold_misses;
      g_hold = 1;
      vmmipc_result_t rc = vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c);
      g_hold = 0;
      ASSERT_EQ(rc, VMMIPC_SUCCESS) << vmmipc_last_error();
      EXPECT_EQ(g_hold_hits - hits0, listens ? 1 : 0) << "the flood reached this rank's listener before its "
                                                          "name was published";
      EXPECT_EQ(g_hold_misses - misses0, 0) << "the flooder never connected to this rank's listener in 20 s";
      if (ns == VMMIPC_SOCKET_FILESYSTEM && me == 0) {
        // Every rank's private directory is gone; the squatter's remain.
        DIR *d = opendir(dir);
        ASSERT_NE(d, nullptr);
        while (dirent *e = readdir(d)) {
          if (e->d_name[0] == '.') continue;
          struct stat st;
          std::string s = std::string(dir) + "/" + e->d_name + "/s";
          EXPECT_NE(lstat(s.c_str(), &st), 0) << s << " is left after comm_create";
        }
        closedir(d);
      }
      Collectives(c, rounds);
      vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
      ASSERT_VMM_OK(vmmipc_comm_stats(c, &st));
      if (listens) {
        EXPECT_GE(st.refused, 1u) << "the foreign connection that was pending is not counted";
      }
      EXPECT_EQ(st.stale_frames, 0u);
      EXPECT_EQ(st.stale_fds, 0u);
      EXPECT_EQ(st.broken, 0);
      refused_total += static_cast<long long>(st.refused);
      ASSERT_VMM_OK(vmmipc_comm_destroy(c));
      base.Expect("comm_create, collectives and destroy under attack");
    }
  }
  refused_total = SumOverRanks(refused_total);

  if (me == 0) {
    // Stop the flooder; it removes its directories; its names die with it.
    ASSERT_EQ(kill(flooder, SIGTERM), 0);
    int status = 0;
    pid_t w;
    do w = waitpid(flooder, &status, 0);
    while (w < 0 && errno == EINTR);
    ASSERT_EQ(w, flooder);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "flooder status " << status;
    std::fprintf(stderr,
                 "[rank 0] flooder: %ld scans, %ld listeners, %ld connections (%ld dropped by the ranks, %d held at "
                 "most), %ld full backlogs, %ld forged HELLOs with an fd, %ld names squatted, %ld directories; "
                 "refused by the ranks: %lld\n",
                 sh->scans.load(), sh->targets.load(), sh->connects.load(), sh->dropped.load(), sh->held_max.load(),
                 sh->backlog_full.load(), sh->forged.load(), sh->squats.load(), sh->dirs.load(), refused_total);
    EXPECT_GE(sh->targets.load(), 2L * creates * listeners) << "listeners the flooder saw";
    EXPECT_GE(sh->connects.load(), 2L * creates * listeners);
    EXPECT_GE(refused_total, 2LL * creates * listeners) << "every rank refused the pending connection, every time";
    EXPECT_LE(refused_total, sh->connects.load()) << "more refusals than foreign connections";
    EXPECT_GT(sh->squats.load(), 2L) << "names squatted";
    EXPECT_GT(sh->dirs.load(), 1L) << "directories made in socket_dir";
    std::set<std::string> bound = BoundUnixNames();
    for (int i = 0; i < sh->nsquat; i++)
      EXPECT_EQ(bound.count(std::string("@") + sh->squat[i]), 0u) << sh->squat[i] << " outlived the squatter";
    EXPECT_EQ(DirEntries(dir), 0) << "the squatter's directories are left in " << dir;
    EXPECT_EQ(rmdir(dir), 0) << dir << ": " << std::strerror(errno);
    sh->~Shared();
    munmap(sh, sizeof(Shared));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The flooder's process: rank 0 runs this program again with kFlooderEnv
// set, and it floods from here, before main and MPI. A forked copy of a
// rank would run on in a process whose other threads (MPI's, the
// sanitizer's) may have held a lock at the fork, held for good in the copy:
// an ASan run once saw the flooder stop after the first comm.
int RunFlooderIfAsked() {
  const char *spec = std::getenv(kFlooderEnv);
  if (!spec) return 0;
  int ready = -1, shm = -1, used = 0;
  if (std::sscanf(spec, "%d:%d:%n", &ready, &shm, &used) != 2 || used == 0) _exit(3);
  std::vector<pid_t> ranks;
  const char *p = spec + used;
  while (*p && *p != ':') {
    char *end = nullptr;
    ranks.push_back(static_cast<pid_t>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
  }
  if (*p != ':' || ranks.empty()) _exit(3);
  void *mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
  if (mem == MAP_FAILED) _exit(4);
  close(shm);
  Flooder f(static_cast<Shared *>(mem), ranks, p + 1);
  _exit(f.Run(ready));
}
[[maybe_unused]] const int kFlooderRan = RunFlooderIfAsked();

}  // namespace
