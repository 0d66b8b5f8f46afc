/* Command-line helpers shared by the benchmarks. */
#ifndef VMMIPC_BENCH_ARGS_H
#define VMMIPC_BENCH_ARGS_H

#include <stddef.h>
#include <stdio.h>

#define BENCH_KiB ((size_t)1 << 10)
#define BENCH_MiB ((size_t)1 << 20)
#define BENCH_GiB ((size_t)1 << 30)

/* "4096", "64K", "4M", "1G", "2GiB", "512MB" (K/M/G are binary: 2^10...). */
int bench_parse_size(const char *s, size_t *out);
int bench_parse_int(const char *s, int *out);
int bench_parse_double(const char *s, double *out);
/* "1,16,256" into out[0..*n); at most max entries. */
int bench_parse_int_list(const char *s, int *out, int max, int *n);

/* Matches argv[*i] against "--name" (value in the next argument) or
 * "--name=value"; on a match returns the value and advances *i. Exits with a
 * message when the value is missing. */
const char *bench_opt(int argc, char **argv, int *i, const char *name);
/* Whether argv[i] is exactly the flag "--name". */
int bench_flag(const char *arg, const char *name);

/* The options every program takes, at the end of its option loop:
 * "--quiet" sets *quiet; "--help" or "-h" prints the usage and exits 0.
 * Returns whether argv[i] was one of them. */
int bench_common_flag(const char *arg, int *quiet, void (*usage)(FILE *));
/* An unknown option (unknown != 0) or a bad value for argv[i]: says so,
 * prints the usage to stderr and exits 2, after MPI_Finalize. */
void bench_opt_fail(const char *prog, const char *arg, int unknown, void (*usage)(FILE *));

/* "512 B", "64 KiB", "4 MiB", "1 GiB", "3145728 B". */
const char *bench_size_str(size_t n, char *buf, size_t len);

#endif
