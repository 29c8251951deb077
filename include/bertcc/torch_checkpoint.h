// PyTorch checkpoints (torch.save's zip format, PyTorch >= 1.6) read without Python and without
// running the pickle: a minimal unpickler that knows the container opcodes and only the globals
// that rebuild tensors (torch._utils._rebuild_tensor_v2/v3, _rebuild_parameter, the typed storages,
// torch dtypes, collections.OrderedDict). Any other global or opcode is refused naming it: a pickle
// can run code, so nothing in it is ever called.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bertcc/dtype.h"

namespace bertcc {

struct TorchTensor {
  std::string name;   // key in the state dict, as stored
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape, stride;
  int64_t offset = 0;   // in elements, into the storage
  std::string storage;  // zip entry key under data/
  int64_t numel() const;
};

class TorchCheckpoint {
 public:
  // Opens FILE, reads its pickle and finds the state dict: the top-level dict when its values are
  // tensors, else the dict under 'model', 'state_dict' or 'module' (NVIDIA's and Lightning's
  // checkpoints). Names keep their stored spelling (the caller strips 'module.').
  explicit TorchCheckpoint(const std::string& path);
  ~TorchCheckpoint();
  TorchCheckpoint(const TorchCheckpoint&) = delete;
  TorchCheckpoint& operator=(const TorchCheckpoint&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TorchTensor>& tensors() const { return tensors_; }
  const std::string& state_dict_key() const { return key_; }  // "" for a bare state dict
  // Floating tensors to fp32 (any strides); throws naming the tensor for other dtypes.
  void read_f32(const TorchTensor& t, float* dst) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_, key_;
  std::vector<TorchTensor> tensors_;
};

// True when the file starts like a zip archive (torch.save since 1.6).
bool looks_like_torch_zip(const std::string& path);

}  // namespace bertcc
