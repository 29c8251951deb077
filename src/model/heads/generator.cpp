// ELECTRA's generator, HF's ElectraForMaskedLM: generator_predictions (dense to embedding_size,
// gelu, LayerNorm) and generator_lm_head (decoder tied to the word embeddings), on the masked
// positions; no NSP. Step: masked_lm.cpp.
#include "bertcc/error.h"
#include "bertcc/params.h"
#include "model/heads/masked_lm.h"
#include "model/heads/specs.h"

namespace bertcc {

namespace {
void declare(ParamTable& t, const BertConfig& c) {
  const int64_t V = c.vocab_size, C = c.hidden_size, E = c.embedding_dim();
  BERTCC_CHECK(c.electra(), "config: the ELECTRA heads need model_type 'electra'");
  t.add("generator_predictions.dense.weight", {E, C}, true);
  t.add("generator_predictions.dense.bias", {E}, false);
  t.add("generator_predictions.LayerNorm.weight", {E}, false);
  t.add("generator_predictions.LayerNorm.bias", {E}, false);
  t.add("generator_lm_head.bias", {V}, false);
}
}  // namespace

const HeadSpec& generator_head() {
  static const HeadSpec s{
      .id = Heads::Generator,
      .name = "generator",
      .architecture = "ElectraForMaskedLM",
      .electra_architecture = "ElectraForMaskedLM",
      .pooler = false,
      .labels = HeadLabels::MaskedLm,
      .needs_labels = false,
      .task = nullptr,
      .serve_tasks = {"embed"},
      .serve_as = Heads::None,
      .by_architecture = false,
      .beam_search = false,
      .prefixes = {"generator_predictions.", "generator_lm_head."},
      .signature = {},  // (none: convert keeps such a checkpoint's encoder)
      .what = "a pre-training checkpoint with its masked-LM head (BertForPreTraining or BertForMaskedLM)",
      .make_command =
          "`bertcc pretrain --config bert-mini --vocab vocab.txt --input-dir SHARDS --output-dir RUN` (RUN/model)",
      .kind = "",
      .declare = declare,
      .outputs = [](const BertConfig&) { return std::vector<HeadOutput>{}; },
      .onnx = nullptr,
      .make = [](Bert& m) -> std::unique_ptr<Head> { return std::make_unique<MaskedLmHead>(m, false); },
  };
  return s;
}

}  // namespace bertcc
