/* The NVLink line rate of a GPU, per direction: links x per-link rate.
 *
 * The link count comes from `nvidia-smi nvlink -s -i <uuid>` (active links
 * only), the generation and per-link rate from a table keyed by the GPU
 * name (NVLink 2/3/4: 25 GB/s per link per direction, NVLink 5: 50), with
 * the table's usual link count when nvidia-smi is unavailable. */
#ifndef VMMIPC_BENCH_LINERATE_H
#define VMMIPC_BENCH_LINERATE_H

typedef struct bench_linerate {
  double gbps;          /* per direction, GB/s (10^9); 0 when unknown */
  int nvlink_gen;       /* 0 when unknown */
  int links;            /* active links counted, or the table's count */
  double per_link_gbps; /* per link per direction */
  double smi_link_gbps; /* speed nvidia-smi printed for a link (signalling rate), 0 if none */
  char source[160];     /* how it was found, or why it is unknown */
} bench_linerate_t;

/* name: cuDeviceGetName; uuid: "GPU-..." for nvidia-smi -i. */
void bench_linerate_detect(const char *name, const char *uuid, bench_linerate_t *out);
/* A fixed value from the command line. */
void bench_linerate_override(double gbps, bench_linerate_t *out);

#endif
