/* Streaming JSON writer. */
#include "common/json.h"

#include <math.h>

void jw_init(jw_t *w, FILE *f) {
  w->f = f;
  w->depth = 0;
  w->count[0] = 0;
}

static void jw_escaped(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (*p < 0x20)
          fprintf(f, "\\u%04x", *p);
        else
          fputc(*p, f);
    }
  }
  fputc('"', f);
}

/* Separator, indentation and key of the next member. */
static void jw_member(jw_t *w, const char *key) {
  if (w->count[w->depth]++ > 0) fputc(',', w->f);
  if (w->depth > 0) {
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
  }
  if (key) {
    jw_escaped(w->f, key);
    fputs(": ", w->f);
  }
}

static void jw_open(jw_t *w, const char *key, char c) {
  jw_member(w, key);
  fputc(c, w->f);
  if (w->depth + 1 < JW_MAX_DEPTH) w->depth++;
  w->count[w->depth] = 0;
}

static void jw_close(jw_t *w, char c) {
  int had = w->count[w->depth] > 0;
  if (w->depth > 0) w->depth--;
  if (had) {
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
  }
  fputc(c, w->f);
  if (w->depth == 0) fputc('\n', w->f);
}

void jw_obj(jw_t *w, const char *key) { jw_open(w, key, '{'); }
void jw_arr(jw_t *w, const char *key) { jw_open(w, key, '['); }
void jw_end_obj(jw_t *w) { jw_close(w, '}'); }
void jw_end_arr(jw_t *w) { jw_close(w, ']'); }

void jw_str(jw_t *w, const char *key, const char *val) {
  jw_member(w, key);
  if (val)
    jw_escaped(w->f, val);
  else
    fputs("null", w->f);
}

void jw_num(jw_t *w, const char *key, double val) {
  jw_member(w, key);
  if (isfinite(val))
    fprintf(w->f, "%.9g", val);
  else
    fputs("null", w->f);
}

void jw_int(jw_t *w, const char *key, long long val) {
  jw_member(w, key);
  fprintf(w->f, "%lld", val);
}

void jw_bool(jw_t *w, const char *key, int val) {
  jw_member(w, key);
  fputs(val ? "true" : "false", w->f);
}

void jw_null(jw_t *w, const char *key) {
  jw_member(w, key);
  fputs("null", w->f);
}
