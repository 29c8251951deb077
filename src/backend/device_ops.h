// The operations a device other than the host supplies (ggml's backends register theirs the same
// way): a table of functions, one per operation of ops.h with its arguments, that the device's
// backend hands to Ops when it is made (src/cuda/ops_cuda.cpp fills CUDA's). Ops dispatches each
// call through it, so nothing under src/backend names a device's kernels. Entries that return bool
// may decline a call (false: not taken); Ops then composes the operation from others, as the CPU
// does. Every entry must be set.
#pragma once
#include <cstdint>

#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/rng.h"

namespace bertcc {

struct LinearIo;
struct AttentionHints;

struct DeviceOps {
  // ---- rows and conversions ----
  void (*copy_rows)(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols);
  void (*add_rows)(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols);
  void (*to_bf16)(bf16_t* out, const float* in, int64_t n);
  void (*narrow16)(uint16_t* out, const float* in, int64_t n, bool bf16);
  void (*widen16)(float* out, const uint16_t* in, int64_t n, bool bf16);
  void (*scale)(float* x, int64_t n, float s);

  // ---- embeddings, LayerNorm ----
  void (*embeddings_forward)(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                             const float* wtt, int64_t B, int64_t T, int64_t C);
  void (*embeddings_backward)(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                              const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT);
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                            int64_t N, int64_t C, float eps);
  void (*layernorm_backward)(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                             const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite);
  void (*residual_layernorm_forward)(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                     const float* w, const float* b, int64_t N, int64_t C, float eps, bf16_t* out16);
  bool (*residual_dropout_layernorm_forward)(float* out, float* sum, float* mean, float* rstd, float* a, const float* r,
                                             const float* w, const float* b, int64_t N, int64_t C, float eps,
                                             bf16_t* out16, float p, const Rng& rng, uint64_t base);
  bool (*layernorm_dropout_backward)(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                     const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                                     float* dbranch, bf16_t* dbranch16, float p, const Rng& rng, uint64_t base);

  // ---- bias, GELU, tanh, dropout ----
  void (*bias_backward)(float* db, const float* dy, int64_t M, int64_t N);
  void (*gelu_bias_backward)(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M, int64_t N,
                             Activation act, bf16_t* out16);
  void (*gelu_forward)(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16, bf16_t* inp16);
  void (*gelu_forward16)(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act);
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, int64_t n, Activation act, bf16_t* dinp16,
                        bool overwrite);
  void (*tanh_forward)(float* out, const float* inp, int64_t n);
  void (*tanh_backward)(float* dinp, const float* out, const float* dout, int64_t n);
  void (*dropout_forward)(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base);
  void (*dropout_backward)(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base,
                           bf16_t* dinp16, bool overwrite);
  void (*gather_rows)(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C);
  void (*scatter_add_rows)(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C);

  // ---- attention ----
  int64_t (*attention_saved_size)(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                                  bool qkv16_kept);
  int64_t (*attention_work_size)(int64_t B, int64_t T, int64_t C, int64_t NH);
  // Ops::attention_work_size's second form (the hints' paths included)
  int64_t (*attention_work_size_hinted)(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                                        bool inference);
  void (*attention_forward)(float* out, bf16_t* out16, float* saved, float* work, const float* qkv, const bf16_t* qkv16,
                            const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                            const Rng& rng, uint64_t base, Precision prec, const AttentionHints& hints);
  void (*attention_backward)(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                             const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                             const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                             const Rng& rng, uint64_t base, Precision prec, const AttentionHints& hints);
  // Variable-length attention. The device's kernels keep the per-sequence calls' saved layout
  // (Ops::attention_varlen_per_sequence_saved_size). attention_varlen_on: whether its varlen
  // kernels are on at all; attention_varlen_work_size: what they need beyond the per-sequence
  // calls' scratch; forward/backward decline (false) calls they do not take, which Ops then makes
  // as padded calls.
  bool (*attention_varlen_on)();
  int64_t (*attention_varlen_work_size)(const int64_t* cu, int64_t B, int64_t C, int64_t NH);
  bool (*attention_varlen_forward)(float* out, bf16_t* out16, float* saved, const float* qkv, const bf16_t* qkv16,
                                   const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                                   uint64_t base, Precision prec);
  bool (*attention_varlen_backward)(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                                    const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                                    const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p,
                                    const Rng& rng, uint64_t base, Precision prec);

  // ---- heads ----
  void (*gumbel_argmax)(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng, uint64_t base);
  void (*weighted_row_sums)(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B, int64_t T,
                            int64_t C);
  int64_t (*softmax_xent)(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                          int32_t ignore_index, float grad_scale, int64_t* num_correct);

  // ---- linear layers ----
  void (*linear_forward)(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                         Precision p, const bf16_t* W16, const LinearIo& a16);
  void (*linear_backward)(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                          int64_t N, int64_t K, Precision p, const bf16_t* W16, const LinearIo& a16);
};

}  // namespace bertcc
