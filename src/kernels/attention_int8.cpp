// Self-attention for --precision int8 inference: both products in exact int32 on bertcc's own int8
// kernels (gemm_int8_rows.cpp), the softmax's arithmetic exact. Per (sequence, head), one thread
// each, from start to end (so a sequence's result depends on its own rows alone, not the threads):
//   q rows, per row, to [-127, 127] (scale sq[i]); k rows, per row, to [-63, 63] (sk[j]: the
//     kernels' 7-bit operand, gemm_int8.h);
//   S[i, j] = fma(float(q8_i . k8_j), (sq[i] * (1 / sqrt(d))) * sk[j], 0) (+ the mask, padded; -inf
//     for a key the mask hides, at <= -10000, unless it hides them all);
//   P's 8 bits u[i, j] = E[round-half-even(128 (max_j S[i, j] - S[i, j]))], E[t] = round(254
//     exp(-t / 128)) (attention_int8_exp_table: 254 at the row's maximum, 0 from t = 798 on, and
//     for a hidden key); P = u / sum_j u, whose sum is an exact integer: no exp or float sum whose
//     last bit could differ between engines (export-onnx --precision int8 writes the same steps;
//     ONNX Runtime, its graph optimisations off, computes the same bits from the same q, k, v);
//   v per column over the keys to [-63, 63] (sv[c]), a hidden key's row as zeros: a padded
//     sequence's v is quantized as when it is alone, and its padding adds nothing at all;
//   out[i, c] = fma(float(sum_j u[i, j] v8[j, c]), (1 / float(sum_j u[i, j])) * sv[c], 0), the
//     sum as (u - 127) . v8 + 127 sum_j v8 (the kernels' s8 activations).
// Every integer sum is exact, so the result is the same bits on every ISA's kernel.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "bertcc/error.h"
#include "kernels/attention_rows.h"
#include "kernels/gemm_int8.h"
#include "kernels/int8_panels.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

namespace bertcc::kernels {
namespace {

// table[r] computed: round(254 vexp(-r / 128)) for a whole r in [0, kAttentionExpTable) given as a
// float. vexp is within 3e-7 of exp, so this is the table wherever no entry lies that close to a
// rounding boundary: exp8_is_the_table checks all of them, once; where one differs (a compiler's
// other contraction of vexp's polynomial, say), the kernel reads the table instead.
inline int32_t exp8(float r) {
  return static_cast<int32_t>((254.0f * vexp(r * (-1.0f / kAttentionExpSteps)) + 12582912.0f) - 12582912.0f);
}

// The table's step for score x in a row of maximum m: round-half-even(128 (m - x)) in [0, top], as a
// float (adding and subtracting 1.5 * 2^23 rounds: the same arithmetic on every ISA); a NaN sets bad.
inline float table_step(float m, float x, float top, int32_t& bad) {
  float t = (m - x) * static_cast<float>(kAttentionExpSteps);
  bad |= t != t ? 1 : 0;
  t = t >= 0.0f ? t : 0.0f;
  t = t <= top ? t : top;
  return (t + 12582912.0f) - 12582912.0f;
}

std::atomic<bool> g_table_forced{false};

bool exp8_is_the_table() {
  const int32_t* t = attention_int8_exp_table();
  for (int r = 0; r < kAttentionExpTable; ++r)
    if (exp8(static_cast<float>(r)) != t[r]) return false;
  return true;
}

}  // namespace

bool attention_int8_exp_computed() {
  static const bool exact = exp8_is_the_table();
  return exact && !g_table_forced.load();
}
void attention_int8_force_table(bool on) { g_table_forced.store(on); }

const int32_t* attention_int8_exp_table() {
  static const std::array<int32_t, kAttentionExpTable> table = [] {
    std::array<int32_t, kAttentionExpTable> t{};
    for (int i = 0; i < kAttentionExpTable; ++i)
      t[static_cast<size_t>(i)] =
          static_cast<int32_t>(std::nearbyint(254.0 * std::exp(-static_cast<double>(i) / kAttentionExpSteps)));
    return t;
  }();
  return table.data();
}

namespace {

// One (sequence, head) item's scratch, a thread's own (kept across calls), and its steps.
struct HeadWork {
  std::vector<int8_t> q8, p8, k8, v8;
  std::vector<float> sq, sk, sp, S, sv;
  std::vector<int32_t> seen, idx, acc, vsum;
  Int8Panels kp, vp;
  int64_t n_ = 0, HS_ = 0, ld_ = 0;  // keys, head size, qkv's row stride (3C)
  const float* q_ = nullptr;         // the head's q of the first row; k at + C, v at + 2C

  // q per row (scale times 1 / sqrt(HS)); k per row straight into the kernel's panels (k as its
  // weight [n, HS]); q, k and v rows prefetched 16 ahead, the first 16 at once (3C apart, each on
  // a new page: no hardware prefetcher follows them; 4 ahead, one at a time, left most of this
  // step waiting on them)
  void quantize_qk(float scale, int64_t C) {
    const int64_t n = n_, HS = HS_, ld = ld_;  // (locals: a store through an int8 pointer may alias members)
    const float* q = q_;
    size_int8_panels(kp, n, HS);
    int8_t *q8p = grow(q8, n * HS), *kr = grow(k8, HS);
    float *sqp = grow(sq, n), *skp = grow(sk, n);
    const auto fetch = [&](int64_t i) {  // row i's q, k and v
      for (int64_t part = 0; part < 3; ++part)
        for (int64_t c = 0; c < HS; c += 16) __builtin_prefetch(q + i * ld + part * C + c);
    };
    for (int64_t i = 0; i < std::min(n, int64_t{16}); ++i) fetch(i);
    for (int64_t i = 0; i < n; ++i) {
      if (i + 16 < n) fetch(i + 16);
      quantize_rows_int8(q + i * ld, 1, HS, kInt8ActivationMax, q8p + i * HS, sqp + i);
      sqp[i] *= scale;
      quantize_rows_int8(q + i * ld + C, 1, HS, kInt8WeightMax, kr, skp + i);
      int8_t* dst = kp.data.data() + int8_panel_index(kp, i, 0);
      for (int64_t c = 0; c + 4 <= HS; c += 4) std::memcpy(dst + c * 16, kr + c, 4);  // k-quad c / 4
      for (int64_t c = HS / 4 * 4; c < HS; ++c) dst[(c / 4) * 64 + c % 4] = kr[c];
      int32_t sum = 0;
      for (int64_t c = 0; c < HS; ++c) sum += kr[c];
      kp.comp[static_cast<size_t>(i)] = kp.shift * sum;  // (the panels' shift, 128: q is 8-bit)
    }
  }

  // Which keys count: all but those the mask hides (<= -10000), unless it hides them all.
  void keys_seen(const float* mask) {
    const int64_t n = n_;
    int32_t* s = grow(seen, n);
    bool any = !mask;
    for (int64_t j = 0; j < n && !any; ++j) any = mask[j] > -10000.0f;
    for (int64_t j = 0; j < n; ++j) s[j] = !any || !mask || mask[j] > -10000.0f ? 1 : 0;
  }

  // v per column over the keys seen (a hidden key's row: zeros), into the panels of its transpose
  // (the weight [HS, n]), and 127 x each column's sum (the zero point of P's 8 bits)
  void quantize_v(int64_t C) {
    const int64_t n = n_, HS = HS_, ld = ld_;  // (locals: a store through an int8 pointer may alias members)
    const float* q = q_;
    const float* v = q + 2 * C;
    const int32_t* s = seen.data();
    float* svp = grow(sv, 2 * HS);  // the scales, then their inverses
    float* inv = svp + HS;
    uint32_t* mx = reinterpret_cast<uint32_t*>(grow(acc, std::max(n, int64_t{1}) * HS));  // (free until P v)
    int32_t* vs = grow(vsum, HS);
    for (int64_t c = 0; c < HS; ++c) mx[c] = 0;
    for (int64_t j = 0; j < n; ++j)  // quantize_rows_int8's rule (int8_scale), per column
      if (s[j])
        for (int64_t c = 0; c < HS; ++c) mx[c] = std::max(mx[c], int8_abs_bits(v[j * ld + c]));
    for (int64_t c = 0; c < HS; ++c) {
      const Int8Scale sc = int8_scale(mx[c], kInt8WeightMax);  // (a non-finite column: NaN outputs)
      svp[c] = sc.scale;
      inv[c] = sc.inv;
      vs[c] = 0;
    }
    size_int8_panels(vp, HS, n);
    // four keys at a time: their rows quantized (vectorised over the columns), then each column's
    // four bytes side by side, one k-quad of the panels
    int8_t* t = grow(v8, 4 * HS);
    const float lim = static_cast<float>(kInt8WeightMax);
    for (int64_t j0 = 0; j0 < n; j0 += 4) {
      for (int64_t r = 0; r < 4; ++r) {
        const int64_t j = j0 + r;
        int8_t* tr = t + r * HS;
        if (j >= n || !s[j]) {
          std::memset(tr, 0, static_cast<size_t>(HS));
          continue;
        }
        for (int64_t c = 0; c < HS; ++c) tr[c] = int8_quantize(v[j * ld + c], inv[c], lim);
        for (int64_t c = 0; c < HS; ++c) vs[c] += tr[c];
      }
      for (int64_t c0 = 0; c0 < HS; c0 += kInt8Panel) {
        int8_t* d = vp.data.data() + int8_panel_index(vp, c0, j0);
        for (int64_t c = 0; c < std::min(kInt8Panel, HS - c0); ++c)
          for (int64_t r = 0; r < 4; ++r) d[4 * c + r] = t[r * HS + c0 + c];
      }
    }
    for (int64_t c = 0; c < HS; ++c) {
      vp.comp[static_cast<size_t>(c)] = vp.shift * vs[c];  // (P's 8 bits less 127: shift 128)
      vs[c] *= 127;
    }
  }

  // Row i of S (mask added) to P's 8 bits less 127 (the kernels' s8 activations) and its scale
  // 1 / sum: the table at table_step, 0 for a hidden key; a NaN (or an infinity's NaN) makes the
  // row NaN.
  void probabilities(int64_t i, const float* mask, bool computed, const int32_t* table) {
    const int64_t n = n_;  // (a local: a store through an int8 pointer may alias members)
    float* row = S.data() + i * n;
    const int32_t* s = seen.data();
    if (mask)  // a hidden key's score as -inf: the maximum and the NaN check are the keys seen's
      for (int64_t j = 0; j < n; ++j) row[j] = s[j] ? row[j] + mask[j] : -INFINITY;
    const float m = row_max(row, n), top = static_cast<float>(kAttentionExpTable - 1);
    int8_t* pr = p8.data() + i * n;
    int32_t isum = 0, bad = 0;
    if (computed) {  // one pass, vectorised: the step, its entry computed, the 8 bits less 127
      for (int64_t j = 0; j < n; ++j) {
        const int32_t u = exp8(table_step(m, row[j], top, bad)) * s[j];
        isum += u;
        pr[j] = static_cast<int8_t>(u - 127);
      }
    } else {  // the table read (its step as an index first)
      int32_t* ix = grow(idx, n);
      for (int64_t j = 0; j < n; ++j)
        ix[j] = s[j] ? static_cast<int32_t>(table_step(m, row[j], top, bad)) : kAttentionExpTable - 1;  // (0)
      for (int64_t j = 0; j < n; ++j) {
        const int32_t u = table[ix[j]];
        isum += u;
        pr[j] = static_cast<int8_t>(u - 127);
      }
    }
    sp[static_cast<size_t>(i)] = bad ? std::numeric_limits<float>::quiet_NaN() : 1.0f / static_cast<float>(isum);
  }
};

}  // namespace

void attention_int8_forward(float* out, const float* qkv, const int64_t* cu, const float* mask_add, int64_t B,
                            int64_t T, int64_t C, int64_t NH) {
  BERTCC_CHECK(B > 0 && C > 0 && NH > 0 && C % NH == 0, "attention_int8_forward: bad shape B=", B, " C=", C,
               " NH=", NH);
  BERTCC_CHECK(cu || (T > 0 && mask_add), "attention_int8_forward: neither sequence starts nor a padded mask");
  const int64_t HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  auto rows_of = [&](int64_t b) { return cu ? cu[b + 1] - cu[b] : T; };
  auto first_of = [&](int64_t b) { return cu ? cu[b] : b * T; };
  for (int64_t b = 0; b < B; ++b) BERTCC_CHECK(rows_of(b) > 0, "attention_int8_forward: sequence ", b, " is empty");
  // (sequence, head) items, the longest sequences first (dynamic schedule: the long ones start early)
  std::vector<int64_t> seq(static_cast<size_t>(B));
  std::iota(seq.begin(), seq.end(), 0);
  std::stable_sort(seq.begin(), seq.end(), [&](int64_t x, int64_t y) { return rows_of(x) > rows_of(y); });
  std::vector<int64_t> work;
  work.reserve(static_cast<size_t>(B * NH));
  for (int64_t b : seq)
    for (int64_t h = 0; h < NH; ++h) work.push_back(b * NH + h);
  const int64_t n_items = static_cast<int64_t>(work.size());
  const Int8Kernel kern = int8_own_kernel();
  const int32_t* table = attention_int8_exp_table();
  const bool computed = attention_int8_exp_computed();
#pragma omp parallel
  {
    thread_local HeadWork w;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < n_items; ++it) {
      const int64_t b = work[static_cast<size_t>(it)] / NH, h = work[static_cast<size_t>(it)] % NH;
      const int64_t r0 = first_of(b), n = rows_of(b);
      const float* mask = mask_add ? mask_add + b * T : nullptr;
      w.n_ = n;
      w.HS_ = HS;
      w.ld_ = 3 * C;
      w.q_ = qkv + r0 * 3 * C + h * HS;
      w.quantize_qk(scale, C);
      float* S = grow(w.S, n * n);
      linear_int8_panels(S, w.q8.data(), w.sq.data(), w.kp, w.sk.data(), nullptr, n, nullptr, kern);
      w.keys_seen(mask);
      w.quantize_v(C);
      grow(w.p8, n * n);
      grow(w.sp, n);
      for (int64_t i = 0; i < n; ++i) w.probabilities(i, mask, computed, table);
      int32_t* acc = grow(w.acc, n * HS);
      gemm_int8_panels(w.p8.data(), w.vp, acc, n, kern);
      for (int64_t i = 0; i < n; ++i) {  // sum_j u v8 = (u - 127) . v8 + 127 sum_j v8
        float* o = out + (r0 + i) * C + h * HS;
        if (i + 8 < n)  // (out's rows C apart: the lines 8 rows on fetched for writing ahead of time)
          for (int64_t c = 0; c < HS; c += 16) __builtin_prefetch(o + 8 * C + c, 1);
        const float spi = w.sp[static_cast<size_t>(i)];
        for (int64_t c = 0; c < HS; ++c)
          o[c] = std::fma(static_cast<float>(acc[i * HS + c] + w.vsum[static_cast<size_t>(c)]),
                          spi * w.sv[static_cast<size_t>(c)], 0.0f);
      }
    }
  }
}

}  // namespace bertcc::kernels
