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
inline const char* device_help() { return "cpu (default) | cuda | cuda:N | cpu-staged (the device code paths on the CPU)"; }
// --allow-tf32: fp32 GEMMs on CUDA with TF32 products (PyTorch's torch.backends.cuda.matmul.
// allow_tf32); off by default: exact fp32. Applies to the backends backend_for() hands out after it
// is set; on the CPU it has no effect, and backend_for says so once.
void set_allow_tf32(bool on);
inline const char* allow_tf32_help() {
  return "fp32 GEMMs on CUDA with TF32 products (10-bit mantissas, fp32 sums; PyTorch's allow_tf32); "
         "default: exact fp32. No effect on the CPU or with --precision bf16/fp16";
}
// --cuda-graphs (inference commands): each forward shape seen twice is recorded as a CUDA graph and
// replayed from then on (Bert::encode). backend_for refuses it for any device but cuda.
void set_cuda_graphs(bool on);
bool cuda_graphs();
inline const char* cuda_graphs_help() {
  return "with --device cuda: record the encoder's forward as a CUDA graph for each batch shape seen twice "
         "and replay it (one launch instead of one per kernel; the same results); batches are then computed "
         "padded to their longest row, the shape a graph records";
}

// Unpadded execution (Bert::encode): the encoder computes a batch's real tokens only, packed
// sequence after sequence, and restores the padded layout for the heads. On by default; --padded (or
// the environment variable BERTCC_PADDED=1) computes every batch padded to its longest row, as
// before, for comparison (and for dump-step, whose checks against PyTorch compute the padding).
void set_padded_execution(bool on);
bool padded_execution();
inline const char* padded_help() {
  return "compute each batch padded to its longest row (the padding too) instead of its real tokens only "
         "(the default; also BERTCC_PADDED=1): for comparison";
}

}  // namespace bertcc
