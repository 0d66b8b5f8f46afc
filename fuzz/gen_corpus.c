/* Writes the seed corpus of the fuzz targets from genuine messages:
 *   <out>/desc/   descriptors that vmmipc_export made of stand-in buffers of
 *                 1 to 3 chunks (and an empty one), packed with
 *                 vmmipc_desc_pack, behind the control byte of fuzz.h;
 *   <out>/frame/  the records a sender puts on a connection, cut and encoded
 *                 by the transport's own codec as exchange.c does: collective
 *                 messages encoded by coll/msg.c (with and without a
 *                 descriptor, its fds left out, freed and held identity
 *                 lists, "drop everything"), point-to-point descriptors,
 *                 single- and multi-frame messages, a genuine ABORT, VERDICT
 *                 and END frames, point-to-point numbering, epochs that
 *                 advance, a message cut short by MSG_CTRUNC, a HELLO.
 * Usage: vmmipc_fuzz_corpus <out-dir>   (VMMIPC_CUDA_DRIVER: the stand-in) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "coll/msg.h"
#include "common/error.h"
#include "common/host.h"
#include "common/le.h"
#include "desc/desc.h"
#include "fuzz.h"
#include "transport/codec.h"
#include "vmmipc.h"

static const char *g_out;

static void write_file(const char *sub, const char *name, const unsigned char *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", g_out, sub);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%s", g_out, sub, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "gen_corpus: writing %s: %s\n", path, strerror(errno));
    exit(1);
  }
}

/* A growing byte string. */
typedef struct bytes {
  unsigned char *p;
  size_t n, cap;
} bytes_t;

static void put(bytes_t *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

/* One record of fuzz_frame's input: op, length, header and payload. */
static void record(bytes_t *b, unsigned op, const vmmipc__frame_t *f, const unsigned char *payload) {
  unsigned char head[VMMIPC__FRAME_HEADER_BYTES], pre[3];
  vmmipc__frame_encode(f, head);
  size_t len = sizeof head + f->frame_bytes;
  pre[0] = (unsigned char)op;
  vmmipc__put16(pre + 1, (uint16_t)len);
  put(b, pre, sizeof pre);
  put(b, head, sizeof head);
  if (f->frame_bytes) put(b, payload, f->frame_bytes);
}

/* Every frame of one message, as send_progress cuts it. */
static void message(bytes_t *b, unsigned op, uint16_t ctx, uint64_t seq, const unsigned char *bytes, size_t nbytes,
                    uint32_t nfds) {
  vmmipc__frame_t f;
  memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_DATA;
  f.ctx = ctx;
  f.sender = 1;
  f.receiver = 0;
  f.comm_id = FUZZ_COMM_ID;
  f.seq = seq;
  f.total_bytes = nbytes;
  f.total_fds = nfds;
  uint64_t frames = vmmipc__frame_count(nbytes, nfds);
  for (uint32_t i = 0; i < frames; i++) {
    f.index = i;
    vmmipc__frame_cut(nbytes, nfds, i, &f.frame_bytes, &f.frame_fds);
    record(b, i == 0 ? op : 0, &f, f.frame_bytes ? bytes + (size_t)i * VMMIPC__FRAME_MAX_BYTES : NULL);
  }
}

/* A frame of one of the one-frame kinds (ABORT, VERDICT, END): no fds. */
static void text_frame(bytes_t *b, uint16_t kind, uint16_t ctx, uint64_t seq, uint32_t code,
                       const unsigned char *payload, size_t n) {
  vmmipc__frame_t f;
  memset(&f, 0, sizeof f);
  f.kind = kind;
  f.ctx = ctx;
  f.code = code;
  f.sender = 1;
  f.receiver = 0;
  f.comm_id = FUZZ_COMM_ID;
  f.seq = seq;
  f.frame_bytes = (uint32_t)n;
  f.total_bytes = n;
  record(b, 0, &f, payload);
}

/* A collective message (coll/msg.c) of this process, as one exchange sends it. */
static void coll_message(bytes_t *b, unsigned op, uint64_t epoch, uint32_t flags, const struct vmmipc_desc *d,
                         const vmmipc__freed_id_t *freed, uint32_t nfreed, const vmmipc__freed_id_t *have,
                         uint32_t nhave) {
  vmmipc__cmsg_t m = {flags, vmmipc__process_nonce(), freed, nfreed, have, nhave, d};
  size_t n = vmmipc__cmsg_bytes(&m);
  unsigned char *bytes = malloc(n);
  if (!bytes) abort();
  vmmipc__cmsg_encode(&m, bytes);
  uint32_t nfds = d && !(flags & VMMIPC__CMSG_NO_FDS) ? (uint32_t)d->num_chunks : 0;
  message(b, op, VMMIPC__CTX_COLL, epoch, bytes, n, nfds);
  free(bytes);
}

/* An agreement's verdict (comm/agree.c: code, failing rank, broken, blamed
 * rank, driver and OS errors, then the text with its NUL). */
static void verdict_frame(bytes_t *b, uint64_t k, uint32_t code, uint32_t failing, const char *text) {
  unsigned char v[VMMIPC__VERDICT_MAX_BYTES];
  size_t n = strlen(text) + 1;
  if (24 + n > sizeof v) n = sizeof v - 24;
  memset(v, 0, 24);
  vmmipc__put32(v, code);
  vmmipc__put32(v + 4, failing);
  vmmipc__put32(v + 8, code != 0);
  vmmipc__put32(v + 12, failing);
  memcpy(v + 24, text, n);
  text_frame(b, VMMIPC__KIND_VERDICT, VMMIPC__CTX_COLL, k, code, v, 24 + n);
}

static void abort_frame(bytes_t *b, uint16_t ctx, uint64_t seq, vmmipc_result_t code, const char *text) {
  vmmipc__frame_t f;
  memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_ABORT;
  f.ctx = ctx;
  f.code = (uint32_t)code;
  f.sender = 1;
  f.receiver = 0;
  f.comm_id = FUZZ_COMM_ID;
  f.seq = seq;
  size_t n = strlen(text);
  if (n > VMMIPC__ABORT_MAX_BYTES) n = VMMIPC__ABORT_MAX_BYTES;
  f.frame_bytes = (uint32_t)n;
  f.total_bytes = n;
  record(b, 0, &f, (const unsigned char *)text);
}

static void save_frames(const char *name, unsigned mode, bytes_t *b) {
  unsigned char m = (unsigned char)mode;
  bytes_t all = {0, 0, 0};
  put(&all, &m, 1);
  put(&all, b->p, b->n);
  write_file("frame", name, all.p, all.n);
  free(all.p);
  b->n = 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  if (vmmipc_set_device(0)) {
    fprintf(stderr, "gen_corpus: %s (set VMMIPC_CUDA_DRIVER to the stand-in)\n", vmmipc_last_error());
    return 1;
  }
  /* Descriptors of 0 to 3 chunks, grown one granule at a time. */
  const size_t gran = (size_t)2 << 20;
  unsigned char *packed[4] = {0};
  size_t packed_len[4] = {0};
  int packed_fds[4] = {0};
  vmmipc_buf_t bufs[4] = {0};  /* kept until the end: freeing them would note them freed */
  vmmipc_desc_t descs[4] = {0};
  for (int chunks = 0; chunks <= 3; chunks++) {
    vmmipc_buf_t buf = NULL;
    vmmipc_desc_t d = NULL;
    /* The last chunk only partly used, as most buffers are. */
    size_t size = chunks ? (size_t)(chunks - 1) * gran + 4096 * (size_t)chunks : 0;
    if (vmmipc_alloc(chunks ? (size < gran ? size : gran) : 0, &buf)) goto fail;
    for (int c = 2; c <= chunks; c++)
      if (vmmipc_grow(buf, c == chunks ? size : (size_t)c * gran)) goto fail;
    if (vmmipc_export(buf, &d)) goto fail;
    size_t nb = 0;
    int nf = 0;
    if (vmmipc_desc_pack(d, NULL, &nb, NULL, &nf)) goto fail;
    packed[chunks] = malloc(nb + 1);
    int fds[8];
    packed[chunks][0] = FUZZ_DESC_FDS_GENUINE | FUZZ_DESC_STAMP_HOST;
    if (vmmipc_desc_pack(d, packed[chunks] + 1, &nb, fds, &nf)) goto fail;
    packed_len[chunks] = nb;
    packed_fds[chunks] = nf;
    char name[64];
    snprintf(name, sizeof name, "export-%d-chunks", chunks);
    write_file("desc", name, packed[chunks], nb + 1);
    if (chunks == 2) { /* the same, imported read-only */
      packed[chunks][0] |= FUZZ_DESC_READ_ONLY;
      write_file("desc", "export-2-chunks-read-only", packed[chunks], nb + 1);
      packed[chunks][0] &= (unsigned char)~FUZZ_DESC_READ_ONLY;
    }
    bufs[chunks] = buf;
    descs[chunks] = d;
    continue;
  fail:
    fprintf(stderr, "gen_corpus: a buffer of %d chunks: %s\n", chunks, vmmipc_last_error());
    return 1;
  }

  /* Genuine freed identities: a buffer exported, grown (its first layout
   * is gone), exported again and freed. */
  vmmipc__freed_id_t freed[8];
  uint32_t nfreed = 0;
  {
    vmmipc_buf_t gone = NULL;
    vmmipc_desc_t d1 = NULL, d2 = NULL;
    uint64_t next = 0;
    int overflow = 0;
    if (vmmipc_alloc(gran, &gone) || vmmipc_export(gone, &d1) || vmmipc_grow(gone, 2 * gran) ||
        vmmipc_export(gone, &d2) || vmmipc_buf_free(gone)) {
      fprintf(stderr, "gen_corpus: a freed buffer: %s\n", vmmipc_last_error());
      return 1;
    }
    vmmipc_desc_free(d1);
    vmmipc_desc_free(d2);
    nfreed = (uint32_t)vmmipc__freed_since(0, freed, 8, &next, &overflow);
    if (nfreed != 2 || overflow) {
      fprintf(stderr, "gen_corpus: %u freed identities noted, 2 expected\n", (unsigned)nfreed);
      return 1;
    }
  }
  /* The identities of the exported buffers, as a peer that maps them lists them. */
  vmmipc__freed_id_t held[3];
  for (int i = 1; i <= 3; i++) held[i - 1] = (vmmipc__freed_id_t){descs[i]->serial, descs[i]->generation};
  /* Many identities: a message of two frames by its bytes. */
  const uint32_t nmany = VMMIPC__FRAME_MAX_BYTES / 16 + 100;
  vmmipc__freed_id_t *many = malloc(nmany * sizeof *many);
  if (!many) abort();
  for (uint32_t i = 0; i < nmany; i++) many[i] = (vmmipc__freed_id_t){held[0].serial + 100 + i, 1};

  bytes_t b = {0, 0, 0};
  /* A collective: one descriptor per peer. */
  for (int chunks = 0; chunks <= 3; chunks++) {
    coll_message(&b, 0, 1, 0, descs[chunks], NULL, 0, NULL, 0);
    char name[64];
    snprintf(name, sizeof name, "coll-desc-%d-chunks", chunks);
    save_frames(name, FUZZ_MODE_COLL, &b);
  }
  /* bcast_map's "nothing for you" (only notices), then the next epoch's descriptor. */
  coll_message(&b, 0, 1, 0, NULL, NULL, 0, NULL, 0);
  coll_message(&b, FUZZ_OP_NEXT_EPOCH, 2, 0, descs[3], NULL, 0, NULL, 0);
  save_frames("coll-none-then-desc", FUZZ_MODE_COLL, &b);
  /* A map collective's two rounds: what the sender holds, then a
   * descriptor the receiver holds (no fds) and one it does not. */
  coll_message(&b, 0, 1, 0, NULL, NULL, 0, held, 3);
  coll_message(&b, FUZZ_OP_NEXT_EPOCH, 2, VMMIPC__CMSG_NO_FDS, descs[2], NULL, 0, NULL, 0);
  coll_message(&b, FUZZ_OP_NEXT_EPOCH, 3, 0, descs[1], NULL, 0, NULL, 0);
  save_frames("coll-held-then-no-fds", FUZZ_MODE_COLL, &b);
  /* Freed notices with a descriptor, then "drop every mapping of mine". */
  coll_message(&b, 0, 1, 0, descs[2], freed, nfreed, NULL, 0);
  coll_message(&b, FUZZ_OP_NEXT_EPOCH, 2, VMMIPC__CMSG_FREED_ALL, NULL, NULL, 0, NULL, 0);
  save_frames("coll-freed-then-all", FUZZ_MODE_COLL, &b);
  /* Every list at once, in a message of two frames by bytes. */
  coll_message(&b, 0, 1, 0, descs[3], freed, nfreed, many, nmany);
  save_frames("coll-multi-frame", FUZZ_MODE_COLL, &b);
  /* Bytes that are no message, in two frames by fds (the receiver refuses them). */
  size_t big_len = VMMIPC__FRAME_MAX_BYTES + 1000;
  unsigned char *big = malloc(big_len);
  for (size_t i = 0; i < big_len; i++) big[i] = (unsigned char)(i * 131 + 7);
  message(&b, 0, VMMIPC__CTX_COLL, 1, big, big_len, 300);
  save_frames("coll-multi-frame-fds", FUZZ_MODE_COLL, &b);
  /* A peer that gave up: the genuine text of a failed import. */
  vmmipc_desc_t none = NULL;
  vmmipc_desc_unpack(packed[1] + 1, packed_len[1] - 1, NULL, 0, &none); /* truncated: refused */
  char text[VMMIPC__ABORT_MAX_BYTES + 1];
  snprintf(text, sizeof text, "%s", vmmipc_last_error());
  const size_t last_frame = 3 + VMMIPC__FRAME_HEADER_BYTES + (size_t)(nmany * 16u + 32u + nfreed * 16u +
                                                                      vmmipc__desc_wire_bytes(descs[3]) -
                                                                      VMMIPC__FRAME_MAX_BYTES);
  coll_message(&b, 0, 1, 0, descs[3], freed, nfreed, many, nmany);
  b.n -= last_frame; /* the last frame never went */
  abort_frame(&b, VMMIPC__CTX_COLL, 1, VMMIPC_ERR_INVALID_DESC, text);
  save_frames("coll-abort-mid-message", FUZZ_MODE_COLL, &b);
  /* Frames of an earlier call, then the current one's message. */
  coll_message(&b, 0, 1, 0, NULL, freed, nfreed, many, nmany);
  b.n -= last_frame - vmmipc__desc_wire_bytes(descs[3]); /* half of epoch 1's message */
  coll_message(&b, FUZZ_OP_NEXT_EPOCH, 2, 0, descs[2], NULL, 0, NULL, 0);
  save_frames("coll-stale-then-current", FUZZ_MODE_COLL, &b);
  /* Agreements: a success verdict between two calls, then a failure. */
  verdict_frame(&b, 1, 0, UINT32_MAX, "");
  coll_message(&b, FUZZ_OP_NEXT_EPOCH, 2, 0, descs[1], NULL, 0, NULL, 0);
  verdict_frame(&b, 2, VMMIPC_ERR_INVALID_DESC, 1, text);
  save_frames("coll-verdicts", FUZZ_MODE_COLL, &b);
  /* vmmipc_comm_abort on the sender: END in the middle of a message. */
  {
    char end[160];
    snprintf(end, sizeof end, "rank %d aborted the communicator (vmmipc_comm_abort)", 1);
    coll_message(&b, 0, 1, 0, descs[3], freed, nfreed, many, nmany);
    b.n -= last_frame;
    text_frame(&b, VMMIPC__KIND_END, VMMIPC__CTX_COLL, 0, VMMIPC_ERR_ABORTED, (const unsigned char *)end,
               strlen(end));
    save_frames("coll-end-mid-message", FUZZ_MODE_COLL, &b);
    message(&b, 0, VMMIPC__CTX_P2P, 0, packed[1] + 1, packed_len[1], 1);
    text_frame(&b, VMMIPC__KIND_END, VMMIPC__CTX_P2P, 0, VMMIPC_ERR_ABORTED, (const unsigned char *)end,
               strlen(end));
    save_frames("p2p-end", 0, &b);
  }
  /* Point to point (comm/p2p.c: a bare descriptor): messages 0, 1, a gap, and an old one. */
  message(&b, 0, VMMIPC__CTX_P2P, 0, packed[1] + 1, packed_len[1], 1);
  message(&b, 0, VMMIPC__CTX_P2P, 1, packed[3] + 1, packed_len[3], 3);
  message(&b, 0, VMMIPC__CTX_P2P, 3, packed[2] + 1, packed_len[2], 2);
  message(&b, 0, VMMIPC__CTX_P2P, 2, packed[1] + 1, packed_len[1], 1);
  save_frames("p2p-sequence", 0, &b);
  /* The fds of a frame cut short: its message is skipped, the next taken. */
  message(&b, FUZZ_OP_CTRUNC, VMMIPC__CTX_P2P, 0, big, big_len, 300);
  message(&b, 0, VMMIPC__CTX_P2P, 1, packed[2] + 1, packed_len[2], 2);
  save_frames("p2p-ctrunc-then-next", 0, &b);
  /* The mesh's first frame: a HELLO (refused on a data connection). */
  {
    vmmipc__frame_t h;
    memset(&h, 0, sizeof h);
    h.kind = VMMIPC__KIND_HELLO;
    h.ctx = VMMIPC__CTX_COLL;
    h.sender = 1;
    h.comm_id = FUZZ_COMM_ID;
    record(&b, 0, &h, NULL);
    save_frames("hello", FUZZ_MODE_COLL | FUZZ_MODE_ANY_CTX, &b);
  }
  free(b.p);
  free(big);
  free(many);
  for (int i = 0; i < 4; i++) {
    free(packed[i]);
    vmmipc_desc_free(descs[i]);
    vmmipc_buf_free(bufs[i]);
  }
  return 0;
}
