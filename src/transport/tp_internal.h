/* Internals of the transport, shared by tp.c (sockets and credentials),
 * frame.c (framing and message progress) and wait.c (deadlines, liveness and
 * the exchange loop). Not part of any API. */
#ifndef VMMIPC_TRANSPORT_TP_INTERNAL_H
#define VMMIPC_TRANSPORT_TP_INTERNAL_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "common/error.h" /* no C++ guard of its own */
#include "transport/frame.h"
#include "transport/tp.h"

/* listen() backlog (the kernel also caps it at net.core.somaxconn). */
#define VMMIPC__TP_BACKLOG 512
/* Longest single poll(): liveness of pending peers is checked this often. */
#define VMMIPC__TP_SLICE_MS 100
/* Poll slice while waiting for something poll() cannot report (a full
 * listen backlog on connect, too many fds in flight). */
#define VMMIPC__TP_RETRY_MS 5
/* Total time vmmipc__tp_abort may spend. */
#define VMMIPC__TP_ABORT_BUDGET_MS 200
/* Used when opts->timeout_ms <= 0. */
#define VMMIPC__TP_DEFAULT_TIMEOUT_MS 60000

/* The outgoing connection to one peer (we connected to its listener). */
typedef struct vmmipc__tp_out {
  int fd;         /* -1: none */
  int connecting; /* connect() returned EINPROGRESS; not verified yet */
  int broken;     /* a message was cut short (or ABORT sent): no more DATA */
  uint64_t seq;   /* sequence number of the next message to send */
} vmmipc__tp_out_t;

/* The incoming connection from one peer (accepted, identified by its pid). */
typedef struct vmmipc__tp_in {
  int fd;         /* -1: none yet */
  int broken;     /* closed after an error: later receives fail at once */
  uint64_t seq;   /* sequence number of the next message expected */
} vmmipc__tp_in_t;

struct vmmipc__tp {
  int node_rank, node_size;
  int ns;                 /* VMMIPC_SOCKET_ABSTRACT or VMMIPC_SOCKET_FILESYSTEM */
  int timeout_ms;
  int *ranks;             /* comm rank of each node rank */
  char nonce_hex[33];
  char *socket_dir;       /* filesystem mode: copy of opts->socket_dir */
  char *dir_path;         /* filesystem mode: this rank's private directory */
  char *sock_path;        /* filesystem mode: its socket file */
  int made_dir, made_sock;
  pid_t owner;            /* the process that opened it: only it unlinks */
  int listen_fd;
  int have_peers;
  pid_t *pids;
  uid_t *uids;
  vmmipc__tp_out_t *out;
  vmmipc__tp_in_t *in;
  int refused;
  char last_refusal[160]; /* description of the last refused connection */
  int retry_soon;         /* set by progress: poll at most VMMIPC__TP_RETRY_MS */
  unsigned char *rbuf;    /* one frame: header + VMMIPC__TP_FRAME_MAX_BYTES + 1 */
  size_t rbuf_cap;
};

/* One send of an exchange, in progress. */
typedef struct vmmipc__tp_sop {
  const vmmipc__tp_send_t *msg;
  size_t bytes_done;
  int fds_done;
  uint32_t frame;   /* next frame index */
  int backoff;      /* ETOOMANYREFS: retry after a short wait, not on POLLOUT */
  int done;
} vmmipc__tp_sop_t;

/* One receive of an exchange, in progress. */
typedef struct vmmipc__tp_rop {
  vmmipc__tp_recv_t *slot;
  int started;      /* frame 0 has arrived: totals are known */
  uint64_t total_bytes;
  uint32_t total_fds;
  size_t bytes_done;
  int fds_done;
  uint32_t frame;   /* next frame index expected */
  unsigned char *bytes;
  int *fds;
  int done;
} vmmipc__tp_rop_t;

/* ---- tp.c ---- */
/* The address of node rank r; -1 if it does not fit in sun_path. */
int vmmipc__tp_sockaddr(const vmmipc__tp_t *tp, int r, struct sockaddr_un *sa, socklen_t *len);
/* Accepts every queued connection; identifies or refuses each. */
vmmipc_result_t vmmipc__tp_accept_all(vmmipc__tp_t *tp);
/* Makes progress connecting to peer p: on success tp->out[p].fd is either a
 * verified connection (connecting == 0) or still connecting; fd == -1 with
 * tp->retry_soon set means "try again shortly". */
vmmipc_result_t vmmipc__tp_connect(vmmipc__tp_t *tp, int p);
/* Closes the incoming connection from p and marks it unusable. */
void vmmipc__tp_drop_in(vmmipc__tp_t *tp, int p);
/* The comm rank of node rank p, for messages. */
int vmmipc__tp_rank(const vmmipc__tp_t *tp, int p);
/* The outgoing connection to p, or -1 (for tests and diagnostics). */
int vmmipc__tp_out_fd(const vmmipc__tp_t *tp, int p);
/* Builds "<head>: ENAME (text); hint: <hint>" and returns rc. */
vmmipc_result_t vmmipc__tp_os_error(vmmipc_result_t rc, int err, const char *hint, const char *fmt, ...)
    VMMIPC__PRINTF(4, 5);

/* ---- frame.c ---- */
/* Sends as many frames of op as the socket takes now. */
vmmipc_result_t vmmipc__tp_send_progress(vmmipc__tp_t *tp, vmmipc__tp_sop_t *op);
/* Receives as many frames for op as are queued now. */
vmmipc_result_t vmmipc__tp_recv_progress(vmmipc__tp_t *tp, vmmipc__tp_rop_t *op);
/* Sends one ABORT frame carrying msg to p on its connected socket. Returns 0
 * or an errno value. */
int vmmipc__tp_send_abort_frame(vmmipc__tp_t *tp, int p, const char *msg);

/* ---- wait.c ---- */
/* CLOCK_MONOTONIC in milliseconds. */
int64_t vmmipc__tp_now_ms(void);
/* 1 if process pid has exited (gone, or a zombie), else 0. */
int vmmipc__tp_pid_gone(pid_t pid);

#ifdef __cplusplus
}
#endif
#endif
