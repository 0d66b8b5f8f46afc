/* Defaults shared by every layer, defined once. */
#ifndef VMMIPC_COMMON_DEFAULTS_H
#define VMMIPC_COMMON_DEFAULTS_H

/* Bound on every wait for a peer when neither the config nor
 * VMMIPC_TIMEOUT_MS says otherwise. */
#define VMMIPC__DEFAULT_TIMEOUT_MS 60000

#endif
