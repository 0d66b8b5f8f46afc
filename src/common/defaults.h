/* Defaults shared by every layer, defined once. */
#ifndef VMMIPC_COMMON_DEFAULTS_H
#define VMMIPC_COMMON_DEFAULTS_H

/* Bound on every wait for a peer when neither the config nor
 * VMMIPC_TIMEOUT_MS says otherwise. */
#define VMMIPC__DEFAULT_TIMEOUT_MS 60000

/* Bound on the bytes of idle mappings a comm's mapping cache keeps when
 * neither the config nor VMMIPC_MAP_CACHE_BYTES says otherwise. Idle
 * mappings of buffers their owners still use cost no memory; what the bound
 * caps is memory freed by an owner that has run no collective with this
 * rank since (docs/caches.md). 8 GiB keeps the largest working set the
 * setup benchmark maps again (a peer's 4 GiB buffer, twice) and is under 6%
 * of an H200. */
#define VMMIPC__DEFAULT_MAP_CACHE_BYTES ((unsigned long long)8 << 30)

#endif
