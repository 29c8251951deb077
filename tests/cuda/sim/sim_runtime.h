// A CPU stand-in for the few CUDA features the simulated kernels use (the Tensor Core attention,
// src/cuda/attention_tc_kernels.cuh; the ordered sums, src/cuda/ordered_sums.cuh), so that their
// source runs here, where there is no GPU: one OS thread per CUDA thread, one block at a time;
// __syncthreads and the warp's collectives are barriers (blocks of whole warps only).
// mma.sync.m16n8k16 is computed from the PTX ISA's fragment layout (written out below
// independently of the kernels' own fragment loaders, so it checks them). Include before the
// kernels, with BERTCC_CUDA_SIM defined.
#pragma once
#ifndef BERTCC_CUDA_SIM
#error "define BERTCC_CUDA_SIM before including sim_runtime.h"
#endif
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "bertcc/dtype.h"

struct sim_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local sim_dim3 threadIdx, blockIdx;
inline sim_dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static  // one block runs at a time, so a static is the block's shared memory

namespace sim {
inline std::unique_ptr<std::barrier<>> block_bar;
inline std::unique_ptr<std::barrier<>> warp_bar[32];
inline unsigned char* dynamic_smem = nullptr;
inline double exchange[1024];  // a warp's values in a collective
inline uint32_t frag_a[1024][4], frag_b[1024][2];
inline const uint16_t* row_addr[1024];  // a warp's ldmatrix row addresses
inline void warp_sync() { warp_bar[threadIdx.x / 32]->arrive_and_wait(); }

template <class F>
void launch(sim_dim3 grid, unsigned threads, size_t smem_bytes, F body) {
  std::vector<unsigned char> smem(smem_bytes + 16);
  auto* p = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem.data()) + 15) & ~uintptr_t{15});
  blockDim = {threads, 1, 1};
  gridDim = grid;
  for (unsigned bz = 0; bz < grid.z; ++bz)
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      std::memset(p, 0xFF, smem_bytes);  // poison: NaN in bf16 and fp16, so an unwritten read shows
      dynamic_smem = p;
      block_bar = std::make_unique<std::barrier<>>(threads);
      for (unsigned w = 0; w < threads / 32; ++w) warp_bar[w] = std::make_unique<std::barrier<>>(32);
      std::vector<std::thread> th;
      for (unsigned t = 0; t < threads; ++t)
        th.emplace_back([&, t, bx, by, bz] {
          threadIdx = {t, 0, 0};
          blockIdx = {bx, by, bz};
          body();
        });
      for (auto& x : th) x.join();
    }
}
}  // namespace sim

#define BERTCC_DYNAMIC_SMEM(name) unsigned char* name = ::sim::dynamic_smem

inline void __syncthreads() { sim::block_bar->arrive_and_wait(); }
inline void __syncwarp() { sim::warp_sync(); }
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {  // v of lane src of this thread's warp
  const unsigned tid = threadIdx.x;
  sim::exchange[tid] = static_cast<double>(v);
  sim::warp_sync();
  const T r = static_cast<T>(sim::exchange[(tid & ~31u) | (static_cast<unsigned>(src) & 31u)]);
  sim::warp_sync();
  return r;
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int o) {
  return __shfl_sync(mask, v, static_cast<int>((threadIdx.x & 31u) ^ static_cast<unsigned>(o)));
}
inline unsigned __ballot_sync(unsigned, int pred) {  // bit L: lane L's predicate
  const unsigned tid = threadIdx.x, w0 = tid & ~31u;
  sim::exchange[tid] = pred ? 1.0 : 0.0;
  sim::warp_sync();
  unsigned r = 0;
  for (unsigned L = 0; L < 32; ++L)
    if (sim::exchange[w0 + L] != 0.0) r |= 1u << L;
  sim::warp_sync();
  return r;
}
inline uint32_t __umulhi(uint32_t a, uint32_t b) { return static_cast<uint32_t>((uint64_t{a} * b) >> 32); }
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline void __trap() { std::abort(); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int atomicMin(int* p, int v) {
  std::atomic_ref<int> a(*p);
  int old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct uint2 {
  uint32_t x, y;
};
struct __half {
  uint16_t bits;
};
inline __half __float2half_rn(float x) { return __half{bertcc::f32_to_f16(x)}; }
inline uint16_t __half_as_ushort(__half h) { return h.bits; }

// d += A (16x16) * B (16x8) for the warp, fp32 accumulation, each thread giving its fragments.
// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", g = lane / 4, t = lane % 4,
// elements in register order, the lower one in the lower 16 bits:
//   A a0..a7: row g for a0, a1, a4, a5, else g + 8; column 2t + (i % 2), + 8 for a4..a7
//   B b0..b3: row (k) 2t + (i % 2), + 8 for b2, b3; column (n) g
//   C c0..c3: row g for c0, c1, else g + 8; column 2t + (i % 2)
template <bool BF16>
inline void sim_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const unsigned tid = threadIdx.x, w0 = tid & ~31u;
  for (int r = 0; r < 4; ++r) sim::frag_a[tid][r] = a[r];
  sim::frag_b[tid][0] = b0;
  sim::frag_b[tid][1] = b1;
  sim::warp_sync();
  auto widen = [](uint16_t h) { return BF16 ? bertcc::bf16_to_f32(h) : bertcc::f16_to_f32(h); };
  float A[16][16], B[16][8];
  for (int L = 0; L < 32; ++L) {
    const int g = L / 4, t = L % 4;
    for (int i = 0; i < 8; ++i) {
      const auto h = static_cast<uint16_t>(sim::frag_a[w0 + L][i / 2] >> (16 * (i % 2)));
      A[(i % 4) < 2 ? g : g + 8][2 * t + i % 2 + (i >= 4 ? 8 : 0)] = widen(h);
    }
    for (int i = 0; i < 4; ++i) {
      const auto h = static_cast<uint16_t>(sim::frag_b[w0 + L][i / 2] >> (16 * (i % 2)));
      B[2 * t + i % 2 + (i >= 2 ? 8 : 0)][g] = widen(h);
    }
  }
  sim::warp_sync();  // every fragment read before the next mma overwrites them
  const int g = static_cast<int>(tid % 32) / 4, t = static_cast<int>(tid % 32) % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = i < 2 ? g : g + 8, col = 2 * t + i % 2;
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 for the warp (PTX ISA, "Warp-level matrix load
// instruction: ldmatrix"): lanes 8i .. 8i+7 give the addresses of rows 0..7 of matrix i, 8
// contiguous 16-bit elements each, 16-byte aligned. Destination register i of lane L: without
// .trans, elements 2 (L % 4) and 2 (L % 4) + 1 of row L / 4 of matrix i; with .trans, element L / 4
// of rows 2 (L % 4) and 2 (L % 4) + 1 (the first in the lower 16 bits).
template <bool Trans>
inline void sim_ldmatrix_x4(uint32_t (&r)[4], const uint16_t* p) {
  const unsigned tid = threadIdx.x, w0 = tid & ~31u;
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) std::abort();  // the instruction's alignment rule
  sim::row_addr[tid] = p;
  sim::warp_sync();
  const unsigned L = tid % 32;
  for (unsigned i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!Trans) {
      const uint16_t* row = sim::row_addr[w0 + 8 * i + L / 4];
      lo = row[2 * (L % 4)];
      hi = row[2 * (L % 4) + 1];
    } else {
      lo = sim::row_addr[w0 + 8 * i + 2 * (L % 4)][L / 4];
      hi = sim::row_addr[w0 + 8 * i + 2 * (L % 4) + 1][L / 4];
    }
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  sim::warp_sync();  // every address read before the next ldmatrix overwrites them
}
