/* Input structs that carry struct_size: a caller built against a newer
 * header passes a larger struct. Its fields beyond what this library knows
 * are accepted only while they are zero (their "not used" value), so that a
 * setting the library would ignore is never silently dropped. */
#ifndef VMMIPC_COMMON_STRUCTSIZE_H
#define VMMIPC_COMMON_STRUCTSIZE_H

#include <stddef.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest struct_size any input struct may claim (a sanity bound). */
#define VMMIPC__STRUCT_SIZE_MAX 4096

/* SUCCESS when the bytes of s in [known, struct_size) are all zero; else
 * VMMIPC_ERR_INVALID_ARG naming the first non-zero byte: "<op>: <what> byte
 * 48 (beyond the 40 bytes this library knows) is not zero". The caller has
 * checked struct_size against its own bounds first. */
vmmipc_result_t vmmipc__struct_tail_ok(const void *s, size_t struct_size, size_t known, const char *op,
                                       const char *what);

#ifdef __cplusplus
}
#endif
#endif
