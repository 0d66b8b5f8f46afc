/* The floor: the same work as each collective with plain driver calls and
 * a minimal Unix-socket loop, no library around it. Per chunk:
 * cuMemExportToShareableHandle, the fds moved with SCM_RIGHTS (plus chunk
 * count and size), cuMemImportFromShareableHandle, then one
 * cuMemAddressReserve, a cuMemMap per chunk and one cuMemSetAccess. Export
 * happens once per chunk even when the fd goes to several peers. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/driver.h"
#include "common/rawvmm.h"
#include "setup/setup.h"

typedef struct floor_arg {
  setup_coll_t coll;
  size_t chunk;
  int chunks;
  bench_rawbuf_t own;   /* allgather: every rank; bcast: the root */
  bench_rawbuf_t *bufs; /* scatter: [ranks] at the root */
  int *fds;             /* [chunks] */
  bench_rawbuf_t *imported; /* [ranks] */
  int check;
  char error[SETUP_REASON_LEN];
} floor_arg_t;

typedef struct floor_hdr {
  uint64_t chunks, chunk;
} floor_hdr_t;

static void floor_export(floor_arg_t *a, const bench_rawbuf_t *b, bench_phases_t *ph) {
  double t = bench_now();
  BD_CHECK(bench_raw_export(b, a->fds));
  ph->export_s += bench_now() - t;
}

static void floor_send(setup_ctx_t *c, floor_arg_t *a, int to, bench_phases_t *ph) {
  double t = bench_now();
  floor_hdr_t h = {(uint64_t)a->chunks, (uint64_t)a->chunk};
  if (bench_fdmesh_send(&c->mesh, to, &h, sizeof h, a->fds, a->chunks) != 0)
    bench_fatal("floor: sending %d fds to rank %d: %s", a->chunks, to, strerror(errno));
  ph->transfer_s += bench_now() - t;
}

static void floor_close(floor_arg_t *a) {
  for (int i = 0; i < a->chunks; i++) close(a->fds[i]);
}

static void floor_recv_import(setup_ctx_t *c, floor_arg_t *a, int from, bench_phases_t *ph) {
  double t = bench_now();
  floor_hdr_t h;
  if (bench_fdmesh_recv(&c->mesh, from, &h, sizeof h, a->fds, a->chunks) != 0)
    bench_fatal("floor: receiving %d fds from rank %d: %s", a->chunks, from, strerror(errno));
  ph->transfer_s += bench_now() - t;
  BD_CHECK(bench_raw_import(c->node->device, a->fds, (int)h.chunks, (size_t)h.chunk, &a->imported[from], ph));
}

void setup_floor_phases(const bench_phases_t *ph, double wall, double v[SF_N]) {
  v[SF_WALL] = v[SF_TOTAL] = wall;
  v[SF_EXPORT] = ph->export_s;
  v[SF_TRANSFER] = ph->transfer_s;
  v[SF_IMPORT] = ph->import_s;
  v[SF_MAP] = ph->map_s;
  v[SF_ACCESS] = ph->access_s;
  v[SF_AGREE] = 0;
}

static void floor_rep(setup_ctx_t *c, void *argp, double v[SF_N]) {
  floor_arg_t *a = argp;
  int me = c->node->rank, n = c->node->size, root = c->root;
  bench_phases_t ph;
  memset(&ph, 0, sizeof ph);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  if (a->coll == SC_ALLGATHER) {
    floor_export(a, &a->own, &ph);
    for (int p = 0; p < n; p++)
      if (p != me) floor_send(c, a, p, &ph);
    floor_close(a);
    for (int p = 0; p < n; p++)
      if (p != me) floor_recv_import(c, a, p, &ph);
  } else if (me == root) {
    if (a->coll == SC_BCAST) floor_export(a, &a->own, &ph);
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      if (a->coll == SC_SCATTER) floor_export(a, &a->bufs[p], &ph);
      floor_send(c, a, p, &ph);
      if (a->coll == SC_SCATTER) floor_close(a);
    }
    if (a->coll == SC_BCAST) floor_close(a);
  } else {
    floor_recv_import(c, a, root, &ph);
  }
  setup_floor_phases(&ph, bench_now() - t0, v);
  if (a->check) {
    char why[SETUP_REASON_LEN] = "", what[96];
    for (int p = 0; p < n && !why[0]; p++) {
      if (!a->imported[p].base) continue;
      snprintf(what, sizeof what, "floor %s: rank %d's buffer", setup_coll_names[a->coll], p);
      setup_check_mark(a->imported[p].base, a->imported[p].size,
                       a->coll == SC_SCATTER ? setup_scatter_mark(me) : setup_own_mark(p), what, why, sizeof why);
    }
    if (bench_agree_skip(why, sizeof why)) snprintf(a->error, sizeof a->error, "%s", why);
    a->check = 0;
  }
  for (int p = 0; p < n; p++) bench_raw_free(&a->imported[p]);
}

static void floor_alloc(setup_ctx_t *c, size_t chunk, int chunks, unsigned char mark, bench_rawbuf_t *b) {
  BD_CHECK(bench_raw_alloc(c->node->device, chunk, chunks, b));
  setup_mark(b->base, b->size, mark);
}

void setup_run_floor(setup_ctx_t *c, const int *colls, size_t chunk, int chunks) {
  int me = c->node->rank, n = c->node->size;
  size_t size = chunk * (size_t)chunks;
  floor_arg_t a;
  memset(&a, 0, sizeof a);
  a.chunk = chunk;
  a.chunks = chunks;
  a.fds = calloc((size_t)chunks, sizeof *a.fds);
  a.imported = calloc((size_t)n, sizeof *a.imported);
  if (!a.fds || !a.imported) bench_fatal("out of host memory");
  if (!c->have_mesh) {
    for (int k = 0; k < SC_N; k++)
      if (colls[k])
        snprintf(setup_new_result(c, (setup_coll_t)k, "floor", size, chunk, chunks)->skipped, SETUP_REASON_LEN,
                 "%s", c->mesh_skipped);
    free(a.fds);
    free(a.imported);
    return;
  }
  floor_alloc(c, chunk, chunks, setup_own_mark(me), &a.own);
  for (int k = 0; k < SC_N; k++) {
    if (!colls[k]) continue;
    a.coll = (setup_coll_t)k;
    a.check = 1;
    a.error[0] = '\0';
    if (k == SC_SCATTER && me == c->root) {
      a.bufs = calloc((size_t)n, sizeof *a.bufs);
      if (!a.bufs) bench_fatal("out of host memory");
      for (int r = 0; r < n; r++)
        if (r != c->root) floor_alloc(c, chunk, chunks, setup_scatter_mark(r), &a.bufs[r]);
    }
    setup_result_t *res = setup_new_result(c, (setup_coll_t)k, "floor", size, chunk, chunks);
    setup_measure(c, res, floor_rep, &a);
    if (a.error[0]) {
      snprintf(res->error, sizeof res->error, "%s", a.error);
      c->errors++;
    }
    for (int r = 0; a.bufs && r < n; r++) bench_raw_free(&a.bufs[r]);
    free(a.bufs);
    a.bufs = NULL;
  }
  bench_raw_free(&a.own);
  free(a.fds);
  free(a.imported);
}
