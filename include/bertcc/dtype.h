// Element types and fp32 <-> bf16/fp16 conversion (round to nearest even).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace bertcc {

enum class DType { F32, BF16, F16, I32, I8, I64 };
// F16 on CPU is emulated (GEMM inputs rounded to fp16, fp32 arithmetic): it exists so that the
// GPU recipe's dynamic loss scaling is implemented and tested; it is not a speed path.
// I8: dynamic int8 quantization of the encoder's linear layers for inference on the CPU
// (kernels/gemm_int8.h, model/int8.cpp); every other operation as fp32.
enum class Precision { F32, BF16, F16, I8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);                  // safetensors spelling: "F32", "BF16", ...
Precision parse_precision(const std::string& s);  // "fp32" | "bf16" | "fp16" | "int8"
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
// Reference conversions (portable, slow) ...
float f16_to_f32_ref(uint16_t h);
uint16_t f32_to_f16_ref(float f);
// ... and the fast ones: the compiler's _Float16 (F16C instructions where available; same
// round-to-nearest-even results, tested against the reference).
inline float f16_to_f32(uint16_t h) {
#if defined(__FLT16_MAX__)
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
#else
  return f16_to_f32_ref(h);
#endif
}
inline uint16_t f32_to_f16(float f) {
#if defined(__FLT16_MAX__)
  const _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
#else
  return f32_to_f16_ref(f);
#endif
}

// Bulk conversions (vectorised; OpenMP over large arrays unless `parallel` is false, as on the
// communication thread, which must not take cores from the compute threads).
void to_bf16(const float* src, bf16_t* dst, size_t n, bool parallel = true);
void from_bf16(const bf16_t* src, float* dst, size_t n, bool parallel = true);
void to_f16(const float* src, uint16_t* dst, size_t n, bool parallel = true);
void from_f16(const uint16_t* src, float* dst, size_t n, bool parallel = true);
// Round fp32 values to the nearest bf16 and back, in place (used by the reference path).
void round_to_bf16(float* x, size_t n);

}  // namespace bertcc
