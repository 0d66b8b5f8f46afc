/* The zero-tail rule of input structs (common/structsize.h). */
#include "common/structsize.h"

#include "common/error.h"

vmmipc_result_t vmmipc__struct_tail_ok(const void *s, size_t struct_size, size_t known, const char *op,
                                       const char *what) {
  const unsigned char *b = s;
  for (size_t i = known; i < struct_size; i++)
    if (b[i] != 0)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: %s byte %zu (beyond the %zu bytes this library knows) is not zero; hint: a field "
                           "of a newer vmmipc.h is set, which this library (%s) does not implement",
                           op, what, i, known, vmmipc_version());
  return VMMIPC_SUCCESS;
}
