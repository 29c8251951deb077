// cuda_family() (device_family.h) in builds with the CUDA kernels: the CUDA module's, loaded on
// the first call (cuda_module.h).
#include "backend/cuda_module.h"
#include "backend/device_family.h"

namespace bertcc {

const DeviceFamily& cuda_family() { return *cuda_module().family; }

}  // namespace bertcc
