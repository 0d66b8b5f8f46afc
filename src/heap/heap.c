/* vmmipc_heap_create, vmmipc_heap_destroy and vmmipc_heap_release: the
 * defaults, one agreement whose verdict carries every rank's geometry (so
 * that every rank settles on the same), the address reservation of all the
 * node's segments in one piece, and a second agreement. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/le.h"
#include "driver/device.h"
#include "common/structsize.h"
#include "common/testhooks.h"
#include "heap/heap.h"
#include "vmm/imported.h"

#define CREATE_MSG 24 /* reserve, grow, granularity */
#define HEAP_ALL_PER_RANK CREATE_MSG /* the largest record of a heap call */
/* Defaults (docs/heap.md): a step of 1/512 of the device's memory, within
 * [granularity, 512 MiB], and a segment as large as the device. */
#define DEFAULT_GROW_DIVISOR 512
#define DEFAULT_GROW_MAX ((size_t)512 << 20)

static size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

static vmmipc_result_t check_config(const vmmipc_heap_config_t *cfg, const char *op) {
  if (!cfg) return VMMIPC_SUCCESS;
  if (cfg->struct_size < offsetof(vmmipc_heap_config_t, access) + sizeof cfg->access ||
      cfg->struct_size > VMMIPC__STRUCT_SIZE_MAX)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: config->struct_size is %zu; hint: initialise the config with VMMIPC_HEAP_CONFIG_INIT",
                         op, cfg->struct_size);
  vmmipc_result_t r = vmmipc__struct_tail_ok(cfg, cfg->struct_size, sizeof *cfg, op, "config");
  if (r) return r;
  if (cfg->reserve > ((size_t)1 << 46) || cfg->grow > ((size_t)1 << 46))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: config reserve %zu or grow %zu is beyond 64 TiB", op,
                         cfg->reserve, cfg->grow);
  return VMMIPC_SUCCESS;
}

/* This rank's wishes: the device's granularity, and reserve and grow
 * (the config's, else the defaults), as multiples of it. */
static vmmipc_result_t local_geometry(struct vmmipc_heap *h, const vmmipc_heap_config_t *cfg, const char *op,
                                      size_t *reserve, size_t *grow) {
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (!r) r = vmmipc__current_device(cu, op, &h->device);
  if (!r) r = vmmipc__device_granularities(cu, h->device, op, NULL, &h->gran);
  if (r) return r;
  size_t total = 0;
  CUresult rc = cu->cuDeviceTotalMem(&total, h->device);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuDeviceTotalMem(device %d)", op, h->device);
  size_t g = h->gran;
  size_t dg = total / DEFAULT_GROW_DIVISOR;
  if (dg > DEFAULT_GROW_MAX) dg = DEFAULT_GROW_MAX;
  *grow = round_up(cfg && cfg->grow ? cfg->grow : (dg ? dg : g), g);
  *reserve = round_up(cfg && cfg->reserve ? cfg->reserve : total, g);
  h->own_access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  h->own_access[0].location.id = h->device;
  h->own_access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return vmmipc__access_resolve(cu, cfg ? cfg->access : NULL, op, h->peer_access, &h->num_peer_access);
}

/* Every rank takes the same geometry: the largest granularity and step,
 * the smallest reserve, rounded up to a whole number of steps. */
static void settle(struct vmmipc_heap *h, const unsigned char *all, int size) {
  size_t reserve = SIZE_MAX, grow = 0, gran = 0;
  for (int q = 0; q < size; q++) {
    const unsigned char *m = all + (size_t)q * CREATE_MSG;
    size_t rq = (size_t)vmmipc__get64(m), gq = (size_t)vmmipc__get64(m + 8), nq = (size_t)vmmipc__get64(m + 16);
    if (rq < reserve) reserve = rq;
    if (gq > grow) grow = gq;
    if (nq > gran) gran = nq;
  }
  h->gran = gran;
  h->grow = round_up(grow, gran);
  h->reserve = reserve < h->grow ? h->grow : round_up(reserve, h->grow);
}

static void heap_free_record(struct vmmipc_heap *h) {
  if (!h) return;
  free(h->steps);
  free(h->free);
  free(h->all);
  free(h->step_sends);
  free(h->step_recvs);
  free(h);
}

/* The peers' segments hold memory imported from their processes: listed,
 * so that vmmipc_buf_wrap refuses a range there as it refuses any import
 * (the driver cannot export it again). */
static void unlist_peers(struct vmmipc_heap *h, int n, int me) {
  for (int q = 0; h->listed && q < n; q++)
    if (q != me) vmmipc__imported_remove(vmmipc__heap_seg(h, q));
  h->listed = 0;
}

static vmmipc_result_t list_peers(struct vmmipc_heap *h, int n, int me, const char *op) {
  h->listed = 1;
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    vmmipc_result_t r = vmmipc__imported_add(vmmipc__heap_seg(h, q), h->reserve);
    if (r) {
      vmmipc__error_prefix("%s: ", op);
      unlist_peers(h, q, me); /* those before q */
      return r;
    }
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_heap_create(vmmipc_comm_t c, const vmmipc_heap_config_t *cfg, vmmipc_heap_t *out) {
  const char *op = "vmmipc_heap_create";
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  if (r) return r;
  double t0 = vmmipc__now();
  if (out) *out = NULL;
  /* Heap windows take slices of the comm's signal pool, as other windows. */
  if ((r = vmmipc__pool_ensure(c, op))) {
    vmmipc__leave(c);
    return r;
  }
  struct vmmipc_heap *h = calloc(1, sizeof *h);
  if (h) {
    h->all = malloc((size_t)c->size * HEAP_ALL_PER_RANK);
    h->step_sends = calloc((size_t)c->node_size, sizeof *h->step_sends);
    h->step_recvs = calloc((size_t)c->node_size, sizeof *h->step_recvs);
  }
  vmmipc_result_t local = VMMIPC_SUCCESS;
  if (!out) local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  if (!local && (!h || !h->all || !h->step_sends || !h->step_recvs))
    local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: the heap's record", op);
  if (!local) local = check_config(cfg, op);
  size_t reserve = 0, grow = 0;
  if (!local) local = local_geometry(h, cfg, op, &reserve, &grow);
  if (!local) local = vmmipc__heap_room(h);
  if (h && VMMIPC__INJECT("heap_record")) { /* tests: no host memory for the record */
    free(h->all);
    h->all = NULL;
    if (!local) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: the heap's record (injected)", op);
  }
  unsigned char mine[CREATE_MSG];
  vmmipc__put64(mine, reserve);
  vmmipc__put64(mine + 8, grow);
  vmmipc__put64(mine + 16, h ? h->gran : 0);
  /* A rank that failed still takes part: the verdict names it everywhere. */
  vmmipc__agree_io_t io = {0, 0, mine, CREATE_MSG, h && h->all ? h->all : NULL, 0};
  r = vmmipc__agree_io(c, local, 0, op, &io);
  if (!r) {
    settle(h, h->all, c->size);
    local = VMMIPC_SUCCESS;
    size_t n = (size_t)c->node_size;
    if (h->reserve > SIZE_MAX / n)
      local = vmmipc__error(VMMIPC_ERR_RESOURCE, "%s: %zu segments of %zu bytes overflow the address space", op, n,
                            h->reserve);
    const vmmipc__cu_t *cu = NULL;
    if (!local) local = vmmipc__cu_load(&cu);
    if (!local) {
      local = vmmipc__reserve(cu, n * h->reserve, h->gran, 0, &h->base, op);
      if (local) vmmipc__error_prefix("reserving %zu segment(s) of %zu bytes: ", n, h->reserve);
      if (local == VMMIPC_ERR_CUDA || local == VMMIPC_ERR_NO_MEMORY) {
        char keep[VMMIPC__ERRMSG_MAX];
        snprintf(keep, sizeof keep, "%s; hint: give the heap a smaller reserve (vmmipc_heap_config_t.reserve)",
                 vmmipc_last_error());
        vmmipc__error_set_raw(keep);
        local = VMMIPC_ERR_RESOURCE;
      }
    }
    if (!local) local = list_peers(h, (int)n, c->node_rank, op);
    r = vmmipc__agree(c, local, 0, op);
    if (r) unlist_peers(h, (int)n, c->node_rank);
    if (r && h->base) cu->cuMemAddressFree(h->base, n * h->reserve);
    if (r) h->base = 0;
  }
  if (r) {
    heap_free_record(h);
  } else {
    h->c = c;
    h->id = c->epoch;
    vmmipc__heap_mix(h, 4, h->reserve, h->grow);
    c->open_heaps++;
    *out = h;
  }
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return r;
}

/* Gives back every step and the reservation; returns the first failure. */
static vmmipc_result_t heap_teardown(struct vmmipc_heap *h, const char *op) {
  vmmipc_result_t first = VMMIPC_SUCCESS;
  char msg[VMMIPC__ERRMSG_MAX] = "";
  for (int i = h->num_steps - 1; i >= 0; i--) {
    vmmipc_result_t r = vmmipc__heap_step_release(h, &h->steps[i], op);
    if (r && !first) {
      first = r;
      snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
    }
  }
  unlist_peers(h, h->c->node_size, h->c->node_rank);
  const vmmipc__cu_t *cu = NULL;
  if (h->base && vmmipc__cu_load(&cu) == VMMIPC_SUCCESS) {
    CUresult rc = cu->cuMemAddressFree(h->base, (size_t)h->c->node_size * h->reserve);
    if (rc && !first) {
      first = vmmipc__cu_error(rc, NULL, "%s: cuMemAddressFree of the heap's segments", op);
      snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
    }
  }
  h->c->open_heaps--;
  heap_free_record(h);
  if (first) vmmipc__error_set_raw(msg);
  return first;
}

static vmmipc_result_t refuse_live(struct vmmipc_heap *h, int unreleased, const char *op) {
  vmmipc_result_t r = vmmipc__error(
      VMMIPC_ERR_BUSY, "%s: %d window(s) of this heap are open on rank %d (%d of them not released); hint: "
                       "vmmipc_win_free or vmmipc_win_release them first",
      op, h->live, h->c->rank, unreleased);
  vmmipc__error_rank(h->c->rank);
  return r;
}

vmmipc_result_t vmmipc_heap_destroy(vmmipc_heap_t h) {
  const char *op = "vmmipc_heap_destroy";
  if (!h) return VMMIPC_SUCCESS; /* like free(NULL) */
  struct vmmipc_comm *c = h->c;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  int entered = 0;
  if (!vmmipc__failed(c)) {
    r = vmmipc__enter(c, op, 1);
    entered = !r;
    if (r && (r == VMMIPC_ERR_BUSY || r == VMMIPC_ERR_INVALID_ARG || !vmmipc__failed(c))) return r; /* refused */
  }
  if (!entered) { /* nobody to agree with (it may have failed meanwhile): locally, holding the comm (an
                   * abort's announcing is waited out), the result made before the comm is let go */
    if (!vmmipc__hold(c))
      return vmmipc__error(VMMIPC_ERR_BUSY, "%s: another thread is inside a call on this comm; the heap is still open",
                           op);
    vmmipc__tell_untold(c, op);
    vmmipc__deferred_reap_local(c); /* what this rank released: its windows of h among them */
    vmmipc_result_t t;
    if (h->live) {
      t = refuse_live(h, h->live - vmmipc__deferred_count_of(c, 0, h), op);
    } else {
      t = heap_teardown(h, op);
      /* An abort of this rank's during the call (after the test above) ends
       * it as it ends a blocked one, as vmmipc_comm_destroy does. */
      if (!t && r && __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) t = vmmipc__freed_locally(c, op);
    }
    __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
    return t;
  }
  /* Windows every rank released go first, in step; the others refuse. */
  int unreleased = h->live - vmmipc__deferred_count_of(c, 0, h);
  vmmipc_result_t local = unreleased > 0 ? refuse_live(h, unreleased, op) : VMMIPC_SUCCESS;
  /* Agreed first: refused everywhere or destroyed everywhere. Peers keep
   * their own handles, so the order of the unmaps does not matter. */
  r = vmmipc__agree_drain(c, local, op, 1, h->id); /* keyed by the heap, as its other calls */
  if (r && !c->broken) {
    vmmipc__leave(c);
    return r;
  }
  /* Broken in the agreement, or aborted here between the drain's rounds
   * (it then returns the verdict it reached, as vmmipc_comm_destroy's
   * does): what this rank released and the rounds did not reach goes now,
   * locally. */
  if (c->broken || (!r && __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))) vmmipc__deferred_reap_local(c);
  if (h->live) { /* the comm broke in the agreement, or a window is still pinned here: the windows need the heap */
    r = refuse_live(h, h->live - vmmipc__deferred_count_of(c, 0, h), op);
    vmmipc__leave(c);
    return r;
  }
  vmmipc_result_t t = heap_teardown(h, op);
  if (r == VMMIPC_ERR_BUSY || r == VMMIPC_ERR_INVALID_ARG) { /* freed now: never a code that means "still open" */
    r = c->broken_code ? c->broken_code : VMMIPC_ERR_PEER;
    vmmipc__error_code(r);
  }
  vmmipc__leave(c);
  return r ? r : t;
}

static int heap_ready(struct vmmipc__deferred *d) {
  struct vmmipc_heap *h = (struct vmmipc_heap *)((char *)d - offsetof(struct vmmipc_heap, def));
  return h->live == 0;
}

static void heap_reap(struct vmmipc__deferred *d, int in_step) {
  (void)in_step; /* every rank's own steps and reservation: nothing to agree on */
  struct vmmipc_heap *h = (struct vmmipc_heap *)((char *)d - offsetof(struct vmmipc_heap, def));
  heap_teardown(h, "vmmipc_heap_release");
}

vmmipc_result_t vmmipc_heap_release(vmmipc_heap_t h) {
  if (!h) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_heap_release: heap is NULL");
  if (__atomic_exchange_n(&h->released, 1, __ATOMIC_ACQ_REL))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_heap_release: the heap was released already");
  h->def.id = h->id;
  h->def.heap = 1;
  h->def.group = NULL;
  h->def.ready = heap_ready;
  h->def.reap = heap_reap;
  vmmipc__deferred_push(h->c, &h->def);
  return VMMIPC_SUCCESS;
}
