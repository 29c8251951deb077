// The fp32 attention kernels on CUDA cores (host code: attention/fp32.cu). A header so that
// tests/cuda/sim can compile the same source for the CPU (BERTCC_CUDA_SIM) and check it where no
// GPU is. FlashAttention-2's shape: the T x T scores are never written to memory. Forward: one
// thread per query row, key/value tiles in shared memory, an online softmax; it saves the row
// log-sum-exp. Backward recomputes P = exp(S - lse) and regenerates the dropout mask from Philox
// (attn::keep: element (i, j)'s 16 bits, as the CPU kernel), in two passes without atomics: one
// thread per query row for dq, one per key row for dk and dv (so the result does not depend on
// scheduling).
//
// Each kernel has two instances:
// - Varlen false, a padded batch [B, T] with an additive mask: block (x, y) takes row tile x of
//   head row y = b NH + h.
// - Varlen true, an unpadded batch (FlashAttention's cu_seqlens layout: sequence b rows
//   cu[b] .. cu[b+1] - 1 of qkv [N, 3C], no mask): block (x, y) takes head y of the sequence and
//   row tile that entry x of the call's table (attention/common.cuh: varlen_table, with no
//   decision bits: fp32 saves none) names, and then sees that sequence as a batch of it alone
//   (seq_place): B 1, T its length, its dropout numbers' base, its rows of qkv/out/dout/dqkv, its
//   slice of the saved buffer (lse), its row dots at NH * (first row) (row_dots_varlen's layout),
//   and a mask of zeros (the per-sequence path's). Each row's arithmetic is then that of the padded
//   kernels on the sequence alone, and so are its bits.
#pragma once
#include "cuda/attention/common.cuh"

namespace bertcc::cuda::attn::f32 {

constexpr int kRows = 64;  // query (or key) rows per block, one per thread
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile

// The block's sequence: b (0 for an unpadded batch's), head h, row tile, the sequence's first row
// and the offset of its lse in the saved buffer (both 0 for a padded batch).
struct Seq {
  int64_t b, h, tile, row0, lse0;
};
template <bool Varlen>
__device__ inline Seq seq_place(Shape& s, const int64_t* seqs, int64_t nseqs) {
  if constexpr (!Varlen) {
    (void)seqs, (void)nseqs;
    return {static_cast<int64_t>(blockIdx.y) / s.NH, static_cast<int64_t>(blockIdx.y) % s.NH,
            static_cast<int64_t>(blockIdx.x), 0, 0};
  } else {
    const int64_t* blk = seqs + 4 * nseqs + 2 * static_cast<int64_t>(blockIdx.x);  // {sequence, tile}
    const int64_t* q = seqs + 4 * blk[0];  // {first row, length, saved offset, dropout base}
    s.B = 1, s.T = q[1], s.base = static_cast<uint64_t>(q[3]);
    return {0, static_cast<int64_t>(blockIdx.y), blk[1], q[0], q[2]};
  }
}
// mask_add's element, or the zero of an unpadded batch's (which has none)
__device__ inline float mask_at(const float* mask_add, int64_t k) { return mask_add ? mask_add[k] : 0.0f; }

// Loads rows [r0, r0 + kTile) of part `part` (0 q, 1 k, 2 v) of head h into tile[kTile][HS] (zeros past T).
template <int HS>
__device__ inline void load_tile(float (*tile)[HS], const float* qkv, const Shape& s, int64_t b, int64_t h, int64_t r0,
                                 int part) {
  for (int idx = threadIdx.x; idx < kTile * HS; idx += blockDim.x) {
    const int jj = idx / HS, c = idx % HS;
    const int64_t r = r0 + jj;
    tile[jj][c] = r < s.T && c < s.hs ? qkv[(b * s.T + r) * 3 * s.C + part * s.C + h * s.hs + c] : 0.0f;
  }
}

template <int HS, bool Varlen>
__global__ void __launch_bounds__(kRows)
    fwd(float* out, float* lse, const float* qkv, const float* mask_add, Shape s, const int64_t* seqs, int64_t nseqs) {
  __shared__ float Ks[kTile][HS], Vs[kTile][HS];
  __shared__ float Ms[kTile];
  const Seq p = seq_place<Varlen>(s, seqs, nseqs);
  const int64_t b = p.b, h = p.h, bh = b * s.NH + h;
  qkv += p.row0 * 3 * s.C, out += p.row0 * s.C, lse += p.lse0;
  const int64_t i = p.tile * kRows + threadIdx.x;
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
    for (int jj = threadIdx.x; jj < kTile; jj += blockDim.x)
      Ms[jj] = j0 + jj < s.T ? mask_at(mask_add, b * s.T + j0 + jj) : 0.0f;
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
      const float pr = sc == -INFINITY ? 0.0f : expf(sc - m);
      l += pr;
      const float pd = !s.drop ? pr : keep(s, bh, i, j0 + jj) ? pr * s.keep_scale : 0.0f;
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

// D[bh, i] = dO . O over row i's head channels (attn::row_dot: a warp per row, coalesced). An
// unpadded batch's: attn::row_dots_varlen.
template <class O>
__global__ void bwd_dot(float* D, const float* dout, const O* out, Shape s, int64_t HS) {
  const int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= s.B * s.NH * s.T) return;  // the same for the whole warp
  const int64_t i = r % s.T, bh = r / s.T, b = bh / s.NH, h = bh % s.NH;
  const float acc = row_dot(dout + (b * s.T + i) * s.C + h * HS, out + (b * s.T + i) * s.C + h * HS, HS);
  if (lane == 0) D[r] = acc;
}

template <int HS, bool Varlen>
__global__ void __launch_bounds__(kRows)
    bwd_dq(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D, const float* mask_add,
           Shape s, const int64_t* seqs, int64_t nseqs) {
  __shared__ float Ks[kTile][HS], Vs[kTile][HS];
  __shared__ float Ms[kTile];
  const Seq p = seq_place<Varlen>(s, seqs, nseqs);
  const int64_t b = p.b, h = p.h, bh = b * s.NH + h;
  dqkv += p.row0 * 3 * s.C, dout += p.row0 * s.C, qkv += p.row0 * 3 * s.C, lse += p.lse0, D += p.row0 * s.NH;
  const int64_t i = p.tile * kRows + threadIdx.x;
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
    for (int jj = threadIdx.x; jj < kTile; jj += blockDim.x)
      Ms[jj] = j0 + jj < s.T ? mask_at(mask_add, b * s.T + j0 + jj) : 0.0f;
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
      const float pr = expf(dot * s.scale + Ms[jj] - L);
      const float dp = !s.drop ? dpd : keep(s, bh, i, j0 + jj) ? dpd * s.keep_scale : 0.0f;
      const float ds = pr * (dp - Di) * s.scale;
#pragma unroll
      for (int c = 0; c < HS; ++c) dq[c] += ds * Ks[jj][c];
    }
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < HS; ++c)
    if (c < s.hs) dqkv[(b * s.T + i) * 3 * s.C + h * s.hs + c] = dq[c];
}

template <int HS, bool Varlen>
__global__ void __launch_bounds__(kRows)
    bwd_dkdv(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D, const float* mask_add,
             Shape s, const int64_t* seqs, int64_t nseqs) {
  __shared__ float Qs[kTile][HS], dOs[kTile][HS];
  __shared__ float Ls[kTile], Ds[kTile];
  const Seq p = seq_place<Varlen>(s, seqs, nseqs);
  const int64_t b = p.b, h = p.h, bh = b * s.NH + h;
  dqkv += p.row0 * 3 * s.C, dout += p.row0 * s.C, qkv += p.row0 * 3 * s.C, lse += p.lse0, D += p.row0 * s.NH;
  const int64_t j = p.tile * kRows + threadIdx.x;
  const bool active = j < s.T;
  float k[HS], v[HS], dk[HS], dv[HS];
#pragma unroll
  for (int c = 0; c < HS; ++c) {
    k[c] = active && c < s.hs ? qkv[(b * s.T + j) * 3 * s.C + s.C + h * s.hs + c] : 0.0f;
    v[c] = active && c < s.hs ? qkv[(b * s.T + j) * 3 * s.C + 2 * s.C + h * s.hs + c] : 0.0f;
    dk[c] = 0.0f;
    dv[c] = 0.0f;
  }
  const float mj = active ? mask_at(mask_add, b * s.T + j) : 0.0f;
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
      const float pr = expf(dot * s.scale + mj - Ls[ii]);
      const bool kept = !s.drop || keep(s, bh, i0 + ii, j);
      const float pd = !s.drop ? pr : kept ? pr * s.keep_scale : 0.0f;
      const float dp = !s.drop ? dpd : kept ? dpd * s.keep_scale : 0.0f;
      const float ds = pr * (dp - Ds[ii]) * s.scale;
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

}  // namespace bertcc::cuda::attn::f32
