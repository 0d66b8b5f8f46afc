/* Design probes of issue 11: two ways the importing side of allgather_map
 * could go faster, measured with raw driver calls next to the floor, so the
 * library adopts one only when the hardware says it pays.
 *   floor_joint:   every peer's chunks imported, then mapped back to back in
 *                  one reserved range, with a single cuMemSetAccess over all
 *                  of it (one access call per collective instead of one per
 *                  peer).
 *   floor_threads: a thread per peer receives, imports, maps and sets
 *                  access for that peer's buffer, all peers at once (shows
 *                  whether the driver serialises these calls).
 * Both: the allgather pattern; export and send as in the floor. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/driver.h"
#include "common/rawvmm.h"
#include "setup/setup.h"

typedef struct probe_hdr {
  uint64_t chunks, chunk;
} probe_hdr_t;

typedef struct probe_arg probe_arg_t;

typedef struct probe_peer {
  probe_arg_t *a;
  int peer;
  int *fds;        /* [chunks]: this peer's received fds */
  bench_phases_t ph;
  CUresult rc;
  pthread_t tid;
} probe_peer_t;

struct probe_arg {
  setup_ctx_t *c;
  const char *method;
  size_t chunk;
  int chunks;
  bench_rawbuf_t own;
  int *fds;                 /* [chunks]: own exported fds */
  bench_rawbuf_t *imported; /* [ranks] */
  bench_rawrange_t range;   /* floor_joint */
  probe_peer_t *peers;      /* [ranks] */
  pthread_barrier_t go;     /* floor_threads: released once own fds are sent */
  int check;
  char error[SETUP_REASON_LEN];
};

static void probe_recv(probe_peer_t *pp, bench_phases_t *ph) {
  probe_arg_t *a = pp->a;
  double t = bench_now();
  probe_hdr_t h;
  if (bench_fdmesh_recv(&a->c->mesh, pp->peer, &h, sizeof h, pp->fds, a->chunks) != 0)
    bench_fatal("%s: receiving %d fds from rank %d: %s", a->method, a->chunks, pp->peer, strerror(errno));
  ph->transfer_s += bench_now() - t;
}

static void *probe_thread(void *arg) {
  probe_peer_t *pp = arg;
  probe_arg_t *a = pp->a;
  vmmipc_result_t vr = vmmipc_set_device(a->c->node->device); /* the driver's context is per thread */
  pthread_barrier_wait(&a->go);
  if (vr) {
    pp->rc = CUDA_ERROR_INVALID_CONTEXT;
    return NULL;
  }
  probe_recv(pp, &pp->ph);
  pp->rc = bench_raw_import(a->c->node->device, pp->fds, a->chunks, a->chunk, &a->imported[pp->peer], &pp->ph);
  return NULL;
}

static void probe_send_own(probe_arg_t *a, bench_phases_t *ph) {
  setup_ctx_t *c = a->c;
  double t = bench_now();
  BD_CHECK(bench_raw_export(&a->own, a->fds));
  ph->export_s += bench_now() - t;
  t = bench_now();
  probe_hdr_t h = {(uint64_t)a->chunks, (uint64_t)a->chunk};
  for (int p = 0; p < c->node->size; p++)
    if (p != c->node->rank && bench_fdmesh_send(&c->mesh, p, &h, sizeof h, a->fds, a->chunks) != 0)
      bench_fatal("%s: sending %d fds to rank %d: %s", a->method, a->chunks, p, strerror(errno));
  for (int i = 0; i < a->chunks; i++) close(a->fds[i]);
  ph->transfer_s += bench_now() - t;
}

static void probe_joint(probe_arg_t *a, bench_phases_t *ph) {
  int me = a->c->node->rank, n = a->c->node->size;
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    probe_recv(&a->peers[p], ph);
    BD_CHECK(bench_raw_import_handles(a->peers[p].fds, a->chunks, a->chunk, &a->imported[p], ph));
  }
  BD_CHECK(bench_raw_map_joint(a->c->node->device, a->imported, n, &a->range, ph));
}

static void probe_threads_run(probe_arg_t *a, bench_phases_t *ph) {
  int me = a->c->node->rank, n = a->c->node->size;
  pthread_barrier_wait(&a->go);
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    probe_peer_t *pp = &a->peers[p];
    pthread_join(pp->tid, NULL);
    if (pp->rc != CUDA_SUCCESS) bd_check_at(pp->rc, "bench_raw_import (thread)", __FILE__, __LINE__);
    /* Phases overlap across threads: each is the slowest thread's. */
    if (pp->ph.transfer_s > ph->transfer_s) ph->transfer_s = pp->ph.transfer_s;
    if (pp->ph.import_s > ph->import_s) ph->import_s = pp->ph.import_s;
    if (pp->ph.map_s > ph->map_s) ph->map_s = pp->ph.map_s;
    if (pp->ph.access_s > ph->access_s) ph->access_s = pp->ph.access_s;
  }
}

static void probe_rep(setup_ctx_t *c, void *argp, double v[SF_N]) {
  probe_arg_t *a = argp;
  int me = c->node->rank, n = c->node->size;
  int threads = strcmp(a->method, "floor_threads") == 0;
  bench_phases_t ph;
  memset(&ph, 0, sizeof ph);
  if (threads) { /* made before the clock starts: a library would keep a pool */
    if (pthread_barrier_init(&a->go, NULL, (unsigned)n)) bench_fatal("pthread_barrier_init");
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      memset(&a->peers[p].ph, 0, sizeof a->peers[p].ph);
      if (pthread_create(&a->peers[p].tid, NULL, probe_thread, &a->peers[p]))
        bench_fatal("%s: pthread_create", a->method);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  probe_send_own(a, &ph);
  if (threads)
    probe_threads_run(a, &ph);
  else
    probe_joint(a, &ph);
  setup_floor_phases(&ph, bench_now() - t0, v);
  if (threads) pthread_barrier_destroy(&a->go);
  if (a->check) {
    char why[SETUP_REASON_LEN] = "", what[96];
    for (int p = 0; p < n && !why[0]; p++) {
      if (!a->imported[p].base) continue;
      snprintf(what, sizeof what, "%s: rank %d's buffer", a->method, p);
      setup_check_mark(a->imported[p].base, a->imported[p].size, setup_own_mark(p), what, why, sizeof why);
    }
    if (bench_agree_skip(why, sizeof why)) snprintf(a->error, sizeof a->error, "%s", why);
    a->check = 0;
  }
  if (threads)
    for (int p = 0; p < n; p++) bench_raw_free(&a->imported[p]);
  else
    bench_raw_free_joint(a->imported, n, &a->range);
}

void setup_run_floor_probe(setup_ctx_t *c, const char *method, size_t chunk, int chunks) {
  int n = c->node->size;
  setup_result_t *res = setup_new_result(c, SC_ALLGATHER, method, chunk * (size_t)chunks, chunk, chunks);
  if (!c->have_mesh) {
    snprintf(res->skipped, SETUP_REASON_LEN, "%s", c->mesh_skipped);
    return;
  }
  probe_arg_t a;
  memset(&a, 0, sizeof a);
  a.c = c;
  a.method = method;
  a.chunk = chunk;
  a.chunks = chunks;
  a.check = 1;
  a.fds = calloc((size_t)chunks, sizeof *a.fds);
  a.imported = calloc((size_t)n, sizeof *a.imported);
  a.peers = calloc((size_t)n, sizeof *a.peers);
  if (!a.fds || !a.imported || !a.peers) bench_fatal("out of host memory");
  for (int p = 0; p < n; p++) {
    a.peers[p].a = &a;
    a.peers[p].peer = p;
    a.peers[p].fds = calloc((size_t)chunks, sizeof *a.peers[p].fds);
    if (!a.peers[p].fds) bench_fatal("out of host memory");
  }
  BD_CHECK(bench_raw_alloc(c->node->device, chunk, chunks, &a.own));
  setup_mark(a.own.base, a.own.size, setup_own_mark(c->node->rank));
  setup_measure(c, res, probe_rep, &a);
  if (a.error[0]) {
    snprintf(res->error, sizeof res->error, "%s", a.error);
    c->errors++;
  }
  bench_raw_free(&a.own);
  for (int p = 0; p < n; p++) free(a.peers[p].fds);
  free(a.peers);
  free(a.fds);
  free(a.imported);
}
