// The two kernels that put bertcc's attention calls into the form cuDNN's SDPA graphs take
// (attention/cudnn_switch.cu; BERTCC_ATTENTION=cudnn): key lengths from the additive mask, and the dropout
// decisions as a bf16 keep mask. Compiled by nvcc and, for tests/cuda/sim, by the host compiler.
#pragma once
#include <cstdint>

#include "cuda/attention/common.cuh"

namespace bertcc::cuda::attn {

// A key is padding when its additive mask is at most this (BERT's -10000; count_keys' kPadMask).
constexpr float kCudnnPadMask = -10000.0f;

// Per sequence b (one warp, 32 threads, per sequence; grid B): kv_len[b] = one past the last key
// whose mask is above kCudnnPadMask (NaN counts as above; 0 when every key is padding), q_len[b] =
// T (bertcc computes every query row), and prefix[b] = 1 iff the row is right-padded: keys 0 to
// kv_len[b] - 1 at exactly 0, the rest at most kCudnnPadMask, and kv_len[b] >= 1 (there cuDNN's
// length gives bertcc's softmax: a padding key's probability is exactly 0 in both, count_keys'
// argument). Otherwise 0: a key inside the length masked (a hole), an unmasked key whose mask is
// not 0 (a bias cuDNN's graph does not add), or no key at all (bertcc's softmax then spreads over
// every key, cuDNN's over none).
__global__ void __launch_bounds__(32)
    mask_lengths(int32_t* q_len, int32_t* kv_len, int32_t* prefix, const float* mask_add, int64_t T) {
  const int64_t b = blockIdx.x;
  const float* m = mask_add + b * T;
  int32_t last = -1, unmasked = 0, biased = 0;
  for (int64_t j = threadIdx.x; j < T; j += 32) {
    const float v = m[j];
    if (!(v <= kCudnnPadMask)) {
      last = static_cast<int32_t>(j);  // j grows: the thread's last
      ++unmasked;
      if (v != 0.0f) biased = 1;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const int32_t l = __shfl_xor_sync(0xFFFFFFFFu, last, o);
    last = l > last ? l : last;
    unmasked += __shfl_xor_sync(0xFFFFFFFFu, unmasked, o);
    biased |= __shfl_xor_sync(0xFFFFFFFFu, biased, o);
  }
  if (threadIdx.x == 0) {
    q_len[b] = static_cast<int32_t>(T);
    kv_len[b] = last + 1;
    // no holes: every key below the last unmasked one is unmasked
    prefix[b] = last >= 0 && unmasked == last + 1 && !biased ? 1 : 0;
  }
}

// The contract check of a caller that said its masks are right-padded (AttentionHints): a block
// whose sequence is not traps, so that the promise broken stops the run at the next
// synchronisation ("unspecified launch failure") instead of cuDNN computing another attention.
__global__ void __launch_bounds__(32) require_prefix(const int32_t* prefix, int64_t B) {
  for (int64_t b = threadIdx.x; b < B; b += 32)
    if (!prefix[b]) {
      printf(
          "bertcc: BERTCC_ATTENTION=cudnn: the attention mask of sequence %lld is not right-padded, as its "
          "caller said\n",
          static_cast<long long>(b));
      __trap();
    }
}

// The dropout decisions of head row bh (b*NH + h) as cuDNN's mask: drop[(bh*T + i)*T + j] = 1.0 (bf16
// 0x3F80) where attn::keep(s, bh, i, j), else 0 (the decisions of bertcc's kernels and the CPU:
// bertcc/rng.h's numbering). Keys j and j + 1 (j even) share a number: one thread per pair, one
// Philox block per pair.
__global__ void __launch_bounds__(256) keep_mask(uint16_t* drop, Shape s) {
  const int64_t T = s.T, pairs = (T + 1) / 2;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= s.B * s.NH * T * pairs) return;
  const int64_t row = t / pairs, j = 2 * (t % pairs);  // row = bh*T + i
  const int64_t bh = row / T, i = row % T;
  const uint32_t x = philox_u32(s.seed, s.base + attention_drop_number(bh, i, j, T));
  uint16_t* d = drop + row * T + j;
  d[0] = attention_drop_bits(x, j) >= s.thr ? 0x3F80u : 0u;
  if (j + 1 < T) d[1] = attention_drop_bits(x, j + 1) >= s.thr ? 0x3F80u : 0u;
}

// After cuDNN's backward: dK and dV of sequence b's keys j >= kv_len[b] set to +0 in dqkv16
// [B, T, 3C] (bertcc's kernels write zeros there, the exact gradient of a key of probability 0;
// cuDNN's backward leaves those rows to itself). One thread per (row, 8-element group) of the 2C
// columns; C a multiple of 8.
__global__ void __launch_bounds__(256)
    zero_padding_keys(uint16_t* dqkv16, const int32_t* kv_len, int64_t B, int64_t T, int64_t C) {
  const int64_t groups = 2 * C / 8;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= B * T * groups) return;
  const int64_t row = t / groups, b = row / T, j = row % T;
  if (j < kv_len[b]) return;
  uint16_t* d = dqkv16 + row * 3 * C + C + (t % groups) * 8;
  for (int k = 0; k < 8; ++k) d[k] = 0;
}

}  // namespace bertcc::cuda::attn
