// The one training step (src/train/step.h): the typed optimizer choice, the step's phases on the
// CPU against the optimizer functions called directly (the same bits), skipped non-finite steps,
// the divergence stop and fp16 dynamic loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "train/step.h"

using namespace bertcc;

namespace {

BertConfig tiny_config() {
  BertConfig c;
  c.vocab_size = 37;
  c.hidden_size = 15;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 3;
  c.intermediate_size = 23;
  c.max_position_embeddings = 16;
  return c;
}

// Micro-batch a's gradient: a fixed pattern that differs per micro-batch and element.
void fill_grads(Bert& m, int64_t a, float bad = 0.0f) {
  std::vector<float>& g = m.grads();
  for (size_t i = 0; i < g.size(); ++i) g[i] += 0.001f * static_cast<float>((i * 7 + a * 13) % 17) - 0.008f;
  if (bad != 0.0f) g[3] = bad;
}

template <typename A, typename B>
bool same_bits(const A& a, const B& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(TrainStep, OptimizerIsParsedOnce) {
  EXPECT_EQ(parse_optimizer("lamb"), Optimizer::Lamb);
  EXPECT_EQ(parse_optimizer("adamw"), Optimizer::AdamW);
  EXPECT_THROW(parse_optimizer("sgd"), Error);
  EXPECT_THROW(parse_optimizer("LAMB"), Error);
  EXPECT_EQ(pretrain_lr(Optimizer::Lamb, 1e-3f, 30, 100, 0.1), poly_warmup_lr(1e-3f, 30, 100, 0.1));
  EXPECT_EQ(pretrain_lr(Optimizer::AdamW, 1e-3f, 30, 100, 0.1), linear_warmup_lr(1e-3f, 30, 100, 0.1));
}

// Two micro-batches accumulated, the global norm, then the optimizer through the backend: the same
// bits as summing the gradients and calling lamb_step / adamw_step directly.
TEST(TrainStep, MatchesTheOptimizerCalledDirectly) {
  for (Optimizer opt : {Optimizer::Lamb, Optimizer::AdamW}) {
    Bert m(tiny_config(), Heads::PreTraining), ref(tiny_config(), Heads::PreTraining);
    m.init_weights(3);
    ref.init_weights(3);
    Backend& be = cpu_backend();
    AdamState host, ref_state;
    OptimizerState moments;
    be.moments_take(std::move(host), m.table().total(), moments);
    TrainStepOptions so;
    so.optimizer = opt;
    TrainStep step(dist::world(), be, nullptr, dist::Options{}, std::move(so));
    step.add_model(m, moments, nullptr, /*overlap=*/false);
    for (int s = 0; s < 3; ++s) {
      const float lr = 1e-3f * static_cast<float>(s + 1);
      const StepResult r = step.run(
          2, [&](int64_t a) { fill_grads(m, a + s); }, [] { return 1.0; }, lr, nullptr, s);
      ASSERT_TRUE(r.applied);
      // the reference: g0 + g1 as separate tensors summed in order (GradSync's accumulation)
      std::vector<float> g0(ref.params().size(), 0.0f), g1 = g0;
      ref.zero_grad();
      fill_grads(ref, 0 + s);
      g0 = ref.grads();
      ref.zero_grad();
      fill_grads(ref, 1 + s);
      g1 = ref.grads();
      for (size_t i = 0; i < g0.size(); ++i) ref.grads()[i] = g0[i] + g1[i];
      const double norm = global_norm(ref.grads().data(), ref.grads().size());
      EXPECT_EQ(r.gnorm, norm);
      if (opt == Optimizer::Lamb)
        lamb_step(ref.table(), ref.params().data(), ref.grads().data(), ref_state, lr, LambOptions{}, norm);
      else
        adamw_step(ref.table(), ref.params().data(), ref.grads().data(), ref_state, lr, AdamWOptions{}, norm);
      ASSERT_TRUE(same_bits(m.params(), ref.params())) << "step " << s;
    }
    AdamState scratch;
    const AdamState& view = be.moments_view(moments, scratch);
    EXPECT_EQ(&view, &moments.cpu);  // the CPU's own moments, no copy
    EXPECT_EQ(view.step, 3);
    EXPECT_TRUE(same_bits(view.m, ref_state.m));
    EXPECT_TRUE(same_bits(view.v, ref_state.v));
  }
}

// A non-finite gradient skips the step (weights unchanged); max_nonfinite_steps in a row stop the
// run; a finite step in between resets the count.
TEST(TrainStep, SkipsNonFiniteStepsAndStopsARunOfThem) {
  Bert m(tiny_config(), Heads::PreTraining);
  m.init_weights(5);
  Backend& be = cpu_backend();
  AdamState host;
  OptimizerState moments;
  be.moments_take(std::move(host), m.table().total(), moments);
  TrainStepOptions so;
  so.who = "test";
  so.max_nonfinite_steps = 2;
  so.diverged_note = "(diverged)";
  int skips = 0;
  so.on_skip = [&](double, double) { ++skips; };
  int updates = 0;
  so.after_update = [&]() { ++updates; };
  TrainStep step(dist::world(), be, nullptr, dist::Options{}, std::move(so));
  step.add_model(m, moments, nullptr, false);
  const ParamVector w0 = m.params();
  auto run = [&](float bad, double loss) {
    return step.run(
        1, [&](int64_t a) { fill_grads(m, a, bad); }, [&] { return loss; }, 1e-3f, nullptr, 0);
  };
  EXPECT_FALSE(run(NAN, 1.0).applied);
  EXPECT_TRUE(same_bits(m.params(), w0));
  EXPECT_EQ(skips, 1);
  EXPECT_EQ(updates, 0);
  EXPECT_TRUE(run(0.0f, 1.0).applied);  // resets the run of skipped steps
  EXPECT_EQ(updates, 1);
  EXPECT_FALSE(run(0.0f, INFINITY).applied);  // a non-finite loss skips too
  try {
    run(INFINITY, 1.0);
    FAIL() << "two non-finite steps in a row must stop the run";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test: 2 consecutive steps with a non-finite loss or gradients (diverged at step "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(") (diverged)"), std::string::npos) << what;  // the caller's note
  }
}

// fp16 dynamic loss scaling: an overflow halves the scale (and is not counted towards divergence
// while the scale is above 1); `window` clean steps double it; the gradients are unscaled before
// the optimizer (the same update as unscaled gradients).
TEST(TrainStep, DynamicLossScaling) {
  Bert m(tiny_config(), Heads::PreTraining), ref(tiny_config(), Heads::PreTraining);
  m.init_weights(7);
  ref.init_weights(7);
  Backend& be = cpu_backend();
  AdamState host, ref_state;
  OptimizerState moments;
  be.moments_take(std::move(host), m.table().total(), moments);
  double scale = 4.0;
  int64_t clean = 0;
  TrainStepOptions so;
  so.optimizer = Optimizer::Lamb;
  so.max_nonfinite_steps = 1;  // an overflow above scale 1 is not a divergence
  TrainStep step(dist::world(), be, nullptr, dist::Options{}, std::move(so), LossScale{&scale, &clean, true, 2});
  step.add_model(m, moments, nullptr, false);
  EXPECT_FALSE(step.run(
                       1, [&](int64_t) { fill_grads(m, 0, INFINITY); }, [] { return 1.0; }, 1e-3f, nullptr, 0)
                   .applied);
  EXPECT_EQ(scale, 2.0);
  // gradients computed at scale 2: unscaled by 1/2 before LAMB
  auto scaled = [&](int64_t) {
    fill_grads(m, 0);
    for (float& g : m.grads()) g *= 2.0f;
  };
  EXPECT_TRUE(step.run(
                      1, scaled, [] { return 1.0; }, 1e-3f, nullptr, 1)
                  .applied);
  EXPECT_EQ(scale, 2.0);
  EXPECT_EQ(clean, 1);
  ref.zero_grad();
  fill_grads(ref, 0);
  lamb_step(ref.table(), ref.params().data(), ref.grads().data(), ref_state, 1e-3f, LambOptions{},
            global_norm(ref.grads().data(), ref.grads().size()));
  EXPECT_TRUE(same_bits(m.params(), ref.params()));
  EXPECT_TRUE(step.run(
                      1, scaled, [] { return 1.0; }, 1e-3f, nullptr, 2)
                  .applied);
  EXPECT_EQ(scale, 4.0);  // two clean steps: doubled
  EXPECT_EQ(clean, 0);
}
