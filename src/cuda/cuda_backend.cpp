// The CUDA backend's memory (device memory), graph capture, optimizers and measurement; its
// operations are ops_cuda.cpp's table, handed to Ops here. Reached through cuda_family()
// (backend/device_family.h), which returns this file's cuda::family() from the CUDA module
// (backend/cuda_module.h).
#include "backend/backend.h"
#include "backend/cuda_module.h"
#include "backend/device_family.h"
#include "bertcc/error.h"
#include "core/settings.h"
#include "cuda/cuda_kernels.h"
#include "cuda/op_timer.h"
#include "cuda/ops_cuda.h"

namespace bertcc::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : Backend(DeviceKind::CUDA, &ops_table()), index_(index) {
    std::string why;
    const int n = device_count(&why);
    BERTCC_CHECK(n > 0, "--device cuda:", index, ": ", why);
    BERTCC_CHECK(index >= 0 && index < n, "--device cuda:", index, ": only ", n, " CUDA device(s) here");
    set_device(index);
    info_ = device_info(index);
    attention_impl_check();  // BERTCC_ATTENTION=cudnn: cuDNN loads and makes a handle here, or the error says why
  }
  std::string op_profile() const override { return op_profile_report(); }
  std::string describe() const override {
    return "backend: cuda:" + std::to_string(index_) + ", " + info_.name + " (compute capability " +
           std::to_string(info_.cc_major) + "." + std::to_string(info_.cc_minor) + ", " +
           std::to_string(info_.sm_count) + " SMs, " + std::to_string(info_.total_mem >> 20) + " MiB), fp32 GEMMs " +
           (cuda::allow_tf32() ? "with TF32 products (--allow-tf32)" : "exact fp32") + "; " +
           attention_impl_describe() + settings_line();
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
  // the settings that are not the defaults (core/settings.h), as the CPU's line says them
  static std::string settings_line() {
    const std::string changed = describe_settings(settings());
    return changed.empty() ? "" : "; settings: " + changed;
  }
  int index_;
  DeviceInfo info_;
};

}  // namespace

const DeviceFamily& family() {
  static const DeviceFamily cuda{
      .make = [](const std::string&, int index) -> std::unique_ptr<Backend> {
        return std::make_unique<CudaBackend>(index);
      },
      .set_allow_tf32 = cuda::set_allow_tf32,  // not bertcc::set_allow_tf32 (the process flag)
  };
  return cuda;
}

}  // namespace bertcc::cuda
