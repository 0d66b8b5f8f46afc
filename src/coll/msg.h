/* The message of a collective between two node ranks (docs/wire-format.md,
 * "Collective messages"): what travels in the payload of one exchange, under
 * the frames of the transport. Little-endian:
 *
 *   off size
 *     0    4 magic        VMMIPC__CMSG_MAGIC ("VMMC")
 *     4    2 version      VMMIPC__CMSG_VERSION
 *     6    2 flags        VMMIPC__CMSG_*
 *     8    8 nonce        the sender's process nonce (names it with its pid)
 *    16    4 num_freed    identities of the sender's buffers freed since the
 *                         last message to this rank (serial u64, generation u64 each)
 *    20    4 num_have     identities of the receiver's buffers that the sender
 *                         holds mapped (the map collectives' first round)
 *    24    4 desc_bytes   a descriptor (desc/wire.c) follows the lists, or 0
 *    28    4 reserved     0
 *    32      freed[num_freed], have[num_have], descriptor
 *
 * The fds of the descriptor's chunks travel with the message, except when
 * VMMIPC__CMSG_NO_FDS says the sender left them out because the receiver
 * reported holding the buffer. */
#ifndef VMMIPC_COLL_MSG_H
#define VMMIPC_COLL_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "desc/desc.h"
#include "vmm/freed.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__CMSG_MAGIC 0x434d4d56u /* "VMMC" little-endian */
#define VMMIPC__CMSG_VERSION 1u
#define VMMIPC__CMSG_HEADER_BYTES 32u
#define VMMIPC__CMSG_DESC 1u      /* a descriptor follows */
#define VMMIPC__CMSG_NO_FDS 2u    /* ... without its fds: the receiver holds the buffer mapped */
#define VMMIPC__CMSG_FREED_ALL 4u /* the sender lost track: drop every mapping of its buffers */
#define VMMIPC__CMSG_MAX_IDS 4096u /* bound on num_freed and on num_have */

typedef struct vmmipc__cmsg {
  uint32_t flags;
  uint64_t nonce;
  const vmmipc__freed_id_t *freed;
  uint32_t num_freed;
  const vmmipc__freed_id_t *have;
  uint32_t num_have;
  const struct vmmipc_desc *desc; /* encode: may be NULL */
} vmmipc__cmsg_t;

size_t vmmipc__cmsg_bytes(const vmmipc__cmsg_t *m);
void vmmipc__cmsg_encode(const vmmipc__cmsg_t *m, void *bytes);

/* A decoded message: the lists are copies, the descriptor owns the fds. */
typedef struct vmmipc__cmsg_in {
  uint32_t flags;
  uint64_t nonce;
  vmmipc__freed_id_t *freed, *have; /* malloc'd (NULL when empty) */
  uint32_t num_freed, num_have;
  vmmipc_desc_t desc;               /* NULL: none */
} vmmipc__cmsg_in_t;

/* Decodes and checks `bytes` and takes `fds` (closed on failure too);
 * messages say what is wrong (INVALID_DESC). */
vmmipc_result_t vmmipc__cmsg_decode(const void *bytes, size_t num_bytes, int *fds, int num_fds,
                                    vmmipc__cmsg_in_t *out);
void vmmipc__cmsg_in_free(vmmipc__cmsg_in_t *m);

#ifdef __cplusplus
}
#endif
#endif
