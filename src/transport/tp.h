/* Unix-socket transport between the ranks of one node: naming, binding,
 * peer-credential checks, framing, SCM_RIGHTS batches and bounded waits.
 *
 * Peers are identified by their node rank (0..node_size-1). Error messages
 * name peers by their rank in the user's communicator (`ranks[]`). */
#ifndef VMMIPC_TRANSPORT_TP_H
#define VMMIPC_TRANSPORT_TP_H

#include <stddef.h>
#include <sys/types.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many fds ride on one sendmsg (the kernel's SCM_MAX_FD is 253). */
#define VMMIPC__TP_MAX_FDS_PER_MSG 253

typedef struct vmmipc__tp vmmipc__tp_t;

typedef struct vmmipc__tp_opts {
  int socket_namespace;        /* VMMIPC_SOCKET_ABSTRACT or VMMIPC_SOCKET_FILESYSTEM */
  const char *socket_dir;      /* filesystem mode: parent directory (already resolved) */
  unsigned char nonce[16];     /* random, broadcast by rank 0: makes names unguessable */
  int node_rank, node_size;    /* this process and the node's size */
  const int *ranks;            /* comm rank of each node rank, for messages (copied) */
  int timeout_ms;              /* bound on every wait */
} vmmipc__tp_opts_t;

/* Create and bind this rank's listening socket. Nothing is published yet:
 * the name is derived from the nonce and the node rank. */
vmmipc_result_t vmmipc__tp_open(const vmmipc__tp_opts_t *opts, vmmipc__tp_t **out);
/* Pids and uids of every node rank, as allgathered through MPI; connections
 * and messages from any other process are refused. */
vmmipc_result_t vmmipc__tp_set_peers(vmmipc__tp_t *tp, const pid_t *pids, const uid_t *uids);
/* Close every socket; unlink filesystem sockets and their directory. */
void vmmipc__tp_close(vmmipc__tp_t *tp);
/* The socket address of node rank `node_rank` as text (abstract names start
 * with '@'), for diagnostics and tests. */
void vmmipc__tp_address(const vmmipc__tp_t *tp, int node_rank, char *buf, size_t len);
/* How many connections were refused because of their credentials or contents. */
int vmmipc__tp_refused(const vmmipc__tp_t *tp);

/* One message: opaque bytes plus fds. */
typedef struct vmmipc__tp_send {
  int peer;            /* node rank */
  const void *bytes;
  size_t num_bytes;
  const int *fds;      /* borrowed: the caller keeps them */
  int num_fds;
} vmmipc__tp_send_t;

typedef struct vmmipc__tp_recv {
  int peer;            /* node rank */
  void *bytes;         /* out: malloc'd, the caller frees */
  size_t num_bytes;    /* out */
  int *fds;            /* out: malloc'd, owned (and closed) by the caller */
  int num_fds;         /* out */
} vmmipc__tp_recv_t;

/* Send every message in `sends` and receive one message from each peer in
 * `recvs`, making progress on all of them at once so that no order of calls
 * across ranks can deadlock. Every wait is bounded by the timeout; a peer
 * that dies, hangs up or sends garbage gives an error naming it. On failure
 * every fd received so far is closed and every recv slot is left empty. */
vmmipc_result_t vmmipc__tp_exchange(vmmipc__tp_t *tp, const vmmipc__tp_send_t *sends, int num_sends,
                                    vmmipc__tp_recv_t *recvs, int num_recvs);
/* Best effort, bounded: tell `peers` that this rank gave up, with the current
 * error message, so that they fail at once instead of waiting. */
void vmmipc__tp_abort(vmmipc__tp_t *tp, const int *peers, int num_peers);

#ifdef __cplusplus
}
#endif
#endif
