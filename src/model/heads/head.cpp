// The Head base (src/model/head.h) and the registry of heads: one HeadSpec per head, each defined
// in its own file here. Adding a head: its file (spec, step, ONNX part), its line in specs.h and in
// kSpecs below, its value in include/bertcc/heads.h, and its tests.
#include "model/head.h"

#include <algorithm>

#include "bertcc/error.h"
#include "model/acts.h"
#include "model/heads/specs.h"
#include "model/parts.h"

namespace bertcc {

Head::Head(Bert& m)
    : weights_(ModelParts::weights(m)),
      encoder_(ModelParts::encoder(m)),
      cfg_(ModelParts::config(m)),
      head_logits_(ModelParts::head_logits(m)) {}

PretrainLoss Head::pretrain_step(const BertBatch&, Rng&, const StepArgs&) {
  fail("pretrain_step: model has no pre-training heads");
}

FinetuneLoss Head::finetune_step(const BertBatch&, Rng&, const StepArgs&) {
  fail("finetune_step: model has no fine-tuning head");
}

LinearRef Head::lin(const std::string& n, bool bias) const {
  const ParamTable& t = weights_.table();
  return LinearRef{t.ref(n + ".weight"), bias ? t.ref(n + ".bias") : ParamRef{}};
}

NormRef Head::norm(const std::string& n) const {
  const ParamTable& t = weights_.table();
  return NormRef{t.ref(n + ".weight"), t.ref(n + ".bias")};
}

std::pair<int64_t, int64_t> Head::seq(int64_t b) const {
  const Acts& a = encoder_.acts();
  return a.packed ? a.seq(b) : std::pair<int64_t, int64_t>{b * a.T, a.T};
}

std::vector<int64_t>& Head::cls_rows() { return acts().cls_rows; }  // (set with the batch: prepare_batch)

void Head::unpack_rows(const float* src, int64_t K, const float* pad, std::vector<float>& out) {
  const Acts& a = acts();
  out.resize(static_cast<size_t>(a.B * a.T * K));
  for (int64_t b = 0; b < a.B; ++b) {
    const auto [r0, n] = seq(b);
    float* o = out.data() + b * a.T * K;
    std::copy_n(src + r0 * K, n * K, o);
    for (int64_t t = n; t < a.T; ++t)
      for (int64_t k = 0; k < K; ++k) o[t * K + k] = pad ? pad[k] : 0.0f;
  }
}

void Head::pack_rows(const std::vector<float>& padded, int64_t K, std::vector<float>& out) {
  const Acts& a = acts();
  out.resize(static_cast<size_t>(rows() * K));
  for (int64_t b = 0; b < a.B; ++b) {
    const auto [r0, n] = seq(b);
    std::copy_n(padded.data() + b * a.T * K, n * K, out.data() + r0 * K);
  }
}

namespace {
// Every head, in the order of `Heads` (checked).
const HeadSpec* const kSpecs[] = {&none_head(),
                                  &pretraining_head(),
                                  &question_answering_head(),
                                  &joint_question_answering_head(),
                                  &sequence_classification_head(),
                                  &token_classification_head(),
                                  &discriminator_head(),
                                  &generator_head()};
}  // namespace

const std::vector<const HeadSpec*>& head_registry() {
  static const std::vector<const HeadSpec*> all = [] {
    std::vector<const HeadSpec*> v(std::begin(kSpecs), std::end(kSpecs));
    for (size_t i = 0; i < v.size(); ++i)
      BERTCC_CHECK(static_cast<size_t>(v[i]->id) == i, "head registry: ", v[i]->name, " is out of order");
    return v;
  }();
  return all;
}

const HeadSpec& head_spec(Heads h) {
  const auto& all = head_registry();
  const size_t i = static_cast<size_t>(h);
  BERTCC_CHECK(i < all.size(), "head_spec: no head ", i);
  return *all[i];
}

const HeadSpec* head_by_name(const std::string& name) {
  for (const HeadSpec* s : head_registry())
    if (name == s->name) return s;
  return nullptr;
}

const HeadSpec* head_by_architecture(const std::string& architecture) {
  for (const HeadSpec* s : head_registry())
    if (architecture == s->architecture) return s;
  for (const HeadSpec* s : head_registry())
    if (architecture == s->electra_architecture) return s;
  return nullptr;
}

const HeadSpec* head_by_tensors(const std::set<std::string>& names) {
  for (const HeadSpec* s : head_registry())
    for (const auto& set : s->signature)
      if (std::all_of(set.begin(), set.end(), [&](const std::string& n) { return names.count(n) != 0; })) return s;
  return nullptr;
}

}  // namespace bertcc
