/* libFuzzer target: the transport's codec (src/transport/codec.c). Each
 * input is a sequence of received records (fuzz.h) that this target treats
 * as exchange.c's receive path does: decode and check each record, feed
 * DATA and ABORT frames to the peer's assembler with real fds (duplicates
 * of a pipe: an fd is known by its number while it is open) attached as
 * the header says, skip a message whose fds were cut short, drop a VERDICT,
 * start over after a protocol break or an END. A complete message is
 * decoded as its receiver does: a collective one with vmmipc__cmsg_decode
 * (coll/xchg.c), a point-to-point one with vmmipc__desc_adopt (comm/p2p.c).
 * Checked after every record or input:
 *   - encode(decode(x)) == x for every accepted header, collective message
 *     and descriptor;
 *   - a complete message holds exactly the payloads and fds of the frames
 *     the assembler took for it, in order (a shadow copy tracks them); a
 *     decoded descriptor owns exactly those fds, and after the decode every
 *     one is closed or owned;
 *   - every fd attached is delivered, counted stale, or closed on a
 *     refusal, and the count of open fds is back where it was (abort()
 *     otherwise). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "coll/msg.h"
#include "common/le.h"
#include "desc/desc.h"
#include "fuzz.h"
#include "transport/codec.h"

static int g_pipe = -1; /* every attached fd is a fresh duplicate of it */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC)) abort();
  close(p[1]);
  g_pipe = p[0];
  return 0;
}

/* What the assembler should hold for the message under way. */
typedef struct shadow {
  unsigned char *bytes;
  size_t nbytes, cap;
  int *fds; /* the numbers of the fds taken, in order */
  size_t nfds, fcap;
} shadow_t;

static void shadow_reset(shadow_t *s) { s->nbytes = s->nfds = 0; }

static void shadow_add(shadow_t *s, const unsigned char *p, size_t n, const int *fds, size_t k) {
  if (s->nbytes + n > s->cap) {
    s->cap = (s->nbytes + n) * 2;
    s->bytes = realloc(s->bytes, s->cap);
    if (!s->bytes) abort();
  }
  if (n) memcpy(s->bytes + s->nbytes, p, n);
  s->nbytes += n;
  if (s->nfds + k > s->fcap) {
    s->fcap = (s->nfds + k) * 2;
    s->fds = realloc(s->fds, s->fcap * sizeof *s->fds);
    if (!s->fds) abort();
  }
  if (k) memcpy(s->fds + s->nfds, fds, k * sizeof *fds);
  s->nfds += k;
}

/* Decodes a complete message as its receiver does, which takes its fds:
 * each ends up owned by the decoded descriptor, or closed. */
static void consume(uint16_t ctx, const unsigned char *b, size_t nb, int *mf, int nm) {
  vmmipc__cmsg_in_t in;
  memset(&in, 0, sizeof in);
  vmmipc_desc_t d = NULL;
  vmmipc_result_t r = ctx == VMMIPC__CTX_COLL ? vmmipc__cmsg_decode(b, nb, mf, nm, &in)
                                              : vmmipc__desc_adopt(b, nb, mf, nm, &d);
  if (ctx == VMMIPC__CTX_COLL) d = in.desc;
  if (r) {
    FUZZ_CHECK(r == VMMIPC_ERR_INVALID_DESC || r == VMMIPC_ERR_NO_MEMORY, "decode: %d (%s)", (int)r,
               vmmipc_last_error());
    FUZZ_CHECK(d == NULL && in.freed == NULL && in.have == NULL, "a refused message was returned");
    FUZZ_CHECK(vmmipc_last_error()[0] != '\0', "a refused message without a reason");
  } else {
    const int with_fds = ctx == VMMIPC__CTX_P2P || ((in.flags & VMMIPC__CMSG_DESC) && !(in.flags & VMMIPC__CMSG_NO_FDS));
    FUZZ_CHECK(ctx == VMMIPC__CTX_P2P || (d != NULL) == ((in.flags & VMMIPC__CMSG_DESC) != 0),
               "flags 0x%x, but %s descriptor", (unsigned)in.flags, d ? "a" : "no");
    FUZZ_CHECK(with_fds ? d && d->num_chunks == nm : nm == 0, "%d fds taken by a message that %s", nm,
               with_fds ? "owns them" : "has none");
    for (int i = 0; d && i < d->num_chunks; i++)
      FUZZ_CHECK(d->fds[i] == (with_fds ? mf[i] : -1), "chunk %d of %d holds fd %d", i, d->num_chunks, d->fds[i]);
    /* Round trip: the same bytes again. */
    size_t n = 0;
    vmmipc__cmsg_t m = {in.flags, in.nonce, in.freed, in.num_freed, in.have, in.num_have, d};
    n = ctx == VMMIPC__CTX_COLL ? vmmipc__cmsg_bytes(&m) : vmmipc__desc_wire_bytes(d);
    FUZZ_CHECK(n == nb, "decoded %zu bytes, encoded again %zu", nb, n);
    unsigned char *again = malloc(n ? n : 1);
    if (!again) abort();
    if (ctx == VMMIPC__CTX_COLL)
      vmmipc__cmsg_encode(&m, again);
    else
      vmmipc__desc_encode(d, again);
    FUZZ_CHECK(memcmp(again, b, n) == 0, "encode(decode(x)) != x for a message of %zu bytes", nb);
    free(again);
  }
  if (ctx == VMMIPC__CTX_COLL)
    vmmipc__cmsg_in_free(&in);
  else
    vmmipc_desc_free(d);
  for (int i = 0; i < nm; i++)
    FUZZ_CHECK(fcntl(mf[i], F_GETFD) < 0 && errno == EBADF, "fd %d of %d still open after the decode", i, nm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int fds_before = fuzz_fd_count();
  const unsigned mode = data[0];
  const uint16_t ctx = (mode & FUZZ_MODE_COLL) ? VMMIPC__CTX_COLL : VMMIPC__CTX_P2P;
  vmmipc__frame_expect_t want = {1, 0, FUZZ_COMM_ID, (mode & FUZZ_MODE_ANY_CTX) ? 0 : ctx};
  vmmipc__asm_t a;
  memset(&a, 0, sizeof a);
  shadow_t sh;
  memset(&sh, 0, sizeof sh);
  uint64_t epoch = 1, next_in = 0, stale = 0;
  /* Where every attached fd went. */
  uint64_t attached = 0, delivered = 0, refused = 0, cut = 0, reset = 0;
  size_t off = 1;
  for (int nrec = 0; nrec < FUZZ_FRAME_MAX_RECORDS && off + 3 <= size; nrec++) {
    const unsigned op = data[off];
    size_t len = vmmipc__get16(data + off + 1);
    off += 3;
    if (len > size - off) len = size - off;
    const unsigned char *rec = data + off;
    off += len;
    if ((op & FUZZ_OP_NEXT_EPOCH) && ctx == VMMIPC__CTX_COLL) epoch++;
    const uint64_t lo = ctx == VMMIPC__CTX_COLL ? epoch : next_in;
    const uint64_t hi = ctx == VMMIPC__CTX_COLL ? epoch : UINT64_MAX;

    /* The fds that came with the record. */
    long nfds = len >= VMMIPC__FRAME_HEADER_BYTES ? (long)vmmipc__get32(rec + 60) : 0;
    switch (op & 3) {
      case 1: nfds++; break;
      case 2: nfds = nfds > 0 ? nfds - 1 : 0; break;
      case 3: nfds = 0; break;
      default: break;
    }
    if (nfds > VMMIPC__FRAME_MAX_FDS) nfds = VMMIPC__FRAME_MAX_FDS; /* the kernel's SCM_MAX_FD */
    if (attached + (uint64_t)nfds > FUZZ_FRAME_MAX_FDS) nfds = 0;
    int fds[VMMIPC__FRAME_MAX_FDS];
    for (long i = 0; i < nfds; i++)
      if ((fds[i] = fcntl(g_pipe, F_DUPFD_CLOEXEC, 0)) < 0) abort();
    attached += (uint64_t)nfds;

    if (op & FUZZ_OP_CTRUNC) { /* as exchange.c: close, and skip that message */
      uint64_t seq = len >= VMMIPC__FRAME_HEADER_BYTES ? vmmipc__get64(rec + 32) : 0;
      vmmipc__close_fds(fds, (int)nfds);
      cut += (uint64_t)nfds;
      vmmipc__asm_skip(&a, seq, &stale);
      continue;
    }
    vmmipc__frame_t f;
    char why[400];
    why[0] = '\0';
    int bad = vmmipc__frame_decode(rec, len, (int)nfds, &want, &f, why, sizeof why) != 0;
    FUZZ_CHECK(!bad || why[0] != '\0', "a refusal without a reason");
    if (bad || f.kind == VMMIPC__KIND_HELLO) { /* exchange.c: the stream is broken */
      vmmipc__close_fds(fds, (int)nfds);
      refused += (uint64_t)nfds;
      reset += a.active ? a.fds_done : 0;
      vmmipc__asm_reset(&a); /* the connection is dropped */
      shadow_reset(&sh);
      continue;
    }
    unsigned char again[VMMIPC__FRAME_HEADER_BYTES];
    vmmipc__frame_encode(&f, again);
    FUZZ_CHECK(memcmp(again, rec, sizeof again) == 0, "encode(decode(x)) != x");
    FUZZ_CHECK(f.frame_bytes == len - VMMIPC__FRAME_HEADER_BYTES && f.frame_fds == (uint32_t)nfds,
               "accepted a frame whose header does not match the record");

    if (f.kind == VMMIPC__KIND_VERDICT) { /* exchange.c: dropped as stale (verdicts go over MPI), the stream goes on */
      FUZZ_CHECK(f.ctx == VMMIPC__CTX_COLL && nfds == 0 && f.frame_bytes <= VMMIPC__VERDICT_MAX_BYTES,
                 "accepted a VERDICT of context %u with %ld fds and %u bytes", (unsigned)f.ctx, nfds,
                 (unsigned)f.frame_bytes);
      continue;
    }
    if (f.kind == VMMIPC__KIND_END) { /* exchange.c: the comm is over, the connection dropped */
      FUZZ_CHECK(nfds == 0 && f.seq == 0 && f.code != 0, "accepted an END of seq %llu, code %u with %ld fds",
                 (unsigned long long)f.seq, (unsigned)f.code, nfds);
      reset += a.active ? a.fds_done : 0;
      vmmipc__asm_reset(&a);
      shadow_reset(&sh);
      continue;
    }
    const unsigned char *payload = rec + VMMIPC__FRAME_HEADER_BYTES;
    const uint64_t stale0 = stale;
    const uint32_t held0 = a.active ? a.fds_done : 0;
    vmmipc__asm_rc_t rc = vmmipc__asm_feed(&a, lo, hi, &f, payload, fds, (int)nfds, &stale, why, sizeof why);
    switch (rc) {
      case VMMIPC__ASM_STALE:
        FUZZ_CHECK(f.seq < lo || a.skipping, "a frame of message #%llu is stale at [%llu, %llu]",
                   (unsigned long long)f.seq, (unsigned long long)lo, (unsigned long long)hi);
        FUZZ_CHECK(stale - stale0 >= (uint64_t)nfds, "stale fds not counted");
        break;
      case VMMIPC__ASM_MORE:
      case VMMIPC__ASM_DONE:
        FUZZ_CHECK(f.kind == VMMIPC__KIND_DATA && f.seq >= lo && f.seq <= hi, "took a frame it should not");
        if (f.index == 0) shadow_reset(&sh);
        shadow_add(&sh, payload, f.frame_bytes, fds, (size_t)nfds);
        if (rc == VMMIPC__ASM_DONE) {
          unsigned char *b = NULL;
          size_t nb = 0;
          int *mf = NULL, nm = 0;
          uint64_t seq = 0;
          vmmipc__asm_take(&a, &b, &nb, &mf, &nm, &seq);
          FUZZ_CHECK(seq == f.seq && nb == f.total_bytes && (uint32_t)nm == f.total_fds, "took the wrong message");
          FUZZ_CHECK(nb == sh.nbytes && (nb == 0 || memcmp(b, sh.bytes, nb) == 0), "the message's bytes differ");
          FUZZ_CHECK((size_t)nm == sh.nfds, "%d fds delivered, %zu taken", nm, sh.nfds);
          for (int i = 0; i < nm; i++) {
            FUZZ_CHECK(mf[i] == sh.fds[i], "fd %d of %d is another one", i, nm);
            FUZZ_CHECK(fcntl(mf[i], F_GETFD) >= 0, "delivered fd %d of %d is closed", i, nm);
          }
          consume(ctx, b, nb, mf, nm);
          delivered += (uint64_t)nm;
          free(mf);
          free(b);
          shadow_reset(&sh);
          if (ctx == VMMIPC__CTX_P2P) next_in = seq + 1;
        }
        break;
      case VMMIPC__ASM_ABORT:
        FUZZ_CHECK(f.kind == VMMIPC__KIND_ABORT && !a.active, "ABORT left a message under way");
        FUZZ_CHECK(stale - stale0 == held0, "the aborted message's fds not counted");
        shadow_reset(&sh);
        if (ctx == VMMIPC__CTX_P2P) next_in = f.seq + 1;
        break;
      case VMMIPC__ASM_BAD:
        FUZZ_CHECK(why[0] != '\0', "a protocol break without a reason");
        refused += (uint64_t)nfds;
        reset += a.active ? a.fds_done : 0;
        vmmipc__asm_reset(&a);
        shadow_reset(&sh);
        break;
      case VMMIPC__ASM_NOMEM:
        FUZZ_CHECK(0, "out of memory assembling %llu bytes", (unsigned long long)f.total_bytes);
        break;
    }
  }
  reset += a.active ? a.fds_done : 0; /* only a message under way holds fds */
  vmmipc__asm_reset(&a);
  free(sh.bytes);
  free(sh.fds);
  FUZZ_CHECK(attached == delivered + stale + refused + cut + reset,
             "fds: %llu attached, %llu delivered, %llu stale, %llu refused, %llu cut short, %llu reset",
             (unsigned long long)attached, (unsigned long long)delivered, (unsigned long long)stale,
             (unsigned long long)refused, (unsigned long long)cut, (unsigned long long)reset);
  const int fds_after = fuzz_fd_count();
  FUZZ_CHECK(fds_after == fds_before, "fds: %d before, %d after", fds_before, fds_after);
  return 0;
}
