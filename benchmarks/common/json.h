/* A small streaming JSON writer: objects, arrays, strings and numbers.
 * Inside an object every call takes a key; inside an array the key is NULL.
 * Non-finite numbers are written as null. */
#ifndef VMMIPC_BENCH_JSON_H
#define VMMIPC_BENCH_JSON_H

#include <stdio.h>

#define JW_MAX_DEPTH 32

typedef struct jw {
  FILE *f;
  int depth;
  int count[JW_MAX_DEPTH]; /* members written at each level */
} jw_t;

void jw_init(jw_t *w, FILE *f);
void jw_obj(jw_t *w, const char *key);  /* opens an object */
void jw_arr(jw_t *w, const char *key);  /* opens an array */
void jw_end_obj(jw_t *w);
void jw_end_arr(jw_t *w);
void jw_str(jw_t *w, const char *key, const char *val); /* NULL val: null */
void jw_num(jw_t *w, const char *key, double val);
void jw_int(jw_t *w, const char *key, long long val);
void jw_bool(jw_t *w, const char *key, int val);
void jw_null(jw_t *w, const char *key);

#endif
