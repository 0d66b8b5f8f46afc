// A plain Unix socket between world ranks 0 and 1 for the raw-fd path
// (descriptor bytes + SCM_RIGHTS), independent of vmmipc's communicator.
#ifndef VMMIPC_TEST_RAWCHAN_H
#define VMMIPC_TEST_RAWCHAN_H

#include <string>
#include <vector>

namespace vt {

class RawChannel {
 public:
  // Collective over MPI_COMM_WORLD ranks 0 and 1 (others get an inert one).
  RawChannel();
  ~RawChannel();
  bool ok() const { return fd_ >= 0; }
  // Blocking, bounded by 30 s.
  bool Send(const std::vector<unsigned char> &bytes, const std::vector<int> &fds);
  bool Recv(std::vector<unsigned char> *bytes, std::vector<int> *fds);  // the caller owns the fds

 private:
  int fd_ = -1;
};

}  // namespace vt

#endif
