/* Unix-socket mesh with SCM_RIGHTS. */
#include "common/fdmesh.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FDMESH_BATCH 250 /* below SCM_MAX_FD (253) */
#define FDMESH_HDR_MAX 256

/* Abstract-namespace address "\0vmmipc-bench-<nonce>-<rank>". */
static socklen_t fdmesh_addr(struct sockaddr_un *a, unsigned long long nonce, int rank) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int len = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "vmmipc-bench-%llx-%d", nonce, rank);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

static int fdmesh_write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

int bench_fdmesh_create(MPI_Comm comm, bench_fdmesh_t *m, char *err, size_t errlen) {
  err[0] = '\0';
  MPI_Comm_rank(comm, &m->rank);
  MPI_Comm_size(comm, &m->size);
  m->sock = malloc((size_t)m->size * sizeof *m->sock);
  int ok = m->sock != NULL, all;
  for (int i = 0; ok && i < m->size; i++) m->sock[i] = -1;
  unsigned long long nonce = ((unsigned long long)getpid() << 20) ^ (unsigned long long)(uintptr_t)m ^
                             (unsigned long long)time(NULL);
  MPI_Bcast(&nonce, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);

  struct sockaddr_un addr;
  int lsn = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (lsn < 0 || bind(lsn, (struct sockaddr *)&addr, fdmesh_addr(&addr, nonce, m->rank)) != 0 ||
      listen(lsn, m->size) != 0) {
    snprintf(err, errlen, "fd mesh: listening socket: %s", strerror(errno));
    ok = 0;
  }
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
  if (!all) goto fail;
  /* Connect to every higher rank (the backlog holds them), then accept the
   * lower ones; each connector names itself with its rank. */
  for (int p = m->rank + 1; ok && p < m->size; p++) {
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&addr, fdmesh_addr(&addr, nonce, p)) != 0 ||
        fdmesh_write_all(s, &m->rank, sizeof m->rank) != 0) {
      snprintf(err, errlen, "fd mesh: connecting to rank %d: %s", p, strerror(errno));
      if (s >= 0) close(s);
      ok = 0;
      break;
    }
    m->sock[p] = s;
  }
  for (int k = 0; ok && k < m->rank; k++) {
    int s = accept4(lsn, NULL, NULL, SOCK_CLOEXEC), who = -1;
    if (s < 0 || recv(s, &who, sizeof who, 0) != (ssize_t)sizeof who || who < 0 || who >= m->rank ||
        m->sock[who] >= 0) {
      snprintf(err, errlen, "fd mesh: accepting a lower rank: %s", s < 0 ? strerror(errno) : "bad hello");
      if (s >= 0) close(s);
      ok = 0;
      break;
    }
    m->sock[who] = s;
  }
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
  if (!all) goto fail;
  close(lsn);
  return 0;
fail:
  /* Only the failing rank has a message: bench_agree_skip spreads it. */
  if (lsn >= 0) close(lsn);
  bench_fdmesh_destroy(m);
  return -1;
}

void bench_fdmesh_destroy(bench_fdmesh_t *m) {
  for (int i = 0; m->sock && i < m->size; i++)
    if (m->sock[i] >= 0) close(m->sock[i]);
  free(m->sock);
  m->sock = NULL;
}

/* One message: [uint32 count][header on the first message] + up to
 * FDMESH_BATCH descriptors. */
int bench_fdmesh_send(const bench_fdmesh_t *m, int peer, const void *hdr, size_t hdrlen, const int *fds,
                      int nfds) {
  if (hdrlen > FDMESH_HDR_MAX) {
    errno = EINVAL;
    return -1;
  }
  int sent = 0;
  do {
    int n = nfds - sent < FDMESH_BATCH ? nfds - sent : FDMESH_BATCH;
    unsigned char payload[4 + FDMESH_HDR_MAX];
    uint32_t cnt = (uint32_t)n;
    memcpy(payload, &cnt, 4);
    size_t plen = 4;
    if (sent == 0 && hdrlen) {
      memcpy(payload + 4, hdr, hdrlen);
      plen += hdrlen;
    }
    struct iovec iov = {payload, plen};
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int) * FDMESH_BATCH)];
    } ctl;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (n > 0) {
      msg.msg_control = ctl.buf;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
      struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
      memcpy(CMSG_DATA(c), fds + sent, sizeof(int) * (size_t)n);
    }
    ssize_t k;
    do k = sendmsg(m->sock[peer], &msg, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k != (ssize_t)plen) return -1;
    sent += n;
  } while (sent < nfds);
  return 0;
}

int bench_fdmesh_recv(const bench_fdmesh_t *m, int peer, void *hdr, size_t hdrlen, int *fds, int nfds) {
  if (hdrlen > FDMESH_HDR_MAX) {
    errno = EINVAL;
    return -1;
  }
  int got = 0, first = 1;
  while (first || got < nfds) {
    unsigned char payload[4 + FDMESH_HDR_MAX];
    size_t want = 4 + (first ? hdrlen : 0);
    struct iovec iov = {payload, want};
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int) * FDMESH_BATCH)];
    } ctl;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t k;
    do k = recvmsg(m->sock[peer], &msg, MSG_CMSG_CLOEXEC);
    while (k < 0 && errno == EINTR);
    if (k != (ssize_t)want || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
      if (k >= 0) errno = EPROTO;
      return -1;
    }
    uint32_t cnt;
    memcpy(&cnt, payload, 4);
    int n = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int k2 = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      if (got + n + k2 > nfds) {
        errno = EPROTO;
        return -1;
      }
      memcpy(fds + got + n, CMSG_DATA(c), sizeof(int) * (size_t)k2);
      n += k2;
    }
    if ((uint32_t)n != cnt) {
      errno = EPROTO;
      return -1;
    }
    if (first && hdrlen) memcpy(hdr, payload + 4, hdrlen);
    first = 0;
    got += n;
  }
  return 0;
}
