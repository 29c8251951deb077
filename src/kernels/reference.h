// Double-precision reference kernels: simple loops, no threading, used only by tests.
#pragma once
#include <cstdint>
#include <vector>

#include "bertcc/config.h"

namespace bertcc::ref {

using vec = std::vector<double>;

// C[M,N] = alpha * op(A) op(B) (+ bias) (+ C0), A/B given densely in their stored layout.
vec gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const vec& A, const vec& B, double alpha, const vec* bias,
         const vec* C0);
vec layernorm(const vec& x, const vec& w, const vec& b, int64_t N, int64_t C, double eps);
vec gelu(const vec& x, Activation act);
vec embeddings(const std::vector<int32_t>& ids, const std::vector<int32_t>& seg, const vec& wte, const vec& wpe,
               const vec& wtt, int64_t B, int64_t T, int64_t C);
// keep[B*NH*T*T] holds the dropout keep mask (1/0), scale 1/(1-p) applied where kept.
vec attention(const vec& qkv, const vec& mask_add, const std::vector<uint8_t>* keep, double p, int64_t B, int64_t T,
              int64_t C, int64_t NH);
// Mean cross-entropy over rows whose label != ignore.
double xent(const vec& logits, const std::vector<int32_t>& labels, int64_t N, int64_t V, int32_t ignore);

}  // namespace bertcc::ref
