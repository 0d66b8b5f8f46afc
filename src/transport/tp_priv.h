/* The transport's state, shared by its own files (exchange.c, verdict.c);
 * nothing above the transport includes this. */
#ifndef VMMIPC_TRANSPORT_TP_PRIV_H
#define VMMIPC_TRANSPORT_TP_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "transport/codec.h"
#include "transport/conn.h"

struct vmmipc__tp {
  vmmipc__conn_t *conn;
  int timeout_ms;
  vmmipc__asm_t *rx[2];     /* [ctx - 1][node rank]: the stream from that peer */
  uint64_t *p2p_next_out;   /* [node rank]: number of the next message to it */
  uint64_t *p2p_next_in;    /* [node rank]: lowest number still expected from it */
  unsigned char *rbuf;      /* one frame: header + the largest payload + 1 */
  size_t rbuf_cap;
  uint64_t stale_frames, stale_fds;
  const int *aborted;       /* set by vmmipc__tp_watch_abort: non-zero ends every wait */
  int aborted_by;           /* node rank whose END frame (comm aborted) arrived, or -1 */
  /* tell_peers' tables (exchange.c), made with the transport so that a
   * failure is always told: [node rank] each. */
  char *tell_todo;
  uint64_t *tell_seq;
  struct pollfd *tell_pfd;
  /* One exchange's working tables (exchange.c), made with the transport too:
   * calls on a comm never overlap, and a well-formed exchange has at most
   * one send and one receive per peer, so an exchange allocates nothing
   * before it runs and cannot fail for memory without telling its peers. */
  char *x_seen;             /* [2 x node size]: sends, then receives, per peer */
  struct vmmipc__tp_sop *x_sops; /* [node size] */
  struct vmmipc__tp_rop *x_rops; /* [2 x node size]: receives, then peers only sent to */
  struct pollfd *x_pfd;     /* [4 x node size] */
  char *x_hears;            /* [node size] */
  char *x_ends;             /* [node size]: P2P only, peers whose END is watched */
};

/* Closes both connections to node rank p (vmmipc__conn_drop) and drops
 * the half messages of p's streams with them, their fds closed and counted
 * as stale: nothing reads those connections again, so no later call or
 * cleanup would (each fd holds p's device memory). */
void vmmipc__tp_drop_peer(struct vmmipc__tp *tp, int p, const char *why);

/* The error of an END frame from p (decoded, its text after the header):
 * an abort (VMMIPC_ERR_ABORTED, tp->aborted_by set) or a break
 * (VMMIPC_ERR_PEER with the breaking rank's text); drops the connection. */
vmmipc_result_t vmmipc__tp_end_error(struct vmmipc__tp *tp, int p, const vmmipc__frame_t *f, const unsigned char *text);

#endif
