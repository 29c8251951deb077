// Shared device helpers for the CUDA kernels: error checks, Philox4x32-10 (bertcc::philox4x32's
// twin: the same counters give the same numbers), block and warp reductions in a fixed order.
// With BERTCC_CUDA_SIM defined (tests/cuda/sim: the kernels run on the CPU, one thread per CUDA
// thread), the CUDA runtime is left out and the simulator supplies the intrinsics used here.
#pragma once
#ifndef BERTCC_CUDA_SIM
#include <cuda_runtime.h>
#endif

#include <cstdint>

#include "bertcc/error.h"
#include "bertcc/rng.h"
#include "cuda/cuda_kernels.h"

namespace bertcc::cuda {

#ifndef BERTCC_CUDA_SIM
inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) fail("CUDA error in ", what, " (", file, ":", line, "): ", cudaGetErrorString(e));
}
#define BERTCC_CUDA_CHECK(expr) ::bertcc::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
// After a launch: configuration errors now, execution errors at the next synchronisation.
#define BERTCC_CUDA_LAUNCHED(name) ::bertcc::cuda::check_cuda(cudaGetLastError(), name, __FILE__, __LINE__)
// The stream every launch, copy and GEMM of this thread is queued on: the legacy default stream,
// or the capture stream while a CUDA graph is being recorded (cuda_kernels.h).
cudaStream_t stream();
#endif

// A grow-only device buffer, kept for the next call of the same size or smaller (no cudaMalloc and
// cudaFree per call). Work is queued in order on one stream, and a synchronous copy from host
// memory waits for the work queued before it, so refilling the buffer cannot race the previous
// call's kernels; growing it waits for them before the old buffer is freed.
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  void* get(size_t n) {
    if (n > bytes) {
      BERTCC_CHECK(!capturing(), "CUDA graph capture: a scratch buffer had to grow to ", n,
                   " bytes inside the recorded forward (its warm-up run should have sized it)");
      synchronize();  // a kernel queued earlier may still read the old buffer
      free(p);
      p = nullptr;  // no dangling buffer if the allocation below throws
      bytes = 0;
      p = alloc(n);
      bytes = n;
    }
    return p;
  }
  template <class T>
  T* take(size_t n) {  // room for n (at least 1) values of T
    return static_cast<T*>(get((n ? n : 1) * sizeof(T)));
  }
  template <class T>
  T* upload(const T* host, size_t n) {  // a device copy of host[0, n)
    T* d = take<T>(n);
    copy_to_device(d, host, n * sizeof(T));
    return d;
  }
};

inline unsigned grid_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// Block `block` of the dropout stream of `seed`: the four numbers of counters 4*block .. 4*block+3.
__device__ inline void philox4(uint64_t seed, uint64_t block, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t h0 = __umulhi(0xD2511F53u, c0), l0 = 0xD2511F53u * c0;
    const uint32_t h1 = __umulhi(0xCD9E8D57u, c2), l1 = 0xCD9E8D57u * c2;
    c0 = h1 ^ c1 ^ k0;
    c1 = l1;
    c2 = h0 ^ c3 ^ k1;
    c3 = l0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Number `idx` of the dropout stream of `seed` (block idx / 4, word idx % 4), as Rng::fill_u32.
__device__ inline uint32_t philox_u32(uint64_t seed, uint64_t idx) {
  uint32_t w[4];
  philox4(seed, idx >> 2, w);
  switch (idx & 3) {
    case 0:
      return w[0];
    case 1:
      return w[1];
    case 2:
      return w[2];
    default:
      return w[3];
  }
}

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// The tree is fixed, so the result depends only on the inputs and the block size.
template <class T>
__device__ inline T block_sum(T v) {
  __shared__ T part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  T r = lane < nw ? part[lane] : T(0);
  return warp_sum(r);
}

__device__ inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ inline float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
// Four values' bf16 roundings at p (8-byte aligned), the first in the lowest bits: one 8-byte store.
__device__ inline void store_bf16x4(uint16_t* p, float a, float b, float c, float d) {
  uint2 v;
  v.x = static_cast<uint32_t>(f32_to_bf16_bits(a)) | (static_cast<uint32_t>(f32_to_bf16_bits(b)) << 16);
  v.y = static_cast<uint32_t>(f32_to_bf16_bits(c)) | (static_cast<uint32_t>(f32_to_bf16_bits(d)) << 16);
  *reinterpret_cast<uint2*>(p) = v;
}
// Four bf16 values at p (8-byte aligned) widened exactly, the first from the lowest bits: one 8-byte load.
__device__ inline void load_bf16x4(const uint16_t* p, float (&x)[4]) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  x[0] = bf16_bits_to_f32(static_cast<uint16_t>(v.x & 0xFFFFu)),
  x[1] = bf16_bits_to_f32(static_cast<uint16_t>(v.x >> 16));
  x[2] = bf16_bits_to_f32(static_cast<uint16_t>(v.y & 0xFFFFu)),
  x[3] = bf16_bits_to_f32(static_cast<uint16_t>(v.y >> 16));
}

}  // namespace bertcc::cuda
