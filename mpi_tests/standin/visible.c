/* CUDA_VISIBLE_DEVICES, parsed the way the real driver does: a comma list of
 * physical ordinals or GPU-<uuid> strings (full or an unambiguous prefix);
 * the list ends at the first entry that names no device (or a device
 * already listed), so "-1" or "" hide everything. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "state.h"

/* The device whose canonical "GPU-..." string starts with [s, s+len)
 * (case-insensitive), or -1 when none or more than one does. */
static int sti_match_uuid(const char *s, size_t len, int nphys) {
  if (len <= 4) return -1; /* "GPU-" alone names nothing */
  int found = -1;
  for (int i = 0; i < nphys; i++) {
    unsigned char u[16];
    char str[41];
    sti_uuid_of(i, u);
    sti_uuid_string(u, str);
    if (len > strlen(str) || strncasecmp(str, s, len) != 0) continue;
    if (found >= 0) return -1; /* ambiguous prefix */
    found = i;
  }
  return found;
}

static int sti_match_ordinal(const char *s, size_t len, int nphys) {
  if (len == 0 || len > 3) return -1;
  int v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return -1; /* also rejects "-1" */
    v = v * 10 + (s[i] - '0');
  }
  return v < nphys ? v : -1;
}

void sti_parse_visible(const char *env, int nphys, int *vis, int *nvis) {
  *nvis = 0;
  const char *p = env;
  while (*p && *nvis < STI_MAX_DEVICES) {
    size_t len = strcspn(p, ",");
    const char *s = p;
    size_t n = len;
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    int dev = (n >= 4 && strncmp(s, "GPU-", 4) == 0) ? sti_match_uuid(s, n, nphys) : sti_match_ordinal(s, n, nphys);
    if (dev < 0) return;
    for (int i = 0; i < *nvis; i++)
      if (vis[i] == dev) return;
    vis[(*nvis)++] = dev;
    p += len;
    if (*p == ',') p++;
  }
}
