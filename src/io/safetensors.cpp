#include "bertcc/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "bertcc/error.h"
#include "bertcc/fileio.h"

namespace bertcc {

size_t StTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

static DType parse_dtype(const std::string& s, const std::string& where) {
  if (s == "F32") return DType::F32;
  if (s == "BF16") return DType::BF16;
  if (s == "F16") return DType::F16;
  if (s == "I32") return DType::I32;
  if (s == "I8") return DType::I8;
  if (s == "I64") return DType::I64;
  fail(where, ": unsupported dtype '", s, "'");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  bytes_ = MappedFile::map(path, kMaxDataBytes, "safetensors file");
  BERTCC_CHECK(bytes_.size() >= 8, path, ": truncated safetensors file (", bytes_.size(), " bytes, no header)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes_.data(), 8);
  BERTCC_CHECK(hlen <= bytes_.size() - 8, path, ": truncated safetensors file (header of ", hlen,
               " bytes announced, file has ", bytes_.size(), ")");
  data_start_ = 8 + hlen;
  nlohmann::json h;
  std::set<std::string> names;  // JSON parsers keep the last of duplicate keys: a duplicate is refused
  std::string duplicate;
  try {
    h = nlohmann::json::parse(bytes_.data() + 8, bytes_.data() + data_start_,
                              [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
                                if (ev == nlohmann::json::parse_event_t::key && depth == 1 &&
                                    !names.insert(parsed.get<std::string>()).second && duplicate.empty())
                                  duplicate = parsed.get<std::string>();
                                return true;
                              });
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": safetensors header is not valid JSON: ", e.what());
  }
  BERTCC_CHECK(duplicate.empty(), path, ": tensor '", duplicate, "' appears twice in the safetensors header");
  BERTCC_CHECK(h.is_object(), path, ": safetensors header is not a JSON object");
  const size_t data_size = bytes_.size() - data_start_;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const std::string where = path + ": tensor '" + it.key() + "'";
    const auto& v = *it;
    BERTCC_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), where,
                 ": entry needs dtype, shape and data_offsets");
    StTensor t;
    t.name = it.key();
    t.dtype = parse_dtype(v["dtype"].get<std::string>(), where);
    BERTCC_CHECK(v["shape"].is_array(), where, ": shape must be an array");
    size_t elems = 1;
    for (const auto& d : v["shape"]) {
      BERTCC_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, where, ": bad shape");
      BERTCC_CHECK(!__builtin_mul_overflow(elems, static_cast<size_t>(d.get<int64_t>()), &elems), where,
                   ": the shape's element count overflows");
      t.shape.push_back(d.get<int64_t>());
    }
    BERTCC_CHECK(!__builtin_mul_overflow(elems, dtype_size(t.dtype), &elems), where, ": the shape's size overflows");
    const auto& off = v["data_offsets"];
    BERTCC_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
                 ": data_offsets must be [begin, end] (non-negative integers)");
    t.begin = off[0].get<size_t>();
    t.end = off[1].get<size_t>();
    BERTCC_CHECK(t.begin <= t.end, where, ": data_offsets begin > end");
    BERTCC_CHECK(t.end <= data_size, where, ": data ends at byte ", t.end, " but the file holds only ", data_size,
                 " data bytes (truncated file?)");
    BERTCC_CHECK(t.end - t.begin == t.numel() * dtype_size(t.dtype), where, ": data size ", t.end - t.begin,
                 " does not match shape and dtype");
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) { return a.begin < b.begin; });
  // Tensors must not share bytes (a tensor silently read from another's data).
  for (size_t i = 1; i < tensors_.size(); ++i)
    BERTCC_CHECK(tensors_[i].begin >= tensors_[i - 1].end || tensors_[i].begin == tensors_[i].end ||
                     tensors_[i - 1].begin == tensors_[i - 1].end,
                 path, ": tensors '", tensors_[i - 1].name, "' and '", tensors_[i].name,
                 "' overlap in the data (data_offsets)");
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::read_f32(const StTensor& t, float* dst) const {
  BERTCC_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16, path_, ": tensor '", t.name,
               "' has dtype ", dtype_name(t.dtype), ", expected F32, F16 or BF16");
  const size_t at = data_start_ + t.begin, bytes = t.end - t.begin;
  const char* src = bytes_.data() + at;
  const size_t n = t.numel();
  bytes_.will_read(at, bytes);  // this tensor's pages only: the load holds one tensor of the file at a time
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      break;
    default:  // F16
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      break;
  }
  bytes_.done_reading(at, bytes);
}

void write_safetensors(const std::string& path, const std::vector<StWrite>& tensors, DType dtype) {
  BERTCC_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, path,
               ": can only write F32, BF16 or F16");
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "pt"}};
  size_t off = 0;
  const size_t es = dtype_size(dtype);
  for (const auto& t : tensors) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    h[t.name] = {{"dtype", dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + n * es}}};
    off += n * es;
  }
  std::string header = h.dump();
  while ((header.size() + 8) % 8) header.push_back(' ');  // align data to 8 bytes
  std::string out;
  out.resize(8 + header.size() + off);
  const uint64_t hlen = header.size();
  std::memcpy(out.data(), &hlen, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  char* d = out.data() + 8 + header.size();
  for (const auto& t : tensors) {
    size_t n = 1;
    for (int64_t x : t.shape) n *= static_cast<size_t>(x);
    if (dtype == DType::F32) {
      std::memcpy(d, t.data, n * 4);
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = dtype == DType::BF16 ? f32_to_bf16(t.data[i]) : f32_to_f16(t.data[i]);
        std::memcpy(d + 2 * i, &v, 2);
      }
    }
    d += n * es;
  }
  write_file_atomic(path, out);
}

}  // namespace bertcc
