// The backends behind --device cuda[:N], supplied at link time as src/dist/no_mpi.cpp stands in
// for MPI: src/cuda/cuda_backend.cpp defines cuda_family() in builds with the CUDA kernels, and
// src/backend/no_cuda.cpp elsewhere (its make throws, saying how to build with them). backend_for()
// (select.cpp) is the one caller, and keeps each backend it makes.
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
