/* JSON fields shared by every benchmark's output. */
#ifndef VMMIPC_BENCH_JSON_NODE_H
#define VMMIPC_BENCH_JSON_NODE_H

#include "common/json.h"
#include "common/node.h"

/* Writes benchmark, vmmipc_version, argv, ranks, devices and driver into
 * the object `w` has open. */
void bench_json_node(jw_t *w, const bench_node_t *n, const char *prog, int argc, char **argv);

#endif
