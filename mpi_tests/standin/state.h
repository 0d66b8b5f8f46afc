/* Shared state of the CPU stand-in for the CUDA driver.
 *
 * Everything lives in one process-wide struct guarded by one mutex: the
 * stand-in is a test tool, so simplicity beats throughput. Device memory is
 * host memory (memfd + mmap), so sharing between processes is real. */
#ifndef VMMIPC_STANDIN_STATE_H
#define VMMIPC_STANDIN_STATE_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Only cuGetProcAddress(_v2) and vmmipc_standin_counts carry this; the
 * target is built with -fvisibility=hidden. */
#define STI_EXPORT __attribute__((visibility("default")))

#define STI_GRANULARITY ((size_t)2 << 20) /* 2 MiB, minimum and recommended */
#define STI_MAX_DEVICES 8
#define STI_DEFAULT_DEVICES 2
#define STI_DRIVER_VERSION 13000
/* Device memory the stand-in reports (cuDeviceTotalMem): sizes the heap's
 * defaults; memfds are allocated lazily, so it costs nothing until touched. */
#define STI_TOTAL_MEM ((size_t)16 << 30)
/* memfd name prefix; /proc/self/fd/N then reads "/memfd:<prefix><uuid hex>". */
#define STI_MEMFD_PREFIX "vmmipc-standin:"

/* A primary context: one per physical device, never freed. */
struct CUctx_st {
  int phys;    /* physical device index */
  int retains; /* cuDevicePrimaryCtxRetain minus Release */
};

/* One physical allocation (cuMemCreate or cuMemImportFromShareableHandle).
 * The handle given out is the record's address. */
typedef struct sti_alloc {
  struct sti_alloc *next;
  int fd;                          /* the driver's own memfd reference */
  size_t size;
  unsigned char owner[16];         /* UUID of the device that created it */
  CUmemAllocationHandleType types; /* requestedHandleTypes */
  int imported;
  int rdma;        /* created with allocFlags.gpuDirectRDMACapable */
  int handle_live; /* the handle is valid until its last cuMemRelease */
  long handle_refs; /* cuMemCreate/Import and each cuMemRetainAllocationHandle, minus cuMemRelease */
  long refs;       /* handle (1 while live) + one per mapping */
} sti_alloc;

/* A cuMemAddressReserve range. */
typedef struct sti_resv {
  struct sti_resv *next;
  uintptr_t base;
  size_t size;
} sti_resv;

/* A cuMemMap mapping: always a whole allocation. */
typedef struct sti_map {
  struct sti_map *next;
  uintptr_t base;
  size_t size;
  sti_alloc *alloc;
  /* CUmemAccess_flags granted per visible ordinal by cuMemSetAccess. */
  unsigned char access[STI_MAX_DEVICES];
} sti_map;

/* A cuMemAlloc buffer (plain device memory, outside VMM). */
typedef struct sti_plain {
  struct sti_plain *next;
  uintptr_t base;
  size_t size;   /* as requested */
  size_t maplen; /* page-rounded mmap length */
} sti_plain;

typedef struct sti_state {
  pthread_mutex_t mu;
  int init_done;    /* cuInit ran (its result is init_rc) */
  CUresult init_rc;
  int nphys;                   /* physical devices, VMMIPC_STANDIN_DEVICES */
  int nvis;                    /* visible devices, after CUDA_VISIBLE_DEVICES */
  int vis[STI_MAX_DEVICES];    /* vis[ordinal] = physical index */
  int cap_vmm, cap_fd, cap_rdma; /* VMMIPC_STANDIN_CAPS */
  int mps;         /* VMMIPC_STANDIN_MPS=1: devices answer as under MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED) */
  int cap_memops;              /* 64-bit stream memory operations (VMMIPC_STANDIN_CAPS nomemops) */
  int cap_kernels;             /* cuModuleLoadData of the library's kernels (VMMIPC_STANDIN_CAPS nokernels) */
  struct CUctx_st ctx[STI_MAX_DEVICES]; /* primary contexts by physical index */
  sti_alloc *allocs;
  sti_resv *resvs;
  sti_map *maps;
  sti_plain *plains;
} sti_state;

extern sti_state sti;
/* The current context is per thread, as in the real driver. */
extern _Thread_local struct CUctx_st *sti_current;

/* Takes the lock and checks that cuInit succeeded. On failure the lock is
 * not held and the error is returned. */
CUresult sti_enter(void);
/* Like sti_enter, and also requires a current context on this thread. */
CUresult sti_enter_ctx(void);
void sti_leave(void);
/* Sleeps the microseconds the environment variable `name` gives (none:
 * no pause): VMMIPC_STANDIN_KERNEL_US and VMMIPC_STANDIN_MEMOPS_US make one
 * host-sync path slower than the other, for tests of auto's trial. */
void sti_pause_env(const char *name);

STI_EXPORT void vmmipc_standin_counts(long *allocations, long *mappings, long *reservations);
STI_EXPORT int vmmipc_standin_ctx_retains(int dev);

/* Devices (lock held). */
void sti_uuid_of(int phys, unsigned char out[16]);
int sti_phys_of_uuid(const unsigned char uuid[16]); /* -1: no such device here */
int sti_ordinal_of_phys(int phys);                  /* -1: not visible */
int sti_valid_ordinal(int ordinal);
/* CUDA_VISIBLE_DEVICES (visible.c): fills vis/nvis from the env value. */
void sti_parse_visible(const char *env, int nphys, int *vis, int *nvis);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the NUL). */
void sti_uuid_string(const unsigned char uuid[16], char out[41]);

/* Allocation records (lock held). */
sti_alloc *sti_alloc_find(CUmemGenericAllocationHandle h); /* live handles only */
/* A new record holding one reference (the handle); takes over fd. */
sti_alloc *sti_alloc_new(int fd, size_t size, const unsigned char owner[16], CUmemAllocationHandleType types,
                         int imported);
void sti_alloc_unref(sti_alloc *a);
/* A CUmemAllocationProp location: a visible device. */
CUresult sti_check_location(const CUmemLocation *loc);

/* Mappings (lock held). */
sti_map *sti_map_containing(uintptr_t addr);
/* Whether [p, p+n) is device memory: mappings or cuMemAlloc buffers. */
int sti_is_device_range(uintptr_t p, size_t n);
/* The cuMemAlloc buffer holding addr, or NULL (copy.c). */
sti_plain *sti_plain_containing(uintptr_t addr);

#endif
