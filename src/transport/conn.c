/* Connection manager: names, the listener, credentials, the mesh, raw I/O
 * (conn.h). */
#include "transport/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/le.h"
#include "common/random.h"
#include "common/testhooks.h"
#include "transport/codec.h"

#define CONN_BACKLOG 512
/* Longest single poll() while waiting: liveness is checked this often. */
#define CONN_SLICE_MS 100
/* Retry interval when poll() cannot tell (a full backlog on connect). */
#define CONN_RETRY_MS 1
/* Accepts per round, so that a flood cannot keep one round going forever. */
#define CONN_ACCEPT_BATCH 4096

static const char k_fd_hint[] = "this process is out of file descriptors: raise the open-file limit (ulimit -n)";

vmmipc_result_t vmmipc__os_error(vmmipc_result_t rc, int err, const char *hint, const char *fmt, ...) {
  char head[VMMIPC__ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  rc = vmmipc__errno_result(rc, err);
  vmmipc__error(rc, "%s: %s (%s)%s%s", head, vmmipc__errno_name(err), strerror(err), hint ? "; hint: " : "",
                hint ? hint : "");
  vmmipc__error_os(err);
  return rc;
}

int vmmipc__conn_rank(const vmmipc__conn_t *c, int p) {
  return (c && p >= 0 && p < c->node_size) ? c->ranks[p] : p;
}

pid_t vmmipc__conn_pid(const vmmipc__conn_t *c, int p) {
  return (c && p >= 0 && p < c->node_size) ? c->pids[p] : 0;
}

int vmmipc__pid_gone(pid_t pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  /* kill() succeeds on a zombie: read the state after the last ')' of
   * /proc/<pid>/stat. */
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH;
  ssize_t n;
  do n = read(fd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return n == 0; /* an empty stat: the process is being torn down */
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  if (!rp || rp[1] != ' ') return 0;
  return rp[2] == 'Z' || rp[2] == 'X' || rp[2] == 'x';
}

static void close_keep_errno(int fd) {
  int saved = errno;
  if (fd >= 0) close(fd);
  errno = saved;
}

/* ---- addresses ------------------------------------------------------------ */

/* Published form: [0] namespace, [1..2] sun_path length, then sun_path. */
static void addr_pack(int ns, const struct sockaddr_un *sa, size_t path_len, unsigned char out[VMMIPC__ADDR_BYTES]) {
  memset(out, 0, VMMIPC__ADDR_BYTES);
  out[0] = (unsigned char)ns;
  vmmipc__put16(out + 1, (uint16_t)path_len);
  memcpy(out + 3, sa->sun_path, path_len);
}

/* Checks a published address against this rank's namespace; -1 if bad. */
static int addr_unpack(int ns, const unsigned char in[VMMIPC__ADDR_BYTES], struct sockaddr_un *sa, socklen_t *len) {
  size_t n = vmmipc__get16(in + 1);
  if (in[0] != (unsigned char)ns || n < 2 || n > sizeof sa->sun_path || n > VMMIPC__ADDR_BYTES - 3) return -1;
  if (ns == VMMIPC_SOCKET_ABSTRACT && in[3] != '\0') return -1;
  if (ns == VMMIPC_SOCKET_FILESYSTEM && (in[3] != '/' || memchr(in + 3, '\0', n) != NULL)) return -1;
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  memcpy(sa->sun_path, in + 3, n);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (ns == VMMIPC_SOCKET_FILESYSTEM ? 1 : 0));
  return 0;
}

void vmmipc__conn_addr_text(const unsigned char addr[VMMIPC__ADDR_BYTES], char *buf, size_t cap) {
  size_t n = vmmipc__get16(addr + 1);
  if (n > VMMIPC__ADDR_BYTES - 3) n = VMMIPC__ADDR_BYTES - 3;
  if (n && addr[3] == '\0')
    snprintf(buf, cap, "@%.*s", (int)(n - 1), (const char *)addr + 4);
  else
    snprintf(buf, cap, "%.*s", (int)n, (const char *)addr + 3);
}

/* ---- open / close ---------------------------------------------------------- */

/* *out is written on every path (-1 on failure): callers test the result,
 * which the compiler cannot prove nonzero on the error path. */
static vmmipc_result_t new_socket(int *out) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  *out = fd;
  if (fd < 0) {
    int e = errno;
    return vmmipc__os_error(VMMIPC_ERR_SYSTEM, e,
                            (e == EMFILE || e == ENFILE) ? k_fd_hint
                            : (e == EAFNOSUPPORT || e == EPROTONOSUPPORT || e == ESOCKTNOSUPPORT)
                                ? "the kernel must support AF_UNIX SOCK_SEQPACKET sockets"
                                : NULL,
                            "socket(AF_UNIX, SOCK_SEQPACKET)");
  }
  return VMMIPC_SUCCESS;
}

static void hex(const unsigned char *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Filesystem mode: a private directory with a random name, mode exactly
 * 0700 (fixed through the open directory, never by path), owned by us. */
static vmmipc_result_t make_private_dir(vmmipc__conn_t *c, const char *parent, int R) {
  size_t n = strlen(parent);
  while (n > 1 && parent[n - 1] == '/') n--;
  if (n == 1 && parent[0] == '/') n = 0;
  /* parent + "/vmmipc-" + 32 hex + "/s" must fit in sun_path with its NUL. */
  struct sockaddr_un sa;
  size_t need = n + 8 + 32 + 2;
  if (need >= sizeof sa.sun_path)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "opening the transport of rank %d: a socket path under %.*s is %zu bytes long, but a Unix "
                         "socket path holds at most %zu; hint: choose a shorter socket_dir (vmmipc_config_t.socket_dir "
                         "or VMMIPC_SOCKET_DIR), or the abstract namespace",
                         R, (int)n, parent, need, sizeof sa.sun_path - 1);
  c->dir_path = malloc(need + 1);
  c->sock_path = malloc(need + 1);
  if (!c->dir_path || !c->sock_path) {
    free(c->dir_path); /* close_listener must not remove paths never written */
    free(c->sock_path);
    c->dir_path = c->sock_path = NULL;
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport of rank %d", R);
  }
  for (int attempt = 0;; attempt++) {
    unsigned char rnd[16];
    char h[33];
    vmmipc_result_t r = vmmipc__random(rnd, sizeof rnd, "naming the socket directory");
    if (r) {
      free(c->dir_path); /* nothing was made (or a squatter's name is in it): close_listener must remove nothing */
      free(c->sock_path);
      c->dir_path = c->sock_path = NULL;
      return r;
    }
    hex(rnd, sizeof rnd, h);
    snprintf(c->dir_path, need + 1, "%.*s/vmmipc-%s", (int)n, parent, h);
    if (mkdir(c->dir_path, 0700) == 0) break;
    int e = errno;
    if (e == EEXIST && attempt < 3) continue; /* 128 random bits: only a squatter gets here */
    const char *hint = NULL;
    if (e == ENOENT || e == ENOTDIR)
      hint = "socket_dir must be an existing directory (vmmipc_config_t.socket_dir or VMMIPC_SOCKET_DIR)";
    else if (e == EACCES || e == EPERM || e == EROFS)
      hint = "socket_dir must be writable by this user: choose another one";
    vmmipc_result_t rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, e, hint,
                                          "opening the transport of rank %d: mkdir(%s, 0700)", R, c->dir_path);
    free(c->dir_path); /* nothing was made: close_listener must remove nothing */
    free(c->sock_path);
    c->dir_path = c->sock_path = NULL;
    return rc;
  }
  snprintf(c->sock_path, need + 1, "%s/s", c->dir_path);
  int dfd = open(c->dir_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: open(%s)", R,
                            c->dir_path);
  struct stat st;
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  if (fstat(dfd, &st) != 0)
    rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: fstat(%s)", R,
                          c->dir_path);
  else if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
    rc = vmmipc__error(VMMIPC_ERR_SYSTEM,
                       "opening the transport of rank %d: %s is not a directory of uid %u right after mkdir; hint: "
                       "another process is tampering with socket_dir: use a private one",
                       R, c->dir_path, (unsigned)geteuid());
  else if ((st.st_mode & 07777) != 0700 && fchmod(dfd, 0700) != 0) /* the umask may have narrowed it */
    rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: fchmod(%s, 0700)", R,
                          c->dir_path);
  close(dfd);
  return rc;
}

vmmipc_result_t vmmipc__conn_open(const vmmipc__conn_opts_t *o, vmmipc__conn_t **out) {
  *out = NULL;
  if (o->node_size < 1 || o->node_rank < 0 || o->node_rank >= o->node_size || !o->ranks)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "opening the transport: node rank %d of %d", o->node_rank,
                         o->node_size);
  if (o->socket_namespace != VMMIPC_SOCKET_ABSTRACT && o->socket_namespace != VMMIPC_SOCKET_FILESYSTEM)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "opening the transport: socket namespace %d", o->socket_namespace);
  if (o->socket_namespace == VMMIPC_SOCKET_FILESYSTEM && (!o->socket_dir || !o->socket_dir[0]))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "opening the transport: filesystem sockets need a socket_dir");
  vmmipc__conn_t *c = calloc(1, sizeof *c);
  if (!c) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport");
  size_t n = (size_t)o->node_size;
  c->node_rank = o->node_rank;
  c->node_size = o->node_size;
  c->ns = o->socket_namespace;
  c->comm_id = o->comm_id;
  c->owner = getpid();
  c->listen_fd = -1;
  c->ranks = malloc(n * sizeof *c->ranks);
  c->pids = calloc(n, sizeof *c->pids);
  c->uids = calloc(n, sizeof *c->uids);
  for (int k = 0; k < 2; k++) { /* no socket yet: the failure path below closes only what is >= 0 */
    c->fd[k] = malloc(n * sizeof(int));
    for (size_t i = 0; c->fd[k] && i < n; i++) c->fd[k][i] = -1;
  }
  c->closed = calloc(n, sizeof *c->closed);
  if (VMMIPC__INJECT("conn_tables")) { /* tests: no host memory for the last table */
    free(c->closed);
    c->closed = NULL;
  }
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  if (!c->ranks || !c->pids || !c->uids || !c->fd[0] || !c->fd[1] || !c->closed) {
    rc = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport: tables for %d ranks", o->node_size);
    goto fail;
  }
  memcpy(c->ranks, o->ranks, n * sizeof *c->ranks);
  if (o->node_size == 1) { /* nobody to talk to: no socket at all */
    *out = c;
    return VMMIPC_SUCCESS;
  }
  int R = c->ranks[c->node_rank];
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t path_len;
  if (c->ns == VMMIPC_SOCKET_FILESYSTEM) {
    if ((rc = make_private_dir(c, o->socket_dir, R))) goto fail;
    path_len = strlen(c->sock_path);
    memcpy(sa.sun_path, c->sock_path, path_len + 1);
  } else {
    /* A fresh 128-bit random name per rank, published only after the bind:
     * nobody can bind it first. */
    unsigned char rnd[16];
    char h[33];
    if ((rc = vmmipc__random(rnd, sizeof rnd, "naming the socket"))) goto fail;
    hex(rnd, sizeof rnd, h);
    path_len = 1 + (size_t)snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "vmmipc-%s", h);
  }
  if ((rc = new_socket(&c->listen_fd))) {
    vmmipc__error_prefix("opening the transport of rank %d: ", R);
    goto fail;
  }
  socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + path_len +
                             (c->ns == VMMIPC_SOCKET_FILESYSTEM ? 1 : 0));
  addr_pack(c->ns, &sa, path_len, c->addr);
  char text[160];
  vmmipc__conn_addr_text(c->addr, text, sizeof text);
  if (bind(c->listen_fd, (const struct sockaddr *)&sa, sl) != 0) {
    rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: bind(%s)", R, text);
    goto fail;
  }
  if (listen(c->listen_fd, CONN_BACKLOG) != 0) {
    rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: listen(%s)", R, text);
    goto fail;
  }
  struct stat st;
  if (c->ns == VMMIPC_SOCKET_FILESYSTEM) {
    if (lstat(c->sock_path, &st) != 0) {
      rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: lstat(%s)", R, text);
      goto fail;
    }
    c->sock_dev = st.st_dev;
    c->sock_ino = st.st_ino;
  }
  *out = c;
  return VMMIPC_SUCCESS;
fail:
  vmmipc__conn_close(c);
  return rc;
}

/* Filesystem mode: whether the socket file is still the one bind() made. A
 * process that removed or replaced it takes the connections meant for this
 * rank: better an error now, naming the path, than waiting out the timeout
 * for peers that cannot reach us. */
static vmmipc_result_t check_listener_file(const vmmipc__conn_t *c, int R) {
  if (c->ns != VMMIPC_SOCKET_FILESYSTEM || c->listen_fd < 0 || !c->sock_path) return VMMIPC_SUCCESS;
  struct stat st;
  if (lstat(c->sock_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == c->sock_dev && st.st_ino == c->sock_ino)
    return VMMIPC_SUCCESS;
  int e = errno;
  char how[96];
  if (lstat(c->sock_path, &st) != 0)
    snprintf(how, sizeof how, "removed (%s)", vmmipc__errno_name(e));
  else
    snprintf(how, sizeof how, "replaced (now inode %llu%s)", (unsigned long long)st.st_ino,
             S_ISSOCK(st.st_mode) ? ", a socket" : ", not a socket");
  vmmipc__error(VMMIPC_ERR_PEER,
                "rank %d setting up connections: its socket file %s was %s by another process, so the node's "
                "ranks cannot reach it; hint: give each job its own VMMIPC_SOCKET_DIR (or socket_dir) that "
                "nothing else writes to",
                R, c->sock_path, how);
  vmmipc__error_rank(R);
  return VMMIPC_ERR_PEER;
}

/* Removes the listener and, in filesystem mode, its file and directory. */
static void close_listener(vmmipc__conn_t *c) {
  int saved = errno;
  if (c->listen_fd >= 0) close(c->listen_fd);
  c->listen_fd = -1;
  if (c->owner == getpid()) { /* a forked child must not remove its parent's files */
    struct stat st; /* nor anyone another process's socket that replaced ours */
    if (c->sock_path && (c->sock_ino == 0 || (lstat(c->sock_path, &st) == 0 && st.st_dev == c->sock_dev &&
                                              st.st_ino == c->sock_ino)))
      unlink(c->sock_path);
    if (c->dir_path) rmdir(c->dir_path);
  }
  free(c->sock_path);
  free(c->dir_path);
  c->sock_path = c->dir_path = NULL;
  errno = saved;
}

void vmmipc__conn_close(vmmipc__conn_t *c) {
  if (!c) return;
  close_listener(c);
  for (int k = 0; k < 2; k++)
    for (int p = 0; c->fd[k] && p < c->node_size; p++) close_keep_errno(c->fd[k][p]);
  for (int p = 0; c->closed && p < c->node_size; p++) free(c->closed[p]);
  for (int i = 0; i < c->nheld; i++) close_keep_errno(c->held[i]);
  free(c->held);
  free(c->fd[0]);
  free(c->fd[1]);
  free(c->closed);
  free(c->ranks);
  free(c->pids);
  free(c->uids);
  free(c);
}

void vmmipc__conn_drop(vmmipc__conn_t *c, int p, const char *why) {
  for (int k = 0; k < 2; k++) {
    close_keep_errno(c->fd[k][p]);
    c->fd[k][p] = -1;
  }
  if (!c->closed[p]) c->closed[p] = strdup(why ? why : "closed");
}

/* ---- raw I/O ----------------------------------------------------------------- */

typedef union {
  struct cmsghdr align;
  char buf[CMSG_SPACE(sizeof(int) * VMMIPC__FRAME_MAX_FDS)];
} cmsg_buf_t;

int vmmipc__conn_send(int fd, const void *head, size_t head_len, const void *payload, size_t len, const int *fds,
                      int nfds) {
  if (nfds < 0 || nfds > VMMIPC__FRAME_MAX_FDS) return EINVAL;
  struct iovec iov[2] = {{(void *)head, head_len}, {(void *)payload, len}};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = iov;
  m.msg_iovlen = len ? 2 : 1;
  cmsg_buf_t cm;
  if (nfds) {
    memset(&cm, 0, sizeof cm);
    m.msg_control = cm.buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)nfds);
  }
  for (;;) {
    /* SOCK_SEQPACKET: the whole record goes, or nothing (EAGAIN). */
    ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (r >= 0) return (size_t)r == head_len + len ? 0 : EMSGSIZE;
    if (errno != EINTR) return errno;
  }
}

int vmmipc__conn_peek(int fd, uint64_t *seq, uint32_t *code) {
  unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
  ssize_t r = recv(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
  /* The reset that comes once before a closed peer's records (see
   * vmmipc__conn_recv): looked past, so that they are seen (an END's code,
   * a later collective's frame). Nothing behind it: a hang-up. */
  if (r < 0 && errno == ECONNRESET) {
    r = recv(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -2;
  }
  if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : -2;
  if (r != (ssize_t)sizeof head) return -2;
  if (seq) *seq = vmmipc__get64(head + 32);
  if (code) *code = vmmipc__get32(head + 12);
  return (uint16_t)(head[6] | head[7] << 8);
}

int vmmipc__conn_recv(int fd, void *buf, size_t cap, vmmipc__rec_t *r) {
  r->len = 0;
  r->truncated = r->ctrunc = r->odd_cmsg = 0;
  r->nfds = 0;
  cmsg_buf_t cm;
  struct iovec iov = {buf, cap};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cm.buf;
  m.msg_controllen = sizeof cm.buf;
  ssize_t n;
  do n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  /* A peer that closed with records of ours unread makes the kernel report
   * ECONNRESET once, before the records it sent us (SOCK_SEQPACKET checks
   * the error first): those are taken first (a verdict may be among them),
   * and the hang-up shows as the end of file after them. */
  if (n < 0 && errno == ECONNRESET) {
    do n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) errno = ECONNRESET;
  }
  if (n < 0) return errno;
  /* Own every fd that arrived first, whatever else is wrong. */
  for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len >= CMSG_LEN(0)) {
      size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const unsigned char *d = CMSG_DATA(h);
      for (size_t i = 0; i < k; i++) {
        int x;
        memcpy(&x, d + i * sizeof(int), sizeof x);
        if (r->nfds < VMMIPC__FRAME_MAX_FDS) {
          r->fds[r->nfds++] = x;
        } else {
          close(x);
          r->odd_cmsg = 1;
        }
      }
    } else {
      r->odd_cmsg = 1;
    }
  }
  r->len = (size_t)n;
  r->truncated = (m.msg_flags & MSG_TRUNC) != 0;
  r->ctrunc = (m.msg_flags & MSG_CTRUNC) != 0;
  return 0;
}

/* ---- the mesh ---------------------------------------------------------------- */

/* A connection accepted from a lower rank, waiting for its HELLO. */
typedef struct pending {
  int fd, rank;
} pending_t;

typedef struct mesh {
  vmmipc__conn_t *c;
  const unsigned char *addrs;
  pending_t *pend;
  int npend, cap_pend;
  char *hello_due;   /* [2 * node_size]: an outgoing connection whose HELLO is not sent yet */
  long attempts;     /* connect() calls that met a full backlog */
  int retry;         /* poll briefly: a connect must be retried */
  unsigned char rbuf[VMMIPC__FRAME_HEADER_BYTES + 16];
} mesh_t;

static void refuse(vmmipc__conn_t *c, int fd, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(vmmipc__conn_t *c, int fd, const char *fmt, ...) {
  /* Closing the connection also releases any fds queued on it unread. */
  close_keep_errno(fd);
  c->refused++;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->last_refusal, sizeof c->last_refusal, fmt, ap);
  va_end(ap);
}

static vmmipc_result_t mesh_accept(mesh_t *m) {
  vmmipc__conn_t *c = m->c;
  for (int k = 0; k < CONN_ACCEPT_BATCH; k++) {
    int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      int e = errno;
      if (e == EINTR || e == ECONNABORTED) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC_SUCCESS;
      return vmmipc__os_error(VMMIPC_ERR_SYSTEM, e, (e == EMFILE || e == ENFILE) ? k_fd_hint : NULL,
                              "rank %d accepting a connection", vmmipc__conn_rank(c, c->node_rank));
    }
    struct ucred uc;
    socklen_t ul = sizeof uc;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) != 0 || ul != sizeof uc) {
      refuse(c, fd, "a connection whose credentials could not be read (%s)", vmmipc__errno_name(errno));
      continue;
    }
    int r = -1;
    for (int q = 0; q < c->node_rank; q++) /* only lower ranks connect to us */
      if (c->pids[q] == uc.pid && c->uids[q] == uc.uid) r = q;
    if (r < 0) {
      refuse(c, fd, "pid %d (uid %u) is no lower rank of this node", (int)uc.pid, (unsigned)uc.uid);
      continue;
    }
    if (m->npend == m->cap_pend) {
      refuse(c, fd, "too many connections from rank %d", vmmipc__conn_rank(c, r));
      continue;
    }
    m->pend[m->npend].fd = fd;
    m->pend[m->npend].rank = r;
    m->npend++;
  }
  return VMMIPC_SUCCESS;
}

/* Reads the HELLO of pending connections; a good one becomes fd[ctx][rank]. */
static vmmipc_result_t mesh_hellos(mesh_t *m) {
  vmmipc__conn_t *c = m->c;
  for (int i = 0; i < m->npend;) {
    pending_t *p = &m->pend[i];
    vmmipc__rec_t rec;
    int e = vmmipc__conn_recv(p->fd, m->rbuf, sizeof m->rbuf, &rec);
    if (e == EAGAIN || e == EWOULDBLOCK) {
      i++;
      continue;
    }
    int R = vmmipc__conn_rank(c, p->rank);
    vmmipc_result_t rc = VMMIPC_SUCCESS;
    if (e || vmmipc__rec_eof(&rec)) {
      /* The rank hung up before saying hello: liveness will tell why. */
      refuse(c, p->fd, "rank %d closed a connection before its HELLO (%s)", R, e ? vmmipc__errno_name(e) : "EOF");
    } else {
      vmmipc__frame_t f;
      char why[300];
      vmmipc__frame_expect_t want = {(uint32_t)p->rank, (uint32_t)c->node_rank, c->comm_id, 0};
      const int cut = rec.truncated || rec.ctrunc || rec.odd_cmsg;
      const int bad = cut || vmmipc__frame_decode(m->rbuf, rec.len, rec.nfds, &want, &f, why, sizeof why) != 0;
      if (bad || f.kind != VMMIPC__KIND_HELLO) {
        /* A frame that does not decode keeps the decoder's reason. */
        if (cut) snprintf(why, sizeof why, "a truncated first record");
        else if (!bad) snprintf(why, sizeof why, "a first frame of kind %u, not HELLO", f.kind);
        rc = vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                           "rank %d setting up connections: rank %d sent %s; hint: all ranks must run the same "
                           "vmmipc build",
                           vmmipc__conn_rank(c, c->node_rank), R, why);
        vmmipc__error_rank(R); /* the sender's fault: every rank's verdict names it */
      } else if (c->fd[f.ctx - 1][p->rank] >= 0) {
        rc = vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                           "rank %d setting up connections: a second connection from rank %d for context %u",
                           vmmipc__conn_rank(c, c->node_rank), R, (unsigned)f.ctx);
        vmmipc__error_rank(R);
      } else {
        c->fd[f.ctx - 1][p->rank] = p->fd;
        p->fd = -1;
      }
      vmmipc__close_fds(rec.fds, rec.nfds);
      if (p->fd >= 0) close_keep_errno(p->fd);
    }
    m->pend[i] = m->pend[--m->npend];
    if (rc) return rc;
  }
  return VMMIPC_SUCCESS;
}

static vmmipc_result_t send_hello(vmmipc__conn_t *c, int q, int ctx, int *sent) {
  vmmipc__frame_t f;
  memset(&f, 0, sizeof f);
  f.kind = VMMIPC__INJECT("hello_kind") ? VMMIPC__KIND_DATA : VMMIPC__KIND_HELLO; /* tests: another build's */
  f.ctx = (uint16_t)ctx;
  f.sender = (uint32_t)c->node_rank;
  f.receiver = (uint32_t)q;
  f.comm_id = c->comm_id;
  unsigned char h[VMMIPC__FRAME_HEADER_BYTES];
  vmmipc__frame_encode(&f, h);
  int e = VMMIPC__INJECT("hello_send") ? EPIPE : vmmipc__conn_send(c->fd[ctx - 1][q], h, sizeof h, NULL, 0, NULL, 0);
  *sent = e == 0;
  if (e == 0 || e == EAGAIN || e == EWOULDBLOCK) return VMMIPC_SUCCESS;
  vmmipc_result_t rc = vmmipc__os_error(VMMIPC_ERR_PEER, e, NULL,
                                        "rank %d setting up connections: saying HELLO to rank %d",
                                        vmmipc__conn_rank(c, c->node_rank), vmmipc__conn_rank(c, q));
  if (vmmipc__errno_peer_gone(e)) /* q hung up on us: the node peers' news names it */
    vmmipc__error_rank(vmmipc__conn_rank(c, q));
  return rc;
}

/* One connect() attempt from us to higher rank q for context ctx. */
static vmmipc_result_t mesh_connect(mesh_t *m, int q, int ctx) {
  vmmipc__conn_t *c = m->c;
  int R = vmmipc__conn_rank(c, q);
  struct sockaddr_un sa;
  socklen_t sl;
  char text[160];
  vmmipc__conn_addr_text(m->addrs + (size_t)q * VMMIPC__ADDR_BYTES, text, sizeof text);
  if (addr_unpack(c->ns, m->addrs + (size_t)q * VMMIPC__ADDR_BYTES, &sa, &sl) != 0)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "rank %d setting up connections: rank %d published an address (%s) of another socket "
                         "namespace; hint: every rank must use the same socket mode",
                         vmmipc__conn_rank(c, c->node_rank), R, text);
  int fd;
  vmmipc_result_t rc = new_socket(&fd);
  if (!rc && VMMIPC__INJECT("mesh_connect")) { /* the fd limit, as socket() reports it */
    close(fd);
    rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, EMFILE, k_fd_hint, "socket(AF_UNIX, SOCK_SEQPACKET)");
  }
  if (rc) {
    vmmipc__error_prefix("rank %d connecting to rank %d: ", vmmipc__conn_rank(c, c->node_rank), R);
    return rc;
  }
  /* Unix sockets connect at once, or fail with EAGAIN when the listener's
   * backlog is full (a flood, or many ranks at once): try again shortly. */
  if (connect(fd, (const struct sockaddr *)&sa, sl) != 0) {
    int e = errno;
    close(fd);
    if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == EINPROGRESS) {
      m->attempts++;
      m->retry = 1;
      return VMMIPC_SUCCESS;
    }
    rc = vmmipc__os_error(e == ECONNREFUSED || e == ENOENT ? VMMIPC_ERR_PEER : VMMIPC_ERR_SYSTEM, e,
                          e == ECONNREFUSED || e == ENOENT
                              ? "nobody listens there: that rank failed or exited (check its output), its socket "
                                "file was replaced, or it runs in another network namespace (a container): set "
                                "VMMIPC_SOCKET_DIR to a directory all ranks share"
                              : (e == EACCES || e == EPERM) ? "every rank must run as the same user" : NULL,
                          "rank %d connecting to rank %d at %s", vmmipc__conn_rank(c, c->node_rank), R, text);
    vmmipc__error_rank(R);
    return rc;
  }
  struct ucred uc;
  socklen_t ul = sizeof uc;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) != 0 || ul != sizeof uc) {
    int e = errno;
    close(fd);
    return vmmipc__os_error(VMMIPC_ERR_SYSTEM, e, NULL, "rank %d connecting to rank %d: SO_PEERCRED",
                            vmmipc__conn_rank(c, c->node_rank), R);
  }
  if (uc.pid != c->pids[q] || uc.uid != c->uids[q]) {
    close(fd);
    c->refused++;
    snprintf(c->last_refusal, sizeof c->last_refusal, "the listener at %s is pid %d (uid %u), not rank %d", text,
             (int)uc.pid, (unsigned)uc.uid, R);
    vmmipc__error(VMMIPC_ERR_PEER,
                  "rank %d connecting to rank %d at %s: the socket belongs to pid %d (uid %u), not to rank %d "
                  "(pid %d); refusing to send to it; hint: all ranks must share one pid namespace, and nothing "
                  "else may write to the socket directory",
                  vmmipc__conn_rank(c, c->node_rank), R, text, (int)uc.pid, (unsigned)uc.uid, R, (int)c->pids[q]);
    vmmipc__error_rank(R);
    return VMMIPC_ERR_PEER;
  }
  c->fd[ctx - 1][q] = fd;
  int sent = 0;
  if ((rc = send_hello(c, q, ctx, &sent))) return rc;
  m->hello_due[(ctx - 1) * c->node_size + q] = !sent;
  return VMMIPC_SUCCESS;
}

/* The comm rank of the first peer mesh_missing names, or -1. */
static int mesh_first_missing(const mesh_t *m) {
  const vmmipc__conn_t *c = m->c;
  for (int q = 0; q < c->node_size; q++)
    if (q != c->node_rank && (c->fd[0][q] < 0 || c->fd[1][q] < 0 || m->hello_due[q] ||
                              m->hello_due[c->node_size + q]))
      return vmmipc__conn_rank(c, q);
  return -1;
}

/* Appends what is still missing to buf, for the timeout message. */
static void mesh_missing(const mesh_t *m, char *buf, size_t cap) {
  const vmmipc__conn_t *c = m->c;
  size_t len = strlen(buf);
  int shown = 0;
  for (int q = 0; q < c->node_size && len + 1 < cap; q++) {
    if (q == c->node_rank || (c->fd[0][q] >= 0 && c->fd[1][q] >= 0 && !m->hello_due[q] &&
                              !m->hello_due[c->node_size + q]))
      continue;
    if (shown++ == 8) {
      snprintf(buf + len, cap - len, ", ...");
      break;
    }
    int w = snprintf(buf + len, cap - len, "%srank %d (%s)", shown > 1 ? ", " : "", vmmipc__conn_rank(c, q),
                     q < c->node_rank ? "it has not connected here" : "connecting to it");
    if (w > 0) len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
  }
}

/* The accepted connections still without a HELLO: closed, or, when the
 * mesh failed, held open until the close. The peers that made them may
 * have all their connections and go on to the agreement, where a close
 * would read as their hang-up and blame them. */
static void end_pending(mesh_t *m, int failed) {
  vmmipc__conn_t *c = m->c;
  int *held = failed && m->npend && !c->held ? calloc((size_t)m->npend, sizeof *held) : NULL;
  for (int i = 0; i < m->npend; i++) {
    if (held) held[i] = m->pend[i].fd;
    else close_keep_errno(m->pend[i].fd);
  }
  if (held) {
    c->held = held;
    c->nheld = m->npend;
  }
}

vmmipc_result_t vmmipc__conn_mesh(vmmipc__conn_t *c, const unsigned char *addrs, const pid_t *pids,
                                  const uid_t *uids, int64_t deadline_ms, vmmipc__mesh_stop_fn stop, void *arg) {
  int me = c->node_rank, n = c->node_size, R = vmmipc__conn_rank(c, me);
  for (int r = 0; r < n; r++) {
    if (pids[r] <= 0)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "rank %d setting up connections: rank %d has pid %d", R,
                           vmmipc__conn_rank(c, r), (int)pids[r]);
    for (int q = 0; q < r; q++)
      if (pids[q] == pids[r])
        return vmmipc__error(VMMIPC_ERR_PEER,
                             "rank %d setting up connections: ranks %d and %d both have pid %d; hint: every node rank "
                             "must be its own process, and all must share one pid namespace",
                             R, vmmipc__conn_rank(c, q), vmmipc__conn_rank(c, r), (int)pids[r]);
  }
  if (pids[me] != getpid() || uids[me] != geteuid())
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "rank %d setting up connections: its own pid or uid is wrong", R);
  memcpy(c->pids, pids, (size_t)n * sizeof *pids);
  memcpy(c->uids, uids, (size_t)n * sizeof *uids);
  if (n == 1) {
    c->meshed = 1;
    return VMMIPC_SUCCESS;
  }

  mesh_t m;
  memset(&m, 0, sizeof m);
  m.c = c;
  m.addrs = addrs;
  m.cap_pend = 2 * n + 8;
  m.pend = calloc((size_t)m.cap_pend, sizeof *m.pend);
  m.hello_due = calloc(2 * (size_t)n, 1);
  struct pollfd *pfd = calloc((size_t)m.cap_pend + 2 * (size_t)n + 1, sizeof *pfd);
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  if (!m.pend || !m.hello_due || !pfd) {
    rc = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "rank %d setting up connections", R);
    goto out;
  }
  int64_t next_liveness = 0;
  for (;;) {
    m.retry = 0;
    if ((rc = mesh_accept(&m))) goto out;
    if (m.npend && VMMIPC__INJECT("mesh_pending")) { /* tests: fails holding a connection before its HELLO */
      rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, EMFILE, k_fd_hint, "rank %d setting up connections: accept", R);
      goto out;
    }
    if ((rc = mesh_hellos(&m))) goto out;
    int missing = 0;
    for (int q = 0; q < n; q++) {
      if (q == me) continue;
      for (int ctx = 1; ctx <= 2; ctx++) {
        int *fd = &c->fd[ctx - 1][q];
        char *due = &m.hello_due[(ctx - 1) * n + q];
        if (q > me && *fd < 0 && (rc = mesh_connect(&m, q, ctx))) goto out;
        if (q > me && *fd >= 0 && *due) {
          int sent;
          if ((rc = send_hello(c, q, ctx, &sent))) goto out;
          *due = !sent;
        }
        missing += *fd < 0 || *due;
      }
    }
    if (!missing && m.npend == 0) break;
    int64_t now = vmmipc__now_ms();
    if (now >= next_liveness) {
      next_liveness = now + CONN_SLICE_MS;
      if ((rc = check_listener_file(c, R)) || (stop && (rc = stop(arg)))) goto out;
      for (int q = 0; q < n; q++)
        if (q != me && (c->fd[0][q] < 0 || c->fd[1][q] < 0) && vmmipc__pid_gone(pids[q])) {
          rc = vmmipc__error(VMMIPC_ERR_PEER,
                             "rank %d setting up connections: rank %d (pid %d) exited; hint: its output has the "
                             "first error",
                             R, vmmipc__conn_rank(c, q), (int)pids[q]);
          vmmipc__error_rank(vmmipc__conn_rank(c, q));
          goto out;
        }
    }
    if (now >= deadline_ms) {
      char what[600] = "";
      mesh_missing(&m, what, sizeof what);
      char refused[300] = "";
      if (c->refused)
        snprintf(refused, sizeof refused, "; %llu foreign connection(s) were refused (last: %s)",
                 (unsigned long long)c->refused, c->last_refusal);
      rc = vmmipc__error(VMMIPC_ERR_TIMEOUT,
                         "rank %d setting up connections timed out waiting for %s after %ld connect attempt(s) met a "
                         "full backlog%s; hint: is every rank of the node in vmmipc_comm_create?",
                         R, what, m.attempts, refused);
      vmmipc__error_rank(mesh_first_missing(&m));
      goto out;
    }
    nfds_t k = 0;
    pfd[k].fd = c->listen_fd;
    pfd[k++].events = POLLIN;
    for (int i = 0; i < m.npend; i++) {
      pfd[k].fd = m.pend[i].fd;
      pfd[k++].events = POLLIN;
    }
    for (int q = me + 1; q < n; q++)
      for (int ctx = 1; ctx <= 2; ctx++)
        if (c->fd[ctx - 1][q] >= 0 && m.hello_due[(ctx - 1) * n + q]) {
          pfd[k].fd = c->fd[ctx - 1][q];
          pfd[k++].events = POLLOUT;
        }
    int64_t wait = deadline_ms - now;
    if (wait > CONN_SLICE_MS) wait = CONN_SLICE_MS;
    if (m.retry && wait > CONN_RETRY_MS) wait = CONN_RETRY_MS;
    if (poll(pfd, k, (int)(wait < 0 ? 0 : wait)) < 0 && errno != EINTR) {
      rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "rank %d setting up connections: poll", R);
      goto out;
    }
  }
  /* Every connection exists: nothing needs the name any more. */
  close_listener(c);
  c->meshed = 1;
out:
  end_pending(&m, rc != VMMIPC_SUCCESS);
  free(m.pend);
  free(m.hello_due);
  free(pfd);
  return rc;
}
