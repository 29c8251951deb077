// Model-level properties: determinism, dropout gradients by directional finite differences,
// gradient accumulation semantics.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "core/settings.h"
#include "kernels/gemm.h"
#include "model/acts.h"
#include "model/encoder.h"
#include "model/parts.h"
#include "test_util.h"

using namespace bertcc;

namespace {

BertConfig small_config() {
  BertConfig c;
  c.vocab_size = 37;
  c.hidden_size = 15;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 3;
  c.intermediate_size = 23;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = 0.1f;
  c.attention_probs_dropout_prob = 0.1f;
  return c;
}

BertBatch random_batch(const BertConfig& c, int64_t B, int64_t T, uint32_t seed) {
  std::mt19937 g(seed);
  BertBatch b;
  b.B = B;
  b.T = T;
  for (int64_t i = 0; i < B * T; ++i) {
    const int64_t t = i % T;
    const bool pad = t >= T - static_cast<int64_t>(i / T);  // row r has r padded tokens
    b.input_ids.push_back(pad ? 0 : 1 + static_cast<int32_t>(g() % (c.vocab_size - 1)));
    b.input_mask.push_back(pad ? 0 : 1);
    b.segment_ids.push_back(t > T / 2 ? 1 : 0);
    b.mlm_labels.push_back(!pad && t > 0 && g() % 4 == 0 ? static_cast<int32_t>(g() % c.vocab_size) : -1);
  }
  b.mlm_labels[1] = 5;  // at least one masked token
  for (int64_t r = 0; r < B; ++r) b.nsp_labels.push_back(static_cast<int32_t>(g() % 2));
  return b;
}

}  // namespace

TEST(Model, SameSeedGivesBitIdenticalGradients) {
  const BertConfig c = small_config();
  const BertBatch batch = random_batch(c, 3, 11, 1);
  std::vector<float> g1, g2;
  double l1 = 0, l2 = 0;
  for (int rep = 0; rep < 2; ++rep) {
    Bert m(c, Heads::PreTraining);
    m.init_weights(9);
    Rng rng{123, 0};
    m.zero_grad();
    const double l =
        m.pretrain_step(batch, rng, StepArgs{.training = true, .backward = true, .precision = Precision::F32}).loss;
    (rep ? l2 : l1) = l;
    (rep ? g2 : g1) = m.grads();
  }
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(g1, g2);
}

TEST(Model, DropoutChangesLossAndEvalIsDeterministic) {
  const BertConfig c = small_config();
  const BertBatch batch = random_batch(c, 2, 9, 2);
  Bert m(c, Heads::PreTraining);
  m.init_weights(4);
  Rng rng{5, 0};
  const double eval1 = m.pretrain_step(batch, rng, StepArgs{.precision = Precision::F32}).loss;
  const double train1 = m.pretrain_step(batch, rng, StepArgs{.training = true, .precision = Precision::F32}).loss;
  const double train2 = m.pretrain_step(batch, rng, StepArgs{.training = true, .precision = Precision::F32}).loss;
  const double eval2 = m.pretrain_step(batch, rng, StepArgs{.precision = Precision::F32}).loss;
  EXPECT_EQ(eval1, eval2);
  EXPECT_NE(train1, train2);  // the RNG advanced: new dropout masks
  EXPECT_NE(train1, eval1);
}

// With dropout ON and a fixed RNG state the loss is a smooth function of the weights, so the
// full backward (including regenerated dropout masks) must match a directional finite difference.
TEST(Model, DropoutBackwardMatchesDirectionalFiniteDifference) {
  const BertConfig c = small_config();
  const BertBatch batch = random_batch(c, 2, 7, 3);
  Bert m(c, Heads::PreTraining);
  m.init_weights(6);
  for (auto& p : m.params()) p *= 5.0f;  // larger weights: a less trivial function
  auto dir = bertcc::testing::randn(m.params().size(), 17);
  auto loss_at = [&](double eps) {
    ParamVector saved = m.params();
    for (size_t i = 0; i < saved.size(); ++i) m.params()[i] = saved[i] + static_cast<float>(eps) * dir[i];
    Rng rng{77, 0};
    const double l = m.pretrain_step(batch, rng, StepArgs{.training = true, .precision = Precision::F32}).loss;
    m.params() = saved;
    return l;
  };
  Rng rng{77, 0};
  m.zero_grad();
  m.pretrain_step(batch, rng, StepArgs{.training = true, .backward = true, .precision = Precision::F32});
  double analytic = 0;
  for (size_t i = 0; i < dir.size(); ++i) analytic += static_cast<double>(m.grads()[i]) * dir[i];
  const double h = 1e-3;
  const double numeric = (loss_at(h) - loss_at(-h)) / (2 * h);
  EXPECT_NEAR(analytic, numeric, 2e-3 * std::fabs(numeric) + 1e-4) << analytic << " vs " << numeric;
}

TEST(Model, GradientsAccumulateAcrossCalls) {
  const BertConfig c = small_config();
  const BertBatch batch = random_batch(c, 2, 8, 4);
  Bert m(c, Heads::PreTraining);
  m.init_weights(8);
  Rng rng{1, 0};
  m.zero_grad();
  m.pretrain_step(batch, rng, StepArgs{.backward = true, .precision = Precision::F32});
  std::vector<float> once = m.grads();
  m.pretrain_step(batch, rng, StepArgs{.backward = true, .precision = Precision::F32});
  for (size_t i = 0; i < once.size(); ++i) ASSERT_NEAR(m.grads()[i], 2 * once[i], 1e-5f * (1 + std::fabs(once[i])));
}

TEST(Model, ValidateNamesBadTokens) {
  const BertConfig c = small_config();
  BertBatch b = random_batch(c, 2, 5, 1);
  b.input_ids[7] = 999;
  try {
    b.validate(c, "batch.h5");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input_ids[1][2] = 999"), std::string::npos) << e.what();
  }
}

// The bf16 GEMMs use a bf16 copy of the weights; changing weights through params() must be seen
// by the next bf16 forward (no stale copy).
TEST(Model, Bf16WeightCopyFollowsWeightChanges) {
  const BertConfig c = small_config();
  const BertBatch batch = random_batch(c, 2, 6, 5);
  Bert m(c, Heads::PreTraining), fresh(c, Heads::PreTraining);
  m.init_weights(1);
  Rng rng{1, 0};
  m.pretrain_step(batch, rng, StepArgs{.precision = Precision::BF16});  // builds the bf16 copy
  for (auto& p : m.params()) p *= 1.5f;                                 // change the weights
  fresh.params() = m.params();
  const double a = m.pretrain_step(batch, rng, StepArgs{.precision = Precision::BF16}).loss;
  const double b = fresh.pretrain_step(batch, rng, StepArgs{.precision = Precision::BF16}).loss;
  EXPECT_EQ(a, b);
}

// Fine-tuning pads each batch to its own length, so one model sees many (B, T). Results for a
// batch must not depend on what shapes ran before (the activation arena is re-carved, not zeroed).
TEST(Model, ResultsDoNotDependOnPreviousBatchShapes) {
  BertConfig c = small_config();
  c.id2label = {"a", "b", "c"};
  for (Heads h : {Heads::SequenceClassification, Heads::TokenClassification, Heads::QuestionAnswering}) {
    Bert m1(c, h), m2(c, h);
    m1.init_weights(3);
    m2.params() = m1.params();
    auto labelled = [&](int64_t B, int64_t T, uint32_t seed) {
      BertBatch b = random_batch(c, B, T, seed);
      for (int64_t r = 0; r < B; ++r) {
        b.start_positions.push_back(static_cast<int32_t>(r % T));
        b.end_positions.push_back(static_cast<int32_t>((r + 1) % T));
        if (h == Heads::SequenceClassification) b.labels.push_back(static_cast<int32_t>(r % 3));
      }
      if (h == Heads::TokenClassification)
        for (int64_t i = 0; i < B * T; ++i) b.labels.push_back(b.input_mask[i] ? static_cast<int32_t>(i % 3) : -100);
      return b;
    };
    const BertBatch big = labelled(4, 16, 1), small = labelled(3, 7, 2);
    Rng r1{9, 0}, r2{9, 0};
    m1.zero_grad();
    m1.finetune_step(big, r1, StepArgs{.training = true, .backward = true, .precision = Precision::F32});
    m1.zero_grad();
    r1 = Rng{9, 0};
    const FinetuneLoss l1 =
        m1.finetune_step(small, r1, StepArgs{.training = true, .backward = true, .precision = Precision::F32});
    m2.zero_grad();
    const FinetuneLoss l2 =
        m2.finetune_step(small, r2, StepArgs{.training = true, .backward = true, .precision = Precision::F32});
    EXPECT_EQ(l1.loss, l2.loss) << architecture_name(h);
    EXPECT_EQ(m1.head_logits(), m2.head_logits()) << architecture_name(h);
    EXPECT_EQ(m1.grads(), m2.grads()) << architecture_name(h);
  }
}

// --freeze-layers N: only the top N layers, the pooler and the head get gradients and updates.
TEST(Model, FrozenLayersGetNoGradient) {
  BertConfig c = small_config();
  c.id2label = {"a", "b"};
  for (int top : {0, 1, 2}) {
    Bert m(c, Heads::SequenceClassification);
    m.init_weights(5);
    m.freeze_below_top_layers(top);
    BertBatch b = random_batch(c, 3, 9, 4);
    b.labels = {0, 1, 1};
    Rng rng{1, 0};
    m.zero_grad();
    m.finetune_step(b, rng, StepArgs{.training = true, .backward = true, .precision = Precision::F32});
    for (const auto& e : m.table().entries()) {
      double s = 0;
      for (size_t i = 0; i < e.numel; ++i) s += std::fabs(m.grads()[e.offset + i]);
      const bool emb = e.name.rfind("bert.embeddings.", 0) == 0;
      const bool lower =
          e.name.rfind("bert.encoder.layer.", 0) == 0 && std::stoi(e.name.substr(19)) < c.num_hidden_layers - top;
      EXPECT_EQ(e.trainable, !(emb || lower)) << e.name << " top " << top;
      if (!e.trainable) {
        EXPECT_EQ(s, 0.0) << e.name << " top " << top;
      }
      if (e.name == "classifier.weight" || e.name == "bert.pooler.dense.weight") {
        EXPECT_GT(s, 0.0) << e.name;
      }
    }
  }
}

// A step split into micro-batches (or ranks) normalised by the step's global masked-token and
// sequence counts has the gradient of the whole batch: 2 x 2 rows = 1 x 4 rows, although the two
// halves hold different numbers of masked tokens.
TEST(Model, GlobalNormalisersMakeMicroBatchesEqualTheWholeBatch) {
  const BertConfig c = small_config();
  const BertBatch whole = random_batch(c, 4, 9, 12);
  auto rows = [&](int64_t r0, int64_t r1) {
    BertBatch b;
    b.B = r1 - r0;
    b.T = whole.T;
    auto cut = [&](const std::vector<int32_t>& v, int64_t per) {
      return std::vector<int32_t>(v.begin() + r0 * per, v.begin() + r1 * per);
    };
    b.input_ids = cut(whole.input_ids, whole.T);
    b.segment_ids = cut(whole.segment_ids, whole.T);
    b.input_mask = cut(whole.input_mask, whole.T);
    b.mlm_labels = cut(whole.mlm_labels, whole.T);
    b.nsp_labels = cut(whole.nsp_labels, 1);
    return b;
  };
  const BertBatch h0 = rows(0, 2), h1 = rows(2, 4);
  int64_t m0 = 0, m1 = 0;
  for (int32_t l : h0.mlm_labels) m0 += l != -1;
  for (int32_t l : h1.mlm_labels) m1 += l != -1;
  ASSERT_NE(m0, m1);  // unequal halves: per-half means would weigh tokens differently
  Bert m(c, Heads::PreTraining);
  m.init_weights(3);
  Rng rng{1, 0};
  m.zero_grad();
  const PretrainLoss lw = m.pretrain_step(whole, rng, StepArgs{.backward = true, .precision = Precision::F32});
  const std::vector<float> gw = m.grads();
  m.zero_grad();
  const auto denom = static_cast<float>(m0 + m1);
  const PretrainLoss l0 = m.pretrain_step(
      h0, rng, StepArgs{.backward = true, .precision = Precision::F32, .mlm_denom = denom, .nsp_denom = 4.0f});
  const PretrainLoss l1 = m.pretrain_step(
      h1, rng, StepArgs{.backward = true, .precision = Precision::F32, .mlm_denom = denom, .nsp_denom = 4.0f});
  EXPECT_NEAR((l0.mlm_loss_sum + l1.mlm_loss_sum) / static_cast<double>(m0 + m1), lw.mlm_loss, 1e-6);
  EXPECT_NEAR((l0.nsp_loss_sum + l1.nsp_loss_sum) / 4.0, lw.nsp_loss, 1e-6);
  EXPECT_LT(bertcc::testing::max_rel(bertcc::testing::to_d(m.grads()), bertcc::testing::to_d(gw)), 1e-5);
}

TEST(Model, LayerwiseLearningRateDecayDepths) {
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 8;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 16;
  c.model_type = "electra";
  c.embedding_size = 4;
  c.id2label = {"a", "b"};
  Bert m(c, Heads::SequenceClassification);
  m.set_layerwise_lr_decay(0.5f);
  auto scale = [&](const std::string& n) { return m.table().at(n).lr_scale; };
  // ELECTRA's depths: embeddings 0, layer l -> l + 1, the head L + 2 = 5.
  EXPECT_FLOAT_EQ(scale("bert.embeddings.word_embeddings.weight"), 0.03125f);  // 0.5^5
  EXPECT_FLOAT_EQ(scale("bert.embeddings_project.weight"), 0.03125f);
  EXPECT_FLOAT_EQ(scale("bert.encoder.layer.0.attention.self.query.weight"), 0.0625f);  // 0.5^4
  EXPECT_FLOAT_EQ(scale("bert.encoder.layer.2.output.dense.bias"), 0.25f);
  EXPECT_FLOAT_EQ(scale("classifier.out_proj.weight"), 1.0f);
  m.set_layerwise_lr_decay(1.0f);
  EXPECT_FLOAT_EQ(scale("bert.embeddings.word_embeddings.weight"), 1.0f);
  EXPECT_THROW(m.set_layerwise_lr_decay(0.0f), Error);
}

// A forward that no backward follows runs in one layer's activation memory (every layer's slices
// are layer 0's, the layer inputs alternate between two buffers): the same outputs and losses, bit
// for bit, as the training-sized arena, with and without dropout, across re-carving; a backward
// after such a forward is refused.
TEST(Model, InferenceForwardInOneLayersMemoryGivesTheSameBits) {
  // Inference shares one region among buffers whose lives do not overlap and writes each layer's
  // output over its input: the same bits as the training arena, in fp32 and bf16, with ELECTRA's
  // projected embeddings, on the CPU and through the staged backend (device code paths).
  for (int variant = 0; variant < 2; ++variant) {
    BertConfig c = small_config();
    c.num_hidden_layers = 5;  // odd and > 2: the shared slices are exercised
    if (variant == 1) {
      c.model_type = "electra";
      c.embedding_size = 7;  // embeddings narrower than the encoder: the projection's buffers
      c.hidden_act = "gelu";
    }
    const BertBatch batch = random_batch(c, 3, 11, 9);
    for (Backend* be : {&cpu_backend(), &staged_backend()}) {
      for (Precision prec : {Precision::F32, Precision::BF16}) {
        SCOPED_TRACE(std::string(variant ? "electra " : "bert ") + (be->on_host() ? "cpu " : "staged ") +
                     (prec == Precision::BF16 ? "bf16" : "fp32"));
        Bert m(c, variant ? Heads::Discriminator : Heads::PreTraining);
        m.init_weights(12);
        m.use_backend(*be);
        std::vector<float> buf;
        for (bool training : {false, true}) {
          Rng r1{21, 0}, r2{21, 0}, r3{21, 0};
          m.encode(batch, training, prec, r1, /*backward=*/true);
          const float* s = m.sequence_output_on_host(buf);
          const std::vector<float> seq_full(s, s + 3 * 11 * c.hidden_size);
          std::vector<float> pool_full;
          if (m.pooled_output()) {
            const float* q = m.pooled_output_on_host(buf);
            pool_full.assign(q, q + 3 * c.hidden_size);
          }
          const double before = be->buffer_mb();
          m.encode(batch, training, prec, r2, /*backward=*/false);
          if (!be->on_host()) {
            EXPECT_LT(be->buffer_mb(), before + 1e-9) << "the inference arena grew the memory";
          }
          s = m.sequence_output_on_host(buf);
          EXPECT_EQ(seq_full, std::vector<float>(s, s + 3 * 11 * c.hidden_size)) << "training " << training;
          if (m.pooled_output()) {
            const float* q = m.pooled_output_on_host(buf);
            EXPECT_EQ(pool_full, std::vector<float>(q, q + 3 * c.hidden_size)) << "training " << training;
          }
          if (variant == 1) continue;
          // the losses too, through the heads, and a training step after an inference one
          const double l_inf = m.pretrain_step(batch, r3, StepArgs{.training = training, .precision = prec}).loss;
          Rng r4{21, 0};
          m.zero_grad();
          const double l_full =
              m.pretrain_step(batch, r4, StepArgs{.training = training, .backward = true, .precision = prec}).loss;
          EXPECT_EQ(l_inf, l_full);
        }
        Rng r{1, 0};
        m.encode(batch, false, prec, r, /*backward=*/false);
        EXPECT_THROW(m.encode_backward(m.sequence_output(), nullptr, prec), Error);
      }
    }
  }
  // The inference arena is smaller than the training one, and on a fresh staged model an inference
  // forward's buffers are below the training activations alone (BERT-large's shape, counted only).
  const BertConfig big = [] {
    BertConfig b;
    b.vocab_size = 64;
    b.hidden_size = 64;
    b.num_hidden_layers = 4;
    b.num_attention_heads = 4;
    b.intermediate_size = 256;
    b.max_position_embeddings = 32;
    return b;
  }();
  const BertBatch bb = random_batch(big, 4, 32, 3);
  set_padded_execution(true);  // the padded plan (unpadded, the rows are fewer: less still)
  for (Precision prec : {Precision::F32, Precision::BF16}) {
    Backend& be = staged_backend();
    Bert m(big, Heads::None);
    m.init_weights(1);
    m.use_backend(be);
    const double weights = be.buffer_mb();
    Rng r{1, 0};
    m.encode(bb, false, prec, r, /*backward=*/false);
    const double inference = be.buffer_mb() - weights;
    // the former inference plan: layer 0's training slices, two alternating layer inputs
    const int64_t N = 4 * 32, C = 64, I = 256;
    const double h = prec == Precision::BF16 ? 1 : 0;
    const double attention = static_cast<double>(be.attention_saved_size(4, 32, C, 4, false, prec, false) +
                                                 be.attention_work_size(4, 32, C, 4));
    const double before =
        4.0 *
        (N * C /*emb_sum*/ + 2 * N * C /*x*/ + 3 * N * C + N * C /*qkv ctx*/ + 2 * N * C /*ln sums*/ + N * C /*h1*/ +
         N * I /*inter*/ + (1 - h) * N * I /*gelu*/ + N * C /*tmp_c*/ + h * (1.5 * N * C + 0.5 * N * I) + attention) /
        (1 << 20);
    EXPECT_LT(inference, 0.75 * before) << "inference activations " << inference << " MB against " << before;
    EXPECT_GT(inference, 0.4 * before) << "inference activations " << inference << " MB against " << before;
  }
  set_padded_execution(false);
}

TEST(Model, InferenceOnlyPlacementKeepsEncoderMatricesInBf16AloneWithTheSameBits) {
  // use_backend_for_inference on a device in bf16: the encoder's GEMM matrices are there as bf16
  // only. The logits of every kind of head are the bits of use_backend's; less device memory;
  // whatever would need the fp32 matrices is refused by name.
  BertConfig c = small_config();
  c.hidden_size = 16;  // multiples of 8: the matrices' bf16 copies are 16-byte aligned, so dropped
  c.num_attention_heads = 4;
  c.intermediate_size = 40;
  c.vocab_size = 40;
  c.num_hidden_layers = 3;
  c.id2label = {"a", "b", "c"};
  const BertBatch batch = random_batch(c, 3, 11, 5);
  Backend& be = staged_backend();
  for (Heads h :
       {Heads::QuestionAnswering, Heads::SequenceClassification, Heads::TokenClassification, Heads::PreTraining}) {
    SCOPED_TRACE(static_cast<int>(h));
    Bert full(c, h), lean(c, h);
    full.init_weights(4);
    lean.init_weights(4);
    const double m0 = be.buffer_mb();
    full.use_backend(be);
    const double m_full = be.buffer_mb() - m0;
    lean.use_backend_for_inference(be, Precision::BF16);
    const double m_lean = be.buffer_mb() - m0 - m_full;
    EXPECT_TRUE(lean.inference_only());
    // fp32 weights: 16x48 + 16x16 + 40x16 + 16x40 per layer dropped, bf16 kept
    const double dropped = 4.0 * c.num_hidden_layers * (16 * 48 + 16 * 16 + 2 * 40 * 16) / (1 << 20);
    EXPECT_NEAR(m_full - m_lean, dropped, 64.0 * 4 * 60 / (1 << 20)) << "alignment gaps aside";
    for (int rep = 0; rep < 2; ++rep) {  // the second pass reuses the arena and the bf16 weights
      Rng r1{7, 0}, r2{7, 0};
      if (h == Heads::PreTraining) {
        std::vector<float> l1, l2;
        const double a = full.pretrain_step(batch, r1, StepArgs{.precision = Precision::BF16, .mlm_logits = &l1}).loss;
        const double b = lean.pretrain_step(batch, r2, StepArgs{.precision = Precision::BF16, .mlm_logits = &l2}).loss;
        EXPECT_EQ(a, b);
        EXPECT_EQ(l1, l2);
      } else {
        full.finetune_step(batch, r1, StepArgs{.precision = Precision::BF16});
        lean.finetune_step(batch, r2, StepArgs{.precision = Precision::BF16});
        ASSERT_FALSE(full.head_logits().empty());
        EXPECT_EQ(full.head_logits(), lean.head_logits());
      }
    }
    Rng r{1, 0};
    EXPECT_THROW(lean.encode(batch, false, Precision::F32, r, false), Error);
    EXPECT_THROW(lean.encode(batch, true, Precision::BF16, r, /*backward=*/true), Error);
    EXPECT_THROW(lean.params_to_host(), Error);
    EXPECT_THROW(lean.params_to_device(), Error);
    EXPECT_THROW(lean.params_on_backend(), Error);
    lean.params();  // a change on the host cannot reach the device's bf16-only weights
    EXPECT_THROW(lean.encode(batch, false, Precision::BF16, r, false), Error);
    lean.use_backend(be);  // placed again in full: usable for anything
    EXPECT_FALSE(lean.inference_only());
    Rng r3{7, 0}, r4{7, 0};
    if (h != Heads::PreTraining) {
      full.finetune_step(batch, r3, StepArgs{.precision = Precision::F32});
      lean.finetune_step(batch, r4, StepArgs{.precision = Precision::F32});
      EXPECT_EQ(full.head_logits(), lean.head_logits());
    }
  }
  // On the CPU, or in fp32, it is use_backend.
  Bert m(c, Heads::SequenceClassification);
  m.init_weights(1);
  m.use_backend_for_inference(be, Precision::F32);
  EXPECT_FALSE(m.inference_only());
  m.use_backend_for_inference(cpu_backend(), Precision::BF16);
  EXPECT_FALSE(m.inference_only());
}

TEST(Model, GradientsAreAllocatedOnlyForABackward) {
  const BertConfig c = small_config();
  const BertBatch batch = random_batch(c, 2, 9, 4);
  Bert a(c, Heads::PreTraining), b(c, Heads::PreTraining);
  a.init_weights(3);
  b.init_weights(3);
  EXPECT_FALSE(a.has_grads());
  Rng r1{5, 0}, r2{5, 0}, r3{5, 0};
  const double l_inf = a.pretrain_step(batch, r1, StepArgs{.precision = Precision::BF16}).loss;
  EXPECT_FALSE(a.has_grads()) << "an inference forward allocated gradients";
  b.zero_grad();  // b's gradients exist before its first forward, a's appear with its first backward
  ASSERT_TRUE(b.has_grads());
  const double lb =
      b.pretrain_step(batch, r2, StepArgs{.training = true, .backward = true, .precision = Precision::BF16}).loss;
  const double la =
      a.pretrain_step(batch, r3, StepArgs{.training = true, .backward = true, .precision = Precision::BF16}).loss;
  ASSERT_TRUE(a.has_grads());
  EXPECT_EQ(la, lb);
  EXPECT_EQ(a.grads(), b.grads());
  EXPECT_NE(l_inf, la);  // dropout on in the training step
  EXPECT_EQ(a.grads().size(), static_cast<size_t>(a.table().total()));
}

namespace {

// A batch of rows with the given lengths (then padding), labels for every head.
BertBatch batch_of_lengths(const BertConfig& c, const std::vector<int64_t>& lens, int64_t T, uint32_t seed) {
  std::mt19937 g(seed);
  BertBatch b;
  b.B = static_cast<int64_t>(lens.size());
  b.T = T;
  for (int64_t r = 0; r < b.B; ++r) {
    const int64_t n = lens[static_cast<size_t>(r)];
    for (int64_t t = 0; t < T; ++t) {
      const bool pad = t >= n;
      b.input_ids.push_back(pad ? 0 : 1 + static_cast<int32_t>(g() % (c.vocab_size - 1)));
      b.input_mask.push_back(pad ? 0 : 1);
      b.segment_ids.push_back(!pad && t > n / 2 ? 1 : 0);
      b.mlm_labels.push_back(!pad && t > 0 && g() % 3 == 0 ? static_cast<int32_t>(g() % c.vocab_size) : -1);
      b.labels.push_back(pad ? -100 : static_cast<int32_t>(g() % 3));  // token classification
    }
    b.nsp_labels.push_back(static_cast<int32_t>(g() % 2));
    b.start_positions.push_back(static_cast<int32_t>(g() % n));
    b.end_positions.push_back(static_cast<int32_t>(g() % n));
  }
  b.mlm_labels[static_cast<size_t>(T + 1)] = 5;  // (row 1 is long enough)
  return b;
}

// Row `row` of a padded batch (its first n tokens, all real) as a batch of its own, unpadded.
BertBatch row_alone(const BertBatch& b, int64_t row, int64_t n) {
  BertBatch alone;
  alone.B = 1;
  alone.T = n;
  for (int64_t t = 0; t < n; ++t) {
    alone.input_ids.push_back(b.input_ids[static_cast<size_t>(row * b.T + t)]);
    alone.segment_ids.push_back(b.segment_ids[static_cast<size_t>(row * b.T + t)]);
    alone.input_mask.push_back(1);
  }
  return alone;
}

struct StepResult {
  double loss = 0;
  std::vector<float> logits, grads, seq;
  bool packed = false;
};

StepResult run_step(const BertConfig& c, Heads h, const BertBatch& batch, Backend& be, Precision prec, bool padded,
                    bool training) {
  set_padded_execution(padded);
  Bert m(c, h);
  m.init_weights(31);
  m.use_backend(be);
  m.zero_grad();
  Rng rng{5, 0};
  StepResult r;
  if (h == Heads::PreTraining || h == Heads::Generator) {
    std::vector<float> mlm;
    r.loss = m.pretrain_step(batch, rng,
                             StepArgs{.training = training, .backward = true, .precision = prec, .mlm_logits = &mlm})
                 .loss;
    r.logits = mlm;
  } else if (h == Heads::Discriminator) {
    BertBatch d = batch;
    for (size_t i = 0; i < d.labels.size(); ++i) d.labels[i] = d.input_mask[i] ? d.labels[i] % 2 : -100;
    r.loss = m.finetune_step(d, rng, StepArgs{.training = training, .backward = true, .precision = prec}).loss;
    r.logits = m.head_logits();
  } else {
    BertBatch f = batch;
    if (h == Heads::SequenceClassification) f.labels = {0, 2, 1, 1, 0, 2, 1, 0, 2}, f.labels.resize(f.B);
    r.loss = m.finetune_step(f, rng, StepArgs{.training = training, .backward = true, .precision = prec}).loss;
    r.logits = m.head_logits();
  }
  r.packed = m.last_packed();
  m.grads_to_host();
  r.grads = m.grads();
  std::vector<float> buf;
  const float* s = m.sequence_output_on_host(buf);
  r.seq.assign(s, s + batch.B * batch.T * c.hidden_size);
  set_padded_execution(false);
  return r;
}

// The largest |a - b| over the rows of real tokens only (per-token tensors) or everywhere.
double max_diff(const std::vector<float>& a, const std::vector<float>& b, const BertBatch& batch, int64_t per_token) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (per_token && !batch.input_mask[i / static_cast<size_t>(per_token)]) continue;
    d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return d;
}
double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

// The joint QA head's logits (start [B*T], end [B*T], answer class [B]) with the masked positions
// (the padding among them: -1e30 in both layouts) set to 0, so that the rest compare.
std::vector<float> joint_visible(std::vector<float> v, const BertBatch& batch) {
  const size_t BT = static_cast<size_t>(batch.B * batch.T);
  for (size_t i = 0; i < std::min(v.size(), 2 * BT); ++i)
    if (v[i] <= -1e29f) v[i] = 0.0f;
  return v;
}

// The joint head's beam search (no labels: inference) padded and packed, fp32: the same starts and
// ends, their log-probabilities and the answer class to 1e-6 of the largest. Candidates whose start
// is masked (log-probability about -1e30; in a short row some lie in the padding, whose hidden
// states only the padded path computes) are compared by their start alone.
void check_joint_beams(const BertConfig& c, const BertBatch& batch, Backend& be) {
  BertBatch f = batch;
  f.start_positions.clear();
  f.end_positions.clear();
  std::vector<float> beams[2];
  for (int packed = 0; packed < 2; ++packed) {
    set_padded_execution(!packed);
    Bert m(c, Heads::JointQuestionAnswering);
    m.init_weights(31);
    m.use_backend(be);
    Rng rng{5, 0};
    m.finetune_step(f, rng, StepArgs{.precision = Precision::F32});
    EXPECT_EQ(m.last_packed(), packed == 1);
    beams[packed] = m.head_logits();
  }
  set_padded_execution(false);
  const int64_t K1 = c.start_beam(), K2 = c.end_beam(), per_row = 2 * K1 + 2 * K1 * K2 + 1;
  ASSERT_EQ(beams[0].size(), static_cast<size_t>(batch.B * per_row));
  ASSERT_EQ(beams[1].size(), beams[0].size());
  double largest = 0;
  for (float v : beams[0])
    if (std::abs(v) < 1e29f) largest = std::max(largest, std::abs(static_cast<double>(v)));
  const double tol = 1e-6 * largest;
  for (int64_t b = 0; b < batch.B; ++b) {
    const float* p = beams[0].data() + b * per_row;
    const float* q = beams[1].data() + b * per_row;
    for (int64_t i = 0; i < K1; ++i) {
      EXPECT_EQ(p[K1 + i], q[K1 + i]) << "row " << b << " start " << i;
      if (p[i] <= -1e29f) {
        EXPECT_LE(q[i], -1e29f);
        continue;
      }
      EXPECT_NEAR(p[i], q[i], tol);
      for (int64_t j = 0; j < K2; ++j) {
        const int64_t at = 2 * K1 + i * K2 + j;
        EXPECT_EQ(p[at + K1 * K2], q[at + K1 * K2]) << "row " << b << " start " << i << " end " << j;
        if (p[at] > -1e29f) {
          EXPECT_NEAR(p[at], q[at], tol);
        }
      }
    }
    EXPECT_NEAR(p[per_row - 1], q[per_row - 1], tol);
  }
}

}  // namespace

TEST(Model, UnpaddedExecutionGivesThePaddedResults) {
  // Unpadded execution (the default) computes a batch's real tokens only, packed; the padded path
  // computes every row to the batch's longest. On rows of 1 token to the whole length (one row is
  // all of it, one a single token), every head's loss, logits at the real tokens and every
  // gradient agree: to 1e-6 of the tensor's largest value in fp32 (sums of the same products in
  // other orders: the attention's softmax and GEMMs over a sequence's own keys), closely in bf16
  // (whose roundings those orders move), on the CPU and on the staged backend (device code paths).
  // Dropout off (its numbers are laid out by rows, which packing changes); QA: the packed loss
  // takes the real positions only, checked against the padded logits' loss over those. Every head
  // reads the packed rows: BERT's pre-training, classification, token classification, QA and the
  // joint SQuAD head (training, and its beam search), ELECTRA's discriminator, generator and
  // classifier.
  BertConfig c = small_config();
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0f;
  c.id2label = {"a", "b", "c"};
  const int64_t T = 12;
  const BertBatch batch = batch_of_lengths(c, {1, 12, 7, 3, 9}, T, 4);
  for (Backend* be : {&cpu_backend(), &staged_backend()}) {
    for (Precision prec : {Precision::F32, Precision::BF16}) {
      const double tol = prec == Precision::F32 ? 1e-6 : 3e-2;
      for (Heads h : {Heads::PreTraining, Heads::SequenceClassification, Heads::TokenClassification,
                      Heads::QuestionAnswering, Heads::JointQuestionAnswering}) {
        SCOPED_TRACE(std::string(be->on_host() ? "cpu " : "staged ") + (prec == Precision::BF16 ? "bf16 " : "fp32 ") +
                     architecture_name(h));
        const StepResult pad = run_step(c, h, batch, *be, prec, /*padded=*/true, /*training=*/true);
        const StepResult pk = run_step(c, h, batch, *be, prec, /*padded=*/false, /*training=*/true);
        EXPECT_FALSE(pad.packed);
        EXPECT_TRUE(pk.packed);
        EXPECT_LE(max_diff(pad.seq, pk.seq, batch, c.hidden_size), tol * max_abs(pad.seq));
        const int64_t per_token = h == Heads::TokenClassification ? 3 : h == Heads::QuestionAnswering ? 2 : 0;
        if (h == Heads::JointQuestionAnswering) {
          const std::vector<float> a = joint_visible(pad.logits, batch), b = joint_visible(pk.logits, batch);
          EXPECT_LE(max_diff(a, b, batch, 0), tol * max_abs(a));
        } else {
          EXPECT_LE(max_diff(pad.logits, pk.logits, batch, per_token), tol * max_abs(pad.logits));
        }
        if (h == Heads::QuestionAnswering) {
          // the padded logits' loss over the real positions only
          double total = 0;
          for (int which = 0; which < 2; ++which)
            for (int64_t b = 0; b < batch.B; ++b) {
              double mx = -1e30, sum = 0;
              for (int64_t t = 0; t < T; ++t)
                if (batch.input_mask[b * T + t])
                  mx = std::max(mx, static_cast<double>(pad.logits[2 * (b * T + t) + which]));
              for (int64_t t = 0; t < T; ++t)
                if (batch.input_mask[b * T + t]) sum += std::exp(pad.logits[2 * (b * T + t) + which] - mx);
              const int32_t y = which == 0 ? batch.start_positions[b] : batch.end_positions[b];
              total += 0.5 * (mx + std::log(sum) - pad.logits[2 * (b * T + y) + which]) / static_cast<double>(batch.B);
            }
          EXPECT_NEAR(pk.loss, total, tol * std::abs(total));
          continue;
        }
        EXPECT_NEAR(pk.loss, pad.loss, tol * std::abs(pad.loss));
        EXPECT_LE(max_diff(pad.grads, pk.grads, batch, 0), tol * max_abs(pad.grads));
      }
    }
  }
  // A head's dropout keeps the padded rows' numbers: token classification with its dropout on
  BertConfig d = c;
  d.classifier_dropout = 0.3f;
  for (Backend* be : {&cpu_backend(), &staged_backend()}) {
    const StepResult pad = run_step(d, Heads::TokenClassification, batch, *be, Precision::F32, true, true);
    const StepResult pk = run_step(d, Heads::TokenClassification, batch, *be, Precision::F32, false, true);
    EXPECT_TRUE(pk.packed);
    EXPECT_NEAR(pk.loss, pad.loss, 1e-6 * std::abs(pad.loss));
    EXPECT_LE(max_diff(pad.logits, pk.logits, batch, 3), 1e-6 * max_abs(pad.logits));
    EXPECT_LE(max_diff(pad.grads, pk.grads, batch, 0), 1e-6 * max_abs(pad.grads));
  }
  // ELECTRA (projected embeddings): the discriminator on every token, the generator's masked LM,
  // the classifier's own layers on [CLS]
  BertConfig e = c;
  e.model_type = "electra";
  e.embedding_size = 7;
  e.hidden_act = "gelu";
  for (Backend* be : {&cpu_backend(), &staged_backend()}) {
    for (Precision prec : {Precision::F32, Precision::BF16}) {
      const double tol = prec == Precision::F32 ? 1e-6 : 3e-2;
      for (Heads h : {Heads::Discriminator, Heads::Generator, Heads::SequenceClassification}) {
        SCOPED_TRACE(std::string("ELECTRA ") + (be->on_host() ? "cpu " : "staged ") +
                     (prec == Precision::BF16 ? "bf16 " : "fp32 ") + architecture_name(h, true));
        const StepResult pad = run_step(e, h, batch, *be, prec, true, true);
        const StepResult pk = run_step(e, h, batch, *be, prec, false, true);
        EXPECT_FALSE(pad.packed);
        EXPECT_TRUE(pk.packed);
        EXPECT_NEAR(pk.loss, pad.loss, tol * std::abs(pad.loss));
        EXPECT_LE(max_diff(pad.logits, pk.logits, batch, h == Heads::Discriminator ? 1 : 0), tol * max_abs(pad.logits));
        EXPECT_LE(max_diff(pad.grads, pk.grads, batch, 0), tol * max_abs(pad.grads));
      }
    }
  }
  // the joint head's beam search (inference)
  for (Backend* be : {&cpu_backend(), &staged_backend()}) check_joint_beams(c, batch, *be);
}

TEST(Model, UnpaddedSequenceOutputDoesNotDependOnItsBatch) {
  // A sequence's hidden states are the same whatever batch it is computed in (alone, or packed
  // with others of other lengths), with dropout on in training too: its dropout numbers are laid
  // out after the previous sequences' in the packed rows, so this compares inference only.
  const BertConfig c = small_config();
  const int64_t T = 12;
  const BertBatch mixed = batch_of_lengths(c, {5, 12, 7, 3}, T, 8);
  const BertBatch alone = row_alone(mixed, 2, 7);  // row 2 (7 tokens) on its own, no padding
  // On every CPU: with the GEMMs this CPU picks (oneDNN's brgemm on AVX-512, the row kernel on AVX2),
  // and with the row kernel forced, so that an AVX-512 machine checks the AVX2 path too.
  for (auto rows : {kernels::RowGemm::Auto, kernels::RowGemm::Always})
    for (Precision prec : {Precision::F32, Precision::BF16}) {
      SCOPED_TRACE(std::string(rows == kernels::RowGemm::Auto ? "automatic GEMMs " : "row kernel ") +
                   (prec == Precision::F32 ? "fp32" : "bf16"));
      kernels::set_row_gemm(rows);
      Bert m(c, Heads::None);
      m.init_weights(3);
      Rng r{1, 0};
      std::vector<float> buf;
      m.encode(alone, false, prec, r, false);
      EXPECT_TRUE(m.last_packed());  // (no padding, but the CPU's varlen attention computes it packed all the same)
      const std::vector<float> one(m.sequence_output(), m.sequence_output() + 7 * c.hidden_size);
      const std::vector<float> pooled_one(m.pooled_output(), m.pooled_output() + c.hidden_size);
      m.encode(mixed, false, prec, r, false);
      EXPECT_TRUE(m.last_packed());
      const float* s = m.sequence_output() + 2 * T * c.hidden_size;
      EXPECT_EQ(one, std::vector<float>(s, s + 7 * c.hidden_size));
      const float* p = m.pooled_output() + 2 * c.hidden_size;
      EXPECT_EQ(pooled_one, std::vector<float>(p, p + c.hidden_size));
      // zeros at the padding
      for (int64_t i = 7 * c.hidden_size; i < T * c.hidden_size; ++i) EXPECT_EQ(s[i], 0.0f);
      kernels::set_row_gemm(kernels::RowGemm::Auto);
    }
}

TEST(Model, Int8SequenceOutputDoesNotDependOnItsBatch) {
  // int8 products are exact integer sums of per-row quantized activations: a sequence's output is
  // the same bits alone, packed with others, or padded among them; with 8-bit activations and with
  // 7-bit ones (--int8-activation-bits: auto's choice on AVX2-only CPUs), each on every ISA
  const BertConfig c = small_config();
  const int64_t T = 12;
  const BertBatch mixed = batch_of_lengths(c, {5, 12, 7, 3}, T, 8);
  const BertBatch alone = row_alone(mixed, 2, 7);  // row 2 (7 tokens) on its own
  std::vector<float> eight, seven;
  for (int bits : {8, 7}) {
    SCOPED_TRACE(std::to_string(bits) + "-bit activations");
    set_int8_activation_bits(bits);
    Bert m(c, Heads::None);
    m.init_weights(3);
    Rng r{1, 0};
    m.encode(alone, false, Precision::I8, r, false);
    const std::vector<float> one(m.sequence_output(), m.sequence_output() + 7 * c.hidden_size);
    const std::vector<float> pooled_one(m.pooled_output(), m.pooled_output() + c.hidden_size);
    m.encode(mixed, false, Precision::I8, r, false);
    const float* s = m.sequence_output() + 2 * T * c.hidden_size;
    EXPECT_EQ(one, std::vector<float>(s, s + 7 * c.hidden_size));
    const float* p = m.pooled_output() + 2 * c.hidden_size;
    EXPECT_EQ(pooled_one, std::vector<float>(p, p + c.hidden_size));
    // int8 is not fp32: the quantization shows, and stays small (LayerNorm outputs of size ~1)
    m.encode(alone, false, Precision::F32, r, false);
    const std::vector<float> f32(m.sequence_output(), m.sequence_output() + 7 * c.hidden_size);
    EXPECT_NE(one, f32);
    double worst = 0;
    for (size_t i = 0; i < f32.size(); ++i) worst = std::max(worst, std::fabs(double{one[i]} - f32[i]));
    EXPECT_LT(worst, bits == 8 ? 0.05 : 0.1) << "largest |int8 - fp32| of the sequence output";
    if (bits == 8) {
      eight = one;
    } else {
      seven = one;
      EXPECT_NE(one, eight);  // the bits took effect
    }
    // bertcc's own int8 kernel (CPUs without VNNI) and oneDNN's, each forced: exact int32 sums
    // either way, so the same bits
    for (auto rows : {kernels::RowGemm::Always, kernels::RowGemm::Never}) {
      SCOPED_TRACE(rows == kernels::RowGemm::Always ? "own int8 kernel" : "oneDNN int8");
      kernels::set_row_gemm(rows);
      Bert f(c, Heads::None);
      f.init_weights(3);
      f.encode(mixed, false, Precision::I8, r, false);
      kernels::set_row_gemm(kernels::RowGemm::Auto);
      const float* fs = f.sequence_output() + 2 * T * c.hidden_size;
      EXPECT_EQ(one, std::vector<float>(fs, fs + 7 * c.hidden_size));
    }
    // after a weight change the int8 weights are made again
    m.params()[m.table().at("bert.encoder.layer.0.intermediate.dense.weight").offset] += 1.0f;
    m.encode(alone, false, Precision::I8, r, false);
    EXPECT_NE(one, std::vector<float>(m.sequence_output(), m.sequence_output() + 7 * c.hidden_size));
    // inference only
    EXPECT_THROW(m.encode(alone, true, Precision::I8, r, false), Error);
  }
  // a model's int8 weights follow a change of the bits
  set_int8_activation_bits(8);
  Bert m(c, Heads::None);
  m.init_weights(3);
  Rng r{1, 0};
  m.encode(alone, false, Precision::I8, r, false);
  EXPECT_EQ(eight, std::vector<float>(m.sequence_output(), m.sequence_output() + 7 * c.hidden_size));
  set_int8_activation_bits(7);
  m.encode(alone, false, Precision::I8, r, false);
  EXPECT_EQ(seven, std::vector<float>(m.sequence_output(), m.sequence_output() + 7 * c.hidden_size));
  set_int8_activation_bits(0);
}

// A sequence classifier's inference reads the pooled output (ELECTRA's head: the [CLS] rows) alone,
// so the encoder runs its last layer past the attention on the [CLS] rows only (Encoder::encode,
// BERTCC_CLS_LAST_LAYER) where the CPU's linear layers give a row the same bits at any row count
// (kernels::linear_rows_invariant): the same logits bit for bit as every row computed, in fp32,
// bf16 and int8, packed and padded, with the CPU's own GEMMs and the row kernel forced, the weights
// as training holds them and as an inference load does, for BERT and ELECTRA. The [CLS] rows of the
// sequence rows are every-row's, the others stale (so it did take the path), and the sequence
// output is refused until an encode computes every row; a sequence's logits alone are its logits in
// a batch. (ctest runs it under ONEDNN_MAX_CPU_ISA limits too: unit_int8_*.)
TEST(Model, ClassifierInferenceComputesTheLastLayerForClsRowsAloneWithTheSameLogits) {
  const int64_t T = 12;
  for (bool electra : {false, true})
    for (bool padded : {false, true})
      for (bool held : {false, true})
        for (auto rows : {kernels::RowGemm::Auto, kernels::RowGemm::Always})
          for (Precision prec : {Precision::F32, Precision::BF16, Precision::I8}) {
            SCOPED_TRACE(std::string(electra ? "electra " : "bert ") + (padded ? "padded " : "packed ") +
                         (held ? "inference weights " : "") +
                         (rows == kernels::RowGemm::Auto ? "automatic GEMMs " : "row kernel ") +
                         (prec == Precision::F32    ? "fp32"
                          : prec == Precision::BF16 ? "bf16"
                                                    : "int8"));
            BertConfig c = small_config();
            c.num_hidden_layers = 3;
            c.id2label = {"a", "b", "c"};
            if (electra) c.model_type = "electra";
            kernels::set_row_gemm(rows);
            set_padded_execution(padded);
            Bert m(c, Heads::SequenceClassification);
            m.init_weights(5);
            if (held) prec == Precision::I8 ? m.keep_int8_weights_only() : m.keep_packed_weights_only(prec);
            const bool taken = kernels::linear_rows_invariant(prec);
            // short sequences first: the [CLS] rows of later sequences fall among the first B rows,
            // where the moves to the front and back must not overwrite a row still to move
            BertBatch mixed = batch_of_lengths(c, {2, 1, 3, 12, 7}, T, 8);
            mixed.labels.clear();  // inference: no labels
            mixed.start_positions.clear();
            mixed.end_positions.clear();
            const int64_t C = c.hidden_size, N = padded ? 5 * T : 25;
            const std::vector<int64_t> cls_rows =
                padded ? std::vector<int64_t>{0, T, 2 * T, 3 * T, 4 * T} : std::vector<int64_t>{0, 2, 3, 6, 18};
            std::vector<float> seq_rows;
            const auto logits = [&](const BertBatch& b, bool cls_only) {
              set_cls_rows_last_layer(cls_only);
              Rng r{1, 0};
              m.finetune_step(b, r, StepArgs{.training = false, .backward = false, .precision = prec});
              set_cls_rows_last_layer(true);
              const Encoder& e = ModelParts::encoder(m);
              seq_rows.assign(e.sequence_rows(), e.sequence_rows() + e.sequence_row_count() * C);
              return m.head_logits();
            };
            const std::vector<float> every = logits(mixed, false);
            const std::vector<float> every_rows = seq_rows;
            ASSERT_EQ(every_rows.size(), static_cast<size_t>(N * C));
            EXPECT_NO_THROW(m.sequence_output());
            const std::vector<float> cls = logits(mixed, true);
            ASSERT_EQ(every.size(), size_t{5 * 3});
            EXPECT_EQ(every, cls);
            int64_t stale = 0;
            for (int64_t n = 0; n < N; ++n) {
              const bool is_cls = std::find(cls_rows.begin(), cls_rows.end(), n) != cls_rows.end();
              const bool same =
                  std::equal(seq_rows.begin() + n * C, seq_rows.begin() + (n + 1) * C, every_rows.begin() + n * C);
              if (is_cls) {
                EXPECT_TRUE(same) << "[CLS] row " << n;
              }
              stale += !same;
            }
            if (taken) {
              EXPECT_GT(stale, 0) << "the other rows were computed too";
              EXPECT_THROW(m.sequence_output(), Error);  // the [CLS] rows alone were computed
            } else {
              EXPECT_EQ(stale, 0);
              EXPECT_NO_THROW(m.sequence_output());
            }
            Rng r{1, 0};
            m.encode(mixed, false, prec, r, false);  // every row again
            EXPECT_NO_THROW(m.sequence_output());
            // sequence 4 (7 tokens) alone: its row of the batch's logits
            if (!padded) {
              EXPECT_EQ(logits(row_alone(mixed, 4, 7), true), std::vector<float>(cls.begin() + 12, cls.begin() + 15));
            }
            // training computes every row
            BertBatch labelled = mixed;
            labelled.labels = {0, 1, 2, 1, 0};
            if (prec != Precision::I8 && !held) {
              Rng t{1, 0};
              m.finetune_step(labelled, t, StepArgs{.training = true, .backward = true, .precision = prec});
              EXPECT_NO_THROW(m.sequence_output());
            }
            set_padded_execution(false);
            kernels::set_row_gemm(kernels::RowGemm::Auto);
          }
}

// int8 inference runs its feed-forward block fused (no fp32 intermediate or GELU output) and its
// attention keeps no probabilities: its activation arena holds neither, so an int8 server's memory
// under load is that much smaller than fp32's
TEST(Model, Int8InferenceArenaHoldsNoFp32FeedForwardNorProbabilities) {
  const BertConfig c = small_config();
  const BertBatch batch = batch_of_lengths(c, {5, 12, 7, 3}, 12, 8);
  const int64_t N = 5 + 12 + 7 + 3;  // the packed tokens (unpadded execution)
  size_t floats[2] = {0, 0};
  for (int i8 = 0; i8 < 2; ++i8) {
    Bert m(c, Heads::None);
    m.init_weights(3);
    Rng r{1, 0};
    m.encode(batch, false, i8 ? Precision::I8 : Precision::F32, r, false);
    floats[i8] = ModelParts::encoder(m).acts().arena.size();
  }
  // fp32's GELU output (N x I) and its probabilities (NH n^2 over the sequences) are gone
  int64_t probs = 0;
  for (int64_t n : {5, 12, 7, 3}) probs += c.num_attention_heads * n * n;
  EXPECT_LE(floats[1] + static_cast<size_t>(N * c.intermediate_size + probs), floats[0])
      << "int8 " << floats[1] << " floats, fp32 " << floats[0];
}

// small_config with encoder matrices of whole pages (keep_*_weights_only give their pages back)
static BertConfig whole_page_config() {
  BertConfig c = small_config();
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.intermediate_size = 256;
  return c;
}

TEST(Model, PackedWeightsGiveTheSameOutputs) {
  // keep_packed_weights_only (fp32 and bf16 inference commands on the CPU): the encoder's linear
  // layers packed for the kernel that runs them (oneDNN's blocked layout, or the row kernel's panels
  // for fp32 as on an AVX2 CPU; both forced here on every CPU), their fp32 pages (and bf16 copies)
  // given back; the outputs keep every bit, a sequence's do not depend on its batch, and other
  // precisions are refused. bf16 packs where oneDNN's bf16 matmul is native (else nothing changes).
  const BertConfig c = whole_page_config();
  const BertBatch b = batch_of_lengths(c, {5, 12, 7}, 12, 9);
  BertBatch one;  // row 1 (12 tokens) on its own
  one.B = 1;
  one.T = 12;
  one.input_ids.assign(b.input_ids.begin() + 12, b.input_ids.begin() + 24);
  one.segment_ids.assign(b.segment_ids.begin() + 12, b.segment_ids.begin() + 24);
  one.input_mask.assign(12, 1);
  const size_t C = static_cast<size_t>(c.hidden_size);
  for (const Precision prec : {Precision::F32, Precision::BF16})
    for (const auto rows : {kernels::RowGemm::Auto, kernels::RowGemm::Always}) {
      kernels::set_row_gemm(rows);
      SCOPED_TRACE(std::string(precision_name(prec)) + (kernels::row_gemm_active() ? ", row kernel" : ", oneDNN"));
      Bert m(c, Heads::None);
      m.init_weights(5);
      Rng r{1, 0};
      m.encode(b, false, prec, r, false);
      const std::vector<float> before(m.sequence_output(), m.sequence_output() + 12 * 3 * C);
      const std::vector<float> pooled(m.pooled_output(), m.pooled_output() + 3 * C);  // (the pooler: not packed)
      m.keep_packed_weights_only(prec);
      m.encode(b, false, prec, r, false);
      EXPECT_EQ(before, std::vector<float>(m.sequence_output(), m.sequence_output() + 12 * 3 * C));
      m.encode(one, false, prec, r, false);  // row 1 alone (rows 12..23 above)
      EXPECT_EQ(std::vector<float>(before.begin() + 12 * C, before.begin() + 24 * C),
                std::vector<float>(m.sequence_output(), m.sequence_output() + 12 * C));
      // packed before any forward pass, as the inference commands do (bf16: the copy then made
      // layer by layer as it is packed, the rest after): the same bits
      Bert fresh(c, Heads::None);
      fresh.init_weights(5);
      fresh.keep_packed_weights_only(prec);
      fresh.encode(b, false, prec, r, false);
      EXPECT_EQ(before, std::vector<float>(fresh.sequence_output(), fresh.sequence_output() + 12 * 3 * C));
      EXPECT_EQ(pooled, std::vector<float>(fresh.pooled_output(), fresh.pooled_output() + 3 * C));
      // packed: fp32 on every x86 CPU, bf16 where it is native
      const bool packed =
          prec == Precision::F32 ? kernels::row_gemm_active() || onednn_f32_rows_invariant() : onednn_bf16_matmul();
      if (packed) {
        for (const Precision other : {Precision::F32, Precision::BF16, Precision::I8})
          if (other != prec) {
            EXPECT_THROW(m.encode(b, false, other, r, false), Error) << precision_name(other);
          }
      }
    }
  kernels::set_row_gemm(kernels::RowGemm::Auto);
}

TEST(Model, Int8WeightsOnlyGiveTheSameOutputs) {
  // keep_int8_weights_only (int8 inference commands): the fp32 pages of the quantized matrices go
  // back to the system; the int8 results do not change, and other precisions are refused
  const BertConfig c = whole_page_config();
  const BertBatch b = batch_of_lengths(c, {5, 12, 7}, 12, 9);
  Bert m(c, Heads::None);
  m.init_weights(5);
  Rng r{1, 0};
  m.encode(b, false, Precision::I8, r, false);
  const std::vector<float> before(m.sequence_output(), m.sequence_output() + 12 * 3 * c.hidden_size);
  m.keep_int8_weights_only();
  m.encode(b, false, Precision::I8, r, false);
  EXPECT_EQ(before, std::vector<float>(m.sequence_output(), m.sequence_output() + 12 * 3 * c.hidden_size));
  EXPECT_THROW(m.encode(b, false, Precision::F32, r, false), Error);
  EXPECT_THROW(m.encode(b, false, Precision::BF16, r, false), Error);
}

namespace {
// Pages that hold some of [p, p + n floats) resident now.
size_t resident_pages(const float* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) / page * page, e = reinterpret_cast<uintptr_t>(p + n);
  std::vector<unsigned char> in((e - b + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(b), e - b, in.data()) != 0) return static_cast<size_t>(-1);
  size_t r = 0;
  for (unsigned char v : in) r += v & 1;
  return r;
}
}  // namespace

TEST(Model, InferenceLoadMakesEachLinearLayerOnceWrittenAndGivesItsPagesBack) {
  // load_model_dir_for_inference (the inference commands and serve on the CPU): each encoder linear
  // layer is quantized (int8) or packed (fp32) as soon as a loader has written its whole weight (Q,
  // K and V: one block of three tensors, whatever order they come in) and its fp32 pages go back
  // then, so the load never holds the fp32 linear layers beside their copies (a bert-base int8
  // load's peak: 254 MB, not 554). The weights start as zeros no page holds (ZeroPagesAllocator),
  // and the results keep every bit of a load that keeps int8 or packed weights after.
  const BertConfig c = whole_page_config();
  const BertBatch b = batch_of_lengths(c, {5, 12, 7}, 12, 9);
  const size_t C = static_cast<size_t>(c.hidden_size);
  Bert src(c, Heads::None);
  src.init_weights(5);
  const ParamTable& t = src.table();
  const float* from = std::as_const(src).params().data();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), total = t.total();
  const size_t all_pages = (total * sizeof(float) + page - 1) / page;
  // the largest linear layer's pages (Q, K and V: one), and the pages that hold a tensor other
  // than an encoder linear layer's weight
  const size_t I = static_cast<size_t>(c.intermediate_size);
  const size_t largest = std::max(3 * C * C, C * I) * sizeof(float) / page + 2;
  std::set<size_t> kept;
  for (const ParamEntry& e : t.entries())
    if (e.name.rfind("bert.encoder.layer.", 0) != 0 || e.shape.size() != 2)
      for (size_t pg = e.offset * sizeof(float) / page; pg <= ((e.offset + e.numel) * sizeof(float) - 1) / page; ++pg)
        kept.insert(pg);
  ASSERT_LT(kept.size() + largest, all_pages / 2) << "a model whose linear layers are most of its pages";
  for (const Precision prec : {Precision::I8, Precision::F32})
    for (const bool reverse : {false, true}) {
      SCOPED_TRACE(std::string(precision_name(prec)) + (reverse ? ", last tensor first" : ", in the table's order"));
      if (prec == Precision::F32) kernels::set_row_gemm(kernels::RowGemm::Always);  // packs on every CPU
      Bert ref(c, Heads::None);
      ref.init_weights(5);
      prec == Precision::I8 ? ref.keep_int8_weights_only() : ref.keep_packed_weights_only(prec);
      Rng r{1, 0};
      ref.encode(b, false, prec, r, false);
      const std::vector<float> want(ref.sequence_output(), ref.sequence_output() + 12 * 3 * C);

      Bert m(c, Heads::None);
      EXPECT_EQ(resident_pages(std::as_const(m).params().data(), total), 0u) << "zeros that no page holds";
      // 4 KB pages counted one by one: where transparent huge pages are "always", a first write
      // could fault a whole 2 MB page (the buffer merged with a neighbouring mapping)
      madvise(const_cast<float*>(std::as_const(m).params().data()), total * sizeof(float), MADV_NOHUGEPAGE);
      m.prepare_inference_load(prec);
      std::vector<const ParamEntry*> order;
      for (const ParamEntry& e : t.entries()) order.push_back(&e);
      if (reverse) std::reverse(order.begin(), order.end());
      size_t peak = 0;
      for (const ParamEntry* e : order) {
        std::copy(from + e->offset, from + e->offset + e->numel, m.params().data() + e->offset);
        m.tensor_written(t.find_ref(e->name));
        peak = std::max(peak, resident_pages(std::as_const(m).params().data(), total));
      }
      EXPECT_LE(peak, kept.size() + largest) << "of " << all_pages << " pages";
      prec == Precision::I8 ? m.keep_int8_weights_only() : m.keep_packed_weights_only(prec);
      m.encode(b, false, prec, r, false);
      EXPECT_EQ(want, std::vector<float>(m.sequence_output(), m.sequence_output() + 12 * 3 * C));
      EXPECT_THROW(m.encode(b, false, Precision::BF16, r, false), Error);
      kernels::set_row_gemm(kernels::RowGemm::Auto);
    }
}

TEST(Model, Int8WordEmbeddingsGiveTheirFp32PagesBack) {
  // --precision int8 reads the word embeddings' int8 rows (kernels::embeddings_forward_int8; the
  // tied masked-LM decoder too), and a model for int8 inference alone (keep_int8_weights_only)
  // gives their fp32 pages back, as the linear layers'. The results do not change, the encoder's
  // nor the decoder's logits. --int8-fp32-embeddings reads and keeps the fp32 table instead.
  BertConfig c = whole_page_config();
  c.vocab_size = 512;  // a table of 32 pages
  const BertBatch b = batch_of_lengths(c, {5, 12, 7}, 12, 9);
  const size_t C = static_cast<size_t>(c.hidden_size), page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (const Heads h : {Heads::None, Heads::PreTraining}) {
    SCOPED_TRACE(h == Heads::None ? "no head" : "the masked-LM head");
    const auto run = [&](Bert& m) {
      Rng r{1, 0};
      if (h == Heads::None) {
        m.encode(b, false, Precision::I8, r, false);
        return std::vector<float>(m.sequence_output(), m.sequence_output() + 12 * 3 * C);
      }
      BertBatch lm = b;  // three masked positions to decode, as fill-mask asks
      lm.mlm_labels.assign(lm.input_ids.size(), -1);
      lm.nsp_labels.assign(static_cast<size_t>(lm.B), 0);
      for (const size_t at : {1u, 14u, 26u}) lm.mlm_labels[at] = 0;
      std::vector<float> logits;
      m.pretrain_step(lm, r, StepArgs{.precision = Precision::I8, .mlm_logits = &logits});
      EXPECT_EQ(logits.size(), 3u * static_cast<size_t>(c.vocab_size));
      return logits;
    };
    std::vector<float> int8_words;
    for (const bool fp32_words : {false, true}) {
      SCOPED_TRACE(fp32_words ? "--int8-fp32-embeddings" : "int8 word embeddings");
      set_int8_fp32_embeddings(fp32_words);
      Bert m(c, h);
      m.init_weights(5);
      const ParamEntry& e = m.table().at("bert.embeddings.word_embeddings.weight");
      const float* words = std::as_const(m).params().data() + e.offset;
      const std::vector<float> before = run(m);
      m.keep_int8_weights_only();
      if (fp32_words)
        EXPECT_GE(resident_pages(words, e.numel), e.numel * sizeof(float) / page);
      else
        EXPECT_LE(resident_pages(words, e.numel), 2u) << "the table's pages but the two at its ends";
      EXPECT_EQ(before, run(m));
      if (fp32_words)
        EXPECT_NE(before, int8_words);  // the rows' rounding
      else
        int8_words = before;
    }
    set_int8_fp32_embeddings(false);
  }
}
