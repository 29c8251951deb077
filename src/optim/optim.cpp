#include <algorithm>
#include <cmath>

#include "bertcc/optim.h"

namespace bertcc {
namespace {

constexpr size_t kBlock = 8192;

// Sum of squares over fixed blocks, partials added in order: thread-count independent.
template <class F>
double blocked_sum(size_t n, F f) {
  const size_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(nb, 0.0);
#pragma omp parallel for schedule(static) if (nb > 4)
  for (size_t b = 0; b < nb; ++b) {
    double s = 0;
    const size_t e = std::min(n, (b + 1) * kBlock);
    for (size_t i = b * kBlock; i < e; ++i) s += f(i);
    part[b] = s;
  }
  double s = 0;
  for (double p : part) s += p;
  return s;
}

void ensure_state(AdamState& s, size_t n) {
  if (s.m.size() != n) {
    s.m.assign(n, 0.0f);
    s.v.assign(n, 0.0f);
  }
}

}  // namespace

double global_norm(const float* x, size_t n) {
  return std::sqrt(blocked_sum(n, [&](size_t i) { return static_cast<double>(x[i]) * x[i]; }));
}

double lamb_step(const ParamTable& t, float* w, float* g, AdamState& s, float lr, const LambOptions& o) {
  ensure_state(s, t.total());
  s.step += 1;
  const double gnorm = global_norm(g, t.total());
  const float clip = (o.max_grad_norm > 0 && gnorm > o.max_grad_norm) ? static_cast<float>(o.max_grad_norm / gnorm)
                                                                      : 1.0f;
  const float bc1 = 1.0f - std::pow(o.beta1, static_cast<float>(s.step));
  const float bc2 = 1.0f - std::pow(o.beta2, static_cast<float>(s.step));
  for (const ParamEntry& e : t.entries()) {
    float* we = w + e.offset;
    float* ge = g + e.offset;
    float* m = s.m.data() + e.offset;
    float* v = s.v.data() + e.offset;
    const float wd = e.weight_decay ? o.weight_decay : 0.0f;
    // Pass 1: moments and the update u (written over the gradient).
#pragma omp parallel for schedule(static) if (e.numel > 65536)
    for (size_t i = 0; i < e.numel; ++i) {
      const float gi = ge[i] * clip;
      m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
      ge[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + o.eps) + wd * we[i];
    }
    float ratio = 1.0f;
    if (wd != 0.0f || o.nvlamb) {
      const double wn = global_norm(we, e.numel), un = global_norm(ge, e.numel);
      if (wn > 0 && un > 0) ratio = static_cast<float>(wn / un);
    }
    const float step = lr * ratio;
#pragma omp parallel for schedule(static) if (e.numel > 65536)
    for (size_t i = 0; i < e.numel; ++i) we[i] -= step * ge[i];
  }
  return gnorm;
}

double adamw_step(const ParamTable& t, float* w, float* g, AdamState& s, float lr, const AdamWOptions& o) {
  ensure_state(s, t.total());
  s.step += 1;
  const double gnorm = global_norm(g, t.total());
  const float clip = (o.max_grad_norm > 0 && gnorm > o.max_grad_norm) ? static_cast<float>(o.max_grad_norm / gnorm)
                                                                      : 1.0f;
  const float bc1 = o.bias_correction ? 1.0f - std::pow(o.beta1, static_cast<float>(s.step)) : 1.0f;
  const float bc2 = o.bias_correction ? 1.0f - std::pow(o.beta2, static_cast<float>(s.step)) : 1.0f;
  for (const ParamEntry& e : t.entries()) {
    float* we = w + e.offset;
    const float* ge = g + e.offset;
    float* m = s.m.data() + e.offset;
    float* v = s.v.data() + e.offset;
    const float decay = e.weight_decay ? 1.0f - lr * o.weight_decay : 1.0f;
#pragma omp parallel for schedule(static) if (e.numel > 65536)
    for (size_t i = 0; i < e.numel; ++i) {
      const float gi = ge[i] * clip;
      m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
      we[i] = we[i] * decay - lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + o.eps);
    }
  }
  return gnorm;
}

float poly_warmup_lr(float base, int64_t step, int64_t total, double warmup, double degree) {
  const double progress = static_cast<double>(step) / static_cast<double>(std::max<int64_t>(total, 1));
  if (progress < warmup) return static_cast<float>(base * progress / warmup);
  return static_cast<float>(base * std::pow(std::max(0.0, 1.0 - progress), degree));
}

float linear_warmup_lr(float base, int64_t step, int64_t total, double warmup) {
  const double warm = warmup * static_cast<double>(total);
  if (step < warm) return static_cast<float>(base * step / warm);
  return static_cast<float>(base * std::max(0.0, (total - step) / std::max(1.0, total - warm)));
}

}  // namespace bertcc
