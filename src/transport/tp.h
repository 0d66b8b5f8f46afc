/* The Unix-socket transport between the ranks of one node, as the comm
 * layer uses it. Three one-way layers (docs/dev/transport.md):
 *   exchange.c  the progress loop: messages, matching, bounded waits
 *   conn.c      connections: names, credentials, the mesh, raw frame I/O
 *   codec.c     frames to bytes and back, message reassembly, every check
 *
 * Peers are node ranks (0..node_size-1); messages name them by their rank in
 * the user's communicator. A tp is used by one thread at a time (the comm
 * layer refuses overlapping calls). */
#ifndef VMMIPC_TRANSPORT_TP_H
#define VMMIPC_TRANSPORT_TP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport/codec.h"
#include "transport/conn.h"
#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vmmipc__tp vmmipc__tp_t;

typedef struct vmmipc__tp_opts {
  int socket_namespace;  /* VMMIPC_SOCKET_ABSTRACT or VMMIPC_SOCKET_FILESYSTEM (resolved) */
  const char *socket_dir;
  int node_rank, node_size;
  const int *ranks;      /* comm rank of each node rank (copied) */
  int timeout_ms;        /* bound on every wait */
  uint64_t comm_id;      /* equal on every rank of the node: carried by every frame */
} vmmipc__tp_opts_t;

/* Binds this rank's listener under a fresh random name; nothing is
 * published yet. */
vmmipc_result_t vmmipc__tp_open(const vmmipc__tp_opts_t *o, vmmipc__tp_t **out);
/* The address to publish (VMMIPC__ADDR_BYTES bytes). */
const unsigned char *vmmipc__tp_addr(const vmmipc__tp_t *tp);
/* Connects the whole node (see vmmipc__conn_mesh), bounded by the timeout. */
vmmipc_result_t vmmipc__tp_connect(vmmipc__tp_t *tp, const unsigned char *addrs, const pid_t *pids,
                                   const uid_t *uids);
/* As vmmipc__tp_connect, stopped early when stop(arg) returns an error. */
vmmipc_result_t vmmipc__tp_connect_until(vmmipc__tp_t *tp, const unsigned char *addrs, const pid_t *pids,
                                         const uid_t *uids, vmmipc__mesh_stop_fn stop, void *arg);
/* 1 when node rank p's connection was made and is closed now (it hung up,
 * aborted, or broke the protocol). A closed one that is not hung up was
 * never made (the mesh did not complete): nothing can come from it. */
int vmmipc__tp_hung_up(const vmmipc__tp_t *tp, int p);
void vmmipc__tp_close(vmmipc__tp_t *tp);

/* One message to send: bytes plus fds (borrowed). */
typedef struct vmmipc__tp_send {
  int peer;
  const void *bytes;
  size_t num_bytes;
  const int *fds;
  int num_fds;
} vmmipc__tp_send_t;

/* One message to receive; bytes and fds are malloc'd and owned by the
 * caller once done is set (the fds too: close them). */
typedef struct vmmipc__tp_recv {
  int peer;
  unsigned char *bytes;
  size_t num_bytes;
  int *fds;
  int num_fds;
  int done;
} vmmipc__tp_recv_t;

/* Called as soon as one receive completes, while others are still in
 * flight (so that a peer's chunks can be imported early). A failure ends
 * the exchange like a local failure. */
typedef vmmipc_result_t (*vmmipc__tp_on_recv_t)(void *arg, vmmipc__tp_recv_t *r);

typedef struct vmmipc__tp_xchg {
  int ctx;                       /* VMMIPC__CTX_P2P or VMMIPC__CTX_COLL */
  uint64_t epoch;                /* COLL: the collective's epoch (equal on every rank) */
  const vmmipc__tp_send_t *sends;
  int num_sends;
  vmmipc__tp_recv_t *recvs;
  int num_recvs;
  vmmipc__tp_on_recv_t on_recv;  /* may be NULL */
  void *arg;
  vmmipc_result_t local;         /* in: this rank already failed: it tells the
                                    peers (ABORT with the current message)
                                    instead of sending data */
  int aborted_by;                /* out: node rank whose ABORT ended the exchange, or -1 */
  int64_t deadline_ms;           /* in: when to give up (vmmipc__now_ms clock); 0: the timeout from now */
} vmmipc__tp_xchg_t;

/* Sends every message and receives one from each peer in recvs, making
 * progress on all at once so that no order of calls can deadlock. Frames of
 * an earlier call are dropped (fds closed, counted). Bounded by the timeout;
 * a peer that dies, hangs up, gives up or breaks the protocol gives an
 * error naming it. Malformed arguments (a peer out of range or twice, a
 * message over the limits, an fd that is not open) are refused with
 * VMMIPC_ERR_INVALID_ARG before anything is sent, and nobody is told: the
 * library's own calls never pass them. On any other failure this rank tells
 * the peers it still owed, or in a collective awaited (ABORT), so that they do not wait out
 * the timeout, and no received fd or buffer is left behind. The exchange
 * allocates nothing before it runs (its tables are the transport's). */
vmmipc_result_t vmmipc__tp_exchange(vmmipc__tp_t *tp, vmmipc__tp_xchg_t *x);

/* The connections under the tp (tests inject raw frames through them). */
vmmipc__conn_t *vmmipc__tp_conn(vmmipc__tp_t *tp);

/* ---- for the agreement and the comm's abort (verdict.c) ---- */
/* The collective connection to node rank p, or -1 (closed, or p is self). */
int vmmipc__tp_coll_fd(const vmmipc__tp_t *tp, int p);
/* Most records one read of a connection takes before it returns to its
 * caller's loop (which checks the deadline, aborts and liveness, then
 * polls again): a peer that keeps sending stale frames faster than this
 * rank reads them cannot pin it. */
#define VMMIPC__TP_RECORDS_PER_TURN 64

typedef enum {
  VMMIPC__TP_READ_NOTHING = 0, /* nothing more queued */
  VMMIPC__TP_READ_GONE,        /* p hung up, broke the comm (END) or the protocol (connection dropped; error set) */
  VMMIPC__TP_READ_AHEAD,       /* p sent a frame of a later collective (left queued): it is past this agreement */
  VMMIPC__TP_READ_ABORTED,     /* p aborted the comm (error set) */
  VMMIPC__TP_READ_MORE         /* VMMIPC__TP_RECORDS_PER_TURN records read (more may be queued): call again
                                * after the caller's own checks (a flooding peer cannot pin this rank) */
} vmmipc__tp_read_t;
/* Reads what p queued on the collective connection while this rank is in
 * the agreement of collective `epoch`: drops what is left of earlier calls,
 * stops at an END frame, a hang-up, or a frame of a later collective (left
 * queued for it). */
vmmipc__tp_read_t vmmipc__tp_read_coll(vmmipc__tp_t *tp, int p, uint64_t epoch);
/* When p's END frame is the first record queued on its collective
 * connection: VMMIPC_ERR_ABORTED (p aborted the comm) or VMMIPC_ERR_PEER (p
 * broke it); else 0 (another record), -1 (nothing yet) or -2 (closed, an
 * end of file, or a record shorter than a frame header). Reads nothing: the frame stays queued for the calls
 * that read the connection. */
int vmmipc__tp_end_first(const vmmipc__tp_t *tp, int p);
/* After a failed collective, whose last frames carried `epoch`: drops what
 * the peers sent this rank for it (or an earlier call) that is still queued
 * on the collective connections, and any half-assembled message of those,
 * closing their fds. Each fd holds the sender's device memory alive for as
 * long as it is queued, even after the sender freed the buffer, so a failed
 * call must not leave them to the comm's next collective. Stops, per peer,
 * at anything else (a frame of a later call, END, a hang-up, a record
 * shorter than a frame header or of another kind), which stays queued for
 * the next call to judge; a DATA or ABORT frame of this call or an earlier
 * one that does not decode is dropped with its fds and counted as stale. Never waits,
 * and reads at most a few turns' records per peer (later calls drop the rest);
 * leaves the thread's error as it was. */
void vmmipc__tp_drop_stale(vmmipc__tp_t *tp, uint64_t epoch);
/* Once the comm failed on this rank (aborted or broken; seal.c): shuts the
 * receiving side of every connection, so that a peer's later send fails at
 * once (EPIPE), and drops what the peers queued before (fds closed and
 * counted as stale). Nothing is read on them afterwards. Never waits; sets
 * no error. */
void vmmipc__tp_seal(vmmipc__tp_t *tp);
/* Every wait of the transport ends (VMMIPC_ERR_ABORTED) once *flag is set. */
void vmmipc__tp_watch_abort(vmmipc__tp_t *tp, const int *flag);
/* The node rank whose END frame (comm aborted) arrived, or -1. */
int vmmipc__tp_aborted_by(const vmmipc__tp_t *tp);
/* Tells every peer, on both contexts, that this rank aborted the comm
 * (code VMMIPC_ERR_ABORTED) or broke it (another code; `text` says why and
 * names this rank): an END frame. Best effort, bounded: 200 ms in all for
 * the connections whose socket is full. */
void vmmipc__tp_abort_all(vmmipc__tp_t *tp, uint32_t code, const char *text);

/* Counters for vmmipc_comm_stats. */
typedef struct vmmipc__tp_stats {
  uint64_t stale_frames, stale_fds, refused;
} vmmipc__tp_stats_t;
void vmmipc__tp_stats(const vmmipc__tp_t *tp, vmmipc__tp_stats_t *s);

#ifdef __cplusplus
}
#endif
#endif
