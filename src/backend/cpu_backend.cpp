// The CPU backend's memory (host memory), optimizers (bertcc/optim.h's) and measurement; its
// operations are ops.cpp's CPU side. The staged backend is the same class with its allocations
// registered, which its operations check each buffer against (and upload/download, that they
// cross between host and them).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "kernels/gemm.h"

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
  explicit CpuBackend(bool staged) : Backend(staged ? DeviceKind::Staged : DeviceKind::CPU), staged_(staged) {}
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
      check_staged_buffers("upload (destination)", dst);
      BERTCC_CHECK(!owned_.owns(src), "cpu-staged: upload from a device buffer (use copy)");
    }
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    if (staged_) {
      check_staged_buffers("download (source)", src);
      BERTCC_CHECK(!owned_.owns(dst), "cpu-staged: download into a device buffer (use copy)");
    }
    std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    check_staged_buffers("copy", dst, src);
    if (dst != src) std::memcpy(dst, src, bytes);
  }
  void zero(void* p, size_t bytes) override {
    if (!bytes) return;
    check_staged_buffers("zero", p);
    std::memset(p, 0, bytes);
  }
  void synchronize() override {}

  double global_norm(const float* x, size_t n) override {
    check_staged_buffers("global_norm", x);
    return bertcc::global_norm(x, n);
  }
  double lamb_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr, const LambOptions& o,
                   double grad_norm) override {
    check_staged_buffers("lamb_step", params, grads);
    const double g = bertcc::lamb_step(t, params, grads, s.cpu, lr, o, grad_norm);
    s.step = s.cpu.step;
    return g;
  }
  double adamw_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr,
                    const AdamWOptions& o, double grad_norm) override {
    check_staged_buffers("adamw_step", params, grads);
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
  bool holds(const void* p) const override { return !staged_ || owned_.owns(p); }

 private:
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
