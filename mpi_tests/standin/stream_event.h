/* Streams and events, shared with the async copies in copy.c. */
#ifndef VMMIPC_STANDIN_STREAM_EVENT_H
#define VMMIPC_STANDIN_STREAM_EVENT_H

#include "state.h"

/* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a live stream (lock held). */
int sti_stream_valid(CUstream s);

#endif
