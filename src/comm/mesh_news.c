/* A rank whose socket mesh fails tells its node peers over MPI at once:
 * a peer still waiting for its connection stops too, rather than waiting
 * out the comm's timeout (60 s by default) before vmmipc_comm_create fails.
 * Each node rank sends every node peer its mesh's outcome when its mesh
 * ends, and receives every peer's before the agreement, so that no message
 * is left on the comm (else the comm's MPI communicators are not freed). */
#include <stdlib.h>

#include "comm/comm.h"
#include "transport/tp.h"

#define MESH_NEWS_TAG 0x1000 /* below the agreements' tags (agree.c) */
#define MESH_NEWS_SLACK_MS 1000 /* past the mesh's own bound: a peer's outcome is on its way */

struct vmmipc__mesh_news {
  struct vmmipc_comm *c;
  MPI_Request *reqs;  /* [node rank]: its outcome's receive; then [node_size + p]: ours to p */
  int32_t *got;       /* [2 * node rank]: its result code, the comm rank it blamed (-1: itself) */
  int32_t mine[2];
  int posted;         /* every receive is posted */
  int64_t deadline_ms;
};

vmmipc_result_t vmmipc__mesh_news_start(struct vmmipc_comm *c, struct vmmipc__mesh_news **out) {
  int n = c->node_size;
  struct vmmipc__mesh_news *m = calloc(1, sizeof *m);
  if (m) m->reqs = malloc(2 * (size_t)n * sizeof *m->reqs);
  if (m) m->got = calloc(2 * (size_t)n, sizeof *m->got);
  *out = m;
  if (!m || !m->reqs || !m->got)
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "vmmipc_comm_create: rank %d: the mesh outcomes of %d node ranks",
                         c->rank, n);
  m->c = c;
  m->deadline_ms = vmmipc__now_ms() + c->timeout_ms + MESH_NEWS_SLACK_MS;
  for (int p = 0; p < 2 * n; p++) m->reqs[p] = MPI_REQUEST_NULL;
  for (int p = 0; p < n; p++) {
    if (p == c->node_rank) continue;
    int mrc = MPI_Irecv(&m->got[2 * p], 2, MPI_INT32_T, c->rank_of[p], MESH_NEWS_TAG, c->dup, &m->reqs[p]);
    if (mrc != MPI_SUCCESS)
      return vmmipc__mpi_error(mrc, "vmmipc_comm_create: rank %d: MPI_Irecv of a node peer's mesh outcome", c->rank);
  }
  m->posted = 1;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__mesh_news_stop(void *arg) {
  struct vmmipc__mesh_news *m = arg;
  struct vmmipc_comm *c = m->c;
  for (int p = 0; p < c->node_size; p++) {
    int done = 0;
    if (m->reqs[p] == MPI_REQUEST_NULL || MPI_Test(&m->reqs[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)
      continue;
    if (m->got[2 * p] == VMMIPC_SUCCESS) continue;
    int blamed = m->got[2 * p + 1] >= 0 ? m->got[2 * p + 1] : c->rank_of[p];
    if (blamed == c->rank) /* a failure that names this rank (a HELLO that met EPIPE, a timeout), maybe relayed */
      vmmipc__error(VMMIPC_ERR_PEER,
                    "vmmipc_comm_create: rank %d setting up connections: rank %d reports a failure that names this "
                    "rank (%s)",
                    c->rank, c->rank_of[p], vmmipc_strerror((vmmipc_result_t)m->got[2 * p]));
    else
      vmmipc__error(VMMIPC_ERR_PEER,
                  "vmmipc_comm_create: rank %d setting up connections: rank %d failed to set up its own (%s; told "
                  "by rank %d); its output has the first error",
                  c->rank, blamed, vmmipc_strerror((vmmipc_result_t)m->got[2 * p]), c->rank_of[p]);
    vmmipc__error_rank(blamed);
    return VMMIPC_ERR_PEER;
  }
  return VMMIPC_SUCCESS;
}

void vmmipc__mesh_news_tell(struct vmmipc_comm *c, vmmipc_result_t code) {
  /* static: the sends may outlive this call */
  static const int32_t no_memory[2] = {VMMIPC_ERR_NO_MEMORY, -1}, timeout[2] = {VMMIPC_ERR_TIMEOUT, -1},
                       mpi[2] = {VMMIPC_ERR_MPI, -1};
  const int32_t *b = code == VMMIPC_ERR_NO_MEMORY ? no_memory : code == VMMIPC_ERR_TIMEOUT ? timeout : mpi;
  /* Without its rank table (no memory for it) this rank cannot address its
   * node peers: they time out, as they would waiting for it anyway. */
  for (int p = 0; c->rank_of && p < c->node_size; p++)
    if (p != c->node_rank) vmmipc__mpi_send_unwaited(c->dup, b, 2, MPI_INT32_T, c->rank_of[p], MESH_NEWS_TAG);
  c->mpi_dirty = 1;
}

/* Without its receives (start failed): tells the peers that this rank
 * failed, and gives up the receives it posted, since the peers' outcomes
 * come here unreceived. */
static void tell_only(struct vmmipc_comm *c, struct vmmipc__mesh_news *m, vmmipc_result_t mine) {
  vmmipc__mesh_news_tell(c, mine == VMMIPC_ERR_NO_MEMORY ? mine : VMMIPC_ERR_MPI);
  if (m && m->reqs) vmmipc__mpi_abandon(m->reqs, c->node_size, 1, NULL);
}

vmmipc_result_t vmmipc__mesh_news_end(struct vmmipc_comm *c, struct vmmipc__mesh_news *m, vmmipc_result_t mine) {
  if (!m || !m->posted) {
    tell_only(c, m, mine);
    if (m) free(m->reqs);
    if (m) free(m->got);
    free(m);
    return mine ? mine : VMMIPC_ERR_NO_MEMORY; /* start failed: mine is its error */
  }
  int n = c->node_size, mrc = MPI_SUCCESS;
  vmmipc__error_state_t st = {VMMIPC_SUCCESS, -1, 0, 0};
  if (mine) vmmipc__error_get(&st);
  m->mine[0] = (int32_t)mine;
  m->mine[1] = mine && st.rank >= 0 && st.rank != c->rank ? st.rank : -1;
  for (int p = 0; p < n && mrc == MPI_SUCCESS; p++)
    if (p != c->node_rank)
      mrc = MPI_Isend(m->mine, 2, MPI_INT32_T, c->rank_of[p], MESH_NEWS_TAG, c->dup, &m->reqs[n + p]);
  char *watch = calloc((size_t)n, 1); /* their pids: a peer that died sends nothing */
  for (int p = 0; watch && p < n; p++) watch[p] = p != c->node_rank ? 2 : 0;
  vmmipc__error_saved_t keep; /* this rank's own failure, or the state a success leaves */
  vmmipc__error_save(&keep);
  int gone = -1, w = VMMIPC__WAIT_MPI;
  vmmipc_result_t gone_code, r = VMMIPC_SUCCESS;
  if (mrc == MPI_SUCCESS) w = vmmipc__mpi_wait_watch(c, m->reqs, 2 * n, m->deadline_ms, &mrc, watch, &gone, &gone_code);
  free(watch);
  if (w == VMMIPC__WAIT_GONE && gone >= 0) {
    vmmipc__error_rank(c->rank_of[gone]); /* the wait said which rank exited */
    r = VMMIPC_ERR_PEER;
  } else if (w == VMMIPC__WAIT_TIMEOUT) {
    int late = -1;
    for (int p = 0; p < n && late < 0; p++)
      if (m->reqs[p] != MPI_REQUEST_NULL) late = c->rank_of[p];
    r = vmmipc__error(VMMIPC_ERR_TIMEOUT,
                      "vmmipc_comm_create: rank %d: rank %d did not say how its socket setup ended within %d ms",
                      c->rank, late, c->timeout_ms);
    vmmipc__error_rank(late);
  } else if (w != VMMIPC__WAIT_DONE) {
    r = w == VMMIPC__WAIT_MPI ? vmmipc__mpi_error(mrc, "vmmipc_comm_create: rank %d: the node's mesh outcomes", c->rank)
                              : VMMIPC_ERR_PEER;
  }
  MPI_Request *reqs = m->reqs;
  if (w == VMMIPC__WAIT_DONE) {
    free(m->got);
    free(m);
  } else {
    /* Pending on the comm: receives cancelled, sends left to MPI with their
     * buffer, and the MPI communicators not freed. */
    vmmipc__mpi_abandon(m->reqs, n, 1, m->got);
    vmmipc__mpi_abandon(m->reqs + n, n, 0, m);
    c->mpi_dirty = 1;
  }
  free(reqs);
  if (mine || !r) vmmipc__error_restore(&keep); /* this rank's own failure comes first */
  return mine ? mine : r;
}
