// The NCCL communicator in builds with NCCL: src/dist/nccl_comm.cpp, in the CUDA module
// (backend/cuda_module.h), loaded on first use. make_nccl needs a CUDA backend, which has loaded
// the module already.
#include "backend/cuda_module.h"
#include "bertcc/dist.h"
#include "bertcc/error.h"

namespace bertcc::dist {

// Known at build time (the module is built with NCCL in this configuration): listing the
// communicators, as MPI's errors do, loads nothing.
bool nccl_available() { return true; }

std::string ranks_sharing_gpu(Communicator& host, int device) {
  const BertccCudaModule& m = cuda_module();
  BERTCC_CHECK(m.ranks_sharing_gpu, "the CUDA module was built without NCCL (a module from another build?)");
  return m.ranks_sharing_gpu(host, device);
}

std::unique_ptr<DeviceCommunicator> make_nccl(Communicator& host, int device) {
  const BertccCudaModule& m = cuda_module();
  BERTCC_CHECK(m.make_nccl, "the CUDA module was built without NCCL (a module from another build?)");
  return m.make_nccl(host, device);
}

}  // namespace bertcc::dist
