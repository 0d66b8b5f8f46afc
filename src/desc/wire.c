/* The descriptor's wire format (docs/wire-format.md): little-endian, a
 * 96-byte header followed by one u64 size per chunk. */
#include <string.h>

#include "common/error.h"
#include "common/le.h"
#include "desc/desc.h"

size_t vmmipc__desc_wire_bytes(const struct vmmipc_desc *d) {
  return VMMIPC__DESC_HEADER_BYTES + 8u * (size_t)d->num_chunks;
}

void vmmipc__desc_encode(const struct vmmipc_desc *d, void *bytes) {
  unsigned char *p = bytes;
  memset(p, 0, VMMIPC__DESC_HEADER_BYTES);
  vmmipc__put32(p + 0, VMMIPC__DESC_MAGIC);
  p[4] = (unsigned char)VMMIPC__DESC_VERSION; /* u16 version */
  p[5] = 0;
  p[6] = (unsigned char)VMMIPC__DESC_HEADER_BYTES; /* u16 header bytes */
  p[7] = 0;
  vmmipc__put32(p + 8, d->handle_type);
  vmmipc__put32(p + 12, d->flags);
  memcpy(p + 16, d->owner.bytes, 16);
  memcpy(p + 32, d->host, 16);
  vmmipc__put64(p + 48, d->size);
  vmmipc__put64(p + 56, d->granularity);
  vmmipc__put32(p + 64, (uint32_t)d->num_chunks);
  vmmipc__put32(p + 68, d->pid);
  vmmipc__put64(p + 72, d->nonce);
  vmmipc__put64(p + 80, d->serial);
  vmmipc__put64(p + 88, d->generation);
  for (int i = 0; i < d->num_chunks; i++) vmmipc__put64(p + VMMIPC__DESC_HEADER_BYTES + 8u * (size_t)i, d->sizes[i]);
}

vmmipc_result_t vmmipc__desc_decode(const void *bytes, size_t num_bytes, vmmipc_desc_t *out) {
  const unsigned char *p = bytes;
  *out = NULL;
  /* No bytes (a peer's empty message) is a malformed descriptor here; the
   * public vmmipc_desc_unpack refuses a NULL argument before. */
  if (!bytes || num_bytes < VMMIPC__DESC_HEADER_BYTES)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "vmmipc_desc_unpack: %zu bytes is shorter than the %u-byte header (truncated)", num_bytes,
                         VMMIPC__DESC_HEADER_BYTES);
  uint32_t magic = vmmipc__get32(p);
  unsigned version = p[4] | (unsigned)p[5] << 8, header = p[6] | (unsigned)p[7] << 8;
  if (magic != VMMIPC__DESC_MAGIC)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "vmmipc_desc_unpack: bad magic 0x%08x (expected 0x%08x): not a vmmipc descriptor", magic,
                         VMMIPC__DESC_MAGIC);
  if (version != VMMIPC__DESC_VERSION || header != VMMIPC__DESC_HEADER_BYTES)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "vmmipc_desc_unpack: unknown wire version %u (header %u bytes); this library reads "
                         "version %u; hint: use the same vmmipc version on every rank",
                         version, header, VMMIPC__DESC_VERSION);
  uint32_t n = vmmipc__get32(p + 64);
  if (n > VMMIPC__DESC_MAX_CHUNKS)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "vmmipc_desc_unpack: %u chunks is more than the limit of %u", n,
                         VMMIPC__DESC_MAX_CHUNKS);
  size_t want = VMMIPC__DESC_HEADER_BYTES + 8u * (size_t)n;
  if (num_bytes != want)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "vmmipc_desc_unpack: %zu bytes given but a descriptor of %u chunks is %zu bytes (%s)",
                         num_bytes, n, want, num_bytes < want ? "truncated" : "trailing bytes");
  vmmipc_result_t r = vmmipc__desc_new((int)n, "vmmipc_desc_unpack", out);
  if (r) return r;
  struct vmmipc_desc *d = *out;
  d->handle_type = vmmipc__get32(p + 8);
  d->flags = vmmipc__get32(p + 12);
  memcpy(d->owner.bytes, p + 16, 16);
  memcpy(d->host, p + 32, 16);
  d->size = vmmipc__get64(p + 48);
  d->granularity = vmmipc__get64(p + 56);
  d->pid = vmmipc__get32(p + 68);
  d->nonce = vmmipc__get64(p + 72);
  d->serial = vmmipc__get64(p + 80);
  d->generation = vmmipc__get64(p + 88);
  for (uint32_t i = 0; i < n; i++) d->sizes[i] = vmmipc__get64(p + VMMIPC__DESC_HEADER_BYTES + 8u * (size_t)i);
  r = vmmipc__desc_check(d);
  if (r) {
    vmmipc_desc_free(d);
    *out = NULL;
  }
  return r;
}
