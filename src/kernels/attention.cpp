// Multi-head self-attention on a packed qkv[B,T,3C] tensor.
//   S = q k^T / sqrt(HS) + mask_add;  P = softmax(S);  Pd = dropout(P);  out = Pd v
// The scale, the additive mask, the softmax and the dropout are one pass over each row. With
// dropout the forward pass saves Pd next to P, so backward draws no random numbers: the keep mask
// is Pd != 0 wherever it matters (where P == 0 the mask does not change dS = P * (dP - sum dP P)).
// For bf16 GEMMs the operands produced here (Pd, dS) are written in bf16 directly, so the GEMMs
// need not convert them again.
#include <algorithm>
#include <cmath>
#include <vector>

#include "bertcc/error.h"
#include "kernels/attention_rows.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

namespace bertcc::kernels {
namespace {

struct Work {
  float *q, *k, *v, *ctx, *dq, *dk, *dv, *att;
  bf16_t* att16;  // [B,NH,T,T] in bf16: the A operand of the GEMMs after the softmax (bf16 GEMMs)
};

Work split(float* w, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t n = B * T * C;
  return {w,         w + n,     w + 2 * n,
          w + 3 * n, w + 4 * n, w + 5 * n,
          w + 6 * n, w + 7 * n, reinterpret_cast<bf16_t*>(w + 7 * n + B * NH * T * T)};
}

// A row of n values copied, rounded to bf16, or widened from bf16.
inline void put_row(const float* s, int64_t n, float* d) { std::copy(s, s + n, d); }
inline void put_row(const float* s, int64_t n, bf16_t* d) {
  for (int64_t c = 0; c < n; ++c) d[c] = f32_to_bf16(s[c]);
}
inline void put_row(const bf16_t* s, int64_t n, float* d) {
  for (int64_t c = 0; c < n; ++c) d[c] = bf16_to_f32(s[c]);
}

// qkv[B,T,3C] -> q,k,v [B,NH,T,HS] (from fp32, or widened from a bf16 qkv)
template <class Src>
void unpack_qkv(const Work& w, const Src* qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const Src* src = qkv + (b * T + t) * 3 * C;
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t dst = ((b * NH + h) * T + t) * HS;
        put_row(src + h * HS, HS, w.q + dst);
        put_row(src + C + h * HS, HS, w.k + dst);
        put_row(src + 2 * C + h * HS, HS, w.v + dst);
      }
    }
}

// [B,NH,T,HS] <-> [B,T,C]; into bf16 (Out = bf16_t), the roundings of the values (put_row: above)
template <class Out>
void heads_to_rows(Out* out, const float* in, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t out_stride,
                   int64_t out_offset) {
  const int64_t HS = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH; ++h)
        put_row(in + ((b * NH + h) * T + t) * HS, HS, out + (b * T + t) * out_stride + out_offset + h * HS);
}

void rows_to_heads(float* out, const float* in, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH; ++h) {
        const float* s = in + (b * T + t) * C + h * HS;
        std::copy(s, s + HS, out + ((b * NH + h) * T + t) * HS);
      }
}

// One GEMM per (batch, head) on densely packed per-head operands:
//   C[h] (M x N) = alpha * op(A[h]) @ op(B[h]), A stored [M,K] (or [K,M] if ta), B [K,N] (or [N,K]).
// A16: A already in bf16 (same layout), for bf16 GEMMs whose A was written as bf16 by its producer.
void head_gemm(bool ta, bool tb, int64_t BH, int64_t M, int64_t N, int64_t K, const float* A, const float* Bm, float* C,
               float alpha, Precision prec, const bf16_t* A16 = nullptr) {
  GemmArgs g;
  g.A16 = prec == Precision::BF16 ? A16 : nullptr;
  g.batch = BH;
  g.M = M;
  g.N = N;
  g.K = K;
  g.trans_a = ta;
  g.trans_b = tb;
  g.A = A;
  g.lda = ta ? M : K;
  g.stride_a = M * K;
  g.B = Bm;
  g.ldb = tb ? K : N;
  g.stride_b = K * N;
  g.C = C;
  g.ldc = N;
  g.stride_c = M * N;
  g.alpha = alpha;
  gemm(g, prec);
}

// The saved buffer: P [B,NH,T,T] in fp32; with dropout Pd after it, in fp32 or, for bf16 GEMMs, in
// bf16 (two per float); for bf16 GEMMs then q, k and v rounded to bf16 ([3][B,NH,T,HS]: the only
// form bf16 GEMMs read them in), so that the backward reads no qkv. Where those roundings start:
int64_t operands_offset(int64_t B, int64_t T, int64_t NH, bool dropout, Precision prec) {
  const int64_t n = B * NH * T * T;
  return n + (!dropout ? 0 : prec == Precision::BF16 ? (n + 1) / 2 : n);
}

}  // namespace

int64_t attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH) {
  return 7 * B * T * C + B * NH * T * T + (B * NH * T * T + 1) / 2;
}
int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                             bool qkv16_kept) {
  const bool operands = prec == Precision::BF16 && !qkv16_kept;
  return operands_offset(B, T, NH, dropout, prec) + (operands ? (3 * B * T * C + 1) / 2 : 0);
}

void attention_forward(float* out, float* probs, float* work, const float* qkv, const float* mask_add, int64_t B,
                       int64_t T, int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec,
                       bf16_t* out16, const bf16_t* qkv16) {
  const int64_t HS = C / NH, BH = B * NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  Work w = split(work, B, T, C, NH);
  BERTCC_CHECK(!qkv16 || prec == Precision::BF16, "attention_forward: a bf16 qkv outside bf16");
  if (qkv16)  // its widened values: the GEMMs round them to themselves, the bits of rounding qkv
    unpack_qkv(w, qkv16, B, T, C, NH);
  else
    unpack_qkv(w, qkv, B, T, C, NH);
  if (prec == Precision::BF16 && !qkv16)  // q, k, v (contiguous in work) rounded, for the backward
    to_bf16(w.q, reinterpret_cast<bf16_t*>(probs + operands_offset(B, T, NH, dropout_p > 0.0f, prec)),
            static_cast<size_t>(3 * B * T * C));

  head_gemm(false, true, BH, T, T, HS, w.q, w.k, probs, scale, prec);  // probs = scale * q @ k^T

  // With dropout, Pd is saved after P: in fp32, or for bf16 GEMMs in bf16 (the GEMMs read nothing
  // else), which also feeds this pass's ctx GEMM. Without dropout bf16 GEMMs read P from att16.
  const bool bf = prec == Precision::BF16, drop = dropout_p > 0.0f;
  float* pdrop = drop && !bf ? probs + BH * T * T : nullptr;
  bf16_t* pd16 = !bf ? nullptr : drop ? reinterpret_cast<bf16_t*>(probs + BH * T * T) : w.att16;
  const float keep_scale = drop ? 1.0f / (1.0f - dropout_p) : 1.0f;
  const uint32_t thr = drop ? dropout_threshold16(dropout_p) : 0;
  // Rows in groups of 16 queries: the numbers deciding a group's elements are one run of the
  // stream (attention_drop_number: its 16 x 16 tiles, key tile after key tile)
  const int64_t nt = (T + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int64_t grp = 0; grp < BH * nt; ++grp) {
    thread_local std::vector<uint32_t> nums;
    thread_local std::vector<uint16_t> bits;
    if (drop) {
      nums.resize(static_cast<size_t>(nt * 128));
      bits.resize(static_cast<size_t>(nt * 16));
      rng.fill_u32(base + static_cast<uint64_t>(grp * nt * 128), nums.size(), nums.data());
    }
    const int64_t bh = grp / nt, i0 = grp % nt * 16;
    for (int64_t i = i0; i < std::min(T, i0 + 16); ++i) {
      const int64_t r = bh * T + i;
      float* row = probs + r * T;
      const float* m = mask_add + (r / (NH * T)) * T;
      for (int64_t j = 0; j < T; ++j) row[j] += m[j];
      softmax_from_max(row, T, row_max(row, T));
      if (drop) drop_row_bits(nums.data(), i, nt, bits.data());  // element (i, j): attention_drop_number(bh, i, j, T)
      write_pd_row(row, T, drop ? bits.data() : nullptr, thr, keep_scale, pdrop ? pdrop + r * T : nullptr,
                   bf ? pd16 + r * T : nullptr);
    }
  }

  head_gemm(false, false, BH, T, HS, T, pdrop ? pdrop : probs, w.v, w.ctx, 1.0f, prec, pd16);  // ctx = Pd @ v
  if (out) heads_to_rows(out, w.ctx, B, T, C, NH, C, 0);
  if (out16) heads_to_rows(out16, w.ctx, B, T, C, NH, C, 0);
}

void attention_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* probs, int64_t B,
                        int64_t T, int64_t C, int64_t NH, float dropout_p, Precision prec, bf16_t* dqkv16,
                        const bf16_t* qkv16) {
  const int64_t HS = C / NH, BH = B * NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  Work w = split(work, B, T, C, NH);
  const bool bf = prec == Precision::BF16, drop = dropout_p > 0.0f;
  BERTCC_CHECK(!qkv16 || bf, "attention_backward: a bf16 qkv outside bf16");
  if (qkv16)  // the 16-bit qkv the forward read (its saved buffer holds no operands)
    unpack_qkv(w, qkv16, B, T, C, NH);
  else if (bf)  // the forward's roundings of q, k, v: the GEMMs below round them again, to the same bits
    from_bf16(reinterpret_cast<const bf16_t*>(probs + operands_offset(B, T, NH, drop, prec)), w.q,
              static_cast<size_t>(3 * B * T * C));
  else
    unpack_qkv(w, qkv, B, T, C, NH);
  rows_to_heads(w.ctx, dout, B, T, C, NH);  // w.ctx now holds d(ctx) per head

  const float* pdrop = drop && !bf ? probs + BH * T * T : nullptr;
  const bf16_t* pd16 = drop && bf ? reinterpret_cast<const bf16_t*>(probs + BH * T * T) : nullptr;
  head_gemm(true, false, BH, T, HS, T, pdrop ? pdrop : probs, w.ctx, w.dv, 1.0f, prec, pd16);  // dv = Pd^T @ dctx

  head_gemm(false, true, BH, T, T, HS, w.ctx, w.v, w.att, 1.0f, prec);  // dPd = dctx @ v^T

  // dP = dropout_backward(dPd); dS = P * (dP - sum(dP * P)); fused per row. For bf16 GEMMs dS is
  // written in bf16 only (att16), the form both following GEMMs read.
  const float keep_scale = drop ? 1.0f / (1.0f - dropout_p) : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < BH * T; ++r) {
    float* __restrict d = w.att + r * T;
    const float* __restrict p = probs + r * T;
    if (pdrop) {
      const float* __restrict pd = pdrop + r * T;
#pragma omp simd
      for (int64_t j = 0; j < T; ++j) d[j] = pd[j] != 0.0f ? d[j] * keep_scale : 0.0f;
    } else if (pd16) {  // a kept P > 0 stays nonzero in bf16 unless below 2^-134 (then P * dP is nil anyway)
      const bf16_t* __restrict pd = pd16 + r * T;
#pragma omp simd
      for (int64_t j = 0; j < T; ++j) d[j] = pd[j] != 0 ? d[j] * keep_scale : 0.0f;
    }
    const float dot = lane_sum(T, [&](int64_t j) { return d[j] * p[j]; });
    if (bf) {
      bf16_t* __restrict ds = w.att16 + r * T;
#pragma omp simd
      for (int64_t j = 0; j < T; ++j) ds[j] = f32_to_bf16(p[j] * (d[j] - dot));
    } else {
      for (int64_t j = 0; j < T; ++j) d[j] = p[j] * (d[j] - dot);
    }
  }

  head_gemm(false, false, BH, T, HS, T, w.att, w.k, w.dq, scale, prec, w.att16);  // dq = scale * dS @ k

  head_gemm(true, false, BH, T, HS, T, w.att, w.q, w.dk, scale, prec, w.att16);  // dk = scale * dS^T @ q

  heads_to_rows(dqkv, w.dq, B, T, C, NH, 3 * C, 0);
  heads_to_rows(dqkv, w.dk, B, T, C, NH, 3 * C, C);
  heads_to_rows(dqkv, w.dv, B, T, C, NH, 3 * C, 2 * C);
  if (dqkv16) to_bf16(dqkv, dqkv16, static_cast<size_t>(B * T * 3 * C));
}

}  // namespace bertcc::kernels
