/* Random bytes for socket names and communicator ids. */
#include "common/random.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/error.h"
#include "common/testhooks.h"

vmmipc_result_t vmmipc__random(void *out, size_t n, const char *what) {
  unsigned char *p = out;
  size_t got = 0;
  int err = 0;
  if (VMMIPC__INJECT("random")) /* tests: no getrandom, no /dev/urandom */
    return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, ENOSYS, "%s: no random bytes: getrandom failed (ENOSYS) and "
                               "open(/dev/urandom)", what);
  while (got < n) {
    ssize_t k = getrandom(p + got, n - got, 0);
    if (k > 0) {
      got += (size_t)k;
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else {
      err = k < 0 ? errno : EIO;
      break;
    }
  }
  if (got < n) { /* no getrandom (old kernel, seccomp): the urandom device */
    int fd;
    do fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
      return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, errno,
                                 "%s: no random bytes: getrandom failed (%s) and open(/dev/urandom)", what,
                                 vmmipc__errno_name(err));
    while (got < n) {
      ssize_t k = read(fd, p + got, n - got);
      if (k > 0) {
        got += (size_t)k;
      } else if (k < 0 && errno == EINTR) {
        continue;
      } else {
        int e = k < 0 ? errno : EIO;
        close(fd);
        return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e, "%s: reading /dev/urandom", what);
      }
    }
    close(fd);
  }
  return VMMIPC_SUCCESS;
}
