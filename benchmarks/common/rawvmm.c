/* Raw driver VMM: cuMemCreate / Export / Import / AddressReserve / Map / SetAccess. */
#include "common/rawvmm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/driver.h"
#include "common/node.h"

static void raw_prop(int dev, CUmemAllocationProp *prop) {
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = dev;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

CUresult bench_raw_granularity(int dev, size_t *g) {
  CUmemAllocationProp prop;
  raw_prop(dev, &prop);
  return bd.cuMemGetAllocationGranularity(g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

/* One buffer in a range of its own: a joint mapping of one. On failure the
 * caller's bench_raw_free undoes what was mapped. */
static CUresult raw_map_all(int dev, bench_rawbuf_t *b, bench_phases_t *p) {
  bench_rawrange_t range;
  return bench_raw_map_joint(dev, b, 1, &range, p);
}

CUresult bench_raw_alloc(int dev, size_t chunk, int nchunks, bench_rawbuf_t *b) {
  memset(b, 0, sizeof *b);
  b->h = calloc((size_t)nchunks, sizeof *b->h);
  if (!b->h) return CUDA_ERROR_OUT_OF_MEMORY;
  b->chunk = chunk;
  b->size = chunk * (size_t)nchunks;
  CUmemAllocationProp prop;
  raw_prop(dev, &prop);
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < nchunks && rc == CUDA_SUCCESS; i++) {
    rc = bd.cuMemCreate(&b->h[i], chunk, &prop, 0);
    if (rc == CUDA_SUCCESS) b->nchunks = i + 1;
  }
  if (rc == CUDA_SUCCESS) rc = raw_map_all(dev, b, NULL);
  if (rc != CUDA_SUCCESS) bench_raw_free(b);
  return rc;
}

CUresult bench_raw_export(const bench_rawbuf_t *b, int *fds) {
  for (int i = 0; i < b->nchunks; i++) {
    int fd = -1;
    CUresult rc = bd.cuMemExportToShareableHandle(&fd, b->h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS) {
      for (int k = 0; k < i; k++) close(fds[k]);
      return rc;
    }
    fds[i] = fd;
  }
  return CUDA_SUCCESS;
}

CUresult bench_raw_import_handles(const int *fds, int nchunks, size_t chunk, bench_rawbuf_t *out,
                                  bench_phases_t *p) {
  memset(out, 0, sizeof *out);
  out->h = calloc((size_t)nchunks, sizeof *out->h);
  if (!out->h) {
    for (int i = 0; i < nchunks; i++) close(fds[i]);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  out->chunk = chunk;
  out->size = chunk * (size_t)nchunks;
  double t0 = bench_now();
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < nchunks; i++) {
    if (rc == CUDA_SUCCESS) {
      void *osh = (void *)(long)fds[i];
      rc = bd.cuMemImportFromShareableHandle(&out->h[i], osh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (rc == CUDA_SUCCESS) out->nchunks = i + 1;
    }
    close(fds[i]);
  }
  if (p) p->import_s += bench_now() - t0;
  if (rc != CUDA_SUCCESS) bench_raw_free(out);
  return rc;
}

CUresult bench_raw_map_joint(int dev, bench_rawbuf_t *bufs, int n, bench_rawrange_t *range, bench_phases_t *p) {
  range->base = 0;
  range->size = 0;
  for (int i = 0; i < n; i++) range->size += bufs[i].h ? bufs[i].size : 0;
  if (range->size == 0) return CUDA_SUCCESS;
  double t0 = bench_now();
  CUresult rc = bd.cuMemAddressReserve(&range->base, range->size, 0, 0, 0);
  if (rc != CUDA_SUCCESS) {
    range->base = 0;
    return rc;
  }
  size_t off = 0;
  for (int i = 0; i < n && rc == CUDA_SUCCESS; i++) {
    if (!bufs[i].h) continue;
    bufs[i].base = range->base + off;
    for (int k = 0; k < bufs[i].nchunks && rc == CUDA_SUCCESS; k++)
      rc = bd.cuMemMap(bufs[i].base + (size_t)k * bufs[i].chunk, bufs[i].chunk, 0, bufs[i].h[k], 0);
    off += bufs[i].size;
  }
  double t1 = bench_now();
  if (rc == CUDA_SUCCESS) {
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = dev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    rc = bd.cuMemSetAccess(range->base, range->size, &a, 1);
  }
  if (p) {
    p->map_s += t1 - t0;
    p->access_s += bench_now() - t1;
  }
  /* On failure the caller's bench_raw_free_joint (bench_raw_free for one
   * buffer) undoes what was mapped: unmapping a range that is not mapped is
   * harmless on the real driver; the stand-in reports it, which is ignored. */
  return rc;
}

void bench_raw_free_joint(bench_rawbuf_t *bufs, int n, bench_rawrange_t *range) {
  for (int i = 0; i < n; i++) {
    if (bufs[i].base)
      for (int k = 0; k < bufs[i].nchunks; k++) bd.cuMemUnmap(bufs[i].base + (size_t)k * bufs[i].chunk, bufs[i].chunk);
    bufs[i].base = 0; /* the range is freed once, below */
    bench_raw_free(&bufs[i]);
  }
  if (range->base) bd.cuMemAddressFree(range->base, range->size);
  range->base = 0;
  range->size = 0;
}

CUresult bench_raw_import(int dev, const int *fds, int nchunks, size_t chunk, bench_rawbuf_t *out,
                          bench_phases_t *p) {
  CUresult rc = bench_raw_import_handles(fds, nchunks, chunk, out, p);
  if (rc == CUDA_SUCCESS) rc = raw_map_all(dev, out, p);
  if (rc != CUDA_SUCCESS) bench_raw_free(out);
  return rc;
}

void bench_raw_free(bench_rawbuf_t *b) {
  if (b->base) {
    for (int i = 0; i < b->nchunks; i++) bd.cuMemUnmap(b->base + (size_t)i * b->chunk, b->chunk);
    bd.cuMemAddressFree(b->base, b->size);
  }
  for (int i = 0; b->h && i < b->nchunks; i++) bd.cuMemRelease(b->h[i]);
  free(b->h);
  memset(b, 0, sizeof *b);
}
