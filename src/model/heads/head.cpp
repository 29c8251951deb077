// The Head base (src/model/head.h) and the registry of heads: one HeadSpec per head, each defined
// in its own file here. Adding a head: its file (spec + step), a line in kSpecs below, its value
// in include/bertcc/heads.h, and its tests.
#include <algorithm>

#include "bertcc/error.h"
#include "model/acts.h"
#include "model/head.h"
#include "model/heads/specs.h"

namespace bertcc {

PretrainLoss Head::pretrain_step(const BertBatch&, bool, bool, Precision, Rng&, float, float, float,
                                 std::vector<float>*, Bert::GumbelSample*) {
  fail("pretrain_step: model has no pre-training heads");
}

FinetuneLoss Head::finetune_step(const BertBatch&, bool, bool, Precision, Rng&, float, float) {
  fail("finetune_step: model has no fine-tuning head");
}

Head::LinearRef Head::lin(const std::string& n, bool bias) const {
  const ParamTable& t = m_.table_;
  return LinearRef{t.ref(n + ".weight"), bias ? t.ref(n + ".bias") : ParamRef{}};
}

Head::NormRef Head::norm(const std::string& n) const {
  const ParamTable& t = m_.table_;
  return NormRef{t.ref(n + ".weight"), t.ref(n + ".bias")};
}

Bert::Acts& Head::acts() {
  BERTCC_CHECK(m_.acts_, "head: no forward pass yet");
  return *m_.acts_;
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

}  // namespace bertcc
