// The CUDA half of bertcc as a module loaded at run time. In builds with the CUDA toolkit the
// CUDA kernels, the CUDA backend and the NCCL communicator are libbertcc_cuda.so (beside the
// bertcc binary), the one part of bertcc linked against cudart, cuBLASLt and NCCL; the bertcc
// binary links none of them, so that a process that never asks for --device cuda does not map
// them (cuBLASLt alone is ~150 MiB resident). The engine reaches the module through one C entry
// point, bertcc_cuda_module(), whose table holds the rest.
//
// cuda_module() is the engine's side: src/backend/cuda_loader.cpp opens the module on first use
// (BERTCC_CUDA_MODULE, or libbertcc_cuda.so beside /proc/self/exe); src/cuda/module_linked.cpp
// returns the table of a statically linked bertcc_cuda instead, for the test and bench programs
// that call the kernels directly. The forwarders cuda_family() (backend/cuda_family.cpp) and the
// NCCL functions (dist/nccl_loaded.cpp) go through it.
#pragma once
#include <memory>
#include <string>

#include "backend/device_family.h"
#include "bertcc/dist.h"

// The table's layout and the types it passes; a module whose number differs is refused.
#define BERTCC_CUDA_MODULE_ABI 1

extern "C" {
struct BertccCudaModule {
  int abi;  // BERTCC_CUDA_MODULE_ABI of the module's build
  const bertcc::DeviceFamily* family;
  // The NCCL communicator (src/dist/nccl_comm.cpp); both null in a module built without NCCL
  std::unique_ptr<bertcc::dist::DeviceCommunicator> (*make_nccl)(bertcc::dist::Communicator& host, int device);
  std::string (*ranks_sharing_gpu)(bertcc::dist::Communicator& host, int device);
};

// Defined in the module (src/cuda/module.cpp); the loader finds it by this name with dlsym.
const BertccCudaModule* bertcc_cuda_module();
}

namespace bertcc {

// The module's table; loads the module on the first call (throws, naming the file and the
// loader's reason, where it cannot).
const BertccCudaModule& cuda_module();

// The module's own definitions, under names of their own: the bertcc binary exports its symbols
// to the module, and a module function named like the engine's forwarder (cuda_family,
// dist::make_nccl) would bind to the forwarder instead.
namespace cuda {
const DeviceFamily& family();
}
namespace dist::nccl {
std::unique_ptr<DeviceCommunicator> make(Communicator& host, int device);
std::string ranks_sharing_gpu(Communicator& host, int device);
}  // namespace dist::nccl

}  // namespace bertcc
