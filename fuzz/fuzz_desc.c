/* libFuzzer target: the descriptor decoder. Each input is unpacked with
 * vmmipc_desc_unpack against real fds (genuine chunks of a stand-in export,
 * foreign memfds, pipes; fuzz.h), and what it accepts is packed again and
 * imported with vmmipc_import on the CPU stand-in driver. Checked after
 * every input:
 *   - pack(unpack(x)) == x, with duplicates of the very fds given;
 *   - an import succeeds only with genuine chunk fds of the right sizes;
 *   - the fd count and the stand-in's live allocations, mappings and
 *     reservations are back where they were (abort() otherwise). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/host.h"
#include "common/le.h"
#include "desc/desc.h"
#include "fuzz.h"
#include "vmmipc.h"

#ifndef VMMIPC_FUZZ_DRIVER
#error "VMMIPC_FUZZ_DRIVER (the stand-in driver's path) is set by fuzz/CMakeLists.txt"
#endif

static vmmipc_buf_t g_buf;       /* 3 chunks, exported once */
static vmmipc_desc_t g_desc;     /* owns the genuine fds */
static int g_genuine[3];
static size_t g_chunk;           /* size of each genuine chunk */
static unsigned char g_host[16];
static void (*g_counts)(long *, long *, long *);

static void driver_counts(long c[3]) {
  c[0] = c[1] = c[2] = 0;
  if (g_counts) g_counts(&c[0], &c[1], &c[2]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("VMMIPC_CUDA_DRIVER", VMMIPC_FUZZ_DRIVER, 1);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (vmmipc_set_device(0) != VMMIPC_SUCCESS) {
    fprintf(stderr, "fuzz_desc: vmmipc_set_device(0) on %s: %s\n", VMMIPC_FUZZ_DRIVER, vmmipc_last_error());
    abort();
  }
  void *lib = dlopen(VMMIPC_FUZZ_DRIVER, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib) *(void **)&g_counts = dlsym(lib, "vmmipc_standin_counts");
  /* A buffer of 3 chunks, grown one granule at a time; its export gives
   * the genuine fds. */
  size_t gran = (size_t)2 << 20;
  if (vmmipc_alloc(gran, &g_buf) || vmmipc_grow(g_buf, 2 * gran) || vmmipc_grow(g_buf, 3 * gran) ||
      vmmipc_export(g_buf, &g_desc)) {
    fprintf(stderr, "fuzz_desc: making the genuine chunks: %s\n", vmmipc_last_error());
    abort();
  }
  FUZZ_CHECK(g_desc->num_chunks == 3, "%d chunks", g_desc->num_chunks);
  for (int i = 0; i < 3; i++) g_genuine[i] = g_desc->fds[i];
  g_chunk = (size_t)g_desc->sizes[0];
  if (vmmipc__host_id(g_host)) abort();
  return 0;
}

static int make_fd(int kind) {
  if (kind == FUZZ_DESC_FDS_PIPE) {
    int p[2];
    if (pipe2(p, O_CLOEXEC)) abort();
    close(p[1]);
    return p[0];
  }
  /* A memfd of one chunk's size, but not one the driver made. */
  int fd = memfd_create("fuzz-foreign", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)g_chunk)) abort();
  return fd;
}

static int same_file(int a, int b) {
  struct stat x, y;
  return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int fds_before = fuzz_fd_count();
  long live_before[3];
  driver_counts(live_before);

  const unsigned ctl = data[0];
  size_t len = size - 1;
  unsigned char *bytes = malloc(len ? len : 1); /* a copy: it may be stamped */
  if (!bytes) abort();
  memcpy(bytes, data + 1, len);
  if ((ctl & FUZZ_DESC_STAMP_HOST) && len >= 48) memcpy(bytes + 32, g_host, 16);

  int kind = (int)(ctl & 3);
  int n = len >= VMMIPC__DESC_HEADER_BYTES ? (int)(vmmipc__get32(bytes + 64) > FUZZ_DESC_MAX_FDS
                                                       ? FUZZ_DESC_MAX_FDS
                                                       : vmmipc__get32(bytes + 64))
                                           : 1;
  switch ((ctl >> 2) & 3) {
    case 1: n++; break;
    case 2: n = n > 0 ? n - 1 : 0; break;
    case 3: n = 0; break;
    default: break;
  }
  int fds[FUZZ_DESC_MAX_FDS + 1], own[FUZZ_DESC_MAX_FDS + 1], genuine[FUZZ_DESC_MAX_FDS + 1];
  for (int i = 0; i < n; i++) {
    genuine[i] = (kind == FUZZ_DESC_FDS_GENUINE || (kind == FUZZ_DESC_FDS_MIXED && i < n - 1)) && i < 3;
    own[i] = genuine[i] ? -1 : make_fd(kind == FUZZ_DESC_FDS_MEMFD || kind == FUZZ_DESC_FDS_GENUINE ||
                                               (kind == FUZZ_DESC_FDS_MIXED && i < n - 1)
                                           ? FUZZ_DESC_FDS_MEMFD
                                           : FUZZ_DESC_FDS_PIPE);
    fds[i] = genuine[i] ? g_genuine[i] : own[i];
  }

  vmmipc_desc_t d = NULL;
  vmmipc_result_t r = vmmipc_desc_unpack(bytes, len, fds, n, &d);
  if (r != VMMIPC_SUCCESS) {
    FUZZ_CHECK(d == NULL, "a refused descriptor was returned");
    FUZZ_CHECK(r == VMMIPC_ERR_INVALID_DESC || r == VMMIPC_ERR_INVALID_ARG, "unpack: %d (%s)", (int)r,
               vmmipc_last_error());
    FUZZ_CHECK(vmmipc_last_error()[0] != '\0', "no message");
  } else {
    /* Round trip: the same bytes, and duplicates of the same fds. */
    unsigned char *again = malloc(len ? len : 1);
    int pf[FUZZ_DESC_MAX_FDS + 1];
    size_t nb = len;
    int nf = FUZZ_DESC_MAX_FDS + 1;
    if (!again) abort();
    FUZZ_CHECK(vmmipc_desc_pack(d, again, &nb, pf, &nf) == VMMIPC_SUCCESS, "pack: %s", vmmipc_last_error());
    FUZZ_CHECK(nb == len && memcmp(again, bytes, len) == 0, "pack(unpack(x)) != x (%zu of %zu bytes)", nb, len);
    FUZZ_CHECK(nf == n, "%d fds packed, %d given", nf, n);
    for (int i = 0; i < nf; i++) {
      FUZZ_CHECK(pf[i] != fds[i], "fd %d was not duplicated", i);
      FUZZ_CHECK(same_file(pf[i], fds[i]), "fd %d is not a duplicate of the one given", i);
    }
    free(again);
    size_t dsize = 0;
    int chunks = 0;
    vmmipc_desc_info(d, &dsize, &chunks, NULL);

    vmmipc_access_t ro = VMMIPC_ACCESS_DEFAULT;
    ro.prot = VMMIPC_PROT_READ;
    vmmipc_buf_t b = NULL;
    r = vmmipc_import(d, (ctl & FUZZ_DESC_READ_ONLY) ? &ro : NULL, &b);
    if (r == VMMIPC_SUCCESS) {
      /* The stand-in maps only its own allocations, whole: every chunk must
       * be a genuine fd of the size it really has. */
      for (int i = 0; i < chunks; i++) {
        FUZZ_CHECK(genuine[i], "chunk %d of %d imported from a foreign fd", i + 1, chunks);
        size_t cs = 0;
        vmmipc_desc_chunk_size(d, i, &cs);
        FUZZ_CHECK(cs == g_chunk, "chunk %d imported with size %zu, but it has %zu", i + 1, cs, g_chunk);
      }
      void *p = NULL;
      size_t bs = 0;
      int bc = 0, imported = 0;
      vmmipc_buf_ptr(b, &p, &bs);
      vmmipc_buf_info(b, &bc, &imported);
      FUZZ_CHECK(bs == dsize && bc == chunks && imported == 1, "imported %zu bytes in %d chunks of %zu and %d", bs,
                 bc, dsize, chunks);
      FUZZ_CHECK(chunks == 0 || p != NULL, "no mapping");
      FUZZ_CHECK(vmmipc_buf_free(b) == VMMIPC_SUCCESS, "buf_free: %s", vmmipc_last_error());
    } else {
      FUZZ_CHECK(b == NULL, "a failed import returned a buffer");
      FUZZ_CHECK(r == VMMIPC_ERR_INVALID_DESC || r == VMMIPC_ERR_CUDA || r == VMMIPC_ERR_UNSUPPORTED ||
                     r == VMMIPC_ERR_SYSTEM || r == VMMIPC_ERR_INVALID_ARG || r == VMMIPC_ERR_NO_MEMORY ||
                     r == VMMIPC_ERR_RESOURCE,
                 "import: %d (%s)", (int)r, vmmipc_last_error());
    }
    vmmipc_desc_free(d);
  }
  for (int i = 0; i < n; i++)
    if (own[i] >= 0) close(own[i]);
  free(bytes);

  long live_after[3];
  driver_counts(live_after);
  FUZZ_CHECK(memcmp(live_before, live_after, sizeof live_before) == 0,
             "driver objects leaked: allocations %ld -> %ld, mappings %ld -> %ld, reservations %ld -> %ld",
             live_before[0], live_after[0], live_before[1], live_after[1], live_before[2], live_after[2]);
  const int fds_after = fuzz_fd_count();
  FUZZ_CHECK(fds_after == fds_before, "fds: %d before, %d after", fds_before, fds_after);
  return 0;
}
