/* The transport's wire format: one frame per SOCK_SEQPACKET record.
 *
 * A frame is a fixed 48-byte header (little-endian fields, layout below),
 * followed by `frame_bytes` bytes of payload, with `frame_fds` descriptors
 * attached as one SCM_RIGHTS control message. A message is the frames
 * 0..n-1 that share one sequence number; see docs/transport.md.
 *
 *   offset size field
 *        0    4 magic        "vmtp" (0x70746d76 read as little-endian)
 *        4    2 version      VMMIPC__TP_VERSION
 *        6    2 kind         VMMIPC__TP_KIND_DATA or VMMIPC__TP_KIND_ABORT
 *        8    4 sender       node rank of the sender
 *       12    4 receiver     node rank the frame is meant for
 *       16    8 seq          per (sender -> receiver) message number, from 0
 *       24    8 total_bytes  payload bytes of the whole message
 *       32    4 total_fds    fds of the whole message
 *       36    4 index        frame number within the message, from 0
 *       40    4 frame_bytes  payload bytes in this frame (<= VMMIPC__TP_FRAME_MAX_BYTES)
 *       44    4 frame_fds    fds in this frame (<= VMMIPC__TP_MAX_FDS_PER_MSG)
 *
 * Internal: shared by tp.c, frame.c, wait.c and the transport tests. */
#ifndef VMMIPC_TRANSPORT_FRAME_H
#define VMMIPC_TRANSPORT_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "transport/tp.h" /* tp.h has no C++ guard of its own */

#define VMMIPC__TP_MAGIC 0x70746d76u /* "vmtp" */
#define VMMIPC__TP_VERSION 1u
#define VMMIPC__TP_KIND_DATA 1u
#define VMMIPC__TP_KIND_ABORT 2u
#define VMMIPC__TP_HEADER_BYTES 48
/* Payload bytes per frame: far below the default socket send buffer, so one
 * sendmsg of a whole frame never fails with EMSGSIZE. */
#define VMMIPC__TP_FRAME_MAX_BYTES (32 * 1024)
/* Limits on one message (checked by the sender and the receiver). */
#define VMMIPC__TP_MAX_MSG_BYTES ((uint64_t)1 << 30)
#define VMMIPC__TP_MAX_MSG_FDS (1 << 20)
/* Longest text carried by an ABORT frame. */
#define VMMIPC__TP_ABORT_MAX_BYTES 1023

typedef struct vmmipc__tp_hdr {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t sender;
  uint32_t receiver;
  uint64_t seq;
  uint64_t total_bytes;
  uint32_t total_fds;
  uint32_t index;
  uint32_t frame_bytes;
  uint32_t frame_fds;
} vmmipc__tp_hdr_t;

void vmmipc__tp_hdr_encode(const vmmipc__tp_hdr_t *h, unsigned char out[VMMIPC__TP_HEADER_BYTES]);
void vmmipc__tp_hdr_decode(const unsigned char in[VMMIPC__TP_HEADER_BYTES], vmmipc__tp_hdr_t *h);

/* Sends one frame (header + h->frame_bytes of payload + h->frame_fds fds) with
 * one sendmsg(MSG_NOSIGNAL), retrying on EINTR. The socket's own blocking
 * mode applies. Returns 0 or an errno value (EAGAIN when it would block). */
int vmmipc__tp_frame_send(int sock, const vmmipc__tp_hdr_t *h, const void *payload, const int *fds);

/* One received record: its length, flags and the fds that came with it
 * (already owned by this process: they must be kept or closed). */
typedef struct vmmipc__tp_rframe {
  size_t len;        /* bytes received, header included; 0 means end of file */
  int flags;         /* msg_flags: MSG_TRUNC, MSG_CTRUNC */
  int odd_cmsg;      /* a control message other than SCM_RIGHTS came along */
  int nfds;
  int fds[VMMIPC__TP_MAX_FDS_PER_MSG];
} vmmipc__tp_rframe_t;

/* Receives one record into buf (cap bytes) with recvmsg(MSG_CMSG_CLOEXEC),
 * retrying on EINTR. Returns 0 or an errno value (EAGAIN when nothing is
 * queued). On an error no fd is left open. */
int vmmipc__tp_frame_recv(int sock, void *buf, size_t cap, vmmipc__tp_rframe_t *rf);

/* Closes every fd in fds[0..n). */
void vmmipc__tp_close_fds(const int *fds, int n);

#ifdef __cplusplus
}
#endif
#endif
