/* Stream capture (capture.c), for memops.c and kernels.c. */
#ifndef VMMIPC_STANDIN_CAPTURE_H
#define VMMIPC_STANDIN_CAPTURE_H

#include "state.h"
#include "stream_event.h"

#define STI_MAX_KERNEL_ARGS 8

/* Whether s is recording (takes the lock). */
int sti_capturing(CUstream s);
/* Record a batch, or a launch with copies of its nargs arguments. */
CUresult sti_capture_batch(CUstream s, unsigned count, const CUstreamBatchMemOpParams *ops);
CUresult sti_capture_launch(CUstream s, CUfunction f, void **params, const size_t *sizes, int nargs);

#endif
