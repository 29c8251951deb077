// The head registry (include/bertcc/head_spec.h, src/model/heads/): every head has one spec, found
// by its value, its serialized name and its Hugging Face architecture; a model's table holds the
// encoder's tensors and exactly those its head declares; every head with an inference step runs;
// convert finds a head by its signature tensors; an export's outputs are those its spec names.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "bertcc/features.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/model_dir.h"
#include "bertcc/onnx_export.h"
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

// The fields of a protobuf message in order: number, and the varint's value or the bytes (fixed
// 32- and 64-bit fields are skipped).
struct PbField {
  int number;
  uint64_t value;
  std::string bytes;
};

std::vector<PbField> pb_fields(const std::string& m) {
  std::vector<PbField> out;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<uint8_t>(m.at(i++));
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
  };
  while (i < m.size()) {
    const uint64_t key = varint();
    PbField f{static_cast<int>(key >> 3), 0, {}};
    if ((key & 7) == 0) {
      f.value = varint();
    } else if ((key & 7) == 2) {
      const size_t n = varint();
      f.bytes = m.substr(i, n);
      i += n;
    } else {
      i += (key & 7) == 5 ? 4 : 8;
    }
    out.push_back(std::move(f));
  }
  return out;
}

// An ONNX model's graph outputs as a head's spec names them (HeadSpec::outputs).
std::vector<HeadOutput> onnx_outputs(const std::string& model) {
  std::vector<HeadOutput> outs;
  for (const PbField& graph : pb_fields(model)) {
    if (graph.number != 7) continue;  // ModelProto.graph
    for (const PbField& vi : pb_fields(graph.bytes)) {
      if (vi.number != 12) continue;  // GraphProto.output: ValueInfoProto
      HeadOutput o;
      for (const PbField& f : pb_fields(vi.bytes)) {
        if (f.number == 1) o.name = f.bytes;
        if (f.number != 2) continue;                      // TypeProto
        for (const PbField& tensor : pb_fields(f.bytes))  // .tensor_type: elem_type, shape
          for (const PbField& t : pb_fields(tensor.bytes)) {
            if (t.number == 1) o.int64 = t.value == 7;
            if (t.number != 2) continue;
            for (const PbField& dim : pb_fields(t.bytes))
              for (const PbField& d : pb_fields(dim.bytes))  // dim_value, or dim_param batch / sequence
                o.shape.push_back(d.number == 1        ? static_cast<int64_t>(d.value)
                                  : d.bytes == "batch" ? HeadOutput::kBatch
                                                       : HeadOutput::kSequence);
          }
      }
      outs.push_back(o);
    }
  }
  return outs;
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
    for (const auto& e : own.entries()) {
      want.insert(e.name);
      // under its prefixes: a checkpoint's name stays as it is, and a model without the head leaves it out
      EXPECT_TRUE(std::any_of(s->prefixes.begin(), s->prefixes.end(),
                              [&](const std::string& p) { return e.name.rfind(p, 0) == 0; }))
          << s->name << ": " << e.name;
      EXPECT_EQ(canonical_param_name(e.name), e.name);
    }
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
  EXPECT_THROW(m.finetune_step(b, rng, StepArgs{.precision = Precision::F32}), Error);
  EXPECT_THROW(m.pretrain_step(b, rng, StepArgs{.precision = Precision::F32}), Error);
}

// The encoder computes a batch unpadded only when each row's labels that the head reads lie in the
// row's real tokens (Head::labels_within): the masked LM's labels and the joint head's true start
// name token positions; the QA head's positions do not stop packing (its loss reads the padded
// logits).
TEST(Heads, ALabelInThePaddingComputesTheBatchPadded) {
  BertBatch b;
  b.B = 2;
  b.T = 4;
  b.input_ids = {2, 3, 4, 0, 2, 5, 0, 0};
  b.segment_ids.assign(8, 0);
  b.input_mask = {1, 1, 1, 0, 1, 1, 0, 0};
  auto packed = [&](Heads h, const BertBatch& batch) {
    Bert m(config_for(head_spec(h)), h);
    m.init_weights(3);
    Rng rng{1, 0};
    if (head_spec(h).labels == HeadLabels::MaskedLm)
      m.pretrain_step(batch, rng, StepArgs{});
    else
      m.finetune_step(batch, rng, StepArgs{});
    return m.last_packed();
  };
  BertBatch mlm = b;
  mlm.mlm_labels = {-1, 7, -1, -1, -1, -1, -1, -1};
  mlm.nsp_labels = {0, 1};
  EXPECT_TRUE(packed(Heads::PreTraining, mlm));
  mlm.mlm_labels[6] = 7;  // row 1's third token: padding
  EXPECT_FALSE(packed(Heads::PreTraining, mlm));
  BertBatch span = b;
  span.start_positions = {1, 1};
  span.end_positions = {2, 1};
  EXPECT_TRUE(packed(Heads::JointQuestionAnswering, span));
  EXPECT_TRUE(packed(Heads::QuestionAnswering, span));
  span.start_positions[1] = span.end_positions[1] = 3;
  EXPECT_FALSE(packed(Heads::JointQuestionAnswering, span));
  EXPECT_TRUE(packed(Heads::QuestionAnswering, span));
}

// make_finetune_batch copies the labels its caller names (a head's HeadSpec::labels), without
// asking the model.
TEST(Heads, FinetuneBatchesCarryTheLabelsTheyAreGiven) {
  std::vector<FtFeature> f(2);
  f[0].input_ids = {2, 3, 4};
  f[1].input_ids = {2, 5};
  for (FtFeature& x : f) x.segment_ids.assign(x.input_ids.size(), 0);
  f[0].label = 1, f[0].target = 0.5f, f[0].start = 1, f[0].end = 2, f[0].token_labels = {-100, 0, 2};
  f[1].label = 2, f[1].target = 1.5f, f[1].start = 0, f[1].end = 0, f[1].token_labels = {-100, 1};
  const std::vector<size_t> idx{0, 1};
  const BertBatch tok = make_finetune_batch(f, idx, HeadLabels::Token, true, 8);
  ASSERT_EQ(tok.T, 8);
  std::vector<int32_t> want(16, -100);
  want[1] = 0, want[2] = 2, want[9] = 1;
  EXPECT_EQ(tok.labels, want);
  EXPECT_TRUE(tok.start_positions.empty());
  const BertBatch span = make_finetune_batch(f, idx, HeadLabels::Span, true, 8);
  EXPECT_EQ(span.start_positions, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(span.end_positions, (std::vector<int32_t>{2, 0}));
  EXPECT_TRUE(span.labels.empty());
  const BertBatch seq = make_finetune_batch(f, idx, HeadLabels::Sequence, true, 8);
  EXPECT_EQ(seq.labels, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(seq.targets, (std::vector<float>{0.5f, 1.5f}));
  EXPECT_TRUE(make_finetune_batch(f, idx, HeadLabels::Token, false, 8).labels.empty());
}

TEST(Heads, ConvertFindsEachHeadByItsSignature) {
  for (const HeadSpec* s : head_registry()) {
    const BertConfig c = config_for(*s);
    const Bert model(c, s->id);
    std::set<std::string> names;
    for (const auto& e : model.table().entries()) names.insert(e.name);
    // a head with a signature holds it; one without is not taken for another
    EXPECT_EQ(head_by_tensors(names), s->signature.empty() ? nullptr : s) << s->name;
  }
  EXPECT_EQ(head_by_tensors({}), nullptr);
  EXPECT_EQ(head_by_tensors({"cls.predictions.decoder.bias"})->id, Heads::PreTraining);
  EXPECT_EQ(head_by_tensors({"classifier.weight", "bert.pooler.dense.weight"})->id, Heads::SequenceClassification);
  EXPECT_EQ(head_by_tensors({"classifier.weight"})->id, Heads::TokenClassification);
}

TEST(Heads, OnnxExportWritesTheOutputsItsSpecNames) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("bertcc_heads_" + std::to_string(getpid()) + ".onnx")).string();
  for (const HeadSpec* s : head_registry()) {
    if (!s->onnx) continue;
    for (const bool electra : {false, true}) {
      BertConfig c = config_for(*s);
      if (c.electra() && !electra) continue;  // ELECTRA's own heads
      if (electra) c.model_type = "electra";
      const Bert model(c, s->id);
      export_onnx(model, path);
      const std::vector<HeadOutput> want = s->outputs(c), have = onnx_outputs(read_file(path));
      ASSERT_EQ(have.size(), want.size()) << s->name;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(have[i].name, want[i].name) << s->name;
        EXPECT_EQ(have[i].shape, want[i].shape) << s->name << " " << want[i].name;
        EXPECT_EQ(have[i].int64, want[i].int64) << s->name << " " << want[i].name;
      }
    }
  }
  std::filesystem::remove(path);
}
