/* vmmipc_win_device and vmmipc_win_device_status: the arrays kernels read
 * (in the window's slice of the comm's arena, setup.c, made at window
 * creation; filled here on first use from what the window already knows:
 * no collective, no allocation), and the record in mapped host memory where
 * a device wait that gave up leaves its mark. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/testhooks.h"
#include "sync/sync.h"
#include "vmm/vmm.h"

/* Serialises first uses; later calls read w->dev without it. */
static pthread_mutex_t windev_mu = PTHREAD_MUTEX_INITIALIZER;

/* Slot `slot` of window w in node rank q's pad, as seen here. */
static uint64_t pad_slot(struct vmmipc_win *w, int q, int slot) { return (uint64_t)vmmipc__slot_addr(w, q, slot); }

/* A synchronous upload on the pool's private stream (a pageable
 * cuMemcpyHtoD may return before the data lands), through the pool's
 * context (the caller's thread may have none current, or another
 * device's) and in the relaxed capture mode: the private stream is never
 * captured, and a user's capture on another stream goes on. */
static CUresult upload(const vmmipc__cu_t *cu, struct vmmipc_comm *c, CUdeviceptr to, const void *from, size_t n) {
  struct vmmipc__pool *p = c->pool;
  vmmipc__aside_t aside;
  vmmipc__aside_begin(cu, p->ctx, &aside);
  pthread_mutex_lock(&p->mu);
  CUresult rc = cu->cuMemcpyHtoDAsync(to, from, n, p->stream);
  if (!rc) rc = cu->cuStreamSynchronize(p->stream);
  pthread_mutex_unlock(&p->mu);
  vmmipc__aside_end(cu, &aside);
  return rc;
}

/* The host image of the arrays, in 8-byte words: claim, epoch, the host
 * barrier's epoch, a spare word, ptrs, sizes, signal_out, signal_in
 * (nranks each), node_ranks (ints), barrier_out and the host barrier's out
 * (node_size each): setup.c sizes the arena for this. */
static vmmipc_result_t windev_make(struct vmmipc_win *w, const char *op, struct vmmipc__windev **out) {
  struct vmmipc_comm *c = w->comm;
  struct vmmipc__sync *s = c->pool ? c->pool->sync : NULL;
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  const int k = w->slice / VMMIPC__ARENA_SLICES, j = w->slice % VMMIPC__ARENA_SLICES;
  if (!s || w->slice < 0 || !s->chunk[k])
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: the window has no device arrays (a bug)", op);
  const size_t N = (size_t)c->size, n = (size_t)c->node_size;
  const int me = c->node_rank;
  const size_t o_ptrs = 4, o_sizes = o_ptrs + N, o_sout = o_sizes + N, o_sin = o_sout + N, o_nr = o_sin + N;
  const size_t o_bout = o_nr + (n + 1) / 2, o_hout = o_bout + n, words = o_hout + n;
  if (words != s->words) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: device array layout (a bug)", op);
  struct vmmipc__windev *v = calloc(1, sizeof *v);
  uint64_t *h = calloc(words, 8);
  if (!v || !h) {
    free(v);
    free(h);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: the window's device arrays", op);
  }
  for (int rank = 0; rank < c->size; rank++) {
    void *ptr = NULL;
    size_t size = 0;
    (void)vmmipc_win_query(w, rank, &ptr, &size);
    h[o_ptrs + rank] = (uint64_t)(uintptr_t)ptr;
    h[o_sizes + rank] = size;
    int q = c->node_of[rank];
    if (q >= 0) {
      h[o_sout + rank] = pad_slot(w, q, me);
      h[o_sin + rank] = pad_slot(w, me, q);
    }
  }
  int *nr = (int *)(void *)&h[o_nr];
  for (size_t q = 0; q < n; q++) {
    nr[q] = c->rank_of[q];
    h[o_bout + q] = pad_slot(w, (int)q, 2 * (int)n + me);
    h[o_hout + q] = pad_slot(w, (int)q, (int)n + me);
  }
  const CUdeviceptr m = s->chunk[k] + (CUdeviceptr)j * (CUdeviceptr)(words * 8);
  v->record = &s->records[k][j];
  memset((void *)v->record, 0, sizeof *v->record); /* before the claim is cleared by the upload */
  CUresult rc = upload(cu, c, m, h, words * 8);
  free(h);
  if (rc) {
    free(v);
    return vmmipc__cu_error(rc, NULL, "%s: the window's device arrays (%zu bytes): the upload", op, words * 8);
  }
  vmmipc_win_device_t *d = &v->d;
  d->rank = c->rank;
  d->nranks = c->size;
  d->node_rank = me;
  d->node_size = c->node_size;
  d->timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
  d->scope = s->scope;
  d->claim = (unsigned long long *)(uintptr_t)m;
  d->epoch = (uint64_t *)(uintptr_t)(m + 8);
  d->ptrs = (void *const *)(uintptr_t)(m + o_ptrs * 8);
  d->sizes = (const uint64_t *)(uintptr_t)(m + o_sizes * 8);
  d->signal_out = (uint64_t *const *)(uintptr_t)(m + o_sout * 8);
  d->signal_in = (uint64_t *const *)(uintptr_t)(m + o_sin * 8);
  d->node_ranks = (const int *)(uintptr_t)(m + o_nr * 8);
  d->barrier_out = (uint64_t *const *)(uintptr_t)(m + o_bout * 8);
  d->barrier_in = (uint64_t *)(uintptr_t)pad_slot(w, me, 2 * (int)n);
  d->record = (vmmipc_dev_record_t *)(uintptr_t)(s->records_dev[k] + (CUdeviceptr)j * sizeof(vmmipc_dev_record_t));
  v->mem = m;
  v->hbar_out = m + o_hout * 8;
  v->hbar_in = (CUdeviceptr)pad_slot(w, me, (int)n);
  v->hbar_epoch = m + 16;
  *out = v;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__windev_get(struct vmmipc_win *w, const char *op, struct vmmipc__windev **out) {
  struct vmmipc__windev *v = __atomic_load_n(&w->dev, __ATOMIC_ACQUIRE);
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (!v) {
    pthread_mutex_lock(&windev_mu);
    v = w->dev;
    if (!v && !(r = windev_make(w, op, &v))) __atomic_store_n(&w->dev, v, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&windev_mu);
  }
  *out = v;
  return r;
}

void vmmipc__windev_free(struct vmmipc_win *w) {
  if (!w) return;
  free(w->dev); /* the arrays stay in the comm's arena, for the slice's next window */
  w->dev = NULL;
}

vmmipc_result_t vmmipc__windev_check(struct vmmipc_win *w, const char *op) {
  struct vmmipc__windev *v = __atomic_load_n(&w->dev, __ATOMIC_ACQUIRE);
  unsigned long long head = v ? __atomic_load_n(&v->record->head, __ATOMIC_ACQUIRE) : 0;
  if (!head) return VMMIPC_SUCCESS;
  int state = (int)(head & 0xff), barrier = (int)(head >> 8 & 1), rank = (int)(uint32_t)(head >> 32);
  unsigned long long value = v->record->value, seen = v->record->seen;
  const char *what = barrier ? "barrier" : "wait";
  vmmipc_result_t code = state == VMMIPC_DEV_FAILED ? VMMIPC_ERR_PEER : VMMIPC_ERR_TIMEOUT;
  if (code == VMMIPC_ERR_PEER)
    vmmipc__error(code,
                  "%s: a device %s on this window found the failure value 0x%llx in rank %d's slot (waiting for "
                  "%llu); hint: a failure was detected; vmmipc_win_device_status reads and clears the record",
                  op, what, seen, rank, value);
  else
    vmmipc__error(code,
                  "%s: a device %s on this window timed out waiting for rank %d to reach %llu (its slot held %llu); "
                  "hint: vmmipc_win_device_status reads and clears the record",
                  op, what, rank, value, seen);
  vmmipc__error_rank(rank);
  return code;
}

vmmipc_result_t vmmipc_win_device(vmmipc_win_t w, vmmipc_win_device_t *out) {
  const char *op = "vmmipc_win_device";
  if (!w || !out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: win or out is NULL", op);
  struct vmmipc__windev *v;
  vmmipc_result_t r = vmmipc__windev_get(w, op, &v);
  if (r) return r;
  *out = v->d;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_win_device_status(vmmipc_win_t w, vmmipc_win_device_status_t *status) {
  const char *op = "vmmipc_win_device_status";
  if (!w || !status) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: win or status is NULL", op);
  size_t want = status->struct_size;
  if (want < sizeof(size_t) + sizeof(int) || want > 4096)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: status->struct_size is %zu; hint: initialise it with VMMIPC_WIN_DEVICE_STATUS_INIT", op,
                         want);
  vmmipc_win_device_status_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.kernel_calls = __atomic_load_n(&w->sync_kernel, __ATOMIC_RELAXED);
  s.memops_calls = __atomic_load_n(&w->sync_memops, __ATOMIC_RELAXED);
  struct vmmipc__windev *v = __atomic_load_n(&w->dev, __ATOMIC_ACQUIRE);
  unsigned long long head = v ? __atomic_load_n(&v->record->head, __ATOMIC_ACQUIRE) : 0;
  if (head) {
    s.state = (int)(head & 0xff);
    s.barrier = (int)(head >> 8 & 1);
    s.rank = (int)(uint32_t)(head >> 32);
    s.value = v->record->value;
    s.seen = v->record->seen;
    /* Cleared: the record first, then the claim, so that the next wait to
     * give up may write it again. */
    const vmmipc__cu_t *cu;
    vmmipc_result_t r = vmmipc__cu_load(&cu);
    if (r) return r;
    __atomic_store_n(&v->record->head, 0ull, __ATOMIC_RELEASE);
    static const unsigned long long zero = 0;
    CUresult rc = VMMIPC__INJECT("status_upload") ? CUDA_ERROR_INVALID_VALUE
                                                  : upload(cu, w->comm, (CUdeviceptr)(uintptr_t)v->d.claim, &zero,
                                                           sizeof zero);
    if (rc) {
      /* Still claimed: put the record back, else no later wait could
       * record, and the window's calls would not report this one. */
      __atomic_store_n(&v->record->head, head, __ATOMIC_RELEASE);
      return vmmipc__cu_error(rc, NULL, "%s: clearing the window's device record", op);
    }
  }
  memcpy((char *)status + sizeof want, (const char *)&s + sizeof want,
         (want < sizeof s ? want : sizeof s) - sizeof want);
  return VMMIPC_SUCCESS;
}
