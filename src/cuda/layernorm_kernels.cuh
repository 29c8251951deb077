// LayerNorm forward (plain and after a residual sum) and the input gradient of its backward, one
// warp per row with the row held in registers (host code: elementwise.cu). For rows of C <= 1024
// floats with C % 4 == 0 and 16-byte aligned buffers (BERT's hidden sizes): lane L holds the float4
// groups L, L + 32, ... (V of them, V = ceil(C / 128)), so each input is read from memory once, with
// 16-byte loads; the general kernels read a row two or three times, four bytes at a time.
// The sums run over a lane's groups in order, then across lanes by warp_sum: another order than the
// general kernels', so the results agree with them (and with the CPU's) to rounding, not bit for
// bit. A header so that tests/cuda/sim can run the source on the CPU.
#pragma once

#include <type_traits>

#include "cuda/common.cuh"

namespace bertcc::cuda::lnr {

constexpr int kMaxGroups = 8;  // C <= 32 lanes x 8 float4 = 1024

__device__ inline float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ inline float sum4(float4 v) { return ((v.x + v.y) + v.z) + v.w; }

// Dropout fused into the row kernels (on: p > 0): element i of the [N, C] buffer is kept when
// (number base + i of the seed's stream >> 8) >= thr, as dropout_fwd and dropout_bwd decide; with
// quad (base % 4 == 0; C % 4 == 0 here) a float4 group's four numbers are one Philox block.
struct RowDropout {
  bool on = false, quad = false;
  float scale = 1.0f;
  uint32_t thr = 0;
  uint64_t seed = 0, base = 0;
};
__device__ inline void draws(uint32_t (&w)[4], const RowDropout& d, uint64_t idx) {
  if (d.quad) {
    philox4(d.seed, (d.base + idx) >> 2, w);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = philox_u32(d.seed, d.base + idx + static_cast<uint64_t>(e));
  }
}

// The rows of a block: warp w of block b is row b * (blockDim.x / 32) + w.
__device__ inline int64_t warp_row() { return blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5); }

// out = (x - mean) * rstd * w + b, x = a (+ r, written to sum when Residual and sum is not null; a
// through the dropout d first); out16 (may be null) its bf16 rounding; mean and rstd per row.
template <int V, bool Residual>
__global__ void fwd(float* out, uint16_t* out16, float* sum, float* mean, float* rstd, const float* a, const float* r,
                    const float* w, const float* b, int64_t N, int64_t C, float eps, RowDropout d) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const int lane = threadIdx.x & 31;
  const int64_t G = C / 4;  // float4 groups in a row
  float4 x[V];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t g = lane + 32 * k;
    x[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (g < G) {
      x[k] = ld4(a + n * C + 4 * g);
      if (Residual && d.on) {  // dropout_fwd's expression, element by element
        uint32_t u[4];
        draws(u, d, static_cast<uint64_t>(n * C + 4 * g));
        x[k].x = (u[0] >> 8) >= d.thr ? x[k].x * d.scale : 0.0f;
        x[k].y = (u[1] >> 8) >= d.thr ? x[k].y * d.scale : 0.0f;
        x[k].z = (u[2] >> 8) >= d.thr ? x[k].z * d.scale : 0.0f;
        x[k].w = (u[3] >> 8) >= d.thr ? x[k].w * d.scale : 0.0f;
      }
      if (Residual) {
        const float4 y = ld4(r + n * C + 4 * g);
        x[k].x += y.x, x[k].y += y.y, x[k].z += y.z, x[k].w += y.w;
        if (sum) st4(sum + n * C + 4 * g, x[k]);
      }
      s += sum4(x[k]);
    }
  }
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k)
    if (lane + 32 * k < G) {
      const float d0 = x[k].x - m, d1 = x[k].y - m, d2 = x[k].z - m, d3 = x[k].w - m;
      v += ((d0 * d0 + d1 * d1) + d2 * d2) + d3 * d3;
    }
  const float rs = 1.0f / sqrtf(warp_sum(v) / static_cast<float>(C) + eps);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t g = lane + 32 * k;
    if (g >= G) continue;
    const float4 wg = ld4(w + 4 * g), bg = ld4(b + 4 * g);
    float4 y;
    y.x = (x[k].x - m) * rs * wg.x + bg.x;
    y.y = (x[k].y - m) * rs * wg.y + bg.y;
    y.z = (x[k].z - m) * rs * wg.z + bg.z;
    y.w = (x[k].w - m) * rs * wg.w + bg.w;
    st4(out + n * C + 4 * g, y);
    if (out16) store_bf16x4(out16 + n * C + 4 * g, y.x, y.y, y.z, y.w);
  }
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = rs;
  }
}

// dinp (+)= (w * dout - mean(w * dout) - xhat * mean(w * dout * xhat)) * rstd, xhat = (x - mean) * rstd;
// with the dropout d on, also dbranch = dinp through it (dropout_bwd's fused multiply-add onto +0)
// and dbranch16 (may be null) its bf16 rounding
template <int V>
__global__ void bwd_input(float* dinp, const float* dout, const float* inp, const float* w, const float* mean,
                          const float* rstd, int64_t N, int64_t C, bool overwrite, RowDropout d = {},
                          float* dbranch = nullptr, uint16_t* dbranch16 = nullptr) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const int lane = threadIdx.x & 31;
  const int64_t G = C / 4;
  const float m = mean[n], s = rstd[n];
  float4 dn[V], xh[V];
  float a = 0.0f, bs = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t g = lane + 32 * k;
    float4 d = make_float4(0.0f, 0.0f, 0.0f, 0.0f), x = d, wg = d;
    if (g < G) d = ld4(dout + n * C + 4 * g), x = ld4(inp + n * C + 4 * g), wg = ld4(w + 4 * g);
    dn[k] = make_float4(wg.x * d.x, wg.y * d.y, wg.z * d.z, wg.w * d.w);
    xh[k] = make_float4((x.x - m) * s, (x.y - m) * s, (x.z - m) * s, (x.w - m) * s);
    if (g < G) {
      a += sum4(dn[k]);
      bs += ((dn[k].x * xh[k].x + dn[k].y * xh[k].y) + dn[k].z * xh[k].z) + dn[k].w * xh[k].w;
    }
  }
  const float dm = warp_sum(a) / static_cast<float>(C);
  const float dnm = warp_sum(bs) / static_cast<float>(C);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t g = lane + 32 * k;
    if (g >= G) continue;
    float4 prev = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // +0: the bits of adding to a zeroed buffer
    if (!overwrite) prev = ld4(dinp + n * C + 4 * g);
    float4 o;
    o.x = prev.x + (dn[k].x - dm - xh[k].x * dnm) * s;
    o.y = prev.y + (dn[k].y - dm - xh[k].y * dnm) * s;
    o.z = prev.z + (dn[k].z - dm - xh[k].z * dnm) * s;
    o.w = prev.w + (dn[k].w - dm - xh[k].w * dnm) * s;
    st4(dinp + n * C + 4 * g, o);
    if (d.on) {
      uint32_t u[4];
      draws(u, d, static_cast<uint64_t>(n * C + 4 * g));
      float4 q;
      q.x = fmaf((u[0] >> 8) >= d.thr ? o.x : 0.0f, d.scale, 0.0f);
      q.y = fmaf((u[1] >> 8) >= d.thr ? o.y : 0.0f, d.scale, 0.0f);
      q.z = fmaf((u[2] >> 8) >= d.thr ? o.z : 0.0f, d.scale, 0.0f);
      q.w = fmaf((u[3] >> 8) >= d.thr ? o.w : 0.0f, d.scale, 0.0f);
      st4(dbranch + n * C + 4 * g, q);
      if (dbranch16) store_bf16x4(dbranch16 + n * C + 4 * g, q.x, q.y, q.z, q.w);
    }
  }
}

// V for a row of C floats, or 0 when these kernels do not take it.
inline int groups_for(int64_t C) {
  if (C <= 0 || C % 4 != 0 || C > 128 * kMaxGroups) return 0;
  return static_cast<int>((C + 127) / 128);
}

// f(std::integral_constant<int, V>) for V in 1..kMaxGroups
template <class F>
void dispatch_groups(int V, F f) {
  switch (V) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

}  // namespace bertcc::cuda::lnr
