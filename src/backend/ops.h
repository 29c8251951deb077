// The operations: every kernel the model and the trainer run on a backend's buffers, declared
// once here, each defined once in ops.cpp: a dispatch to the device's table where its backend
// registered one (device_ops.h; CUDA's: src/cuda/ops_cuda.cpp), then the CPU implementation
// (kernels/, behind the staged backend's buffer checks). One of the interfaces a Backend is made
// of (backend.h); the buffers are its memory's (memory.h).
// Conventions are kernels.h's: row-major, backward kernels add into gradients, dropout element i
// of a site uses number base + i of the Philox stream (attention dropout: 16 bits of number base +
// attention_drop_number, bertcc/rng.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/device_ops.h"
#include "backend/memory.h"
#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/rng.h"

namespace bertcc {

// CPU: host memory, kernels/. CUDA: src/cuda. Staged: kernels/ behind the device interface, in
// memory of its own (see staged_backend()).
enum class DeviceKind { CPU, CUDA, Staged };

// What a linear layer's call may reuse or skip. bf16 operands that the model keeps where the
// backend computes, so that a product's activation is rounded once (bf16 precision only: in fp32
// and fp16 the backend ignores them; null: the backend rounds the fp32 operand itself); each holds
// the same bits as to_bf16 of its fp32 operand, so results do not change, only the passes that
// round. overwrite_dx: the backward writes dx instead of adding to it (no zeroing pass first).
struct LinearIo {
  const bf16_t* x16 = nullptr;   // x rounded: the forward product's A, the backward's dW operand
  bf16_t* keep_x16 = nullptr;    // forward, x16 null: x's rounding is written here (for the backward)
  const bf16_t* dy16 = nullptr;  // backward: dy rounded (both products' operand)
  bool overwrite_dx = false;     // backward: dx = dy W rather than dx += dy W
  // forward, bf16: the output as its bf16 rounding alone (fp32 sums and bias, one rounding), for a
  // product whose output is read only rounded (QKV: attention's operands). y is then fp32 space the
  // product may pass through (the CPU computes into it; CUDA only where cuBLASLt cannot write bf16
  // with an fp32 bias): its contents afterwards are unspecified.
  bf16_t* y16 = nullptr;
};

// What a caller of the padded attention_forward/backward knows beyond its buffers, read by CUDA's
// cuDNN path (BERTCC_ATTENTION=cudnn, docs/gpu.md) and ignored elsewhere. right_padded: every row
// of mask_add is n >= 1 keys at 0 then T - n keys at <= -10000 (a mask made from lengths, as the
// model makes it from a right-padded input_mask); CUDA checks it on the device and stops the run
// where it is false. A caller that says so sizes work with attention_work_size's second form.
// forward_only: no backward will read this forward's saved buffer (inference).
struct AttentionHints {
  bool right_padded = false;
  bool forward_only = false;
};

class Ops {
 public:
  // The operations of a device of this kind on buffers of `mem` (the staged kind checks each
  // buffer against it). device: the device's own operations (CUDA's, given by its backend; null
  // for the CPU and the staged kind, which run kernels/).
  Ops(DeviceKind kind, DeviceMemory& mem, const DeviceOps* device = nullptr);
  Ops(const Ops&) = delete;
  Ops& operator=(const Ops&) = delete;
  DeviceKind kind() const { return kind_; }
  // Whether linear_forward with LinearIo::y16 needs y, fp32 space the product passes through (the
  // CPU: yes; CUDA: no, cuBLASLt writes the rounding; staged: no, as on CUDA, so that models lay out
  // their buffers as there: the product's space is host scratch). A model may then give it no y.
  bool y16_needs_y() const { return kind_ == DeviceKind::CPU; }

  // ---- rows and conversions ----
  // dst[r * dst_ld + c] = (or +=) src[r * src_ld + c] for r < rows, c < cols
  void copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols);
  void add_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols);
  void to_bf16(bf16_t* out, const float* in, int64_t n);
  // 16-bit gradients on the wire (--allreduce-dtype bf16|fp16 over NCCL): fp32 -> bf16 or fp16,
  // round to nearest even (bertcc::f32_to_bf16 / f32_to_f16's bits), and back.
  void narrow16(uint16_t* out, const float* in, int64_t n, bool bf16);
  void widen16(float* out, const uint16_t* in, int64_t n, bool bf16);
  // x[i] *= s, one product per element (fp16 loss unscaling)
  void scale(float* x, int64_t n, float s);

  // ---- embeddings, LayerNorm ----
  void embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                          const float* wtt, int64_t B, int64_t T, int64_t C);
  void embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                           const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT);
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps);
  // Backward kernels add into dinp; with overwrite they write it, as if it held +0 before (the bits
  // of zeroing it first, without the zeroing pass). Parameter gradients are always added to.
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite = false);
  // out16 (optional): out's bf16 rounding too (the next GEMM's operand). sum (the LayerNorm's
  // input a + r, which its backward reads) may be null where no backward follows; a and r must not
  // be out.
  void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                  const float* w, const float* b, int64_t N, int64_t C, float eps,
                                  bf16_t* out16 = nullptr);
  // out = LN(dropout(a) + r): BERT's sublayer ends (dropout with p, rng, base; none when p == 0). a
  // is the branch before its dropout and is scratch: the CPU drops out in place, then runs the
  // residual LayerNorm; CUDA fuses the two where it can, without writing a (the same bits).
  void residual_dropout_layernorm_forward(float* out, float* sum, float* mean, float* rstd, float* a, const float* r,
                                          const float* w, const float* b, int64_t N, int64_t C, float eps,
                                          bf16_t* out16, float p, const Rng& rng, uint64_t base);
  // Its backward: dinp = the LayerNorm's input gradient (overwritten; the residual's gradient) and
  // dbranch = that through the dropout (overwritten; dbranch16, optional, its bf16 rounding). The
  // CPU composes layernorm_backward and dropout_backward; CUDA fuses them where it can.
  void layernorm_dropout_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                  const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                                  float* dbranch, bf16_t* dbranch16, float p, const Rng& rng, uint64_t base);

  // ---- bias, GELU, tanh, dropout ----
  // db[N] += the column sums of dy[M, N] (linear_backward's bias gradient, on its own)
  void bias_backward(float* db, const float* dy, int64_t M, int64_t N);
  // FFN1's backward start in bf16: dinp16 = the bf16 rounding of dout * gelu'(inp16) ([M, N]) and db
  // += the column sums of the fp32 gradient, which is not an output: scratch (M x N floats) may
  // hold it. The input is FFN1's output as its bf16 rounding, the form bf16 training keeps of it
  // (gelu_forward's inp16), as PyTorch's autocast keeps the GELU's bf16 input. The CPU composes
  // gelu_backward on the widened input and bias_backward; CUDA fuses them without writing the
  // fp32 gradient (the same bits). out16 (optional): GELU's output again, gelu_forward16's bits
  // (the FFN2 weight gradient's operand, which bf16 training recomputes rather than keeps per layer).
  void gelu_bias_backward(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M, int64_t N,
                          Activation act, float* scratch, bf16_t* out16);
  // out16 / dinp16 (optional): the result's bf16 rounding too (the next GEMM's operand); inp16
  // (optional): the input's bf16 rounding too (what bf16 training keeps for gelu_bias_backward)
  void gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16 = nullptr,
                    bf16_t* inp16 = nullptr);
  // out16 = the bf16 rounding of gelu(inp16): GELU on a bf16 input (FFN1's output in bf16 models,
  // written by the product as its rounding alone, as PyTorch's autocast Linear writes bf16)
  void gelu_forward16(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act);
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act,
                     bf16_t* dinp16 = nullptr, bool overwrite = false);
  void tanh_forward(float* out, const float* inp, int64_t n);
  void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n);
  void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base);
  // dinp16 (optional): dinp's bf16 rounding too, after the addition
  void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base,
                        bf16_t* dinp16 = nullptr, bool overwrite = false);
  void gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C);
  void scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C);

  // ---- attention ----
  // Attention saves what its backward needs in `saved` (CPU: P and the dropped-out P; CUDA: the
  // row log-sum-exp and the dropout decisions) and uses `work` as scratch; both sizes in floats.
  // Backward overwrites dqkv and may use the forward's output `out`, the mask and the dropout
  // stream (CUDA regenerates P). In bf16 `saved` also holds q, k and v rounded to bf16, the only
  // form bf16 products read, and the backward reads no qkv (it may be null), so a model need not
  // keep each layer's fp32 qkv for it. Likewise in bf16 `out` may be null with out16, its bf16
  // rounding, given instead (CUDA's row dots dO . O then read that, as FlashAttention's backward
  // reads its bf16 O; the CPU reads neither), so a model need not keep each layer's fp32 output.
  // qkv16 (bf16 only, optional): qkv's bf16 rounding [B,T,3C] (the QKV product's LinearIo::y16),
  // read instead of qkv (which may then be null), and given unchanged to the backward too: `saved`
  // then holds no q, k, v (qkv16_kept sizes it so). CUDA reads it in place; the same bits either way.
  int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                               bool qkv16_kept) const;
  int64_t attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH) const;
  // The same, and at least what CUDA's cuDNN path needs for a call of this shape with hints (the
  // key lengths; in training dout's bf16 rounding; with dropout the keep mask, B*NH*T*T bf16):
  // the first form's where that path is off (BERTCC_ATTENTION unset) or cannot take the shape.
  int64_t attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                              bool inference) const;
  // out16 (optional, bf16 only): the output's bf16 rounding too, written by the same pass; out may
  // then be null (bf16 keeps only the rounding: the next product and the backward read that).
  void attention_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv, const bf16_t* qkv16,
                         const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                         const Rng& rng, uint64_t base, Precision prec, const AttentionHints& hints = {});
  // dqkv16 (optional, bf16 only): dqkv's bf16 rounding too, written by the same kernels (the
  // QKV products' operand: no rounding pass of its own).
  void attention_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                          const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                          const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                          const Rng& rng, uint64_t base, Precision prec, const AttentionHints& hints = {});

  // Variable-length attention (unpadded execution): the batch's sequences packed as rows, sequence b
  // rows cu[b] to cu[b+1] of qkv [N,3C] (cu: B + 1 offsets in host memory; no sequence empty), no
  // mask. Each sequence computes what attention_forward/backward compute for a batch of it alone
  // at T = its length, with its dropout numbers after the previous sequences' (bertcc/rng.h,
  // attention_varlen_drop_numbers); the other arguments as theirs. The CPU's kernel takes the whole
  // batch; CUDA's too in bf16 (cuda/attention/varlen.h), and otherwise one padded call for
  // sequences all of one length or one per sequence (the _per_sequence forms). varlen_attention():
  // whether the model should pack batches without padding too.
  bool varlen_attention() const;
  int64_t attention_varlen_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout, Precision prec,
                                      bool qkv16_kept) const;
  int64_t attention_varlen_work_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH) const;
  void attention_varlen_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C, int64_t NH,
                                float dropout_p, const Rng& rng, uint64_t base, Precision prec);
  void attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                                 const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                                 const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                                 uint64_t base, Precision prec);
  // Variable-length attention as one call of attention_forward/backward per sequence (B = 1, T =
  // its length, a zero mask): each sequence's saved slice follows the previous one's (16-float
  // aligned) and its dropout numbers follow the previous sequence's, the layout of the varlen
  // kernels. The saved size is attention_varlen_saved_size's on CUDA; work: at least
  // attention_varlen_per_sequence_work_size floats.
  int64_t attention_varlen_per_sequence_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout,
                                                   Precision prec, bool qkv16_kept) const;
  int64_t attention_varlen_per_sequence_work_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH) const;
  void attention_varlen_forward_per_sequence(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                             const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C, int64_t NH,
                                             float dropout_p, const Rng& rng, uint64_t base, Precision prec);
  void attention_varlen_backward_per_sequence(float* dqkv, bf16_t* dqkv16, float* work, const float* dout,
                                              const float* qkv, const bf16_t* qkv16, const float* out,
                                              const bf16_t* out16, const float* saved, const int64_t* cu, int64_t B,
                                              int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base,
                                              Precision prec);

  // ---- heads ----
  // ELECTRA's replacement sampling, kernels::gumbel_argmax on the backend's logits [M, V]; the M
  // picks come back to the host (no vocabulary-wide download)
  void gumbel_argmax(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng, uint64_t base);
  // kernels::weighted_row_sums with the weights w [B, T] in host memory
  void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B, int64_t T,
                         int64_t C);
  // kernels::softmax_xent_forward_backward (labels on the backend; the counts come back to the host)
  int64_t softmax_xent(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V, int32_t ignore_index,
                       float grad_scale, int64_t* num_correct);

  // ---- linear layers (kernels/gemm.h, cuBLASLt) ----
  void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                      Precision p, const bf16_t* W16, const LinearIo& a16 = {});
  void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                       int64_t N, int64_t K, Precision p, const bf16_t* W16, const LinearIo& a16 = {});

 protected:
  // Staged: each non-null buffer must lie in one of the memory's allocations (the others: nothing).
  template <class... P>
  void check_staged_buffers(const char* call, const P*... ptrs) const {
    if (kind_ != DeviceKind::Staged) return;
    int i = 0;
    (check_buffer(call, ptrs, i++), ...);
  }
  void check_buffer(const char* call, const void* p, int i) const;

 private:
  DeviceKind kind_;
  DeviceMemory& mem_;
  const DeviceOps* dev_;  // null: the CPU's kernels
};

}  // namespace bertcc
