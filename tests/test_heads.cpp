// The head registry (include/bertcc/head_spec.h, src/model/heads/): every head has one spec, found
// by its value, its serialized name and its Hugging Face architecture; a model's table holds the
// encoder's tensors and exactly those its head declares; every head with an inference step runs.
#include <gtest/gtest.h>

#include <set>

#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "bertcc/head_spec.h"
#include "bertcc/params.h"

using namespace bertcc;

namespace {

BertConfig config_for(const HeadSpec& s) {
  BertConfig c;
  c.vocab_size = 37;
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 24;
  c.max_position_embeddings = 16;
  if (s.id == Heads::Discriminator || s.id == Heads::Generator) c.model_type = "electra";
  if (s.needs_labels) c.id2label = {"a", "b", "c"};
  return c;
}

}  // namespace

TEST(Heads, RegistryHasEveryHeadInOrderAndFindsItByNameAndArchitecture) {
  const auto& all = head_registry();
  ASSERT_EQ(all.size(), 8u);
  std::set<std::string> names;
  for (size_t i = 0; i < all.size(); ++i) {
    const HeadSpec& s = *all[i];
    EXPECT_EQ(static_cast<size_t>(s.id), i);
    EXPECT_EQ(&head_spec(s.id), &s);
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_EQ(head_by_name(s.name), &s);
    EXPECT_EQ(architecture_name(s.id), std::string(s.architecture));
    EXPECT_EQ(architecture_name(s.id, true), std::string(s.electra_architecture));
    EXPECT_EQ(head_spec(s.serve_as).task == nullptr, s.task == nullptr) << s.name;
  }
  EXPECT_EQ(head_by_name("nope"), nullptr);
  EXPECT_EQ(head_by_architecture("BertForMaskedLM"), nullptr);
  // ELECTRA's pre-training checkpoint is its discriminator (BertForPreTraining's ELECTRA name too)
  EXPECT_EQ(head_by_architecture("ElectraForPreTraining")->id, Heads::Discriminator);
  EXPECT_EQ(head_by_architecture("ElectraForQuestionAnswering")->id, Heads::QuestionAnswering);
  EXPECT_EQ(head_by_architecture("BertForQuestionAnsweringJoint")->id, Heads::JointQuestionAnswering);
  EXPECT_EQ(head_by_architecture("ElectraModel")->id, Heads::None);
  // the names config.json and dump-step --head carry
  EXPECT_STREQ(head_spec(Heads::PreTraining).architecture, "BertForPreTraining");
  EXPECT_STREQ(head_spec(Heads::SequenceClassification).electra_architecture, "ElectraForSequenceClassification");
  EXPECT_STREQ(head_spec(Heads::TokenClassification).name, "token");
  EXPECT_STREQ(head_spec(Heads::JointQuestionAnswering).name, "qa-joint");
}

TEST(Heads, ModelTableIsTheEncoderPlusWhatTheHeadDeclares) {
  for (const HeadSpec* s : head_registry()) {
    const BertConfig c = config_for(*s);
    const Bert encoder(c, Heads::None);
    const Bert model(c, s->id);
    ParamTable own;
    s->declare(own, c);
    std::set<std::string> want;
    for (const auto& e : encoder.table().entries())
      if (e.name.rfind("bert.pooler.", 0) != 0 || (s->pooler && !c.electra())) want.insert(e.name);
    for (const auto& e : own.entries()) want.insert(e.name);
    std::set<std::string> have;
    for (const auto& e : model.table().entries()) have.insert(e.name);
    EXPECT_EQ(have, want) << s->name;
    EXPECT_EQ(has_pooler(s->id), s->pooler);
    // ONNX export and serving name outputs for every head that exports
    EXPECT_EQ(s->outputs(c).empty(), !s->onnx) << s->name;
  }
}

TEST(Heads, WrongStepsAreRefused) {
  const HeadSpec& none = head_spec(Heads::None);
  Bert m(config_for(none), Heads::None);
  BertBatch b;
  b.B = 1;
  b.T = 2;
  b.input_ids = {2, 3};
  b.segment_ids = {0, 0};
  b.input_mask = {1, 1};
  Rng rng{0, 0};
  EXPECT_THROW(m.finetune_step(b, false, false, Precision::F32, rng), Error);
  EXPECT_THROW(m.pretrain_step(b, false, false, Precision::F32, rng), Error);
  EXPECT_THROW(m.discriminator_step(b, false, false, Precision::F32, rng), Error);
  EXPECT_THROW(m.joint_qa_step(b, false, false, Precision::F32, rng), Error);
}
