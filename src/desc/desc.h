/* The descriptor: one fd and one size per chunk plus metadata, and its
 * versioned wire format (docs/wire-format.md). */
#ifndef VMMIPC_DESC_DESC_H
#define VMMIPC_DESC_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__DESC_MAGIC 0x494d4d56u /* "VMMI" little-endian */
#define VMMIPC__DESC_VERSION 2u
#define VMMIPC__DESC_HEADER_BYTES 96u
#define VMMIPC__HANDLE_POSIX_FD 1u
#define VMMIPC__DESC_MAX_CHUNKS (1u << 20)

struct vmmipc_desc {
  uint32_t handle_type;
  uint32_t flags;
  vmmipc_uuid_t owner;         /* owner GPU */
  unsigned char host[16];      /* kernel boot id of the exporting host */
  uint64_t size;               /* bytes the buffer exposes */
  uint64_t granularity;        /* exporter's allocation granularity */
  /* The buffer's identity (the mapping cache's key): all zero for none,
   * else all set. Host + pid + nonce name the owner process, the serial a
   * buffer of it (never reused), the generation its layout (it changes
   * when the buffer grows). */
  uint32_t pid;
  uint64_t nonce, serial, generation;
  int num_chunks;
  uint64_t *sizes;             /* num_chunks entries, address order */
  int *fds;                    /* num_chunks entries, owned; -1 = none */
};

/* A descriptor with room for `num_chunks` chunks, fds set to -1; a failure
 * names `op`. */
vmmipc_result_t vmmipc__desc_new(int num_chunks, const char *op, vmmipc_desc_t *out);
/* Strict check of the metadata (counts, granularity, overflow, sizes). */
vmmipc_result_t vmmipc__desc_check(const struct vmmipc_desc *d);
/* Bytes of the wire form. */
size_t vmmipc__desc_wire_bytes(const struct vmmipc_desc *d);
void vmmipc__desc_encode(const struct vmmipc_desc *d, void *bytes);
/* Decode and check `bytes`; the result has no fds (all -1). */
vmmipc_result_t vmmipc__desc_decode(const void *bytes, size_t num_bytes, vmmipc_desc_t *out);
/* A copy of `d` with every field and duplicated fds (NULL stays NULL). */
vmmipc_result_t vmmipc__desc_copy(const struct vmmipc_desc *d, vmmipc_desc_t *out);
/* Whether `d` carries a buffer identity (pid, nonce and serial set). */
int vmmipc__desc_has_identity(const struct vmmipc_desc *d);
/* Decode `bytes` and take ownership of `fds` (closed on failure too). */
vmmipc_result_t vmmipc__desc_adopt(const void *bytes, size_t num_bytes, int *fds, int num_fds,
                                   vmmipc_desc_t *out);

#ifdef __cplusplus
}
#endif
#endif
