/* NVLink line rate from nvidia-smi and a table of GPU names. */
#include "common/linerate.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *pattern; /* substring of the device name */
  int gen, links;
  double per_link;
} linerate_row;

/* Per direction. H800/A800 have fewer links; nvidia-smi corrects counts. */
static const linerate_row linerate_table[] = {
    {"GH200", 4, 18, 25.0}, {"H200", 4, 18, 25.0}, {"H100", 4, 18, 25.0}, {"H800", 4, 8, 25.0},
    {"H20", 4, 18, 25.0},   {"GB300", 5, 18, 50.0}, {"GB200", 5, 18, 50.0}, {"B300", 5, 18, 50.0},
    {"B200", 5, 18, 50.0},  {"B100", 5, 18, 50.0},  {"A100", 3, 12, 25.0}, {"A800", 3, 8, 25.0},
    {"V100", 2, 6, 25.0},
};

/* Counts "Link N: <x> GB/s" lines; returns the count, speed of the first. */
static int linerate_smi(const char *uuid, double *speed) {
  *speed = 0;
  if (!uuid || strncmp(uuid, "GPU-", 4) != 0) return 0;
  for (const char *p = uuid; *p; p++)
    if (!isxdigit((unsigned char)*p) && *p != '-' && *p != 'G' && *p != 'P' && *p != 'U') return 0;
  char cmd[160];
  snprintf(cmd, sizeof cmd, "nvidia-smi nvlink -s -i %s 2>/dev/null", uuid);
  FILE *f = popen(cmd, "r");
  if (!f) return 0;
  char line[256];
  int links = 0;
  while (fgets(line, sizeof line, f)) {
    const char *l = strstr(line, "Link ");
    const char *colon = l ? strchr(l, ':') : NULL;
    if (!colon || !strstr(colon, "GB/s")) continue;
    double v = strtod(colon + 1, NULL);
    if (v <= 0) continue;
    if (links == 0) *speed = v;
    links++;
  }
  pclose(f);
  return links;
}

void bench_linerate_detect(const char *name, const char *uuid, bench_linerate_t *out) {
  memset(out, 0, sizeof *out);
  double speed;
  int links = linerate_smi(uuid, &speed);
  out->smi_link_gbps = speed;
  const linerate_row *row = NULL;
  for (size_t i = 0; i < sizeof linerate_table / sizeof linerate_table[0] && name; i++)
    if (strstr(name, linerate_table[i].pattern)) {
      row = &linerate_table[i];
      break;
    }
  if (row) {
    out->nvlink_gen = row->gen;
    out->per_link_gbps = row->per_link;
    out->links = links > 0 ? links : row->links;
    snprintf(out->source, sizeof out->source, "%s; NVLink %d at %.0f GB/s per link per direction (table for %s)",
             links > 0 ? "active links from nvidia-smi nvlink -s" : "link count from the table (no nvidia-smi)",
             row->gen, row->per_link, row->pattern);
  } else if (links > 0) {
    /* Unknown name: the signalling rate rounded down to a 25 GB/s step. */
    out->per_link_gbps = 25.0 * (double)(int)(speed / 25.0);
    out->links = links;
    snprintf(out->source, sizeof out->source,
             "active links and link speed (%.3f GB/s, taken as %.0f) from nvidia-smi nvlink -s; GPU not in the table",
             speed, out->per_link_gbps);
  } else {
    snprintf(out->source, sizeof out->source, "unknown: \"%s\" is not in the table and nvidia-smi shows no NVLink",
             name ? name : "");
    return;
  }
  out->gbps = out->per_link_gbps * out->links;
}

void bench_linerate_override(double gbps, bench_linerate_t *out) {
  memset(out, 0, sizeof *out);
  out->gbps = gbps;
  snprintf(out->source, sizeof out->source, "given with --line-rate");
}
