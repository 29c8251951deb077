// What every backend gets unless it has better: variable-length attention as one padded-kernel call
// per sequence (B = 1, T = its length, no padding, so a zero mask). Each sequence's saved slice
// follows the previous one's (16-float aligned), and its dropout numbers follow the previous
// sequence's, the layout the CPU's varlen kernel uses too; the zero mask opens the scratch.
#include <algorithm>

#include "backend/backend.h"
#include "bertcc/rng.h"

namespace bertcc {
namespace {

int64_t aligned(int64_t n) { return (n + 15) / 16 * 16; }
int64_t longest(const int64_t* cu, int64_t B) {
  int64_t m = 0;
  for (int64_t b = 0; b < B; ++b) m = std::max(m, cu[b + 1] - cu[b]);
  return m;
}

}  // namespace

int64_t Backend::attention_varlen_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout,
                                             Precision prec, bool qkv16_kept) const {
  int64_t s = 0;
  for (int64_t b = 0; b < B; ++b) s += aligned(attention_saved_size(1, cu[b + 1] - cu[b], C, NH, dropout, prec, qkv16_kept));
  return s;
}

int64_t Backend::attention_varlen_work_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH) const {
  int64_t w = 0;
  for (int64_t b = 0; b < B; ++b) w = std::max(w, attention_work_size(1, cu[b + 1] - cu[b], C, NH));
  return aligned(longest(cu, B)) + w;
}

void Backend::attention_varlen_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                       const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C, int64_t NH,
                                       float dropout_p, const Rng& rng, uint64_t base, Precision prec) {
  const int64_t zeros = aligned(longest(cu, B));
  zero(work, sizeof(float) * static_cast<size_t>(zeros));
  const bool kept = qkv16 != nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r0 = cu[b], n = cu[b + 1] - r0;
    attention_forward(out ? out + r0 * C : nullptr, out16 ? out16 + r0 * C : nullptr, saved, work + zeros,
                      qkv ? qkv + r0 * 3 * C : nullptr, qkv16 ? qkv16 + r0 * 3 * C : nullptr, work, 1, n, C, NH,
                      dropout_p, rng, base, prec);
    saved += aligned(attention_saved_size(1, n, C, NH, dropout_p > 0, prec, kept));
    base += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
}

void Backend::attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                                        const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                                        const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p,
                                        const Rng& rng, uint64_t base, Precision prec) {
  const int64_t zeros = aligned(longest(cu, B));
  zero(work, sizeof(float) * static_cast<size_t>(zeros));
  const bool kept = qkv16 != nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r0 = cu[b], n = cu[b + 1] - r0;
    attention_backward(dqkv + r0 * 3 * C, dqkv16 ? dqkv16 + r0 * 3 * C : nullptr, work + zeros, dout + r0 * C,
                       qkv ? qkv + r0 * 3 * C : nullptr, qkv16 ? qkv16 + r0 * 3 * C : nullptr,
                       out ? out + r0 * C : nullptr, out16 ? out16 + r0 * C : nullptr, saved, work, 1, n, C, NH,
                       dropout_p, rng, base, prec);
    saved += aligned(attention_saved_size(1, n, C, NH, dropout_p > 0, prec, kept));
    base += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
}

}  // namespace bertcc
