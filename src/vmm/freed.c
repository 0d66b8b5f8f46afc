/* The freed-identity list (vmm/freed.h): a mutex-guarded ring. */
#include "vmm/freed.h"

#include <pthread.h>

static pthread_mutex_t vmmipc__freed_mu = PTHREAD_MUTEX_INITIALIZER;
static vmmipc__freed_id_t vmmipc__freed_ring[VMMIPC__FREED_RING];
static uint64_t vmmipc__freed_next; /* sequence of the next note */

void vmmipc__freed_note(uint64_t serial, uint64_t generation) {
  pthread_mutex_lock(&vmmipc__freed_mu);
  vmmipc__freed_id_t *e = &vmmipc__freed_ring[vmmipc__freed_next % VMMIPC__FREED_RING];
  e->serial = serial;
  e->generation = generation;
  vmmipc__freed_next++;
  pthread_mutex_unlock(&vmmipc__freed_mu);
}

uint64_t vmmipc__freed_head(void) {
  pthread_mutex_lock(&vmmipc__freed_mu);
  uint64_t h = vmmipc__freed_next;
  pthread_mutex_unlock(&vmmipc__freed_mu);
  return h;
}

int vmmipc__freed_since(uint64_t cursor, vmmipc__freed_id_t *out, int max, uint64_t *next, int *overflow) {
  pthread_mutex_lock(&vmmipc__freed_mu);
  uint64_t head = vmmipc__freed_next;
  uint64_t oldest = head > VMMIPC__FREED_RING ? head - VMMIPC__FREED_RING : 0;
  *overflow = cursor < oldest;
  if (cursor < oldest) cursor = oldest;
  if (cursor > head) cursor = head;
  int n = 0;
  for (; cursor < head && n < max; cursor++) out[n++] = vmmipc__freed_ring[cursor % VMMIPC__FREED_RING];
  *next = cursor;
  pthread_mutex_unlock(&vmmipc__freed_mu);
  return n;
}
