// Softmax cross-entropy fused with its gradient, one block per row (kernels/xent.cpp's twin: the
// first maximum, the sum of exponentials in double, the loss and the gradient as there).
#include <cfloat>

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

}  // namespace

int64_t softmax_xent_forward_backward(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                                      int32_t ignore_index, float grad_scale, int64_t* num_correct) {
  if (N == 0) return 0;
  auto* counts = static_cast<unsigned long long*>(alloc(2 * sizeof(unsigned long long)));
  zero(counts, 2 * sizeof(unsigned long long));
  xent_rows<<<static_cast<unsigned>(N), kThreads>>>(logits, losses, labels, V, ignore_index, grad_scale, counts);
  BERTCC_CUDA_LAUNCHED("softmax_xent_forward_backward");
  unsigned long long h[2] = {0, 0};
  copy_to_host(h, counts, sizeof h);
  free(counts);
  if (num_correct) *num_correct += static_cast<int64_t>(h[1]);
  return static_cast<int64_t>(h[0]);
}

}  // namespace bertcc::cuda
