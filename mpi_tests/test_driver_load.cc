// Behaviour that depends on how (and which) driver is loaded: the loader's
// fallback, failed loads and their retry, and device capabilities switched
// off in the stand-in. Every case runs in a forked child that has not
// loaded the driver yet (this process never loads it), so that each child
// can choose its own environment.
#include <dlfcn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "harness/helpers.h"

namespace {

constexpr size_t kGran = 2u << 20;

void ExpectChildExits0(int (*fn)(void *), const char *what) {
  int st = vt::InChild(fn, nullptr);
  ASSERT_TRUE(WIFEXITED(st)) << what << ": child died, status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << what << ": failed check " << WEXITSTATUS(st);
}

int NoGpuDirectRdma(void *) {
  setenv("VMMIPC_STANDIN_CAPS", "nordma", 1);
  if (vmmipc_set_device(0) != VMMIPC_SUCCESS) return 10;
  vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
  props.flags = VMMIPC_ALLOC_GPU_DIRECT_RDMA;
  vmmipc_buf_t b = nullptr;
  if (vmmipc_alloc_ex(kGran, &props, &b) != VMMIPC_ERR_UNSUPPORTED || b) return 11;
  if (!std::strstr(vmmipc_last_error(), "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED is 0")) return 12;
  if (!std::strstr(vmmipc_last_error(), "VMMIPC_ALLOC_GPU_DIRECT_RDMA")) return 13;
  props.flags = 0;  // without the flag the device still allocates
  if (vmmipc_alloc_ex(kGran, &props, &b) != VMMIPC_SUCCESS || !b) return 14;
  if (vmmipc_buf_free(b) != VMMIPC_SUCCESS) return 15;
  return 0;
}

TEST(DriverLoad, GpuDirectRdmaOnADeviceWithoutItIsUnsupported) {
  if (!vt::UsingStandin()) GTEST_SKIP() << "capabilities can be switched off only in the stand-in";
  ExpectChildExits0(NoGpuDirectRdma, "no GPUDirect RDMA");
}

}  // namespace
