#include "bertcc/optim.h"

#include <algorithm>
#include <cmath>

#include "bertcc/error.h"

namespace bertcc {
namespace {

constexpr size_t kBlock = kNormBlock;

// Lane accumulators of a block over x[i0, i1), i0 at a multiple of 16 from the block's start:
// element j goes to lane (j - block start) % 16, in order. One function for whole blocks and
// for the pieces of cut ones (sumsq_slice), so both round alike.
inline void sumsq_lanes(const float* x, size_t i0, size_t i1, float acc[16]) {
  for (size_t j = i0; j < i1; j += 16) {
    const size_t len = std::min<size_t>(16, i1 - j);
    for (size_t k = 0; k < len; ++k) acc[k] += x[j + k] * x[j + k];
  }
}

inline double lanes_sum(const float acc[16]) {
  double s = 0;
  for (size_t k = 0; k < 16; ++k) s += acc[k];
  return s;
}

// Sum of squares over fixed blocks, partials added in order: thread-count independent.
// Sum of squares: 16 fp32 lanes within a block (vectorisable), blocks combined in double in order.
double blocked_sumsq(const float* x, size_t n) {
  const size_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(nb, 0.0);
#pragma omp parallel for schedule(static) if (nb > 4)
  for (size_t b = 0; b < nb; ++b) {
    float acc[16] = {0};
    sumsq_lanes(x, b * kBlock, std::min(n, (b + 1) * kBlock), acc);
    part[b] = lanes_sum(acc);
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

void sumsq_slice(const float* x, size_t n, size_t b, size_t e, float carry[16], std::vector<double>& blocks,
                 size_t& first_block) {
  BERTCC_CHECK(b <= e && e <= n, "sumsq_slice: slice [", b, ", ", e, ") of ", n);
  first_block = b / kBlock;  // the cut block b is in, or the first whole one
  if (b == e) return;
  auto block_end = [&](size_t k) { return std::min(n, (k + 1) * kBlock); };
  // [p, q) inside one block: lanes continue from p's position in its 16-element row
  auto piece = [&](size_t p, size_t q) {
    const size_t lane = (p - p / kBlock * kBlock) % 16;
    if (lane != 0) {
      const size_t row_end = std::min(q, p + (16 - lane));
      for (size_t j = p; j < row_end; ++j) carry[lane + (j - p)] += x[j] * x[j];
      p = row_end;
    }
    sumsq_lanes(x, p, q, carry);
  };
  size_t i = b;
  if (b % kBlock != 0) {  // the block b cuts: the carried lanes continue
    const size_t end = std::min(e, block_end(b / kBlock));
    piece(b, end);
    i = end;
    if (end == block_end(b / kBlock)) {  // it ends in this slice
      blocks.push_back(lanes_sum(carry));
      std::fill(carry, carry + 16, 0.0f);
    }
  }
  if (i == e) return;
  // i starts a block: the whole blocks that end by e
  const size_t k0 = i / kBlock, k1 = e == n ? (n + kBlock - 1) / kBlock : e / kBlock;
  const size_t nwhole = k1 > k0 ? k1 - k0 : 0;
  const size_t base = blocks.size();
  blocks.resize(base + nwhole);
#pragma omp parallel for schedule(static) if (nwhole > 4)
  for (size_t k = 0; k < nwhole; ++k) {
    float acc[16] = {0};
    sumsq_lanes(x, (k0 + k) * kBlock, block_end(k0 + k), acc);
    blocks[base + k] = lanes_sum(acc);
  }
  i = std::min(e, (k0 + nwhole) * kBlock);
  if (i < e) piece(i, e);  // the block e cuts: its lanes go on to the next slice
}

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
    if (!e.trainable) continue;                           // frozen: no decay, no moment update
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
    if (!e.trainable) continue;                           // frozen: no decay, no moment update
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
