/* Links against the installed library and calls it without MPI_Init. */
#include <stdio.h>
#include <string.h>

#include "vmmipc.h"

int main(void) {
  printf("vmmipc %s: %s\n", vmmipc_version(), vmmipc_strerror(VMMIPC_ERR_TIMEOUT));
  return strcmp(vmmipc_version(), "0.1.0") != 0;
}
