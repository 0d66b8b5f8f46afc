/* The part of every benchmark's JSON that describes the run: program,
 * version, command line, ranks, their devices, and the driver. */
#include "common/json_node.h"

#include "common/driver.h"

void bench_json_node(jw_t *w, const bench_node_t *n, const char *prog, int argc, char **argv) {
  jw_str(w, "benchmark", prog);
  jw_str(w, "vmmipc_version", vmmipc_version());
  jw_arr(w, "argv");
  for (int i = 0; i < argc; i++) jw_str(w, NULL, argv[i]);
  jw_end_arr(w);
  jw_int(w, "ranks", n->size);
  jw_arr(w, "devices");
  for (int r = 0; r < n->size; r++) {
    jw_obj(w, NULL);
    jw_int(w, "rank", r);
    jw_int(w, "ordinal", n->all_devices[r]);
    jw_str(w, "name", n->all_names[r]);
    jw_str(w, "uuid", n->all_uuids[r]);
    jw_end_obj(w);
  }
  jw_end_arr(w);
  jw_obj(w, "driver");
  jw_str(w, "path", bd.path);
  jw_int(w, "version", bd.driver_version);
  jw_bool(w, "standin", bd.is_standin);
  jw_end_obj(w);
}
