// BertModel / ElectraModel: the encoder alone (BERT's with its pooler); no step of its own.
#include "bertcc/onnx_graph.h"
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
// ONNX: the encoder's outputs, last_hidden_state [B, S, C] (and BERT's pooler_output [B, C]).
void write_onnx(OnnxGraph& g, const std::string& h, const std::string&) {
  const BertConfig& c = g.config();
  const std::string width = std::to_string(c.hidden_size);
  if (c.electra()) {
    g.rename(h, "last_hidden_state");
    g.output("last_hidden_state", {"batch", "sequence", width});
    return;
  }
  const std::string pooled = g.pooled_output(h);
  g.rename(h, "last_hidden_state");
  g.rename(pooled, "pooler_output");
  g.output("last_hidden_state", {"batch", "sequence", width});
  g.output("pooler_output", {"batch", width});
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
      .prefixes = {},
      .signature = {},  // (what no other head's signature matches)
      .what = "a model directory",
      .make_command = "`bertcc init-model` or `bertcc pretrain`",
      .kind = ", an encoder without a task head",
      .declare = [](ParamTable&, const BertConfig&) {},
      .outputs = outputs,
      .onnx = write_onnx,
      .make = [](Bert& m) { return std::make_unique<Head>(m); },
  };
  return s;
}

}  // namespace bertcc
