/* Static strings for result codes, and the version string. */
#include "vmmipc.h"

#define VMMIPC__STR(x) #x
#define VMMIPC__XSTR(x) VMMIPC__STR(x)

const char *vmmipc_strerror(vmmipc_result_t r) {
  switch (r) {
    case VMMIPC_SUCCESS: return "success";
    case VMMIPC_ERR_INVALID_ARG: return "invalid argument";
    case VMMIPC_ERR_INVALID_DESC: return "malformed, forged or inconsistent descriptor or message";
    case VMMIPC_ERR_UNSUPPORTED: return "unsupported: the device or driver lacks VMM, POSIX-fd handles or peer access";
    case VMMIPC_ERR_CUDA: return "a CUDA driver call failed";
    case VMMIPC_ERR_MPI: return "an MPI call failed";
    case VMMIPC_ERR_SYSTEM: return "an operating-system call failed";
    case VMMIPC_ERR_PEER: return "a peer failed its part, hung up, or is not on this node";
    case VMMIPC_ERR_TIMEOUT: return "a peer did not answer within the timeout";
    case VMMIPC_ERR_NOT_EXPORTABLE: return "memory imported from another process cannot be exported again";
    case VMMIPC_ERR_NO_MEMORY: return "out of host memory";
    case VMMIPC_ERR_BUSY: return "in use: an exposed buffer, open windows or a concurrent call";
    case VMMIPC_ERR_RESOURCE: return "a limit was reached (fds, address space or a cache bound)";
    case VMMIPC_ERR_ABORTED: return "the communicator was aborted";
  }
  return "unknown vmmipc result code";
}

const char *vmmipc_version(void) {
  return VMMIPC__XSTR(VMMIPC_VERSION_MAJOR) "." VMMIPC__XSTR(VMMIPC_VERSION_MINOR) "." VMMIPC__XSTR(
      VMMIPC_VERSION_PATCH);
}
