// What a rank holds, counted: open fds (less those the export caches hold,
// which vmmipc documents and counts), and the driver objects the stand-in
// counts (allocations, mappings, reservations). Steps compare these with
// what the objects they made or freed account for.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

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

}  // namespace chaos
