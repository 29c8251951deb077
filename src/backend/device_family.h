// The backends behind --device cuda[:N]. In builds with the CUDA kernels cuda_family() is
// src/cuda/cuda_backend.cpp's, in the CUDA module that src/backend/cuda_family.cpp loads on the
// first call (cuda_module.h); elsewhere src/backend/no_cuda.cpp's, whose make throws, saying how to
// build with them. backend_for() (select.cpp) is the one caller, and keeps each backend it makes.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace bertcc {

struct DeviceFamily {
  // The backend on device `index` (`device`: the --device value, for errors); throws when there is
  // no usable device (the reason from the driver) or no such index.
  std::unique_ptr<Backend> (*make)(const std::string& device, int index);
  // --allow-tf32, handed to the family's kernels each time backend_for() hands out one of its backends
  void (*set_allow_tf32)(bool on);
};

const DeviceFamily& cuda_family();

}  // namespace bertcc
