// The CUDA backend: src/cuda kernels behind the Backend interface, device memory.
#include <algorithm>

#include "backend/backend.h"

#include "bertcc/error.h"
#include "cuda/cuda_kernels.h"
#include "cuda/attention_varlen.h"
#include "cuda/op_timer.h"

namespace bertcc::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index) {
    std::string why;
    const int n = device_count(&why);
    BERTCC_CHECK(n > 0, "--device cuda:", index, ": ", why);
    BERTCC_CHECK(index >= 0 && index < n, "--device cuda:", index, ": only ", n, " CUDA device(s) here");
    set_device(index);
    info_ = device_info(index);
  }
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  std::string op_profile() const override { return op_profile_report(); }
  std::string describe() const override {
    return "backend: cuda:" + std::to_string(index_) + ", " + info_.name + " (compute capability " +
           std::to_string(info_.cc_major) + "." + std::to_string(info_.cc_minor) + ", " +
           std::to_string(info_.sm_count) + " SMs, " + std::to_string(info_.total_mem >> 20) + " MiB), fp32 GEMMs " +
           (cuda::allow_tf32() ? "with TF32 products (--allow-tf32)" : "exact fp32");
  }
  void* alloc(size_t bytes) override {
    void* p = cuda::alloc(bytes);
    cuda::zero(p, bytes);
    return p;
  }
  void free(void* p) override { cuda::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    const OpTimer timer("upload");
    copy_to_device(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    const OpTimer timer("download");
    copy_to_host(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const OpTimer timer("copy");
    if (dst != src) copy_device(dst, src, bytes);
  }
  void zero(void* p, size_t bytes) override {
    const OpTimer timer("zero");
    cuda::zero(p, bytes);
  }
  void copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) override {
    const OpTimer timer("copy_rows");
    cuda::copy_rows(dst, dst_ld, src, src_ld, rows, cols);
  }
  void add_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) override {
    const OpTimer timer("add_rows");
    cuda::add_rows(dst, dst_ld, src, src_ld, rows, cols);
  }
  void to_bf16(bf16_t* out, const float* in, int64_t n) override {
    const OpTimer timer("to_bf16");
    cuda::to_bf16(out, in, n);
  }
  void narrow16(uint16_t* out, const float* in, int64_t n, bool bf16) override {
    const OpTimer timer("narrow16");
    cuda::narrow16(out, in, n, bf16);
  }
  void widen16(float* out, const uint16_t* in, int64_t n, bool bf16) override {
    const OpTimer timer("widen16");
    cuda::widen16(out, in, n, bf16);
  }
  void scale(float* x, int64_t n, float s) override {
    const OpTimer timer("scale");
    cuda::scale(x, n, s);
  }
  void synchronize() override { cuda::synchronize(); }
  bool graphs() const override { return true; }
  void graph_begin() override { cuda::graph_capture_begin(); }
  void* graph_end() override { return cuda::graph_capture_end(); }
  void graph_abort() override { cuda::graph_capture_abort(); }
  void graph_launch(void* g) override { cuda::graph_launch(g); }
  void graph_destroy(void* g) override { cuda::graph_destroy(g); }
  uint64_t memory_epoch() const override { return cuda::memory_epoch(); }
  void bind_thread() override { set_device(index_); }
  int device_ordinal() const override { return index_; }

  void embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                          const float* wtt, int64_t B, int64_t T, int64_t C) override {
    const OpTimer timer("embeddings_forward");
    cuda::embeddings_forward(out, ids, seg, wte, wpe, wtt, B, T, C);
  }
  void embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                           const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT) override {
    const OpTimer timer("embeddings_backward");
    cuda::embeddings_backward(dwte, dwpe, dwtt, dout, ids, seg, B, T, C, V, TT);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override {
    const OpTimer timer("layernorm_forward");
    cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  }
  using Backend::layernorm_backward;
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite) override {
    const OpTimer timer("layernorm_backward");
    cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, overwrite);
  }
  using Backend::dropout_backward;
  void residual_dropout_layernorm_forward(float* out, float* sum, float* mean, float* rstd, float* a, const float* r,
                                          const float* w, const float* b, int64_t N, int64_t C, float eps,
                                          bf16_t* out16, float p, const Rng& rng, uint64_t base) override {
    {
      const OpTimer timer("residual_dropout_layernorm_forward");
      if (cuda::residual_dropout_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16, p, rng, base))
        return;
    }
    Backend::residual_dropout_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16, p, rng, base);
  }
  void layernorm_dropout_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                                  const float* mean, const float* rstd, int64_t N, int64_t C, float* dbranch,
                                  bf16_t* dbranch16, float p, const Rng& rng, uint64_t base) override {
    {
      const OpTimer timer("layernorm_dropout_backward");
      if (cuda::layernorm_dropout_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, dbranch, dbranch16, p, rng,
                                           base))
        return;
    }
    Backend::layernorm_dropout_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, dbranch, dbranch16, p, rng, base);
  }
  using Backend::residual_layernorm_forward;
  void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                  const float* w, const float* b, int64_t N, int64_t C, float eps,
                                  bf16_t* out16) override {
    const OpTimer timer("residual_layernorm_forward");
    cuda::residual_layernorm_forward(out, sum, mean, rstd, a, r, w, b, N, C, eps, out16);
  }
  void bias_backward(float* db, const float* dy, int64_t M, int64_t N) override {
    const OpTimer timer("bias_backward");
    cuda::bias_backward(db, dy, M, N);
  }
  void gelu_bias_backward(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M, int64_t N,
                          Activation act, float* /*scratch: not needed*/, bf16_t* out16) override {
    const OpTimer timer("gelu_bias_backward");
    cuda::gelu_bias_backward(dinp16, db, inp16, dout, M, N, act, out16);
  }
  using Backend::gelu_backward;
  bool y16_needs_y() const override { return false; }
  using Backend::gelu_forward;
  using Backend::linear_backward;
  using Backend::linear_forward;
  void gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16,
                    bf16_t* inp16) override {
    const OpTimer timer("gelu_forward");
    cuda::gelu_forward(out, inp, n, act, out16, inp16);
  }
  void gelu_forward16(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act) override {
    const OpTimer timer("gelu_forward16");
    cuda::gelu_forward16(out16, inp16, n, act);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act,
                     bf16_t* dinp16, bool overwrite) override {
    const OpTimer timer("gelu_backward");
    cuda::gelu_backward(dinp, inp, dout, n, act, dinp16, overwrite);
  }
  void tanh_forward(float* out, const float* inp, int64_t n) override {
    const OpTimer timer("tanh_forward");
    cuda::tanh_forward(out, inp, n);
  }
  void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n) override {
    const OpTimer timer("tanh_backward");
    cuda::tanh_backward(dinp, out, dout, n);
  }
  void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base) override {
    const OpTimer timer("dropout_forward");
    cuda::dropout_forward(out, inp, n, p, rng, base);
  }
  void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base,
                        bf16_t* dinp16, bool overwrite) override {
    const OpTimer timer("dropout_backward");
    cuda::dropout_backward(dinp, dout, n, p, rng, base, dinp16, overwrite);
  }
  void gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C) override {
    const OpTimer timer("gather_rows");
    cuda::gather_rows(out, inp, rows, M, C);
  }
  void scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C) override {
    const OpTimer timer("scatter_add_rows");
    cuda::scatter_add_rows(dinp, dout, rows, M, C);
  }
  int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                               bool qkv16_kept) const override {
    return cuda::attention_saved_size(B, T, C, NH, dropout, prec, qkv16_kept);
  }
  int64_t attention_work_size(int64_t B, int64_t T, int64_t, int64_t NH) const override {
    return attention_backward_work_size(B, T, NH);
  }
  void attention_forward(float* out, bf16_t* out16, float* saved, float*, const float* qkv, const bf16_t* qkv16,
                         const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                         const Rng& rng, uint64_t base, Precision prec) override {
    const OpTimer timer("attention_forward");
    cuda::attention_forward(out, saved, qkv, mask_add, B, T, C, NH, dropout_p, rng, base, prec, out16, qkv16);
  }
  void attention_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                          const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                          const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                          const Rng& rng, uint64_t base, Precision prec) override {
    const OpTimer timer("attention_backward");
    cuda::attention_backward(dqkv, work, dout, qkv, out, out16, saved, mask_add, B, T, C, NH, dropout_p, rng, base,
                             prec, prec == Precision::BF16 ? dqkv16 : nullptr, qkv16);
  }
  // Unpadded batches: bf16 reading qkv16 in place in one launch per kernel for the whole batch
  // (attention_varlen.h), unless BERTCC_CUDA_VARLEN=0; other calls (fp32, fp16, a head size the
  // kernels do not read in place) and that setting: one padded call per sequence (Backend's
  // default), or, for sequences all of one length (a batch without padding, which the model packs
  // too while varlen_attention() is true), one padded call for them all with a zero mask: each
  // sequence's dropout numbers are where the per-sequence calls put them, so are its bits. The
  // saved buffer as the default sizes it (no override: the varlen kernels keep its layout; one
  // padded call's is smaller).
  // (Not under --cuda-graphs: the model then keeps batches without padding padded, so that their
  // inference forwards are recorded as before; packed batches are not recorded.)
  bool varlen_attention() const override { return cuda::attention_varlen_on() && !cuda_graphs(); }
  int64_t attention_varlen_work_size(const int64_t* cu, int64_t B, int64_t C, int64_t NH) const override {
    return std::max(Backend::attention_varlen_work_size(cu, B, C, NH),
                    aligned16(cu[B]) + cuda::attention_varlen_backward_work_size(cu[B], NH));
  }
  static int64_t aligned16(int64_t n) { return (n + 15) / 16 * 16; }
  // The length every sequence has, or 0.
  static int64_t one_length(const int64_t* cu, int64_t B) {
    for (int64_t b = 1; b < B; ++b)
      if (cu[b + 1] - cu[b] != cu[1] - cu[0]) return 0;
    return B > 1 ? cu[1] - cu[0] : 0;
  }
  void attention_varlen_forward(float* out, bf16_t* out16, float* saved, float* work, const float* qkv,
                                const bf16_t* qkv16, const int64_t* cu, int64_t B, int64_t C, int64_t NH,
                                float dropout_p, const Rng& rng, uint64_t base, Precision prec) override {
    if (!cuda::attention_varlen_on() || !cuda::attention_varlen_fits(C, NH, prec, qkv16)) {
      if (const int64_t T = cuda::attention_varlen_on() ? one_length(cu, B) : 0) {
        zero(work, sizeof(float) * static_cast<size_t>(B * T));  // the mask
        return attention_forward(out, out16, saved, work + aligned16(B * T), qkv, qkv16, work, B, T, C, NH, dropout_p,
                                 rng, base, prec);
      }
      return Backend::attention_varlen_forward(out, out16, saved, work, qkv, qkv16, cu, B, C, NH, dropout_p, rng, base,
                                               prec);
    }
    const OpTimer timer("attention_forward");
    cuda::attention_varlen_forward(out, out16, saved, qkv16, cu, B, C, NH, dropout_p, rng, base);
  }
  void attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* qkv,
                                 const bf16_t* qkv16, const float* out, const bf16_t* out16, const float* saved,
                                 const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                                 uint64_t base, Precision prec) override {
    if (!cuda::attention_varlen_on() || !cuda::attention_varlen_fits(C, NH, prec, qkv16)) {
      if (const int64_t T = cuda::attention_varlen_on() ? one_length(cu, B) : 0) {
        zero(work, sizeof(float) * static_cast<size_t>(B * T));
        return attention_backward(dqkv, dqkv16, work + aligned16(B * T), dout, qkv, qkv16, out, out16, saved, work, B,
                                  T, C, NH, dropout_p, rng, base, prec);
      }
      return Backend::attention_varlen_backward(dqkv, dqkv16, work, dout, qkv, qkv16, out, out16, saved, cu, B, C, NH,
                                                dropout_p, rng, base, prec);
    }
    const OpTimer timer("attention_backward");
    cuda::attention_varlen_backward(dqkv, dqkv16, work, dout, out, out16, qkv16, saved, cu, B, C, NH, dropout_p, rng,
                                    base);
  }
  void gumbel_argmax(int32_t* picks_host, const float* logits, int64_t M, int64_t V, const Rng& rng,
                     uint64_t base) override {
    const OpTimer timer("gumbel_argmax");
    cuda::gumbel_argmax(picks_host, logits, M, V, rng, base);
  }
  void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w_host, int64_t B, int64_t T,
                         int64_t C) override {
    const OpTimer timer("weighted_row_sums");
    cuda::weighted_row_sums(out, out_ld, x, w_host, B, T, C);
  }
  int64_t softmax_xent(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V, int32_t ignore_index,
                       float grad_scale, int64_t* num_correct) override {
    const OpTimer timer("softmax_xent");
    return cuda::softmax_xent_forward_backward(logits, losses, labels, N, V, ignore_index, grad_scale, num_correct);
  }
  void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                      Precision p, const bf16_t* W16, const LinearIo& a16) override {
    const OpTimer timer("linear_forward");
    BERTCC_CHECK(!a16.y16 || p == Precision::BF16, "linear_forward: a bf16 output outside bf16");
    cuda::linear_forward(y, x, W, b, M, N, K, p, W16, a16.x16, a16.keep_x16, a16.y16);
  }
  void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                       int64_t N, int64_t K, Precision p, const bf16_t* W16, const LinearIo& a16) override {
    const OpTimer timer("linear_backward");
    cuda::linear_backward(dx, dW, db, dy, x, W, M, N, K, p, W16, a16.dy16, a16.x16, a16.overwrite_dx);
  }
  double global_norm(const float* x, size_t n) override {
    const OpTimer timer("global_norm");
    return cuda::global_norm(x, n);
  }
  double lamb_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr, const LambOptions& o,
                   double grad_norm) override {
    const OpTimer timer("lamb_step");
    DeviceAdamState d = moments(t, s);
    const double g = cuda::lamb_step(t, params, grads, d, lr, o, grad_norm);
    s.step = d.step;
    return g;
  }
  double adamw_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr,
                    const AdamWOptions& o, double grad_norm) override {
    const OpTimer timer("adamw_step");
    DeviceAdamState d = moments(t, s);
    const double g = cuda::adamw_step(t, params, grads, d, lr, o, grad_norm);
    s.step = d.step;
    return g;
  }
  void moments_to_host(const OptimizerState& s, AdamState& out) override {
    out = AdamState{};
    out.step = s.step;
    out.begin = s.begin;
    out.end = s.end;
    if (s.m.size() == 0) return;
    out.m.resize(s.m.size());
    out.v.resize(s.v.size());
    copy_to_host(out.m.data(), s.m.get(), sizeof(float) * s.m.size());
    copy_to_host(out.v.data(), s.v.get(), sizeof(float) * s.v.size());
  }
  void moments_from_host(const AdamState& in, size_t n, OptimizerState& s) override {
    check_moments(in, n);
    s.step = in.step;
    s.begin = in.begin;
    s.end = in.end;
    const size_t own = in.end ? in.end - in.begin : n;
    s.m = DeviceBuffer<float>(*this, own);  // zeroed: a fresh optimizer when `in` has no moments
    s.v = DeviceBuffer<float>(*this, own);
    if (in.m.empty()) return;
    copy_to_device(s.m.get(), in.m.data(), sizeof(float) * own);
    copy_to_device(s.v.get(), in.v.data(), sizeof(float) * own);
  }
  double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters) override {
    return cuda::gemm_probe_tflops(M, N, K, p, iters);
  }
  double device_memory_used_mb() const override { return cuda::memory_used_mb(); }
  double buffer_mb() const override { return static_cast<double>(cuda::allocated_bytes()) / (1 << 20); }
  double peak_buffer_mb() const override { return static_cast<double>(cuda::peak_allocated_bytes()) / (1 << 20); }
  void reset_peak_buffer_mb() override { cuda::reset_peak_allocated(); }

 private:
  // The moments on this device (of its shard with ZeRO-1), allocated (zeroed) at the first step.
  DeviceAdamState moments(const ParamTable& t, OptimizerState& s) {
    const size_t own = s.end ? s.end - s.begin : t.total();
    if (s.m.size() != own) {
      s.m = DeviceBuffer<float>(*this, own);
      s.v = DeviceBuffer<float>(*this, own);
    }
    DeviceAdamState d;
    d.m = s.m.get();
    d.v = s.v.get();
    d.step = s.step;
    d.begin = s.begin;
    d.end = s.end;
    return d;
  }
  int index_;
  DeviceInfo info_;
};

}  // namespace

}  // namespace bertcc::cuda

namespace bertcc {
std::unique_ptr<Backend> make_cuda_backend(int index) { return std::make_unique<cuda::CudaBackend>(index); }
void set_cuda_allow_tf32(bool on) { cuda::set_allow_tf32(on); }
}  // namespace bertcc
