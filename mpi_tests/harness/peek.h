// A look at what waits unread on a socket, for the suites that check that a
// failed call leaves no peer's descriptors queued (test_faults) and for
// test_chaos --verbose. Each fd that comes with a queued message holds the
// sender's device memory for as long as it is queued.
#ifndef VMMIPC_TEST_PEEK_H
#define VMMIPC_TEST_PEEK_H

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vt {

struct Peeked {
  bool queued = false;  // a message waits
  int fds = 0;          // the fds it carries
  bool cut = false;     // more fds than the peek had room for
  int error = 0;        // the errno of a failed peek (EAGAIN: nothing queued)
};

// A peek at the first message queued on `fd`. The peek installs copies of
// the fds it carries, which are closed here; it also takes the socket's
// pending error (a peer's reset) as a read would, so the caller's next read
// may find an end of file instead.
inline Peeked PeekFirst(int fd) {
  constexpr int kMaxFds = 253;  // the most a frame carries (VMMIPC__FRAME_MAX_FDS, src/transport/codec.h)
  Peeked p;
  char byte = 0;
  iovec io{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(kMaxFds * sizeof(int))];
  msghdr mh{};
  mh.msg_iov = &io;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl;
  mh.msg_controllen = sizeof ctl;
  ssize_t n = recvmsg(fd, &mh, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    p.error = errno;
    return p;
  }
  if (n == 0) return p;  // an end of file (a hang-up, or this side shut): no message
  p.queued = true;
  p.cut = (mh.msg_flags & MSG_CTRUNC) != 0;
  for (cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++, p.fds++) {
      int x = -1;
      std::memcpy(&x, CMSG_DATA(h) + i * sizeof(int), sizeof x);
      close(x);
    }
  }
  return p;
}

}  // namespace vt

#endif
