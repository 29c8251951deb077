// cuda_module() (backend/cuda_module.h) for the programs that link the CUDA kernels statically
// (test_cuda_kernels, test_cudnn_attention, the CUDA benches): their own bertcc_cuda's table, no
// module to load. Being an object of the program, it takes the place of the loader in bertcc_lib.
#include "backend/cuda_module.h"

namespace bertcc {

const BertccCudaModule& cuda_module() { return *bertcc_cuda_module(); }

}  // namespace bertcc
