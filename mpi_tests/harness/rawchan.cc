// RawChannel: rank 1 listens on an abstract socket whose random name rank 0
// learns through MPI_Bcast; rank 0 connects.
#include "harness/rawchan.h"

#include <mpi.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

namespace vt {
namespace {

socklen_t MakeAddr(sockaddr_un *a, const unsigned char nonce[8]) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  char name[64];
  int n = std::snprintf(name, sizeof name, "vmmipc-test-raw-%02x%02x%02x%02x%02x%02x%02x%02x", nonce[0], nonce[1],
                        nonce[2], nonce[3], nonce[4], nonce[5], nonce[6], nonce[7]);
  std::memcpy(a->sun_path + 1, name, n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

void SetTimeouts(int fd) {
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

RawChannel::RawChannel() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  unsigned char nonce[8] = {0};
  if (rank == 1 && getrandom(nonce, sizeof nonce, 0) != sizeof nonce) nonce[0] = 1;
  MPI_Bcast(nonce, sizeof nonce, MPI_BYTE, 1, MPI_COMM_WORLD);
  sockaddr_un addr;
  socklen_t len = MakeAddr(&addr, nonce);
  int lfd = -1;
  if (rank == 1) {
    lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (bind(lfd, reinterpret_cast<sockaddr *>(&addr), len) != 0 || listen(lfd, 1) != 0) {
      close(lfd);
      lfd = -1;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // bound before rank 0 connects
  if (rank == 0) {
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (connect(fd_, reinterpret_cast<sockaddr *>(&addr), len) != 0) {
      close(fd_);
      fd_ = -1;
    }
  } else if (rank == 1 && lfd >= 0) {
    SetTimeouts(lfd);
    fd_ = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    close(lfd);
  }
  if (fd_ >= 0) SetTimeouts(fd_);
}

RawChannel::~RawChannel() {
  if (fd_ >= 0) close(fd_);
}

bool RawChannel::Send(const std::vector<unsigned char> &bytes, const std::vector<int> &fds) {
  // First a message with the sizes, then the bytes with the fds attached.
  unsigned long long hdr[2] = {bytes.size(), fds.size()};
  if (send(fd_, hdr, sizeof hdr, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hdr)) return false;
  iovec iov{const_cast<unsigned char *>(bytes.data()), bytes.size()};
  unsigned char dummy = 0;
  if (bytes.empty()) iov = {&dummy, 1};
  std::vector<char> ctl(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (!fds.empty()) {
    m.msg_control = ctl.data();
    m.msg_controllen = ctl.size();
    cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return sendmsg(fd_, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(iov.iov_len);
}

bool RawChannel::Recv(std::vector<unsigned char> *bytes, std::vector<int> *fds) {
  unsigned long long hdr[2];
  if (recv(fd_, hdr, sizeof hdr, 0) != static_cast<ssize_t>(sizeof hdr)) return false;
  bytes->assign(hdr[0] ? hdr[0] : 1, 0);
  std::vector<char> ctl(CMSG_SPACE(sizeof(int) * (hdr[1] ? hdr[1] : 1)));
  iovec iov{bytes->data(), bytes->size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl.data();
  m.msg_controllen = ctl.size();
  ssize_t n = recvmsg(fd_, &m, MSG_CMSG_CLOEXEC);
  fds->clear();
  for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const int *p = reinterpret_cast<const int *>(CMSG_DATA(c));
      fds->insert(fds->end(), p, p + k);
    }
  if (hdr[0] == 0) bytes->clear();
  return n >= 0 && !(m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) && fds->size() == hdr[1];
}

}  // namespace vt
