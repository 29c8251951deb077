// Each operation of ops.h: one dispatch to the device's table where the backend registered one
// (device_ops.h; CUDA's is src/cuda/ops_cuda.cpp), then the CPU's implementation (kernels/ call for
// call, so CPU results are the kernels' own), which the staged backend shares after checking that
// each buffer it is given is one of its allocations (check_staged_buffers).
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/device_ops.h"
#include "bertcc/error.h"
#include "kernels/gemm.h"
#include "kernels/gemm_int8.h"
#include "kernels/kernels.h"

namespace bertcc {
namespace {

constexpr int64_t kChunk = int64_t{1} << 18;  // host scratch of the bf16-only GELU paths, in floats

int64_t aligned(int64_t n) { return (n + 15) / 16 * 16; }
int64_t longest(const int64_t* cu, int64_t B) {
  int64_t m = 0;
  for (int64_t b = 0; b < B; ++b) m = std::max(m, cu[b + 1] - cu[b]);
  return m;
}
// The length every sequence has, or 0.
int64_t one_length(const int64_t* cu, int64_t B) {
  for (int64_t b = 1; b < B; ++b)
    if (cu[b + 1] - cu[b] != cu[1] - cu[0]) return 0;
  return B > 1 ? cu[1] - cu[0] : 0;
}

}  // namespace

Ops::Ops(DeviceKind kind, DeviceMemory& mem, const DeviceOps* device) : kind_(kind), mem_(mem), dev_(device) {
  BERTCC_CHECK((kind == DeviceKind::CUDA) == (device != nullptr), "Ops: a device's operations without its table");
  if (!device) return;
  // Every entry set: the table is all function pointers, and designated initialisers may leave one out.
  using Entry = void (*)();
  static_assert(sizeof(DeviceOps) % sizeof(Entry) == 0, "DeviceOps holds function pointers only");
  std::array<uintptr_t, sizeof(DeviceOps) / sizeof(Entry)> entries;
  static_assert(sizeof(entries) == sizeof(DeviceOps));
  std::memcpy(entries.data(), device, sizeof(DeviceOps));
  for (size_t i = 0; i < entries.size(); ++i)
    BERTCC_CHECK(entries[i] != 0, "Ops: entry ", i, " of the device's operations table (device_ops.h) is not set");
}

void Ops::check_buffer(const char* call, const void* p, int i) const {
  BERTCC_CHECK(!p || mem_.holds(p), "cpu-staged: ", call, ": buffer argument ", i + 1,
               " is host memory, not a buffer of the backend (a missing upload?)");
}

// ---- rows and conversions ----

void Ops::copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
  if (dev_) return dev_->copy_rows(dst, dst_ld, src, src_ld, rows, cols);
  check_staged_buffers("copy_rows", dst, src);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * src_ld, sizeof(float) * cols);
}

void Ops::add_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
  if (dev_) return dev_->add_rows(dst, dst_ld, src, src_ld, rows, cols);
  check_staged_buffers("add_rows", dst, src);
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + r * dst_ld;
    const float* s = src + r * src_ld;
    for (int64_t c = 0; c < cols; ++c) d[c] += s[c];
  }
}

void Ops::to_bf16(bf16_t* out, const float* in, int64_t n) {
  if (dev_) return dev_->to_bf16(out, in, n);
  check_staged_buffers("to_bf16", out, in);
  bertcc::to_bf16(in, out, static_cast<size_t>(n));
}

void Ops::narrow16(uint16_t* out, const float* in, int64_t n, bool bf16) {
  if (dev_) return dev_->narrow16(out, in, n, bf16);
  check_staged_buffers("narrow16", out, in);
  if (bf16)
    bertcc::to_bf16(in, out, static_cast<size_t>(n));
  else
    bertcc::to_f16(in, out, static_cast<size_t>(n));
}

void Ops::widen16(float* out, const uint16_t* in, int64_t n, bool bf16) {
  if (dev_) return dev_->widen16(out, in, n, bf16);
  check_staged_buffers("widen16", out, in);
  if (bf16)
    bertcc::from_bf16(in, out, static_cast<size_t>(n));
  else
    bertcc::from_f16(in, out, static_cast<size_t>(n));
}

void Ops::scale(float* x, int64_t n, float s) {
  if (dev_) return dev_->scale(x, n, s);
  check_staged_buffers("scale", x);
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// ---- embeddings, LayerNorm ----

void Ops::embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                             const float* wtt, int64_t B, int64_t T, int64_t C) {
  if (dev_) return dev_->embeddings_forward(out, ids, seg, wte, wpe, wtt, B, T, C);
  check_staged_buffers("embeddings_forward", out, ids, seg, wte, wpe, wtt);
  kernels::embeddings_forward(out, ids, seg, wte, wpe, wtt, B, T, C);
}

void Ops::embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                              const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT) {
  if (dev_) return dev_->embeddings_backward(dwte, dwpe, dwtt, dout, ids, seg, B, T, C, V, TT);
  check_staged_buffers("embeddings_backward", dwte, dwpe, dwtt, dout, ids, seg);
  kernels::embeddings_backward(dwte, dwpe, dwtt, dout, ids, seg, B, T, C, V, TT);
}

void Ops::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                            int64_t N, int64_t C, float eps) {
  if (dev_) return dev_->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  check_staged_buffers("layernorm_forward", out, mean, rstd, inp, w, b);
  kernels::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
}

// overwrite: the CPU kernels add, so the destination is zeroed first (the same bits)
void Ops::layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                             const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite) {
  if (dev_) return dev_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, overwrite);
  check_staged_buffers("layernorm_backward", dinp, dw, db, dout, inp, w, mean, rstd);
  if (overwrite) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(N * C));
  kernels::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

void Ops::residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                     const float* w, const float* b, int64_t N, int64_t C, float eps, bf16_t* out16) {
  if (dev_) return dev_->residual_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16);
  check_staged_buffers("residual_layernorm_forward", out, sum, mean, rstd, a, r, w, b, out16);
  kernels::residual_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps);
  if (out16) bertcc::to_bf16(out, out16, static_cast<size_t>(N * C));
}

// A device may fuse the two (CUDA: one kernel where the register-row kernels take C and the
// pointers); otherwise, and on the CPU, dropout in place, then the residual LayerNorm
void Ops::residual_dropout_layernorm_forward(float* out, float* sum, float* mean, float* rstd, float* a, const float* r,
                                             const float* w, const float* b, int64_t N, int64_t C, float eps,
                                             bf16_t* out16, float p, const Rng& rng, uint64_t base) {
  if (dev_ &&
      dev_->residual_dropout_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16, p, rng, base))
    return;
  if (p > 0) dropout_forward(a, a, N * C, p, rng, base);
  residual_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16);
}

void Ops::layernorm_dropout_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                     const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                                     float* dbranch, bf16_t* dbranch16, float p, const Rng& rng, uint64_t base) {
  if (dev_ &&
      dev_->layernorm_dropout_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, dbranch, dbranch16, p, rng, base))
    return;
  layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, /*overwrite=*/true);
  dropout_backward(dbranch, dinp, N * C, p, rng, base, dbranch16, /*overwrite=*/true);
}

// ---- bias, GELU, tanh, dropout ----

void Ops::bias_backward(float* db, const float* dy, int64_t M, int64_t N) {
  if (dev_) return dev_->bias_backward(db, dy, M, N);
  check_staged_buffers("bias_backward", db, dy);
  kernels::bias_backward(db, dy, M, N);
}

// CUDA: one kernel, without the fp32 gradient (no scratch). CPU: gelu_backward (overwriting) on
// the widened input, a bounded chunk at a time (widening is exact, so the gradient is that of the
// input's values as bf16), its rounding, then bias_backward.
void Ops::gelu_bias_backward(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M, int64_t N,
                             Activation act, float* scratch, bf16_t* out16) {
  if (dev_) return dev_->gelu_bias_backward(dinp16, db, inp16, dout, M, N, act, out16);
  check_staged_buffers("gelu_bias_backward", dinp16, db, inp16, dout, scratch, out16);
  if (out16) gelu_forward16(out16, inp16, M * N, act);  // the forward's own kernel: its bits
  const int64_t n = M * N;
  thread_local std::vector<float> tmp;
  tmp.resize(static_cast<size_t>(std::min(n, kChunk)));
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    bertcc::from_bf16(inp16 + i, tmp.data(), static_cast<size_t>(len));
    std::memset(scratch + i, 0, sizeof(float) * static_cast<size_t>(len));
    kernels::gelu_backward(scratch + i, tmp.data(), dout + i, len, act);
  }
  bertcc::to_bf16(scratch, dinp16, static_cast<size_t>(n));
  kernels::bias_backward(db, scratch, M, N);
}

void Ops::gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16, bf16_t* inp16) {
  if (dev_) return dev_->gelu_forward(out, inp, n, act, out16, inp16);
  check_staged_buffers("gelu_forward", out, inp, out16, inp16);
  if (inp16) bertcc::to_bf16(inp, inp16, static_cast<size_t>(n));
  if (!out) {  // the bf16 copy only: through a bounded scratch, the same values rounded
    BERTCC_CHECK(out16, "gelu_forward: no output");
    thread_local std::vector<float> tmp;
    tmp.resize(static_cast<size_t>(std::min(n, kChunk)));
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t len = std::min(kChunk, n - i);
      kernels::gelu_forward(tmp.data(), inp + i, len, act);
      bertcc::to_bf16(tmp.data(), out16 + i, static_cast<size_t>(len));
    }
    return;
  }
  kernels::gelu_forward(out, inp, n, act);
  if (out16) bertcc::to_bf16(out, out16, static_cast<size_t>(n));
}

// CPU: on the widened input, a bounded chunk at a time (widening is exact)
void Ops::gelu_forward16(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act) {
  if (dev_) return dev_->gelu_forward16(out16, inp16, n, act);
  check_staged_buffers("gelu_forward16", out16, inp16);
  thread_local std::vector<float> tmp;
  tmp.resize(static_cast<size_t>(std::min(n, kChunk)));
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    bertcc::from_bf16(inp16 + i, tmp.data(), static_cast<size_t>(len));
    kernels::gelu_forward(tmp.data(), tmp.data(), len, act);
    bertcc::to_bf16(tmp.data(), out16 + i, static_cast<size_t>(len));
  }
}

void Ops::gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act, bf16_t* dinp16,
                        bool overwrite) {
  if (dev_) return dev_->gelu_backward(dinp, inp, dout, n, act, dinp16, overwrite);
  check_staged_buffers("gelu_backward", dinp, inp, dout, dinp16);
  if (overwrite) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(n));
  kernels::gelu_backward(dinp, inp, dout, n, act);
  if (dinp16) bertcc::to_bf16(dinp, dinp16, static_cast<size_t>(n));
}

void Ops::tanh_forward(float* out, const float* inp, int64_t n) {
  if (dev_) return dev_->tanh_forward(out, inp, n);
  check_staged_buffers("tanh_forward", out, inp);
  kernels::tanh_forward(out, inp, n);
}

void Ops::tanh_backward(float* dinp, const float* out, const float* dout, int64_t n) {
  if (dev_) return dev_->tanh_backward(dinp, out, dout, n);
  check_staged_buffers("tanh_backward", dinp, out, dout);
  kernels::tanh_backward(dinp, out, dout, n);
}

void Ops::dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base) {
  if (dev_) return dev_->dropout_forward(out, inp, n, p, rng, base);
  check_staged_buffers("dropout_forward", out, inp);
  kernels::dropout_forward(out, inp, n, p, rng, base);
}

void Ops::dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base,
                           bf16_t* dinp16, bool overwrite) {
  if (dev_) return dev_->dropout_backward(dinp, dout, n, p, rng, base, dinp16, overwrite);
  check_staged_buffers("dropout_backward", dinp, dout, dinp16);
  if (overwrite) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(n));
  kernels::dropout_backward(dinp, dout, n, p, rng, base);
  if (dinp16) bertcc::to_bf16(dinp, dinp16, static_cast<size_t>(n));
}

void Ops::gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C) {
  if (dev_) return dev_->gather_rows(out, inp, rows, M, C);
  check_staged_buffers("gather_rows", out, inp, rows);
  kernels::gather_rows(out, inp, rows, M, C);
}

void Ops::scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C) {
  if (dev_) return dev_->scatter_add_rows(dinp, dout, rows, M, C);
  check_staged_buffers("scatter_add_rows", dinp, dout, rows);
  kernels::scatter_add_rows(dinp, dout, rows, M, C);
}

// ---- attention ----

int64_t Ops::attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                                  bool qkv16_kept) const {
  if (dev_) return dev_->attention_saved_size(B, T, C, NH, dropout, prec, qkv16_kept);
  if (prec == Precision::I8) return 0;  // attention_int8_forward keeps nothing (inference only)
  return kernels::attention_saved_size(B, T, C, NH, dropout, prec, qkv16_kept);
}

int64_t Ops::attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH) const {
  if (dev_) return dev_->attention_work_size(B, T, C, NH);
  return kernels::attention_work_size(B, T, C, NH);
}

// A device: its own (CUDA: with the cuDNN path's lengths, dout16 and keep mask); the CPU: the first form
int64_t Ops::attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                                 bool inference) const {
  if (dev_) return dev_->attention_work_size_hinted(B, T, C, NH, dropout, prec, inference);
  (void)dropout, (void)inference;
  return prec == Precision::I8 ? 0 : attention_work_size(B, T, C, NH);  // (int8's scratch is its threads')
}

// The hints are for a device's paths (CUDA's cuDNN path, ops_cuda.cpp); the CPU ignores them
void Ops::attention_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv, const bf16_t* qkv16,
                            const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                            const Rng& rng, uint64_t base, Precision prec, const AttentionHints& hints) {
  if (dev_)
    return dev_->attention_forward(out, out16, saved, work, qkv, qkv16, mask_add, B, T, C, NH, dropout_p, rng, base,
                                   prec, hints);
  (void)hints;
  check_staged_buffers("attention_forward", out, out16, saved, work, qkv, qkv16, mask_add);
  if (prec == Precision::I8) {  // int8 inference: both products in int8 (kernels/gemm_int8.h)
    BERTCC_CHECK(dropout_p == 0.0f && out && qkv, "attention_forward: int8 is for inference only");
    return kernels::attention_int8_forward(out, qkv, nullptr, mask_add, B, T, C, NH);
  }
  BERTCC_CHECK(out || (out16 && prec == Precision::BF16),
               "attention_forward: no output (a null out needs its bf16 rounding, in bf16)");
  kernels::attention_forward(out, saved, work, qkv, mask_add, B, T, C, NH, dropout_p, rng, base, prec,
                             prec == Precision::BF16 ? out16 : nullptr, qkv16);
}

// The CPU reads neither out nor out16, nor draws numbers (its saved buffer holds the dropped-out P)
void Ops::attention_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                             const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                             const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                             const Rng& rng, uint64_t base, Precision prec, const AttentionHints& hints) {
  if (dev_)
    return dev_->attention_backward(dqkv, dqkv16, work, dout, qkv, qkv16, out, out16, saved, mask_add, B, T, C, NH,
                                    dropout_p, rng, base, prec, hints);
  (void)rng, (void)base, (void)hints;
  check_staged_buffers("attention_backward", dqkv, dqkv16, work, dout, qkv, qkv16, out, out16, saved, mask_add);
  kernels::attention_backward(dqkv, work, dout, qkv, saved, B, T, C, NH, dropout_p, prec,
                              prec == Precision::BF16 ? dqkv16 : nullptr, qkv16);
}

// A device: where its varlen kernels are on (CUDA: unless BERTCC_CUDA_VARLEN=0). Not under
// --cuda-graphs: the model then keeps batches without padding padded, so that their inference
// forwards can be recorded (packed batches are not).
bool Ops::varlen_attention() const {
  if (dev_) return dev_->attention_varlen_on() && !cuda_graphs();
  return true;
}

// A device: as the per-sequence calls lay it out (its varlen kernels keep that layout; one padded
// call's is smaller)
int64_t Ops::attention_varlen_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout,
                                         Precision prec, bool qkv16_kept) const {
  if (dev_) return attention_varlen_per_sequence_saved_size(cu, B, C, NH, dropout, prec, qkv16_kept);
  if (prec == Precision::I8) return 0;
  return kernels::attention_varlen_saved_size(cu, B, C, NH, dropout, prec, qkv16_kept);
}

// CPU: none (each thread's scratch is its own)
int64_t Ops::attention_varlen_work_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH) const {
  if (dev_)
    return std::max(attention_varlen_per_sequence_work_size(cu, B, C, NH),
                    dev_->attention_varlen_work_size(cu, B, C, NH));
  return 0;
}

// A device, for calls its varlen kernels decline (CUDA's: fp16, a bf16 head size they do not read
// in place, and all under BERTCC_CUDA_VARLEN=0): while its varlen kernels are on, sequences all of
// one length (a batch without padding, which the model packs too while varlen_attention() is true)
// as one padded call for them all with a zero mask (each sequence's dropout numbers are where the
// per-sequence calls put them, so are its bits); otherwise one padded call per sequence.
void Ops::attention_varlen_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                   const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C, int64_t NH,
                                   float dropout_p, const Rng& rng, uint64_t base, Precision prec) {
  if (dev_) {
    if (dev_->attention_varlen_forward(out, out16, saved, qkv, qkv16, cu, B, C, NH, dropout_p, rng, base, prec)) return;
    if (const int64_t T = dev_->attention_varlen_on() ? one_length(cu, B) : 0) {
      mem_.zero(work, sizeof(float) * static_cast<size_t>(B * T));  // the mask
      return attention_forward(out, out16, saved, work + aligned(B * T), qkv, qkv16, work, B, T, C, NH, dropout_p, rng,
                               base, prec);
    }
    return attention_varlen_forward_per_sequence(out, out16, saved, work, qkv, qkv16, cu, B, C, NH, dropout_p, rng,
                                                 base, prec);
  }
  check_staged_buffers("attention_varlen_forward", out, out16, saved, qkv, qkv16);
  if (prec == Precision::I8) {
    BERTCC_CHECK(dropout_p == 0.0f && out && qkv, "attention_varlen_forward: int8 is for inference only");
    return kernels::attention_int8_forward(out, qkv, cu, nullptr, B, 0, C, NH);
  }
  BERTCC_CHECK(out || (out16 && prec == Precision::BF16),
               "attention_varlen_forward: no output (a null out needs its bf16 rounding, in bf16)");
  kernels::attention_varlen_forward(out, saved, qkv, cu, B, C, NH, dropout_p, rng, base, prec,
                                    prec == Precision::BF16 ? out16 : nullptr, qkv16);
}

void Ops::attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                                    const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                                    const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p,
                                    const Rng& rng, uint64_t base, Precision prec) {
  if (dev_) {
    if (dev_->attention_varlen_backward(dqkv, dqkv16, work, dout, qkv, qkv16, out, out16, saved, cu, B, C, NH,
                                        dropout_p, rng, base, prec))
      return;
    if (const int64_t T = dev_->attention_varlen_on() ? one_length(cu, B) : 0) {
      mem_.zero(work, sizeof(float) * static_cast<size_t>(B * T));
      return attention_backward(dqkv, dqkv16, work + aligned(B * T), dout, qkv, qkv16, out, out16, saved, work, B, T, C,
                                NH, dropout_p, rng, base, prec);
    }
    return attention_varlen_backward_per_sequence(dqkv, dqkv16, work, dout, qkv, qkv16, out, out16, saved, cu, B, C, NH,
                                                  dropout_p, rng, base, prec);
  }
  (void)work, (void)rng, (void)base;
  check_staged_buffers("attention_varlen_backward", dqkv, dqkv16, dout, qkv, qkv16, out, out16,
                       saved);  // (out, out16: not read)
  kernels::attention_varlen_backward(dqkv, dout, qkv, saved, cu, B, C, NH, dropout_p, prec, dqkv16, qkv16);
}

int64_t Ops::attention_varlen_per_sequence_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout,
                                                      Precision prec, bool qkv16_kept) const {
  int64_t s = 0;
  for (int64_t b = 0; b < B; ++b)
    s += aligned(attention_saved_size(1, cu[b + 1] - cu[b], C, NH, dropout, prec, qkv16_kept));
  return s;
}

// the zero mask, then the scratch of the longest sequence's call
int64_t Ops::attention_varlen_per_sequence_work_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH) const {
  int64_t w = 0;
  for (int64_t b = 0; b < B; ++b) w = std::max(w, attention_work_size(1, cu[b + 1] - cu[b], C, NH));
  return aligned(longest(cu, B)) + w;
}

void Ops::attention_varlen_forward_per_sequence(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                                const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C,
                                                int64_t NH, float dropout_p, const Rng& rng, uint64_t base,
                                                Precision prec) {
  const int64_t zeros = aligned(longest(cu, B));
  mem_.zero(work, sizeof(float) * static_cast<size_t>(zeros));
  const bool kept = qkv16 != nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r0 = cu[b], n = cu[b + 1] - r0;
    attention_forward(out ? out + r0 * C : nullptr, out16 ? out16 + r0 * C : nullptr, saved, work + zeros,
                      qkv ? qkv + r0 * 3 * C : nullptr, qkv16 ? qkv16 + r0 * 3 * C : nullptr, work, 1, n, C, NH,
                      dropout_p, rng, base, prec);
    saved += aligned(attention_saved_size(1, n, C, NH, dropout_p > 0, prec, kept));
    base += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
}

void Ops::attention_varlen_backward_per_sequence(float* dqkv, bf16_t* dqkv16, float* work, const float* dout,
                                                 const float* qkv, const bf16_t* qkv16, const float* out,
                                                 const bf16_t* out16, const float* saved, const int64_t* cu, int64_t B,
                                                 int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base,
                                                 Precision prec) {
  const int64_t zeros = aligned(longest(cu, B));
  mem_.zero(work, sizeof(float) * static_cast<size_t>(zeros));
  const bool kept = qkv16 != nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r0 = cu[b], n = cu[b + 1] - r0;
    attention_backward(dqkv + r0 * 3 * C, dqkv16 ? dqkv16 + r0 * 3 * C : nullptr, work + zeros, dout + r0 * C,
                       qkv ? qkv + r0 * 3 * C : nullptr, qkv16 ? qkv16 + r0 * 3 * C : nullptr,
                       out ? out + r0 * C : nullptr, out16 ? out16 + r0 * C : nullptr, saved, work, 1, n, C, NH,
                       dropout_p, rng, base, prec);
    saved += aligned(attention_saved_size(1, n, C, NH, dropout_p > 0, prec, kept));
    base += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
}

// ---- heads ----

void Ops::gumbel_argmax(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng, uint64_t base) {
  if (dev_) return dev_->gumbel_argmax(picks_host, logits, M, V, rng, base);
  check_staged_buffers("gumbel_argmax", logits);
  kernels::gumbel_argmax(picks_host, logits, M, V, rng, base);
}

void Ops::weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B, int64_t T,
                            int64_t C) {
  if (dev_) return dev_->weighted_row_sums(out, out_ld, x, w_host, B, T, C);
  check_staged_buffers("weighted_row_sums", out, x);
  kernels::weighted_row_sums(out, out_ld, x, w_host, B, T, C);
}

int64_t Ops::softmax_xent(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                          int32_t ignore_index, float grad_scale, int64_t* num_correct) {
  if (dev_) return dev_->softmax_xent(logits, losses, labels, N, V, ignore_index, grad_scale, num_correct);
  check_staged_buffers("softmax_xent", logits, losses, labels);
  return kernels::softmax_xent_forward_backward(logits, losses, labels, N, V, ignore_index, grad_scale, num_correct);
}

// ---- linear layers ----

void Ops::linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                         Precision p, const bf16_t* W16, const LinearIo& a16) {
  if (dev_) return dev_->linear_forward(y, x, W, b, M, N, K, p, W16, a16);
  const bool staged = kind_ == DeviceKind::Staged;
  check_staged_buffers("linear_forward", y, x, W, b, W16, a16.x16, a16.keep_x16, a16.y16);
  BERTCC_CHECK(!a16.y16 || (p == Precision::BF16 && (y || staged)),
               "linear_forward: a bf16 output needs bf16 and y's space");
  if (a16.y16 && !y) {  // staged, as CUDA: no fp32 output space given; the product's is host scratch
    thread_local std::vector<float> space;
    space.resize(static_cast<size_t>(M * N));
    y = space.data();
  }
  const bf16_t* x16 = nullptr;
  if (p == Precision::BF16) {
    x16 = a16.x16;
    if (!x16 && a16.keep_x16) {
      bertcc::to_bf16(x, a16.keep_x16, static_cast<size_t>(M * K));
      x16 = a16.keep_x16;
    }
  }
  kernels::linear_forward(y, x, W, b, M, N, K, p, W16, x16);
  if (a16.y16) bertcc::to_bf16(y, a16.y16, static_cast<size_t>(M * N));  // the fp32 output's rounding
}

void Ops::linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                          int64_t N, int64_t K, Precision p, const bf16_t* W16, const LinearIo& a16) {
  if (dev_) return dev_->linear_backward(dx, dW, db, dy, x, W, M, N, K, p, W16, a16);
  check_staged_buffers("linear_backward", dx, dW, db, dy, x, W, W16, a16.dy16, a16.x16);
  if (dx && a16.overwrite_dx) std::memset(dx, 0, sizeof(float) * static_cast<size_t>(M * K));
  const bool bf = p == Precision::BF16;
  kernels::linear_backward(dx, dW, db, dy, x, W, M, N, K, p, W16, bf ? a16.dy16 : nullptr, bf ? a16.x16 : nullptr);
}

}  // namespace bertcc
