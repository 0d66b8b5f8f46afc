/* vmmipc_alloc and vmmipc_alloc_ex: create the chunks, reserve the total
 * once, map the chunks back to back and set access with one call over the
 * whole range (the driver accepts one call over several whole mappings). */
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/structsize.h"
#include "desc/desc.h"
#include "driver/device.h"
#include "vmm/vmm.h"

/* A buffer of `size` bytes on `dev` made of chunks of at most `chunk`
 * bytes (0: one chunk; `chunk_given` 0: the default, rounded up to the
 * granularity), with the export cache as `export_cache` asks (< 0: the
 * default), rolled back entirely on failure. */
static vmmipc_result_t vmmipc__alloc_on(const vmmipc__cu_t *cu, int dev, size_t size, size_t chunk, int chunk_given,
                                        unsigned int flags, int export_cache, const char *op, vmmipc_buf_t *out) {
  int cache = 0;
  vmmipc_result_t r = vmmipc__export_cache_choice(export_cache, op, &cache);
  if (r) return r;
  size_t g;
  r = vmmipc__device_granularity(cu, dev, op, &g);
  if (!r) r = vmmipc__check_alloc_flags(cu, dev, flags, op);
  if (r) return r;
  if (size > SIZE_MAX / 2) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: size %zu is too large", op, size);
  if (!chunk_given) chunk = vmmipc__round_up(chunk, g);
  if (chunk % g)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: chunk size %zu is not a multiple of device %d's granularity %zu; hint: "
                         "vmmipc_granularity gives it",
                         op, chunk, dev, g);
  size_t rounded = vmmipc__round_up(size, g);
  size_t per = chunk ? chunk : rounded;
  size_t n = per ? (rounded + per - 1) / per : 0;
  if (n > VMMIPC__DESC_MAX_CHUNKS)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: %zu bytes in chunks of %zu would be %zu chunks, more than a descriptor holds (%u); "
                         "hint: use larger chunks",
                         op, size, per, n, VMMIPC__DESC_MAX_CHUNKS);
  struct vmmipc_buf *b = NULL;
  if ((r = vmmipc__buf_new((int)n, op, &b))) return r;
  b->device = dev;
  b->granularity = g;
  b->chunk_size = chunk;
  b->alloc_flags = flags;
  b->export_cache = cache;
  b->serial = vmmipc__next_serial();
  b->access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  b->access[0].location.id = dev;
  b->access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  b->num_access = 1;
  if ((r = vmmipc_device_uuid(dev, &b->owner))) goto fail;
  if (size == 0) {
    *out = b;
    return VMMIPC_SUCCESS;
  }
  for (size_t i = 0; i < n; i++) {
    size_t cs = rounded - i * per < per ? rounded - i * per : per;
    if ((r = vmmipc__chunk_create(cu, dev, cs, flags, op, &b->chunks[i].handle))) {
      if (n > 1) vmmipc__error_prefix("chunk %zu of %zu: ", i + 1, n);
      goto fail;
    }
    b->chunks[i].size = cs;
    b->num_chunks = (int)i + 1;
  }
  CUdeviceptr base = 0;
  if ((r = vmmipc__reserve(cu, rounded, g, 0, &base, op))) goto fail;
  if ((r = vmmipc__buf_add_resv(b, base, rounded, op))) {
    cu->cuMemAddressFree(base, rounded);
    goto fail;
  }
  if ((r = vmmipc__map_chunks(cu, base, b->chunks, b->num_chunks, 0, b->num_chunks, NULL, op))) goto fail;
  b->base = base;
  if ((r = vmmipc__set_access(cu, base, rounded, b->access, 1, op))) goto fail;
  b->size = size;
  b->mapped = rounded;
  *out = b;
  return VMMIPC_SUCCESS;
fail:
  vmmipc__buf_discard(cu, b);
  return r;
}

vmmipc_result_t vmmipc_alloc(size_t size, vmmipc_buf_t *out) {
  const char *op = "vmmipc_alloc";
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  *out = NULL;
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  int dev;
  if ((r = vmmipc__current_device(cu, op, &dev))) return r;
  return vmmipc__alloc_on(cu, dev, size, 0, 1, 0, -1, op, out);
}

/* Like vmmipc_config_t: the fields of 0.2 must all be there; a larger
 * struct_size (from a newer header) is fine up to a sanity bound while the
 * fields this library does not know are zero. */
static vmmipc_result_t vmmipc__check_props(const vmmipc_alloc_props_t *p, const char *op) {
  if (p->struct_size < offsetof(vmmipc_alloc_props_t, export_cache) + sizeof p->export_cache ||
      p->struct_size > VMMIPC__STRUCT_SIZE_MAX)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: props->struct_size is %zu; hint: initialise the properties with "
                         "VMMIPC_ALLOC_PROPS_INIT",
                         op, p->struct_size);
  vmmipc_result_t r = vmmipc__struct_tail_ok(p, p->struct_size, sizeof *p, op, "props");
  if (r) return r;
  if (p->export_cache < -1 || p->export_cache > 1)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: props->export_cache is %d; it is -1 (the default), 0 (off) or 1 (on)", op,
                         p->export_cache);
  if (p->chunk_size > SIZE_MAX / 2)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: props->chunk_size %zu is too large", op, p->chunk_size);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_alloc_ex(size_t size, const vmmipc_alloc_props_t *props, vmmipc_buf_t *out) {
  const char *op = "vmmipc_alloc_ex";
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  *out = NULL;
  vmmipc_alloc_props_t def = VMMIPC_ALLOC_PROPS_INIT;
  const vmmipc_alloc_props_t *p = props ? props : &def;
  vmmipc_result_t r = vmmipc__check_props(p, op);
  if (r) return r;
  const vmmipc__cu_t *cu;
  if ((r = vmmipc__cu_load(&cu))) return r;
  int dev;
  if (p->device)
    r = vmmipc__device_by_uuid(cu, p->device, op, &dev);
  else
    r = vmmipc__current_device(cu, op, &dev);
  if (r) return r;
  if (p->chunk_size) return vmmipc__alloc_on(cu, dev, size, p->chunk_size, 1, p->flags, p->export_cache, op, out);
  return vmmipc__alloc_on(cu, dev, size, VMMIPC__DEFAULT_CHUNK_SIZE, 0, p->flags, p->export_cache, op, out);
}
