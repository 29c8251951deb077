// safetensors: 8-byte LE header length, JSON header, raw little-endian data.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bertcc/dtype.h"
#include "bertcc/fileio.h"

namespace bertcc {

struct StTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte offsets into the data section
  size_t numel() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // reads and validates the whole file
  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const StTensor* find(const std::string& name) const;
  // Converts F32/F16/BF16 data to fp32; throws naming the tensor for other dtypes.
  void read_f32(const StTensor& t, float* dst) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  MappedFile bytes_;
  size_t data_start_ = 0;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct StWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // fp32 source
};
// Writes F32 (or BF16) tensors atomically, with __metadata__ {"format": "pt"}.
void write_safetensors(const std::string& path, const std::vector<StWrite>& tensors, DType dtype = DType::F32);

}  // namespace bertcc
