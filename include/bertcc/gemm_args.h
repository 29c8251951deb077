// The arguments of one GEMM, shared by the CPU kernels (kernels/gemm.h) and the CUDA kernels
// (cuda/cuda_kernels.h). Row-major; op(X) = X or X^T chosen per operand:
//   C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] (+ bias[N]) (+ C if accumulate)
#pragma once
#include <cstdint>

#include "bertcc/dtype.h"

namespace bertcc {

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float* C = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;  // [N] or null
  float alpha = 1.0f;
  bool accumulate = false;
  // Batched: `batch` independent products, operands advanced by these strides (elements).
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  // bf16 only: operands already rounded to bf16, same layout as A/B (used instead of packing).
  const bf16_t* A16 = nullptr;
  const bf16_t* B16 = nullptr;
};

}  // namespace bertcc
