// CUDA kernels: the device twins of kernels/kernels.h, kernels/gemm.h and bertcc/optim.h.
// Same layouts and conventions as the CPU kernels (row-major, size letters as kernels.h, backward
// kernels ADD into gradients, dropout element i of a site uses number base + i of the Philox stream,
// attention's 16 bits of number base + attention_drop_number (bertcc/rng.h), so GPU masks equal CPU
// masks bit for bit). Every pointer named like a tensor is device memory;
// ids, labels and row indices too. Work is queued on the current device's default stream; the
// functions that return a host value (a count, a norm) synchronise.
//
// Differences from the CPU API, all owed to a fused attention that never writes T x T:
//   attention_forward saves the row log-sum-exp lse[B,NH,T] instead of P (and Pd);
//   attention_backward recomputes P from q, k and lse, and takes the forward output `out` (or in
//   bf16 its rounding out16, with a null out) for the row dots dO . O.
// This header is plain C++ (no CUDA types) so host code and tests include it without nvcc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/gemm_args.h"
#include "bertcc/optim.h"
#include "bertcc/params.h"
#include "bertcc/rng.h"

namespace bertcc::cuda {

// ---- runtime ----
// Number of usable devices; 0 with the reason in *why (no driver, no device, driver too old).
int device_count(std::string* why);
// For the GPU tests' and benches' mains: whether a device is usable; if not, prints "SKIPPED: why"
// (their exit status is then 77, ctest's skip).
bool usable_device_or_skip();
struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  size_t total_mem = 0;
};
DeviceInfo device_info(int device);
void set_device(int device);
void* alloc(size_t bytes);  // throws bertcc::Error naming the size when the device is out of memory
void free(void* p);
// Host to device: up to 4 MiB through a ring of page-locked staging memory, queued on the thread's
// stream (the host does not wait for the device; src may be reused as soon as this returns);
// larger copies with cudaMemcpy. staged_copies / stage_waits count the staged copies so far, and
// the times one had to wait for an earlier copy out of the same region of the ring.
void copy_to_device(void* dst, const void* src, size_t bytes);
uint64_t staged_copies();
uint64_t stage_waits();
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_device(void* dst, const void* src, size_t bytes);
void zero(void* p, size_t bytes);
void synchronize();  // waits for queued work; throws with the CUDA error of any failed kernel
bool stream_idle();  // whether the work queued on this thread's stream has all run (no waiting)
// CUDA graphs (inference forwards of a fixed shape, --cuda-graphs). Work is queued on this thread's
// current stream: the legacy default stream, except between graph_capture_begin and _end, when it
// is a capture stream and the work queued is recorded, not run. graph_capture_end instantiates the
// record; graph_launch runs it on the legacy stream, in order with the rest, on the same buffers.
// Inside a capture, host copies, allocations, frees and synchronisation are errors that say so (the
// record would not contain them); graph_capture_abort ends a capture that an error interrupted.
bool capturing();
void graph_capture_begin();
void* graph_capture_end();  // a cudaGraphExec_t
void graph_capture_abort();
void graph_launch(void* exec);
void graph_destroy(void* exec);
// Changes whenever one of bertcc's device buffers is freed: a graph recorded at another epoch may
// name a buffer that is gone (or whose address now belongs to another).
uint64_t memory_epoch();
uint64_t graph_launches();  // graphs launched so far (bench, tests)
double memory_used_mb();    // the device's memory in use (cudaMemGetInfo: total - free)
// Bytes of bertcc's own device buffers (alloc/free) now, and their high-water mark since the start
// or the last reset_peak_allocated (PyTorch's memory_allocated / max_memory_allocated).
size_t allocated_bytes();
size_t peak_allocated_bytes();
void reset_peak_allocated();
// fp32 -> bf16, round to nearest even (bit-identical to bertcc::f32_to_bf16)
void to_bf16(bf16_t* out, const float* in, int64_t n);
// fp32 -> bf16 or fp16 (round to nearest even) and back: gradients on a 16-bit wire
void narrow16(uint16_t* out, const float* in, int64_t n, bool bf16);
void widen16(float* out, const uint16_t* in, int64_t n, bool bf16);

// ---- embeddings, LayerNorm, residual ----
void embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                        const float* wtt, int64_t B, int64_t T, int64_t C);
// Deterministic: each row of dwte/dwpe/dwtt adds its tokens in order (the CPU kernel's order, so
// equal bits). ids < V and seg < TT (the tables' rows).
void embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                         const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps);
// overwrite (here and below): dinp written, as if it held +0 before, instead of added to
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite = false);
void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                const float* w, const float* b, int64_t N, int64_t C, float eps,
                                bf16_t* out16 = nullptr);  // out16: out's bf16 rounding too
// LN(dropout(a) + r) and its backward (backend.h) in one kernel each, where the register-row
// kernels take C and the pointers (and the backward has a dropout): false when not (the caller
// composes them instead; the same bits either way).
bool residual_dropout_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a,
                                        const float* r, const float* w, const float* b, int64_t N, int64_t C, float eps,
                                        bf16_t* out16, float p, const Rng& rng, uint64_t base);
bool layernorm_dropout_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                                const float* mean, const float* rstd, int64_t N, int64_t C, float* dbranch,
                                bf16_t* dbranch16, float p, const Rng& rng, uint64_t base);
void residual_forward(float* out, const float* a, const float* b, int64_t n);

// ---- activations, dropout ----
// out16 / dinp16 (optional): the result's bf16 rounding too, written by the same kernel; inp16
// (optional): the input's bf16 rounding too
void gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16 = nullptr,
                  bf16_t* inp16 = nullptr);
// out16 = the bf16 rounding of gelu(inp16) (a bf16 input, widened exactly)
void gelu_forward16(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act,
                   bf16_t* dinp16 = nullptr, bool overwrite = false);
void tanh_forward(float* out, const float* inp, int64_t n);
void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n);
void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base);
void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base,
                      bf16_t* dinp16 = nullptr, bool overwrite = false);  // dinp16: dinp's bf16 rounding too

// ---- rows ----
// dst[r * dst_ld + c] = (or +=) src[r * src_ld + c]
void copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols);
void add_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols);
void gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C);
// x[i] *= s (the fp16 loss scale's unscaling; one rounding per element, as the CPU loop)
void scale(float* x, int64_t n, float s);
void scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C);

// ---- fused attention (no T x T tensor in memory) ----
// qkv[B,T,3C] (q | k | v), mask_add[B,T] additive on keys; out[B,T,C]; `lse` is the saved buffer
// of attention_saved_size() floats: lse[B,NH,T] and, in bf16/fp16 with dropout, the forward's
// dropout decisions (one bit per element) for the backward; in bf16 then q, k and v rounded to bf16
// in the Tensor Core kernels' layout, which the backward reads instead of qkv (it may be null) —
// unless the caller keeps qkv16 (qkv16_kept): qkv's bf16 rounding [B,T,3C], as the QKV product
// writes it (linear_forward's y16), given to the forward and, unchanged, to the backward. The
// kernels then read it in place (head size 16, 32, 64 or 128, C a multiple of 8) or round it into
// scratch, and the saved buffer holds no operands.
// Head sizes up to 128. Dropout on the probabilities as the CPU kernel: element (i, j) of head row
// bh = b*NH + h by 16 bits of number base + attention_drop_number(bh, i, j, T) (base a multiple of
// 4). fp32: exact fp32 on CUDA cores;
// bf16/fp16: Tensor Cores (compute capability 8.0+), rounding where the CPU's bf16 attention does.
int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                             bool qkv16_kept = false);
// bf16/fp16: the kernels stop at each sequence's last key whose mask is above -10000 (BERT's
// padding mask): keys past it have probability exactly 0 (unless a score exceeded its row's largest
// unmasked one by about 9,900), so the results are the same bits. On by default; off with this or
// BERTCC_ATTENTION_SKIP_PADDING=0 (the tests and the attention bench compare both).
void set_attention_skip_padding(bool on);
// out16 (bf16 only, optional): the output's bf16 rounding too, from the kernel's registers; out may
// then be null. qkv16 (bf16 only, optional): qkv's rounding, read instead of qkv (which may be null).
void attention_forward(float* out, float* lse, const float* qkv, const float* mask_add, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec,
                       bf16_t* out16 = nullptr, const bf16_t* qkv16 = nullptr);
// dqkv[B,T,3C] is overwritten. `work` holds attention_backward_work_size() floats.
int64_t attention_backward_work_size(int64_t B, int64_t T, int64_t NH);
// dqkv16 (bf16 only, optional): dqkv's bf16 rounding too, from the kernels' registers.
void attention_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* out,
                        const bf16_t* out16, const float* lse, const float* mask_add, int64_t B, int64_t T, int64_t C,
                        int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec,
                        bf16_t* dqkv16 = nullptr, const bf16_t* qkv16 = nullptr);

// ---- cuDNN's fused attention behind attention_forward/backward (attention/cudnn_switch.cu) ----
// BERTCC_ATTENTION=bertcc|cudnn (unset: bertcc), read once; another value is an error naming it.
enum class AttentionImpl { Bertcc, Cudnn };
AttentionImpl attention_impl();
void set_attention_impl(AttentionImpl impl);  // tests: as if BERTCC_ATTENTION said so
// With cudnn: throws, naming the library and why, where libcudnn cannot be loaded or a handle made
// on the current device (no silent fallback). Nothing with bertcc.
void attention_impl_check();
// One phrase for the backend's start-up line: which attention runs.
std::string attention_impl_describe();
// The scratch (floats) that the cuDNN path needs in attention_forward/backward's work for this
// call shape, 0 where it never takes the shape (the switch off, not bf16, head size not 64 or 128,
// T > 512): q_len, kv_len and a flag per sequence, in training dout's bf16 rounding (B T C / 2
// floats) and with dropout the keep mask (B NH T T / 2 floats).
int64_t attention_cudnn_work_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                                  bool inference);
// Whether a padded attention call takes cuDNN: a function of its shape and what its caller says
// (right_padded: every mask row is n >= 1 keys at 0 then padding at <= -10000; forward_only: no
// backward follows), and of the plans cuDNN made for the shape (made here on the first call and
// kept: the answer for a shape does not change in a process), so a forward and its backward agree.
// Where the switch is on and the answer is no, the reason is said once per shape (stderr); the
// first yes per shape is said too. A caller that says right_padded sizes work with
// attention_cudnn_work_size.
bool attention_cudnn_takes(int64_t B, int64_t T, int64_t C, int64_t NH, float p, Precision prec, const bf16_t* qkv16,
                           bool right_padded, bool forward_only);
// The calls, where attention_cudnn_takes: the forward writes out16 (and out, widened, if given) and,
// unless forward_only, the row log-sum-exp at saved[bh*T + i] (bertcc's lse, natural log); the
// backward overwrites dqkv16 (and dqkv, widened, if given) from out16, dout (rounded to bf16 into
// work) and saved. Dropout: bertcc's decisions (attn::keep), drawn into work as cuDNN's mask, again
// in the backward. A mask row that is not right-padded stops the run (a device trap).
void attention_cudnn_forward(float* out, bf16_t* out16, float* saved, float* work, const bf16_t* qkv16,
                             const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                             const Rng& rng, uint64_t base, bool forward_only);
void attention_cudnn_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const bf16_t* qkv16,
                              const bf16_t* out16, const float* saved, const float* mask_add, int64_t B, int64_t T,
                              int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base);

// ---- ELECTRA's Gumbel-max sampling (as kernels::gumbel_argmax; the picks land in host memory) ----
void gumbel_argmax(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng, uint64_t base);
// as kernels::weighted_row_sums (double sums over t in order; the weights are uploaded from the host)
void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B, int64_t T,
                       int64_t C);
// ---- softmax cross-entropy with its gradient (as kernels::softmax_xent_forward_backward) ----
int64_t softmax_xent_forward_backward(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                                      int32_t ignore_index, float grad_scale, int64_t* num_correct = nullptr);

// ---- GEMM (cuBLASLt) ----
// GemmArgs with device pointers. fp32: exact fp32 products (TF32 only after
// set_allow_tf32(true)); bf16: A and B rounded to bf16 (or taken from A16/B16), fp32 accumulate
// and output. Bias through cuBLASLt's epilogue.
void set_allow_tf32(bool on);
bool allow_tf32();
void gemm(const GemmArgs& g, Precision p);
// bf16 only (ignored otherwise): x16 / dy16, x's and dy's roundings already made; keep_x16, where x16
// is null, receives x's rounding (made for the product anyway) for the backward's dW product; y16,
// where given, receives the output as its bf16 rounding instead of y (fp32 accumulation and bias,
// one rounding), and y (may be null) is then only space the product may pass through.
void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                    Precision p, const bf16_t* W16 = nullptr, const bf16_t* x16 = nullptr, bf16_t* keep_x16 = nullptr,
                    bf16_t* y16 = nullptr);
void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                     int64_t N, int64_t K, Precision p, const bf16_t* W16 = nullptr, const bf16_t* dy16 = nullptr,
                     const bf16_t* x16 = nullptr, bool overwrite_dx = false);
// FFN1's backward start: dinp16 = bf16(dout * gelu'(inp16)) ([M, N]; the input as bf16, widened)
// and db += its fp32 column sums (bias_backward's bits), without writing the fp32 gradient.
// out16 (may be null): bf16(gelu(inp16)) too, gelu_forward16's bits.
void gelu_bias_backward(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M, int64_t N,
                        Activation act, bf16_t* out16 = nullptr);
void bias_backward(float* db, const float* dy, int64_t M, int64_t N);  // deterministic (fixed chunks, then in order)
// TFLOP/s of a bare cuBLASLt GEMM C[M,N] = A[M,K] B[K,N] (bf16/fp16 operands for bf16/fp16), best of `iters`.
double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters);
// For bench/cuda/gemm_bench.cpp: g (bf16 operands A16 and B16; C fp32, or bf16 with bf16_out) timed
// with each of cuBLASLt's first max_algos heuristic answers, best first (the first is the one bertcc's
// GEMMs use): mean ms over `iters` back-to-back calls, -1 where an answer failed to run.
std::vector<double> gemm_algo_ms(const GemmArgs& g, bool bf16_out, int max_algos, int iters);

// ---- optimizers over flat device buffers (bertcc/optim.h semantics) ----
// Deterministic global L2 norm (fixed blocks, partials summed in order in double).
double global_norm(const float* x, size_t n);
struct DeviceAdamState {
  float* m = nullptr;  // [t.total()] device, or [end - begin] for a shard
  float* v = nullptr;
  int64_t step = 0;
  // ZeRO-1: the moments of the tensors starting in [begin, end) only, which the step updates alone
  // (grad_norm must then be given); end = 0: the whole buffer.
  size_t begin = 0, end = 0;
};
double lamb_step(const ParamTable& t, float* params, float* grads, DeviceAdamState& s, float lr, const LambOptions& o,
                 double grad_norm = -1);
double adamw_step(const ParamTable& t, float* params, float* grads, DeviceAdamState& s, float lr, const AdamWOptions& o,
                  double grad_norm = -1);

}  // namespace bertcc::cuda
