#include "bertcc/dtype.h"

#include <cmath>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include "bertcc/error.h"

namespace bertcc {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::I8:
      return 1;
    case DType::I64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I32:
      return "I32";
    case DType::I8:
      return "I8";
    case DType::I64:
      return "I64";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32" || s == "f32" || s == "float32") return Precision::F32;
  if (s == "bf16" || s == "bfloat16") return Precision::BF16;
  if (s == "fp16" || s == "f16" || s == "float16") return Precision::F16;
  if (s == "int8" || s == "i8") return Precision::I8;
  fail("unknown precision '", s, "' (expected fp32, bf16, fp16 or int8)");
}

const char* precision_name(Precision p) {
  return p == Precision::F32 ? "fp32" : p == Precision::BF16 ? "bf16" : p == Precision::F16 ? "fp16" : "int8";
}

float f16_to_f32_ref(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16_ref(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24, round half even via nearbyint
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e;
  float m = std::frexp(a, &e);                 // a = m * 2^e, m in [0.5,1)
  float scaled = std::nearbyint(m * 2048.0f);  // 11 significant bits
  if (scaled >= 2048.0f) {
    scaled /= 2;
    e += 1;
  }
  const uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (exp >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((exp << 10) | (static_cast<uint32_t>(scaled) & 0x3ff));
}

void to_bf16(const float* src, bf16_t* dst, size_t n, bool parallel) {
#pragma omp parallel for schedule(static) if (parallel && n > (1u << 16))
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void from_bf16(const bf16_t* src, float* dst, size_t n, bool parallel) {
#pragma omp parallel for schedule(static) if (parallel && n > (1u << 16))
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

// fp16: eight at a time with F16C where the build targets it (the same instruction as the scalar
// _Float16 conversion, so the same bits), else one by one.
void to_f16(const float* src, uint16_t* dst, size_t n, bool parallel) {
  const int64_t blocks = static_cast<int64_t>(n / 8);
#pragma omp parallel for schedule(static) if (parallel && n > (1u << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t i = static_cast<size_t>(b) * 8;
#if defined(__F16C__) && defined(__AVX__)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    for (size_t k = i; k < i + 8; ++k) dst[k] = f32_to_f16(src[k]);
#endif
  }
  for (size_t k = static_cast<size_t>(blocks) * 8; k < n; ++k) dst[k] = f32_to_f16(src[k]);
}

void from_f16(const uint16_t* src, float* dst, size_t n, bool parallel) {
  const int64_t blocks = static_cast<int64_t>(n / 8);
#pragma omp parallel for schedule(static) if (parallel && n > (1u << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t i = static_cast<size_t>(b) * 8;
#if defined(__F16C__) && defined(__AVX__)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#else
    for (size_t k = i; k < i + 8; ++k) dst[k] = f16_to_f32(src[k]);
#endif
  }
  for (size_t k = static_cast<size_t>(blocks) * 8; k < n; ++k) dst[k] = f16_to_f32(src[k]);
}

void round_to_bf16(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

}  // namespace bertcc
