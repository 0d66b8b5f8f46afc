/* CUDA VMM buffers made, exported, imported and mapped with plain driver
 * calls, without the library: the "raw driver" anchors and floors. */
#ifndef VMMIPC_BENCH_RAWVMM_H
#define VMMIPC_BENCH_RAWVMM_H

#include <cuda.h>
#include <stddef.h>

typedef struct bench_rawbuf {
  CUdeviceptr base;
  size_t size;  /* nchunks * chunk */
  size_t chunk; /* every chunk has this size */
  int nchunks;
  CUmemGenericAllocationHandle *h; /* [nchunks] */
} bench_rawbuf_t;

/* Seconds spent in each part of an import; the fields add up. */
typedef struct bench_phases {
  double export_s, transfer_s, import_s, map_s, access_s;
} bench_phases_t;

/* Minimum VMM granularity of device `dev` for POSIX-fd-shareable memory. */
CUresult bench_raw_granularity(int dev, size_t *g);
/* nchunks chunks of `chunk` bytes (a multiple of the granularity) on device
 * dev, mapped back to back and read-write for dev. */
CUresult bench_raw_alloc(int dev, size_t chunk, int nchunks, bench_rawbuf_t *b);
/* One fresh POSIX fd per chunk into fds[b->nchunks]. */
CUresult bench_raw_export(const bench_rawbuf_t *b, int *fds);
/* Imports the fds (and closes them), reserves one range, maps the chunks in
 * order and grants device dev read-write; adds the time of each step to p
 * (import_s, map_s: reserve + map, access_s) when p is not NULL. */
CUresult bench_raw_import(int dev, const int *fds, int nchunks, size_t chunk, bench_rawbuf_t *out,
                          bench_phases_t *p);
/* Imports the fds (and closes them) without mapping: out->base stays 0. */
CUresult bench_raw_import_handles(const int *fds, int nchunks, size_t chunk, bench_rawbuf_t *out,
                                  bench_phases_t *p);
/* Joint mapping of n imported buffers: one range reserved for all, each
 * buffer's chunks mapped back to back in it, then a single cuMemSetAccess
 * for device dev over the whole range. Sets bufs[i].base and *range. */
typedef struct bench_rawrange {
  CUdeviceptr base;
  size_t size;
} bench_rawrange_t;
CUresult bench_raw_map_joint(int dev, bench_rawbuf_t *bufs, int n, bench_rawrange_t *range, bench_phases_t *p);
/* Unmaps and releases every buffer of a joint mapping, then frees the range. */
void bench_raw_free_joint(bench_rawbuf_t *bufs, int n, bench_rawrange_t *range);
/* Unmaps, releases and frees the range; safe on a zeroed struct. */
void bench_raw_free(bench_rawbuf_t *b);

#endif
