// The compute backend seam: the model asks a Backend for memory and for every kernel, on buffers
// that live where the backend computes (host memory for the CPU, device memory for CUDA). The CPU
// backend is kernels/ (oneDNN + OpenMP) call for call, so CPU results are those of the kernels
// themselves; the CUDA backend is src/cuda/. Conventions are kernels.h's: row-major, backward
// kernels add into gradients, dropout element i of a site uses number base + i of the Philox stream
// (attention dropout: 16 bits of number base + attention_drop_number, bertcc/rng.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/error.h"
#include "bertcc/optim.h"
#include "bertcc/params.h"
#include "bertcc/rng.h"

namespace bertcc {

// CPU: host memory, kernels/. CUDA: src/cuda. Staged: kernels/ behind the device interface, in
// memory of its own (see staged_backend()).
enum class DeviceKind { CPU, CUDA, Staged };
struct OptimizerState;

// What a linear layer's call may reuse or skip. bf16 operands that the model keeps where the
// backend computes, so that a product's activation is rounded once (bf16 precision only: in fp32
// and fp16 the backend ignores them; null: the backend rounds the fp32 operand itself); each holds
// the same bits as to_bf16 of its fp32 operand, so results do not change, only the passes that
// round. overwrite_dx: the backward writes dx instead of adding to it (no zeroing pass first).
struct LinearIo {
  const bf16_t* x16 = nullptr;  // x rounded: the forward product's A, the backward's dW operand
  bf16_t* keep_x16 = nullptr;   // forward, x16 null: x's rounding is written here (for the backward)
  const bf16_t* dy16 = nullptr; // backward: dy rounded (both products' operand)
  bool overwrite_dx = false;    // backward: dx = dy W rather than dx += dy W
  // forward, bf16: the output as its bf16 rounding alone (fp32 sums and bias, one rounding), for a
  // product whose output is read only rounded (QKV: attention's operands). y is then fp32 space the
  // product may pass through (the CPU computes into it; CUDA only where cuBLASLt cannot write bf16
  // with an fp32 bias): its contents afterwards are unspecified.
  bf16_t* y16 = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string describe() const = 0;  // one line for start-up logs
  // Where the device time went, per operation, when the backend was asked to measure it
  // (CUDA: BERTCC_CUDA_PROFILE=1); empty otherwise.
  virtual std::string op_profile() const { return ""; }
  bool on_host() const { return kind() == DeviceKind::CPU; }
  // Whether linear_forward with LinearIo::y16 needs y, fp32 space the product passes through (the
  // CPU: yes; CUDA: no, cuBLASLt writes the rounding). A model may then give it no y.
  virtual bool y16_needs_y() const { return true; }

  // ---- memory (bytes) ----
  virtual void* alloc(size_t bytes) = 0;  // zero-filled; throws naming the size when it does not fit
  virtual void free(void* p) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  // dst[r * dst_ld + c] = (or +=) src[r * src_ld + c] for r < rows, c < cols
  virtual void copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) = 0;
  virtual void add_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) = 0;
  virtual void to_bf16(bf16_t* out, const float* in, int64_t n) = 0;
  // 16-bit gradients on the wire (--allreduce-dtype bf16|fp16 over NCCL): fp32 -> bf16 or fp16,
  // round to nearest even (bertcc::f32_to_bf16 / f32_to_f16's bits), and back.
  virtual void narrow16(uint16_t* out, const float* in, int64_t n, bool bf16) = 0;
  virtual void widen16(float* out, const uint16_t* in, int64_t n, bool bf16) = 0;
  // x[i] *= s, one product per element (fp16 loss unscaling)
  virtual void scale(float* x, int64_t n, float s) = 0;
  virtual void synchronize() = 0;
  // Makes this backend's device the calling thread's (CUDA: the current device is per thread); a
  // thread other than the one that chose the backend calls it before computing (serve's batchers).
  virtual void bind_thread() {}
  // The CUDA device number (-1 elsewhere).
  virtual int device_ordinal() const { return -1; }

  // ---- kernels (kernels/kernels.h, kernels/gemm.h) ----
  virtual void embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte,
                                  const float* wpe, const float* wtt, int64_t B, int64_t T, int64_t C) = 0;
  virtual void embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                                   const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                 const float* b, int64_t N, int64_t C, float eps) = 0;
  // Backward kernels add into dinp; with overwrite they write it, as if it held +0 before (the bits
  // of zeroing it first, without the zeroing pass). Parameter gradients are always added to.
  virtual void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                  const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                                  bool overwrite) = 0;
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) {
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, false);
  }
  // out16 (optional): out's bf16 rounding too (the next GEMM's operand). sum (the LayerNorm's
  // input a + r, which its backward reads) may be null where no backward follows; a and r must not
  // be out.
  virtual void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a,
                                          const float* r, const float* w, const float* b, int64_t N, int64_t C,
                                          float eps, bf16_t* out16) = 0;
  void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                  const float* w, const float* b, int64_t N, int64_t C, float eps) {
    residual_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, nullptr);
  }
  // out = LN(dropout(a) + r): BERT's sublayer ends (dropout with p, rng, base; none when p == 0). a
  // is the branch before its dropout and is scratch: this default drops out in place, then runs
  // the residual LayerNorm; a backend may fuse the two without writing a (the same bits).
  virtual void residual_dropout_layernorm_forward(float* out, float* sum, float* mean, float* rstd, float* a,
                                                  const float* r, const float* w, const float* b, int64_t N,
                                                  int64_t C, float eps, bf16_t* out16, float p, const Rng& rng,
                                                  uint64_t base) {
    if (p > 0) dropout_forward(a, a, N * C, p, rng, base);
    residual_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16);
  }
  // Its backward: dinp = the LayerNorm's input gradient (overwritten; the residual's gradient) and
  // dbranch = that through the dropout (overwritten; dbranch16, optional, its bf16 rounding). The
  // default composes layernorm_backward and dropout_backward; a backend may fuse them.
  virtual void layernorm_dropout_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                          const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                                          float* dbranch, bf16_t* dbranch16, float p, const Rng& rng, uint64_t base) {
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, /*overwrite=*/true);
    dropout_backward(dbranch, dinp, N * C, p, rng, base, dbranch16, /*overwrite=*/true);
  }
  // db[N] += the column sums of dy[M, N] (linear_backward's bias gradient, on its own)
  virtual void bias_backward(float* db, const float* dy, int64_t M, int64_t N) = 0;
  // FFN1's backward start in bf16: dinp16 = the bf16 rounding of dout * gelu'(inp16) ([M, N]) and db
  // += the column sums of the fp32 gradient, which is not an output: scratch (M x N floats) may
  // hold it. The input is FFN1's output as its bf16 rounding, the form bf16 training keeps of it
  // (gelu_forward's inp16), as PyTorch's autocast keeps the GELU's bf16 input. The CPU composes
  // gelu_backward on the widened input and bias_backward; CUDA fuses them without writing the
  // fp32 gradient (the same bits). out16 (optional): GELU's output again, gelu_forward16's bits
  // (the FFN2 weight gradient's operand, which bf16 training recomputes rather than keeps per layer).
  virtual void gelu_bias_backward(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M,
                                  int64_t N, Activation act, float* scratch, bf16_t* out16) = 0;
  // out16 / dinp16 (optional): the result's bf16 rounding too (the next GEMM's operand); inp16
  // (optional): the input's bf16 rounding too (what bf16 training keeps for gelu_bias_backward)
  virtual void gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16,
                            bf16_t* inp16) = 0;
  // out16 = the bf16 rounding of gelu(inp16): GELU on a bf16 input (FFN1's output in bf16 models,
  // written by the product as its rounding alone, as PyTorch's autocast Linear writes bf16)
  virtual void gelu_forward16(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act,
                             bf16_t* dinp16, bool overwrite) = 0;
  void gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16) {
    gelu_forward(out, inp, n, act, out16, nullptr);
  }
  void gelu_forward(float* out, const float* inp, int64_t n, Activation act) {
    gelu_forward(out, inp, n, act, nullptr, nullptr);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act) {
    gelu_backward(dinp, inp, dout, n, act, nullptr, false);
  }
  virtual void tanh_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n) = 0;
  virtual void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base) = 0;
  // dinp16 (optional): dinp's bf16 rounding too, after the addition
  virtual void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base,
                                bf16_t* dinp16, bool overwrite) = 0;
  void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base) {
    dropout_backward(dinp, dout, n, p, rng, base, nullptr, false);
  }
  virtual void gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C) = 0;
  virtual void scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C) = 0;

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
  virtual int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                                       bool qkv16_kept) const = 0;
  virtual int64_t attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH) const = 0;
  // out16 (optional, bf16 only): the output's bf16 rounding too, written by the same pass; out may
  // then be null (bf16 keeps only the rounding: the next product and the backward read that).
  virtual void attention_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                 const bf16_t* qkv16, const float* mask_add, int64_t B, int64_t T, int64_t C,
                                 int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec) = 0;
  // dqkv16 (optional, bf16 only): dqkv's bf16 rounding too, written by the same kernels (the
  // QKV products' operand: no rounding pass of its own).
  virtual void attention_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                                  const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                                  const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH,
                                  float dropout_p, const Rng& rng, uint64_t base, Precision prec) = 0;

  // Variable-length attention (unpadded execution): the batch's sequences packed as rows, sequence b
  // rows cu[b] to cu[b+1] of qkv [N,3C] (cu: B + 1 offsets in host memory; no sequence empty), no
  // mask. Each sequence computes what attention_forward/backward compute for a batch of it alone
  // at T = its length, with its dropout numbers after the previous sequences' (bertcc/rng.h,
  // attention_varlen_drop_numbers); the other arguments as theirs. The defaults (backend.cpp) make
  // one call of those per sequence; a backend with a kernel for the whole batch overrides all four
  // and says so in varlen_attention() (the model then packs batches without padding too).
  virtual bool varlen_attention() const { return false; }
  virtual int64_t attention_varlen_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout,
                                              Precision prec, bool qkv16_kept) const;
  virtual int64_t attention_varlen_work_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH) const;
  virtual void attention_varlen_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                        const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C, int64_t NH,
                                        float dropout_p, const Rng& rng, uint64_t base, Precision prec);
  virtual void attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout,
                                         const float* qkv, const bf16_t* qkv16, const float* out,
                                         const bf16_t* out16, const float* saved, const int64_t* cu, int64_t B,
                                         int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base,
                                         Precision prec);

  // ELECTRA's replacement sampling, kernels::gumbel_argmax on the backend's logits [M, V]; the M
  // picks come back to the host (no vocabulary-wide download)
  virtual void gumbel_argmax(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng,
                             uint64_t base) = 0;
  // kernels::weighted_row_sums with the weights w [B, T] in host memory
  virtual void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B,
                                 int64_t T, int64_t C) = 0;
  // kernels::softmax_xent_forward_backward (labels on the backend; the counts come back to the host)
  virtual int64_t softmax_xent(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                               int32_t ignore_index, float grad_scale, int64_t* num_correct) = 0;
  virtual void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N,
                              int64_t K, Precision p, const bf16_t* W16, const LinearIo& a16) = 0;
  virtual void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W,
                               int64_t M, int64_t N, int64_t K, Precision p, const bf16_t* W16,
                               const LinearIo& a16) = 0;
  void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                      Precision p, const bf16_t* W16) {
    linear_forward(y, x, W, b, M, N, K, p, W16, LinearIo{});
  }
  void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                       int64_t N, int64_t K, Precision p, const bf16_t* W16) {
    linear_backward(dx, dW, db, dy, x, W, M, N, K, p, W16, LinearIo{});
  }

  // ---- optimizers over the flat buffers (bertcc/optim.h semantics); state where they compute ----
  virtual double global_norm(const float* x, size_t n) = 0;
  virtual double lamb_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr,
                           const LambOptions& o, double grad_norm = -1) = 0;
  virtual double adamw_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr,
                            const AdamWOptions& o, double grad_norm = -1) = 0;
  // The moments of `s` to and from host form (checkpoints): an AdamState for a table of n
  // parameters (empty moments = a fresh optimizer), whole-buffer or (ZeRO-1, begin/end set) the
  // moments of one shard [begin, end) of whole tensors, which the steps then update alone (the
  // other parameters are left as they are; grad_norm must then be given: it is global).
  virtual void moments_to_host(const OptimizerState& s, AdamState& out) = 0;
  virtual void moments_from_host(const AdamState& in, size_t n, OptimizerState& s) = 0;
  // moments_from_host that takes the host moments over, leaving `in` empty: the CPU backend keeps
  // them without a copy (OptimizerState::cpu); elsewhere (staged included) they are uploaded.
  virtual void moments_take(AdamState&& in, size_t n, OptimizerState& s) {
    moments_from_host(in, n, s);
    in = AdamState{};
  }
  // The moments' host form for reading (checkpoints): the CPU backend's own, without a copy;
  // elsewhere moments_to_host into `scratch`, which is returned.
  virtual AdamState& moments_view(OptimizerState& s, AdamState& scratch) {
    moments_to_host(s, scratch);
    return scratch;
  }

  // ---- measurement ----
  // TFLOP/s of a bare GEMM C[M,N] = A[M,K] B[K,N] in `p` (operands already in that precision).
  virtual double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters) = 0;
  // Device memory in use on the device, by every process (total - free; 0 on the CPU: see peak RSS):
  // with the CUDA context, the libraries' modules and the allocator's slack.
  virtual double device_memory_used_mb() const = 0;
  // The bytes of this process's own device buffers (CUDA, and the staged backend's allocations; 0 on
  // the CPU), as PyTorch's memory_allocated counts its tensors, and their high-water mark since the
  // start or reset_peak_buffer_mb (max_memory_allocated, reset_peak_memory_stats).
  virtual double buffer_mb() const { return 0.0; }
  virtual double peak_buffer_mb() const { return 0.0; }
  virtual void reset_peak_buffer_mb() {}

  // ---- graphs (--cuda-graphs) ----
  // A backend that can (graphs(): CUDA) records the device work queued between graph_begin and
  // graph_end instead of running it; graph_launch runs the record again, on the same buffers and
  // with the same arguments, in order with the work queued around it. Inside a recording, copies
  // to or from the host, allocations and frees are errors (the record holds device work only);
  // graph_abort ends a recording that an error interrupted. memory_epoch changes whenever one of
  // the backend's buffers is freed: a record made at another epoch may name a buffer that is gone.
  virtual bool graphs() const { return false; }
  virtual void graph_begin() { fail(describe(), " records no graphs (--cuda-graphs needs --device cuda)"); }
  virtual void* graph_end() { fail(describe(), " records no graphs"); }
  virtual void graph_abort() {}
  virtual void graph_launch(void*) { fail(describe(), " records no graphs"); }
  virtual void graph_destroy(void*) {}
  virtual uint64_t memory_epoch() const { return 0; }
};

// The process-wide CPU backend.
Backend& cpu_backend();
// The staged backend ("--device cpu-staged"): the CPU kernels behind the device interface. Its
// memory is its own allocations, reached only through upload/download, and every call checks that
// each buffer it is given is one of them (and that upload/download go between host and device), so
// a run on it takes every device code path of the model and trainer (weights and gradients on the
// device, the optimizer and its moments there, checkpoints through downloads) without a GPU, and
// must give the bits of --device cpu. A host pointer passed as a device buffer, or the reverse, is
// an error naming the call.
Backend& staged_backend();
// "cpu", "cpu-staged", "cuda" or "cuda:N". CUDA needs a build with the CUDA kernels (BERTCC_CUDA)
// and a device; the error says which is missing.
Backend& backend_for(const std::string& device);
// The CUDA backend on device `index`, for backend_for: defined by src/cuda/cuda_backend.cpp, in
// builds with the CUDA kernels only. Throws when there is no usable device (the reason from the
// driver) or no such index.
std::unique_ptr<Backend> make_cuda_backend(int index);
// set_allow_tf32's setting handed to the CUDA kernels (the same builds only).
void set_cuda_allow_tf32(bool on);
// One line for `--device` help texts.
inline const char* device_help() { return "cpu (default) | cuda | cuda:N | cpu-staged (the device code paths on the CPU)"; }
// --allow-tf32: fp32 GEMMs on CUDA with TF32 products (PyTorch's torch.backends.cuda.matmul.
// allow_tf32); off by default: exact fp32. Applies to the backends backend_for() hands out after it
// is set; on the CPU it has no effect, and backend_for says so once.
void set_allow_tf32(bool on);
inline const char* allow_tf32_help() {
  return "fp32 GEMMs on CUDA with TF32 products (10-bit mantissas, fp32 sums; PyTorch's allow_tf32); "
         "default: exact fp32. No effect on the CPU or with --precision bf16/fp16";
}
// --cuda-graphs (inference commands): each forward shape seen twice is recorded as a CUDA graph and
// replayed from then on (Bert::encode). backend_for refuses it for any device but cuda.
void set_cuda_graphs(bool on);
bool cuda_graphs();
inline const char* cuda_graphs_help() {
  return "with --device cuda: record the encoder's forward as a CUDA graph for each batch shape seen twice "
         "and replay it (one launch instead of one per kernel; the same results); batches are then computed "
         "padded to their longest row, the shape a graph records";
}

// Unpadded execution (Bert::encode): the encoder computes a batch's real tokens only, packed
// sequence after sequence, and restores the padded layout for the heads. On by default; --padded (or
// the environment variable BERTCC_PADDED=1) computes every batch padded to its longest row, as
// before, for comparison (and for dump-step, whose checks against PyTorch compute the padding).
void set_padded_execution(bool on);
bool padded_execution();
inline const char* padded_help() {
  return "compute each batch padded to its longest row (the padding too) instead of its real tokens only "
         "(the default; also BERTCC_PADDED=1): for comparison";
}

// A buffer of T on a backend, freed with it (moves, never copies).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& be, size_t n) : be_(&be), n_(n), p_(static_cast<T*>(be.alloc(n * sizeof(T)))) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_, n_ = o.n_, p_ = o.p_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // At least n elements (grow only; contents are not kept when it grows).
  T* ensure(Backend& be, size_t n) {
    if (be_ != &be || n > n_) *this = DeviceBuffer(be, n);
    return p_;
  }
  void reset() {
    if (p_) be_->free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  Backend* be_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

// Adam moments of one model on its backend (host vectors on the CPU and the staged backend, device
// buffers on CUDA).
// Throws unless `in` holds moments moments_from_host() takes for a table of n parameters: none,
// all n, or a shard [begin, end) of them.
void check_moments(const AdamState& in, size_t n);

struct OptimizerState {
  AdamState cpu;
  DeviceBuffer<float> m, v;  // [end - begin] (whole buffer: [n])
  int64_t step = 0;
  size_t begin = 0, end = 0;  // ZeRO-1: the shard these moments update (end = 0: the whole buffer)
};

}  // namespace bertcc
