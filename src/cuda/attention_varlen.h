// Variable-length attention on CUDA (unpadded batches: Backend::attention_varlen_*), the Tensor
// Core kernels of attention_tc_kernels.cuh over a whole batch. Plain C++, as cuda_kernels.h.
#pragma once
#include <cstdint>

#include "bertcc/dtype.h"
#include "bertcc/rng.h"

namespace bertcc::cuda {
// Sequence b rows cu[b] .. cu[b+1] - 1 (cu: B + 1 host offsets, no sequence empty) of qkv16
// [N, 3C], no mask: the whole batch in one launch per kernel (forward; backward: the row dots,
// dout's bf16 rounding, dq, dk/dv; each pass first uploads a small table) rather than the padded
// kernels once per sequence, each sequence with the bits of those on it alone at T = its length,
// its dropout numbers after the previous sequences' and its slice of the saved buffer where the
// per-sequence path (Ops::attention_varlen_*_per_sequence) puts it (so its sizes hold). For bf16
// with qkv16 read in place (attention_varlen_fits: head size 16, 32, 64 or 128, C a multiple of 8,
// qkv16 16-byte aligned) and unless BERTCC_CUDA_VARLEN=0 (attention_varlen_on: then the
// per-sequence path, for comparison); other calls take that path.
bool attention_varlen_on();
bool attention_varlen_fits(int64_t C, int64_t NH, Precision prec, const bf16_t* qkv16);
void attention_varlen_forward(float* out, bf16_t* out16, float* saved, const bf16_t* qkv16, const int64_t* cu,
                              int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base);
// work: attention_varlen_backward_work_size() floats (the row dots of every sequence and head).
int64_t attention_varlen_backward_work_size(int64_t N, int64_t NH);
void attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* out,
                               const bf16_t* out16, const bf16_t* qkv16, const float* saved, const int64_t* cu,
                               int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base);

}  // namespace bertcc::cuda
