/* Sealing the connections of a comm that failed on this rank (aborted or
 * broken): every later call on it fails at once, so nothing will read them
 * again, yet a peer still inside the failed call may send this rank its
 * descriptors after the call's own drop (vmmipc__tp_drop_stale). Each fd
 * queued in a socket keeps the sender's device memory in use until the
 * comm's destroy (chaos seeds 11015 and 11051 without MPS: 10 MiB over an
 * aborted allgather_map).
 *
 * Shutting the receiving side makes every later send to this rank fail at
 * once (EPIPE: the sender rolls back and frees), then what came before is
 * drained. The connections stay open otherwise: a peer sees no hang-up,
 * and what this rank sent it (the END frame of an abort or of a break it
 * told) stays readable there. A break that told nobody (a local one) now
 * shows to a peer's next send as a hang-up at once, not as a timeout. */
#include <sys/socket.h>

#include "transport/tp.h"
#include "transport/tp_priv.h"

/* Reads what is queued on fd until nothing is left (after the shutdown,
 * an end of file), closing the fds that came: counted as stale, as a later
 * call would have. */
static void drain(vmmipc__tp_t *tp, int fd) {
  for (;;) {
    vmmipc__rec_t rec;
    int e = vmmipc__conn_recv(fd, tp->rbuf, tp->rbuf_cap, &rec);
    if (e) return;
    tp->stale_fds += (uint64_t)rec.nfds;
    vmmipc__close_fds(rec.fds, rec.nfds);
    if (vmmipc__rec_eof(&rec)) return;
    tp->stale_frames++;
  }
}

void vmmipc__tp_seal(vmmipc__tp_t *tp) {
  if (!tp || !tp->conn) return;
  for (int p = 0; p < tp->conn->node_size; p++)
    for (int ctx = VMMIPC__CTX_P2P; ctx <= VMMIPC__CTX_COLL; ctx++) {
      int fd = tp->conn->fd[ctx - 1][p];
      if (fd < 0) continue;
      shutdown(fd, SHUT_RD); /* first: nothing can come after the drain */
      drain(tp, fd);
      vmmipc__asm_drop(&tp->rx[ctx - 1][p], 0, &tp->stale_fds); /* a message cut short */
    }
}
