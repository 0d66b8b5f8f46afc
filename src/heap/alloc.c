/* vmmipc_heap_alloc, the free of a heap window, and vmmipc_heap_trim.
 *
 * An alloc is one agreement that carries every rank's (size, digest): every
 * rank then knows every rank's size and outcome from the one verdict, and
 * carves the same slice from the same free list, so no second round is
 * needed unless the heap must grow (segment.c, which agrees). The digest,
 * carried by a trim's agreement too, catches ranks whose heaps went out of
 * step (a window freed on one rank only). */
#include <stdlib.h>
#include <string.h>

#include "common/le.h"
#include "heap/heap.h"
#include "sync/sync.h"

#define ALLOC_MSG 16 /* size, digest */

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static void heap_reap(struct vmmipc_win *w, int in_step);

/* A view: base and size only; it owns nothing (vmmipc_buf_free frees the record). */
static void drop_window(struct vmmipc_win *w, int n) {
  if (!w) return;
  vmmipc__error_saved_t keep; /* a release that fails here is not the caller's error */
  vmmipc__error_save(&keep);
  vmmipc__windev_free(w); /* the device API's arrays, if a kernel asked for them */
  for (int q = 0; w->peers && q < n; q++) vmmipc_buf_free(w->peers[q]);
  vmmipc_buf_free(w->own);
  free(w->peers);
  free(w);
  vmmipc__error_restore(&keep);
}

static vmmipc_result_t new_window(int n, int me, struct vmmipc_win **out) {
  struct vmmipc_win *w = calloc(1, sizeof *w);
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (!w || !(w->peers = calloc((size_t)n, sizeof *w->peers))) r = VMMIPC_ERR_NO_MEMORY;
  for (int q = 0; !r && q < n; q++) {
    struct vmmipc_buf *b = NULL;
    if ((r = vmmipc__buf_new(0, "vmmipc_heap_alloc", &b))) break;
    b->imported = 1; /* never exportable: the heap owns the memory */
    if (q == me)
      w->own = b;
    else
      w->peers[q] = b;
  }
  if (w) w->slice = -1;
  if (r) {
    drop_window(w, n);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "vmmipc_heap_alloc: the window's tables");
  }
  *out = w;
  return VMMIPC_SUCCESS;
}

/* The slice every rank carves: the largest request, at the alignment
 * documented in vmmipc.h. *largest: the rank that asked for most. */
static void slice_shape(const struct vmmipc_heap *h, const unsigned char *all, int size, size_t *span, size_t *align,
                        int *largest) {
  size_t s = 0;
  *largest = 0;
  for (int q = 0; q < size; q++) {
    size_t sq = align_up((size_t)vmmipc__get64(all + (size_t)q * ALLOC_MSG), VMMIPC__HEAP_ALIGN);
    if (sq > s) {
      s = sq;
      *largest = q;
    }
  }
  /* Large slices take whole granules: no odd tail beside a granule-aligned
   * block, which would leave holes that only small slices can use (the
   * 1000-window benchmark maps 11% less this way). */
  *span = s >= h->gran ? align_up(s, h->gran) : s;
  *align = s >= h->gran ? h->gran : VMMIPC__HEAP_ALIGN;
}

static vmmipc_result_t check_step(struct vmmipc_heap *h, const unsigned char *all, const char *op) {
  struct vmmipc_comm *c = h->c;
  for (int q = 0; q < c->size; q++)
    if (vmmipc__get64(all + (size_t)q * ALLOC_MSG + 8) != h->digest) {
      h->broken = 1;
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: the heap of rank %d has not seen the same calls as the heap of rank %d; hint: every "
                           "rank must call vmmipc_heap_alloc, vmmipc_win_free of heap windows and vmmipc_heap_trim "
                           "in the same order; only vmmipc_heap_destroy works on this heap now",
                           op, q, c->rank);
    }
  return VMMIPC_SUCCESS;
}

/* Carves [*off, +span), growing the heap first if no free block holds it. */
static vmmipc_result_t carve(struct vmmipc_heap *h, size_t span, size_t align, int largest, size_t want,
                             size_t *off, const char *op) {
  int64_t at = vmmipc__heap_find(h, span, align);
  if (at < 0) {
    size_t need = vmmipc__heap_shortfall(h, span, align);
    if (need > h->reserve - h->mapped)
      return vmmipc__error(VMMIPC_ERR_RESOURCE,
                           "%s: a slice of %zu bytes (rank %d asked for %zu) needs %zu more bytes in every segment, "
                           "beyond the heap's reserve of %zu bytes per rank (%zu mapped, %llu carved); hint: free "
                           "windows, or create the heap with a larger reserve",
                           op, span, largest, want, need, h->reserve, h->mapped, (unsigned long long)h->carved);
    vmmipc_result_t r = vmmipc__heap_grow(h, need, op);
    if (r) return r;
    at = vmmipc__heap_find(h, span, align);
    if (at < 0) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: no room after growing (a bug)", op);
  }
  *off = (size_t)at;
  return vmmipc__heap_take(h, *off, span);
}

vmmipc_result_t vmmipc_heap_alloc(vmmipc_heap_t h, size_t size, vmmipc_win_t *out) {
  const char *op = "vmmipc_heap_alloc";
  if (!h) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: heap is NULL", op);
  struct vmmipc_comm *c = h->c;
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  if (r) return r;
  double t0 = vmmipc__now();
  if (out) *out = NULL;
  int n = c->node_size, me = c->node_rank;
  vmmipc_result_t local = VMMIPC_SUCCESS;
  struct vmmipc_win *w = NULL;
  if (!out) local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  else if (h->broken)
    local = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                          "%s: the ranks' heaps went out of step in an earlier call; only vmmipc_heap_destroy works on "
                          "this heap",
                          op);
  else if (size > h->reserve)
    local = vmmipc__error(VMMIPC_ERR_RESOURCE, "%s: %zu bytes exceed the heap's reserve of %zu bytes per rank", op,
                          size, h->reserve);
  if (!local) local = new_window(n, me, &w);
  if (!local) local = vmmipc__heap_room(h); /* frees never need memory: room for them too */
  if (!local) local = vmmipc__pool_take(c, &w->slice, op); /* no driver call: its zeroing was queued at its free */
  if (!local) local = vmmipc__sync_win_ready(c, w->slice, op); /* a driver call once per 64 slices */
  unsigned char mine[ALLOC_MSG];
  vmmipc__put64(mine, size);
  vmmipc__put64(mine + 8, h->digest);
  /* Every rank's input comes back with the one verdict: the same on every rank. */
  /* Keyed by the heap: ranks that pass different heaps fail, whatever their digests. */
  vmmipc__agree_io_t io = {1, h->id, mine, ALLOC_MSG, h->all, 0};
  r = vmmipc__agree_io(c, local, 0, op, &io);
  const unsigned char *all = h->all;
  if (!r) r = check_step(h, all, op);
  size_t span = 0, align = 0, off = 0;
  int largest = 0;
  if (!r) {
    slice_shape(h, all, c->size, &span, &align, &largest);
    if (span) r = carve(h, span, align, largest, (size_t)vmmipc__get64(all + (size_t)largest * ALLOC_MSG), &off, op);
  }
  if (r) {
    if (w) vmmipc__pool_undo(c, w->slice);
    drop_window(w, n);
    c->timing.total_s = vmmipc__now() - t0;
    vmmipc__leave(c);
    return r;
  }
  for (int q = 0; q < n; q++) {
    struct vmmipc_buf *b = q == me ? w->own : w->peers[q];
    b->size = (size_t)vmmipc__get64(all + (size_t)c->rank_of[q] * ALLOC_MSG);
    b->base = b->size ? vmmipc__heap_seg(h, q) + off : 0;
    b->mapped = b->size;
  }
  w->comm = c;
  w->id = c->epoch; /* equal on every rank: its free agrees on it */
  w->heap = h;
  w->heap_off = off;
  w->heap_span = span;
  w->reap = heap_reap;
  c->open_windows++;
  h->live++;
  h->in_use += size;
  if (h->in_use > h->high_water) h->high_water = h->in_use;
  h->carved += span;
  if (h->carved > h->carved_high_water) h->carved_high_water = h->carved;
  *out = w;
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return VMMIPC_SUCCESS;
}

/* The slice goes back to the heap (room for it was made at its alloc),
 * and its slots to the pool: zeroed for reuse in step, dirty after a
 * failure. */
static void heap_reap(struct vmmipc_win *w, int in_step) {
  struct vmmipc_comm *c = w->comm;
  struct vmmipc_heap *h = w->heap;
  vmmipc__heap_give(h, w->heap_off, w->heap_span);
  h->live--;
  h->in_use -= w->own->size;
  h->carved -= w->heap_span;
  c->open_windows--;
  if (in_step)
    vmmipc__pool_give_zeroed(c, w->slice);
  else
    vmmipc__pool_give(c, w->slice);
  drop_window(w, c->node_size);
}

/* Whether the top `k` steps lie in the last free block, which reaches the
 * end of what is mapped: the same answer on every rank. */
static int top_steps_free(const struct vmmipc_heap *h, int k) {
  if (k > h->num_steps || h->num_free == 0) return 0;
  const struct vmmipc__heap_free *last = &h->free[h->num_free - 1];
  return last->off + last->len == h->mapped && last->off <= h->steps[h->num_steps - k].off;
}

/* Unmaps the free steps at the top, agrees, and only then releases them
 * (or, if any rank failed, maps them again): every rank's heap stays as
 * every other's, and usable. */
vmmipc_result_t vmmipc_heap_trim(vmmipc_heap_t h) {
  const char *op = "vmmipc_heap_trim";
  if (!h) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: heap is NULL", op);
  struct vmmipc_comm *c = h->c;
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  if (r) return r;
  double t0 = vmmipc__now();
  vmmipc_result_t local = h->broken ? vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                                                    "%s: the ranks' heaps went out of step in an earlier call; only "
                                                    "vmmipc_heap_destroy works on this heap",
                                                    op)
                                    : VMMIPC_SUCCESS;
  int k = 0; /* steps unmapped here, from the top */
  while (!local && top_steps_free(h, k + 1)) {
    local = vmmipc__heap_step_unmap(h, &h->steps[h->num_steps - 1 - k], op);
    if (!local) k++;
  }
  /* What failed where, told to all, and every rank's digest: heaps out of
   * step would give back different steps, each rank believing it in step. */
  unsigned char mine[ALLOC_MSG];
  vmmipc__put64(mine, 0);
  vmmipc__put64(mine + 8, h->digest);
  vmmipc__agree_io_t io = {1, h->id, mine, ALLOC_MSG, h->all, 0};
  r = vmmipc__agree_io(c, local, 0, op, &io);
  if (!r) r = check_step(h, h->all, op); /* the same inputs on every rank: the same verdict */
  if (r) {
    vmmipc__error_saved_t keep; /* the verdict, whole: a failed remap would replace it */
    vmmipc__error_save(&keep);
    for (int i = 0; i < k; i++) (void)vmmipc__heap_step_remap(h, &h->steps[h->num_steps - 1 - i], op);
    vmmipc__error_restore(&keep);
  } else {
    for (int i = 0; i < k; i++) {
      struct vmmipc__heap_step *s = &h->steps[h->num_steps - 1];
      struct vmmipc__heap_free *last = &h->free[h->num_free - 1];
      size_t size = s->size;
      vmmipc__heap_step_drop(h, s);
      h->num_steps--;
      last->len -= size;
      if (!last->len) h->num_free--;
      h->mapped -= size;
      h->trimmed_steps += size / h->grow;
      vmmipc__heap_mix(h, 5, h->mapped, size);
    }
  }
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return r;
}
