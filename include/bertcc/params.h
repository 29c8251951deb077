// One parameter table: {HF name, shape, offset, weight-decay flag} over one flat buffer.
// Optimizers read the decay flag from here; nobody matches names with regexes.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace bertcc {

struct ParamEntry {
  std::string name;            // Hugging Face name, e.g. "bert.encoder.layer.0.attention.self.query.weight"
  std::vector<int64_t> shape;  // HF/PyTorch shape ([out, in] for Linear weights)
  size_t offset = 0;           // in elements, into the flat buffers
  size_t numel = 0;
  bool weight_decay = true;  // false for biases and LayerNorm parameters
  bool trainable = true;     // false for frozen tensors (fine-tuning only the top layers): no update
  float lr_scale = 1.0f;     // multiplies the learning rate (ELECTRA's layer-wise decay)
};

// A tensor of a table by its index: looked up by name once (when a model is built), then used on
// the step path without a string in sight.
struct ParamRef {
  int32_t i = -1;
  explicit operator bool() const { return i >= 0; }
};

class ParamTable {
 public:
  // Appends an entry; returns its offset.
  size_t add(const std::string& name, std::vector<int64_t> shape, bool weight_decay);
  const std::vector<ParamEntry>& entries() const { return entries_; }
  size_t total() const { return total_; }
  const ParamEntry* find(const std::string& name) const;
  const ParamEntry& at(const std::string& name) const;  // throws naming the tensor
  ParamRef ref(const std::string& name) const;          // throws naming the tensor
  ParamRef find_ref(const std::string& name) const;     // an empty ref when absent
  const ParamEntry& operator[](ParamRef r) const { return entries_[static_cast<size_t>(r.i)]; }
  void set_trainable(const std::string& name, bool trainable);
  void set_lr_scale(const std::string& name, float scale);

 private:
  std::vector<ParamEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  size_t total_ = 0;
};

}  // namespace bertcc
