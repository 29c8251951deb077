#include "bertcc/optim.h"

#include <algorithm>
#include <cmath>

namespace bertcc {
namespace {

constexpr size_t kBlock = 8192;

// Sum of squares over fixed blocks, partials added in order: thread-count independent.
// Sum of squares: 16 fp32 lanes within a block (vectorisable), blocks combined in double in order.
double blocked_sumsq(const float* x, size_t n) {
  const size_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(nb, 0.0);
#pragma omp parallel for schedule(static) if (nb > 4)
  for (size_t b = 0; b < nb; ++b) {
    const size_t i0 = b * kBlock, i1 = std::min(n, (b + 1) * kBlock);
    float acc[16] = {0};
    for (size_t j = i0; j < i1; j += 16) {
      const size_t len = std::min<size_t>(16, i1 - j);
      for (size_t k = 0; k < len; ++k) acc[k] += x[j + k] * x[j + k];
    }
    double s = 0;
    for (float a : acc) s += a;
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

double global_norm(const float* x, size_t n) { return std::sqrt(blocked_sumsq(x, n)); }

namespace {
// What every Adam-family step starts with: moments allocated, step counted, gradient norm and
// clipping factor (global pre-normalisation), bias corrections.
struct StepStart {
  double gnorm;
  float clip, bc1, bc2;
};
StepStart start_step(const ParamTable& t, const float* g, AdamState& s, double grad_norm, float max_grad_norm,
                     float beta1, float beta2, bool bias_correction) {
  ensure_state(s, (s.end ? s.end : t.total()) - s.begin);
  s.step += 1;
  StepStart r;
  r.gnorm = grad_norm >= 0 ? grad_norm : global_norm(g, t.total());
  r.clip = (max_grad_norm > 0 && r.gnorm > max_grad_norm) ? static_cast<float>(max_grad_norm / r.gnorm) : 1.0f;
  r.bc1 = bias_correction ? 1.0f - std::pow(beta1, static_cast<float>(s.step)) : 1.0f;
  r.bc2 = bias_correction ? 1.0f - std::pow(beta2, static_cast<float>(s.step)) : 1.0f;
  return r;
}
}  // namespace

double lamb_step(const ParamTable& t, float* w, float* g, AdamState& s, float lr, const LambOptions& o,
                 double grad_norm) {
  // (plain locals, not a structured binding: lambdas below capture them, which clang < 16 refuses)
  const StepStart st = start_step(t, g, s, grad_norm, o.max_grad_norm, o.beta1, o.beta2, true);
  const double gnorm = st.gnorm;
  const float clip = st.clip, bc1 = st.bc1, bc2 = st.bc2;
  const size_t end = s.end ? s.end : t.total();
  for (const ParamEntry& e : t.entries()) {
    if (!e.trainable) continue;                            // frozen: no decay, no moment update
    if (e.offset < s.begin || e.offset >= end) continue;  // another rank's shard (ZeRO-1)
    float* __restrict we = w + e.offset;
    float* __restrict ge = g + e.offset;
    float* __restrict m = s.m.data() + (e.offset - s.begin);
    float* __restrict v = s.v.data() + (e.offset - s.begin);
    const float wd = e.weight_decay ? o.weight_decay : 0.0f;
    const float b1 = o.beta1, b2 = o.beta2, eps = o.eps;  // locals: the loops must not reload them
    // Pass 1: moments, the update u (written over the gradient) and the squared norms of w and u,
    // summed per fixed block in 16 lanes (vectorised, no reassociation) so the result does not
    // depend on the thread count.
    const size_t nb = (e.numel + kBlock - 1) / kBlock;
    std::vector<double> wsq(nb), usq(nb);
    auto update = [=](size_t i, float& ws, float& us) {
      const float gi = ge[i] * clip;
      const float mi = b1 * m[i] + (1.0f - b1) * gi;
      const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const float u = (mi / bc1) / (std::sqrt(vi / bc2) + eps) + wd * we[i];
      ge[i] = u;
      ws += we[i] * we[i];
      us += u * u;
    };
#pragma omp parallel for schedule(static) if (nb > 4)
    for (size_t b = 0; b < nb; ++b) {
      const size_t i0 = b * kBlock, i1 = std::min(e.numel, (b + 1) * kBlock);
      float ws[16] = {0}, us[16] = {0};
      size_t j = i0;
      for (; j + 16 <= i1; j += 16)
#pragma omp simd
        for (size_t k = 0; k < 16; ++k) update(j + k, ws[k], us[k]);
      for (size_t k = 0; j + k < i1; ++k) update(j + k, ws[k], us[k]);
      double wsum = 0, usum = 0;
      for (int k = 0; k < 16; ++k) {
        wsum += ws[k];
        usum += us[k];
      }
      wsq[b] = wsum;
      usq[b] = usum;
    }
    float ratio = 1.0f;
    if (wd != 0.0f || o.nvlamb) {
      double wn = 0, un = 0;
      for (size_t b = 0; b < nb; ++b) {
        wn += wsq[b];
        un += usq[b];
      }
      if (wn > 0 && un > 0) ratio = static_cast<float>(std::sqrt(wn) / std::sqrt(un));
    }
    const float step = lr * e.lr_scale * ratio;
#pragma omp parallel for schedule(static) if (e.numel > 65536)
    for (size_t i = 0; i < e.numel; ++i) we[i] -= step * ge[i];
  }
  return gnorm;
}

double adamw_step(const ParamTable& t, float* w, float* g, AdamState& s, float lr, const AdamWOptions& o,
                  double grad_norm) {
  const StepStart st = start_step(t, g, s, grad_norm, o.max_grad_norm, o.beta1, o.beta2, o.bias_correction);
  const double gnorm = st.gnorm;
  const float clip = st.clip, bc1 = st.bc1, bc2 = st.bc2;
  const float b1 = o.beta1, b2 = o.beta2, eps = o.eps;  // locals: the loop must not reload them
  const size_t end = s.end ? s.end : t.total();
  for (const ParamEntry& e : t.entries()) {
    if (!e.trainable) continue;                            // frozen: no decay, no moment update
    if (e.offset < s.begin || e.offset >= end) continue;  // another rank's shard (ZeRO-1)
    float* __restrict we = w + e.offset;
    const float* __restrict ge = g + e.offset;
    float* __restrict m = s.m.data() + (e.offset - s.begin);
    float* __restrict v = s.v.data() + (e.offset - s.begin);
    const float lre = lr * e.lr_scale;  // exact for scale 1
    const float decay = e.weight_decay ? 1.0f - lre * o.weight_decay : 1.0f;
    const auto n = static_cast<int64_t>(e.numel);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = ge[i] * clip;
      const float mi = b1 * m[i] + (1.0f - b1) * gi;
      const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      we[i] = we[i] * decay - lre * (mi / bc1) / (std::sqrt(vi / bc2) + eps);
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
