/* vmmipc_comm_create / vmmipc_comm_destroy: the private duplicate, one
 * bounded allgather of what each rank is (process, host, configuration),
 * the node split, the configuration agreed, the socket mesh, and the
 * agreement. Every rank takes part in every step, whatever failed locally,
 * so that a local failure is reported everywhere instead of leaving a peer
 * waiting. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/defaults.h"
#include "common/host.h"
#include "common/structsize.h"
#include "common/testhooks.h"
#include "common/random.h"
#include "vmm/mapcache.h"

/* What each rank tells every other (MPI_BYTE: one ABI across a job). */
struct rank_info {
  int32_t status;       /* this rank's result so far */
  int32_t pid, uid;
  int32_t timeout_ms;
  int32_t socket_ns;    /* resolved: VMMIPC_SOCKET_ABSTRACT or _FILESYSTEM */
  int32_t explicit_ns;  /* 1: the config chose it; 0: the environment or the default */
  uint64_t comm_id;     /* rank 0's names the comm */
  unsigned char boot_id[16];
  char node_id[64];     /* VMMIPC_NODE_ID, or "" */
  char host[64];
};

/* What each rank tells its node once its socket is bound. */
struct node_info {
  int32_t status;
  int32_t pad;
  unsigned char addr[VMMIPC__ADDR_BYTES];
};

static vmmipc_result_t check_config(const vmmipc_config_t *cfg, const char *op) {
  if (!cfg) return VMMIPC_SUCCESS;
  if (cfg->struct_size < offsetof(vmmipc_config_t, socket_dir) + sizeof(const char *) ||
      cfg->struct_size > VMMIPC__STRUCT_SIZE_MAX)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: config->struct_size is %zu; hint: initialise the config with VMMIPC_CONFIG_INIT", op,
                         cfg->struct_size);
  vmmipc_result_t r = vmmipc__struct_tail_ok(cfg, cfg->struct_size, sizeof *cfg, op, "config");
  if (r) return r;
  if (cfg->socket_namespace != VMMIPC_SOCKET_AUTO && cfg->socket_namespace != VMMIPC_SOCKET_ABSTRACT &&
      cfg->socket_namespace != VMMIPC_SOCKET_FILESYSTEM)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: config->socket_namespace %d is none of VMMIPC_SOCKET_AUTO, _ABSTRACT, _FILESYSTEM", op,
                         cfg->socket_namespace);
  return VMMIPC_SUCCESS;
}

/* A field of the config, or its default when the caller's struct is older. */
#define CFG_HAS(cfg, field) \
  ((cfg) && (cfg)->struct_size >= offsetof(vmmipc_config_t, field) + sizeof((cfg)->field))

static int resolve_timeout(const vmmipc_config_t *cfg) {
  if (cfg && cfg->timeout_ms > 0) return cfg->timeout_ms;
  const char *e = getenv("VMMIPC_TIMEOUT_MS");
  if (e && *e) {
    long v = strtol(e, NULL, 10);
    if (v > 0 && v < INT_MAX / 2) return (int)v;
  }
  return VMMIPC__DEFAULT_TIMEOUT_MS;
}

/* An explicit choice in the config beats VMMIPC_SOCKET_DIR. */
static int resolve_namespace(const vmmipc_config_t *cfg, int *explicit_choice) {
  *explicit_choice = cfg && cfg->socket_namespace != VMMIPC_SOCKET_AUTO;
  if (*explicit_choice) return cfg->socket_namespace;
  const char *env = getenv("VMMIPC_SOCKET_DIR");
  return (env && *env) ? VMMIPC_SOCKET_FILESYSTEM : VMMIPC_SOCKET_ABSTRACT;
}

/* Idle mappings the comm's cache keeps: the config, else
 * VMMIPC_MAP_CACHE_ENTRIES, else 64; 0 turns the cache off. */
static int resolve_cache(const vmmipc_config_t *cfg) {
  if (CFG_HAS(cfg, map_cache_entries) && cfg->map_cache_entries >= 0) return cfg->map_cache_entries;
  const char *e = getenv("VMMIPC_MAP_CACHE_ENTRIES");
  if (e && *e) {
    long v = strtol(e, NULL, 10);
    if (v >= 0 && v < 1L << 20) return (int)v;
  }
  return 64;
}

/* Bytes of idle mappings the cache keeps: the config (>= 0), else
 * VMMIPC_MAP_CACHE_BYTES (a number, with an optional K, M or G suffix of
 * 1024 powers), else the default; 0: no byte bound. */
static uint64_t resolve_cache_bytes(const vmmipc_config_t *cfg) {
  if (CFG_HAS(cfg, map_cache_bytes) && cfg->map_cache_bytes >= 0) return (uint64_t)cfg->map_cache_bytes;
  const char *e = getenv("VMMIPC_MAP_CACHE_BYTES");
  if (e && *e) {
    char *end = NULL;
    unsigned long long v = strtoull(e, &end, 10);
    int shift = 0;
    if (end && (*end == 'K' || *end == 'k')) shift = 10;
    else if (end && (*end == 'M' || *end == 'm')) shift = 20;
    else if (end && (*end == 'G' || *end == 'g')) shift = 30;
    if (shift) end++;
    if (end && end != e && *end == '\0' && e[0] != '-' && v <= (~0ULL >> shift)) return (uint64_t)v << shift;
  }
  return VMMIPC__DEFAULT_MAP_CACHE_BYTES;
}

static const char *resolve_dir(const vmmipc_config_t *cfg) {
  if (cfg && cfg->socket_dir && *cfg->socket_dir) return cfg->socket_dir;
  const char *env = getenv("VMMIPC_SOCKET_DIR");
  if (env && *env) return env;
  const char *tmp = getenv("TMPDIR");
  return (tmp && *tmp) ? tmp : "/tmp";
}

static void comm_free(struct vmmipc_comm *c) {
  if (!c) return;
  vmmipc__error_saved_t keep; /* the destroy's result is made: a failed release here is not its error */
  vmmipc__error_save(&keep);
  vmmipc__live_remove(c); /* an abort still inside finishes first */
  vmmipc__release_waits(c); /* teardown: nothing waits on the pool once it is gone */
  if (c->pool && c->pool_free) c->pool_free(c->pool, c->node_size);
  /* Mappings still in use (bcast_map/scatter_map outputs) live on and are
   * released with their last buffer. */
  vmmipc__mapcache_destroy(c->cache);
  vmmipc__tp_close(c->tp);
  /* A broken comm may have messages in flight that nobody will receive:
   * freeing its MPI communicators would let MPI reuse their context for a
   * new comm, where those messages would match. They are left to MPI, as
   * are those of a comm whose flush did not finish (a peer's message may
   * still come: agree.c), and those of a comm freed locally after an
   * abort (vmmipc_comm_destroy), whose peers may still send to it. */
  if (!c->broken && !c->mpi_dirty && c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
  if (!c->broken && !c->mpi_dirty && c->dup != MPI_COMM_NULL) MPI_Comm_free(&c->dup);
  free(c->node_of);
  free(c->rank_of);
  free(c->freed_told);
  free(c->coll_sends);
  free(c->coll_recvs);
  free(c->coll_bytes);
  free(c->coll_flags);
  free(c->due);
  pthread_mutex_destroy(&c->def_mu);
  free(c);
  vmmipc__error_restore(&keep);
}

/* The first rank whose status is a failure, or -1. */
static int first_failure(const struct rank_info *all, int n) {
  for (int r = 0; r < n; r++)
    if (all[r].status) return r;
  return -1;
}

/* Every rank must use the same timeout and socket mode: a rank that waits
 * less, or listens elsewhere, would fail later with a misleading error. */
static vmmipc_result_t check_agreed(const struct rank_info *all, int n, const char *op) {
  for (int r = 1; r < n; r++) {
    if (all[r].timeout_ms != all[0].timeout_ms)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: the ranks disagree on the timeout: rank 0 uses %d ms and rank %d %d ms; hint: set "
                           "vmmipc_config_t.timeout_ms or VMMIPC_TIMEOUT_MS alike on every rank",
                           op, all[0].timeout_ms, r, all[r].timeout_ms);
    if (all[r].socket_ns != all[0].socket_ns) {
      const char *how[2] = {"by VMMIPC_SOCKET_DIR or the default", "by its config"};
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: the ranks disagree on the socket mode: rank 0 uses %s sockets (chosen %s) and rank %d "
                           "%s sockets (chosen %s); hint: set VMMIPC_SOCKET_DIR (or socket_namespace) alike on every "
                           "rank",
                           op, all[0].socket_ns ? "filesystem" : "abstract", how[all[0].explicit_ns != 0], r,
                           all[r].socket_ns ? "filesystem" : "abstract", how[all[r].explicit_ns != 0]);
    }
  }
  return VMMIPC_SUCCESS;
}

static int same_node_key(const struct rank_info *a, const struct rank_info *b) {
  return memcmp(a->boot_id, b->boot_id, 16) == 0 && strcmp(a->node_id, b->node_id) == 0;
}

/* Ranks that MPI puts on one node must share a kernel to pass fds. */
static vmmipc_result_t check_shared_node(struct vmmipc_comm *c, const struct rank_info *all, const char *op) {
  MPI_Comm shm = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(c->dup, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shm);
  if (rc != MPI_SUCCESS) return vmmipc__mpi_error(rc, "%s: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", op);
  int n = 0;
  MPI_Comm_size(shm, &n);
  MPI_Group g = MPI_GROUP_NULL, dg = MPI_GROUP_NULL;
  int *in = malloc((size_t)n * sizeof *in), *out = malloc((size_t)n * sizeof *out);
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (!in || !out) r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s", op);
  if (!r) {
    for (int i = 0; i < n; i++) in[i] = i;
    MPI_Comm_group(shm, &g);
    MPI_Comm_group(c->dup, &dg);
    MPI_Group_translate_ranks(g, n, in, dg, out);
    for (int i = 1; i < n && !r; i++)
      if (memcmp(all[out[i]].boot_id, all[out[0]].boot_id, 16) != 0)
        r = vmmipc__error(VMMIPC_ERR_PEER,
                          "%s: ranks %d (host %s) and %d (host %s) share an MPI node but run on different kernels "
                          "(boot ids differ), so they cannot share memory; hint: run one container per node with "
                          "shared IPC, PID and network namespaces, or set VMMIPC_NODE_ID per host",
                          op, out[0], all[out[0]].host, out[i], all[out[i]].host);
  }
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (dg != MPI_GROUP_NULL) MPI_Group_free(&dg);
  free(in);
  free(out);
  MPI_Comm_free(&shm);
  return r;
}

/* Node tables from the allgathered records (node ranks follow comm ranks).
 * The node's size and this rank's place in it are set first, with no
 * memory: a rank whose tables fail still takes part in the node's address
 * exchange, which tells its peers. */
static vmmipc_result_t node_tables(struct vmmipc_comm *c, const struct rank_info *all, const char *op) {
  int k = 0;
  for (int r = 0; r < c->size; r++)
    if (same_node_key(&all[r], &all[c->rank])) {
      if (r == c->rank) c->node_rank = k;
      k++;
    }
  c->node_size = k;
  c->node_of = malloc((size_t)c->size * sizeof *c->node_of);
  c->rank_of = malloc((size_t)k * sizeof *c->rank_of);
  if (c->rank_of && VMMIPC__INJECT("rank_table")) { /* tests: no host memory for the node's rank table */
    free(c->rank_of);
    c->rank_of = NULL;
  }
  if (!c->node_of || !c->rank_of) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: node tables", op);
  k = 0;
  for (int r = 0; r < c->size; r++) c->node_of[r] = same_node_key(&all[r], &all[c->rank]) ? k++ : -1;
  for (int r = 0; r < c->size; r++)
    if (c->node_of[r] >= 0) c->rank_of[c->node_of[r]] = r;
  c->coll_sends = calloc((size_t)k, sizeof *c->coll_sends);
  c->coll_recvs = calloc((size_t)k, sizeof *c->coll_recvs);
  c->coll_bytes = calloc((size_t)k, sizeof *c->coll_bytes);
  c->coll_flags = calloc(5 * (size_t)k, 1);
  if (c->coll_flags && VMMIPC__INJECT("node_tables")) { /* tests: no host memory for the last table */
    free(c->coll_flags);
    c->coll_flags = NULL;
  }
  if (!c->coll_sends || !c->coll_recvs || !c->coll_bytes || !c->coll_flags)
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: a collective's tables", op);
  for (int p = 0; p < k; p++) c->coll_flags[p] = p != c->node_rank;
  c->coll_all = c->coll_flags;
  c->coll_to = c->coll_flags + k;
  c->coll_from = c->coll_flags + 2 * k;
  c->coll_both = c->coll_flags + 3 * k;
  c->coll_told_all = c->coll_flags + 4 * k;
  return VMMIPC_SUCCESS;
}

/* Binds, publishes the address over the node, and connects the mesh. */
static vmmipc_result_t open_sockets(struct vmmipc_comm *c, const vmmipc_config_t *cfg, const struct rank_info *all,
                                    vmmipc_result_t local, const char *op) {
  if (!local) {
    int explicit_ns;
    vmmipc__tp_opts_t o = {resolve_namespace(cfg, &explicit_ns), resolve_dir(cfg), c->node_rank, c->node_size,
                           c->rank_of, c->timeout_ms, all[0].comm_id};
    local = vmmipc__tp_open(&o, &c->tp);
  }
  int n = c->node_size;
  struct node_info *mine = calloc(1, sizeof *mine), *ni = calloc((size_t)n, sizeof *ni);
  if (!mine || !ni) {
    free(mine);
    free(ni);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d address records", op, n);
  }
  mine->status = (int32_t)local;
  if (!local) memcpy(mine->addr, vmmipc__tp_addr(c->tp), VMMIPC__ADDR_BYTES);
  MPI_Request req = MPI_REQUEST_NULL;
  if (VMMIPC__INJECT("addr_late")) VMMIPC__LATE(c->timeout_ms);
  int mrc = MPI_Iallgather(mine, (int)sizeof *mine, MPI_BYTE, ni, (int)sizeof *mine, MPI_BYTE, c->node, &req);
  int w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait(&req, 1, vmmipc__now_ms() + c->timeout_ms, &mrc) : -1;
  if (w != 0) {
    vmmipc_result_t r =
        w < 0 ? vmmipc__mpi_error(mrc, "%s: MPI_Iallgather of socket addresses", op)
              : vmmipc__error(VMMIPC_ERR_TIMEOUT,
                              "%s: publishing socket addresses over the node timed out after %d ms: a rank of this "
                              "node is not in the call",
                              op, c->timeout_ms);
    /* A late peer's exchange may still complete: it must not wait for our
     * connections. Broken, so that every rank keeps its MPI communicators:
     * the peer that takes no news (its own setup failed) gets the verdict
     * of a broken comm, and the tell stays unreceived. */
    vmmipc__mesh_news_tell(c, r);
    c->broken = 1;
    if (w > 0) { /* pending on the node comm: keep the buffers */
      vmmipc__mpi_abandon(&req, 1, 0, ni);
      ni = NULL;
      vmmipc__mpi_keep(mine);
      mine = NULL;
    }
    free(mine);
    free(ni);
    return r;
  }
  vmmipc_result_t r = local;
  for (int i = 0; i < n && !r; i++)
    if (ni[i].status) {
      r = vmmipc__error(VMMIPC_ERR_PEER, "%s: rank %d could not open its socket", op, c->rank_of[i]);
      vmmipc__error_rank(c->rank_of[i]);
    }
  if (!r) { /* every node rank is here, and tells the others how its mesh ended */
    struct vmmipc__mesh_news *news = NULL;
    r = vmmipc__mesh_news_start(c, &news);
    unsigned char *addrs = malloc((size_t)n * VMMIPC__ADDR_BYTES);
    pid_t *pids = malloc((size_t)n * sizeof *pids);
    uid_t *uids = malloc((size_t)n * sizeof *uids);
    if (!r && (!addrs || !pids || !uids)) r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: peer tables", op);
    if (!r) {
      for (int i = 0; i < n; i++) {
        memcpy(addrs + (size_t)i * VMMIPC__ADDR_BYTES, ni[i].addr, VMMIPC__ADDR_BYTES);
        pids[i] = (pid_t)all[c->rank_of[i]].pid;
        uids[i] = (uid_t)all[c->rank_of[i]].uid;
      }
      r = vmmipc__tp_connect_until(c->tp, addrs, pids, uids, vmmipc__mesh_news_stop, news);
    }
    r = vmmipc__mesh_news_end(c, news, r);
    free(addrs);
    free(pids);
    free(uids);
  }
  free(mine);
  free(ni);
  return r;
}

static vmmipc_result_t comm_create(MPI_Comm comm, const vmmipc_config_t *cfg, vmmipc_comm_t *out, const char *op);

vmmipc_result_t vmmipc_comm_create(MPI_Comm comm, const vmmipc_config_t *cfg, vmmipc_comm_t *out) {
  const char *op = "vmmipc_comm_create";
  if (out) *out = NULL;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Finalized(&finalized);
  if (!inited || finalized)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: MPI is %s; hint: call it between MPI_Init and MPI_Finalize",
                         op, inited ? "finalized" : "not initialised");
  if (comm == MPI_COMM_NULL) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is MPI_COMM_NULL", op);
  /* Creating calls MPI as every call on a comm does: the thread level
   * decides whether another thread may be inside vmmipc meanwhile. */
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  vmmipc_result_t r = vmmipc__enter_process(level, 0, op); /* not finalized: refused above */
  if (r) return r;
  r = comm_create(comm, cfg, out, op);
  vmmipc__leave_process();
  return r;
}

static vmmipc_result_t comm_create(MPI_Comm comm, const vmmipc_config_t *cfg, vmmipc_comm_t *out, const char *op) {
  struct vmmipc_comm *c = calloc(1, sizeof *c);
  if (c) c->broken_rank = -1;
  if (c) pthread_mutex_init(&c->def_mu, NULL);
  MPI_Comm *cell = malloc(sizeof *cell); /* MPI writes it when the idup completes */
  if (!c || !cell) {
    free(c);
    free(cell);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s", op);
  }
  c->dup = c->node = MPI_COMM_NULL;
  c->timeout_ms = resolve_timeout(cfg);
  MPI_Query_thread(&c->thread_level);
  /* Bad arguments fail every rank, through the steps below. */
  vmmipc_result_t local = out ? check_config(cfg, op) : vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);

  MPI_Request req = MPI_REQUEST_NULL;
  int mrc = MPI_Comm_idup(comm, cell, &req);
  int w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait(&req, 1, vmmipc__now_ms() + c->timeout_ms, &mrc) : -1;
  if (w != 0) {
    vmmipc_result_t r = w < 0 ? vmmipc__mpi_error(mrc, "%s: MPI_Comm_idup", op)
                              : vmmipc__error(VMMIPC_ERR_TIMEOUT,
                                              "%s: duplicating the communicator timed out after %d ms: some rank is "
                                              "not in vmmipc_comm_create",
                                              op, c->timeout_ms);
    if (w > 0) {
      vmmipc__mpi_abandon(&req, 1, 0, cell);
      cell = NULL;
    }
    free(cell);
    free(c);
    return r;
  }
  c->dup = *cell;
  free(cell);
  MPI_Comm_set_errhandler(c->dup, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->dup, &c->rank);
  MPI_Comm_size(c->dup, &c->size);

  struct rank_info *me = calloc(1, sizeof *me), *all = calloc((size_t)c->size, sizeof *all);
  if (!me || !all) {
    free(me);
    free(all);
    comm_free(c);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d rank records", op, c->size);
  }
  me->pid = (int32_t)getpid();
  me->uid = (int32_t)geteuid(); /* SO_PEERCRED reports the effective uid */
  me->timeout_ms = c->timeout_ms;
  int explicit_ns;
  me->socket_ns = resolve_namespace(cfg, &explicit_ns);
  me->explicit_ns = explicit_ns;
  const char *nid = getenv("VMMIPC_NODE_ID");
  snprintf(me->node_id, sizeof me->node_id, "%s", nid ? nid : "");
  gethostname(me->host, sizeof me->host - 1);
  if (!local) local = vmmipc__host_id(me->boot_id);
  if (!local && c->rank == 0) local = vmmipc__random(&me->comm_id, sizeof me->comm_id, op);
  me->status = (int32_t)local;
  req = MPI_REQUEST_NULL;
  mrc = MPI_Iallgather(me, (int)sizeof *me, MPI_BYTE, all, (int)sizeof *me, MPI_BYTE, c->dup, &req);
  w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait(&req, 1, vmmipc__now_ms() + c->timeout_ms, &mrc) : -1;
  if (w != 0) {
    vmmipc_result_t r = w < 0 ? vmmipc__mpi_error(mrc, "%s: MPI_Iallgather of rank records", op)
                              : vmmipc__error(VMMIPC_ERR_TIMEOUT,
                                              "%s: gathering rank records timed out after %d ms: some rank is not in "
                                              "vmmipc_comm_create",
                                              op, c->timeout_ms);
    if (w > 0) { /* MPI may still fill them: keep both, and the communicator */
      vmmipc__mpi_abandon(&req, 1, 0, all);
      vmmipc__mpi_keep(me);
      all = me = NULL;
      c->broken = 1;
    }
    free(me);
    free(all);
    comm_free(c);
    return r;
  }
  /* Every rank now sees every status and configuration: what follows is
   * decided alike everywhere. */
  int failed = first_failure(all, c->size);
  c->id = all[0].comm_id;
  if (failed < 0) local = check_agreed(all, c->size, op);
  if (failed < 0 && !local) local = check_shared_node(c, all, op);
  if (failed < 0) {
    int color = 0;
    while (!same_node_key(&all[color], &all[c->rank])) color++;
    mrc = MPI_Comm_split(c->dup, color, c->rank, &c->node);
    if (mrc != MPI_SUCCESS && !local) local = vmmipc__mpi_error(mrc, "%s: MPI_Comm_split by node", op);
    if (mrc == MPI_SUCCESS) {
      MPI_Comm_set_errhandler(c->node, MPI_ERRORS_RETURN);
      vmmipc_result_t t = node_tables(c, all, op);
      if (t) vmmipc__error_rank(c->rank); /* this rank's own failure */
      if (!local) local = t;
      /* All ranks of one node saw the same records, so they take part in
       * the address exchange together; a rank that failed here (its tables)
       * publishes its failure there, and its peers fail at once. */
      vmmipc_result_t s = open_sockets(c, cfg, all, local, op);
      if (!local) local = s;
    }
  } else if (failed != c->rank) {
    local = vmmipc__error(VMMIPC_ERR_PEER, "%s: rank %d failed before the node split", op, failed);
    vmmipc__error_rank(failed);
  }
  free(me);
  free(all);
  /* A failure that only this rank saw is secondary when a lower rank also
   * failed, and so is one that blames another rank (it hung up, or its
   * socket refused us): the verdict then reports the rank that failed
   * first on its own. */
  int secondary = failed >= 0 && failed != c->rank;
  if (local == VMMIPC_ERR_PEER && !secondary) {
    vmmipc__error_state_t st;
    vmmipc__error_get(&st);
    secondary = st.rank >= 0 && st.rank != c->rank;
  }
  vmmipc_result_t r = vmmipc__agree(c, local, secondary, op);
  if (r || c->broken) {
    if (!r) r = VMMIPC_ERR_TIMEOUT;
    if (!c->broken) vmmipc__agree_flush(c); /* every rank shares the verdict: a late withdrawal is taken */
    comm_free(c);
    return r;
  }
  c->timing.struct_size = sizeof c->timing;
  vmmipc__tp_watch_abort(c->tp, &c->aborted);
  int idle = resolve_cache(cfg);
  /* Only out of host memory can fail here: the comm then works uncached. */
  if (idle > 0 && vmmipc__mapcache_create(idle, &c->cache) != VMMIPC_SUCCESS) c->cache = NULL;
  if (c->cache) vmmipc__mapcache_set_max_bytes(c->cache, resolve_cache_bytes(cfg));
  vmmipc__live_add(c);
  *out = c;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_comm_destroy(vmmipc_comm_t c) {
  const char *op = "vmmipc_comm_destroy";
  if (!c) return VMMIPC_SUCCESS; /* like free(NULL) */
  int aborted_in_call = 0; /* another thread aborted the comm as this call began */
again:
  if (c->broken || __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) { /* nobody to agree with: clean up locally */
    if (!vmmipc__hold(c))
      return vmmipc__error(VMMIPC_ERR_BUSY, "%s: another thread is inside a call on this comm", op);
    vmmipc__tell_untold(c, op);
    vmmipc__deferred_reap_local(c); /* what this rank released */
    /* Refused: the message is made before the comm is let go (another
     * thread may free it at once). */
    vmmipc_result_t busy = VMMIPC_SUCCESS;
    if (c->open_heaps)
      busy = vmmipc__error(VMMIPC_ERR_BUSY, "%s: %d heap(s) of this comm are live; hint: vmmipc_heap_destroy them first",
                           op, c->open_heaps);
    else if (c->open_windows)
      busy = vmmipc__error(VMMIPC_ERR_BUSY,
                           "%s: %d window(s) of this comm are open; hint: vmmipc_win_free them first (it frees them "
                           "locally on a broken comm)",
                           op, c->open_windows);
    if (busy) {
      __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
      return busy;
    }
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
      vmmipc__tell_abort(c); /* once: see below */
      vmmipc__tell_aborted_unasked(c, op); /* where MPI allows it */
    }
    /* No agreement, so no flush: the peers may still send on the MPI
     * communicators. An abort is told over the node's sockets only, so a
     * peer off this node (or one that had sent before the END frame came)
     * makes its next call's agreement and sends this rank its outcome, a
     * withdrawal, its broken outcome. Freed, the communicators' context
     * would be reused by the next communicator the peers are not in, where
     * Open MPI matched those messages, or died looking their sender up
     * (chaos seed 20040: SIGSEGV in mca_pml_ob1_add_comm). They are kept,
     * as a broken comm's are. */
    c->mpi_dirty = 1;
    /* An abort during the call ends it as it ends a blocked one (vmmipc.h),
     * whether it came before or after the call looked at the comm. */
    vmmipc_result_t freed = aborted_in_call ? vmmipc__freed_locally(c, op) : VMMIPC_SUCCESS;
    comm_free(c);
    return freed;
  }
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  /* It failed meanwhile (not a refusal of this thread): locally, as above. */
  if (r && r != VMMIPC_ERR_BUSY && r != VMMIPC_ERR_INVALID_ARG && vmmipc__failed(c)) {
    aborted_in_call = __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE); /* this rank's: not at the test above */
    goto again;
  }
  if (r) return r;
  vmmipc_result_t local = VMMIPC_SUCCESS;
  /* What this rank released will go (in step, below) once every rank
   * released it too; the rest refuses. */
  int heaps = c->open_heaps - vmmipc__deferred_count_of(c, 1, NULL);
  int wins = c->open_windows - vmmipc__deferred_count_of(c, 0, NULL);
  if (heaps > 0)
    local = vmmipc__error(VMMIPC_ERR_BUSY,
                          "%s: %d heap(s) of this comm are live on rank %d; hint: vmmipc_heap_destroy (or "
                          "vmmipc_heap_release) them first",
                          op, heaps, c->rank);
  else if (wins > 0)
    local = vmmipc__error(VMMIPC_ERR_BUSY,
                          "%s: %d window(s) of this comm are open on rank %d; hint: vmmipc_win_free (or "
                          "vmmipc_win_release) them first",
                          op, wins, c->rank);
  /* Collective: nobody closes its sockets while a peer may still send.
   * Released objects are freed in the rounds of the agreement. */
  r = vmmipc__agree_drain(c, local, op, 0, 0);
  if (!r && (c->open_windows || c->open_heaps)) { /* pinned after it was released: a misuse */
    r = vmmipc__error(VMMIPC_ERR_BUSY,
                      "%s: %d window(s) and %d heap(s) of this comm are still open on rank %d (pinned after they "
                      "were released?); the comm stays open",
                      op, c->open_windows, c->open_heaps, c->rank);
    vmmipc__leave(c);
    return r;
  }
  if (r && !c->broken) { /* refused everywhere: the comm stays usable */
    vmmipc__leave(c);
    return r;
  }
  if (local) { /* it broke meanwhile, but windows or heaps of it are still open here */
    r = vmmipc__error(VMMIPC_ERR_BUSY,
                      "%s: the comm broke in this call, and %d window(s) and %d heap(s) of it are still open here; "
                      "hint: free them (locally now), then destroy the comm",
                      op, c->open_windows, c->open_heaps);
    vmmipc__leave(c);
    return r;
  }
  /* What every rank released went in the agreement's rounds; on a comm
   * that failed in them, what this rank released goes now, locally (a
   * peer's abort: the heap and windows released before this call). */
  vmmipc__reap_released(c);
  /* Freed now, so never a code that means "still open" (vmmipc.h). */
  if (r == VMMIPC_ERR_BUSY || r == VMMIPC_ERR_INVALID_ARG) {
    r = c->broken_code ? c->broken_code : VMMIPC_ERR_PEER;
    vmmipc__error_code(r);
  }
  /* Freeing calls MPI_Comm_free: this thread stays counted inside until it
   * is done (nobody else may use the comm by now). An abort from another
   * thread meanwhile could not tell the peers: this thread does, before
   * the sockets close, so that they fail at once instead of waiting out
   * their agreement. */
  __atomic_store_n(&c->busy_op, (const char *)NULL, __ATOMIC_RELAXED);
  if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
    vmmipc__tell_abort(c);
    /* Aborted after its outcome of a round had gone out (the drain then
     * stops here): the others may have another round to make. Told before
     * the flush, which then takes this message if they do not. */
    vmmipc__agree_tell_aborted(c);
  }
  /* Every rank shares the verdict: what a peer sent after it (a withdrawal
   * of a rank that gave up as the verdict came) is received before the MPI
   * communicators are freed. */
  if (!c->broken) vmmipc__agree_flush(c);
  comm_free(c);
  vmmipc__leave_process();
  return r;
}
