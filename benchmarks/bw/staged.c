/* Anchor: host-staged MPI (Open MPI here is not CUDA-aware): cuMemcpyDtoH
 * into a host buffer, MPI_Send/MPI_Recv, cuMemcpyHtoD. Host buffers are
 * pinned (cuMemHostAlloc) when the driver has it, else plain malloc; the
 * report says which. Timed with MPI_Wtime: the path crosses the host. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bw/bw.h"
#include "common/args.h"
#include "common/driver.h"

#define BW_TAG_DATA 4101
#define BW_TAG_ACK 4102

void bw_staged_init(bw_ctx_t *c) {
  c->staged_skipped[0] = '\0';
  c->host_send = c->host_recv = NULL;
  int pinned = 0;
  if (bd.cuMemHostAlloc && bd.cuMemFreeHost && bd.cuMemHostAlloc(&c->host_send, c->bufsize, 0) == CUDA_SUCCESS) {
    if (bd.cuMemHostAlloc(&c->host_recv, c->bufsize, 0) == CUDA_SUCCESS) {
      pinned = 1;
    } else {
      bd.cuMemFreeHost(c->host_send);
      c->host_send = NULL;
    }
  }
  if (!pinned) {
    c->host_send = malloc(c->bufsize);
    c->host_recv = malloc(c->bufsize);
    if (!c->host_send || !c->host_recv)
      snprintf(c->staged_skipped, sizeof c->staged_skipped, "no %zu bytes of host memory", 2 * c->bufsize);
    else {
      memset(c->host_send, 0, c->bufsize);
      memset(c->host_recv, 0, c->bufsize);
    }
  }
  snprintf(c->host_kind, sizeof c->host_kind, "%s", pinned ? "pinned (cuMemHostAlloc)" : "pageable (malloc)");
  c->host_pinned = pinned;
  int lo, hi;
  MPI_Allreduce(&pinned, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&pinned, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (lo != hi) snprintf(c->host_kind, sizeof c->host_kind, "mixed pinned/pageable across ranks");
  bench_agree_skip(c->staged_skipped, sizeof c->staged_skipped);
}

/* MPI counts are ints: messages go in pieces of at most 1 GiB. */
static void bw_send(const char *p, size_t n, int to) {
  for (size_t off = 0; off < n || (n == 0 && off == 0); off += BENCH_GiB) {
    size_t k = n - off < BENCH_GiB ? n - off : BENCH_GiB;
    MPI_Send(p + off, (int)k, MPI_BYTE, to, BW_TAG_DATA, MPI_COMM_WORLD);
    if (n == 0) break;
  }
}

static void bw_recv(char *p, size_t n, int from) {
  for (size_t off = 0; off < n || (n == 0 && off == 0); off += BENCH_GiB) {
    size_t k = n - off < BENCH_GiB ? n - off : BENCH_GiB;
    MPI_Recv(p + off, (int)k, MPI_BYTE, from, BW_TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (n == 0) break;
  }
}

static void bw_sendrecv(const char *s, char *r, size_t n, int peer) {
  for (size_t off = 0; off < n || (n == 0 && off == 0); off += BENCH_GiB) {
    size_t k = n - off < BENCH_GiB ? n - off : BENCH_GiB;
    MPI_Sendrecv(s + off, (int)k, MPI_BYTE, peer, BW_TAG_DATA, r + off, (int)k, MPI_BYTE, peer, BW_TAG_DATA,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (n == 0) break;
  }
}

/* One message: device -> host -> MPI -> host -> device. */
static void bw_staged_once(bw_ctx_t *c, const bw_ptrs_t *bufs, int bidir, size_t size) {
  int me = c->node->rank;
  int peer = me == c->a ? c->b : c->a;
  if (bidir) {
    BD_CHECK(bd.cuMemcpyDtoH(c->host_send, bufs->local, size));
    bw_sendrecv(c->host_send, c->host_recv, size, peer);
    BD_CHECK(bd.cuMemcpyHtoD(bufs->own, c->host_recv, size));
  } else if (me == c->a) {
    BD_CHECK(bd.cuMemcpyDtoH(c->host_send, bufs->local, size));
    bw_send(c->host_send, size, peer);
  } else {
    bw_recv(c->host_recv, size, peer);
    BD_CHECK(bd.cuMemcpyHtoD(bufs->local, c->host_recv, size));
  }
}

void bw_staged_point(bw_ctx_t *c, const bw_ptrs_t *bufs, int bidir, size_t size, int warmup, int iters,
                     bw_point_t *pt) {
  int me = c->node->rank;
  int active = me == c->a || me == c->b;
  MPI_Barrier(MPI_COMM_WORLD);
  if (active)
    for (int i = 0; i < warmup; i++) bw_staged_once(c, bufs, bidir, size);
  MPI_Barrier(MPI_COMM_WORLD);
  double secs = 0;
  if (active) {
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) bw_staged_once(c, bufs, bidir, size);
    /* One direction: the sender's clock stops at the receiver's ack. */
    if (!bidir) {
      char ack = 0;
      if (me == c->b)
        MPI_Send(&ack, 1, MPI_CHAR, c->a, BW_TAG_ACK, MPI_COMM_WORLD);
      else
        MPI_Recv(&ack, 1, MPI_CHAR, c->b, BW_TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    secs = MPI_Wtime() - t0;
  }
  bw_point_set(pt, size, warmup, iters, secs, bidir);
}

void bw_staged_fini(bw_ctx_t *c) {
  if (c->host_pinned) {
    if (c->host_send) bd.cuMemFreeHost(c->host_send);
    if (c->host_recv) bd.cuMemFreeHost(c->host_recv);
  } else {
    free(c->host_send);
    free(c->host_recv);
  }
  c->host_send = c->host_recv = NULL;
}
