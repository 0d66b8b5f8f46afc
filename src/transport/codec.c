/* Frame headers to bytes and back, and message reassembly (codec.h). */
#include "transport/codec.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/le.h"

void vmmipc__close_fds(const int *fds, int n) {
  int saved = errno;
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
  errno = saved;
}

void vmmipc__frame_encode(const vmmipc__frame_t *f, unsigned char out[VMMIPC__FRAME_HEADER_BYTES]) {
  vmmipc__put32(out + 0, VMMIPC__FRAME_MAGIC);
  vmmipc__put16(out + 4, VMMIPC__FRAME_VERSION);
  vmmipc__put16(out + 6, f->kind);
  vmmipc__put16(out + 8, f->ctx);
  vmmipc__put16(out + 10, 0);
  vmmipc__put32(out + 12, f->code);
  vmmipc__put32(out + 16, f->sender);
  vmmipc__put32(out + 20, f->receiver);
  vmmipc__put64(out + 24, f->comm_id);
  vmmipc__put64(out + 32, f->seq);
  vmmipc__put64(out + 40, f->total_bytes);
  vmmipc__put32(out + 48, f->total_fds);
  vmmipc__put32(out + 52, f->index);
  vmmipc__put32(out + 56, f->frame_bytes);
  vmmipc__put32(out + 60, f->frame_fds);
}

uint64_t vmmipc__frame_count(uint64_t total_bytes, uint32_t total_fds) {
  uint64_t by_bytes = (total_bytes + VMMIPC__FRAME_MAX_BYTES - 1) / VMMIPC__FRAME_MAX_BYTES;
  uint64_t by_fds = ((uint64_t)total_fds + VMMIPC__FRAME_MAX_FDS - 1) / VMMIPC__FRAME_MAX_FDS;
  uint64_t n = by_bytes > by_fds ? by_bytes : by_fds;
  return n ? n : 1;
}

void vmmipc__frame_cut(uint64_t total_bytes, uint32_t total_fds, uint32_t index, uint32_t *bytes, uint32_t *fds) {
  uint64_t done_b = (uint64_t)index * VMMIPC__FRAME_MAX_BYTES, done_f = (uint64_t)index * VMMIPC__FRAME_MAX_FDS;
  uint64_t left_b = done_b < total_bytes ? total_bytes - done_b : 0;
  uint64_t left_f = done_f < total_fds ? total_fds - done_f : 0;
  *bytes = (uint32_t)(left_b < VMMIPC__FRAME_MAX_BYTES ? left_b : VMMIPC__FRAME_MAX_BYTES);
  *fds = (uint32_t)(left_f < VMMIPC__FRAME_MAX_FDS ? left_f : VMMIPC__FRAME_MAX_FDS);
}

static int why_set(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int why_set(char *why, size_t cap, const char *fmt, ...) {
  if (why && cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int vmmipc__frame_decode(const void *rec, size_t len, int nfds, const vmmipc__frame_expect_t *want,
                         vmmipc__frame_t *f, char *why, size_t cap) {
  const unsigned char *p = rec;
  memset(f, 0, sizeof *f);
  if (len < VMMIPC__FRAME_HEADER_BYTES)
    return why_set(why, cap, "short frame: %zu bytes, less than the %d-byte header", len,
                   VMMIPC__FRAME_HEADER_BYTES);
  uint32_t magic = vmmipc__get32(p);
  uint16_t version = vmmipc__get16(p + 4);
  if (magic != VMMIPC__FRAME_MAGIC)
    return why_set(why, cap, "bad magic 0x%08x (expected 0x%08x)", (unsigned)magic, VMMIPC__FRAME_MAGIC);
  if (version != VMMIPC__FRAME_VERSION)
    return why_set(why, cap, "frame version %u, this build speaks version %u", (unsigned)version,
                   VMMIPC__FRAME_VERSION);
  f->kind = vmmipc__get16(p + 6);
  f->ctx = vmmipc__get16(p + 8);
  f->code = vmmipc__get32(p + 12);
  f->sender = vmmipc__get32(p + 16);
  f->receiver = vmmipc__get32(p + 20);
  f->comm_id = vmmipc__get64(p + 24);
  f->seq = vmmipc__get64(p + 32);
  f->total_bytes = vmmipc__get64(p + 40);
  f->total_fds = vmmipc__get32(p + 48);
  f->index = vmmipc__get32(p + 52);
  f->frame_bytes = vmmipc__get32(p + 56);
  f->frame_fds = vmmipc__get32(p + 60);
  if (vmmipc__get16(p + 10) != 0) return why_set(why, cap, "reserved header field is not zero");
  if (f->kind != VMMIPC__KIND_HELLO && f->kind != VMMIPC__KIND_DATA && f->kind != VMMIPC__KIND_ABORT &&
      f->kind != VMMIPC__KIND_VERDICT && f->kind != VMMIPC__KIND_END)
    return why_set(why, cap, "unknown frame kind %u", (unsigned)f->kind);
  if (f->ctx != VMMIPC__CTX_P2P && f->ctx != VMMIPC__CTX_COLL)
    return why_set(why, cap, "unknown context %u", (unsigned)f->ctx);
  if (want->ctx && f->ctx != want->ctx)
    return why_set(why, cap, "context %u on a connection of context %u", (unsigned)f->ctx, (unsigned)want->ctx);
  if (f->sender != want->sender)
    return why_set(why, cap, "the frame names node rank %u as its sender, but came from node rank %u",
                   (unsigned)f->sender, (unsigned)want->sender);
  if (f->receiver != want->receiver)
    return why_set(why, cap, "the frame is addressed to node rank %u, not to %u", (unsigned)f->receiver,
                   (unsigned)want->receiver);
  if (f->comm_id != want->comm_id)
    return why_set(why, cap, "the frame belongs to communicator %016llx, not %016llx",
                   (unsigned long long)f->comm_id, (unsigned long long)want->comm_id);
  if ((uint64_t)f->frame_bytes != len - VMMIPC__FRAME_HEADER_BYTES)
    return why_set(why, cap, "the header announces %u payload bytes but the frame holds %zu",
                   (unsigned)f->frame_bytes, len - VMMIPC__FRAME_HEADER_BYTES);
  if (nfds < 0 || f->frame_fds != (uint32_t)nfds)
    return why_set(why, cap, "the header announces %u fds but %d came with the frame", (unsigned)f->frame_fds, nfds);
  if (f->kind == VMMIPC__KIND_HELLO) {
    if (f->code || f->seq || f->total_bytes || f->total_fds || f->index || f->frame_bytes || f->frame_fds)
      return why_set(why, cap, "a HELLO frame carries data");
    return 0;
  }
  /* No message has this number (epochs and pair numbers start at 0 and
   * advance by one per call): the receiver would wrap expecting the next. */
  if (f->seq == UINT64_MAX)
    return why_set(why, cap, "%s frame with message number 2^64-1, which no message has",
                   f->kind == VMMIPC__KIND_ABORT ? "an ABORT" : "a DATA");
  if (f->kind == VMMIPC__KIND_ABORT) {
    if (f->code == 0 || f->code > 64) return why_set(why, cap, "ABORT with result code %u", (unsigned)f->code);
    if (f->index || f->frame_fds || f->total_fds || f->total_bytes != f->frame_bytes ||
        f->frame_bytes > VMMIPC__ABORT_MAX_BYTES)
      return why_set(why, cap, "malformed ABORT frame (%u bytes, %u fds, index %u)", (unsigned)f->frame_bytes,
                     (unsigned)f->frame_fds, (unsigned)f->index);
    return 0;
  }
  if (f->kind == VMMIPC__KIND_END) {
    if (f->code == 0 || f->code > 64 || f->seq || f->index || f->frame_fds || f->total_fds ||
        f->total_bytes != f->frame_bytes || f->frame_bytes > VMMIPC__ABORT_MAX_BYTES)
      return why_set(why, cap, "malformed END frame (code %u, seq %llu, %u bytes, %u fds, index %u)",
                     (unsigned)f->code, (unsigned long long)f->seq, (unsigned)f->frame_bytes,
                     (unsigned)f->frame_fds, (unsigned)f->index);
    return 0;
  }
  if (f->kind == VMMIPC__KIND_VERDICT) {
    if (f->ctx != VMMIPC__CTX_COLL || f->code > 64 || f->index || f->frame_fds || f->total_fds ||
        f->total_bytes != f->frame_bytes || f->frame_bytes > VMMIPC__VERDICT_MAX_BYTES)
      return why_set(why, cap, "malformed VERDICT frame (context %u, code %u, %u bytes, %u fds, index %u)",
                     (unsigned)f->ctx, (unsigned)f->code, (unsigned)f->frame_bytes, (unsigned)f->frame_fds,
                     (unsigned)f->index);
    return 0;
  }
  if (f->code) return why_set(why, cap, "DATA frame with result code %u", (unsigned)f->code);
  if (f->total_bytes > VMMIPC__MSG_MAX_BYTES || f->total_fds > VMMIPC__MSG_MAX_FDS)
    return why_set(why, cap, "message of %llu bytes and %u fds exceeds the limits (%llu bytes, %u fds)",
                   (unsigned long long)f->total_bytes, (unsigned)f->total_fds,
                   (unsigned long long)VMMIPC__MSG_MAX_BYTES, VMMIPC__MSG_MAX_FDS);
  uint64_t frames = vmmipc__frame_count(f->total_bytes, f->total_fds);
  if (f->index >= frames)
    return why_set(why, cap, "frame %u of a message of %llu frame(s)", (unsigned)f->index,
                   (unsigned long long)frames);
  uint32_t cb, cf;
  vmmipc__frame_cut(f->total_bytes, f->total_fds, f->index, &cb, &cf);
  if (f->frame_bytes != cb || f->frame_fds != cf)
    return why_set(why, cap, "frame %u carries %u bytes and %u fds, but a message of %llu bytes and %u fds is cut "
                   "into %u bytes and %u fds there",
                   (unsigned)f->index, (unsigned)f->frame_bytes, (unsigned)f->frame_fds,
                   (unsigned long long)f->total_bytes, (unsigned)f->total_fds, (unsigned)cb, (unsigned)cf);
  return 0;
}

/* ---- reassembly ------------------------------------------------------------ */

void vmmipc__asm_reset(vmmipc__asm_t *a) {
  if (a->fds) vmmipc__close_fds(a->fds, (int)a->fds_done);
  free(a->fds);
  free(a->bytes);
  memset(a, 0, sizeof *a);
}

void vmmipc__asm_drop(vmmipc__asm_t *a, int skip, uint64_t *stale_fds) {
  if (a->active) {
    if (skip) {
      a->skipping = 1;
      a->skip_seq = a->seq;
    }
    *stale_fds += a->fds_done;
    vmmipc__close_fds(a->fds, (int)a->fds_done);
    free(a->fds);
    free(a->bytes);
    a->fds = NULL;
    a->bytes = NULL;
    a->bytes_cap = 0;
    a->fds_cap = 0;
    a->active = 0;
  }
}

void vmmipc__asm_skip(vmmipc__asm_t *a, uint64_t seq, uint64_t *stale_fds) {
  vmmipc__asm_drop(a, 0, stale_fds);
  a->skipping = 1;
  a->skip_seq = seq;
}

void vmmipc__asm_take(vmmipc__asm_t *a, unsigned char **bytes, size_t *num_bytes, int **fds, int *num_fds,
                      uint64_t *seq) {
  *bytes = a->bytes;
  *num_bytes = (size_t)a->total_bytes;
  *fds = a->fds;
  *num_fds = (int)a->total_fds;
  if (seq) *seq = a->seq;
  a->bytes = NULL;
  a->fds = NULL;
  a->bytes_cap = 0;
  a->fds_cap = 0;
  a->active = 0;
}

/* Makes room for `need` more elements, growing by doubling up to `total`,
 * so that memory follows what was received rather than what a header
 * announced. */
static int asm_reserve(void **buf, uint64_t *cap, uint64_t have, uint64_t need, uint64_t total, size_t elem) {
  if (need == 0 || have + need <= *cap) return 0;
  uint64_t want = *cap ? *cap : 4096 / elem;
  while (want < have + need) want *= 2;
  if (want > total) want = total;
  void *n = realloc(*buf, (size_t)(want * elem));
  if (!n) return -1;
  *buf = n;
  *cap = want;
  return 0;
}

static vmmipc__asm_rc_t asm_refuse(const int *fds, int nfds, vmmipc__asm_rc_t rc, char *why, size_t cap,
                                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static vmmipc__asm_rc_t asm_refuse(const int *fds, int nfds, vmmipc__asm_rc_t rc, char *why, size_t cap,
                                   const char *fmt, ...) {
  vmmipc__close_fds(fds, nfds);
  if (why && cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
  }
  return rc;
}

vmmipc__asm_rc_t vmmipc__asm_feed(vmmipc__asm_t *a, uint64_t lo, uint64_t hi, const vmmipc__frame_t *f,
                                  const void *payload, const int *fds, int nfds, uint64_t *stale_fds, char *why,
                                  size_t cap) {
  if (f->kind != VMMIPC__KIND_DATA && f->kind != VMMIPC__KIND_ABORT)
    return asm_refuse(fds, nfds, VMMIPC__ASM_BAD, why, cap, "a frame of kind %u is not part of a message",
                      (unsigned)f->kind);
  if (f->seq > hi)
    return asm_refuse(fds, nfds, VMMIPC__ASM_BAD, why, cap,
                      "a frame of message #%llu arrived while this rank expects at most #%llu",
                      (unsigned long long)f->seq, (unsigned long long)hi);
  if (a->active && a->seq < lo) vmmipc__asm_drop(a, 0, stale_fds); /* left over from an earlier call */
  if (a->skipping && a->skip_seq < f->seq) a->skipping = 0;
  if (f->seq < lo || (a->skipping && a->skip_seq == f->seq)) {
    *stale_fds += (uint64_t)nfds;
    vmmipc__close_fds(fds, nfds);
    return VMMIPC__ASM_STALE;
  }
  if (a->active && f->seq < a->seq)
    return asm_refuse(fds, nfds, VMMIPC__ASM_BAD, why, cap,
                      "message #%llu arrived after message #%llu had begun: the stream went backwards",
                      (unsigned long long)f->seq, (unsigned long long)a->seq);
  if (f->kind == VMMIPC__KIND_ABORT) {
    vmmipc__asm_drop(a, 0, stale_fds); /* the peer gave up on it (or on a later one) */
    return VMMIPC__ASM_ABORT;
  }
  if (a->active && f->seq > a->seq) {
    if (f->index != 0)
      return asm_refuse(fds, nfds, VMMIPC__ASM_BAD, why, cap,
                        "frame %u of message #%llu arrived while message #%llu was incomplete", (unsigned)f->index,
                        (unsigned long long)f->seq, (unsigned long long)a->seq);
    vmmipc__asm_drop(a, 0, stale_fds); /* the sender gave the old one up */
  }
  if (!a->active) {
    if (f->index != 0)
      return asm_refuse(fds, nfds, VMMIPC__ASM_BAD, why, cap, "frame %u of message #%llu without its first frame",
                        (unsigned)f->index, (unsigned long long)f->seq);
    a->active = 1;
    a->seq = f->seq;
    a->total_bytes = f->total_bytes;
    a->total_fds = f->total_fds;
    a->next_index = 0;
    a->bytes_done = 0;
    a->fds_done = 0;
  } else if (f->index != a->next_index || f->total_bytes != a->total_bytes || f->total_fds != a->total_fds) {
    return asm_refuse(fds, nfds, VMMIPC__ASM_BAD, why, cap,
                      "frame %u (of %llu bytes, %u fds) does not continue message #%llu at frame %u (of %llu bytes, "
                      "%u fds)",
                      (unsigned)f->index, (unsigned long long)f->total_bytes, (unsigned)f->total_fds,
                      (unsigned long long)a->seq, (unsigned)a->next_index, (unsigned long long)a->total_bytes,
                      (unsigned)a->total_fds);
  }
  void *bp = a->bytes, *fp = a->fds;
  uint64_t fcap = a->fds_cap;
  int nomem = asm_reserve(&bp, &a->bytes_cap, a->bytes_done, f->frame_bytes, a->total_bytes, 1);
  a->bytes = bp;
  if (!nomem) nomem = asm_reserve(&fp, &fcap, a->fds_done, f->frame_fds, a->total_fds, sizeof(int));
  a->fds = fp;
  a->fds_cap = (uint32_t)fcap;
  if (nomem) {
    vmmipc__asm_drop(a, 1, stale_fds);
    return asm_refuse(fds, nfds, VMMIPC__ASM_NOMEM, why, cap, "out of host memory assembling message #%llu",
                      (unsigned long long)f->seq);
  }
  if (f->frame_bytes) memcpy(a->bytes + a->bytes_done, payload, f->frame_bytes);
  for (int i = 0; i < nfds; i++) a->fds[a->fds_done + (uint32_t)i] = fds[i];
  a->bytes_done += f->frame_bytes;
  a->fds_done += (uint32_t)nfds;
  a->next_index++;
  return (a->bytes_done == a->total_bytes && a->fds_done == a->total_fds) ? VMMIPC__ASM_DONE : VMMIPC__ASM_MORE;
}
