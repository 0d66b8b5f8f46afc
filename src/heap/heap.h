/* The symmetric heap (docs/heap.md): one address reservation per rank with
 * one segment per node rank, physical memory added to every segment in
 * growth steps, and windows carved from the mapped part.
 *
 * Lockstep: every rank of the comm keeps the same allocator state (the
 * free list, the steps, the digest), because every change to it is made
 * by a collective call that sees every rank's input. Only growth, which
 * can fail on one rank, needs an agreement. */
#ifndef VMMIPC_HEAP_HEAP_H
#define VMMIPC_HEAP_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "coll/coll.h"
#include "vmm/vmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Slices start on this boundary at least (cache lines and vector loads). */
#define VMMIPC__HEAP_ALIGN ((size_t)256)

/* One growth step (or several taken at once): the same range of every
 * segment, backed by one allocation per node rank. */
struct vmmipc__heap_step {
  size_t off, size;                     /* range in every segment */
  CUmemGenericAllocationHandle *handle; /* [node_size]: own or imported; 0 where not held */
  unsigned char *mapped;                /* [node_size]: 1 where mapped here (a failed remap leaves 0) */
};

struct vmmipc__heap_free {
  size_t off, len;
};

struct vmmipc_heap {
  struct vmmipc_comm *c;
  size_t reserve;          /* bytes per segment (a multiple of grow) */
  size_t grow;             /* bytes per growth step (a multiple of gran) */
  size_t gran;             /* allocation granularity: large slices align to it */
  CUdeviceptr base;        /* the reservation: node_size segments of reserve bytes */
  int listed;              /* the peers' segments are in vmm/imported.h's registry */
  int device;              /* where this rank's steps are created */
  CUmemAccessDesc own_access[1];
  CUmemAccessDesc peer_access[VMMIPC__MAX_ACCESS];
  int num_peer_access;
  size_t mapped;           /* bytes of every segment backed by steps: [0, mapped) */
  struct vmmipc__heap_step *steps;
  int num_steps, cap_steps;
  struct vmmipc__heap_free *free; /* sorted by offset, coalesced */
  int num_free, cap_free;
  uint64_t digest;         /* hash of every change to the state: equal on every rank */
  int broken;              /* the ranks' states were found to differ: only destroy works */
  unsigned char *all;      /* every rank's input of the last call (comm size x the largest record) */
  vmmipc__tp_send_t *step_sends; /* a growth step's exchange (node size each), made with the heap: a step */
  vmmipc__tp_recv_t *step_recvs; /* that runs out of host memory still reaches its peers */
  struct vmmipc__deferred def; /* its place in the comm's queue once released (vmmipc_heap_release) */
  int released;            /* (__atomic builtins) */
  uint64_t id;             /* the epoch of the call that made it: the same on every rank */
  /* stats */
  int live;
  uint64_t in_use, high_water, carved, carved_high_water, growth_steps, trimmed_steps;
  double grow_s;
};

/* ---- carve.c: the free list (pure; identical on every rank) ---- */
/* Room for one more free block split and one more step, and for every
 * live slice's free, made before a call's agreement so that nothing after
 * it can fail locally. */
vmmipc_result_t vmmipc__heap_room(struct vmmipc_heap *h);
/* The offset of the first free block that holds `len` bytes at `align`;
 * -1 if none. */
int64_t vmmipc__heap_find(const struct vmmipc_heap *h, size_t len, size_t align);
/* Takes [off, off+len) out of the free block that holds it. */
vmmipc_result_t vmmipc__heap_take(struct vmmipc_heap *h, size_t off, size_t len);
/* Gives [off, off+len) back, coalescing with its neighbours. */
vmmipc_result_t vmmipc__heap_give(struct vmmipc_heap *h, size_t off, size_t len);
/* Bytes beyond `mapped` that a slice of len at align needs: the last free
 * block is extended if it reaches the end. */
size_t vmmipc__heap_shortfall(const struct vmmipc_heap *h, size_t len, size_t align);
/* Mixes an event into the digest. */
void vmmipc__heap_mix(struct vmmipc_heap *h, uint64_t tag, uint64_t a, uint64_t b);

/* ---- segment.c: steps ---- */
/* Adds `bytes` (a multiple of grow) to every segment: creates and exports
 * this rank's allocation, sends it to the node peers, imports and maps
 * theirs, then agrees. All-or-nothing: on failure nothing of the step is
 * left on any rank. */
vmmipc_result_t vmmipc__heap_grow(struct vmmipc_heap *h, size_t bytes, const char *op);
/* Unmaps and releases what the step holds here. Returns the first failure. */
vmmipc_result_t vmmipc__heap_step_release(struct vmmipc_heap *h, struct vmmipc__heap_step *s, const char *op);
/* A trim in two halves, so that it can be undone until every rank agreed:
 * unmap takes the step out of every segment here, keeping its handles (on
 * a failure it maps back what it unmapped and the step is as before);
 * remap undoes it; drop releases the handles of an unmapped step. A step
 * that cannot be mapped back leaves the heap broken (out of step: only
 * destroy works, and every rank's next heap call fails). */
vmmipc_result_t vmmipc__heap_step_unmap(struct vmmipc_heap *h, struct vmmipc__heap_step *s, const char *op);
vmmipc_result_t vmmipc__heap_step_remap(struct vmmipc_heap *h, struct vmmipc__heap_step *s, const char *op);
void vmmipc__heap_step_drop(struct vmmipc_heap *h, struct vmmipc__heap_step *s);
/* Where node rank q's segment starts here. */
static inline CUdeviceptr vmmipc__heap_seg(const struct vmmipc_heap *h, int q) {
  return h->base + (CUdeviceptr)q * (CUdeviceptr)h->reserve;
}

#ifdef __cplusplus
}
#endif
#endif
