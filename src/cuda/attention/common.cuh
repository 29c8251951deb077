// What the two fused attention implementations share: the problem's shape, the dropout mask
// (element (i, j) of head row bh = b*NH + h: 16 bits of Philox number base +
// attention_drop_number(bh, i, j, T), as the CPU kernel; bertcc/rng.h), the head-size dispatch.
// attention/fp32.cu: fp32 on CUDA cores (--precision fp32, exact fp32); attention/tensor_core.cu: bf16/fp16
// operands on Tensor Cores (--precision bf16/fp16).
#pragma once
#include <cmath>
#include <type_traits>
#include <vector>

#include "bertcc/dtype.h"
#include "bertcc/rng.h"
#include "cuda/common.cuh"

namespace bertcc::cuda::attn {

struct Shape {
  int64_t B, T, C, NH, hs;  // hs = C / NH, at most the kernel's HS (the rest of each row is zeros)
  float scale;              // 1/sqrt(hs)
  bool drop;
  float keep_scale;     // 1/(1-p)
  uint32_t thr;         // keep iff the element's 16 bits >= thr (dropout_threshold16)
  uint64_t seed, base;  // base: a multiple of 4 (Rng::reserve), so a tile's 32 blocks are whole
};

// Whether element (i, j) of head row bh is kept (one Philox block for one decision: the fp32
// kernels and the simulator's reference; the Tensor Core forward draws a block per eight).
__device__ inline bool keep(const Shape& s, int64_t bh, int64_t i, int64_t j) {
  const uint32_t x = philox_u32(s.seed, s.base + attention_drop_number(bh, i, j, s.T));
  return attention_drop_bits(x, j) >= s.thr;
}

inline Shape make_shape(int64_t B, int64_t T, int64_t C, int64_t NH, float p, const Rng& rng, uint64_t base) {
  BERTCC_CHECK(NH > 0 && C % NH == 0, "attention: hidden size ", C, " is not a multiple of the ", NH, " heads");
  Shape s{B,
          T,
          C,
          NH,
          C / NH,
          1.0f / std::sqrt(static_cast<float>(C / NH)),
          p > 0.0f,
          p > 0.0f ? 1.0f / (1.0f - p) : 1.0f,
          p > 0.0f ? dropout_threshold16(p) : 0u,
          rng.seed,
          base};
  BERTCC_CHECK(p <= 0.0f || base % 4 == 0, "attention: dropout counters at ", base, ", not a whole Philox block");
  BERTCC_CHECK(B * NH <= 65535, "attention: batch x heads = ", B * NH, " exceeds the CUDA grid (65535)");
  return s;
}

// The kernel's head size: the smallest of 16, 32, 64, 128 that holds hs (the rest is zeros).
template <class F>
void dispatch_hs(int64_t HS, F f) {
  if (HS <= 16) return f(std::integral_constant<int, 16>{});
  if (HS <= 32) return f(std::integral_constant<int, 32>{});
  if (HS <= 64) return f(std::integral_constant<int, 64>{});
  if (HS <= 128) return f(std::integral_constant<int, 128>{});
  fail("attention on CUDA: head size ", HS, " is not supported (at most 128)");
}

// What the forward saves for the backward (floats): the row log-sum-exp lse[B*NH*T], padded to a
// multiple of 4 floats, and for the Tensor Core kernels with dropout the dropout decisions the
// forward made, one bit per (query, key): words [B*NH][Tp/16][Tp/8][4] (Tp = T rounded up to 64;
// attention/tensor_core_kernels.cuh: drop_word), so the backward draws no random numbers.
__host__ __device__ inline int64_t tc_padded_T(int64_t T) { return (T + 63) / 64 * 64; }
__host__ __device__ inline int64_t lse_floats(int64_t B, int64_t NH, int64_t T) { return (B * NH * T + 3) / 4 * 4; }
inline int64_t drop_bit_words(int64_t B, int64_t NH, int64_t T) {
  const int64_t Tp = tc_padded_T(T);
  return B * NH * (Tp / 16) * (Tp / 8) * 4;
}
// The kernel's head size for head size hs (dispatch_hs's choice; 0 past 128).
inline int64_t kernel_hs(int64_t hs) { return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : hs <= 128 ? 128 : 0; }
// In bf16 the forward saves, after lse and the dropout bits (16-byte aligned: both are multiples of
// 4 floats), its operands q, k and v rounded to bf16 in the kernels' layout ([3][B*NH][Tp][kernel
// HS], attention/tensor_core_kernels.cuh: prep), and the backward reads them instead of qkv.
inline int64_t operands_offset(int64_t B, int64_t NH, int64_t T, bool drop, Precision prec) {
  return lse_floats(B, NH, T) + (drop && prec != Precision::F32 ? drop_bit_words(B, NH, T) : 0);
}
inline int64_t saved_operand_elems(int64_t B, int64_t T, int64_t C, int64_t NH, Precision prec) {
  return prec == Precision::BF16 ? 3 * B * NH * tc_padded_T(T) * kernel_hs(C / NH) : 0;
}

// The backward's row dot D = sum over a row's hs head channels of dout * out (= sum_j dPd_ij Pd_ij),
// by a warp: lane's channels in order, then a fixed shuffle tree (the same bits every run); out as
// fp32 or as bf16 bits (widened).
__device__ inline float out_value(const float* o, int64_t c) { return o[c]; }
__device__ inline float out_value(const uint16_t* o, int64_t c) { return bf16_bits_to_f32(o[c]); }
template <class O>
__device__ inline float row_dot(const float* d, const O* o, int64_t hs) {
  float acc = 0.0f;
  for (int64_t c = threadIdx.x & 31; c < hs; c += 32) acc += d[c] * out_value(o, c);
  return warp_sum(acc);
}

// The table for an unpadded batch of B sequences (cu: B + 1 host offsets) whose blocks take `rows`
// rows each (the launch's grid.x: its size - 4 B over 2): per sequence {first row, length, offset
// of its slice of the saved buffer in floats, dropout base}, then per block {sequence, tile}. The
// saved slices follow one another as Backend's per-sequence default lays them out (each the
// padded kernels' saved size for the sequence alone, bf16 reading qkv16: lse and the decision
// bits, rounded up to 16 floats), so either form's forward goes with either form's backward.
inline std::vector<int64_t> varlen_table(const int64_t* cu, int64_t B, int64_t NH, bool drop, uint64_t base,
                                         int64_t rows) {
  std::vector<int64_t> t(static_cast<size_t>(4 * B));
  int64_t saved = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = cu[b + 1] - cu[b];
    int64_t* e = t.data() + 4 * b;
    e[0] = cu[b], e[1] = n, e[2] = saved, e[3] = static_cast<int64_t>(base);
    saved += (lse_floats(1, NH, n) + (drop ? drop_bit_words(1, NH, n) : 0) + 15) / 16 * 16;
    base += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i * rows < cu[b + 1] - cu[b]; ++i) t.push_back(b), t.push_back(i);
  return t;
}

// The row dots of an unpadded batch: sequence q's [NH][n] from NH * (its first row), where the
// kernels' place puts D for the sequence alone; a warp per (row r, head h) of the N rows, r's
// sequence found by bisection in the table (row_dot, as attention/fp32.cu's attn_bwd_dot: the same
// bits). 256 threads a block.
template <class O>
__global__ void __launch_bounds__(256) row_dots_varlen(float* D, const float* dout, const O* out, const int64_t* seqs,
                                                       int64_t nseqs, int64_t N, int64_t C, int64_t NH) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (w >= N * NH) return;  // the same for the whole warp
  const int64_t r = w / NH, h = w % NH, hs = C / NH;
  int64_t lo = 0, hi = nseqs - 1;  // the last sequence whose first row is at most r
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (seqs[4 * mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t row0 = seqs[4 * lo], n = seqs[4 * lo + 1];
  const float acc = row_dot(dout + r * C + h * hs, out + r * C + h * hs, hs);
  if ((threadIdx.x & 31) == 0) D[NH * row0 + h * n + (r - row0)] = acc;
}

// Tensor Core kernels (attention/tensor_core.cu). D[bh*T + i] = sum_c dout*out, computed by the caller.
// lse: the saved buffer (lse, then with dropout the decision bits).
// out16 (may be null; bf16 only): the output's rounding too; out may then be null.
// qkv16 (may be null; bf16 only): qkv's rounding, read instead of qkv; the saved buffer then holds
// no operands, and the backward must be given the same qkv16.
void forward_tc(float* out, uint16_t* out16, float* lse, const float* qkv, const uint16_t* qkv16, const float* mask_add,
                const Shape& s, Precision prec);
// dqkv16 (may be null; bf16 only): dqkv's rounding too.
void backward_tc(float* dqkv, uint16_t* dqkv16, const float* dout, const float* qkv, const uint16_t* qkv16,
                 const float* lse, const float* D, const float* mask_add, const Shape& s, Precision prec);
// Unpadded batches (cuda_kernels.h: attention_varlen_*; bf16, qkv16 read in place): s the batch as
// one sequence of its N rows (B 1, T N); cu the host offsets of its B sequences. D: N*NH floats.
void forward_tc_varlen(float* out, uint16_t* out16, float* saved, const uint16_t* qkv16, const int64_t* cu, int64_t B,
                       const Shape& s);
void backward_tc_varlen(float* dqkv, uint16_t* dqkv16, float* D, const float* dout, const float* out,
                        const uint16_t* out16, const uint16_t* qkv16, const float* saved, const int64_t* cu, int64_t B,
                        const Shape& s);
// The same for fp32 (attention/fp32.cu: attention/fp32_kernels.cuh's Varlen instances; qkv [N, 3C] fp32,
// out fp32; the saved buffer holds each sequence's lse alone, as the padded fp32 kernels do).
void forward_f32_varlen(float* out, float* saved, const float* qkv, const int64_t* cu, int64_t B, const Shape& s);
void backward_f32_varlen(float* dqkv, float* D, const float* dout, const float* out, const float* qkv,
                         const float* saved, const int64_t* cu, int64_t B, const Shape& s);

}  // namespace bertcc::cuda::attn
