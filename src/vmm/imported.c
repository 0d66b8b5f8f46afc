/* The registry of imported ranges (vmm/imported.h): a small array, as a
 * process maps few imports at once; lookups happen only in vmmipc_buf_wrap. */
#include "vmm/imported.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/error.h"

struct vmmipc__range {
  CUdeviceptr base;
  size_t size;
};

static pthread_mutex_t vmmipc__imp_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vmmipc__range *vmmipc__imp;
static size_t vmmipc__imp_n, vmmipc__imp_cap;

vmmipc_result_t vmmipc__imported_add(CUdeviceptr base, size_t size) {
  vmmipc_result_t r = VMMIPC_SUCCESS;
  pthread_mutex_lock(&vmmipc__imp_mu);
  if (vmmipc__imp_n == vmmipc__imp_cap) {
    size_t cap = vmmipc__imp_cap ? 2 * vmmipc__imp_cap : 16;
    struct vmmipc__range *v = realloc(vmmipc__imp, cap * sizeof *v);
    if (v) {
      vmmipc__imp = v;
      vmmipc__imp_cap = cap;
    }
  }
  if (vmmipc__imp_n < vmmipc__imp_cap) {
    vmmipc__imp[vmmipc__imp_n].base = base;
    vmmipc__imp[vmmipc__imp_n].size = size;
    vmmipc__imp_n++;
  } else {
    r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "recording an imported address range");
  }
  pthread_mutex_unlock(&vmmipc__imp_mu);
  return r;
}

void vmmipc__imported_remove(CUdeviceptr base) {
  pthread_mutex_lock(&vmmipc__imp_mu);
  for (size_t i = 0; i < vmmipc__imp_n; i++)
    if (vmmipc__imp[i].base == base) {
      vmmipc__imp[i] = vmmipc__imp[--vmmipc__imp_n];
      break;
    }
  pthread_mutex_unlock(&vmmipc__imp_mu);
}

int vmmipc__imported_overlaps(CUdeviceptr base, size_t size, CUdeviceptr *at) {
  int hit = 0;
  pthread_mutex_lock(&vmmipc__imp_mu);
  for (size_t i = 0; i < vmmipc__imp_n && !hit; i++) {
    const struct vmmipc__range *x = &vmmipc__imp[i];
    if (base < x->base + x->size && x->base < base + size) {
      hit = 1;
      if (at) *at = x->base;
    }
  }
  pthread_mutex_unlock(&vmmipc__imp_mu);
  return hit;
}
