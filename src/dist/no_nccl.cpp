// Built when CMake found no NCCL (no CUDA toolkit, no MPI, or BERTCC_CUDA=OFF).
#include "bertcc/dist.h"
#include "bertcc/error.h"

namespace bertcc::dist {

bool nccl_available() { return false; }

std::string ranks_sharing_gpu(Communicator&, int) { return ""; }

std::unique_ptr<DeviceCommunicator> make_nccl(Communicator&, int) {
  fail(
      "this bertcc was built without NCCL (it needs the CUDA kernels, the CUDA toolkit's NCCL and MPI; "
      "communicators here: ",
      available(), "); use --allreduce-backend host");
}

}  // namespace bertcc::dist
