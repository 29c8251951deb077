// The CPU backend: kernels/ call for call (so results are the CPU kernels' own), host memory.
// The staged backend is the same class with its allocations registered: every call first checks
// that the buffers it is given are its own (and that upload/download cross between host and them).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

namespace bertcc {

void check_moments(const AdamState& in, size_t n) {
  if (in.m.empty() && in.v.empty()) return;
  const size_t want = in.end ? in.end - in.begin : n;
  BERTCC_CHECK(in.begin <= in.end && in.end <= n && (in.end || !in.begin) && in.m.size() == want && in.v.size() == want,
               "optimizer moments of ", in.m.size(), "/", in.v.size(), " values for ",
               in.end ? "the shard [" + std::to_string(in.begin) + ", " + std::to_string(in.end) + ") of " : "", n,
               " parameters");
}

namespace {

// The staged backend's allocations: [begin, begin + bytes) by begin.
class Allocations {
 public:
  void add(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    live_[reinterpret_cast<uintptr_t>(p)] = bytes;
    bytes_ += bytes;
    peak_ = std::max(peak_, bytes_);
  }
  void remove(const void* p) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    BERTCC_CHECK(it != live_.end(), "cpu-staged: free of a pointer the backend did not allocate");
    bytes_ -= it->second;
    live_.erase(it);
  }
  size_t bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    return bytes_;
  }
  size_t peak() const {
    std::lock_guard<std::mutex> lk(mu_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lk(mu_);
    peak_ = bytes_;
  }
  bool owns(const void* p) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.upper_bound(a);
    if (it == live_.begin()) return false;
    --it;
    return a < it->first + it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> live_;
  size_t bytes_ = 0, peak_ = 0;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool staged) : staged_(staged) {}
  // staged: the products' fp32 space for a bf16 output alone is host scratch, so that models lay
  // out their buffers as on CUDA (whose cuBLASLt writes the rounding itself)
  bool y16_needs_y() const override { return !staged_; }
  DeviceKind kind() const override { return staged_ ? DeviceKind::Staged : DeviceKind::CPU; }
  std::string describe() const override {
    return staged_ ? "backend: cpu-staged (the CPU kernels behind the device interface, pointers checked); " +
                         describe_backend(true)
                   : describe_backend(true);
  }

  void* alloc(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = std::calloc(1, bytes);
    BERTCC_CHECK(p, "out of memory allocating ", static_cast<double>(bytes) / (1 << 20), " MiB");
    if (staged_) owned_.add(p, bytes);
    return p;
  }
  void free(void* p) override {
    if (staged_ && p) owned_.remove(p);
    std::free(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    if (staged_) {
      mine("upload (destination)", dst);
      BERTCC_CHECK(!owned_.owns(src), "cpu-staged: upload from a device buffer (use copy)");
    }
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    if (staged_) {
      mine("download (source)", src);
      BERTCC_CHECK(!owned_.owns(dst), "cpu-staged: download into a device buffer (use copy)");
    }
    std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    mine("copy", dst, src);
    if (dst != src) std::memcpy(dst, src, bytes);
  }
  void zero(void* p, size_t bytes) override {
    if (!bytes) return;
    mine("zero", p);
    std::memset(p, 0, bytes);
  }
  void copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) override {
    mine("copy_rows", dst, src);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * src_ld, sizeof(float) * cols);
  }
  void add_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) override {
    mine("add_rows", dst, src);
    for (int64_t r = 0; r < rows; ++r) {
      float* d = dst + r * dst_ld;
      const float* s = src + r * src_ld;
      for (int64_t c = 0; c < cols; ++c) d[c] += s[c];
    }
  }
  void to_bf16(bf16_t* out, const float* in, int64_t n) override {
    mine("to_bf16", out, in);
    bertcc::to_bf16(in, out, static_cast<size_t>(n));
  }
  void narrow16(uint16_t* out, const float* in, int64_t n, bool bf16) override {
    mine("narrow16", out, in);
    if (bf16) bertcc::to_bf16(in, out, static_cast<size_t>(n));
    else bertcc::to_f16(in, out, static_cast<size_t>(n));
  }
  void widen16(float* out, const uint16_t* in, int64_t n, bool bf16) override {
    mine("widen16", out, in);
    if (bf16) bertcc::from_bf16(in, out, static_cast<size_t>(n));
    else bertcc::from_f16(in, out, static_cast<size_t>(n));
  }
  void scale(float* x, int64_t n, float s) override {
    mine("scale", x);
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }
  void synchronize() override {}

  void embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                          const float* wtt, int64_t B, int64_t T, int64_t C) override {
    mine("embeddings_forward", out, ids, seg, wte, wpe, wtt);
    kernels::embeddings_forward(out, ids, seg, wte, wpe, wtt, B, T, C);
  }
  void embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                           const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT) override {
    mine("embeddings_backward", dwte, dwpe, dwtt, dout, ids, seg);
    kernels::embeddings_backward(dwte, dwpe, dwtt, dout, ids, seg, B, T, C, V, TT);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override {
    mine("layernorm_forward", out, mean, rstd, inp, w, b);
    kernels::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  }
  // overwrite: the CPU kernels add, so the destination is zeroed first (the same bits)
  using Backend::layernorm_backward;
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite) override {
    mine("layernorm_backward", dinp, dw, db, dout, inp, w, mean, rstd);
    if (overwrite) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(N * C));
    kernels::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  using Backend::dropout_backward;
  using Backend::residual_layernorm_forward;
  void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                  const float* w, const float* b, int64_t N, int64_t C, float eps,
                                  bf16_t* out16) override {
    mine("residual_layernorm_forward", out, sum, mean, rstd, a, r, w, b, out16);
    kernels::residual_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps);
    if (out16) bertcc::to_bf16(out, out16, static_cast<size_t>(N * C));
  }
  using Backend::gelu_backward;
  static constexpr int64_t kChunk = int64_t{1} << 18;  // host scratch of the bf16-only GELU paths, in floats
  void bias_backward(float* db, const float* dy, int64_t M, int64_t N) override {
    mine("bias_backward", db, dy);
    kernels::bias_backward(db, dy, M, N);
  }
  using Backend::gelu_forward;
  using Backend::linear_backward;
  using Backend::linear_forward;
  void gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16,
                    bf16_t* inp16) override {
    mine("gelu_forward", out, inp, out16, inp16);
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
  // on the widened input, a bounded chunk at a time (widening is exact)
  void gelu_forward16(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act) override {
    mine("gelu_forward16", out16, inp16);
    thread_local std::vector<float> tmp;
    tmp.resize(static_cast<size_t>(std::min(n, kChunk)));
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t len = std::min(kChunk, n - i);
      bertcc::from_bf16(inp16 + i, tmp.data(), static_cast<size_t>(len));
      kernels::gelu_forward(tmp.data(), tmp.data(), len, act);
      bertcc::to_bf16(tmp.data(), out16 + i, static_cast<size_t>(len));
    }
  }
  // gelu_backward (overwriting) on the widened input, a bounded chunk at a time (widening is exact,
  // so the gradient is that of the input's values as bf16), its rounding, then bias_backward
  void gelu_bias_backward(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M, int64_t N,
                          Activation act, float* scratch, bf16_t* out16) override {
    mine("gelu_bias_backward", dinp16, db, inp16, dout, scratch, out16);
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
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act,
                     bf16_t* dinp16, bool overwrite) override {
    mine("gelu_backward", dinp, inp, dout, dinp16);
    if (overwrite) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(n));
    kernels::gelu_backward(dinp, inp, dout, n, act);
    if (dinp16) bertcc::to_bf16(dinp, dinp16, static_cast<size_t>(n));
  }
  void tanh_forward(float* out, const float* inp, int64_t n) override {
    mine("tanh_forward", out, inp);
    kernels::tanh_forward(out, inp, n);
  }
  void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n) override {
    mine("tanh_backward", dinp, out, dout);
    kernels::tanh_backward(dinp, out, dout, n);
  }
  void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base) override {
    mine("dropout_forward", out, inp);
    kernels::dropout_forward(out, inp, n, p, rng, base);
  }
  void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base,
                        bf16_t* dinp16, bool overwrite) override {
    mine("dropout_backward", dinp, dout, dinp16);
    if (overwrite) std::memset(dinp, 0, sizeof(float) * static_cast<size_t>(n));
    kernels::dropout_backward(dinp, dout, n, p, rng, base);
    if (dinp16) bertcc::to_bf16(dinp, dinp16, static_cast<size_t>(n));
  }
  void gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C) override {
    mine("gather_rows", out, inp, rows);
    kernels::gather_rows(out, inp, rows, M, C);
  }
  void scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C) override {
    mine("scatter_add_rows", dinp, dout, rows);
    kernels::scatter_add_rows(dinp, dout, rows, M, C);
  }
  int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                               bool qkv16_kept) const override {
    return kernels::attention_saved_size(B, T, C, NH, dropout, prec, qkv16_kept);
  }
  int64_t attention_work_size(int64_t B, int64_t T, int64_t C, int64_t NH) const override {
    return kernels::attention_work_size(B, T, C, NH);
  }
  void attention_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv, const bf16_t* qkv16,
                         const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                         const Rng& rng, uint64_t base, Precision prec) override {
    mine("attention_forward", out, out16, saved, work, qkv, qkv16, mask_add);
    BERTCC_CHECK(out || (out16 && prec == Precision::BF16),
                 "attention_forward: no output (a null out needs its bf16 rounding, in bf16)");
    kernels::attention_forward(out, saved, work, qkv, mask_add, B, T, C, NH, dropout_p, rng, base, prec,
                               prec == Precision::BF16 ? out16 : nullptr, qkv16);
  }
  bool varlen_attention() const override { return true; }
  int64_t attention_varlen_saved_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH, bool dropout,
                                      Precision prec, bool qkv16_kept) const override {
    return kernels::attention_varlen_saved_size(cu, B, C, NH, dropout, prec, qkv16_kept);
  }
  int64_t attention_varlen_work_size(const int64_t*, int64_t, int64_t, int64_t) const override {
    return 0;  // (each thread's scratch is its own)
  }
  void attention_varlen_forward(float* out, bf16_t* out16, float* saved, float*, const float* qkv,
                                const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C, int64_t NH,
                                float dropout_p, const Rng& rng, uint64_t base, Precision prec) override {
    mine("attention_varlen_forward", out, out16, saved, qkv, qkv16);
    BERTCC_CHECK(out || (out16 && prec == Precision::BF16),
                 "attention_varlen_forward: no output (a null out needs its bf16 rounding, in bf16)");
    kernels::attention_varlen_forward(out, saved, qkv, cu, B, C, NH, dropout_p, rng, base, prec,
                                      prec == Precision::BF16 ? out16 : nullptr, qkv16);
  }
  void attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float*, const float* dout, const float* qkv,
                                 const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                                 const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng&,
                                 uint64_t, Precision prec) override {
    mine("attention_varlen_backward", dqkv, dqkv16, dout, qkv, qkv16, out, out16, saved);  // (out, out16: not read)
    kernels::attention_varlen_backward(dqkv, dout, qkv, saved, cu, B, C, NH, dropout_p, prec, dqkv16, qkv16);
  }
  void attention_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                          const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                          const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                          const Rng& /*rng*/, uint64_t /*base*/, Precision prec) override {
    mine("attention_backward", dqkv, dqkv16, work, dout, qkv, qkv16, out, out16, saved, mask_add);  // (out, out16: not read)
    kernels::attention_backward(dqkv, work, dout, qkv, saved, B, T, C, NH, dropout_p, prec,
                                prec == Precision::BF16 ? dqkv16 : nullptr, qkv16);
  }
  void gumbel_argmax(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng,
                     uint64_t base) override {
    mine("gumbel_argmax", logits);
    kernels::gumbel_argmax(picks_host, logits, M, V, rng, base);
  }
  void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B, int64_t T,
                         int64_t C) override {
    mine("weighted_row_sums", out, x);
    kernels::weighted_row_sums(out, out_ld, x, w_host, B, T, C);
  }
  int64_t softmax_xent(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V, int32_t ignore_index,
                       float grad_scale, int64_t* num_correct) override {
    mine("softmax_xent", logits, losses, labels);
    return kernels::softmax_xent_forward_backward(logits, losses, labels, N, V, ignore_index, grad_scale, num_correct);
  }
  void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                      Precision p, const bf16_t* W16, const LinearIo& a16) override {
    mine("linear_forward", y, x, W, b, W16, a16.x16, a16.keep_x16, a16.y16);
    BERTCC_CHECK(!a16.y16 || (p == Precision::BF16 && (y || staged_)),
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
  void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                       int64_t N, int64_t K, Precision p, const bf16_t* W16, const LinearIo& a16) override {
    mine("linear_backward", dx, dW, db, dy, x, W, W16, a16.dy16, a16.x16);
    if (dx && a16.overwrite_dx) std::memset(dx, 0, sizeof(float) * static_cast<size_t>(M * K));
    const bool bf = p == Precision::BF16;
    kernels::linear_backward(dx, dW, db, dy, x, W, M, N, K, p, W16, bf ? a16.dy16 : nullptr, bf ? a16.x16 : nullptr);
  }
  double global_norm(const float* x, size_t n) override {
    mine("global_norm", x);
    return bertcc::global_norm(x, n);
  }
  double lamb_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr, const LambOptions& o,
                   double grad_norm) override {
    mine("lamb_step", params, grads);
    const double g = bertcc::lamb_step(t, params, grads, s.cpu, lr, o, grad_norm);
    s.step = s.cpu.step;
    return g;
  }
  double adamw_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr,
                    const AdamWOptions& o, double grad_norm) override {
    mine("adamw_step", params, grads);
    const double g = bertcc::adamw_step(t, params, grads, s.cpu, lr, o, grad_norm);
    s.step = s.cpu.step;
    return g;
  }
  void moments_to_host(const OptimizerState& s, AdamState& out) override {
    out.m = s.cpu.m;
    out.v = s.cpu.v;
    out.step = s.step;
    out.begin = s.cpu.begin;
    out.end = s.cpu.end;
  }
  void moments_from_host(const AdamState& in, size_t n, OptimizerState& s) override {
    check_moments(in, n);
    s.cpu = in;
    s.step = in.step;
    s.begin = in.begin;
    s.end = in.end;
  }
  // The CPU keeps the host moments as they are (no copy); staged, as a device: copied in and out.
  void moments_take(AdamState&& in, size_t n, OptimizerState& s) override {
    if (staged_) return Backend::moments_take(std::move(in), n, s);
    check_moments(in, n);
    s.step = in.step;
    s.begin = in.begin;
    s.end = in.end;
    s.cpu = std::move(in);
    in = AdamState{};
  }
  // (s.cpu.step is s.step: both set together, at moments_from_host and by every step)
  AdamState& moments_view(OptimizerState& s, AdamState& scratch) override {
    return staged_ ? Backend::moments_view(s, scratch) : s.cpu;
  }
  double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters) override {
    return kernels::gemm_probe_tflops(M, N, K, p, iters);
  }
  double device_memory_used_mb() const override { return 0.0; }
  double buffer_mb() const override { return static_cast<double>(owned_.bytes()) / (1 << 20); }
  double peak_buffer_mb() const override { return static_cast<double>(owned_.peak()) / (1 << 20); }
  void reset_peak_buffer_mb() override { owned_.reset_peak(); }

 private:
  // Staged: each non-null buffer must lie in one of this backend's allocations.
  template <class... P>
  void mine(const char* call, const P*... ptrs) const {
    if (!staged_) return;
    int i = 0;
    (check_one(call, ptrs, i++), ...);
  }
  void check_one(const char* call, const void* p, int i) const {
    BERTCC_CHECK(!p || owned_.owns(p), "cpu-staged: ", call, ": buffer argument ", i + 1,
                 " is host memory, not a buffer of the backend (a missing upload?)");
  }
  bool staged_;
  Allocations owned_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend b(false);
  return b;
}

Backend& staged_backend() {
  static CpuBackend b(true);
  return b;
}

}  // namespace bertcc
