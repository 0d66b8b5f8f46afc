/* vmmipc_bw: bandwidth through mapped peer buffers, with its anchors. */
#ifndef VMMIPC_BENCH_BW_H
#define VMMIPC_BENCH_BW_H

#include <cuda.h>
#include <stddef.h>

#include "common/linerate.h"
#include "common/node.h"
#include "common/rawvmm.h"
#include "vmmipc.h"

#define BW_REASON_LEN 512
#define BW_MAX_SIZES 48

typedef enum { BW_CE, BW_SM, BW_NCCL, BW_STAGED } bw_engine_t;
typedef enum { BW_READ, BW_WRITE, BW_SENDRECV } bw_op_t;

/* One way to reach the peers' buffers: every rank has a private buffer
 * (`local`) and an exposed one (`own`) that the others map (`remote`). */
typedef struct bw_ptrs {
  const char *method; /* "vmmipc", "raw_vmm", "legacy_ipc" */
  CUdeviceptr local, own;
  CUdeviceptr *remote; /* [ranks]: rank r's exposed buffer here; 0 for self */
  char skipped[BW_REASON_LEN];
  /* What has to be released, per method. */
  vmmipc_buf_t lib_local, lib_own;
  vmmipc_win_t win;
  bench_rawbuf_t raw_local, raw_own, *raw_peers;
  int ipc_opened;
} bw_ptrs_t;

typedef struct bw_point {
  size_t size;
  int warmup, iters;
  double seconds; /* slowest active rank, all iterations */
  double gbps;    /* bytes moved by all active ranks / seconds / 1e9 */
} bw_point_t;

typedef struct bw_series {
  char name[64];      /* method.engine.op.dir, e.g. "vmmipc.ce.read.uni" */
  const char *method; /* vmmipc, raw_vmm, legacy_ipc, nccl, host_staged */
  bw_engine_t engine;
  bw_op_t op;
  int bidir;
  char desc[200];
  bw_ptrs_t *ptrs; /* CE and SM series */
  char skipped[BW_REASON_LEN];
  char error[BW_REASON_LEN]; /* a failed data check: the series is not timed */
  int npoints;
  bw_point_t pts[BW_MAX_SIZES];
} bw_series_t;

/* nvbandwidth-style: gbps[src * n + dst], data flowing from src to dst. */
typedef struct bw_matrix {
  char name[64];
  bw_series_t *like; /* the series whose engine, op and pointers it uses */
  size_t size;
  int n;
  double *gbps; /* NaN on the diagonal */
  int warmup, iters;
  char skipped[BW_REASON_LEN];
} bw_matrix_t;

typedef struct bw_ctx {
  bench_node_t *node;
  vmmipc_comm_t comm;
  size_t bufsize, min_size, max_size, matrix_size, check_size;
  int iters_override, warmup_override; /* 0: OSU-style defaults */
  int a, b;                            /* the pair of the sweeps */
  CUstream stream;
  CUevent ev0, ev1;
  bench_linerate_t line;
  /* SM kernel */
  char sm_skipped[BW_REASON_LEN];
  /* NCCL */
  char nccl_skipped[BW_REASON_LEN];
  char nccl_version[32];
  /* host staging */
  void *host_send, *host_recv;
  char host_kind[64];
  int host_pinned;
  char staged_skipped[BW_REASON_LEN];
  /* data check failures, for the exit code */
  int errors;
} bw_ctx_t;

/* Iterations for a size: OSU's 10/100 up to 1 MiB, 2/20 above, unless
 * overridden; host staging is capped (it is ~50x slower). */
void bw_iters(const bw_ctx_t *c, const bw_series_t *s, size_t size, int *warmup, int *iters);

/* Methods (methods.c): set up and release pointer sets. Collective; on
 * failure p->skipped says why (the same on every rank). */
void bw_ptrs_vmmipc(bw_ctx_t *c, bw_ptrs_t *p);
void bw_ptrs_raw(bw_ctx_t *c, bw_ptrs_t *p);
void bw_ptrs_legacy(bw_ctx_t *c, bw_ptrs_t *p);
void bw_ptrs_free(bw_ctx_t *c, bw_ptrs_t *p);

/* Copy engine and SM kernel (copy.c). actor copies to (write) or from
 * (read) peer's exposed buffer; with s->bidir the peer does the same
 * towards the actor at the same time. Collective. */
void bw_copy_point(bw_ctx_t *c, const bw_series_t *s, int bidir, int actor, int peer, size_t size, int warmup,
                   int iters, bw_point_t *pt);
/* One copy of c->check_size bytes in each direction of the pair, then a
 * byte-for-byte check; fills s->error on a mismatch. Collective. */
void bw_copy_check(bw_ctx_t *c, bw_series_t *s);

/* SM kernel (sm.c). */
int bw_sm_init(const bench_node_t *n, char *why, size_t len);
CUresult bw_sm_copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream);
void bw_sm_fini(void);

/* NCCL send/recv (nccl.c), between the local and own buffers of `bufs`. */
void bw_nccl_init(bw_ctx_t *c);
/* Event timing on c->stream, around the issue loop of a point. */
void bw_events_begin(bw_ctx_t *c);
double bw_events_end(bw_ctx_t *c);
/* Fills `pt` from this rank's `secs`, taking the slowest rank's time. */
void bw_point_set(bw_point_t *pt, size_t size, int warmup, int iters, double secs, int bidir);
void bw_nccl_point(bw_ctx_t *c, const bw_ptrs_t *bufs, int bidir, size_t size, int warmup, int iters, bw_point_t *pt);
void bw_nccl_fini(bw_ctx_t *c);

/* Host-staged MPI (staged.c): D2H, MPI_Send/MPI_Recv, H2D. */
void bw_staged_init(bw_ctx_t *c);
void bw_staged_point(bw_ctx_t *c, const bw_ptrs_t *bufs, int bidir, size_t size, int warmup, int iters,
                     bw_point_t *pt);
void bw_staged_fini(bw_ctx_t *c);

/* Output (report.c), rank 0 only. --tables: every table, only the
 * comparison tables, or none (a functional summary instead). */
typedef enum { BW_TABLES_ALL, BW_TABLES_COMPARE, BW_TABLES_NONE } bw_tables_t;
void bw_report_table(const bw_ctx_t *c, bw_series_t *s, int ns, bw_matrix_t *m, int nm, bw_tables_t which);
void bw_report_summary(const bw_ctx_t *c, const bw_series_t *s, int ns, const bw_matrix_t *m, int nm);
int bw_report_json(const bw_ctx_t *c, const char *path, bw_series_t *s, int ns, bw_matrix_t *m, int nm, int argc,
                   char **argv);
int bw_report_csv(const bw_ctx_t *c, const char *path, bw_series_t *s, int ns, bw_matrix_t *m, int nm);

#endif
