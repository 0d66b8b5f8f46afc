/* vmmipc_sync: latency and bandwidth of stream-ordered window
 * synchronisation (vmmipc_win_signal/wait/barrier), with its anchors. */
#ifndef VMMIPC_BENCH_SYNC_H
#define VMMIPC_BENCH_SYNC_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/node.h"
#include "common/stats.h"
#include "vmmipc.h"

#define SY_REASON_LEN 512
#define SY_MAX_SIZES 32
#define SY_MAX_LAT 16
#define SY_MAX_BW 8

/* Window layout: the 8-byte puts land at offset 0, the bandwidth data at
 * SY_DATA_OFF (so that a put never overlaps a block being checked). */
#define SY_PUT_OFF 0
#define SY_DATA_OFF 4096

/* queued: a batch is held behind a gate until the host has enqueued all of
 * it, so the events time the GPU alone; issued: the host issues as the loop
 * goes (enqueue cost included); host: host-clock loop (the anchor). */
typedef enum { SY_QUEUED, SY_ISSUED, SY_HOST, SY_NMODES } sy_mode_t;
extern const char *const sy_mode_names[SY_NMODES];

/* Methods, for --methods and for the gate watchdog's bookkeeping. */
typedef enum { SY_VMMIPC, SY_NCCL, SY_HOSTRT, SY_NMETHODS } sy_method_t;
extern const char *const sy_method_names[SY_NMETHODS];

/* Driver entry points beyond common/driver.h's table (cuda.h's ABI). */
typedef struct sy_drv {
  __typeof__(&cuStreamWriteValue64) cuStreamWriteValue64;
  __typeof__(&cuStreamWaitValue64) cuStreamWaitValue64;
  __typeof__(&cuMemcpyDtoHAsync) cuMemcpyDtoHAsync;
  __typeof__(&cuCtxGetCurrent) cuCtxGetCurrent;
  __typeof__(&cuCtxSetCurrent) cuCtxSetCurrent;
  __typeof__(&cuEventQuery) cuEventQuery; /* optional (the stand-in has none) */
} sy_drv_t;
extern sy_drv_t sy_drv;

/* A gate holds a stream (cuStreamWaitValue64 on a local flag) until the
 * host writes the flag from another stream. A watchdog thread opens it
 * after timeout_s if the host never does (e.g. blocked in an enqueue). */
typedef struct sy_gate {
  int on;                   /* 0: not available; why says so */
  char why[SY_REASON_LEN];
  vmmipc_buf_t buf;
  CUdeviceptr flag;
  CUstream release;         /* the host's write goes here */
  CUcontext ctx;            /* made current in the watchdog */
  double timeout_s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  int have_thread, stop;
  uint64_t armed, opened;   /* epochs */
  double armed_at;
  int forced;               /* the watchdog opened the current epoch */
} sy_gate_t;

typedef struct sy_lat {
  char name[48];            /* vmmipc.signal_wait, vmmipc.put_signal, vmmipc.barrier, nccl.sendrecv, host.sync_barrier */
  sy_method_t method;
  sy_mode_t mode;
  const char *what;         /* one_way (half a round trip), per_barrier, per_iteration */
  const char *timer;        /* cuda_events or host_clock */
  size_t bytes;             /* payload per message (0: none) */
  char desc[400];
  int iters, reps, warmup;
  double *samples;          /* [reps] seconds per operation, max over ranks */
  bench_stats_t st;
  char skipped[SY_REASON_LEN];
  char error[SY_REASON_LEN];
  char note[SY_REASON_LEN];
} sy_lat_t;

typedef struct sy_bwpt {
  size_t size;
  int iters, reps;
  double seconds;           /* median batch time (iters messages + the ack) */
  bench_stats_t gbps;       /* over the reps */
} sy_bwpt_t;

typedef struct sy_bw {
  char name[48];            /* vmmipc.put_signal, nccl.sendrecv */
  sy_method_t method;
  sy_mode_t mode;
  char desc[400];
  int npts;
  sy_bwpt_t pts[SY_MAX_SIZES];
  char skipped[SY_REASON_LEN];
  char error[SY_REASON_LEN];
  char note[SY_REASON_LEN];
} sy_bw_t;

typedef struct sy_goal {
  const char *id, *text;
  const char *subject, *anchor;
  sy_mode_t mode, anchor_mode;
  int primary;
  double target, subject_s, anchor_s, ratio; /* NaN when missing */
  const char *verdict;                        /* PASS, FAIL, n/a */
  char reason[SY_REASON_LEN];
} sy_goal_t;

typedef struct sy_ctx {
  bench_node_t *node;
  vmmipc_comm_t comm;
  vmmipc_win_t win;
  vmmipc_buf_t winbuf, srcbuf;
  size_t winsize;
  CUdeviceptr mine, src;    /* this rank's window and private source buffer */
  CUdeviceptr *peer;        /* [ranks] each rank's window as mapped here */
  CUstream stream;
  CUevent ev0, ev1;
  sy_gate_t gate;
  int a, b;                 /* the pair of the ping-pongs and the sweep */
  int iters, reps, warmup;
  double timeout_s;         /* bound on one batch */
  double budget_s;          /* per latency entry and per bandwidth size: fewer reps when a batch is slow */
  int min_reps;
  double time_limit_s;      /* past it, what is left is skipped (the JSON is still written) */
  char time_up[SY_REASON_LEN];
  size_t min_size, max_size;
  int parts_latency, parts_barrier, parts_bandwidth;
  int methods[SY_NMETHODS], modes[SY_NMODES];
  uint64_t *tx, *rx;        /* [ranks] last value signalled to / awaited from each rank */
  int gpus;                 /* distinct devices among the ranks */
  int shared_gpu;           /* some ranks share a device */
  char vmm_skipped[SY_REASON_LEN];
  char vmm_error[SY_REASON_LEN];
  char nccl_skipped[SY_REASON_LEN];
  char nccl_version[32];
  char gate_broken[SY_NMETHODS][SY_REASON_LEN]; /* the watchdog fired: no more queued batches */
  sy_lat_t lat[SY_MAX_LAT];
  int nlat;
  sy_bw_t bw[SY_MAX_BW];
  int nbw;
  sy_goal_t goals[8];
  int ngoals;
  int errors;
} sy_ctx_t;

/* gate.c */
void sy_gate_init(sy_ctx_t *c, int wanted, double timeout_s);
void sy_gate_close(sy_gate_t *g, CUstream s); /* holds later work on s */
int sy_gate_open(sy_gate_t *g);               /* 1 when the watchdog had opened it */
void sy_gate_fini(sy_gate_t *g);

/* nccl.c: NCCL loaded with dlopen; c->nccl_skipped says why not. */
void sy_nccl_init(sy_ctx_t *c);
void sy_nccl_send(sy_ctx_t *c, CUdeviceptr buf, size_t bytes, int peer);
void sy_nccl_recv(sy_ctx_t *c, CUdeviceptr buf, size_t bytes, int peer);
void sy_nccl_fini(void);

/* run.c: the measurements (collective). sy_stream_wait waits for c->stream,
 * bounded by --timeout (then the run ends with the pair's counters). */
void sy_stream_wait(sy_ctx_t *c, const char *what);
void sy_check(sy_ctx_t *c);
void sy_run_latency(sy_ctx_t *c);
void sy_run_bandwidth(sy_ctx_t *c);

/* report.c (goals on every rank; output on rank 0). */
void sy_goals(sy_ctx_t *c);
void sy_report_table(const sy_ctx_t *c);
int sy_report_json(const sy_ctx_t *c, const char *path, int argc, char **argv);
int sy_report_csv(const sy_ctx_t *c, const char *path);

#endif
