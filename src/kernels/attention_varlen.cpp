// Variable-length multi-head self-attention over packed rows (FlashAttention's cu_seqlens layout):
// sequence b is rows cu[b] to cu[b+1] of qkv[N,3C] (q | k | v), with no padding and no mask.
//   S = q k^T / sqrt(HS);  P = softmax(S);  Pd = dropout(P);  out = Pd v     (per sequence, head)
// The whole batch is one parallel region: its work items are (sequence, head) pairs, largest first,
// each computed by one thread from start to end (its products are single-threaded oneDNN matmuls
// reading q, k and v in place, strided in the qkv rows; its softmax and dropout as
// attention_forward's). A sequence's result therefore depends on its own rows only: not on the
// batch it is in, nor on the thread count. Dropout: element (i, j) of head h of sequence b is
// decided by number base + drop_off(b) + attention_drop_number(h, i, j, n) (drop_off(b): the
// numbers of the sequences before it), as a batch of one sequence at T = n would be.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "bertcc/error.h"
#include "kernels/attention_rows.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

namespace bertcc::kernels {
namespace {

// Where a sequence's saved probabilities start (elements of P: sum of NH n^2 over the sequences
// before it), the total, and where its dropout numbers start.
struct Layout {
  std::vector<int64_t> p_off;
  std::vector<uint64_t> d_off;
  int64_t S = 0;
};

Layout layout(const int64_t* cu, int64_t B, int64_t NH) {
  Layout l;
  l.p_off.resize(static_cast<size_t>(B));
  l.d_off.resize(static_cast<size_t>(B));
  uint64_t d = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = cu[b + 1] - cu[b];
    BERTCC_CHECK(n > 0, "attention (varlen): sequence ", b, " is empty");
    l.p_off[static_cast<size_t>(b)] = l.S;
    l.d_off[static_cast<size_t>(b)] = d;
    l.S += NH * n * n;
    d += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
  return l;
}

// The saved buffer: P (S floats), then with dropout Pd (fp32, or bf16 for bf16 GEMMs), then for
// bf16 GEMMs without a kept qkv16, qkv rounded to bf16 ([N,3C], the rows' layout).
int64_t pd_end(int64_t S, bool dropout, Precision prec) {
  return S + (!dropout ? 0 : prec == Precision::BF16 ? (S + 1) / 2 : S);
}

// The (sequence, head) items, largest sequence first (dynamic schedule: the long ones start early)
std::vector<int64_t> items(const int64_t* cu, int64_t B, int64_t NH) {
  std::vector<int64_t> seq(static_cast<size_t>(B));
  std::iota(seq.begin(), seq.end(), 0);
  std::stable_sort(seq.begin(), seq.end(), [&](int64_t x, int64_t y) { return cu[x + 1] - cu[x] > cu[y + 1] - cu[y]; });
  std::vector<int64_t> it;
  it.reserve(static_cast<size_t>(B * NH));
  for (int64_t b : seq)
    for (int64_t h = 0; h < NH; ++h) it.push_back(b * NH + h);
  return it;
}

// One single-threaded product C = alpha op(A) op(B) (oneDNN's matmul, from inside the region).
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const bf16_t* A16, int64_t lda,
             const float* Bm, const bf16_t* B16, int64_t ldb, float* C, int64_t ldc, float alpha, Precision prec) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.lda = lda;
  g.B = Bm;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  g.alpha = alpha;
  if (prec == Precision::BF16) {
    g.A16 = A16;
    g.B16 = B16;
  }
  gemm(g, prec);
}

}  // namespace

int64_t attention_varlen_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout, Precision prec,
                                    bool qkv16_kept) {
  const int64_t S = layout(cu, B, NH).S, N = cu[B];
  const bool operands = prec == Precision::BF16 && !qkv16_kept;
  return pd_end(S, dropout, prec) + (operands ? (3 * N * C + 1) / 2 : 0);
}

void attention_varlen_forward(float* out, float* saved, const float* qkv, const int64_t* cu, int64_t B, int64_t C,
                              int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec, bf16_t* out16,
                              const bf16_t* qkv16) {
  const int64_t HS = C / NH, N = cu[B];
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool bf = prec == Precision::BF16, drop = dropout_p > 0.0f;
  BERTCC_CHECK(!qkv16 || bf, "attention_forward (varlen): a bf16 qkv outside bf16");
  BERTCC_CHECK(out || out16, "attention_forward (varlen): no output");
  const Layout L = layout(cu, B, NH);
  // bf16 products read q, k and v rounded: the kept qkv16, or their rounding saved here for the backward
  const bf16_t* q16 = qkv16;
  if (bf && !qkv16) {
    bf16_t* ops = reinterpret_cast<bf16_t*>(saved + pd_end(L.S, drop, prec));
    to_bf16(qkv, ops, static_cast<size_t>(N * 3 * C));
    q16 = ops;
  }
  float* pdrop = drop && !bf ? saved + L.S : nullptr;
  bf16_t* pd16 = drop && bf ? reinterpret_cast<bf16_t*>(saved + L.S) : nullptr;
  const float keep_scale = drop ? 1.0f / (1.0f - dropout_p) : 1.0f;
  const uint32_t thr = drop ? dropout_threshold16(dropout_p) : 0;
  const std::vector<int64_t> work = items(cu, B, NH);
  const int64_t n_items = static_cast<int64_t>(work.size());
#pragma omp parallel
  {
    omp_set_num_threads(1);  // this thread's products: single-threaded, the same primitive whatever the team
    thread_local std::vector<uint32_t> nums;
    thread_local std::vector<uint16_t> bits;
    thread_local std::vector<bf16_t> p16_local;
    thread_local std::vector<float> ctx_local;
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < n_items; ++k) {
      const int64_t b = work[static_cast<size_t>(k)] / NH, h = work[static_cast<size_t>(k)] % NH;
      const int64_t r0 = cu[b], n = cu[b + 1] - r0, nt = (n + 15) / 16;
      const int64_t po = L.p_off[static_cast<size_t>(b)] + h * n * n;
      float* P = saved + po;
      const int64_t qo = r0 * 3 * C + h * HS;  // this head's q in the rows; k at + C, v at + 2C
      product(false, true, n, n, HS, qkv ? qkv + qo : nullptr, q16 ? q16 + qo : nullptr, 3 * C,
              qkv ? qkv + qo + C : nullptr, q16 ? q16 + qo + C : nullptr, 3 * C, P, n, scale, prec);
      // the product's A operand: Pd (fp32 or bf16), or P (fp32, or rounded here for bf16)
      bf16_t* a16 = !bf ? nullptr : drop ? pd16 + po : grow(p16_local, n * n);
      float* a32 = pdrop ? pdrop + po : P;
      if (drop) {
        nums.resize(static_cast<size_t>(nt * 128));
        bits.resize(static_cast<size_t>(nt * 16));
      }
      for (int64_t g = 0; g < nt; ++g) {  // 16 queries at a time: one run of the stream each
        if (drop)
          rng.fill_u32(base + L.d_off[static_cast<size_t>(b)] + static_cast<uint64_t>((h * nt + g) * nt * 128),
                       nums.size(), nums.data());
        for (int64_t i = g * 16; i < std::min(n, g * 16 + 16); ++i) {
          float* row = P + i * n;
          softmax_from_max(row, n, row_max(row, n));
          if (drop) drop_row_bits(nums.data(), i, nt, bits.data());  // as attention_forward's
          write_pd_row(row, n, drop ? bits.data() : nullptr, thr, keep_scale, pdrop ? a32 + i * n : nullptr,
                       a16 ? a16 + i * n : nullptr);
        }
      }
      // ctx = Pd v, straight into the output rows (or a scratch block rounded into out16)
      float* ctx = out ? out + r0 * C + h * HS : grow(ctx_local, n * HS);
      const int64_t ldc = out ? C : HS;
      product(false, false, n, HS, n, a32, a16, n, qkv ? qkv + qo + 2 * C : nullptr, q16 ? q16 + qo + 2 * C : nullptr,
              3 * C, ctx, ldc, 1.0f, prec);
      if (out16)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < HS; ++c) out16[(r0 + i) * C + h * HS + c] = f32_to_bf16(ctx[i * ldc + c]);
    }
  }
}

void attention_varlen_backward(float* dqkv, const float* dout, const float* qkv, const float* saved, const int64_t* cu,
                               int64_t B, int64_t C, int64_t NH, float dropout_p, Precision prec, bf16_t* dqkv16,
                               const bf16_t* qkv16) {
  const int64_t HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool bf = prec == Precision::BF16, drop = dropout_p > 0.0f;
  BERTCC_CHECK(!qkv16 || bf, "attention_backward (varlen): a bf16 qkv outside bf16");
  const Layout L = layout(cu, B, NH);
  const bf16_t* q16 = qkv16 ? qkv16 : bf ? reinterpret_cast<const bf16_t*>(saved + pd_end(L.S, drop, prec)) : nullptr;
  BERTCC_CHECK(bf || qkv, "attention_backward (varlen): no qkv");
  if (bf) qkv = nullptr;  // (the products read the roundings only)
  const float* pdrop = drop && !bf ? saved + L.S : nullptr;
  const bf16_t* pd16 = drop && bf ? reinterpret_cast<const bf16_t*>(saved + L.S) : nullptr;
  const float keep_scale = drop ? 1.0f / (1.0f - dropout_p) : 1.0f;
  const std::vector<int64_t> work = items(cu, B, NH);
  const int64_t n_items = static_cast<int64_t>(work.size());
#pragma omp parallel
  {
    omp_set_num_threads(1);
    thread_local std::vector<float> d_local;
    thread_local std::vector<bf16_t> ds16_local, dctx16_local, p16_local;
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < n_items; ++k) {
      const int64_t b = work[static_cast<size_t>(k)] / NH, h = work[static_cast<size_t>(k)] % NH;
      const int64_t r0 = cu[b], n = cu[b + 1] - r0;
      const int64_t po = L.p_off[static_cast<size_t>(b)] + h * n * n;
      const float* P = saved + po;
      const int64_t qo = r0 * 3 * C + h * HS;
      const float* dctx = dout + r0 * C + h * HS;  // [n, HS], leading dimension C
      bf16_t* dctx16 = nullptr;
      if (bf) {  // the products' operand: d(ctx) rounded, compact [n, HS]
        dctx16 = grow(dctx16_local, n * HS);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < HS; ++c) dctx16[i * HS + c] = f32_to_bf16(dctx[i * C + c]);
      }
      const int64_t ldd = bf ? HS : C;
      // dv = Pd^T dctx (Pd: the forward's; without dropout P, rounded here for bf16)
      const bf16_t* a16 = nullptr;
      if (bf) {
        if (pd16) {
          a16 = pd16 + po;
        } else {
          bf16_t* p16 = grow(p16_local, n * n);
          for (int64_t e = 0; e < n * n; ++e) p16[e] = f32_to_bf16(P[e]);
          a16 = p16;
        }
      }
      product(true, false, n, HS, n, pdrop ? pdrop + po : P, a16, n, dctx, dctx16, ldd, dqkv + qo + 2 * C, 3 * C, 1.0f,
              prec);
      // dPd = dctx v^T
      float* d = grow(d_local, n * n);
      product(false, true, n, n, HS, dctx, dctx16, ldd, qkv ? qkv + qo + 2 * C : nullptr,
              q16 ? q16 + qo + 2 * C : nullptr, 3 * C, d, n, 1.0f, prec);
      // dP = dropout_backward(dPd); dS = P * (dP - sum(dP * P)), as attention_backward's
      bf16_t* ds16 = bf ? grow(ds16_local, n * n) : nullptr;
      for (int64_t i = 0; i < n; ++i) {
        float* __restrict dr = d + i * n;
        const float* __restrict p = P + i * n;
        if (pdrop) {
          const float* __restrict pd = pdrop + po + i * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) dr[j] = pd[j] != 0.0f ? dr[j] * keep_scale : 0.0f;
        } else if (pd16) {
          const bf16_t* __restrict pd = pd16 + po + i * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) dr[j] = pd[j] != 0 ? dr[j] * keep_scale : 0.0f;
        }
        const float dot = lane_sum(n, [&](int64_t j) { return dr[j] * p[j]; });
        if (bf) {
          bf16_t* __restrict ds = ds16 + i * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) ds[j] = f32_to_bf16(p[j] * (dr[j] - dot));
        } else {
          for (int64_t j = 0; j < n; ++j) dr[j] = p[j] * (dr[j] - dot);
        }
      }
      // dq = scale dS k;  dk = scale dS^T q
      product(false, false, n, HS, n, d, ds16, n, qkv ? qkv + qo + C : nullptr, q16 ? q16 + qo + C : nullptr, 3 * C,
              dqkv + qo, 3 * C, scale, prec);
      product(true, false, n, HS, n, d, ds16, n, qkv ? qkv + qo : nullptr, q16 ? q16 + qo : nullptr, 3 * C,
              dqkv + qo + C, 3 * C, scale, prec);
      if (dqkv16)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t part = 0; part < 3; ++part) {
            const int64_t o = (r0 + i) * 3 * C + part * C + h * HS;
            for (int64_t c = 0; c < HS; ++c) dqkv16[o + c] = f32_to_bf16(dqkv[o + c]);
          }
    }
  }
}

}  // namespace bertcc::kernels
