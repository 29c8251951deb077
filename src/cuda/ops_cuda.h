// CUDA's operations for Ops (ops_cuda.cpp), handed over by the CUDA backend when it is made.
#pragma once
#include "backend/device_ops.h"

namespace bertcc::cuda {
const DeviceOps& ops_table();
}  // namespace bertcc::cuda
