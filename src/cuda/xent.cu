// Softmax cross-entropy fused with its gradient, one block per row (kernels/xent.cpp's twin: the
// first maximum, the sum of exponentials in double, the loss and the gradient as there).
#include <cfloat>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"

namespace bertcc::cuda {
namespace {

constexpr int kThreads = 512;

__global__ void xent_rows(float* logits, float* losses, const int32_t* labels, int64_t V, int32_t ignore_index,
                          float grad_scale, unsigned long long* counts) {
  const int64_t n = blockIdx.x;
  float* x = logits + n * V;
  const int32_t y = labels[n];
  if (y == ignore_index) {
    if (threadIdx.x == 0) losses[n] = 0.0f;
    if (grad_scale != 0.0f)
      for (int64_t v = threadIdx.x; v < V; v += blockDim.x) x[v] = 0.0f;
    return;
  }
  // first maximum: largest value, smallest index among equals
  float mx = -INFINITY;
  int64_t arg = V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    if (x[v] > mx || (arg == V && x[v] == mx)) {
      mx = x[v];
      arg = v;
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mx, o);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
    if (om > mx || (om == mx && oa < arg)) {
      mx = om;
      arg = oa;
    }
  }
  __shared__ float smx[32];
  __shared__ int64_t sarg[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) {
    smx[warp] = mx;
    sarg[warp] = arg;
  }
  __syncthreads();
  if (warp == 0) {
    mx = lane < nw ? smx[lane] : -INFINITY;
    arg = lane < nw ? sarg[lane] : V;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, mx, o);
      const int64_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
      if (om > mx || (om == mx && oa < arg)) {
        mx = om;
        arg = oa;
      }
    }
    if (lane == 0) {
      smx[0] = mx;
      sarg[0] = arg;
    }
  }
  __syncthreads();
  mx = smx[0];
  arg = sarg[0];
  double s = 0.0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += exp(static_cast<double>(x[v] - mx));
  s = block_sum(s);
  const float lse = mx + static_cast<float>(log(s));
  const float xy = x[y];
  __syncthreads();  // every thread has read x[y] before the gradient overwrites it
  if (threadIdx.x == 0) {
    losses[n] = lse - xy;
    atomicAdd(&counts[0], 1ull);
    if (arg == y) atomicAdd(&counts[1], 1ull);
  }
  if (grad_scale != 0.0f) {
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) x[v] = expf(x[v] - lse) * grad_scale;
    __syncthreads();
    if (threadIdx.x == 0) x[y] -= grad_scale;
  }
}

// One block per masked position: each thread keeps its first maximum over v = tid, tid + blockDim,
// ... (ascending, strictly greater wins, NaN never), then the block keeps the largest value and,
// among equal ones, the lowest index: kernels::gumbel_argmax's first maximum. The noise is
// computed in double as there (CUDA's log is within 1 ulp of glibc's: a pick can differ only where
// two candidates are within an ulp of double).
__global__ void gumbel_rows(int32_t* picks, const float* logits, int64_t V, uint64_t seed, uint64_t base) {
  const int64_t m = blockIdx.x;
  const float* x = logits + m * V;
  double best_v = -INFINITY;
  int32_t best = INT32_MAX;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const uint32_t r = philox_u32(seed, base + static_cast<uint64_t>(m * V + v));
    const double u = (static_cast<double>(r >> 8) + 0.5) / 16777216.0;
    const double s = static_cast<double>(x[v]) - log(-log(u));
    if (s > best_v) {
      best_v = s;
      best = static_cast<int32_t>(v);
    }
  }
  __shared__ double sv[kThreads];
  __shared__ int32_t si[kThreads];
  sv[threadIdx.x] = best_v;
  si[threadIdx.x] = best;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      const double ov = sv[threadIdx.x + w];
      const int32_t oi = si[threadIdx.x + w];
      if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) picks[m] = si[0] == INT32_MAX ? 0 : si[0];  // no finite candidate: 0, as the host
}

// One thread per (row b, column c), t in order, in double: kernels::weighted_row_sums's sums.
__global__ void weighted_rows(float* out, int64_t out_ld, const float* x, const double* w, int64_t T, int64_t C) {
  const int64_t b = blockIdx.y, c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  double acc = 0.0;
  for (int64_t t = 0; t < T; ++t) acc += w[b * T + t] * static_cast<double>(x[(b * T + t) * C + c]);
  out[b * out_ld + c] = static_cast<float>(acc);
}

}  // namespace

void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B, int64_t T,
                       int64_t C) {
  if (B == 0 || C == 0) return;
  BERTCC_CHECK(B <= 65535, "weighted_row_sums: ", B, " rows is more than this kernel's grid takes");
  static Scratch buf;  // (grow-only buffers here and below: no cudaMalloc/cudaFree per call)
  const double* w = buf.upload(w_host, static_cast<size_t>(B * T));
  weighted_rows<<<dim3(grid_for(C, 128), static_cast<unsigned>(B)), 128, 0, stream()>>>(out, out_ld, x, w, T, C);
  BERTCC_CUDA_LAUNCHED("weighted_row_sums");
}

void gumbel_argmax(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng, uint64_t base) {
  if (M == 0) return;
  static Scratch buf;
  int32_t* picks = buf.take<int32_t>(static_cast<size_t>(M));
  gumbel_rows<<<static_cast<unsigned>(M), kThreads, 0, stream()>>>(picks, logits, V, rng.seed, base);
  BERTCC_CUDA_LAUNCHED("gumbel_argmax");
  copy_to_host(picks_host, picks, static_cast<size_t>(M) * sizeof(int32_t));
}

int64_t softmax_xent_forward_backward(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                                      int32_t ignore_index, float grad_scale, int64_t* num_correct) {
  if (N == 0) return 0;
  static Scratch buf;
  auto* counts = buf.take<unsigned long long>(2);
  zero(counts, 2 * sizeof(unsigned long long));
  xent_rows<<<static_cast<unsigned>(N), kThreads, 0, stream()>>>(logits, losses, labels, V, ignore_index, grad_scale,
                                                                 counts);
  BERTCC_CUDA_LAUNCHED("softmax_xent_forward_backward");
  unsigned long long h[2] = {0, 0};
  copy_to_host(h, counts, sizeof h);
  if (num_correct) *num_correct += static_cast<int64_t>(h[1]);
  return static_cast<int64_t>(h[0]);
}

}  // namespace bertcc::cuda
