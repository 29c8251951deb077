// The per-row steps the padded attention (attention.cpp) and the varlen one (attention_varlen.cpp)
// share: the softmax after the row's maximum, a row's dropout bits from its 16-query group's
// numbers, and the row of Pd (or of P rounded, for bf16 products) the next product reads.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "bertcc/dtype.h"
#include "kernels/vecmath.h"

namespace bertcc::kernels {

// The largest of row[0..n) (NaNs skipped: -inf for a row of them), in 16 lanes held as two 8-lane
// vectors (a compare and a blend, or a max instruction, each: the compiler's scalar form of 16
// lanes in an array was 16 scalar maxima a step and a chain of 16 dependent ones at the end), the
// lanes then halved four times. The order of comparisons cannot change the value, except that a
// maximum of zero may come out as -0 rather than +0, which subtracting it leaves unseen
// (x - 0 = x - (-0) but for x = -0, whose exponential is 1 either way).
inline float row_max(const float* row, int64_t n) {
  typedef float Lanes __attribute__((vector_size(32)));
  Lanes lo, hi;
  for (int l = 0; l < 8; ++l) lo[l] = hi[l] = -INFINITY;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    Lanes a, b;
    std::memcpy(&a, row + j, sizeof a);
    std::memcpy(&b, row + j + 8, sizeof b);
    lo = a > lo ? a : lo;  // (a NaN compares false: the lane kept)
    hi = b > hi ? b : hi;
  }
  float m[16];
  std::memcpy(m, &lo, sizeof lo);
  std::memcpy(m + 8, &hi, sizeof hi);
  for (; j < n; ++j) m[0] = row[j] > m[0] ? row[j] : m[0];
  for (int w = 8; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) m[l] = m[l + w] > m[l] ? m[l + w] : m[l];
  return m[0];
}

// row[j] = exp(row[j] - mx) / sum of them
inline void softmax_from_max(float* row, int64_t n, float mx) {
  for (int64_t j = 0; j < n; ++j) row[j] = vexp(row[j] - mx);
  const float inv = 1.0f / lane_sum(n, [&](int64_t j) { return row[j]; });
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
}

// Query i's 16 bits per key (bb[j]: of number attention_drop_number(bh, i, j, T), bertcc/rng.h)
// from `nums`, the nt * 128 numbers of its group of 16 queries (nt key tiles). The row's words:
// per key tile, blocks 4 (i % 8) + t (t = 0..3), words 2 ((i / 8) % 2) + c (c = 0, 1), keys
// 16 tile + 8 c + 2 t and + 1.
inline void drop_row_bits(const uint32_t* nums, int64_t i, int64_t nt, uint16_t* __restrict bb) {
  const uint32_t* w0 = nums + (i % 8) * 16 + 2 * ((i / 8) % 2);
  for (int64_t jt = 0; jt < nt; ++jt)
    for (int t = 0; t < 4; ++t)
      for (int c = 0; c < 2; ++c) {
        const uint32_t x = w0[jt * 128 + t * 4 + c];
        bb[jt * 16 + c * 8 + 2 * t] = static_cast<uint16_t>(x & 0xFFFFu);
        bb[jt * 16 + c * 8 + 2 * t + 1] = static_cast<uint16_t>(x >> 16);
      }
}

// The row the product after the softmax reads: with dropout (bb given) Pd = bb >= thr ? P * keep
// : 0, into pd (fp32) or pd16 (bf16); without, P rounded into pd16 (bf16 products; fp32 ones read
// P itself: nothing to write).
inline void write_pd_row(const float* __restrict row, int64_t n, const uint16_t* __restrict bb, uint32_t thr,
                         float keep_scale, float* __restrict pd, bf16_t* __restrict pd16) {
  if (bb && pd16) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) pd16[j] = f32_to_bf16(bb[j] >= thr ? row[j] * keep_scale : 0.0f);
  } else if (bb) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) pd[j] = bb[j] >= thr ? row[j] * keep_scale : 0.0f;
  } else if (pd16) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) pd16[j] = f32_to_bf16(row[j]);
  }
}

}  // namespace bertcc::kernels
