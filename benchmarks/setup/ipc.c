/* Anchor: legacy CUDA IPC. One cuMemAlloc buffer per rank; timed:
 * cuIpcGetMemHandle, MPI_Allgather of the 64-byte handles, and
 * cuIpcOpenMemHandle of every peer's. Only one chunk, so only the
 * allgather pattern with chunks = 1. "legacy_ipc" opens the same buffer
 * again every repetition; "legacy_ipc_fresh" makes a new one each time
 * (untimed), so that a driver cache of earlier opens cannot serve it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/driver.h"
#include "setup/setup.h"

typedef struct ipc_arg {
  CUdeviceptr own;
  CUipcMemHandle *all; /* [ranks] */
  CUdeviceptr *peer;   /* [ranks] */
  size_t size;
  int fresh;
  int check, failed;
  char skipped[SETUP_REASON_LEN];
  char error[SETUP_REASON_LEN];
} ipc_arg_t;

static void ipc_close(setup_ctx_t *c, ipc_arg_t *a) {
  for (int p = 0; p < c->node->size; p++)
    if (a->peer[p]) {
      bd.cuIpcCloseMemHandle(a->peer[p]);
      a->peer[p] = 0;
    }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void ipc_rep(setup_ctx_t *c, void *argp, double v[SF_N]) {
  ipc_arg_t *a = argp;
  int me = c->node->rank, n = c->node->size;
  if (a->failed) return; /* agreed: every rank returns here */
  char why[SETUP_REASON_LEN] = "", e[160];
  CUipcMemHandle h;
  memset(&h, 0, sizeof h);
  CUresult rc;
  if (a->fresh) { /* the old buffer goes after the peers closed it (ipc_close's barrier) */
    if (a->own) bd.cuMemFree(a->own);
    a->own = 0;
    if ((rc = bd.cuMemAlloc(&a->own, a->size)) != CUDA_SUCCESS) bench_fatal("cuMemAlloc(%zu) failed", a->size);
    if (a->check) setup_mark(a->own, a->size, setup_own_mark(me));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  if ((rc = bd.cuIpcGetMemHandle(&h, a->own)) != CUDA_SUCCESS)
    snprintf(why, sizeof why, "cuIpcGetMemHandle: %s", bd_errstr(rc, e, sizeof e));
  double t1 = bench_now();
  MPI_Allgather(&h, (int)sizeof h, MPI_BYTE, a->all, (int)sizeof h, MPI_BYTE, MPI_COMM_WORLD);
  double t2 = bench_now();
  for (int p = 0; p < n && !why[0]; p++)
    if (p != me && (rc = bd.cuIpcOpenMemHandle(&a->peer[p], a->all[p], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) !=
                       CUDA_SUCCESS) {
      a->peer[p] = 0;
      snprintf(why, sizeof why, "cuIpcOpenMemHandle(rank %d): %s", p, bd_errstr(rc, e, sizeof e));
    }
  double t3 = bench_now();
  v[SF_WALL] = v[SF_TOTAL] = t3 - t0;
  v[SF_EXPORT] = t1 - t0;
  v[SF_TRANSFER] = t2 - t1;
  v[SF_IMPORT] = t3 - t2;
  /* Unsupported here (the CPU stand-in, or GPUs hidden from each other by
   * CUDA_VISIBLE_DEVICES): the anchor is skipped, not failed. */
  if (bench_agree_skip(why, sizeof why)) {
    snprintf(a->skipped, sizeof a->skipped, "%s", why);
    a->failed = 1;
  } else if (a->check) {
    char what[96];
    for (int p = 0; p < n && !why[0]; p++) {
      if (p == me) continue;
      snprintf(what, sizeof what, "legacy IPC: rank %d's buffer", p);
      setup_check_mark(a->peer[p], a->size, setup_own_mark(p), what, why, sizeof why);
    }
    if (bench_agree_skip(why, sizeof why)) snprintf(a->error, sizeof a->error, "%s", why);
    a->check = 0;
  }
  ipc_close(c, a);
}

void setup_run_ipc(setup_ctx_t *c, size_t size, int fresh) {
  int me = c->node->rank, n = c->node->size;
  setup_result_t *res = setup_new_result(c, SC_ALLGATHER, fresh ? "legacy_ipc_fresh" : "legacy_ipc", size, size, 1);
  ipc_arg_t a;
  memset(&a, 0, sizeof a);
  a.size = size;
  a.fresh = fresh;
  a.check = 1;
  a.all = calloc((size_t)n, sizeof *a.all);
  a.peer = calloc((size_t)n, sizeof *a.peer);
  if (!a.all || !a.peer) bench_fatal("out of host memory");
  char e[160];
  CUresult rc;
  if (!bd.cuIpcGetMemHandle || !bd.cuIpcOpenMemHandle || !bd.cuIpcCloseMemHandle)
    snprintf(res->skipped, sizeof res->skipped, "the driver (%s) has no cuIpcGetMemHandle/cuIpcOpenMemHandle",
             bd.path);
  else if ((rc = bd.cuMemAlloc(&a.own, size)) != CUDA_SUCCESS) {
    a.own = 0;
    snprintf(res->skipped, sizeof res->skipped, "cuMemAlloc(%zu): %s", size, bd_errstr(rc, e, sizeof e));
  }
  if (!bench_agree_skip(res->skipped, sizeof res->skipped)) {
    setup_mark(a.own, size, setup_own_mark(me));
    setup_measure(c, res, ipc_rep, &a);
    if (a.failed) {
      /* The samples after the failure are zeros: drop them all. */
      snprintf(res->skipped, sizeof res->skipped, "%s", a.skipped);
      res->reps = 0;
      for (int f = 0; f < SF_N; f++) {
        res->first[f] = NAN;
        bench_stats(NULL, 0, &res->st[f]);
      }
    } else if (a.error[0]) {
      snprintf(res->error, sizeof res->error, "%s", a.error);
      c->errors++;
    }
  }
  if (a.own) bd.cuMemFree(a.own);
  free(a.all);
  free(a.peer);
}
