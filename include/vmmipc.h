/*
 * vmmipc: share CUDA virtual-memory (VMM) allocations between the ranks of an
 * MPI job that sit on the same node.
 *
 * An allocation is exported as one POSIX file descriptor per physical chunk;
 * the descriptors travel over Unix domain sockets (SCM_RIGHTS) that are
 * bootstrapped through an MPI communicator, and the importer maps the chunks
 * back to back with the access it asks for.
 *
 * Every function returns a vmmipc_result_t. On failure a thread-local message
 * that names the operation, the rank or chunk, the driver or OS error and a
 * hint is available from vmmipc_last_error().
 *
 * Conventions (docs/api.md has one entry per function):
 * - "Collective" calls are made by every rank of the communicator given to
 *   vmmipc_comm_create, in the same order, as in MPI. They are
 *   all-or-nothing: every rank succeeds, or every rank rolls back and returns
 *   the same error, which names the rank that failed first.
 * - Waits are bounded: no call waits on a peer longer than the comm's
 *   timeout (vmmipc_config_t.timeout_ms), except that a collective may wait
 *   once in its exchange and once in its agreement (plus a short grace,
 *   docs/sync.md); the MPI calls vmmipc makes are nonblocking ones tested
 *   against that bound, except the node split of vmmipc_comm_create. A peer
 *   that dies or hangs gives VMMIPC_ERR_PEER or VMMIPC_ERR_TIMEOUT naming it:
 *   a rank of the caller's node that dies within about 100 ms plus one
 *   agreement, a rank of another node within the timeout. Stream waits on
 *   the kernel path (docs/sync.md) give up after the timeout and then fail
 *   the comm; on stream memory operations they have no bound of their own;
 *   both are released when the comm fails (VMMIPC_SIGNAL_FAILED). After an
 *   agreement times out or a peer is gone
 *   the comm is broken: every later call on it fails at once, and
 *   vmmipc_comm_destroy frees it locally.
 * - One verdict: every rank of a collective returns the same result, even
 *   when the rank that collects the agreement (rank 0) is late or stalls
 *   (docs/sync.md, "One verdict per collective", states the remaining
 *   window and its bound).
 * - Threads: calls on one comm (and on its windows' vmmipc_win_free) must not
 *   overlap; an overlapping call is refused with VMMIPC_ERR_BUSY.
 *   Calls on different comms may run at once on different threads when MPI
 *   provides MPI_THREAD_MULTIPLE, else they are refused likewise. Buffer and
 *   descriptor calls are thread-safe for distinct objects; one object must
 *   not be freed or grown while another thread uses it.
 * - Structs with struct_size: a caller built against a newer header may
 *   pass a larger struct; the bytes this library does not know must then be
 *   zero, else VMMIPC_ERR_INVALID_ARG naming the first byte that is not.
 * - Ownership: an out-parameter object belongs to the caller, who frees it
 *   with the matching *_free / vmmipc_comm_destroy; every *_free accepts
 *   NULL, as free() does.
 */
#ifndef VMMIPC_H
#define VMMIPC_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>

#include "vmmipc_win_device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC_VERSION_MAJOR 0
#define VMMIPC_VERSION_MINOR 4
#define VMMIPC_VERSION_PATCH 0

#if defined(__GNUC__)
#define VMMIPC_API __attribute__((visibility("default")))
#else
#define VMMIPC_API
#endif

/* ---- status ------------------------------------------------------------ */

typedef enum vmmipc_result {
  /* Numbers are part of the ABI: they never change, new codes only append. */
  VMMIPC_SUCCESS = 0,
  VMMIPC_ERR_INVALID_ARG = 1,     /* caller error: NULL handle, bad rank, bad option            */
  VMMIPC_ERR_INVALID_DESC = 2,    /* malformed, forged or inconsistent descriptor or message    */
  VMMIPC_ERR_UNSUPPORTED = 3,     /* device/driver lacks VMM, POSIX-fd handles or peer access   */
  VMMIPC_ERR_CUDA = 4,            /* a CUDA driver call failed                                  */
  VMMIPC_ERR_MPI = 5,             /* an MPI call failed                                         */
  VMMIPC_ERR_SYSTEM = 6,          /* an OS call failed (sockets, mmap)                          */
  VMMIPC_ERR_PEER = 7,            /* a peer failed its part, hung up, or is not on this node    */
  VMMIPC_ERR_TIMEOUT = 8,         /* a peer did not answer within the configured timeout        */
  VMMIPC_ERR_NOT_EXPORTABLE = 9,  /* memory imported from another process cannot be re-exported */
  VMMIPC_ERR_NO_MEMORY = 10,      /* out of host memory                                         */
  /* since 0.3 */
  VMMIPC_ERR_BUSY = 11,           /* in use: an exposed buffer, open windows, a concurrent call */
  VMMIPC_ERR_RESOURCE = 12,       /* a limit was reached: fds, address space, a cache bound     */
  VMMIPC_ERR_ABORTED = 13         /* vmmipc_comm_abort was called on the comm (here or by a peer) */
} vmmipc_result_t;

/* A static one-line description of a result code. Thread-safe. */
VMMIPC_API const char *vmmipc_strerror(vmmipc_result_t r);
/* The message of the last failure on this thread ("" if none); valid until the
 * thread's next failing call. */
VMMIPC_API const char *vmmipc_last_error(void);
/* The last failure on this thread, structured, so that programs need not
 * parse the message. After a collective every rank has the same record (the
 * verdict's). Local; the strings are valid until the thread's next failing
 * call. Set struct_size (VMMIPC_ERROR_INFO_INIT); only that many bytes are
 * written. */
typedef struct vmmipc_error_info {
  size_t struct_size;
  vmmipc_result_t code;     /* VMMIPC_SUCCESS if this thread has no failure recorded */
  int rank;                 /* the failing rank of the comm, or -1 when no rank is to blame */
  int driver_error;         /* the CUresult of a failed driver call, else 0 */
  int os_error;             /* the errno of a failed OS call, else 0 */
  const char *operation;    /* the public call that failed ("vmmipc_allgather_map"), "" if unknown */
  const char *message;      /* the same text as vmmipc_last_error() */
} vmmipc_error_info_t;
#define VMMIPC_ERROR_INFO_INIT { sizeof(vmmipc_error_info_t), VMMIPC_SUCCESS, -1, 0, 0, NULL, NULL }
VMMIPC_API vmmipc_result_t vmmipc_last_error_info(vmmipc_error_info_t *info);
/* "major.minor.patch", the same as the VMMIPC_VERSION_* macros. */
VMMIPC_API const char *vmmipc_version(void);

/* ---- devices ----------------------------------------------------------- */

typedef struct { unsigned char bytes[16]; } vmmipc_uuid_t; /* as cuDeviceGetUuid reports */

/* Retains the primary context of device `ordinal` (this process's ordinal,
 * after CUDA_VISIBLE_DEVICES) and makes it current on the calling thread, as
 * cudaSetDevice does (the runtime uses the same primary context). The
 * context is retained once per device, on the first call for it, and kept
 * for the life of the process; later calls take no reference. Local. */
VMMIPC_API vmmipc_result_t vmmipc_set_device(int ordinal);
/* The UUID of device `ordinal`. Local. */
VMMIPC_API vmmipc_result_t vmmipc_device_uuid(int ordinal, vmmipc_uuid_t *uuid);
/* Number of devices visible to this process. */
VMMIPC_API vmmipc_result_t vmmipc_device_count(int *count);
/* Format a UUID as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the NUL). */
#define VMMIPC_UUID_STRING_LEN 41
VMMIPC_API void vmmipc_uuid_format(const vmmipc_uuid_t *uuid, char out[VMMIPC_UUID_STRING_LEN]);

/* An entry point of the CUDA driver that vmmipc loaded (the same library
 * and instance, VMMIPC_CUDA_DRIVER or libcuda.so.1), for programs that make
 * driver calls without linking libcuda. name: unversioned, as cuda.h
 * documents it ("cuMemcpyHtoD"; a versioned "cuMemcpyHtoD_v2" is
 * VMMIPC_ERR_INVALID_ARG). cuda_version <= 0 asks for the ABI of the
 * prototype in the cuda.h vmmipc was built with (CUDA 13.0 changed
 * cuCtxGetDevice and cuCtxSynchronize under the same name: 0 gives cuda.h's
 * cuCtxSynchronize(void)). */
VMMIPC_API vmmipc_result_t vmmipc_driver_proc(const char *name, int cuda_version, void **fn);

/* ---- node-local communicator -------------------------------------------- */

typedef struct vmmipc_config {
  size_t struct_size;     /* sizeof(vmmipc_config_t): lets the struct grow compatibly  */
  int timeout_ms;         /* bound on every wait for a peer; <= 0: VMMIPC_TIMEOUT_MS or 60 s */
  int socket_namespace;   /* VMMIPC_SOCKET_AUTO, VMMIPC_SOCKET_ABSTRACT or VMMIPC_SOCKET_FILESYSTEM */
  const char *socket_dir; /* filesystem mode: parent directory (NULL: VMMIPC_SOCKET_DIR, TMPDIR, /tmp) */
  /* since 0.2 */
  int map_cache_entries;  /* idle imported mappings the comm keeps for reuse; < 0: VMMIPC_MAP_CACHE_ENTRIES
                             or 64; 0: no mapping cache */
  /* since 0.3 */
  long long map_cache_bytes; /* bound on the bytes of idle cached mappings (least recently used go
                                first); < 0: VMMIPC_MAP_CACHE_BYTES (bytes, or with a K, M or G
                                suffix) or 8 GiB (docs/caches.md says why); 0: no byte bound beyond
                                map_cache_entries */
} vmmipc_config_t;
/* AUTO: filesystem sockets when VMMIPC_SOCKET_DIR is set, else abstract. An
 * explicit ABSTRACT or FILESYSTEM beats the environment. */
#define VMMIPC_SOCKET_AUTO (-1)
#define VMMIPC_SOCKET_ABSTRACT 0   /* Linux abstract namespace */
#define VMMIPC_SOCKET_FILESYSTEM 1 /* for containers that do not share a network namespace */
#define VMMIPC_CONFIG_INIT { sizeof(vmmipc_config_t), 0, VMMIPC_SOCKET_AUTO, NULL, -1, -1 }

typedef struct vmmipc_comm *vmmipc_comm_t;
/* Collective over `comm` (all its ranks; any order relative to
 * vmmipc_set_device). Duplicates it, groups ranks by node, agrees on the
 * timeout and socket mode, connects every pair of node ranks (then nothing
 * listens). Blocks up to about twice the timeout, plus MPI_Comm_split; a
 * rank that fails to connect tells its node peers, so every rank returns
 * within about 100 ms plus one agreement, with its error. *out: the
 * caller's; free with vmmipc_comm_destroy. config NULL: defaults. */
VMMIPC_API vmmipc_result_t vmmipc_comm_create(MPI_Comm comm, const vmmipc_config_t *config,
                                                 vmmipc_comm_t *out);
/* Collective. First frees, in step, the windows and heaps that every rank
 * released (vmmipc_win_release, vmmipc_heap_release). Refused on every rank
 * (the comm stays usable) while windows of it are open, or heaps, that some
 * rank has not released (VMMIPC_ERR_BUSY); on a broken or aborted comm,
 * frees it, and what this rank released, locally without waiting, and
 * succeeds (unless refused so, or aborted during the call: then
 * VMMIPC_ERR_ABORTED). The comm is still open after VMMIPC_ERR_BUSY or
 * VMMIPC_ERR_INVALID_ARG (a thread MPI does not allow); after any other
 * result it is freed: an agreement that fails (a peer dead or late) frees
 * it locally and returns why. After MPI_Finalize, any collective or
 * point-to-point call on a comm fails VMMIPC_ERR_MPI and breaks it, so that
 * this destroy, vmmipc_win_free and vmmipc_heap_destroy free locally. */
VMMIPC_API vmmipc_result_t vmmipc_comm_destroy(vmmipc_comm_t comm);
/* Local: the ranks of the caller's node, as an MPI communicator owned by the
 * comm (do not free it). */
VMMIPC_API vmmipc_result_t vmmipc_comm_node_comm(vmmipc_comm_t comm, MPI_Comm *node_comm);
/* Local: whether `rank` of the comm shares the caller's node. */
VMMIPC_API vmmipc_result_t vmmipc_comm_same_node(vmmipc_comm_t comm, int rank, int *same);

/* Where the last collective on `comm` spent its time on this rank (seconds).
 * import, map and access are the three parts of importing the peers' chunks;
 * agree is the MPI agreement that makes collectives all-or-nothing. Set
 * struct_size (VMMIPC_TIMING_INIT); only that many bytes are written. */
typedef struct vmmipc_timing {
  size_t struct_size;
  double export_s, transfer_s, import_s, map_s, access_s, agree_s, total_s;
} vmmipc_timing_t;
#define VMMIPC_TIMING_INIT { sizeof(vmmipc_timing_t), 0, 0, 0, 0, 0, 0, 0 }
/* Local. Every collective (vmmipc_win_free too) starts a new record. */
VMMIPC_API vmmipc_result_t vmmipc_comm_last_timing(vmmipc_comm_t comm, vmmipc_timing_t *timing);

/* Counters of a comm since it was created, for monitoring and tests. Set
 * struct_size (VMMIPC_COMM_STATS_INIT); only that many bytes are written. */
typedef struct vmmipc_comm_stats {
  size_t struct_size;
  uint64_t stale_frames;      /* frames of an earlier (failed) call, dropped unread */
  uint64_t stale_fds;         /* fds that came with them, closed */
  uint64_t refused;           /* connections from foreign processes, dropped */
  uint64_t map_cache_hits;    /* imports served by the mapping cache */
  uint64_t map_cache_misses;  /* imports that mapped anew */
  uint64_t map_cache_evictions;
  int map_cache_idle;         /* idle mappings held now */
  int open_windows;           /* windows of this comm not freed yet */
  int broken;                 /* 1: a bounded wait expired, a peer is gone, or the comm was aborted; every
                                 call fails (see vmmipc_last_error) */
  /* since 0.3 */
  uint64_t map_cache_bytes;   /* bytes of peers' memory the mapping cache maps now, idle or in use */
  uint64_t map_cache_idle_bytes; /* of which idle (the part map_cache_bytes of the config bounds) */
  int map_cache_entries;      /* cached mappings now, idle or in use */
  int map_cache_handles;      /* imported chunk handles they hold (on the CPU stand-in each keeps one fd
                                 open; the CUDA driver keeps none) */
  uint64_t map_cache_freed;   /* cached mappings dropped because their owner freed or grew the buffer */
  uint64_t fds_not_sent;      /* chunk fds peers did not send because this rank held the mapping */
  /* since 0.4 */
  int released;               /* windows and heaps released here (vmmipc_win_release, vmmipc_heap_release)
                                 and not freed yet */
  uint64_t released_freed;    /* released windows and heaps freed so far (in step, or locally on a failed
                                 comm) */
  /* since 0.5: the host-sync paths of this node's ranks, decided with the
   * comm's first window (0 before it); docs/sync.md, "Paths" */
  int sync_path;              /* of vmmipc_win_signal and wait: VMMIPC_SYNC_PATH_MEMOPS or _KERNELS */
  int sync_barrier_path;      /* of vmmipc_win_barrier: likewise */
  int sync_decided_by;        /* VMMIPC_SYNC_BY_SETTING (VMMIPC_SYNC), _SUPPORT (one path usable) or _TRIAL */
  /* The trial's figures (0: no trial): ns per one-way signal + wait and per
   * barrier on each path, the node's slowest rank's. */
  uint64_t trial_signal_memops_ns, trial_signal_kernels_ns;
  uint64_t trial_barrier_memops_ns, trial_barrier_kernels_ns;
} vmmipc_comm_stats_t;
#define VMMIPC_COMM_STATS_INIT                                                                                  \
  { sizeof(vmmipc_comm_stats_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
#define VMMIPC_SYNC_PATH_MEMOPS 1  /* the driver's stream memory operations */
#define VMMIPC_SYNC_PATH_KERNELS 2 /* the library's kernels */
#define VMMIPC_SYNC_BY_SETTING 1
#define VMMIPC_SYNC_BY_SUPPORT 2
#define VMMIPC_SYNC_BY_TRIAL 3
/* Local. */
VMMIPC_API vmmipc_result_t vmmipc_comm_stats(vmmipc_comm_t comm, vmmipc_comm_stats_t *stats);
/* Local: releases every idle mapping the comm's cache holds (unmapped, its
 * imported handles released, so their memory goes back once the owner
 * freed it); *released (may be NULL) gets their bytes. Mappings in use (open
 * windows, bcast_map/scatter_map buffers not freed) stay. Thread-safe: may
 * run while another thread is in a call on the comm, whose mappings are in
 * use, vmmipc_comm_destroy included (the free waits for the trim); works on
 * a broken comm too. Errors: VMMIPC_ERR_INVALID_ARG (comm NULL, or not live:
 * destroyed), VMMIPC_ERR_CUDA (a release failed; the others still went). */
VMMIPC_API vmmipc_result_t vmmipc_comm_cache_trim(vmmipc_comm_t comm, uint64_t *released);
/* Local, and callable from any thread while another thread is blocked in a
 * call on `comm`, as ncclCommAbort is: marks the comm aborted, wakes the
 * blocked call (it returns VMMIPC_ERR_ABORTED; or, when this rank's outcome
 * had already gone out, the verdict reached on it, which may be success:
 * the next call fails), tells the node's peers (their
 * calls fail at once naming this rank; other nodes' ranks learn it at their
 * next collective: over MPI from this call when no other call holds the
 * comm and MPI allows this thread a call (MPI_THREAD_MULTIPLE, or MPI's
 * main thread below MPI_THREAD_SERIALIZED), else from a node peer other
 * than rank 0, or from this rank's next collective or point-to-point call
 * on the comm (refused at entry) or its vmmipc_comm_destroy (not under
 * MPI_THREAD_SERIALIZED), else at the timeout; vmmipc_win_free and
 * vmmipc_heap_destroy, local then, tell nobody; so the abort may post a few
 * small MPI sends: do not run it alongside MPI_Finalize), and releases the stream waits
 * enqueued on its windows (docs/sync.md). Every later call on the comm fails
 * with VMMIPC_ERR_ABORTED; vmmipc_comm_destroy (then local) still frees it,
 * and vmmipc_win_free its windows. A vmmipc_comm_destroy in a call on another
 * thread (blocked, or just begun) ends too, with VMMIPC_ERR_ABORTED, and
 * frees the comm only once this call has left it. Once
 * vmmipc_comm_destroy has returned, the handle is freed: aborting it then is
 * the caller's use after free, as with any freed handle. */
VMMIPC_API vmmipc_result_t vmmipc_comm_abort(vmmipc_comm_t comm);

/* ---- access ------------------------------------------------------------ */

typedef enum { VMMIPC_PROT_READWRITE = 0, VMMIPC_PROT_READ = 1 } vmmipc_prot_t;
typedef struct vmmipc_access {
  size_t struct_size;            /* sizeof(vmmipc_access_t): lets the struct grow compatibly */
  vmmipc_prot_t prot;
  int num_devices;               /* 0: the current device */
  const vmmipc_uuid_t *devices;  /* devices are named by UUID, never by ordinal */
} vmmipc_access_t;
#define VMMIPC_ACCESS_DEFAULT { sizeof(vmmipc_access_t), VMMIPC_PROT_READWRITE, 0, NULL }

/* ---- buffers ------------------------------------------------------------ */

typedef struct vmmipc_buf *vmmipc_buf_t;
/* A VMM allocation on the current device, exportable as POSIX fds, made of
 * ONE physical chunk (as in 0.1; vmmipc_alloc_ex chooses chunk sizes), with
 * the export cache as VMMIPC_EXPORT_CACHE says (default on, see
 * vmmipc_export). The size is rounded up to the allocation granularity; 0
 * gives an empty buffer. */
VMMIPC_API vmmipc_result_t vmmipc_alloc(size_t size, vmmipc_buf_t *out);
/* Appends chunks (of at most the buffer's chunk size for vmmipc_alloc_ex
 * buffers, else one chunk); keeps the data; may move the buffer: re-read the
 * pointer. Only buffers allocated by this process grow: an imported or a
 * wrapped buffer is refused (VMMIPC_ERR_INVALID_ARG), and a buffer that an
 * open window exposes is refused with VMMIPC_ERR_BUSY. */
VMMIPC_API vmmipc_result_t vmmipc_grow(vmmipc_buf_t buf, size_t new_size);
/* Local: the device address and size (either output may be NULL). */
VMMIPC_API vmmipc_result_t vmmipc_buf_ptr(vmmipc_buf_t buf, void **ptr, size_t *size);
/* Releases what the buffer owns: an allocated or imported buffer's chunks,
 * mappings and reservations; a wrapped buffer's retained handles only.
 * Refused (VMMIPC_ERR_BUSY) while an open window exposes the buffer.
 * A failing driver call does not stop it: everything else is still
 * released, and the first failure is reported (VMMIPC_ERR_CUDA). */
VMMIPC_API vmmipc_result_t vmmipc_buf_free(vmmipc_buf_t buf);
/* Number of physical chunks; whether the buffer holds imported memory. */
VMMIPC_API vmmipc_result_t vmmipc_buf_info(vmmipc_buf_t buf, int *num_chunks, int *is_imported);

/* Allocation properties for vmmipc_alloc_ex (VMMIPC_ALLOC_PROPS_INIT). */
typedef struct vmmipc_alloc_props {
  size_t struct_size;           /* sizeof(vmmipc_alloc_props_t) */
  const vmmipc_uuid_t *device;  /* NULL: the current device */
  size_t chunk_size;            /* bytes per physical chunk (a multiple of the granularity); 0: 64 MiB */
  unsigned int flags;           /* VMMIPC_ALLOC_*; unknown bits are VMMIPC_ERR_INVALID_ARG */
  int export_cache;             /* export cache (see vmmipc_export): < 0: VMMIPC_EXPORT_CACHE=0/1, unset:
                                   on; 0: off; 1: on */
} vmmipc_alloc_props_t;
#define VMMIPC_ALLOC_PROPS_INIT { sizeof(vmmipc_alloc_props_t), NULL, 0, 0u, -1 }
/* The driver's gpuDirectRDMACapable allocation flag; VMMIPC_ERR_UNSUPPORTED
 * on a device without CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED. */
#define VMMIPC_ALLOC_GPU_DIRECT_RDMA 0x1u
/* Like vmmipc_alloc, with a device, a chunk size and allocation flags. The
 * default chunk size is 64 MiB: peer access to many moderate chunks is
 * faster than to one large one (docs/bring-your-own-memory.md); the last
 * chunk holds the rest. Chunks on a device other than the current one need
 * no current context there, but reading the memory does. */
VMMIPC_API vmmipc_result_t vmmipc_alloc_ex(size_t size, const vmmipc_alloc_props_t *props, vmmipc_buf_t *out);
/* Wraps [ptr, ptr + size), VMM memory that the application (or its
 * allocator) mapped with cuMemCreate + cuMemMap: one or more whole mappings
 * placed back to back, on one device, each created with
 * requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (else
 * VMMIPC_ERR_UNSUPPORTED naming the chunk). Memory from cudaMalloc or from a
 * stream-ordered pool is VMMIPC_ERR_UNSUPPORTED; a hole, or a start or end
 * that is not a mapping boundary (or not aligned to the granularity), is
 * VMMIPC_ERR_INVALID_ARG. The buffer holds one more reference to each
 * allocation (cuMemRetainAllocationHandle), which keeps the physical memory
 * alive for its exports even if the application unmaps; it never changes
 * the mappings, their access or the reservation. It exports and works in
 * every collective like an allocated buffer; vmmipc_buf_free releases only
 * those references (the mapping stays readable); vmmipc_grow is refused.
 * Its device and owner are the memory's device; vmmipc_buf_info reports one
 * chunk per mapping and is_imported 0. Each mapping must map its allocation
 * from offset 0, as allocators do. Memory imported from another process
 * (through vmmipc) cannot be exported again: VMMIPC_ERR_NOT_EXPORTABLE. */
VMMIPC_API vmmipc_result_t vmmipc_buf_wrap(void *ptr, size_t size, vmmipc_buf_t *out);
/* Minimum and recommended allocation granularity of a device for
 * POSIX-fd-exportable memory (either output may be NULL). */
VMMIPC_API vmmipc_result_t vmmipc_granularity(int device_ordinal, size_t *minimum, size_t *recommended);

/* ---- descriptors -------------------------------------------------------- */

typedef struct vmmipc_desc *vmmipc_desc_t;
/* New fds on every call, one per chunk; the descriptor owns them (close
 * them with vmmipc_desc_free). With the buffer's export cache on (the
 * default; vmmipc_alloc_props_t.export_cache, VMMIPC_EXPORT_CACHE=0/1) they
 * are duplicates of one exported fd per chunk that the buffer keeps from
 * its first export until the chunk is freed: exporting again costs a dup()
 * instead of a driver export (0.02 vs 0.57 ms per chunk on H200), at the
 * price of one open fd per exported chunk per live buffer. With it off,
 * every export asks the driver and nothing stays open after
 * vmmipc_desc_free. The descriptor carries the buffer's identity (owner
 * process, buffer serial, and a generation that vmmipc_grow changes). */
VMMIPC_API vmmipc_result_t vmmipc_export(vmmipc_buf_t buf, vmmipc_desc_t *out);
/* Number of fds the export caches of all live buffers hold in this process
 * (fd-limit errors report it too). */
VMMIPC_API vmmipc_result_t vmmipc_export_cache_fds(long *count);
/* Closes the descriptor's fds and frees it. */
VMMIPC_API vmmipc_result_t vmmipc_desc_free(vmmipc_desc_t desc);
/* Local: validates the descriptor, then reserves, imports, maps and sets the
 * access asked for (NULL: read-write for the current device); rolls back on
 * failure. Keeps no fd (desc still owns its own). *out: imported, never
 * exportable; free with vmmipc_buf_free. */
VMMIPC_API vmmipc_result_t vmmipc_import(vmmipc_desc_t desc, const vmmipc_access_t *access,
                                            vmmipc_buf_t *out);
/* Serialise: bytes in the versioned wire format (docs/wire-format.md) and the
 * descriptor's fds, which stay owned by the descriptor (send them before
 * vmmipc_desc_free). With bytes == NULL only the needed sizes are returned.
 * On input *num_bytes and *num_fds give the capacities. */
VMMIPC_API vmmipc_result_t vmmipc_desc_pack(vmmipc_desc_t desc, void *bytes, size_t *num_bytes,
                                               int *fds, int *num_fds);
/* Validate and rebuild; the fds are duplicated, so the caller keeps its own. */
VMMIPC_API vmmipc_result_t vmmipc_desc_unpack(const void *bytes, size_t num_bytes, const int *fds,
                                                 int num_fds, vmmipc_desc_t *out);
/* Metadata of a descriptor; any output may be NULL. */
VMMIPC_API vmmipc_result_t vmmipc_desc_info(vmmipc_desc_t desc, size_t *size, int *num_chunks,
                                               vmmipc_uuid_t *owner);
/* Size of chunk `index` (address order). */
VMMIPC_API vmmipc_result_t vmmipc_desc_chunk_size(vmmipc_desc_t desc, int index, size_t *size);

/* ---- point to point (ranks of the comm that share a node) ---------------- */
/* Their own context: never matched with a collective's traffic. Messages
 * between two ranks arrive in order; those queued before the sender failed
 * are still received (unless a send to it failed first). A call that waits
 * ends at once with the failure of any node peer that aborted the comm or
 * broke it (and said so), not only of its partner, and the comm is then
 * broken here too. */

/* Sends a descriptor (its fds duplicated into the message; the caller keeps
 * desc). Returns once the message is queued in the socket, not when it is
 * received; blocks only while the socket is full, up to the timeout. */
VMMIPC_API vmmipc_result_t vmmipc_send(vmmipc_comm_t comm, vmmipc_desc_t desc, int dest);
/* Receives the next descriptor from `source`, blocking up to the timeout.
 * *out: the caller's (vmmipc_desc_free). */
VMMIPC_API vmmipc_result_t vmmipc_recv(vmmipc_comm_t comm, int source, vmmipc_desc_t *out);

/* ---- collectives (ranks of the communicator given to comm_create) -------- */
/* Every one: all ranks of the comm, one exchange among each node's ranks and
 * one agreement over the comm; blocks up to about twice the timeout. */

/* descs_out: an array of comm-size entries; entry r is a copy of rank r's
 * descriptor for every rank r of the caller's node (the caller's own entry
 * included, NULL where that rank passed NULL), NULL for other nodes. Each
 * entry is the caller's to vmmipc_desc_free. */
VMMIPC_API vmmipc_result_t vmmipc_allgather_desc(vmmipc_comm_t comm, vmmipc_desc_t desc,
                                                    vmmipc_desc_t *descs_out);
/* descs (read at the root only): comm-size entries indexed by comm rank,
 * NULL entries allowed. *out: that rank's descriptor (the root gets a copy of
 * its own entry), NULL off the root's node; the caller's to free. */
VMMIPC_API vmmipc_result_t vmmipc_scatter_desc(vmmipc_comm_t comm, const vmmipc_desc_t *descs,
                                                  int root, vmmipc_desc_t *out);
typedef struct vmmipc_win *vmmipc_win_t;
/* Maps every node peer's buf (NULL: this rank contributes nothing) with the
 * access asked for; like MPI_Win_allocate_shared. *out: the caller's
 * (vmmipc_win_free). While the window is open, buf cannot be freed or grown
 * and the comm cannot be destroyed (VMMIPC_ERR_BUSY). The comm's
 * first window also makes its signal pool (docs/sync.md). Unchanged peer
 * buffers mapped again come from the comm's mapping cache, and their fds
 * are not sent again (docs/caches.md). A buffer its owner freed is dropped
 * from the peers' caches at the next collective the two take part in. */
VMMIPC_API vmmipc_result_t vmmipc_allgather_map(vmmipc_comm_t comm, vmmipc_buf_t buf,
                                                   const vmmipc_access_t *access, vmmipc_win_t *out);
/* Local, thread-safe: rank's buffer as mapped here: the caller's own buffer
 * for itself, NULL and 0 for ranks of other nodes or that gave none. */
VMMIPC_API vmmipc_result_t vmmipc_win_query(vmmipc_win_t win, int rank, void **ptr, size_t *size);
/* Collective: agrees first (on the window too: every rank must free its
 * windows in the same order, else VMMIPC_ERR_INVALID_ARG naming the rank),
 * then unmaps the peers here on every rank or on none, so that after it
 * returns nobody maps this rank's buffer through the window. Work enqueued
 * on the window must be complete first. A heap window's slice goes back to
 * its heap. Refused on every rank, the window still open everywhere, while
 * it is pinned on any rank (VMMIPC_ERR_BUSY naming the rank and the count,
 * vmmipc_win_pin). On a broken or aborted comm it frees everything local,
 * then returns the comm's failure. A failed call freed the window exactly
 * when the comm is broken after it (vmmipc_comm_stats); on a sound comm it
 * was refused on every rank (pinned, freed in different orders) or here
 * alone (another thread inside the comm) and the window is still open;
 * VMMIPC_ERR_BUSY always means still open. */
VMMIPC_API vmmipc_result_t vmmipc_win_free(vmmipc_win_t win);
/* The root's buf mapped by every other rank of its node. *out: the mapping
 * (vmmipc_buf_free; it may outlive the comm), NULL at the root and off its
 * node. */
VMMIPC_API vmmipc_result_t vmmipc_bcast_map(vmmipc_comm_t comm, vmmipc_buf_t buf, int root,
                                               const vmmipc_access_t *access, vmmipc_buf_t *out);
/* bufs (read at the root only): comm-size entries indexed by comm rank, NULL
 * allowed; each other rank of the root's node maps its entry. *out: as for
 * vmmipc_bcast_map (NULL at the root, off its node, and for a NULL entry). */
VMMIPC_API vmmipc_result_t vmmipc_scatter_map(vmmipc_comm_t comm, const vmmipc_buf_t *bufs, int root,
                                                 const vmmipc_access_t *access, vmmipc_buf_t *out);

/* ---- deferred frees and pins (garbage collectors, views) ------------------ */
/* For runtimes that cannot run collective work where an object dies (a
 * garbage collector, a view's deleter): they give it up locally, and the
 * library frees it in step on every rank at a later collective call.
 *
 * Local, from any thread, also while another thread is inside a call on
 * the window's comm: gives the window up; the handle must not be used after
 * (not even released again). The library frees it, in step on every rank,
 * within the first collective call on its comm (any collective,
 * vmmipc_win_free, the heap calls and vmmipc_comm_destroy included) that
 * starts after every rank released it and it is not pinned: each
 * collective's agreement carries the windows this rank released, and its
 * verdict the ones every rank released (at most 32 per call; the rest go
 * with the next ones). A window not released by every rank stays open and
 * untouched. Stream work enqueued on it must be complete before it is
 * released. On a broken or aborted comm, the next call on the comm
 * (vmmipc_comm_destroy at the latest) frees it locally. Errors:
 * VMMIPC_ERR_INVALID_ARG (NULL). */
VMMIPC_API vmmipc_result_t vmmipc_win_release(vmmipc_win_t win);
/* Local, from any thread, also during another call on the comm: one more
 * pin on the window (an atomic count). While the window is pinned on any
 * rank, vmmipc_win_free returns VMMIPC_ERR_BUSY on every rank (after its
 * agreement; the message names the rank and how many pins), the window
 * stays open, and a released window is not freed. A runtime pins a window
 * per live view of its memory. Errors: VMMIPC_ERR_INVALID_ARG (NULL). */
VMMIPC_API vmmipc_result_t vmmipc_win_pin(vmmipc_win_t win);
/* Local, from any thread: one pin fewer. Errors: VMMIPC_ERR_INVALID_ARG
 * (NULL, or the window is not pinned). */
VMMIPC_API vmmipc_result_t vmmipc_win_unpin(vmmipc_win_t win);

/* ---- stream-ordered synchronisation on windows ----------------------------- */
/* `stream` is a CUstream or cudaStream_t; NULL is the legacy default stream.
 * `rank`: a rank of the window's comm on the caller's node, else
 * VMMIPC_ERR_INVALID_ARG. They enqueue and return (no host wait); the device
 * needs 64-bit stream memory operations (else VMMIPC_ERR_UNSUPPORTED).
 * What becomes visible to whom, and when: docs/sync.md. Signal, wait and
 * wait_host may be called from several threads at once.
 * None of them loads code, allocates or waits for the context, so a kernel
 * of the caller's may be waiting for the very signal: the window calls
 * (vmmipc_allgather_map, vmmipc_heap_alloc) load the library's kernels into
 * the current context and make the window's device arrays. The path
 * (VMMIPC_SYNC: auto, kernel, memops), the memops barrier's shape
 * (VMMIPC_SYNC_BARRIER: flat, gather, dissem) and the device API's scope
 * (VMMIPC_DEV_SCOPE: auto, sys) are decided with the comm's first window,
 * the same on every node rank; the first two must be set alike there.
 * auto times both paths there and takes the faster (vmmipc_comm_stats).
 * Kernel path: a stream wait or barrier that gives up at the comm's
 * timeout lets the stream go on, so it fails the comm: this rank's host
 * sync calls then return VMMIPC_ERR_TIMEOUT naming the rank waited for,
 * and its next call holding the comm (any collective) breaks it, which
 * every rank's later collectives report.
 * CUDA graphs: the three capture (cuStreamBeginCapture) and replay; a
 * replay repeats the values signal and wait were captured with, while the
 * barrier replays correctly as it is (docs/sync.md, "CUDA graphs"). */

/* Values are below 2^63: the top bit is VMMIPC_SIGNAL_FAILED's (else
 * VMMIPC_ERR_INVALID_ARG). A wait for 0 is satisfied at once and enqueues
 * nothing. When the comm fails (a peer hung up or aborted, a timeout,
 * vmmipc_comm_abort, teardown) this rank's slots of every open window are
 * set to VMMIPC_SIGNAL_FAILED, which satisfies every wait for 1 to 2^63 - 1
 * (the comparison is cyclic, as CU_STREAM_WAIT_VALUE_GEQ's), and set again
 * after any late write of a peer until the windows are freed, so no stream
 * waits forever; the next call on the window or comm returns the failure,
 * naming the rank. Kernels reading a slot can test the top bit. On a node
 * of one rank, signal and wait to oneself use one's own slot, and the
 * barrier completes at once. */
#define VMMIPC_SIGNAL_FAILED 0x8000000000000000ull

/* Sets the caller's slot in rank's pad to value, once the work enqueued
 * before it on stream is complete and visible to rank: one batch of a
 * system-scope memory barrier (CU_STREAM_MEM_OP_BARRIER) then the write. */
VMMIPC_API vmmipc_result_t vmmipc_win_signal(vmmipc_win_t win, int rank, uint64_t value, void *stream);
/* Holds later work on stream until rank's slot in the caller's pad is at
 * least value. */
VMMIPC_API vmmipc_result_t vmmipc_win_wait(vmmipc_win_t win, int rank, uint64_t value, void *stream);
/* Barrier among the node's ranks of the window, on each one's stream;
 * repeats without resets. One thread at a time per window, and a window's
 * barriers must be ordered with each other on the GPU: on one stream, or
 * on streams ordered by events (cuEventRecord, cuStreamWaitEvent). They
 * pair across ranks by their number on each rank (per call on the
 * memory-operation path, in the order they start on the kernel path), not
 * by stream, and each waits for the peers to reach at least its number, so
 * barriers on two unordered streams may pair wrongly and let work start
 * before a peer's work is done. A call that
 * fails counts for nothing, except where the driver refuses a later batch
 * of a memory-operation barrier of more than 256 operations (129 node
 * ranks and more; captured, 44): arrivals may have landed, so the comm
 * breaks, naming this rank. */
VMMIPC_API vmmipc_result_t vmmipc_win_barrier(vmmipc_win_t win, void *stream);
/* The wait, from the host: blocks until rank's slot reaches value, at most
 * timeout_ms (<= 0: the comm's timeout), then VMMIPC_ERR_TIMEOUT naming rank.
 * Within about 100 ms of rank's exit or of its comm's failure (its slots
 * then hold VMMIPC_SIGNAL_FAILED) it returns VMMIPC_ERR_PEER, or
 * VMMIPC_ERR_ABORTED where rank aborted the comm, naming rank; this rank's
 * comm has then failed too: its stream waits are released, its host sync
 * calls return that failure, naming rank, and its next collective breaks
 * it. Any thread may call it, with any context current or none: it reads
 * through the window's own context. */
VMMIPC_API vmmipc_result_t vmmipc_win_wait_host(vmmipc_win_t win, int rank, uint64_t value, int timeout_ms);

/* ---- symmetric heap (docs/heap.md) ---------------------------------------- */
/* Address space is reserved once per node rank, physical memory is added in
 * growth steps that every node rank maps, and windows are carved from it
 * without driver calls: a heap window costs one small collective.
 *
 * Lockstep: every rank's heap holds the same state, since every change is
 * a collective call that sees every rank's input; ranks that call
 * heap_alloc, win_free of heap windows or heap_trim in different orders are
 * detected at the next heap_alloc (VMMIPC_ERR_INVALID_ARG).
 * Threads: as for the comm the heap was made on. create, alloc, trim,
 * destroy and win_free of heap windows are collective calls on that comm:
 * they must not overlap other calls on it (refused otherwise). stats is
 * local and reads counters only collective calls change. */

typedef struct vmmipc_heap *vmmipc_heap_t;
typedef struct vmmipc_heap_config {
  size_t struct_size;             /* sizeof(vmmipc_heap_config_t) */
  size_t reserve;                 /* address space per rank's segment, rounded up to whole steps; 0: the
                                     device's memory (a segment can never hold more, and address space
                                     costs no memory) */
  size_t grow;                    /* physical memory added per growth step, rounded up to the granularity;
                                     0: 1/512 of the device's memory within [granularity, 512 MiB] (one
                                     step costs about one driver export, so steps hold many windows,
                                     while at most one step, 0.2% of the device, sits mapped unused) */
  const vmmipc_access_t *access;  /* how peers' segments are mapped here; NULL: read-write, current device */
} vmmipc_heap_config_t;
#define VMMIPC_HEAP_CONFIG_INIT { sizeof(vmmipc_heap_config_t), 0, 0, NULL }

typedef struct vmmipc_heap_stats {
  size_t struct_size;             /* sizeof(vmmipc_heap_stats_t); only that many bytes are written */
  uint64_t reserved;              /* address space reserved here, all segments */
  uint64_t mapped;                /* physical memory of this rank's own segment */
  uint64_t in_use;                /* bytes of this rank's live slices, as requested */
  uint64_t high_water;            /* the most in_use has been */
  int live_windows;               /* heap windows not freed yet */
  uint64_t growth_steps;          /* growth steps taken (given-back steps not subtracted) */
  double grow_s;                  /* time spent growing, seconds */
  uint64_t carved;                /* bytes the live slices occupy in every segment: each slice is as large
                                     as the largest rank's request, aligned; equal on every rank */
  uint64_t carved_high_water;     /* the most carved has been: mapped stays within it rounded up to
                                     one growth step, unless the free list is fragmented */
  uint64_t trimmed_steps;         /* growth steps given back by vmmipc_heap_trim */
  uint64_t reserve, grow;         /* the geometry every rank settled on (bytes per segment, per step) */
} vmmipc_heap_stats_t;
#define VMMIPC_HEAP_STATS_INIT { sizeof(vmmipc_heap_stats_t), 0, 0, 0, 0, 0, 0, 0.0, 0, 0, 0, 0, 0 }

/* Collective over the comm: two agreements; reserves the
 * node's segments (no physical memory yet). Every rank uses the same
 * geometry: the largest granularity and grow, the smallest reserve. The
 * comm cannot be destroyed while the heap lives (VMMIPC_ERR_BUSY). config
 * NULL: defaults. */
VMMIPC_API vmmipc_result_t vmmipc_heap_create(vmmipc_comm_t comm, const vmmipc_heap_config_t *config,
                                              vmmipc_heap_t *out);
/* Collective: a window of `size` bytes on this rank (sizes may differ, 0
 * allowed: win_query gives NULL, 0 for that rank, as for ranks of other
 * nodes). The slice offset is the same in every segment. Alignment: 256
 * bytes at least; slices of one granule or more start on a granule and
 * take whole granules. Costs
 * one agreement carrying every rank's size; only when no free block
 * holds the slice does the heap grow (every segment by whole steps: a
 * driver export per rank and one agreement). All-or-nothing: a rank that
 * cannot grow (out of memory, fd limit, reserve exhausted) fails the call
 * on every rank, naming it, and the heap keeps what it had. */
VMMIPC_API vmmipc_result_t vmmipc_heap_alloc(vmmipc_heap_t heap, size_t size, vmmipc_win_t *out);
/* Local. */
VMMIPC_API vmmipc_result_t vmmipc_heap_stats(vmmipc_heap_t heap, vmmipc_heap_stats_t *stats);
/* Collective: gives back the growth steps at the top of the heap that no
 * live slice uses (memory is never given back otherwise). All-or-nothing:
 * a rank that cannot give a step back fails the call on every rank, naming
 * it, and every rank keeps its steps. */
VMMIPC_API vmmipc_result_t vmmipc_heap_trim(vmmipc_heap_t heap);
/* Collective. First frees, in step, the windows every rank released
 * (vmmipc_win_release). Refused on every rank (VMMIPC_ERR_BUSY, naming how
 * many) while heap windows are open that some rank has not released; on a
 * broken or aborted comm, local (released windows of it freed locally
 * first), and it succeeds as vmmipc_comm_destroy then does. NULL: nothing. As for
 * vmmipc_comm_destroy, the heap is still open after VMMIPC_ERR_BUSY or
 * VMMIPC_ERR_INVALID_ARG, and freed after any other result. */
VMMIPC_API vmmipc_result_t vmmipc_heap_destroy(vmmipc_heap_t heap);
/* As vmmipc_win_release, for a heap (local, any thread, also during a call
 * on its comm; the handle must not be used after): destroyed in step, as by
 * vmmipc_heap_destroy, at the first collective call on its comm that starts
 * after every rank released it and none of its windows is open any more
 * (each freed, or released and freed in step by an earlier call). Errors:
 * VMMIPC_ERR_INVALID_ARG (NULL). */
VMMIPC_API vmmipc_result_t vmmipc_heap_release(vmmipc_heap_t heap);

/* ---- device API (include/vmmipc_device.cuh, docs/device-api.md) ------------ */

/* vmmipc_win_device_t (rank, nranks, device arrays of the peers' addresses,
 * sizes and signal slots) is in vmmipc_win_device.h, which needs no MPI. */
/* Local: fills *out for kernels (vmmipc_device.cuh). The arrays live in
 * device memory the window's comm allocated when the window was made (no
 * allocation here: a kernel may be running), are filled on the window's
 * first call, and stay valid until vmmipc_win_free. Any thread, with any
 * context current or none. */
VMMIPC_API vmmipc_result_t vmmipc_win_device(vmmipc_win_t win, vmmipc_win_device_t *out);

/* What device waits on a window recorded, and which path its host sync
 * calls took. Set struct_size (VMMIPC_WIN_DEVICE_STATUS_INIT); only that
 * many bytes are written. */
typedef struct vmmipc_win_device_status {
  size_t struct_size;
  int state;                /* VMMIPC_DEV_OK: nothing recorded; VMMIPC_DEV_TIMEOUT or VMMIPC_DEV_FAILED */
  int rank;                 /* the rank whose signal the wait was for */
  int barrier;              /* 1: the wait was part of a barrier (device or host-API) */
  uint64_t value;           /* the value it waited for */
  uint64_t seen;            /* what the slot held when it gave up */
  uint64_t kernel_calls;    /* host sync calls on this window that ran as kernels (VMMIPC_SYNC) */
  uint64_t memops_calls;    /* host sync calls on this window that ran as stream memory operations */
} vmmipc_win_device_status_t;
#define VMMIPC_WIN_DEVICE_STATUS_INIT { sizeof(vmmipc_win_device_status_t), 0, 0, 0, 0, 0, 0, 0 }
/* Local: the record of the first device wait on win that timed out or saw
 * a failure value (kernels of vmmipc_device.cuh and the host-sync kernels),
 * then clears it. While a record is set, vmmipc_win_signal, wait, barrier
 * and wait_host on win return VMMIPC_ERR_TIMEOUT (or VMMIPC_ERR_PEER for a
 * failure) naming the rank. Any thread, with any context current or none;
 * a call that fails keeps the record. */
VMMIPC_API vmmipc_result_t vmmipc_win_device_status(vmmipc_win_t win, vmmipc_win_device_status_t *status);

#ifdef __cplusplus
}
#endif
#endif /* VMMIPC_H */
