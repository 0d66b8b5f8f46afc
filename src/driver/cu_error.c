/* The message for a failed driver call. */
#include <stdio.h>

#include "common/error.h"
#include "driver/cu.h"

vmmipc_result_t vmmipc__cu_error(CUresult rc, const char *hint, const char *fmt, ...) {
  char call[512], e[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call, sizeof call, fmt, ap);
  va_end(ap);
  vmmipc__cu_errstr(rc, e, sizeof e);
  vmmipc_result_t r = rc == CUDA_ERROR_OUT_OF_MEMORY ? VMMIPC_ERR_NO_MEMORY : VMMIPC_ERR_CUDA;
  vmmipc__error(r, "%s failed: %s%s%s", call, e, hint ? "; hint: " : "", hint ? hint : "");
  vmmipc__error_driver((int)rc);
  return r;
}
