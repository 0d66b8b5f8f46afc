/* The transport's sockets: naming, binding and listening, accepting with a
 * check of the peer's credentials, connecting with a check of the listener's
 * credentials, and closing. See docs/transport.md.
 *
 * A tp is used by one thread at a time (calls on one tp must not overlap);
 * errors go to the calling thread's vmmipc_last_error(). */
#include "transport/tp_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------ */

vmmipc_result_t vmmipc__tp_os_error(vmmipc_result_t rc, int err, const char *hint, const char *fmt, ...) {
  char head[VMMIPC__ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  return vmmipc__error(rc, "%s: %s (%s)%s%s", head, vmmipc__errno_name(err), strerror(err), hint ? "; hint: " : "",
                       hint ? hint : "");
}

int vmmipc__tp_rank(const vmmipc__tp_t *tp, int p) {
  return (tp && p >= 0 && p < tp->node_size) ? tp->ranks[p] : p;
}

/* close() that keeps errno (an error path must report the first failure). */
static void tp_close_fd(int fd) {
  int saved = errno;
  if (fd >= 0) close(fd);
  errno = saved;
}

/* "<socket_dir>/vmmipc-<nonce hex>-<r>" (and "/s" for the socket file);
 * returns what snprintf returns. */
static int tp_fs_path(const vmmipc__tp_t *tp, int r, int socket_file, char *buf, size_t cap) {
  return snprintf(buf, cap, "%s/vmmipc-%s-%d%s", tp->socket_dir, tp->nonce_hex, r, socket_file ? "/s" : "");
}

int vmmipc__tp_sockaddr(const vmmipc__tp_t *tp, int r, struct sockaddr_un *sa, socklen_t *len) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (tp->ns == VMMIPC_SOCKET_ABSTRACT) {
    /* sun_path[0] == '\0': the Linux abstract namespace; the name is not
     * NUL-terminated, its length is given by the address length. */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "vmmipc-%s-%d", tp->nonce_hex, r);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path - 1) return -1;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return 0;
  }
  int n = tp_fs_path(tp, r, 1, sa->sun_path, sizeof sa->sun_path);
  if (n < 0 || (size_t)n >= sizeof sa->sun_path) {
    memset(sa->sun_path, 0, sizeof sa->sun_path);
    return -1;
  }
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
  return 0;
}

void vmmipc__tp_address(const vmmipc__tp_t *tp, int node_rank, char *buf, size_t len) {
  if (!buf || len == 0) return;
  if (!tp || node_rank < 0 || node_rank >= tp->node_size) {
    snprintf(buf, len, "(no address: node rank %d is out of range)", node_rank);
    return;
  }
  if (tp->ns == VMMIPC_SOCKET_ABSTRACT)
    snprintf(buf, len, "@vmmipc-%s-%d", tp->nonce_hex, node_rank);
  else
    tp_fs_path(tp, node_rank, 1, buf, len);
}

int vmmipc__tp_refused(const vmmipc__tp_t *tp) { return tp ? tp->refused : 0; }

int vmmipc__tp_out_fd(const vmmipc__tp_t *tp, int p) {
  if (!tp || p < 0 || p >= tp->node_size || tp->out[p].connecting) return -1;
  return tp->out[p].fd;
}

void vmmipc__tp_drop_in(vmmipc__tp_t *tp, int p) {
  if (tp->in[p].fd >= 0) tp_close_fd(tp->in[p].fd);
  tp->in[p].fd = -1;
  tp->in[p].broken = 1;
}

/* ---- open / close ------------------------------------------------------- */

static const char k_fd_hint[] = "this process is out of file descriptors: raise the open-file limit (ulimit -n)";

static vmmipc_result_t tp_socket(int *out) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    int e = errno;
    return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, e,
                               (e == EMFILE || e == ENFILE) ? k_fd_hint
                               : (e == EAFNOSUPPORT || e == EPROTONOSUPPORT || e == ESOCKTNOSUPPORT)
                                   ? "the kernel must support AF_UNIX SOCK_SEQPACKET sockets"
                                   : NULL,
                               "socket(AF_UNIX, SOCK_SEQPACKET)");
  }
  *out = fd;
  return VMMIPC_SUCCESS;
}

/* Creates this rank's private directory (mode 0700) for the socket file. */
static vmmipc_result_t tp_make_dir(vmmipc__tp_t *tp) {
  if (mkdir(tp->dir_path, 0700) != 0) {
    int e = errno;
    const char *hint = NULL;
    if (e == EEXIST)
      hint = "the name is derived from a fresh random nonce, so another process (or a leftover of a run that "
             "reused the nonce) holds it: remove that directory, and make sure every communicator uses a new nonce";
    else if (e == ENOENT || e == ENOTDIR)
      hint = "socket_dir must be an existing directory on every rank (vmmipc_config_t.socket_dir or "
             "VMMIPC_SOCKET_DIR)";
    else if (e == EACCES || e == EPERM || e == EROFS)
      hint = "socket_dir must be writable by this user: choose another one (vmmipc_config_t.socket_dir or "
             "VMMIPC_SOCKET_DIR)";
    return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, e, hint,
                               "opening the transport of rank %d: creating the socket directory %s (mode 0700)",
                               vmmipc__tp_rank(tp, tp->node_rank), tp->dir_path);
  }
  tp->made_dir = 1;
  /* mkdir's mode is filtered by the umask: make it exactly 0700, and make
   * sure it is the directory we just created, not something swapped in. */
  struct stat st;
  if (lstat(tp->dir_path, &st) != 0)
    return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: lstat(%s)",
                               vmmipc__tp_rank(tp, tp->node_rank), tp->dir_path);
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
    return vmmipc__error(VMMIPC_ERR_SYSTEM,
                         "opening the transport of rank %d: %s is not a directory owned by uid %u right after "
                         "creating it; hint: another process is tampering with socket_dir: use a private one",
                         vmmipc__tp_rank(tp, tp->node_rank), tp->dir_path, (unsigned)geteuid());
  if ((st.st_mode & 07777) != 0700 && chmod(tp->dir_path, 0700) != 0)
    return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: chmod(%s, 0700)",
                               vmmipc__tp_rank(tp, tp->node_rank), tp->dir_path);
  return VMMIPC_SUCCESS;
}

static vmmipc_result_t tp_open_fs(vmmipc__tp_t *tp, const char *socket_dir) {
  size_t n = strlen(socket_dir);
  while (n > 1 && socket_dir[n - 1] == '/') n--; /* "dir/" names the same directory as "dir" */
  tp->socket_dir = malloc(n + 1);
  if (!tp->socket_dir) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport: out of host memory");
  memcpy(tp->socket_dir, socket_dir, n);
  tp->socket_dir[n] = '\0';
  if (n == 1 && tp->socket_dir[0] == '/') tp->socket_dir[0] = '\0'; /* "/" + "/vmmipc-..." */

  /* Every rank checks its own path and the longest one of the node (the
   * highest rank has the most digits), so that all fail alike. */
  struct sockaddr_un sa;
  socklen_t sl;
  int check[2] = {tp->node_rank, tp->node_size - 1};
  for (int i = 0; i < 2; i++) {
    if (vmmipc__tp_sockaddr(tp, check[i], &sa, &sl) != 0) {
      int len = tp_fs_path(tp, check[i], 1, NULL, 0);
      char *path = malloc((size_t)len + 1);
      if (path) tp_fs_path(tp, check[i], 1, path, (size_t)len + 1);
      vmmipc_result_t rc = vmmipc__error(
          VMMIPC_ERR_INVALID_ARG,
          "opening the transport of rank %d: the socket path %s (of node rank %d) is %d bytes long, but a Unix "
          "socket path holds at most %zu; hint: choose a shorter socket_dir (vmmipc_config_t.socket_dir or "
          "VMMIPC_SOCKET_DIR), or use the abstract namespace",
          vmmipc__tp_rank(tp, tp->node_rank), path ? path : tp->socket_dir, check[i], len, sizeof sa.sun_path - 1);
      free(path);
      return rc;
    }
  }
  int dlen = tp_fs_path(tp, tp->node_rank, 0, NULL, 0);
  int slen = tp_fs_path(tp, tp->node_rank, 1, NULL, 0);
  tp->dir_path = malloc((size_t)dlen + 1);
  tp->sock_path = malloc((size_t)slen + 1);
  if (!tp->dir_path || !tp->sock_path)
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport: out of host memory");
  tp_fs_path(tp, tp->node_rank, 0, tp->dir_path, (size_t)dlen + 1);
  tp_fs_path(tp, tp->node_rank, 1, tp->sock_path, (size_t)slen + 1);
  return tp_make_dir(tp);
}

vmmipc_result_t vmmipc__tp_open(const vmmipc__tp_opts_t *opts, vmmipc__tp_t **out) {
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_open: out is NULL");
  *out = NULL;
  if (!opts) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_open: opts is NULL");
  if (opts->node_size < 1 || opts->node_rank < 0 || opts->node_rank >= opts->node_size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_open: node rank %d is not in [0, %d)", opts->node_rank,
                         opts->node_size);
  if (!opts->ranks) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_open: ranks is NULL");
  if (opts->socket_namespace != VMMIPC_SOCKET_ABSTRACT && opts->socket_namespace != VMMIPC_SOCKET_FILESYSTEM)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_open: socket namespace %d is neither VMMIPC_SOCKET_ABSTRACT nor "
                         "VMMIPC_SOCKET_FILESYSTEM",
                         opts->socket_namespace);
  if (opts->socket_namespace == VMMIPC_SOCKET_FILESYSTEM && (!opts->socket_dir || !opts->socket_dir[0]))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_open: filesystem sockets need a socket_dir; hint: set "
                         "vmmipc_config_t.socket_dir or VMMIPC_SOCKET_DIR");

  vmmipc__tp_t *tp = calloc(1, sizeof *tp);
  if (!tp) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport: out of host memory");
  tp->node_rank = opts->node_rank;
  tp->node_size = opts->node_size;
  tp->ns = opts->socket_namespace;
  tp->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : VMMIPC__TP_DEFAULT_TIMEOUT_MS;
  tp->owner = getpid();
  tp->listen_fd = -1;
  for (int i = 0; i < 16; i++) snprintf(tp->nonce_hex + 2 * i, 3, "%02x", opts->nonce[i]);

  size_t n = (size_t)opts->node_size;
  tp->ranks = malloc(n * sizeof *tp->ranks);
  tp->pids = calloc(n, sizeof *tp->pids);
  tp->uids = calloc(n, sizeof *tp->uids);
  tp->out = calloc(n, sizeof *tp->out);
  tp->in = calloc(n, sizeof *tp->in);
  tp->rbuf_cap = VMMIPC__TP_HEADER_BYTES + VMMIPC__TP_FRAME_MAX_BYTES + 1;
  tp->rbuf = malloc(tp->rbuf_cap);
  vmmipc_result_t rc;
  if (!tp->ranks || !tp->pids || !tp->uids || !tp->out || !tp->in || !tp->rbuf) {
    rc = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport: out of host memory");
    goto fail;
  }
  memcpy(tp->ranks, opts->ranks, n * sizeof *tp->ranks);
  for (size_t i = 0; i < n; i++) tp->out[i].fd = tp->in[i].fd = -1;

  if (tp->ns == VMMIPC_SOCKET_FILESYSTEM && (rc = tp_open_fs(tp, opts->socket_dir)) != VMMIPC_SUCCESS) goto fail;

  if ((rc = tp_socket(&tp->listen_fd)) != VMMIPC_SUCCESS) {
    vmmipc__error_prefix("opening the transport of rank %d: ", vmmipc__tp_rank(tp, tp->node_rank));
    goto fail;
  }
  struct sockaddr_un sa;
  socklen_t sl;
  char addr[160];
  vmmipc__tp_address(tp, tp->node_rank, addr, sizeof addr);
  if (vmmipc__tp_sockaddr(tp, tp->node_rank, &sa, &sl) != 0) { /* checked above; cannot happen */
    rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "opening the transport: address %s does not fit", addr);
    goto fail;
  }
  if (bind(tp->listen_fd, (const struct sockaddr *)&sa, sl) != 0) {
    int e = errno;
    rc = vmmipc__tp_os_error(
        VMMIPC_ERR_SYSTEM, e,
        e == EADDRINUSE ? "another socket already has this name, which comes from a fresh random nonce: a nonce was "
                          "reused, or a process is squatting on the name; every communicator needs a new nonce"
                        : NULL,
        "opening the transport of rank %d: bind(%s)", vmmipc__tp_rank(tp, tp->node_rank), addr);
    goto fail;
  }
  if (tp->ns == VMMIPC_SOCKET_FILESYSTEM) tp->made_sock = 1;
  if (listen(tp->listen_fd, VMMIPC__TP_BACKLOG) != 0) {
    rc = vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "opening the transport of rank %d: listen(%s)",
                             vmmipc__tp_rank(tp, tp->node_rank), addr);
    goto fail;
  }
  *out = tp;
  return VMMIPC_SUCCESS;

fail:
  vmmipc__tp_close(tp); /* removes the socket file and directory if made */
  return rc;
}

vmmipc_result_t vmmipc__tp_set_peers(vmmipc__tp_t *tp, const pid_t *pids, const uid_t *uids) {
  if (!tp || !pids || !uids)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_set_peers: tp, pids or uids is NULL");
  for (int r = 0; r < tp->node_size; r++) {
    if (pids[r] <= 0)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_set_peers: rank %d has pid %d",
                           vmmipc__tp_rank(tp, r), (int)pids[r]);
    for (int q = 0; q < r; q++)
      if (pids[q] == pids[r])
        return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                             "vmmipc__tp_set_peers: ranks %d and %d both have pid %d; hint: every node rank must be "
                             "its own process, and all of them must share one pid namespace",
                             vmmipc__tp_rank(tp, q), vmmipc__tp_rank(tp, r), (int)pids[r]);
  }
  if (pids[tp->node_rank] != getpid() || uids[tp->node_rank] != geteuid())
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_set_peers: the table gives rank %d pid %d uid %u, but this process is pid %d "
                         "uid %u; hint: allgather getpid() and geteuid() of every node rank in node-rank order",
                         vmmipc__tp_rank(tp, tp->node_rank), (int)pids[tp->node_rank],
                         (unsigned)uids[tp->node_rank], (int)getpid(), (unsigned)geteuid());
  memcpy(tp->pids, pids, (size_t)tp->node_size * sizeof *pids);
  memcpy(tp->uids, uids, (size_t)tp->node_size * sizeof *uids);
  tp->have_peers = 1;
  return VMMIPC_SUCCESS;
}

void vmmipc__tp_close(vmmipc__tp_t *tp) {
  if (!tp) return;
  int saved = errno;
  for (int r = 0; tp->out && tp->in && r < tp->node_size; r++) {
    if (tp->out[r].fd >= 0) close(tp->out[r].fd);
    if (tp->in[r].fd >= 0) close(tp->in[r].fd);
  }
  if (tp->listen_fd >= 0) close(tp->listen_fd);
  /* A forked child that inherited the tp must not remove its parent's files. */
  if (tp->owner == getpid()) {
    if (tp->made_sock) unlink(tp->sock_path);
    if (tp->made_dir) rmdir(tp->dir_path);
  }
  free(tp->ranks);
  free(tp->pids);
  free(tp->uids);
  free(tp->out);
  free(tp->in);
  free(tp->rbuf);
  free(tp->socket_dir);
  free(tp->dir_path);
  free(tp->sock_path);
  free(tp);
  errno = saved;
}

/* ---- accepting ------------------------------------------------------------ */

static void tp_refuse(vmmipc__tp_t *tp, int fd, const char *fmt, ...) VMMIPC__PRINTF(3, 4);
static void tp_refuse(vmmipc__tp_t *tp, int fd, const char *fmt, ...) {
  /* Closing the connection releases any fds queued on it: they never reach
   * this process's fd table. */
  tp_close_fd(fd);
  tp->refused++;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tp->last_refusal, sizeof tp->last_refusal, fmt, ap);
  va_end(ap);
}

vmmipc_result_t vmmipc__tp_accept_all(vmmipc__tp_t *tp) {
  for (;;) {
    int fd = accept4(tp->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      int e = errno;
      if (e == EINTR || e == ECONNABORTED) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC_SUCCESS;
      char addr[160];
      vmmipc__tp_address(tp, tp->node_rank, addr, sizeof addr);
      return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, e, (e == EMFILE || e == ENFILE) ? k_fd_hint : NULL,
                                 "rank %d accepting a connection on %s", vmmipc__tp_rank(tp, tp->node_rank), addr);
    }
    struct ucred uc;
    socklen_t ul = sizeof uc;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) != 0 || ul != sizeof uc) {
      tp_refuse(tp, fd, "a connection whose credentials could not be read (%s)", vmmipc__errno_name(errno));
      continue;
    }
    int r = -1;
    for (int q = 0; q < tp->node_size; q++)
      if (tp->pids[q] == uc.pid) r = q;
    if (r < 0) {
      tp_refuse(tp, fd, "pid %d (uid %u) is no rank of this node", (int)uc.pid, (unsigned)uc.uid);
    } else if (tp->uids[r] != uc.uid) {
      tp_refuse(tp, fd, "pid %d has the pid of rank %d but uid %u, not %u", (int)uc.pid, vmmipc__tp_rank(tp, r),
                (unsigned)uc.uid, (unsigned)tp->uids[r]);
    } else if (tp->in[r].fd >= 0 || tp->in[r].broken) {
      tp_refuse(tp, fd, "a second connection from rank %d (pid %d)", vmmipc__tp_rank(tp, r), (int)uc.pid);
    } else {
      tp->in[r].fd = fd;
    }
  }
}

/* ---- connecting ------------------------------------------------------------ */

/* The listener we reached must be the expected peer's. */
static vmmipc_result_t tp_verify_listener(vmmipc__tp_t *tp, int p) {
  vmmipc__tp_out_t *o = &tp->out[p];
  char addr[160];
  vmmipc__tp_address(tp, p, addr, sizeof addr);
  struct ucred uc;
  socklen_t ul = sizeof uc;
  if (getsockopt(o->fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) != 0 || ul != sizeof uc) {
    int e = errno;
    tp_close_fd(o->fd);
    o->fd = -1;
    o->connecting = 0;
    return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, e, NULL,
                               "connecting to rank %d at %s: reading the listener's credentials (SO_PEERCRED)",
                               vmmipc__tp_rank(tp, p), addr);
  }
  if (uc.pid != tp->pids[p] || uc.uid != tp->uids[p]) {
    tp_close_fd(o->fd);
    o->fd = -1;
    o->connecting = 0;
    tp->refused++;
    snprintf(tp->last_refusal, sizeof tp->last_refusal, "the listener at %s is pid %d (uid %u), not rank %d", addr,
             (int)uc.pid, (unsigned)uc.uid, vmmipc__tp_rank(tp, p));
    return vmmipc__error(VMMIPC_ERR_PEER,
                         "connecting to rank %d at %s: the socket belongs to pid %d (uid %u), not to rank %d "
                         "(pid %d, uid %u); refusing to send to it; hint: another process holds this name: check "
                         "for a process squatting on it, and that all ranks share one pid namespace",
                         vmmipc__tp_rank(tp, p), addr, (int)uc.pid, (unsigned)uc.uid, vmmipc__tp_rank(tp, p),
                         (int)tp->pids[p], (unsigned)tp->uids[p]);
  }
  o->connecting = 0;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__tp_connect(vmmipc__tp_t *tp, int p) {
  vmmipc__tp_out_t *o = &tp->out[p];
  if (o->fd >= 0 && !o->connecting) return VMMIPC_SUCCESS;
  struct sockaddr_un sa;
  socklen_t sl;
  char addr[160];
  vmmipc__tp_address(tp, p, addr, sizeof addr);
  if (vmmipc__tp_sockaddr(tp, p, &sa, &sl) != 0)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "connecting to rank %d: its address %s does not fit in sun_path",
                         vmmipc__tp_rank(tp, p), addr);
  if (o->fd < 0) {
    vmmipc_result_t rc = tp_socket(&o->fd);
    if (rc != VMMIPC_SUCCESS) {
      vmmipc__error_prefix("connecting to rank %d at %s: ", vmmipc__tp_rank(tp, p), addr);
      return rc;
    }
    o->connecting = 1;
  }
  /* Unix sockets connect at once or fail with EAGAIN (listen backlog full);
   * EINPROGRESS/EALREADY are handled anyway, by calling connect() again. */
  if (connect(o->fd, (const struct sockaddr *)&sa, sl) == 0 || errno == EISCONN) return tp_verify_listener(tp, p);
  int e = errno;
  if (e == EINPROGRESS || e == EALREADY || e == EINTR) return VMMIPC_SUCCESS;
  tp_close_fd(o->fd);
  o->fd = -1;
  o->connecting = 0;
  if (e == EAGAIN || e == EWOULDBLOCK) { /* backlog full: retry shortly */
    tp->retry_soon = 1;
    return VMMIPC_SUCCESS;
  }
  if (e == ECONNREFUSED || e == ENOENT || e == ECONNRESET) {
    char hint[256];
    snprintf(hint, sizeof hint,
             "nobody listens there: rank %d closed its communicator or exited (check its output), or the ranks "
             "disagree on socket_namespace/socket_dir",
             vmmipc__tp_rank(tp, p));
    return vmmipc__tp_os_error(VMMIPC_ERR_PEER, e, hint, "connecting to rank %d at %s", vmmipc__tp_rank(tp, p),
                               addr);
  }
  return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, e, (e == EACCES || e == EPERM) ? "the socket directory must be "
                             "accessible to this user (all ranks must run as the same user)" : NULL,
                             "connecting to rank %d at %s", vmmipc__tp_rank(tp, p), addr);
}
