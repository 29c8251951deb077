// CPU kernels. Each `<kernel>_forward` sits next to its `<kernel>_backward`; backward kernels
// ADD into gradient buffers (so tied and shared weights need no special code).
// Size letters: B batch, T sequence, C channels (= H hidden), NH heads, HS head size, V vocab,
// N rows (= B*T unless stated), M masked positions.
#pragma once
#include <cstdint>
#include <vector>

#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/rng.h"

namespace bertcc::kernels {

// ---- embeddings: out[N,C] = wte[ids] + wpe[pos] + wtt[seg], pos = n % T ----
void embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                        const float* wtt, int64_t B, int64_t T, int64_t C);
// The same with the word embeddings in int8 per row (--precision int8: wte[v] = wq[v] * wscale[v]):
// each row dequantized, then added as above, so the result is embeddings_forward's on the
// dequantized table, bit for bit.
void embeddings_forward_int8(float* out, const int32_t* ids, const int32_t* seg, const int8_t* wq, const float* wscale,
                             const float* wpe, const float* wtt, int64_t B, int64_t T, int64_t C);
void embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                         const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT);

// ---- LayerNorm over the last dim; mean/rstd [N] are saved for backward ----
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps);
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C);

// ---- fused residual + LayerNorm: sum = a + r (saved; sum may be null, a and r not out), out = LN(sum) ----
void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                const float* w, const float* b, int64_t N, int64_t C, float eps);
// One row of residual_layernorm_forward, on the calling thread (fused epilogues call it): the same bits.
void residual_layernorm_row(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                            const float* w, const float* b, int64_t C, float eps);
// ---- plain residual add (the composed reference for the fused kernel) ----
void residual_forward(float* out, const float* a, const float* b, int64_t n);

// ---- GELU: erf ("gelu") or tanh ("gelu_new", "gelu_pytorch_tanh") ----
void gelu_forward(float* out, const float* inp, int64_t n, Activation act);
// gelu_forward on the calling thread alone (fused epilogues call it): the same bits.
void gelu_forward_serial(float* out, const float* inp, int64_t n, Activation act);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act);

// ---- tanh (pooler) ----
void tanh_forward(float* out, const float* inp, int64_t n);
void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n);  // uses the forward output

// ---- dropout: out = inp * keep_mask / (1-p); the mask is regenerated from (rng, base) ----
void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base);
void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base);

// ---- rows gather/scatter (MLM head runs only on masked positions) ----
void gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C);
void scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C);

// ---- attention: qkv[B,T,3C] (q | k | v), mask_add[B,T] additive on key positions ----
// Saves probs[B,NH,T,T] (softmax, before dropout) and, when dropout_p > 0, the dropped-out
// probabilities Pd[B,NH,T,T] right after them (fp32, or bf16 when prec is BF16: all the GEMMs
// read), and when prec is BF16 then q, k and v rounded to bf16 (the backward reads no qkv):
// `probs` holds attention_saved_size(B, T, C, NH, dropout_p > 0, prec) floats.
// Element (i, j) of head row bh of Pd is kept iff 16 bits of number base + attention_drop_number(bh,
// i, j, T) of the dropout stream are >= dropout_threshold16(p) (bertcc/rng.h); a site reserves
// attention_drop_numbers(B*NH, T) numbers. `work` is scratch of attention_work_size().
int64_t attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH);
// qkv16_kept (BF16): the caller keeps qkv's bf16 rounding [B,T,3C] and gives it to the forward and,
// unchanged, to the backward (qkv16 below): then the saved buffer holds no q, k, v.
int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                             bool qkv16_kept = false);
// out16 (optional): the output's bf16 rounding too; out may then be null (bf16 training and
// inference keep only the rounding, the only form the next product reads). qkv16 (BF16, optional):
// qkv's rounding, read instead of qkv (which may then be null): the same bits, since the GEMMs
// round q, k and v anyway.
void attention_forward(float* out, float* probs, float* work, const float* qkv, const float* mask_add, int64_t B,
                       int64_t T, int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec,
                       bf16_t* out16 = nullptr, const bf16_t* qkv16 = nullptr);
// dqkv[B,T,3C] is overwritten (not accumulated). `probs` and `dropout_p` as saved by the forward
// pass (no random numbers are drawn); `work` as above. BF16: qkv is not read (may be null), and
// dqkv16 (optional) receives dqkv's bf16 rounding too (the QKV products' operand).
void attention_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* probs, int64_t B,
                        int64_t T, int64_t C, int64_t NH, float dropout_p, Precision prec, bf16_t* dqkv16 = nullptr,
                        const bf16_t* qkv16 = nullptr);

// ---- variable-length attention (unpadded execution): packed rows, no mask ----
// Sequence b is rows cu[b] to cu[b+1] of qkv[N,3C] (N = cu[B]; cu: B + 1 host offsets, every
// sequence non-empty). Per sequence and head, what attention_forward computes for a batch of that
// sequence alone at T = its length: the same dropout numbers (sequence b's after the previous
// sequences', attention_varlen_drop_numbers in all: bertcc/rng.h), saved P (and Pd, and in bf16 qkv's rounding
// unless qkv16 is kept) in attention_varlen_saved_size(...) floats. One parallel region of
// (sequence, head) items, each computed by one thread with single-threaded products, so a
// sequence's bits do not depend on the batch it is in or on the thread count. No scratch argument:
// each thread's is its own (a few n x n blocks).
int64_t attention_varlen_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout, Precision prec,
                                    bool qkv16_kept = false);
void attention_varlen_forward(float* out, float* saved, const float* qkv, const int64_t* cu, int64_t B, int64_t C,
                              int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec,
                              bf16_t* out16 = nullptr, const bf16_t* qkv16 = nullptr);
// dqkv[N,3C] overwritten; as attention_backward (qkv not read in bf16; dqkv16 optional)
void attention_varlen_backward(float* dqkv, const float* dout, const float* qkv, const float* saved, const int64_t* cu,
                               int64_t B, int64_t C, int64_t NH, float dropout_p, Precision prec,
                               bf16_t* dqkv16 = nullptr, const bf16_t* qkv16 = nullptr);

// ---- softmax cross-entropy with ignore index, fused with its gradient ----
// logits[N,V] is overwritten by d(loss)/d(logits) * grad_scale when grad_scale != 0 (so no
// probability tensor outlives this call). losses[N] gets each row's loss (0 for ignored rows).
// Returns the number of rows that were not ignored; adds to *num_correct (if given) the rows whose
// first maximum logit is the label (accuracy from the same pass that finds the row maximum).
int64_t softmax_xent_forward_backward(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                                      int32_t ignore_index, float grad_scale, int64_t* num_correct = nullptr);

// ---- ELECTRA's replacement sampling (Gumbel-max) ----
// picks[m] = argmax over v of logits[m,v] + g(m,v), g = -log(-log(u)) in double, u = ((x >> 8) + 0.5)
// / 2^24 from number base + m*V + v of rng's dropout stream: a sample of softmax(logits[m]). The
// first maximum wins; NaN never does (a row of NaN/-inf gives 0). Rows are independent (threads do
// not change the result).
void gumbel_argmax(int32_t* picks, const float* logits, int64_t M, int64_t V, const Rng& rng, uint64_t base);

// ---- the joint SQuAD head's expected start state ----
// out[b * out_ld + c] = sum over t (in order, in double) of w[b * T + t] * x[(b * T + t) * C + c]
void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w, int64_t B, int64_t T, int64_t C);

// A scratch buffer (a thread's own, kept across calls) with room for n elements: grown, never
// shrunk, so that calls of varying sizes neither reallocate nor zero the part a resize down and up
// again would fill anew.
template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace bertcc::kernels
