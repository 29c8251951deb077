// GELU and dropout, forward and backward, four consecutive elements per thread (host code:
// elementwise.cu). A header so that tests/cuda/sim can compile the same source for the CPU and check
// it bit for bit against the one-element-per-thread formulas and the CPU kernels.
//
// Each element is computed by the same expression as in the one-element-per-thread formulas, so the
// results are the same bits; what differs is the memory traffic and the random numbers:
// - Vec (the host checked that every pointer is 16-byte aligned, 8 for the 16-bit copies): whole
//   groups of four move as one 16-byte load or store (8 bytes for four bf16 values); the last,
//   partial group of a buffer element by element.
// - Quad (dropout, base % 4 == 0): the four elements of a group are counters 4k .. 4k+3 of the
//   dropout stream, so one Philox4x32-10 block gives all four numbers (philox_u32 drew a whole block
//   per element and kept one word of it).
// - A null fp32 output (GELU forward) writes only the bf16 copy: the model's 16-bit FFN2 reads that
//   copy alone (its fp32 activation is not kept in bf16 training).
#pragma once

#include "cuda/common.cuh"

namespace bertcc::cuda::pw {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kTanhCoef = 0.044715f;

__device__ inline float gelu_one(float x, bool erf_form) {
  return erf_form ? 0.5f * x * (1.0f + erff(x * kInvSqrt2))
                  : 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
}

__device__ inline float gelu_grad_one(float x, bool erf_form) {
  if (erf_form) return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  const float t = tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCoef * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// The group of thread i: elements 4i .. 4i+3 (cnt of them exist, 1..4).
__device__ inline int64_t group_start() { return 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x); }

template <bool Vec>
__device__ inline void load4(float (&x)[4], const float* p, int cnt) {
  if (Vec && cnt == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = e < cnt ? p[e] : 0.0f;
}

// Four bf16 values widened (exactly): 8 bytes at once with Vec.
template <bool Vec>
__device__ inline void load4(float (&x)[4], const uint16_t* p, int cnt) {
  if (Vec && cnt == 4) return load_bf16x4(p, x);
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = e < cnt ? bf16_bits_to_f32(p[e]) : 0.0f;
}

template <bool Vec>
__device__ inline void store4(float* p, const float (&x)[4], int cnt) {
  if (Vec && cnt == 4) {
    float4 v;
    v.x = x[0], v.y = x[1], v.z = x[2], v.w = x[3];
    *reinterpret_cast<float4*>(p) = v;
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e)
    if (e < cnt) p[e] = x[e];
}

template <bool Vec>
__device__ inline void store4_bf16(uint16_t* p, const float (&x)[4], int cnt) {
  if (Vec && cnt == 4) {
    store_bf16x4(p, x[0], x[1], x[2], x[3]);
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e)
    if (e < cnt) p[e] = f32_to_bf16_bits(x[e]);
}

// The dropout stream's numbers for counters base + i0 .. base + i0 + cnt - 1.
template <bool Quad>
__device__ inline void draws4(uint32_t (&w)[4], uint64_t seed, uint64_t first, int cnt) {
  if constexpr (Quad) {
    philox4(seed, first >> 2, w);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = e < cnt ? philox_u32(seed, first + static_cast<uint64_t>(e)) : 0u;
  }
}

__device__ inline int group_count(int64_t i0, int64_t n) { return n - i0 >= 4 ? 4 : static_cast<int>(n - i0); }

// out (may be null) and out16 (may be null) = gelu(inp); inp16 (may be null) = inp's rounding. In:
// float, or uint16_t for a bf16 input (the FFN1 product's output in bf16 models; inp16 null then).
template <bool Vec, class In = float>
__global__ void gelu_fwd(float* out, uint16_t* out16, uint16_t* inp16, const In* inp, int64_t n, bool erf_form) {
  const int64_t i0 = group_start();
  if (i0 >= n) return;
  const int cnt = group_count(i0, n);
  float x[4];
  load4<Vec>(x, inp + i0, cnt);
  if (inp16) store4_bf16<Vec>(inp16 + i0, x, cnt);
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = gelu_one(x[e], erf_form);
  if (out) store4<Vec>(out + i0, x, cnt);
  if (out16) store4_bf16<Vec>(out16 + i0, x, cnt);
}

// dinp (+)= dout * gelu'(inp); dinp16 (may be null) its bf16 rounding
template <bool Vec>
__global__ void gelu_bwd(float* dinp, uint16_t* dinp16, const float* inp, const float* dout, int64_t n, bool erf_form,
                         bool overwrite) {
  const int64_t i0 = group_start();
  if (i0 >= n) return;
  const int cnt = group_count(i0, n);
  float x[4], g[4], d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  load4<Vec>(x, inp + i0, cnt);
  load4<Vec>(g, dout + i0, cnt);
  if (!overwrite) load4<Vec>(d, dinp + i0, cnt);
#pragma unroll
  for (int e = 0; e < 4; ++e) d[e] = d[e] + g[e] * gelu_grad_one(x[e], erf_form);
  store4<Vec>(dinp + i0, d, cnt);
  if (dinp16) store4_bf16<Vec>(dinp16 + i0, d, cnt);
}

// out = kept ? inp * scale : 0, element i kept when (number base + i of the stream >> 8) >= thr
template <bool Vec, bool Quad>
__global__ void dropout_fwd(float* out, const float* inp, int64_t n, float scale, uint32_t thr, uint64_t seed,
                            uint64_t base) {
  const int64_t i0 = group_start();
  if (i0 >= n) return;
  const int cnt = group_count(i0, n);
  uint32_t w[4];
  draws4<Quad>(w, seed, base + static_cast<uint64_t>(i0), cnt);
  float x[4];
  load4<Vec>(x, inp + i0, cnt);
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = (w[e] >> 8) >= thr ? x[e] * scale : 0.0f;
  store4<Vec>(out + i0, x, cnt);
}

// dinp (+)= kept ? dout * scale : 0 as one fused multiply-add (the CPU kernel's bits)
template <bool Vec, bool Quad>
__global__ void dropout_bwd(float* dinp, uint16_t* dinp16, const float* dout, int64_t n, float scale, uint32_t thr,
                            uint64_t seed, uint64_t base, bool overwrite) {
  const int64_t i0 = group_start();
  if (i0 >= n) return;
  const int cnt = group_count(i0, n);
  uint32_t w[4];
  draws4<Quad>(w, seed, base + static_cast<uint64_t>(i0), cnt);
  float g[4], d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  load4<Vec>(g, dout + i0, cnt);
  if (!overwrite) load4<Vec>(d, dinp + i0, cnt);
#pragma unroll
  for (int e = 0; e < 4; ++e) d[e] = fmaf((w[e] >> 8) >= thr ? g[e] : 0.0f, scale, d[e]);
  store4<Vec>(dinp + i0, d, cnt);
  if (dinp16) store4_bf16<Vec>(dinp16 + i0, d, cnt);
}

// FFN1's backward start, fused: d = dout * gelu'(inp16) (as gelu_bwd overwriting, on the input's
// bf16 values widened: the form bf16 training keeps of FFN1's output) for a row-major
// [M, N] buffer, written only as its bf16 rounding (dinp16), and the first pass of the bias
// gradient's column sums over d, in elementwise.cu's colsum_pass1 partition and order (block
// (column block of 32, chunk of kRows rows), threads (32, 8): row lanes striding by 8, then the
// lanes added in order), so that colsum_pass2 gives the bits bias_backward gives from d. out16
// (may be null): gelu(inp16) rounded too, as gelu_fwd<Vec, uint16_t> writes it (gelu_one, RNE).
template <int kRows>
__global__ void gelu_bwd_colsum(uint16_t* dinp16, float* part, const uint16_t* inp16, const float* dout, int64_t M,
                                int64_t N, bool erf_form, uint16_t* out16) {
  // 256 threads: tx = column within the block's 32, ty = row lane (colsum_pass1's (32, 8) block)
  const int tx = static_cast<int>(threadIdx.x & 31), ty = static_cast<int>(threadIdx.x >> 5);
  const int64_t c = blockIdx.x * static_cast<int64_t>(32) + tx;
  const int64_t r0 = blockIdx.y * static_cast<int64_t>(kRows), r1 = M < r0 + kRows ? M : r0 + kRows;
  float b = 0.0f;
  if (c < N)
    for (int64_t r = r0 + ty; r < r1; r += 8) {
      const float x = bf16_bits_to_f32(inp16[r * N + c]);
      const float d = 0.0f + dout[r * N + c] * gelu_grad_one(x, erf_form);
      dinp16[r * N + c] = f32_to_bf16_bits(d);
      if (out16) out16[r * N + c] = f32_to_bf16_bits(gelu_one(x, erf_form));
      b += d;
    }
  __shared__ float sb[8][33];
  sb[ty][tx] = b;
  __syncthreads();
  if (ty != 0 || c >= N) return;
  float tb = 0.0f;
  for (int y = 0; y < 8; ++y) tb += sb[y][tx];
  part[blockIdx.y * N + c] = tb;
}

}  // namespace bertcc::cuda::pw
