// BertForTokenClassification (and ElectraForTokenClassification): classifier on every
// dropped-out token; mean cross-entropy over the labels != -100. No pooler, as HF.
#include "bertcc/error.h"
#include "bertcc/onnx_graph.h"
#include "bertcc/params.h"
#include "model/heads/linear_head.h"
#include "model/heads/specs.h"

namespace bertcc {

namespace {

class TokenClassificationHead : public LinearHead {
 public:
  explicit TokenClassificationHead(Bert& m) : LinearHead(m, /*per_token=*/true, "classifier", /*dropout=*/true) {}

 protected:
  int64_t width() const override { return cfg_.num_labels(); }
  int64_t check_labels(const BertBatch& b) const override {
    return count_labels(b, b.B * b.T, width(), /*ignore=*/true, "B*T");
  }
  void loss(const BertBatch& b, bool backward, float loss_scale, int64_t count, FinetuneLoss& out,
            std::vector<float>& dlogits) override {
    xent_loss(b, backward, loss_scale, count, out, dlogits);
  }
};

void declare(ParamTable& t, const BertConfig& c) {
  const int64_t K = c.num_labels();
  BERTCC_CHECK(K > 0, "config: a classification model needs num_labels/id2label");
  t.add("classifier.weight", {K, c.hidden_size}, true);
  t.add("classifier.bias", {K}, false);
}

std::vector<HeadOutput> outputs(const BertConfig& c) {
  return {{"logits", {HeadOutput::kBatch, HeadOutput::kSequence, static_cast<int64_t>(c.num_labels())}, false}};
}

// ONNX: the classifier on every token, logits [B, S, num_labels].
void write_onnx(OnnxGraph& g, const std::string& h, const std::string&) {
  g.rename(g.linear(h, "classifier"), "logits");
  g.output("logits", {"batch", "sequence", std::to_string(g.config().num_labels())});
}

}  // namespace

const HeadSpec& token_classification_head() {
  static const HeadSpec s{
      .id = Heads::TokenClassification,
      .name = "token",
      .architecture = "BertForTokenClassification",
      .electra_architecture = "ElectraForTokenClassification",
      .pooler = false,
      .labels = HeadLabels::Token,
      .needs_labels = true,
      .task = "tag",
      .serve_tasks = {"tag"},
      .serve_as = Heads::TokenClassification,
      .by_architecture = true,
      .beam_search = false,
      .prefixes = {"classifier."},
      // (BERT's sequence classification, before it in the registry, has the pooler as well)
      .signature = {{"classifier.weight"}},
      .what = "a token-classification model (BertForTokenClassification)",
      .make_command = "`bertcc finetune ner --model PRETRAINED --train-file train.txt --output-dir DIR`",
      .kind = "",
      .declare = declare,
      .outputs = outputs,
      .onnx = write_onnx,
      .make = [](Bert& m) -> std::unique_ptr<Head> { return std::make_unique<TokenClassificationHead>(m); },
  };
  return s;
}

}  // namespace bertcc
