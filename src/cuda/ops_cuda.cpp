// CUDA's half of every operation of backend/ops.h: the table of functions (backend/device_ops.h)
// that the CUDA backend hands to Ops when it is made (cuda_backend.cpp). Each entry times its call
// for BERTCC_CUDA_PROFILE (op_timer.h) and calls the kernels of cuda_kernels.h; where the kernels
// take the same arguments as the operation, the entry is timed<name, kernel>.
#include "cuda/ops_cuda.h"

#include <algorithm>
#include <cstddef>

#include "backend/ops.h"
#include "bertcc/error.h"
#include "cuda/attention/varlen.h"
#include "cuda/cuda_kernels.h"
#include "cuda/op_timer.h"

namespace bertcc::cuda {
namespace {

// A string literal as a template argument: the name OpTimer keeps by pointer (a template
// parameter object lives as long as the program).
template <size_t N>
struct OpName {
  char s[N];
  constexpr OpName(const char (&v)[N]) { std::copy_n(v, N, s); }
};

// timed<"name", kernel>: the kernel behind an OpTimer of that name, with the kernel's arguments.
template <OpName name, auto kernel>
struct Timed;
template <OpName name, class R, class... A, R (*kernel)(A...)>
struct Timed<name, kernel> {
  static R call(A... a) {
    const OpTimer timer(name.s);
    return kernel(a...);
  }
};
template <OpName name, auto kernel>
constexpr auto timed = &Timed<name, kernel>::call;

int64_t aligned(int64_t n) { return (n + 15) / 16 * 16; }

bool residual_dropout_layernorm(float* out, float* sum, float* mean, float* rstd, float* a, const float* r,
                                const float* w, const float* b, int64_t N, int64_t C, float eps, bf16_t* out16, float p,
                                const Rng& rng, uint64_t base) {
  const OpTimer timer("residual_dropout_layernorm_forward");
  return residual_dropout_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16, p, rng, base);
}

// bertcc's kernels need scratch for the backward only; cuDNN's path (BERTCC_ATTENTION=cudnn) its
// key lengths and keep mask
int64_t attention_work_hinted(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                              bool inference) {
  return std::max(attention_backward_work_size(B, T, NH),
                  attention_cudnn_work_size(B, T, C, NH, dropout, prec, inference));
}

// cuDNN's path where attention_cudnn_takes the call (a function of the shape and hints alone, as in
// the backward, so that both take the same path), else bertcc's kernels
void attention_fwd(float* out, bf16_t* out16, float* saved, float* work, const float* qkv, const bf16_t* qkv16,
                   const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                   uint64_t base, Precision prec, const AttentionHints& hints) {
  const OpTimer timer("attention_forward");
  if (attention_cudnn_takes(B, T, C, NH, dropout_p, prec, qkv16, hints.right_padded, hints.forward_only))
    return attention_cudnn_forward(out, out16, saved, work, qkv16, mask_add, B, T, C, NH, dropout_p, rng, base,
                                   hints.forward_only);
  return attention_forward(out, saved, qkv, mask_add, B, T, C, NH, dropout_p, rng, base, prec, out16, qkv16);
}

void attention_bwd(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv, const bf16_t* qkv16,
                   const float* out, const bf16_t* out16, const float* saved, const float* mask_add, int64_t B,
                   int64_t T, int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec,
                   const AttentionHints& hints) {
  const OpTimer timer("attention_backward");
  BERTCC_CHECK(!hints.forward_only, "attention_backward: its forward said forward_only");
  bf16_t* const d16 = prec == Precision::BF16 ? dqkv16 : nullptr;
  if (attention_cudnn_takes(B, T, C, NH, dropout_p, prec, qkv16, hints.right_padded, false))
    return attention_cudnn_backward(dqkv, d16, work, dout, qkv16, out16, saved, mask_add, B, T, C, NH, dropout_p, rng,
                                    base);
  return attention_backward(dqkv, work, dout, qkv, out, out16, saved, mask_add, B, T, C, NH, dropout_p, rng, base, prec,
                            d16, qkv16);
}

// the varlen kernels' row dots, beyond the per-sequence calls' scratch
int64_t varlen_work(const int64_t* cu, int64_t B, int64_t, int64_t NH) {
  return aligned(cu[B]) + attention_varlen_backward_work_size(cu[B], NH);
}

// The varlen kernels, where they are on and take the call (attention/varlen.h)
bool varlen_fwd(float* out, bf16_t* out16, float* saved, const float* qkv, const bf16_t* qkv16, const int64_t* cu,
                int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec) {
  if (!attention_varlen_on() || !attention_varlen_fits(C, NH, prec, qkv, qkv16)) return false;
  const OpTimer timer("attention_forward");
  attention_varlen_forward(out, out16, saved, qkv, qkv16, cu, B, C, NH, dropout_p, rng, base, prec);
  return true;
}

bool varlen_bwd(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv, const bf16_t* qkv16,
                const float* out, const bf16_t* out16, const float* saved, const int64_t* cu, int64_t B, int64_t C,
                int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec) {
  if (!attention_varlen_on() || !attention_varlen_fits(C, NH, prec, qkv, qkv16)) return false;
  const OpTimer timer("attention_backward");
  attention_varlen_backward(dqkv, dqkv16, work, dout, out, out16, qkv, qkv16, saved, cu, B, C, NH, dropout_p, rng, base,
                            prec);
  return true;
}

int64_t softmax_xent(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V, int32_t ignore_index,
                     float grad_scale, int64_t* num_correct) {
  const OpTimer timer("softmax_xent");
  return softmax_xent_forward_backward(logits, losses, labels, N, V, ignore_index, grad_scale, num_correct);
}

void linear_fwd(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K, Precision p,
                const bf16_t* W16, const LinearIo& a16) {
  const OpTimer timer("linear_forward");
  BERTCC_CHECK(!a16.y16 || p == Precision::BF16, "linear_forward: a bf16 output outside bf16");
  linear_forward(y, x, W, b, M, N, K, p, W16, a16.x16, a16.keep_x16, a16.y16);
}

void linear_bwd(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M, int64_t N,
                int64_t K, Precision p, const bf16_t* W16, const LinearIo& a16) {
  const OpTimer timer("linear_backward");
  linear_backward(dx, dW, db, dy, x, W, M, N, K, p, W16, a16.dy16, a16.x16, a16.overwrite_dx);
}

constexpr DeviceOps kOps = {
    .copy_rows = timed<"copy_rows", copy_rows>,
    .add_rows = timed<"add_rows", add_rows>,
    .to_bf16 = timed<"to_bf16", to_bf16>,
    .narrow16 = timed<"narrow16", narrow16>,
    .widen16 = timed<"widen16", widen16>,
    .scale = timed<"scale", scale>,
    .embeddings_forward = timed<"embeddings_forward", embeddings_forward>,
    .embeddings_backward = timed<"embeddings_backward", embeddings_backward>,
    .layernorm_forward = timed<"layernorm_forward", layernorm_forward>,
    .layernorm_backward = timed<"layernorm_backward", layernorm_backward>,
    .residual_layernorm_forward = timed<"residual_layernorm_forward", residual_layernorm_forward>,
    .residual_dropout_layernorm_forward = residual_dropout_layernorm,
    .layernorm_dropout_backward = timed<"layernorm_dropout_backward", layernorm_dropout_backward>,
    .bias_backward = timed<"bias_backward", bias_backward>,
    .gelu_bias_backward = timed<"gelu_bias_backward", gelu_bias_backward>,
    .gelu_forward = timed<"gelu_forward", gelu_forward>,
    .gelu_forward16 = timed<"gelu_forward16", gelu_forward16>,
    .gelu_backward = timed<"gelu_backward", gelu_backward>,
    .tanh_forward = timed<"tanh_forward", tanh_forward>,
    .tanh_backward = timed<"tanh_backward", tanh_backward>,
    .dropout_forward = timed<"dropout_forward", dropout_forward>,
    .dropout_backward = timed<"dropout_backward", dropout_backward>,
    .gather_rows = timed<"gather_rows", gather_rows>,
    .scatter_add_rows = timed<"scatter_add_rows", scatter_add_rows>,
    .attention_saved_size = attention_saved_size,
    .attention_work_size = [](int64_t B, int64_t T, int64_t,
                              int64_t NH) { return attention_backward_work_size(B, T, NH); },
    .attention_work_size_hinted = attention_work_hinted,
    .attention_forward = attention_fwd,
    .attention_backward = attention_bwd,
    .attention_varlen_on = attention_varlen_on,
    .attention_varlen_work_size = varlen_work,
    .attention_varlen_forward = varlen_fwd,
    .attention_varlen_backward = varlen_bwd,
    .gumbel_argmax = timed<"gumbel_argmax", gumbel_argmax>,
    .weighted_row_sums = timed<"weighted_row_sums", weighted_row_sums>,
    .softmax_xent = softmax_xent,
    .linear_forward = linear_fwd,
    .linear_backward = linear_bwd,
};

}  // namespace

const DeviceOps& ops_table() { return kOps; }

}  // namespace bertcc::cuda
