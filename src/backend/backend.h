// The compute backend seam: the one object the model and the trainer hold for a device, made of
// five interfaces, each in its own header: its memory (memory.h: buffers, copies, synchronisation,
// memory statistics), the operations on those buffers (ops.h: every kernel, declared once and
// defined in ops.cpp, which dispatches to the device's table of operations where it has one), the
// optimizers (optimizers.h), graph capture (graphs.h) and measurement (measure.h). A device is a
// class deriving from Backend that implements the memory, optimizers, graphs and measurement and
// hands its operations to Ops (cpu_backend.cpp: the CPU and the staged backend; the CUDA backend,
// src/cuda/cuda_backend.cpp, reached through device_family.h); the operations are not virtual.
// Nothing here names src/cuda: the seam runs one way.
#pragma once
#include <memory>
#include <string>

#include "backend/graphs.h"
#include "backend/measure.h"
#include "backend/memory.h"
#include "backend/ops.h"
#include "backend/optimizers.h"
#include "core/settings.h"  // the process-wide switches: --allow-tf32, --cuda-graphs, --padded

namespace bertcc {

class Backend : public DeviceMemory, public Ops, public Optimizers, public GraphCapture, public Measurement {
 public:
  explicit Backend(DeviceKind kind, const DeviceOps* device_ops = nullptr) : Ops(kind, *this, device_ops) {}
  virtual std::string describe() const = 0;  // one line for start-up logs
  bool on_host() const { return kind() == DeviceKind::CPU; }
};

// The process-wide CPU backend.
Backend& cpu_backend();
// The staged backend ("--device cpu-staged"): the CPU kernels behind the device interface. Its
// memory is its own allocations, reached only through upload/download, and every call checks that
// each buffer it is given is one of them (and that upload/download go between host and device), so
// a run on it takes every device code path of the model and trainer (weights and gradients on the
// device, the optimizer and its moments there, checkpoints through downloads) without a GPU, and
// must give the bits of --device cpu. A host pointer passed as a device buffer, or the reverse, is
// an error naming the call.
Backend& staged_backend();
// "cpu", "cpu-staged", "cuda" or "cuda:N". CUDA needs a build with the CUDA kernels (BERTCC_CUDA)
// and a device; the error says which is missing.
Backend& backend_for(const std::string& device);
// One line for `--device` help texts.
inline const char* device_help() {
  return "cpu (default) | cuda | cuda:N | cpu-staged (the device code paths on the CPU)";
}
}  // namespace bertcc
