// The CUDA backend (src/cuda kernels behind the Backend interface).
#pragma once
#include <memory>

#include "backend/backend.h"

namespace bertcc::cuda {
// Backend on device `index`; throws when there is no usable device (the reason from the driver)
// or no such index.
std::unique_ptr<Backend> make_backend(int index);
}  // namespace bertcc::cuda
