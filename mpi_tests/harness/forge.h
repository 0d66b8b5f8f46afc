// A frame put straight into a node peer's collective socket, as a buggy or
// hostile rank of the job could send it (test_agree, test_forged): the
// receiver takes it for one of the library's own.
#ifndef VMMIPC_TEST_FORGE_H
#define VMMIPC_TEST_FORGE_H

#include <cstdint>
#include <cstring>

#include "comm/comm.h"
#include "transport/codec.h"
#include "transport/conn.h"

namespace vt {

// One frame of `kind` and sequence `seq` from this rank to comm rank `to`
// (a node peer), carrying `bytes` and `fds` whole. Returns
// vmmipc__conn_send's result, or -1 if they do not fit one frame.
inline int SendCollFrame(vmmipc_comm_t c, int to, uint16_t kind, uint64_t seq, const void *bytes, size_t num_bytes,
                         const int *fds, int num_fds) {
  int p = c->node_of[to];
  vmmipc__frame_t f;
  memset(&f, 0, sizeof f);
  f.kind = kind;
  f.ctx = VMMIPC__CTX_COLL;
  f.sender = static_cast<uint32_t>(c->node_rank);
  f.receiver = static_cast<uint32_t>(p);
  f.comm_id = vmmipc__tp_conn(c->tp)->comm_id;
  f.seq = seq;
  f.total_bytes = num_bytes;
  f.total_fds = static_cast<uint32_t>(num_fds);
  vmmipc__frame_cut(f.total_bytes, f.total_fds, 0, &f.frame_bytes, &f.frame_fds);
  if (f.frame_bytes != num_bytes || f.frame_fds != static_cast<uint32_t>(num_fds)) return -1;
  unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
  vmmipc__frame_encode(&f, head);
  return vmmipc__conn_send(vmmipc__tp_coll_fd(c->tp, p), head, sizeof head, bytes, num_bytes, fds, num_fds);
}

}  // namespace vt

#endif
