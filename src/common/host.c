/* Host and process identity (kernel boot id, a random process nonce) and
 * fd accounting (the open fds, the limit, the export cache's share). */
#include "common/host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/random.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/error.h"

static int vmmipc__hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static vmmipc_result_t vmmipc__read_host_id(unsigned char out[16]) {
  const char *path = "/proc/sys/kernel/random/boot_id";
  FILE *f = fopen(path, "re");
  if (!f) {
    int e = errno;
    long lim = 0;
    if ((e == EMFILE || e == ENFILE) && vmmipc__fd_limit_reached(&lim))
      return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e,
                                 "reading the host identity: fopen(%s) at the file descriptor limit "
                                 "(RLIMIT_NOFILE %ld); hint: raise it with ulimit -n%s",
                                 path, lim, vmmipc__fd_limit_note());
    return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e, "reading the host identity: fopen(%s)", path);
  }
  char line[64] = {0};
  char *ok = fgets(line, sizeof line, f);
  fclose(f);
  int n = 0, hi = -1;
  for (const char *p = line; ok && *p && n < 16; p++) {
    int v = vmmipc__hexval((unsigned char)*p);
    if (v < 0) continue;
    if (hi < 0) {
      hi = v;
    } else {
      out[n++] = (unsigned char)(hi << 4 | v);
      hi = -1;
    }
  }
  if (n != 16)
    return vmmipc__error(VMMIPC_ERR_SYSTEM, "reading the host identity: %s does not hold a UUID (\"%s\")", path,
                         line);
  return VMMIPC_SUCCESS;
}

/* The boot id cannot change while the process runs: it is read once (the
 * driver loader reads it when it loads) and kept, so that later exports and
 * imports need no fd for it. A failed read is tried again next time. */
static pthread_mutex_t vmmipc__host_mu = PTHREAD_MUTEX_INITIALIZER;
static int vmmipc__host_known;
static unsigned char vmmipc__host[16];

vmmipc_result_t vmmipc__host_id(unsigned char out[16]) {
  vmmipc_result_t r = VMMIPC_SUCCESS;
  pthread_mutex_lock(&vmmipc__host_mu);
  if (!vmmipc__host_known) {
    r = vmmipc__read_host_id(vmmipc__host);
    vmmipc__host_known = r == VMMIPC_SUCCESS;
  }
  if (vmmipc__host_known) memcpy(out, vmmipc__host, 16);
  pthread_mutex_unlock(&vmmipc__host_mu);
  return r;
}

int vmmipc__fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory's own fd */
}

int vmmipc__fd_limit_reached(long *limit) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && limit) *limit = (long)rl.rlim_cur;
  /* Probe: can one more fd be opened? */
  int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (fd < 0 && errno == EBADF) fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    return 0;
  }
  return errno == EMFILE || errno == ENFILE;
}

/* A random 64-bit value per process: with the pid it names this process
 * among every process the host ever ran (pids are reused, the nonce is not
 * likely to be). getrandom needs no fd; should it fail, the clock and the
 * pid stand in. Never 0: 0 means "no identity" on the wire. */
static pthread_once_t vmmipc__nonce_once = PTHREAD_ONCE_INIT;
static uint64_t vmmipc__nonce;

static void vmmipc__make_nonce(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec << 20 ^ (uint64_t)getpid() << 40;
  }
  vmmipc__nonce = v ? v : 1;
}

uint64_t vmmipc__process_nonce(void) {
  pthread_once(&vmmipc__nonce_once, vmmipc__make_nonce);
  return vmmipc__nonce;
}

static atomic_long vmmipc__cached;

void vmmipc__cached_fds_add(long delta) { atomic_fetch_add(&vmmipc__cached, delta); }

long vmmipc__cached_fds(void) { return atomic_load(&vmmipc__cached); }

static atomic_long vmmipc__mapcached;

void vmmipc__mapcache_chunks_add(long delta) { atomic_fetch_add(&vmmipc__mapcached, delta); }

long vmmipc__mapcache_chunks(void) { return atomic_load(&vmmipc__mapcached); }

const char *vmmipc__fd_limit_note_less(long closing) {
  static _Thread_local char note[448];
  long n = vmmipc__cached_fds() - closing, m = vmmipc__mapcache_chunks();
  int len = 0;
  note[0] = '\0';
  if (n > 0)
    len = snprintf(note, sizeof note,
                   "; %ld fds are held by the export cache (one per exported chunk of each live buffer; "
                   "VMMIPC_EXPORT_CACHE=0 turns it off)",
                   n);
  if (len < 0) len = 0;
  if (m > 0 && (size_t)len < sizeof note)
    snprintf(note + len, sizeof note - (size_t)len,
             "; the mapping caches hold %ld imported chunk(s) (a driver that keeps an fd per import, as the CPU "
             "stand-in does, holds one fd for each; vmmipc_comm_cache_trim or a smaller "
             "VMMIPC_MAP_CACHE_ENTRIES gives them back)",
             m);
  return note;
}

const char *vmmipc__fd_limit_note(void) { return vmmipc__fd_limit_note_less(0); }
