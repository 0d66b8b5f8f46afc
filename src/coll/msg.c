/* The message of a collective (coll/msg.h): encode, and a strict decode. */
#include "coll/msg.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/le.h"

size_t vmmipc__cmsg_bytes(const vmmipc__cmsg_t *m) {
  return VMMIPC__CMSG_HEADER_BYTES + 16u * ((size_t)m->num_freed + m->num_have) +
         (m->desc ? vmmipc__desc_wire_bytes(m->desc) : 0);
}

static unsigned char *put_ids(unsigned char *p, const vmmipc__freed_id_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++, p += 16) {
    vmmipc__put64(p, ids[i].serial);
    vmmipc__put64(p + 8, ids[i].generation);
  }
  return p;
}

void vmmipc__cmsg_encode(const vmmipc__cmsg_t *m, void *bytes) {
  unsigned char *p = bytes;
  uint32_t flags = m->flags & ~VMMIPC__CMSG_DESC;
  if (m->desc) flags |= VMMIPC__CMSG_DESC;
  memset(p, 0, VMMIPC__CMSG_HEADER_BYTES);
  vmmipc__put32(p, VMMIPC__CMSG_MAGIC);
  p[4] = (unsigned char)VMMIPC__CMSG_VERSION;
  p[6] = (unsigned char)flags;
  p[7] = (unsigned char)(flags >> 8);
  vmmipc__put64(p + 8, m->nonce);
  vmmipc__put32(p + 16, m->num_freed);
  vmmipc__put32(p + 20, m->num_have);
  vmmipc__put32(p + 24, m->desc ? (uint32_t)vmmipc__desc_wire_bytes(m->desc) : 0);
  unsigned char *q = put_ids(p + VMMIPC__CMSG_HEADER_BYTES, m->freed, m->num_freed);
  q = put_ids(q, m->have, m->num_have);
  if (m->desc) vmmipc__desc_encode(m->desc, q);
}

static vmmipc__freed_id_t *get_ids(const unsigned char *p, uint32_t n) {
  if (n == 0) return NULL;
  vmmipc__freed_id_t *ids = malloc((size_t)n * sizeof *ids);
  for (uint32_t i = 0; ids && i < n; i++, p += 16) {
    ids[i].serial = vmmipc__get64(p);
    ids[i].generation = vmmipc__get64(p + 8);
  }
  return ids;
}

void vmmipc__cmsg_in_free(vmmipc__cmsg_in_t *m) {
  free(m->freed);
  free(m->have);
  vmmipc_desc_free(m->desc);
  memset(m, 0, sizeof *m);
}

static void close_all(int *fds, int n) {
  for (int i = 0; fds && i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

vmmipc_result_t vmmipc__cmsg_decode(const void *bytes, size_t num_bytes, int *fds, int num_fds,
                                    vmmipc__cmsg_in_t *out) {
  const unsigned char *p = bytes;
  memset(out, 0, sizeof *out);
  const char *why = NULL;
  uint32_t flags = 0, nf = 0, nh = 0, db = 0;
  if (num_bytes < VMMIPC__CMSG_HEADER_BYTES || !p) {
    why = "shorter than its header";
  } else {
    unsigned version = p[4] | (unsigned)p[5] << 8;
    flags = p[6] | (uint32_t)p[7] << 8;
    nf = vmmipc__get32(p + 16);
    nh = vmmipc__get32(p + 20);
    db = vmmipc__get32(p + 24);
    if (vmmipc__get32(p) != VMMIPC__CMSG_MAGIC || version != VMMIPC__CMSG_VERSION)
      why = "bad magic or version";
    else if (flags & ~(VMMIPC__CMSG_DESC | VMMIPC__CMSG_NO_FDS | VMMIPC__CMSG_FREED_ALL) || vmmipc__get32(p + 28))
      why = "unknown flags or a reserved field set";
    else if (nf > VMMIPC__CMSG_MAX_IDS || nh > VMMIPC__CMSG_MAX_IDS)
      why = "more identities than the limit";
    else if (num_bytes != VMMIPC__CMSG_HEADER_BYTES + 16u * ((size_t)nf + nh) + db)
      why = "its length does not match its counts";
    else if (!(flags & VMMIPC__CMSG_DESC) && (db || (flags & VMMIPC__CMSG_NO_FDS)))
      why = "descriptor fields without a descriptor";
    else if ((!(flags & VMMIPC__CMSG_DESC) || (flags & VMMIPC__CMSG_NO_FDS)) && num_fds)
      why = "file descriptors that no descriptor owns";
  }
  if (why) {
    close_all(fds, num_fds);
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "collective message of %zu bytes with %d fds: %s", num_bytes,
                         num_fds, why);
  }
  const unsigned char *q = p + VMMIPC__CMSG_HEADER_BYTES;
  out->flags = flags;
  out->nonce = vmmipc__get64(p + 8);
  out->num_freed = nf;
  out->num_have = nh;
  out->freed = get_ids(q, nf);
  out->have = get_ids(q + 16u * (size_t)nf, nh);
  if ((nf && !out->freed) || (nh && !out->have)) {
    close_all(fds, num_fds);
    vmmipc__cmsg_in_free(out);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "decoding a collective message: %u identities", nf + nh);
  }
  if (flags & VMMIPC__CMSG_DESC) {
    const unsigned char *d = q + 16u * ((size_t)nf + nh);
    vmmipc_result_t r = (flags & VMMIPC__CMSG_NO_FDS) ? vmmipc__desc_decode(d, db, &out->desc)
                                                      : vmmipc__desc_adopt(d, db, fds, num_fds, &out->desc);
    if (!r && (flags & VMMIPC__CMSG_NO_FDS) && out->desc->num_chunks == 0) {
      vmmipc_desc_free(out->desc);
      out->desc = NULL;
      r = vmmipc__error(VMMIPC_ERR_INVALID_DESC, "collective message: an empty descriptor marked as sent without fds");
    }
    if (r) {
      vmmipc__cmsg_in_free(out);
      return r;
    }
  }
  return VMMIPC_SUCCESS;
}
