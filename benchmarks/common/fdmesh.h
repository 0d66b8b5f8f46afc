/* A minimal all-to-all mesh of Unix domain sockets between the ranks of a
 * node, for moving file descriptors with SCM_RIGHTS without the library.
 * Connections are made once (bench_fdmesh_create); sends and receives are
 * plain blocking sendmsg/recvmsg loops, the floor the library is measured
 * against. */
#ifndef VMMIPC_BENCH_FDMESH_H
#define VMMIPC_BENCH_FDMESH_H

#include <mpi.h>
#include <stddef.h>

typedef struct bench_fdmesh {
  int rank, size;
  int *sock; /* [size]: connected SOCK_SEQPACKET socket to each peer, -1 for self */
} bench_fdmesh_t;

/* Collective over comm (all ranks on one node). 0 on success, else -1 with a
 * message in err on the rank that failed (err is empty on the others: agree
 * with bench_agree_skip). */
int bench_fdmesh_create(MPI_Comm comm, bench_fdmesh_t *m, char *err, size_t errlen);
void bench_fdmesh_destroy(bench_fdmesh_t *m);

/* Sends nfds descriptors (they stay open here) with a small header of hdrlen
 * bytes (at most 256) to peer; the receiver must ask for the same counts.
 * Return 0, or -1 with errno set. */
int bench_fdmesh_send(const bench_fdmesh_t *m, int peer, const void *hdr, size_t hdrlen, const int *fds,
                      int nfds);
int bench_fdmesh_recv(const bench_fdmesh_t *m, int peer, void *hdr, size_t hdrlen, int *fds, int nfds);

#endif
