// The CUDA kernels whose sums reproduce the CPU's order bit for bit: the embedding (and scatter)
// row gradients, and the gradient norm's blocks. A header so that tests/cuda/sim can run their
// source on the CPU (BERTCC_CUDA_SIM) against the CPU kernels.
#pragma once
#include "bertcc/optim.h"
#include "cuda/common.cuh"

namespace bertcc::cuda {
namespace {  // each including file its own copy (kernels are not inline)

// dwpe[t] += dout[b*T + t] for b in order: one thread per (t, c), the sum in a register.
// grid (T, column blocks of 128)
__global__ void position_grad(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) {
  const int64_t t = blockIdx.x, c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float g = dwpe[t * C + c];
  for (int64_t b = 0; b < B; ++b) g += dout[(b * T + t) * C + c];
  dwpe[t * C + c] = g;
}

__global__ void iota_k(int32_t* v, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] = static_cast<int32_t>(i);
}

// After a stable sort of (key, n) by key: block (k, column block) works only where a run of equal
// keys starts at k; it finds the run's end (the first different key, searched a block-width at a
// time) and adds the run's rows (n ascending) into dst[key], one column per thread, the sum in a
// register. N < 2^31.
template <class Key>
__global__ void run_add(float* dst, const float* src, const Key* keys, const int32_t* pos, int32_t N, int64_t C) {
  __shared__ int end;
  const int k = static_cast<int>(blockIdx.x);
  const Key key = keys[k];
  if (k > 0 && keys[k - 1] == key) return;  // uniform over the block
  if (threadIdx.x == 0) end = N;
  __syncthreads();
  for (int base = k + 1; base < N; base += static_cast<int>(blockDim.x)) {
    const int j = base + static_cast<int>(threadIdx.x);
    if (j < N && keys[j] != key) atomicMin(&end, j);  // sorted: the first different key is the end
    __syncthreads();
    const int e = end;
    __syncthreads();                                     // every thread has read it before the next round may lower it
    if (e < base + static_cast<int>(blockDim.x)) break;  // the same decision in every thread
  }
  const int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float* d = dst + static_cast<int64_t>(key) * C + c;
  float g = *d;
  for (int j = k; j < end; ++j) g += src[static_cast<int64_t>(pos[j]) * C + c];
  *d = g;
}

// The CPU's blocked sum of squares (optim.cpp: blocked_sumsq / sumsq_slice), bit for bit: per
// block of kBlock elements, 16 fp32 lanes, lane k taking elements k, k + 16, ... in order with a
// fused multiply-add (what the CPU build compiles acc += x*x to: vfmadd, -march=native), then the
// lanes added in double in lane order. So the unsharded norm on the device equals the ZeRO-1 norm,
// which is summed on the host from each rank's downloaded part. Each half-warp takes one block
// (kSumsqBlocksPerCta per CTA of kSumsqThreads): all 32 lanes busy, and eight loads of a lane in
// flight before its chain of multiply-adds reads them. (It was one warp per block with 16 lanes
// busy: 41,000 one-warp CTAs for BERT-large, held to 32 resident warps per SM by the CTA limit.)
constexpr int kSumsqThreads = 256, kSumsqBlocksPerCta = kSumsqThreads / 16;
__global__ void __launch_bounds__(kSumsqThreads)
    sumsq_blocks(double* __restrict__ part, const float* __restrict__ x, int64_t n) {
  constexpr int64_t kBlock = static_cast<int64_t>(kNormBlock);
  __shared__ float lanes[kSumsqBlocksPerCta][16];
  const int half = static_cast<int>(threadIdx.x) / 16, k = static_cast<int>(threadIdx.x) % 16;
  const int64_t nb = (n + kBlock - 1) / kBlock, blk = static_cast<int64_t>(blockIdx.x) * kSumsqBlocksPerCta + half;
  if (blk < nb) {
    const int64_t i0 = blk * kBlock, i1 = min(n, i0 + kBlock);
    float acc = 0.0f;
    int64_t i = i0 + k;
    for (; i + 7 * 16 < i1; i += 8 * 16) {  // eight loads, then the eight multiply-adds in order
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = x[i + u * 16];
#pragma unroll
      for (int u = 0; u < 8; ++u) acc = __fmaf_rn(v[u], v[u], acc);
    }
    for (; i < i1; i += 16) acc = __fmaf_rn(x[i], x[i], acc);
    lanes[half][k] = acc;
  }
  __syncwarp();
  if (k == 0 && blk < nb) {
    double s = 0.0;
    for (int j = 0; j < 16; ++j) s += lanes[half][j];
    part[blk] = s;
  }
}

}  // namespace
}  // namespace bertcc::cuda
