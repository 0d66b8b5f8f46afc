/* The freed-identity list: buffers of this process that were exported and
 * then freed or grown (the old generation), so that importers holding a
 * cached mapping of them can drop it (docs/caches.md, "Freed memory").
 * Process-wide and bounded: a ring of the last VMMIPC__FREED_RING
 * identities, each numbered by a sequence that never repeats. A reader
 * keeps a cursor per peer; one that fell behind the ring is told so
 * (*overflow), and must then ask the peer to drop every idle mapping of
 * this process instead. Thread-safe. */
#ifndef VMMIPC_VMM_FREED_H
#define VMMIPC_VMM_FREED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__FREED_RING 1024

typedef struct vmmipc__freed_id {
  uint64_t serial, generation;
} vmmipc__freed_id_t;

/* Records that (serial, generation) of this process is gone. */
void vmmipc__freed_note(uint64_t serial, uint64_t generation);
/* The sequence number the next note will get (a cursor that has seen all). */
uint64_t vmmipc__freed_head(void);
/* Copies the identities noted at or after *cursor (at most max, oldest
 * first) and returns how many; *next gets the cursor after them. When some
 * were overwritten already, *overflow is set and the copy starts at the
 * oldest one kept. */
int vmmipc__freed_since(uint64_t cursor, vmmipc__freed_id_t *out, int max, uint64_t *next, int *overflow);

#ifdef __cplusplus
}
#endif
#endif
