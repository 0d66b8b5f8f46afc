/* The heap's free list: blocks sorted by offset, coalesced on every give,
 * best fit. Deterministic and free of failures (room is made before a
 * call's exchange, vmmipc__heap_room), so that every rank, given the same
 * inputs, carves the same slice. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "heap/heap.h"

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

vmmipc_result_t vmmipc__heap_room(struct vmmipc_heap *h) {
  /* Free blocks lie between live slices: at most live + 1 of them, so room
   * for live + 3 lets this alloc split one and every later free (one
   * more live slice, then gives that insert at most one) never fail. */
  int need = h->num_free + 2 > h->live + 3 ? h->num_free + 2 : h->live + 3;
  if (need > h->cap_free) {
    int cap = h->cap_free ? 2 * h->cap_free : 16;
    while (cap < need) cap *= 2;
    struct vmmipc__heap_free *f = realloc(h->free, (size_t)cap * sizeof *f);
    if (!f) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "the heap's free list of %d blocks", cap);
    h->free = f;
    h->cap_free = cap;
  }
  if (h->num_steps + 1 > h->cap_steps) {
    int cap = h->cap_steps ? 2 * h->cap_steps : 8;
    struct vmmipc__heap_step *s = realloc(h->steps, (size_t)cap * sizeof *s);
    if (!s) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "the heap's table of %d growth steps", cap);
    h->steps = s;
    h->cap_steps = cap;
  }
  return VMMIPC_SUCCESS;
}

/* Best fit (the smallest block that holds it, the lowest on ties): it keeps
 * large blocks whole for large slices, which first fit splits up. */
int64_t vmmipc__heap_find(const struct vmmipc_heap *h, size_t len, size_t align) {
  int64_t best = -1;
  size_t best_len = SIZE_MAX;
  for (int i = 0; i < h->num_free; i++) {
    size_t start = align_up(h->free[i].off, align);
    if (start >= h->free[i].off && start - h->free[i].off <= h->free[i].len &&
        len <= h->free[i].len - (start - h->free[i].off) && h->free[i].len < best_len) {
      best = (int64_t)start;
      best_len = h->free[i].len;
    }
  }
  return best;
}

size_t vmmipc__heap_shortfall(const struct vmmipc_heap *h, size_t len, size_t align) {
  size_t start = align_up(h->mapped, align);
  if (h->num_free) {
    const struct vmmipc__heap_free *last = &h->free[h->num_free - 1];
    if (last->off + last->len == h->mapped) start = align_up(last->off, align);
  }
  return align_up(start + len - h->mapped, h->grow);
}

vmmipc_result_t vmmipc__heap_take(struct vmmipc_heap *h, size_t off, size_t len) {
  for (int i = 0; i < h->num_free; i++) {
    struct vmmipc__heap_free *b = &h->free[i];
    if (off < b->off || off + len > b->off + b->len) continue;
    size_t head = off - b->off, tail = b->off + b->len - (off + len);
    if (head && tail) { /* split: room was made beforehand */
      memmove(&h->free[i + 2], &h->free[i + 1], (size_t)(h->num_free - i - 1) * sizeof *h->free);
      h->num_free++;
      h->free[i + 1].off = off + len;
      h->free[i + 1].len = tail;
      b->len = head;
    } else if (head) {
      b->len = head;
    } else if (tail) {
      b->off = off + len;
      b->len = tail;
    } else {
      memmove(&h->free[i], &h->free[i + 1], (size_t)(h->num_free - i - 1) * sizeof *h->free);
      h->num_free--;
    }
    vmmipc__heap_mix(h, 1, off, len);
    return VMMIPC_SUCCESS;
  }
  return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "heap: [%zu, +%zu) is not free", off, len);
}

vmmipc_result_t vmmipc__heap_give(struct vmmipc_heap *h, size_t off, size_t len) {
  if (!len) return VMMIPC_SUCCESS;
  int i = 0;
  while (i < h->num_free && h->free[i].off < off) i++;
  int merge_prev = i > 0 && h->free[i - 1].off + h->free[i - 1].len == off;
  int merge_next = i < h->num_free && off + len == h->free[i].off;
  if (merge_prev && merge_next) {
    h->free[i - 1].len += len + h->free[i].len;
    memmove(&h->free[i], &h->free[i + 1], (size_t)(h->num_free - i - 1) * sizeof *h->free);
    h->num_free--;
  } else if (merge_prev) {
    h->free[i - 1].len += len;
  } else if (merge_next) {
    h->free[i].off = off;
    h->free[i].len += len;
  } else {
    memmove(&h->free[i + 1], &h->free[i], (size_t)(h->num_free - i) * sizeof *h->free);
    h->num_free++;
    h->free[i].off = off;
    h->free[i].len = len;
  }
  vmmipc__heap_mix(h, 2, off, len);
  return VMMIPC_SUCCESS;
}

void vmmipc__heap_mix(struct vmmipc_heap *h, uint64_t tag, uint64_t a, uint64_t b) {
  uint64_t x = h->digest ^ (tag * 0x9e3779b97f4a7c15ull) ^ (a + 0x632be59bd9b4e019ull) ^ (b << 17 | b >> 47);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  h->digest = x;
}
