// Fused multi-head attention in fp32 on CUDA cores (--precision fp32: exact fp32, no TF32), and the
// entry points, which send bf16/fp16 to the Tensor Core kernels (attention_tc.cu). FlashAttention-2's
// shape: the T x T scores are never written to memory. Forward: one thread per query row, key/value
// tiles in shared memory, an online softmax; it saves the row log-sum-exp. Backward recomputes
// P = exp(S - lse) and regenerates the dropout mask from Philox (attn::keep: element (i, j)'s 16
// bits, as the CPU kernel), in two passes without atomics: one thread per query row for
// dq, one per key row for dk and dv (so the result does not depend on scheduling).
#include "cuda/attention_common.cuh"
#include "cuda/cuda_kernels.h"

namespace bertcc::cuda {
namespace {

using attn::Shape;
using attn::keep;

constexpr int kRows = 64;  // query (or key) rows per block, one per thread
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile

// Loads rows [r0, r0 + kTile) of part `part` (0 q, 1 k, 2 v) of head h into tile[kTile][HS] (zeros past T).
template <int HS>
__device__ inline void load_tile(float (*tile)[HS], const float* qkv, const Shape& s, int64_t b, int64_t h,
                                 int64_t r0, int part) {
  for (int idx = threadIdx.x; idx < kTile * HS; idx += blockDim.x) {
    const int jj = idx / HS, c = idx % HS;
    const int64_t r = r0 + jj;
    tile[jj][c] = r < s.T && c < s.hs ? qkv[(b * s.T + r) * 3 * s.C + part * s.C + h * s.hs + c] : 0.0f;
  }
}

template <int HS>
__global__ void __launch_bounds__(kRows) attn_fwd(float* out, float* lse, const float* qkv, const float* mask_add,
                                                  Shape s) {
  __shared__ float Ks[kTile][HS], Vs[kTile][HS];
  __shared__ float Ms[kTile];
  const int64_t bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH;
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x;
  const bool active = i < s.T;
  float q[HS], acc[HS];
#pragma unroll
  for (int c = 0; c < HS; ++c) {
    q[c] = active && c < s.hs ? qkv[(b * s.T + i) * 3 * s.C + h * s.hs + c] : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 < s.T; j0 += kTile) {
    __syncthreads();
    load_tile<HS>(Ks, qkv, s, b, h, j0, 1);
    load_tile<HS>(Vs, qkv, s, b, h, j0, 2);
    for (int jj = threadIdx.x; jj < kTile; jj += blockDim.x) Ms[jj] = j0 + jj < s.T ? mask_add[b * s.T + j0 + jj] : 0.0f;
    __syncthreads();
    if (!active) continue;
    const int n = static_cast<int>(s.T - j0 < kTile ? s.T - j0 : kTile);
    for (int jj = 0; jj < n; ++jj) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < HS; ++c) dot += q[c] * Ks[jj][c];
      const float sc = dot * s.scale + Ms[jj];
      if (sc > m) {
        const float corr = m == -INFINITY ? 0.0f : expf(m - sc);
        l *= corr;
#pragma unroll
        for (int c = 0; c < HS; ++c) acc[c] *= corr;
        m = sc;
      }
      const float p = sc == -INFINITY ? 0.0f : expf(sc - m);
      l += p;
      const float pd = !s.drop ? p : keep(s, bh, i, j0 + jj) ? p * s.keep_scale : 0.0f;
#pragma unroll
      for (int c = 0; c < HS; ++c) acc[c] += pd * Vs[jj][c];
    }
  }
  if (!active) return;
  const float inv = 1.0f / l;
#pragma unroll
  for (int c = 0; c < HS; ++c)
    if (c < s.hs) out[(b * s.T + i) * s.C + h * s.hs + c] = acc[c] * inv;
  lse[bh * s.T + i] = m + logf(l);
}

// D[bh, i] = dO . O over row i's head channels (attn::row_dot: a warp per row, coalesced)
template <class O>
__global__ void attn_bwd_dot(float* D, const float* dout, const O* out, Shape s, int64_t HS) {
  const int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= s.B * s.NH * s.T) return;  // the same for the whole warp
  const int64_t i = r % s.T, bh = r / s.T, b = bh / s.NH, h = bh % s.NH;
  const float acc = attn::row_dot(dout + (b * s.T + i) * s.C + h * HS, out + (b * s.T + i) * s.C + h * HS, HS);
  if (lane == 0) D[r] = acc;
}

template <int HS>
__global__ void __launch_bounds__(kRows) attn_bwd_dq(float* dqkv, const float* dout, const float* qkv,
                                                     const float* lse, const float* D, const float* mask_add, Shape s) {
  __shared__ float Ks[kTile][HS], Vs[kTile][HS];
  __shared__ float Ms[kTile];
  const int64_t bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH;
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x;
  const bool active = i < s.T;
  float q[HS], dO[HS], dq[HS];
#pragma unroll
  for (int c = 0; c < HS; ++c) {
    q[c] = active && c < s.hs ? qkv[(b * s.T + i) * 3 * s.C + h * s.hs + c] : 0.0f;
    dO[c] = active && c < s.hs ? dout[(b * s.T + i) * s.C + h * s.hs + c] : 0.0f;
    dq[c] = 0.0f;
  }
  const float L = active ? lse[bh * s.T + i] : 0.0f, Di = active ? D[bh * s.T + i] : 0.0f;
  for (int64_t j0 = 0; j0 < s.T; j0 += kTile) {
    __syncthreads();
    load_tile<HS>(Ks, qkv, s, b, h, j0, 1);
    load_tile<HS>(Vs, qkv, s, b, h, j0, 2);
    for (int jj = threadIdx.x; jj < kTile; jj += blockDim.x) Ms[jj] = j0 + jj < s.T ? mask_add[b * s.T + j0 + jj] : 0.0f;
    __syncthreads();
    if (!active) continue;
    const int n = static_cast<int>(s.T - j0 < kTile ? s.T - j0 : kTile);
    for (int jj = 0; jj < n; ++jj) {
      float dot = 0.0f, dpd = 0.0f;
#pragma unroll
      for (int c = 0; c < HS; ++c) {
        dot += q[c] * Ks[jj][c];
        dpd += dO[c] * Vs[jj][c];
      }
      const float p = expf(dot * s.scale + Ms[jj] - L);
      const float dp = !s.drop ? dpd : keep(s, bh, i, j0 + jj) ? dpd * s.keep_scale : 0.0f;
      const float ds = p * (dp - Di) * s.scale;
#pragma unroll
      for (int c = 0; c < HS; ++c) dq[c] += ds * Ks[jj][c];
    }
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < HS; ++c)
    if (c < s.hs) dqkv[(b * s.T + i) * 3 * s.C + h * s.hs + c] = dq[c];
}

template <int HS>
__global__ void __launch_bounds__(kRows) attn_bwd_dkdv(float* dqkv, const float* dout, const float* qkv,
                                                       const float* lse, const float* D, const float* mask_add,
                                                       Shape s) {
  __shared__ float Qs[kTile][HS], dOs[kTile][HS];
  __shared__ float Ls[kTile], Ds[kTile];
  const int64_t bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH;
  const int64_t j = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x;
  const bool active = j < s.T;
  float k[HS], v[HS], dk[HS], dv[HS];
#pragma unroll
  for (int c = 0; c < HS; ++c) {
    k[c] = active && c < s.hs ? qkv[(b * s.T + j) * 3 * s.C + s.C + h * s.hs + c] : 0.0f;
    v[c] = active && c < s.hs ? qkv[(b * s.T + j) * 3 * s.C + 2 * s.C + h * s.hs + c] : 0.0f;
    dk[c] = 0.0f;
    dv[c] = 0.0f;
  }
  const float mj = active ? mask_add[b * s.T + j] : 0.0f;
  for (int64_t i0 = 0; i0 < s.T; i0 += kTile) {
    __syncthreads();
    load_tile<HS>(Qs, qkv, s, b, h, i0, 0);
    for (int idx = threadIdx.x; idx < kTile * HS; idx += blockDim.x) {
      const int ii = idx / HS, c = idx % HS;
      const int64_t r = i0 + ii;
      dOs[ii][c] = r < s.T && c < s.hs ? dout[(b * s.T + r) * s.C + h * s.hs + c] : 0.0f;
    }
    for (int ii = threadIdx.x; ii < kTile; ii += blockDim.x) {
      Ls[ii] = i0 + ii < s.T ? lse[bh * s.T + i0 + ii] : 0.0f;
      Ds[ii] = i0 + ii < s.T ? D[bh * s.T + i0 + ii] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const int n = static_cast<int>(s.T - i0 < kTile ? s.T - i0 : kTile);
    for (int ii = 0; ii < n; ++ii) {
      float dot = 0.0f, dpd = 0.0f;
#pragma unroll
      for (int c = 0; c < HS; ++c) {
        dot += Qs[ii][c] * k[c];
        dpd += dOs[ii][c] * v[c];
      }
      const float p = expf(dot * s.scale + mj - Ls[ii]);
      const bool kept = !s.drop || keep(s, bh, i0 + ii, j);
      const float pd = !s.drop ? p : kept ? p * s.keep_scale : 0.0f;
      const float dp = !s.drop ? dpd : kept ? dpd * s.keep_scale : 0.0f;
      const float ds = p * (dp - Ds[ii]) * s.scale;
#pragma unroll
      for (int c = 0; c < HS; ++c) {
        dv[c] += pd * dOs[ii][c];
        dk[c] += ds * Qs[ii][c];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < HS; ++c)
    if (c < s.hs) {
      dqkv[(b * s.T + j) * 3 * s.C + s.C + h * s.hs + c] = dk[c];
      dqkv[(b * s.T + j) * 3 * s.C + 2 * s.C + h * s.hs + c] = dv[c];
    }
}

}  // namespace

int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                             bool qkv16_kept) {
  const bool operands = prec == Precision::BF16 && !qkv16_kept;
  return attn::operands_offset(B, NH, T, dropout, prec) +
         (operands ? (attn::saved_operand_elems(B, T, C, NH, prec) + 1) / 2 : 0);
}

void attention_forward(float* out, float* lse, const float* qkv, const float* mask_add, int64_t B, int64_t T,
                       int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec,
                       bf16_t* out16, const bf16_t* qkv16) {
  if (B * T == 0) return;
  BERTCC_CHECK(out16 == nullptr || prec == Precision::BF16, "attention_forward: a bf16 output copy outside bf16");
  BERTCC_CHECK(qkv16 == nullptr || prec == Precision::BF16, "attention_forward: a bf16 qkv outside bf16");
  BERTCC_CHECK(out || out16, "attention_forward: no output");
  BERTCC_CHECK(qkv || qkv16, "attention_forward: no qkv");
  const Shape s = attn::make_shape(B, T, C, NH, dropout_p, rng, base);
  if (prec != Precision::F32)
    return attn::forward_tc(out, reinterpret_cast<uint16_t*>(out16), lse, qkv,
                            reinterpret_cast<const uint16_t*>(qkv16), mask_add, s, prec);
  const dim3 grid(grid_for(T, kRows), static_cast<unsigned>(B * NH));
  attn::dispatch_hs(C / NH, [&](auto hs) { attn_fwd<decltype(hs)::value><<<grid, kRows, 0, stream()>>>(out, lse, qkv, mask_add, s); });
  BERTCC_CUDA_LAUNCHED("attention_forward");
}

int64_t attention_backward_work_size(int64_t B, int64_t T, int64_t NH) { return B * NH * T; }

void attention_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* out,
                        const bf16_t* out16, const float* lse, const float* mask_add, int64_t B, int64_t T, int64_t C,
                        int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec, bf16_t* dqkv16,
                        const bf16_t* qkv16) {
  if (B * T == 0) return;
  BERTCC_CHECK(qkv16 == nullptr || prec == Precision::BF16, "attention_backward: a bf16 qkv outside bf16");
  BERTCC_CHECK(dqkv16 == nullptr || prec == Precision::BF16, "attention_backward: a bf16 gradient copy outside bf16");
  BERTCC_CHECK(out || (out16 && prec == Precision::BF16),
               "attention_backward: no forward output (a null out needs its bf16 rounding, in bf16)");
  const Shape s = attn::make_shape(B, T, C, NH, dropout_p, rng, base);
  if (out)
    attn_bwd_dot<<<grid_for(B * NH * T * 32, 256), 256, 0, stream()>>>(work, dout, out, s, C / NH);
  else
    attn_bwd_dot<<<grid_for(B * NH * T * 32, 256), 256, 0, stream()>>>(work, dout, reinterpret_cast<const uint16_t*>(out16), s,
                                                          C / NH);
  BERTCC_CUDA_LAUNCHED("attention_backward (row dots)");
  if (prec != Precision::F32)
    return attn::backward_tc(dqkv, reinterpret_cast<uint16_t*>(dqkv16), dout, qkv,
                             reinterpret_cast<const uint16_t*>(qkv16), lse, work, mask_add, s, prec);
  const dim3 grid(grid_for(T, kRows), static_cast<unsigned>(B * NH));
  attn::dispatch_hs(C / NH, [&](auto hs) {
    attn_bwd_dq<decltype(hs)::value><<<grid, kRows, 0, stream()>>>(dqkv, dout, qkv, lse, work, mask_add, s);
    BERTCC_CUDA_LAUNCHED("attention_backward (dq)");
    attn_bwd_dkdv<decltype(hs)::value><<<grid, kRows, 0, stream()>>>(dqkv, dout, qkv, lse, work, mask_add, s);
    BERTCC_CUDA_LAUNCHED("attention_backward (dk, dv)");
  });
}

}  // namespace bertcc::cuda
