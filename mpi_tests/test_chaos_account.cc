// What a rank holds, counted: open fds (less those the export caches hold,
// which vmmipc documents and counts), and the driver objects the stand-in
// counts (allocations, mappings, reservations). Steps compare these with
// what the objects they made or freed account for.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness/peek.h"
#include "test_chaos.h"

namespace chaos {

Counts Counts::operator-(const Counts &o) const {
  return {fds - o.fds, allocations - o.allocations, mappings - o.mappings, reservations - o.reservations,
          sockets - o.sockets};
}
Counts Counts::operator+(const Counts &o) const {
  return {fds + o.fds, allocations + o.allocations, mappings + o.mappings, reservations + o.reservations,
          sockets + o.sockets};
}
bool Counts::operator==(const Counts &o) const {
  return fds == o.fds && allocations == o.allocations && mappings == o.mappings && reservations == o.reservations;
}
std::string Counts::Str() const {
  return "fds " + std::to_string(fds) + " (and sockets " + std::to_string(sockets) + "), allocations " + std::to_string(allocations) + ", mappings " +
         std::to_string(mappings) + ", reservations " + std::to_string(reservations);
}

std::vector<int> OpenFds() {
  std::vector<int> v;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return v;
  int own = dirfd(d);
  while (struct dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    int fd = std::atoi(e->d_name);
    if (fd != own) v.push_back(fd);
  }
  closedir(d);
  std::sort(v.begin(), v.end());
  return v;
}

int FdCount() { return static_cast<int>(OpenFds().size()); }

Counts TakeCounts() {
  Counts c;
  long cached = 0;
  vmmipc_export_cache_fds(&cached);
  for (int fd : OpenFds()) {
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISSOCK(sb.st_mode)) c.sockets++;
    else c.fds++;
  }
  c.fds -= cached;
  if (Standin()) {
    // The stand-in's own counters are not a driver entry point.
    static void *lib = [] {
      const char *p = std::getenv("VMMIPC_CUDA_DRIVER");
      return p ? dlopen(p, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD) : nullptr;
    }();
    using Fn = void (*)(long *, long *, long *);
    Fn fn = lib ? reinterpret_cast<Fn>(dlsym(lib, "vmmipc_standin_counts")) : nullptr;
    if (fn) fn(&c.allocations, &c.mappings, &c.reservations);
  }
  return c;
}

std::vector<int> NewSockets(const std::vector<int> &before, const std::vector<int> &after,
                            const std::vector<int> &pids) {
  std::vector<int> out;
  for (int fd : after) {
    if (std::binary_search(before.begin(), before.end(), fd)) continue;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode)) continue;
    int domain = 0;
    socklen_t len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) continue;
    struct ucred cr;
    len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) continue;
    if (std::find(pids.begin(), pids.end(), static_cast<int>(cr.pid)) != pids.end()) out.push_back(fd);
  }
  return out;
}

std::vector<unsigned long> SocketInodes(const std::vector<int> &fds) {
  std::vector<unsigned long> out;
  for (int fd : fds) {
    struct stat sb;
    out.push_back(fstat(fd, &sb) == 0 ? static_cast<unsigned long>(sb.st_ino) : 0);
  }
  return out;
}

// What a peer sent there (descriptors, with their fds) stays until the
// comm's next collective or its destroy: on a GPU the memory behind those
// fds stays in use (docs/dev/chaos.md, "Without MPS on the H200"). The peek
// can turn a later "hung up" into an end of file (harness/peek.h): a
// --verbose run only.
void PrintUnread(const Local &L, int me, int step) {
  for (int k = 0; k < kSlots; k++) {
    const LocalComm &lc = L.comm[k];
    for (size_t j = 0; j < lc.sockets.size() && j < lc.socket_inos.size(); j++) {
      const int fd = lc.sockets[j];
      struct stat sb;
      int n = 0;
      if (fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode) || sb.st_ino != lc.socket_inos[j]) continue;
      if (ioctl(fd, FIONREAD, &n) != 0 || n <= 0) continue;
      vt::Peeked p = vt::PeekFirst(fd);
      std::fprintf(stderr,
                   "chaos:   rank %d: after step %d, %d bytes unread in a socket of comm %d (fd %d), the first "
                   "message with %d fd(s)%s\n",
                   me, step, n, k, fd, p.fds,
                   p.cut                     ? " (or more: the control data was cut)"
                   : p.error == ECONNRESET   ? " (the peek found a reset)"
                   : !p.queued               ? " (the peek failed)"
                                             : "");
    }
  }
}

}  // namespace chaos
