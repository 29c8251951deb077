// Optimizers against straightforward double-precision transcriptions of apex FusedLAMB / HF AdamW.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bertcc/optim.h"
#include "test_util.h"

using namespace bertcc;

namespace {
ParamTable small_table() {
  ParamTable t;
  t.add("encoder.dense.weight", {7, 5}, true);
  t.add("encoder.dense.bias", {7}, false);
  t.add("encoder.LayerNorm.weight", {5}, false);
  t.add("zero.weight", {3}, true);  // all-zero weights: trust ratio must fall back to 1
  return t;
}
}  // namespace

TEST(Lamb, MatchesDoubleReferenceOverSeveralSteps) {
  ParamTable t = small_table();
  auto w = bertcc::testing::randn(t.total(), 1);
  for (size_t i = 47; i < 50; ++i) w[i] = 0.0f;
  std::vector<double> wd(w.begin(), w.end()), md(t.total(), 0), vd(t.total(), 0);
  AdamState s;
  LambOptions o;
  for (int step = 1; step <= 4; ++step) {
    auto g = bertcc::testing::randn(t.total(), 100 + step, step == 2 ? 10.0f : 0.1f);  // step 2 is clipped
    std::vector<double> gd(g.begin(), g.end());
    const float lr = 0.01f * step;
    lamb_step(t, w.data(), g.data(), s, lr, o);
    double norm = 0;
    for (double x : gd) norm += x * x;
    norm = std::sqrt(norm);
    const double clip = norm > 1.0 ? 1.0 / norm : 1.0;
    for (const auto& e : t.entries()) {
      std::vector<double> u(e.numel);
      double wn = 0, un = 0;
      const double decay = e.weight_decay ? 0.01 : 0.0;
      for (size_t i = 0; i < e.numel; ++i) {
        const size_t k = e.offset + i;
        const double gi = gd[k] * clip;
        md[k] = 0.9 * md[k] + 0.1 * gi;
        vd[k] = 0.999 * vd[k] + 0.001 * gi * gi;
        const double mh = md[k] / (1 - std::pow(0.9, step)), vh = vd[k] / (1 - std::pow(0.999, step));
        u[i] = mh / (std::sqrt(vh) + 1e-6) + decay * wd[k];
        wn += wd[k] * wd[k];
        un += u[i] * u[i];
      }
      const double ratio = (decay != 0 && wn > 0 && un > 0) ? std::sqrt(wn) / std::sqrt(un) : 1.0;
      for (size_t i = 0; i < e.numel; ++i) wd[e.offset + i] -= lr * ratio * u[i];
    }
  }
  EXPECT_LT(bertcc::testing::max_rel(bertcc::testing::to_d(w), wd), 1e-5);
}

TEST(AdamW, MatchesDoubleReferenceWithAndWithoutBiasCorrection) {
  for (bool bc : {true, false}) {
    ParamTable t = small_table();
    auto w = bertcc::testing::randn(t.total(), 2);
    std::vector<double> wd(w.begin(), w.end()), md(t.total(), 0), vd(t.total(), 0);
    AdamState s;
    AdamWOptions o;
    o.bias_correction = bc;
    o.max_grad_norm = 0;
    for (int step = 1; step <= 3; ++step) {
      auto g = bertcc::testing::randn(t.total(), 200 + step);
      const float lr = 1e-3f;
      adamw_step(t, w.data(), g.data(), s, lr, o);
      for (const auto& e : t.entries())
        for (size_t i = 0; i < e.numel; ++i) {
          const size_t k = e.offset + i;
          md[k] = 0.9 * md[k] + 0.1 * g[k];
          vd[k] = 0.999 * vd[k] + 0.001 * double(g[k]) * g[k];
          const double b1 = bc ? 1 - std::pow(0.9, step) : 1, b2 = bc ? 1 - std::pow(0.999, step) : 1;
          wd[k] = wd[k] * (e.weight_decay ? 1 - lr * 0.01 : 1.0) - lr * (md[k] / b1) / (std::sqrt(vd[k] / b2) + 1e-6);
        }
    }
    EXPECT_LT(bertcc::testing::max_rel(bertcc::testing::to_d(w), wd), 1e-5) << "bias_correction=" << bc;
  }
}

TEST(Schedules, PolyWarmupAndLinear) {
  // NVIDIA PolyWarmUpScheduler: warmup 0.1 of 1000 steps.
  EXPECT_FLOAT_EQ(poly_warmup_lr(1.0f, 0, 1000, 0.1), 0.0f);
  EXPECT_FLOAT_EQ(poly_warmup_lr(1.0f, 50, 1000, 0.1), 0.5f);
  EXPECT_FLOAT_EQ(poly_warmup_lr(1.0f, 100, 1000, 0.1), static_cast<float>(std::sqrt(0.9)));
  EXPECT_FLOAT_EQ(poly_warmup_lr(1.0f, 750, 1000, 0.1), 0.5f);
  EXPECT_FLOAT_EQ(poly_warmup_lr(1.0f, 1000, 1000, 0.1), 0.0f);
  EXPECT_FLOAT_EQ(linear_warmup_lr(1.0f, 5, 100, 0.1), 0.5f);
  EXPECT_FLOAT_EQ(linear_warmup_lr(1.0f, 10, 100, 0.1), 1.0f);
  EXPECT_FLOAT_EQ(linear_warmup_lr(1.0f, 55, 100, 0.1), 0.5f);
  EXPECT_FLOAT_EQ(linear_warmup_lr(1.0f, 100, 100, 0.1), 0.0f);
}

TEST(GlobalNorm, Accurate) {
  auto x = bertcc::testing::randn(100003, 9);
  double s = 0;
  for (float v : x) s += double(v) * v;
  // fp32 lanes within 8192-element blocks, double across blocks: ~1e-8 relative.
  EXPECT_NEAR(global_norm(x.data(), x.size()), std::sqrt(s), 1e-6 * std::sqrt(s));
}

// Slices of a buffer, as ZeRO-1 ranks hold them, give global_norm's bits when their block sums
// are added in order and the lanes of cut blocks are carried from slice to slice.
TEST(GlobalNorm, SlicesGiveTheSameBits) {
  for (size_t n : {size_t{5}, size_t{8192}, size_t{3 * 8192 + 1234}, size_t{70001}}) {
    // large values make rounding differences visible in the last bits
    const auto x = bertcc::testing::randn(n, static_cast<uint32_t>(n), 3.0f);
    std::vector<std::vector<size_t>> cuts = {
        {}, {n / 2}, {1, 2, 3}, {17, 8191, 8192, 8193}, {n / 3, n / 3, 2 * n / 3 + 5}};
    for (size_t k = 1; k < 40; ++k) cuts.back().push_back(std::min(n, (k * 7919 + 13) % (n + 1)));
    for (auto c : cuts) {
      std::sort(c.begin(), c.end());
      c.erase(std::remove_if(c.begin(), c.end(), [&](size_t v) { return v > n; }), c.end());
      std::vector<size_t> bounds{0};
      bounds.insert(bounds.end(), c.begin(), c.end());
      bounds.push_back(n);
      float carry[16] = {0};
      std::vector<double> all((n + kNormBlock - 1) / kNormBlock, -1.0);
      for (size_t r = 0; r + 1 < bounds.size(); ++r) {
        std::vector<double> blocks;
        size_t first = 0;
        sumsq_slice(x.data(), n, bounds[r], bounds[r + 1], carry, blocks, first);
        for (size_t k = 0; k < blocks.size(); ++k) {
          ASSERT_LT(first + k, all.size());
          ASSERT_EQ(all[first + k], -1.0) << "block " << first + k << " completed twice";
          all[first + k] = blocks[k];
        }
      }
      double s = 0;
      for (double v : all) {
        ASSERT_GE(v, 0.0) << "a block never completed";
        s += v;
      }
      EXPECT_EQ(std::sqrt(s), global_norm(x.data(), n)) << "n " << n << ", " << c.size() << " cuts";
    }
  }
}

TEST(Optimizers, PerTensorLearningRateScale) {
  // A tensor with lr_scale s moves exactly as it would under lr x s (AdamW and LAMB).
  for (int which = 0; which < 2; ++which) {
    ParamTable a = small_table(), b = small_table();
    const auto& e0 = a.entries()[0];
    a.set_lr_scale(e0.name, 0.25f);
    auto wa = bertcc::testing::randn(a.total(), 5), wb = wa;
    AdamState sa, sb;
    const auto g = bertcc::testing::randn(a.total(), 6);
    auto ga = g, gb = g;
    if (which == 0) {
      AdamWOptions o;
      o.max_grad_norm = 0;
      adamw_step(a, wa.data(), ga.data(), sa, 1e-3f, o);
      adamw_step(b, wb.data(), gb.data(), sb, 1e-3f * 0.25f, o);
    } else {
      LambOptions o;
      o.max_grad_norm = 0;
      lamb_step(a, wa.data(), ga.data(), sa, 1e-3f, o);
      lamb_step(b, wb.data(), gb.data(), sb, 1e-3f * 0.25f, o);
    }
    for (size_t i = 0; i < e0.numel; ++i) EXPECT_FLOAT_EQ(wa[e0.offset + i], wb[e0.offset + i]) << which;
    // the other tensors moved with the full rate: differently from b's
    const auto& e1 = a.entries()[1];
    double diff = 0;
    for (size_t i = 0; i < e1.numel; ++i) diff += std::fabs(wa[e1.offset + i] - wb[e1.offset + i]);
    EXPECT_GT(diff, 0) << which;
  }
}
