/* The release of stream waits when a comm fails (release.c). */
#ifndef VMMIPC_SYNC_RELEASE_H
#define VMMIPC_SYNC_RELEASE_H

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vmmipc__sync;

/* Writes VMMIPC_SIGNAL_FAILED into every slot of this rank's part of the
 * comm's signal pool that an open window uses, and starts the keeper that
 * writes it again until the pool goes. Any thread; the pool's private
 * stream, under its lock. The comm's `release` hook. */
void vmmipc__sync_release(struct vmmipc_comm *c);
/* Stops the keeper, if it runs (pool teardown). */
void vmmipc__sync_keeper_stop(struct vmmipc__sync *s);

#ifdef __cplusplus
}
#endif
#endif
