/* The transport's connection manager: socket names, the listener, the
 * credential checks, the full mesh of connections set up once per
 * communicator, and raw frame I/O with SCM_RIGHTS. It knows nothing of
 * messages: the progress loop (exchange.c) sits on top of it.
 *
 * Lifecycle: vmmipc__conn_open binds a listener under a fresh random name
 * (nothing is published yet); the caller publishes vmmipc__conn_addr
 * through MPI; vmmipc__conn_mesh connects every pair of node ranks, two
 * connections per pair (one per context), refusing and dropping every
 * connection from a process that is not a rank, then closes the listener
 * and removes its name. From then on nothing listens: flooding a listener
 * cannot stall a collective. See docs/transport.md. */
#ifndef VMMIPC_TRANSPORT_CONN_H
#define VMMIPC_TRANSPORT_CONN_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A published address: [0] namespace, [1..2] length (LE), then the
 * sun_path bytes. */
#define VMMIPC__ADDR_BYTES 112

typedef struct vmmipc__conn {
  int node_rank, node_size;
  int *ranks;              /* comm rank of each node rank, for messages */
  int ns;                  /* VMMIPC_SOCKET_ABSTRACT or VMMIPC_SOCKET_FILESYSTEM */
  uint64_t comm_id;
  int listen_fd;           /* -1 once the mesh is complete */
  int meshed;              /* 1 once the mesh is complete: before, a connection may never have been made */
  int *held, nheld;        /* a failed mesh's accepted connections without a HELLO yet, open until the
                              close: their peers, whose mesh may be complete, see no hang-up */
  char *dir_path;          /* filesystem mode: this rank's private directory */
  char *sock_path;         /* filesystem mode: its socket file */
  dev_t sock_dev;          /* filesystem mode: the file bind() made, to notice it replaced */
  ino_t sock_ino;
  pid_t owner;             /* only the opening process removes the files */
  unsigned char addr[VMMIPC__ADDR_BYTES];
  pid_t *pids;
  uid_t *uids;
  int *fd[2];              /* [ctx - 1][node rank]: the connection to that rank, -1 if none */
  char **closed;           /* [node rank]: why the connections to it were closed, or NULL */
  uint64_t refused;        /* connections refused by their credentials */
  char last_refusal[300];
} vmmipc__conn_t;

typedef struct vmmipc__conn_opts {
  int socket_namespace;     /* VMMIPC_SOCKET_ABSTRACT or VMMIPC_SOCKET_FILESYSTEM */
  const char *socket_dir;   /* filesystem mode: parent directory */
  int node_rank, node_size;
  const int *ranks;         /* copied */
  uint64_t comm_id;
} vmmipc__conn_opts_t;

vmmipc_result_t vmmipc__conn_open(const vmmipc__conn_opts_t *o, vmmipc__conn_t **out);
/* Closes every socket and removes what filesystem mode created. */
void vmmipc__conn_close(vmmipc__conn_t *c);
/* The address as text ("@name" for abstract names), for messages. */
void vmmipc__conn_addr_text(const unsigned char addr[VMMIPC__ADDR_BYTES], char *buf, size_t cap);
/* Asked every 100 ms while the mesh waits: an error (set, with the rank
 * to blame) stops it, as when a node peer's own mesh failed. */
typedef vmmipc_result_t (*vmmipc__mesh_stop_fn)(void *arg);
/* Connects every pair of the node (addrs: node_size addresses, as
 * published; pids, uids: each rank's, as allgathered), drains and drops
 * foreign connections while it waits, and gives up at deadline_ms
 * (vmmipc__now_ms() clock), or when stop (may be NULL) says so. */
vmmipc_result_t vmmipc__conn_mesh(vmmipc__conn_t *c, const unsigned char *addrs, const pid_t *pids,
                                  const uid_t *uids, int64_t deadline_ms, vmmipc__mesh_stop_fn stop, void *arg);
/* Closes both connections to node rank p and remembers why. */
void vmmipc__conn_drop(vmmipc__conn_t *c, int p, const char *why);
/* The comm rank of node rank p, for messages. */
int vmmipc__conn_rank(const vmmipc__conn_t *c, int p);
/* The pid of node rank p (after the mesh), or 0. */
pid_t vmmipc__conn_pid(const vmmipc__conn_t *c, int p);

/* One received record and the fds that came with it (owned by the caller:
 * keep or close them). */
typedef struct vmmipc__rec {
  size_t len;     /* bytes; 0 with nothing else is an end of file (vmmipc__rec_eof) */
  int truncated;  /* MSG_TRUNC */
  int ctrunc;     /* MSG_CTRUNC: some fds were lost (RLIMIT_NOFILE) */
  int odd_cmsg;   /* a control message other than SCM_RIGHTS */
  int nfds;
  int fds[253];
} vmmipc__rec_t;

/* An end of file: no bytes and no control data. An empty record that
 * carries fds is a peer's malformed frame, not a hang-up: SOCK_SEQPACKET
 * delivers it as a read of 0 bytes, with the fds installed and the
 * connection still open. */
static inline int vmmipc__rec_eof(const vmmipc__rec_t *r) {
  return r->len == 0 && r->nfds == 0 && !r->ctrunc && !r->odd_cmsg;
}

/* Whether a socket call's errno says the peer hung up (or is gone). */
static inline int vmmipc__errno_peer_gone(int e) {
  return e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNREFUSED;
}

/* One sendmsg(MSG_NOSIGNAL) of a header, a payload and fds, retried on
 * EINTR. Returns 0 or an errno value (EAGAIN when the socket is full). */
int vmmipc__conn_send(int fd, const void *head, size_t head_len, const void *payload, size_t len, const int *fds,
                      int nfds);
/* One recvmsg(MSG_CMSG_CLOEXEC) into buf, retried on EINTR. Returns 0 or an
 * errno value (EAGAIN when nothing is queued); no fd leaks on error. Records
 * a peer sent before it closed are read before its hang-up shows. */
int vmmipc__conn_recv(int fd, void *buf, size_t cap, vmmipc__rec_t *r);

/* The frame kind of the first record queued on fd (its sequence number in
 * *seq and its code in *code, each when not NULL); -1 when nothing is
 * queued yet; -2 at an end of file or for a record shorter than a frame
 * header. Reads nothing. */
int vmmipc__conn_peek(int fd, uint64_t *seq, uint32_t *code);

/* 1 if process pid has exited (gone, or a zombie). */
int vmmipc__pid_gone(pid_t pid);
/* Builds "<head>: ENAME (text)[; hint: <hint>]" and returns rc. */
vmmipc_result_t vmmipc__os_error(vmmipc_result_t rc, int err, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif
