// Variable-length attention on CUDA (unpadded batches: Backend::attention_varlen_*), the Tensor
// Core kernels of attention/tensor_core_kernels.cuh over a whole batch. Plain C++, as cuda_kernels.h.
#pragma once
#include <cstdint>

#include "bertcc/dtype.h"
#include "bertcc/rng.h"

namespace bertcc::cuda {
// Sequence b rows cu[b] .. cu[b+1] - 1 (cu: B + 1 host offsets, no sequence empty) of qkv [N, 3C],
// no mask: the whole batch in one launch per kernel (each pass first uploads a small table) rather
// than the padded kernels once per sequence, each sequence with the bits of those on it alone at
// T = its length, its dropout numbers after the previous sequences' and its slice of the saved
// buffer where the per-sequence path (Ops::attention_varlen_*_per_sequence) puts it (so its sizes
// hold). Two forms (attention_varlen_fits):
// - bf16 with qkv16 read in place (head size 16, 32, 64 or 128, C a multiple of 8, qkv16 16-byte
//   aligned), the Tensor Core kernels: forward; backward the row dots, dout's bf16 rounding, dq,
//   dk/dv;
// - fp32 from qkv (head size at most 128), the CUDA-core kernels (attention/fp32_kernels.cuh):
//   forward; backward the row dots, dq, dk/dv; out is written and read (no bf16 copies).
// Unless BERTCC_CUDA_VARLEN=0 (attention_varlen_on: then the per-sequence path, for comparison);
// other calls (fp16, bf16 without an in-place qkv16) take that path.
bool attention_varlen_on();
bool attention_varlen_fits(int64_t C, int64_t NH, Precision prec, const float* qkv, const bf16_t* qkv16);
void attention_varlen_forward(float* out, bf16_t* out16, float* saved, const float* qkv, const bf16_t* qkv16,
                              const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                              uint64_t base, Precision prec);
// work: attention_varlen_backward_work_size() floats (the row dots of every sequence and head).
int64_t attention_varlen_backward_work_size(int64_t N, int64_t NH);
void attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* out,
                               const bf16_t* out16, const float* qkv, const bf16_t* qkv16, const float* saved,
                               const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                               uint64_t base, Precision prec);

}  // namespace bertcc::cuda
