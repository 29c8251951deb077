// BertForPreTraining: the masked LM (cls.predictions, decoder tied to the word embeddings) and
// next-sentence prediction (cls.seq_relationship on the pooled output). Step: masked_lm.cpp.
#include "bertcc/error.h"
#include "bertcc/params.h"
#include "model/heads/masked_lm.h"
#include "model/heads/specs.h"

namespace bertcc {

namespace {
void declare(ParamTable& t, const BertConfig& c) {
  const int64_t V = c.vocab_size, C = c.hidden_size;
  BERTCC_CHECK(!c.electra(),
               "config: ELECTRA has no BertForPreTraining heads "
               "(its pre-training uses ElectraForPreTraining and ElectraForMaskedLM)");
  BERTCC_CHECK(c.embedding_dim() == C, "config: BERT pre-training heads need embedding_size == hidden_size");
  t.add("cls.predictions.transform.dense.weight", {C, C}, true);
  t.add("cls.predictions.transform.dense.bias", {C}, false);
  t.add("cls.predictions.transform.LayerNorm.weight", {C}, false);
  t.add("cls.predictions.transform.LayerNorm.bias", {C}, false);
  t.add("cls.predictions.bias", {V}, false);
  t.add("cls.seq_relationship.weight", {2, C}, true);
  t.add("cls.seq_relationship.bias", {2}, false);
}
}  // namespace

const HeadSpec& pretraining_head() {
  static const HeadSpec s{
      .id = Heads::PreTraining,
      .name = "pretraining",
      .architecture = "BertForPreTraining",
      .electra_architecture = "ElectraForPreTraining",
      .pooler = true,
      .labels = HeadLabels::MaskedLm,
      .needs_labels = false,
      .task = nullptr,
      .serve_tasks = {"fill-mask", "embed"},
      .serve_as = Heads::PreTraining,
      .by_architecture = false,
      .beam_search = false,
      .prefixes = {"cls."},
      .signature = {{"cls.predictions.bias"}, {"cls.predictions.decoder.bias"}},
      .what = "a pre-training checkpoint with its masked-LM head (BertForPreTraining or BertForMaskedLM)",
      .make_command =
          "`bertcc pretrain --config bert-mini --vocab vocab.txt --input-dir SHARDS --output-dir RUN` (RUN/model)",
      .kind = "",
      .declare = declare,
      .outputs = [](const BertConfig&) { return std::vector<HeadOutput>{}; },
      .onnx = nullptr,
      .make = [](Bert& m) -> std::unique_ptr<Head> { return std::make_unique<MaskedLmHead>(m, true); },
  };
  return s;
}

}  // namespace bertcc
