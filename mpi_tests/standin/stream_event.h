/* Streams and events, shared with the copies, memory operations and
 * launches that queue work on them. */
#ifndef VMMIPC_STANDIN_STREAM_EVENT_H
#define VMMIPC_STANDIN_STREAM_EVENT_H

#include "async.h"

/* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a live stream (lock held). */
int sti_stream_valid(CUstream s);
/* The stream behind a valid handle (lock held, a current context needed for
 * the default streams): NULL and CU_STREAM_LEGACY are the current context's
 * legacy default stream, CU_STREAM_PER_THREAD this thread's default stream
 * there. NULL when the handle is invalid or that stream cannot be made. */
struct CUstream_st *sti_stream_of(CUstream s);

#endif
