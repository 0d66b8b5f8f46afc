/* Parsing of sizes, numbers and options. */
#include "common/args.h"

#include <mpi.h>

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bench_parse_size(const char *s, size_t *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return -1;
  while (*end == ' ') end++;
  size_t mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = BENCH_KiB; end++; break;
    case 'M': mult = BENCH_MiB; end++; break;
    case 'G': mult = BENCH_GiB; end++; break;
    case 'T': mult = BENCH_GiB << 10; end++; break;
    case 'B': break;
    case '\0': break;
    default: return -1;
  }
  if (mult > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  double bytes = v * (double)mult;
  if (bytes > (double)(SIZE_MAX / 2)) return -1;
  *out = (size_t)bytes;
  return 0;
}

int bench_parse_int(const char *s, int *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < -2147483647L || v > 2147483647L) return -1;
  *out = (int)v;
  return 0;
}

int bench_parse_double(const char *s, double *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

int bench_parse_int_list(const char *s, int *out, int max, int *n) {
  *n = 0;
  if (!s || !*s) return -1;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", s);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n >= max || bench_parse_int(tok, &out[*n]) != 0) return -1;
    (*n)++;
  }
  return *n > 0 ? 0 : -1;
}

const char *bench_opt(int argc, char **argv, int *i, const char *name) {
  const char *a = argv[*i];
  if (strncmp(a, "--", 2) != 0) return NULL;
  size_t len = strlen(name);
  if (strncmp(a + 2, name, len) != 0) return NULL;
  if (a[2 + len] == '=') return a + 3 + len;
  if (a[2 + len] != '\0') return NULL;
  if (*i + 1 >= argc) {
    fprintf(stderr, "option --%s needs a value\n", name);
    exit(2);
  }
  (*i)++;
  return argv[*i];
}

int bench_flag(const char *arg, const char *name) {
  return strncmp(arg, "--", 2) == 0 && strcmp(arg + 2, name) == 0;
}

const char *bench_size_str(size_t n, char *buf, size_t len) {
  if (n >= BENCH_GiB && n % BENCH_GiB == 0)
    snprintf(buf, len, "%zu GiB", n / BENCH_GiB);
  else if (n >= BENCH_MiB && n % BENCH_MiB == 0)
    snprintf(buf, len, "%zu MiB", n / BENCH_MiB);
  else if (n >= BENCH_KiB && n % BENCH_KiB == 0)
    snprintf(buf, len, "%zu KiB", n / BENCH_KiB);
  else
    snprintf(buf, len, "%zu B", n);
  return buf;
}

int bench_common_flag(const char *arg, int *quiet, void (*usage)(FILE *)) {
  if (bench_flag(arg, "quiet")) {
    *quiet = 1;
    return 1;
  }
  if (bench_flag(arg, "help") || strcmp(arg, "-h") == 0) {
    usage(stdout);
    MPI_Finalize();
    exit(0);
  }
  return 0;
}

void bench_opt_fail(const char *prog, const char *arg, int unknown, void (*usage)(FILE *)) {
  fprintf(stderr, unknown ? "%s: unknown option %s\n" : "%s: bad value for %s\n", prog, arg);
  usage(stderr);
  MPI_Finalize();
  exit(2);
}
