/* A rank whose socket mesh fails tells its node peers over MPI at once:
 * a peer still waiting for its connection stops too, rather than waiting
 * out the comm's timeout (60 s by default) before vmmipc_comm_create fails.
 * Each node rank sends every node peer its mesh's outcome when its mesh
 * ends, and receives every peer's before the agreement, so that no message
 * is left on the comm. */
#include <stdlib.h>

#include "comm/comm.h"
#include "transport/tp.h"

#define MESH_NEWS_TAG 0x1000 /* below the agreements' tags (agree.c) */

struct vmmipc__mesh_news {
  struct vmmipc_comm *c;
  MPI_Request *reqs;  /* [node rank]: its outcome's receive; then [node_size + p]: ours to p */
  int32_t *got;       /* [2 * node rank]: its result code, the comm rank it blamed (-1: itself) */
  int32_t mine[2];
};

vmmipc_result_t vmmipc__mesh_news_start(struct vmmipc_comm *c, struct vmmipc__mesh_news **out) {
  int n = c->node_size;
  struct vmmipc__mesh_news *m = calloc(1, sizeof *m);
  if (m) m->reqs = malloc(2 * (size_t)n * sizeof *m->reqs);
  if (m) m->got = calloc(2 * (size_t)n, sizeof *m->got);
  *out = m;
  if (!m || !m->reqs || !m->got)
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "rank %d: the mesh outcomes of %d node ranks", c->rank, n);
  m->c = c;
  for (int p = 0; p < 2 * n; p++) m->reqs[p] = MPI_REQUEST_NULL;
  for (int p = 0; p < n; p++) {
    if (p == c->node_rank) continue;
    int mrc = MPI_Irecv(&m->got[2 * p], 2, MPI_INT32_T, c->rank_of[p], MESH_NEWS_TAG, c->dup, &m->reqs[p]);
    if (mrc != MPI_SUCCESS) return vmmipc__mpi_error(mrc, "rank %d: MPI_Irecv of a node peer's mesh outcome", c->rank);
  }
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
    vmmipc__error(VMMIPC_ERR_PEER,
                  "rank %d setting up connections: rank %d's failed (%s, told by rank %d); its output has the "
                  "first error",
                  c->rank, blamed, vmmipc_strerror((vmmipc_result_t)m->got[2 * p]), c->rank_of[p]);
    vmmipc__error_rank(blamed);
    return VMMIPC_ERR_PEER;
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__mesh_news_end(struct vmmipc__mesh_news *m, vmmipc_result_t mine) {
  if (!m) return VMMIPC_SUCCESS;
  struct vmmipc_comm *c = m->c;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (c && m->reqs && m->got) {
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
    vmmipc__error_saved_t keep;
    vmmipc__error_save(&keep);
    int gone = -1, w = -1;
    vmmipc_result_t gone_code;
    if (mrc == MPI_SUCCESS)
      w = vmmipc__mpi_wait_watch(c, m->reqs, 2 * n, vmmipc__now_ms() + c->timeout_ms, &mrc, watch, &gone,
                                 &gone_code);
    free(watch);
    if (w == VMMIPC__WAIT_DONE) {
      vmmipc__error_restore(&keep);
    } else { /* pending on the comm: given up, kept, and the comm is not reused */
      r = w == VMMIPC__WAIT_MPI || w < 0 ? vmmipc__mpi_error(mrc, "rank %d: the node's mesh outcomes", c->rank)
          : w == VMMIPC__WAIT_TIMEOUT
              ? vmmipc__error(VMMIPC_ERR_TIMEOUT, "rank %d: a node peer's mesh outcome did not come in %d ms",
                              c->rank, c->timeout_ms)
              : VMMIPC_ERR_PEER; /* the wait named the rank that exited */
      vmmipc__mpi_abandon(m->reqs, 2 * n, 1, m->got);
      vmmipc__mpi_keep(m->reqs);
      vmmipc__mpi_keep(m);
      c->broken = 1;
      if (mine) vmmipc__error_restore(&keep); /* this rank's own failure comes first */
      return mine ? mine : r;
    }
  }
  free(m->reqs);
  free(m->got);
  free(m);
  return mine ? mine : r;
}
