/* vmmipc_comm_create/destroy: node split by host identity (with the
 * VMMIPC_NODE_ID override), socket setup, and the checks around them. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/error.h"
#include "common/host.h"

#include "common/defaults.h"

/* What each rank tells the others of its node (through MPI). */
struct vmmipc__rank_info {
  char node_id[64];   /* VMMIPC_NODE_ID, or "" */
  char hostname[64];
  unsigned char boot_id[16];
  int pid, uid, rank;
};

static int vmmipc__timeout(const vmmipc_config_t *cfg) {
  if (cfg && cfg->timeout_ms > 0) return cfg->timeout_ms;
  const char *e = getenv("VMMIPC_TIMEOUT_MS");
  if (e && *e) {
    long v = strtol(e, NULL, 10);
    if (v > 0 && v < 1L << 30) return (int)v;
  }
  return VMMIPC__DEFAULT_TIMEOUT_MS;
}

static vmmipc_result_t vmmipc__check_config(const vmmipc_config_t *cfg) {
  if (!cfg) return VMMIPC_SUCCESS;
  if (cfg->struct_size < offsetof(vmmipc_config_t, socket_dir) + sizeof(const char *) ||
      cfg->struct_size > 4096)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc_comm_create: config->struct_size is %zu; hint: initialise the config with "
                         "VMMIPC_CONFIG_INIT",
                         cfg->struct_size);
  if (cfg->socket_namespace != VMMIPC_SOCKET_AUTO && cfg->socket_namespace != VMMIPC_SOCKET_ABSTRACT &&
      cfg->socket_namespace != VMMIPC_SOCKET_FILESYSTEM)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc_comm_create: config->socket_namespace %d is neither VMMIPC_SOCKET_ABSTRACT nor "
                         "VMMIPC_SOCKET_FILESYSTEM",
                         cfg->socket_namespace);
  return VMMIPC_SUCCESS;
}

static void vmmipc__random(unsigned char *out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = getrandom(out + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  if (got < n) { /* no getrandom: fall back to the urandom device */
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      while (got < n) {
        ssize_t k = read(fd, out + got, n - got);
        if (k <= 0) break;
        got += (size_t)k;
      }
      close(fd);
    }
  }
}

static void vmmipc__comm_free(vmmipc_comm_t c) {
  if (!c) return;
  if (c->tp) vmmipc__tp_close(c->tp);
  if (c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
  if (c->dup != MPI_COMM_NULL) MPI_Comm_free(&c->dup);
  free(c->node_of);
  free(c->rank_of);
  free(c);
}

/* Splits dup into nodes and checks that each node is one host. */
static vmmipc_result_t vmmipc__split_nodes(vmmipc_comm_t c, struct vmmipc__rank_info **infos_out) {
  const char *op = "vmmipc_comm_create";
  struct vmmipc__rank_info me;
  memset(&me, 0, sizeof me);
  const char *nid = getenv("VMMIPC_NODE_ID");
  snprintf(me.node_id, sizeof me.node_id, "%s", nid ? nid : "");
  gethostname(me.hostname, sizeof me.hostname - 1);
  me.pid = (int)getpid();
  me.uid = (int)geteuid(); /* SO_PEERCRED reports the effective uid */
  me.rank = c->rank;
  vmmipc_result_t local = vmmipc__host_id(me.boot_id);

  MPI_Comm shm = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(c->dup, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shm);
  if (rc != MPI_SUCCESS) return vmmipc__mpi_error(rc, "%s: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", op);
  int shm_size = 0, shm_rank = 0;
  MPI_Comm_size(shm, &shm_size);
  MPI_Comm_rank(shm, &shm_rank);
  struct vmmipc__rank_info *all = calloc((size_t)shm_size, sizeof *all);
  if (!all) {
    MPI_Comm_free(&shm);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d rank records", op, shm_size);
  }
  rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, shm);
  if (rc != MPI_SUCCESS) {
    free(all);
    MPI_Comm_free(&shm);
    return vmmipc__mpi_error(rc, "%s: MPI_Allgather of host identities", op);
  }
  /* Ranks MPI puts on one node must share a kernel to pass fds. */
  for (int i = 0; i < shm_size && !local; i++)
    if (memcmp(all[i].boot_id, all[0].boot_id, 16) != 0)
      local = vmmipc__error(VMMIPC_ERR_PEER,
                            "%s: ranks %d (host %s) and %d (host %s) share an MPI node but run on different hosts "
                            "(kernel boot ids differ), so they cannot share memory; hint: run one container per "
                            "node with a shared IPC and network namespace, or set VMMIPC_NODE_ID per host",
                            op, all[0].rank, all[0].hostname, all[i].rank, all[i].hostname);
  int color = 0;
  for (int i = 0; i < shm_size; i++)
    if (strcmp(all[i].node_id, me.node_id) == 0) {
      color = i;
      break;
    }
  rc = MPI_Comm_split(shm, color, c->rank, &c->node);
  MPI_Comm_free(&shm);
  if (rc != MPI_SUCCESS) {
    free(all);
    return vmmipc__mpi_error(rc, "%s: MPI_Comm_split by node", op);
  }
  MPI_Comm_set_errhandler(c->node, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->node, &c->node_rank);
  MPI_Comm_size(c->node, &c->node_size);
  /* Keep only this node's records, in node-rank order. */
  struct vmmipc__rank_info *node = calloc((size_t)c->node_size, sizeof *node);
  c->rank_of = calloc((size_t)c->node_size, sizeof *c->rank_of);
  c->node_of = malloc((size_t)c->size * sizeof *c->node_of);
  if (!node || !c->rank_of || !c->node_of) {
    free(all);
    free(node);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: node tables", op);
  }
  rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, node, (int)sizeof me, MPI_BYTE, c->node);
  free(all);
  if (rc != MPI_SUCCESS) {
    free(node);
    return vmmipc__mpi_error(rc, "%s: MPI_Allgather over the node", op);
  }
  for (int r = 0; r < c->size; r++) c->node_of[r] = -1;
  for (int i = 0; i < c->node_size; i++) {
    c->rank_of[i] = node[i].rank;
    c->node_of[node[i].rank] = i;
  }
  *infos_out = node;
  return local;
}

static const char *vmmipc__socket_dir(const vmmipc_config_t *cfg, int *filesystem) {
  const char *env = getenv("VMMIPC_SOCKET_DIR");
  *filesystem = (cfg && cfg->socket_namespace == VMMIPC_SOCKET_FILESYSTEM) || (env && *env);
  if (cfg && cfg->socket_dir && *cfg->socket_dir) return cfg->socket_dir;
  if (env && *env) return env;
  const char *tmp = getenv("TMPDIR");
  return (tmp && *tmp) ? tmp : "/tmp";
}

static vmmipc_result_t vmmipc__open_sockets(vmmipc_comm_t c, const vmmipc_config_t *cfg,
                                            const struct vmmipc__rank_info *node) {
  const char *op = "vmmipc_comm_create";
  vmmipc__tp_opts_t o;
  memset(&o, 0, sizeof o);
  int fs = 0;
  o.socket_dir = vmmipc__socket_dir(cfg, &fs);
  o.socket_namespace = fs ? VMMIPC_SOCKET_FILESYSTEM : VMMIPC_SOCKET_ABSTRACT;
  if (c->rank == 0) vmmipc__random(o.nonce, sizeof o.nonce);
  int rc = MPI_Bcast(o.nonce, (int)sizeof o.nonce, MPI_BYTE, 0, c->dup);
  if (rc != MPI_SUCCESS) return vmmipc__mpi_error(rc, "%s: MPI_Bcast of the socket nonce", op);
  /* Names differ between the nodes of one communicator (virtual nodes share
   * a namespace): fold the node leader's rank into the nonce. */
  int leader = c->rank_of[0];
  for (int i = 0; i < 4; i++) o.nonce[12 + i] ^= (unsigned char)(leader >> (8 * i));
  o.node_rank = c->node_rank;
  o.node_size = c->node_size;
  o.ranks = c->rank_of;
  o.timeout_ms = c->timeout_ms;
  vmmipc_result_t r = vmmipc__tp_open(&o, &c->tp);
  if (r) return r;
  pid_t *pids = malloc((size_t)c->node_size * sizeof *pids);
  uid_t *uids = malloc((size_t)c->node_size * sizeof *uids);
  if (!pids || !uids) {
    free(pids);
    free(uids);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: peer tables", op);
  }
  for (int i = 0; i < c->node_size; i++) {
    pids[i] = (pid_t)node[i].pid;
    uids[i] = (uid_t)node[i].uid;
  }
  r = vmmipc__tp_set_peers(c->tp, pids, uids);
  free(pids);
  free(uids);
  return r;
}

vmmipc_result_t vmmipc_comm_create(MPI_Comm comm, const vmmipc_config_t *cfg, vmmipc_comm_t *out) {
  const char *op = "vmmipc_comm_create";
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  *out = NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: MPI is not initialised; hint: call MPI_Init", op);
  if (comm == MPI_COMM_NULL) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is MPI_COMM_NULL", op);
  vmmipc_comm_t c = calloc(1, sizeof *c);
  if (!c) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s", op);
  c->dup = c->node = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(comm, &c->dup);
  if (rc != MPI_SUCCESS) {
    free(c);
    return vmmipc__mpi_error(rc, "%s: MPI_Comm_dup", op);
  }
  MPI_Comm_set_errhandler(c->dup, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->dup, &c->rank);
  MPI_Comm_size(c->dup, &c->size);
  /* A bad config on one rank fails every rank. */
  vmmipc_result_t local = vmmipc__check_config(cfg);
  vmmipc_result_t r = vmmipc__agree(c, local, op);
  if (r) {
    vmmipc__comm_free(c);
    return r;
  }
  c->timeout_ms = vmmipc__timeout(cfg);
  struct vmmipc__rank_info *node = NULL;
  local = vmmipc__split_nodes(c, &node);
  if (!local) local = vmmipc__open_sockets(c, cfg, node);
  else if (c->rank_of) {
    /* Still take part in the nonce broadcast so that no rank waits. */
    unsigned char nonce[16] = {0};
    MPI_Bcast(nonce, (int)sizeof nonce, MPI_BYTE, 0, c->dup);
  }
  free(node);
  r = vmmipc__agree(c, local, op);
  if (r) {
    vmmipc__comm_free(c);
    return r;
  }
  *out = c;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_comm_destroy(vmmipc_comm_t c) {
  if (!c) return VMMIPC_SUCCESS; /* like free(NULL) */
  /* Collective: nobody closes its sockets while a peer may still send. */
  vmmipc_result_t r = vmmipc__agree(c, VMMIPC_SUCCESS, "vmmipc_comm_destroy");
  vmmipc__comm_free(c);
  return r;
}

vmmipc_result_t vmmipc_comm_node_comm(vmmipc_comm_t c, MPI_Comm *node_comm) {
  if (!c || !node_comm) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_node_comm: comm or out is NULL");
  *node_comm = c->node;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_comm_same_node(vmmipc_comm_t c, int rank, int *same) {
  if (!c || !same) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_same_node: comm or same is NULL");
  if (rank < 0 || rank >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_same_node: rank %d is out of range 0..%d", rank,
                         c->size - 1);
  *same = c->node_of[rank] >= 0;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_comm_last_timing(vmmipc_comm_t c, vmmipc_timing_t *t) {
  if (!c || !t) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_last_timing: comm or timing is NULL");
  if (t->struct_size < sizeof(size_t) + sizeof(double) || t->struct_size > 4096)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc_comm_last_timing: timing->struct_size is %zu; hint: initialise it with "
                         "VMMIPC_TIMING_INIT",
                         t->struct_size);
  size_t n = t->struct_size < sizeof c->timing ? t->struct_size : sizeof c->timing;
  vmmipc_timing_t copy = c->timing;
  copy.struct_size = t->struct_size;
  memcpy(t, &copy, n);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__peer_node_rank(struct vmmipc_comm *c, int rank, const char *op, int *node_rank) {
  if (rank < 0 || rank >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: rank %d is out of range 0..%d", op, rank, c->size - 1);
  if (rank == c->rank)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: rank %d is the calling rank; hint: import your own descriptor with vmmipc_import", op,
                         rank);
  if (c->node_of[rank] < 0)
    return vmmipc__error(VMMIPC_ERR_PEER,
                         "%s: rank %d is not on the node of rank %d, so no file descriptor can reach it; hint: check "
                         "vmmipc_comm_same_node() first, and use MPI for off-node data",
                         op, rank, c->rank);
  *node_rank = c->node_of[rank];
  return VMMIPC_SUCCESS;
}
