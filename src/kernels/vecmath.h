// Elementwise math written with arithmetic and bit operations only, so loops that call these
// vectorise (no per-element libm call). Accuracy (tested): exp < 3e-7 relative; erf < 5e-7
// absolute (the A&S 7.1.26 bound 1.5e-7 plus fp32 rounding); tanh < 3e-7 absolute.
#pragma once
#include <cstdint>
#include <cstring>

// BERTCC_CLONES: in a portable build (the compiler targets generic x86-64: no AVX2), a hot loop's
// function compiled twice, for SSE2 and for AVX2, the CPU's chosen once at load (GCC's
// target_clones). The AVX2 clone has no FMA (GCC's "avx2" target does not include it), so nothing
// is contracted that the SSE2 code computes in two roundings: the same bits, twice the vector
// width. Elsewhere (a -march build) empty: the function is compiled for the build's CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define BERTCC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BERTCC_CLONES
#endif

namespace bertcc::kernels {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// exp(x): x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial for e^r, scale by 2^n.
inline float vexp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float t = x * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  return p * bits_to_float(static_cast<uint32_t>(ni + 127) << 23);
}

// erf(x), Abramowitz & Stegun 7.1.26 with the sign restored: 1 - poly(t) e^{-x^2}, t = 1/(1+px).
inline float verf(float x) {
  const float a = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * vexp(-a * a);
  return x < 0 ? -y : y;
}

// Sum of f(0..n-1) in 16 fp32 lanes (vectorisable without reassociation), lanes added in order:
// deterministic, independent of threads.
template <class F>
inline float lane_sum(int64_t n, F f) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += f(i + k);
  for (int k = 0; i < n; ++i, ++k) acc[k] += f(i);
  float s = 0.0f;
  for (int k = 0; k < 16; ++k) s += acc[k];
  return s;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1), saturating for large |x|.
inline float vtanh(float x) {
  const float e = vexp(2.0f * x);
  return 1.0f - 2.0f / (e + 1.0f);
}

}  // namespace bertcc::kernels
