// Element types and fp32 <-> bf16/fp16 conversion (round to nearest even).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace bertcc {

enum class DType { F32, BF16, F16, I32, I8, I64 };
enum class Precision { F32, BF16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);   // safetensors spelling: "F32", "BF16", ...
Precision parse_precision(const std::string& s);  // "fp32" | "bf16"
const char* precision_name(Precision p);

using bf16_t = uint16_t;

// Branch-free so that loops over it vectorise.
inline bf16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;  // quiet NaN, sign and payload top bits kept
  return static_cast<bf16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
inline float bf16_to_f32(bf16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Bulk conversions (vectorised by the compiler; OpenMP over large arrays).
void to_bf16(const float* src, bf16_t* dst, size_t n);
void from_bf16(const bf16_t* src, float* dst, size_t n);
// Round fp32 values to the nearest bf16 and back, in place (used by the reference path).
void round_to_bf16(float* x, size_t n);

}  // namespace bertcc
