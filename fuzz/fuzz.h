/* Shared by the fuzz targets and the seed-corpus generator: the input
 * formats, and the checks every target makes after each input. */
#ifndef VMMIPC_FUZZ_FUZZ_H
#define VMMIPC_FUZZ_FUZZ_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* fuzz_desc input: one control byte, then the descriptor bytes.
 *   bits 0-1  fds given: 0 genuine chunk fds of a stand-in export (up to 3,
 *             then foreign memfds), 1 foreign memfds, 2 pipes, 3 genuine
 *             but the last one a pipe
 *   bits 2-3  how many: 0 as the descriptor says (at most FUZZ_DESC_MAX_FDS),
 *             1 one more, 2 one fewer, 3 none
 *   bit 4     stamp this host's boot id into the descriptor first (so that
 *             the committed corpus imports on any machine)
 *   bit 5     import read-only */
#define FUZZ_DESC_FDS_GENUINE 0
#define FUZZ_DESC_FDS_MEMFD 1
#define FUZZ_DESC_FDS_PIPE 2
#define FUZZ_DESC_FDS_MIXED 3
#define FUZZ_DESC_STAMP_HOST 0x10
#define FUZZ_DESC_READ_ONLY 0x20
#define FUZZ_DESC_MAX_FDS 8

/* fuzz_frame input: one mode byte, then records [op:u8][len:u16 LE][bytes],
 * each one received record of a connection from node rank 1 to node rank 0
 * of communicator FUZZ_COMM_ID.
 *   mode bit 0  0: a point-to-point connection, 1: a collective one
 *   mode bit 1  expect "any context" (the mesh's HELLO check)
 *   op bits 0-1 fds attached: 0 as the header says, 1 one more, 2 one
 *               fewer, 3 none
 *   op bit 2    the fds were cut short (MSG_CTRUNC): the receiver closes
 *               them and skips the rest of that message
 *   op bit 3    collective: the next call begins (the epoch advances) */
#define FUZZ_COMM_ID 0x766d6d6970632121ull
#define FUZZ_MODE_COLL 0x1
#define FUZZ_MODE_ANY_CTX 0x2
#define FUZZ_OP_CTRUNC 0x4
#define FUZZ_OP_NEXT_EPOCH 0x8
#define FUZZ_FRAME_MAX_RECORDS 64
#define FUZZ_FRAME_MAX_FDS 600 /* per input, to keep executions fast */

/* Open fds of this process. */
static inline int fuzz_fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) abort();
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1;
}

#define FUZZ_CHECK(cond, ...)                                                    \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                              \
      fprintf(stderr, "\n");                                                     \
      abort();                                                                   \
    }                                                                            \
  } while (0)

#endif
