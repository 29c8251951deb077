// The entry point of libbertcc_cuda.so (backend/cuda_module.h): the CUDA family and, in builds
// with NCCL, the NCCL communicator.
#include "backend/cuda_module.h"

extern "C" const BertccCudaModule* bertcc_cuda_module() {
  static const BertccCudaModule table{
      .abi = BERTCC_CUDA_MODULE_ABI,
      .family = &bertcc::cuda::family(),
#ifdef BERTCC_MODULE_NCCL
      .make_nccl = bertcc::dist::nccl::make,
      .ranks_sharing_gpu = bertcc::dist::nccl::ranks_sharing_gpu,
#else
      .make_nccl = nullptr,
      .ranks_sharing_gpu = nullptr,
#endif
  };
  return &table;
}
