/* The transport's codec: frame headers to bytes and back, and the
 * reassembly of messages from frames, with every check a receiver makes.
 * Pure: no sockets, no clocks; the only system call is close() on fds it
 * drops. Fuzzed directly (fuzz/fuzz_frame.c). See docs/dev/transport.md.
 *
 * Header (64 bytes, little-endian):
 *   offset size field
 *        0    4 magic        "vmtp" (0x70746d76)
 *        4    2 version      VMMIPC__FRAME_VERSION
 *        6    2 kind         HELLO, DATA, ABORT, VERDICT or END
 *        8    2 ctx          VMMIPC__CTX_P2P or VMMIPC__CTX_COLL
 *       10    2 reserved     0
 *       12    4 code         ABORT, VERDICT, END: a vmmipc_result_t; else 0
 *       16    4 sender       node rank of the sender
 *       20    4 receiver     node rank the frame is meant for
 *       24    8 comm_id      the communicator's random id
 *       32    8 seq          COLL: the collective's epoch (VERDICT: the agreement's number);
 *                            P2P: message number of the pair; END: 0
 *       40    8 total_bytes  payload bytes of the whole message
 *       48    4 total_fds    fds of the whole message
 *       52    4 index        frame number within the message, from 0
 *       56    4 frame_bytes  payload bytes in this frame
 *       60    4 frame_fds    fds attached to this frame (one SCM_RIGHTS message)
 */
#ifndef VMMIPC_TRANSPORT_CODEC_H
#define VMMIPC_TRANSPORT_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__FRAME_MAGIC 0x70746d76u
#define VMMIPC__FRAME_VERSION 3u /* 3 (0.3): coll/msg.h collective payloads; VERDICT and END frames */
#define VMMIPC__FRAME_HEADER_BYTES 64
/* Payload per frame: far below the default socket buffer, so a frame never
 * fails with EMSGSIZE. */
#define VMMIPC__FRAME_MAX_BYTES (32 * 1024)
/* The kernel's SCM_MAX_FD. */
#define VMMIPC__FRAME_MAX_FDS 253
#define VMMIPC__MSG_MAX_BYTES ((uint64_t)1 << 30)
#define VMMIPC__MSG_MAX_FDS (1u << 20)
/* Longest text an ABORT carries. */
#define VMMIPC__ABORT_MAX_BYTES 1023u

/* VERDICT: the agreement's verdict from its collector to a node peer, on the
 * COLL connection, one frame (no fds), at most VMMIPC__VERDICT_MAX_BYTES.
 * END: the sender aborted the comm (vmmipc_comm_abort): every call on it,
 * past or future, in either context, ends; text only, seq 0. */
enum {
  VMMIPC__KIND_HELLO = 1,
  VMMIPC__KIND_DATA = 2,
  VMMIPC__KIND_ABORT = 3,
  VMMIPC__KIND_VERDICT = 4,
  VMMIPC__KIND_END = 5
};
#define VMMIPC__VERDICT_MAX_BYTES 2048u
/* Contexts, as in MPI: point-to-point traffic and collectives never match
 * each other (each has its own connection per pair of ranks, too). */
enum { VMMIPC__CTX_P2P = 1, VMMIPC__CTX_COLL = 2 };

typedef struct vmmipc__frame {
  uint16_t kind, ctx;
  uint32_t code;
  uint32_t sender, receiver;
  uint64_t comm_id;
  uint64_t seq;
  uint64_t total_bytes;
  uint32_t total_fds;
  uint32_t index;
  uint32_t frame_bytes, frame_fds;
} vmmipc__frame_t;

void vmmipc__frame_encode(const vmmipc__frame_t *f, unsigned char out[VMMIPC__FRAME_HEADER_BYTES]);

/* What the receiver of a connection expects of every frame on it. */
typedef struct vmmipc__frame_expect {
  uint32_t sender, receiver;
  uint64_t comm_id;
  uint16_t ctx; /* 0: any context (the HELLO that says which) */
} vmmipc__frame_expect_t;

/* Decodes and checks one received record of `len` bytes that came with
 * `nfds` fds. Returns 0, or -1 with the reason in why. */
int vmmipc__frame_decode(const void *rec, size_t len, int nfds, const vmmipc__frame_expect_t *want,
                         vmmipc__frame_t *f, char *why, size_t why_cap);

/* Payload bytes and fds of frame `index` of a message, as every sender cuts
 * it: min(32 KiB, bytes left) and min(253, fds left). */
void vmmipc__frame_cut(uint64_t total_bytes, uint32_t total_fds, uint32_t index, uint32_t *bytes, uint32_t *fds);
/* Frames of a message: max(1, ceil(bytes / 32 KiB), ceil(fds / 253)). */
uint64_t vmmipc__frame_count(uint64_t total_bytes, uint32_t total_fds);

/* One stream of messages from one peer in one context. */
typedef struct vmmipc__asm {
  int active;          /* a message is half assembled */
  uint64_t seq;
  uint64_t total_bytes;
  uint32_t total_fds;
  uint32_t next_index;
  uint64_t bytes_done;
  uint32_t fds_done;
  unsigned char *bytes;
  int *fds;
  uint64_t bytes_cap;  /* the buffers grow as frames arrive */
  uint32_t fds_cap;
  int skipping;        /* the rest of message skip_seq is dropped (it failed here) */
  uint64_t skip_seq;
} vmmipc__asm_t;

typedef enum vmmipc__asm_rc {
  VMMIPC__ASM_MORE,  /* taken; the message is not complete */
  VMMIPC__ASM_DONE,  /* a message is complete: vmmipc__asm_take it */
  VMMIPC__ASM_ABORT, /* the peer gave up on message f->seq (its text is the payload) */
  VMMIPC__ASM_STALE, /* a frame of an earlier message: dropped with its fds */
  VMMIPC__ASM_BAD,   /* the stream breaks the protocol: why says how */
  VMMIPC__ASM_NOMEM
} vmmipc__asm_rc_t;

/* Feeds one decoded DATA or ABORT frame with its payload and fds (whose
 * ownership passes to the assembler: kept, or closed when dropped).
 * Messages with seq < lo are stale; seq > hi breaks the protocol. *stale_fds
 * grows by the fds closed as stale. */
vmmipc__asm_rc_t vmmipc__asm_feed(vmmipc__asm_t *a, uint64_t lo, uint64_t hi, const vmmipc__frame_t *f,
                                  const void *payload, const int *fds, int nfds, uint64_t *stale_fds, char *why,
                                  size_t why_cap);
/* Hands over the complete message (the caller frees bytes and fds, and
 * owns the fds); the assembler is ready for the next one. */
void vmmipc__asm_take(vmmipc__asm_t *a, unsigned char **bytes, size_t *num_bytes, int **fds, int *num_fds,
                      uint64_t *seq);
/* Drops the half-assembled message, if any (its fds are closed and added
 * to *stale_fds), and skips its remaining frames if `skip`. */
void vmmipc__asm_drop(vmmipc__asm_t *a, int skip, uint64_t *stale_fds);
/* Drops the half-assembled message, if any, and every later frame of
 * message seq (which failed here: its fds were cut short, say). */
void vmmipc__asm_skip(vmmipc__asm_t *a, uint64_t seq, uint64_t *stale_fds);
/* Frees everything the assembler holds (closing its fds). */
void vmmipc__asm_reset(vmmipc__asm_t *a);

/* Closes every fd in fds[0..n), keeping errno. */
void vmmipc__close_fds(const int *fds, int n);

#ifdef __cplusplus
}
#endif
#endif
