// A CPU stand-in for the few CUDA features the simulated kernels use (the Tensor Core attention,
// src/cuda/attention/tensor_core_kernels.cuh; the ordered sums, src/cuda/ordered_sums.cuh), so that their
// source runs here, where there is no GPU: one fiber (a stack of its own, switched to by the
// runtime, on the calling OS thread) per CUDA thread, one block at a time; __syncthreads and the
// warp's collectives are barriers (blocks of whole warps only). Fibers rather than OS threads: a
// barrier is then a switch of a few registers rather than 128 threads put to sleep and woken by
// the OS, and a warp's mma operands are widened once rather than by each of its 32 lanes (the
// attention test: 283 s on two cores before, about 10 s after). Between barriers the fibers run in
// turn, each until it waits: in thread order, and in reverse order on alternate rounds, so that the
// order is not always the one that hides a read of a lower thread's write with no barrier between.
// A warp collective (shuffle, ballot, ldmatrix, mma.sync) is one barrier whose last arriving lane
// computes the whole warp's results, as the hardware reads every lane's operands at once; each
// lane takes its own after the barrier, and the next collective's results are computed only once
// every lane has arrived at it, so after it has taken them.
// mma.sync.m16n8k16 is computed from the PTX ISA's fragment layout (written out below
// independently of the kernels' own fragment loaders, so it checks them). Include before the
// kernels, with BERTCC_CUDA_SIM defined.
#pragma once
#ifndef BERTCC_CUDA_SIM
#error "define BERTCC_CUDA_SIM before including sim_runtime.h"
#endif
#include <sys/mman.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bertcc/dtype.h"

// x86-64 switches stacks with the few instructions below; elsewhere with ucontext, whose every
// switch is a system call (the signal mask: the attention test took 325 s so, 8 s with the
// instructions below, on a loaded 2-core machine).
// Under AddressSanitizer each switch is announced to it (__sanitizer_*_switch_fiber).
#if defined(__SANITIZE_ADDRESS__)
#define BERTCC_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BERTCC_SIM_ASAN 1
#endif
#endif
#if defined(__x86_64__) && !defined(BERTCC_SIM_UCONTEXT)
#define BERTCC_SIM_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif
#ifdef BERTCC_SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

struct sim_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline sim_dim3 threadIdx, blockIdx;  // every fiber runs on the launching OS thread
inline sim_dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static  // one block runs at a time, so a static is the block's shared memory

#ifdef BERTCC_SIM_ASM_SWITCH
// bertcc_sim_switch(save, load): saves the callee-saved registers and the floating-point control
// words on this stack, its stack pointer into *save, and resumes the stack at `load` (saved so, or
// made by sim::Fiber::start: its return address is bertcc_sim_start, which calls r13(r12)).
extern "C" void bertcc_sim_switch(void** save, void* load);
extern "C" void bertcc_sim_start();
asm(R"(
  .text
  .weak bertcc_sim_switch
  .type bertcc_sim_switch, @function
bertcc_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size bertcc_sim_switch, .-bertcc_sim_switch
  .weak bertcc_sim_start
  .type bertcc_sim_start, @function
bertcc_sim_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size bertcc_sim_start, .-bertcc_sim_start
)");
#endif

namespace sim {
// A barrier of `count` fibers: the last to arrive runs the completion and goes on; the others wait
// for the generation to change.
struct Barrier {
  unsigned count = 0, arrived = 0, gen = 0;
};
struct Fiber {
  unsigned char* stack = nullptr;
  const Barrier* bar = nullptr;  // waited on, until its generation leaves `gen`
  unsigned gen = 0;
  bool done = false;
#ifdef BERTCC_SIM_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
#ifdef BERTCC_SIM_ASAN
  void* fake_stack = nullptr;
#endif
};
constexpr size_t kStackBytes = size_t{1} << 20;  // reserved, touched only as deep as a kernel goes

inline std::vector<Fiber> fibers;
inline unsigned current = 0;
#ifdef BERTCC_SIM_ASM_SWITCH
inline void* sched_sp = nullptr;
#else
inline ucontext_t sched_ctx;
#endif
#ifdef BERTCC_SIM_ASAN
inline void* sched_fake_stack = nullptr;
inline const void* sched_stack_bottom = nullptr;
inline size_t sched_stack_size = 0;
#endif
inline Barrier block_bar, warp_bar[32];
inline unsigned char* dynamic_smem = nullptr;
inline void* body_fn = nullptr;  // the launch's body (a callable) and its caller
inline void (*body_call)(void*) = nullptr;

// a warp's collective: inputs one slot per thread, outputs computed by the warp's last lane
inline double exchange[1024], shfl_out[1024];
inline int shfl_src[1024];
inline unsigned ballot_out[32];
inline uint32_t frag_a[1024][4], frag_b[1024][2];
inline float mma_A[32][16][16], mma_B[32][16][8];  // per warp: the operands, widened
inline const uint16_t* row_addr[1024];             // a warp's ldmatrix row addresses
inline uint32_t ldm_out[1024][4];

// back to the scheduler (the fiber's own state saved); returns when the scheduler resumes it
inline void yield() {
  Fiber& f = fibers[current];
#ifdef BERTCC_SIM_ASAN
  __sanitizer_start_switch_fiber(f.done ? nullptr : &f.fake_stack, sched_stack_bottom, sched_stack_size);
#endif
#ifdef BERTCC_SIM_ASM_SWITCH
  bertcc_sim_switch(&f.sp, sched_sp);
#else
  swapcontext(&f.ctx, &sched_ctx);
#endif
#ifdef BERTCC_SIM_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &sched_stack_bottom, &sched_stack_size);
#endif
}
inline void fiber_main() {
#ifdef BERTCC_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
  body_call(body_fn);
  fibers[current].done = true;
  yield();  // never resumed
  std::abort();
}
#ifdef BERTCC_SIM_ASM_SWITCH
extern "C" inline void sim_fiber_entry(void*) { fiber_main(); }
#endif
inline void wait(const Barrier& b) {
  Fiber& f = fibers[current];
  f.bar = &b;
  f.gen = b.gen;
  yield();
}
template <class F>
inline void arrive(Barrier& b, F&& completion) {
  if (++b.arrived == b.count) {
    b.arrived = 0;
    completion();
    ++b.gen;
  } else {
    wait(b);
  }
}
template <class F>
inline void warp_collective(F&& completion) {
  arrive(warp_bar[threadIdx.x / 32], completion);
}
inline void warp_sync() {
  warp_collective([] {});
}

// f to run fiber_main from the top of its stack when next switched to
inline void start(Fiber& f) {
#ifdef BERTCC_SIM_ASM_SWITCH
  // bertcc_sim_switch's frame: control words, r15 .. r12, rbx, rbp, the return address; the
  // stack 16-byte aligned at bertcc_sim_start's call, as the ABI asks
  auto* top = reinterpret_cast<uint64_t*>(f.stack + kStackBytes - 64);
  uint32_t ctl[2];
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(ctl[0]), "=m"(ctl[1]));
  std::memcpy(&top[-8], ctl, 8);
  top[-7] = top[-6] = 0;                                   // r15, r14
  top[-5] = reinterpret_cast<uint64_t>(&sim_fiber_entry);  // r13: the entry
  top[-4] = 0;                                             // r12: its argument
  top[-3] = top[-2] = 0;                                   // rbx, rbp
  top[-1] = reinterpret_cast<uint64_t>(&bertcc_sim_start);
  f.sp = &top[-8];
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
#endif
}

template <class F>
void launch(sim_dim3 grid, unsigned threads, size_t smem_bytes, F body) {
  if (threads == 0 || threads % 32 != 0 || threads > 1024) std::abort();  // whole warps only
  std::vector<unsigned char> smem(smem_bytes + 16);
  auto* p = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem.data()) + 15) & ~uintptr_t{15});
  blockDim = {threads, 1, 1};
  gridDim = grid;
  if (fibers.size() < threads) fibers.resize(threads);
  for (unsigned t = 0; t < threads; ++t)
    if (!fibers[t].stack) {
      void* m = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) std::abort();
      mprotect(m, 4096, PROT_NONE);  // a kernel that overflows its stack faults here
      fibers[t].stack = static_cast<unsigned char*>(m);
    }
  body_fn = &body;
  body_call = [](void* f) { (*static_cast<F*>(f))(); };
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::memset(p, 0xFF, smem_bytes);  // poison: NaN in bf16 and fp16, so an unwritten read shows
        dynamic_smem = p;
        blockIdx = {bx, by, bz};
        block_bar = Barrier{threads, 0, 0};
        for (unsigned w = 0; w < threads / 32; ++w) warp_bar[w] = Barrier{32, 0, 0};
        for (unsigned t = 0; t < threads; ++t) {
          Fiber& f = fibers[t];
          f.bar = nullptr;
          f.done = false;
          start(f);
        }
        // rounds over the fibers, each run until it waits at a barrier or ends
        unsigned alive = threads;
        bool reverse = false;
        while (alive > 0) {
          bool ran = false;
          for (unsigned k = 0; k < threads; ++k) {
            const unsigned t = reverse ? threads - 1 - k : k;
            Fiber& f = fibers[t];
            if (f.done || (f.bar && f.bar->gen == f.gen)) continue;
            f.bar = nullptr;
            current = t;
            threadIdx = {t, 0, 0};
#ifdef BERTCC_SIM_ASAN
            __sanitizer_start_switch_fiber(&sched_fake_stack, f.stack, kStackBytes);
#endif
#ifdef BERTCC_SIM_ASM_SWITCH
            bertcc_sim_switch(&sched_sp, f.sp);
#else
            swapcontext(&sched_ctx, &f.ctx);
#endif
#ifdef BERTCC_SIM_ASAN
            __sanitizer_finish_switch_fiber(sched_fake_stack, nullptr, nullptr);
#endif
            ran = true;
            alive -= f.done;
          }
          if (!ran) {  // every live thread waits at a barrier the others never reach
            std::fprintf(stderr, "sim: block (%u, %u, %u): %u threads wait at barriers that cannot complete\n", bx, by,
                         bz, alive);
            std::abort();
          }
          reverse = !reverse;
        }
      }
}
}  // namespace sim

#define BERTCC_DYNAMIC_SMEM(name) unsigned char* name = ::sim::dynamic_smem

inline void __syncthreads() {
  sim::arrive(sim::block_bar, [] {});
}
inline void __syncwarp() { sim::warp_sync(); }
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {  // v of lane src of this thread's warp
  const unsigned tid = threadIdx.x, w0 = tid & ~31u;
  sim::exchange[tid] = static_cast<double>(v);
  sim::shfl_src[tid] = src;
  sim::warp_collective([&] {
    for (unsigned L = 0; L < 32; ++L)
      sim::shfl_out[w0 + L] = sim::exchange[w0 + (static_cast<unsigned>(sim::shfl_src[w0 + L]) & 31u)];
  });
  return static_cast<T>(sim::shfl_out[tid]);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int o) {
  return __shfl_sync(mask, v, static_cast<int>((threadIdx.x & 31u) ^ static_cast<unsigned>(o)));
}
inline unsigned __ballot_sync(unsigned, int pred) {  // bit L: lane L's predicate
  const unsigned tid = threadIdx.x, w0 = tid & ~31u;
  sim::exchange[tid] = pred ? 1.0 : 0.0;
  sim::warp_collective([&] {
    unsigned r = 0;
    for (unsigned L = 0; L < 32; ++L)
      if (sim::exchange[w0 + L] != 0.0) r |= 1u << L;
    sim::ballot_out[w0 / 32] = r;
  });
  return sim::ballot_out[w0 / 32];
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
  const unsigned tid = threadIdx.x, w0 = tid & ~31u, w = tid / 32;
  for (int r = 0; r < 4; ++r) sim::frag_a[tid][r] = a[r];
  sim::frag_b[tid][0] = b0;
  sim::frag_b[tid][1] = b1;
  auto& A = sim::mma_A[w];
  auto& B = sim::mma_B[w];
  sim::warp_collective([&] {  // the warp's operands from every lane's fragments
    auto widen = [](uint16_t h) { return BF16 ? bertcc::bf16_to_f32(h) : bertcc::f16_to_f32(h); };
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
  });
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
  sim::warp_collective([&] {  // every lane's registers, shared memory read at once
    for (unsigned L = 0; L < 32; ++L)
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
        sim::ldm_out[w0 + L][i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
      }
  });
  for (unsigned i = 0; i < 4; ++i) r[i] = sim::ldm_out[tid][i];
}
