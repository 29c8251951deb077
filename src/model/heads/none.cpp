// BertModel / ElectraModel: the encoder alone (BERT's with its pooler); no step of its own.
#include "bertcc/params.h"
#include "model/head.h"
#include "model/heads/specs.h"

namespace bertcc {

namespace {
std::vector<HeadOutput> outputs(const BertConfig& c) {
  std::vector<HeadOutput> o{{"last_hidden_state", {HeadOutput::kBatch, HeadOutput::kSequence, c.hidden_size}, false}};
  if (!c.electra()) o.push_back({"pooler_output", {HeadOutput::kBatch, c.hidden_size}, false});
  return o;
}
}  // namespace

const HeadSpec& none_head() {
  static const HeadSpec s{
      .id = Heads::None,
      .name = "none",
      .architecture = "BertModel",
      .electra_architecture = "ElectraModel",
      .pooler = true,
      .labels = HeadLabels::None,
      .needs_labels = false,
      .task = nullptr,
      .serve_tasks = {"embed"},
      .serve_as = Heads::None,
      .by_architecture = false,
      .beam_search = false,
      .onnx = true,
      .what = "a model directory",
      .make_command = "`bertcc init-model` or `bertcc pretrain`",
      .kind = ", an encoder without a task head",
      .declare = [](ParamTable&, const BertConfig&) {},
      .outputs = outputs,
      .make = [](Bert& m) { return std::make_unique<Head>(m); },
  };
  return s;
}

}  // namespace bertcc
