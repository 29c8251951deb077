// BertForSequenceClassification: classifier on the dropped-out pooled output; cross-entropy, or
// mean squared error (regression) when num_labels == 1. ELECTRA's form (HF's
// ElectraClassificationHead, no pooler): h[:, 0] -> dropout -> dense -> gelu -> dropout -> out_proj.
#include "bertcc/error.h"
#include "bertcc/onnx_graph.h"
#include "bertcc/params.h"
#include "model/heads/linear_head.h"
#include "model/heads/specs.h"

namespace bertcc {

namespace {

class SequenceClassificationHead : public LinearHead {
 public:
  explicit SequenceClassificationHead(Bert& m)
      : LinearHead(m, /*per_token=*/false, m.config().electra() ? "classifier.out_proj" : "classifier",
                   /*dropout=*/true),
        electra_(m.config().electra()) {
    if (electra_) dense_ = lin("classifier.dense");
  }

 protected:
  int64_t width() const override { return cfg_.num_labels(); }
  bool reads_cls_rows_only() const override { return true; }  // the pooled output (ELECTRA: the [CLS] rows)
  int64_t check_labels(const BertBatch& b) const override {
    if (width() == 1) {
      BERTCC_CHECK(b.targets.size() == size_t(b.B), "finetune_step: regression needs targets [", b.B, "]");
      return b.B;
    }
    return count_labels(b, b.B, width(), /*ignore=*/false, "B");
  }
  void loss(const BertBatch& b, bool backward, float loss_scale, int64_t count, FinetuneLoss& out,
            std::vector<float>& dlogits) override {
    if (width() != 1) return xent_loss(b, backward, loss_scale, count, out, dlogits);
    const int64_t B = b.B;  // regression: MSE
    dlogits.resize(B);
    double s = 0;
    for (int64_t r = 0; r < B; ++r) {
      const double d = static_cast<double>(head_logits_[r]) - b.targets[r];
      s += d * d;
      dlogits[r] = static_cast<float>(2.0 * d / static_cast<double>(B)) * loss_scale;
    }
    out.loss = s / static_cast<double>(B);
  }
  const float* input(int64_t B, int64_t T, float p, Rng& rng, Precision prec) override;
  void input_backward(const float* dsrc, int64_t B, int64_t T, float p, Rng& rng, Precision prec) override;

 private:
  bool electra_;
  LinearRef dense_;  // ELECTRA's classifier.dense
  uint64_t drop_cls_ = 0;
  // ELECTRA's head: [CLS] rows, dropout, dense, gelu and their gradients
  std::vector<float> cls_, a1_, d1_, g1_, dd1_, da1_, dcls_;
  float *a1p_ = nullptr, *d1p_ = nullptr;
};

const float* SequenceClassificationHead::input(int64_t B, int64_t T, float p, Rng& rng, Precision prec) {
  if (!electra_) return LinearHead::input(B, T, p, rng, prec);
  const int64_t C = cfg_.hidden_size;
  Backend& be = backend();
  float* cls = scratch(cls_, B * C, false);
  if (last_packed())  // the [CLS] rows, as the pooler's
    be.gather_rows(cls, sequence_rows(), rows_on_backend(cls_rows()), B, C);
  else
    be.copy_rows(cls, C, sequence_rows(), T * C, B, C);
  a1p_ = scratch(a1_, B * C, false);
  be.copy(a1p_, cls, sizeof(float) * static_cast<size_t>(B * C));
  drop_cls_ = 0;
  if (p > 0) {
    drop_cls_ = rng.reserve(B * C);
    be.dropout_forward(a1p_, cls, B * C, p, rng, drop_cls_);
  }
  d1p_ = scratch(d1_, B * C, false);
  float* g1 = scratch(g1_, B * C, false);
  be.linear_forward(d1p_, a1p_, w(dense_.w), w(dense_.b), B, C, C, prec, w16(dense_.w, prec));
  be.gelu_forward(g1, d1p_, B * C, Activation::GeluErf);
  return g1;
}

void SequenceClassificationHead::input_backward(const float* dsrc, int64_t B, int64_t T, float p, Rng& rng,
                                                Precision prec) {
  if (!electra_) return LinearHead::input_backward(dsrc, B, T, p, rng, prec);
  // dsrc = d(gelu out) -> gelu -> dense -> dropout -> the [CLS] rows of the sequence gradient
  const int64_t C = cfg_.hidden_size, N = rows();
  Backend& be = backend();
  float* dd1 = scratch(dd1_, B * C, true);
  float* da1 = scratch(da1_, B * C, true);
  be.gelu_backward(dd1, d1p_, dsrc, B * C, Activation::GeluErf);
  be.linear_backward(da1, dgrad(dense_.w), dgrad(dense_.b), dd1, a1p_, w(dense_.w), B, C, C, prec, w16(dense_.w, prec));
  const float* dcls = da1;
  if (p > 0) {
    float* dc = scratch(dcls_, B * C, true);
    be.dropout_backward(dc, da1, B * C, p, rng, drop_cls_);
    dcls = dc;
  }
  float* dseq = scratch(dseq_, N * C, true);
  if (last_packed())
    be.scatter_add_rows(dseq, dcls, rows_on_backend(cls_rows()), B, C);
  else
    be.copy_rows(dseq, T * C, dcls, C, B, C);
  encode_backward(dseq, nullptr, prec);
}

void declare(ParamTable& t, const BertConfig& c) {
  const int64_t K = c.num_labels(), C = c.hidden_size;
  BERTCC_CHECK(K > 0, "config: a classification model needs num_labels/id2label");
  if (c.electra()) {  // HF ElectraClassificationHead
    t.add("classifier.dense.weight", {C, C}, true);
    t.add("classifier.dense.bias", {C}, false);
    t.add("classifier.out_proj.weight", {K, C}, true);
    t.add("classifier.out_proj.bias", {K}, false);
  } else {
    t.add("classifier.weight", {K, C}, true);
    t.add("classifier.bias", {K}, false);
  }
}

std::vector<HeadOutput> outputs(const BertConfig& c) {
  return {{"logits", {HeadOutput::kBatch, static_cast<int64_t>(c.num_labels())}, false}};
}

// ONNX: logits [B, num_labels] from BERT's pooled output, or ELECTRA's ElectraClassificationHead
// on [CLS] (no pooler).
void write_onnx(OnnxGraph& g, const std::string& h, const std::string&) {
  const BertConfig& c = g.config();
  if (c.electra()) {
    const std::string d =
        g.gelu(g.linear(g.first_token(h), "classifier.dense"), Activation::GeluErf);  // HF: gelu always
    g.rename(g.linear(d, "classifier.out_proj"), "logits");
  } else {
    g.rename(g.linear(g.pooled_output(h), "classifier"), "logits");
  }
  g.output("logits", {"batch", std::to_string(c.num_labels())});
}

}  // namespace

const HeadSpec& sequence_classification_head() {
  static const HeadSpec s{
      .id = Heads::SequenceClassification,
      .name = "classify",
      .architecture = "BertForSequenceClassification",
      .electra_architecture = "ElectraForSequenceClassification",
      .pooler = true,
      .labels = HeadLabels::Sequence,
      .needs_labels = true,
      .task = "classify",
      .serve_tasks = {"classify"},
      .serve_as = Heads::SequenceClassification,
      .by_architecture = true,
      .beam_search = false,
      .prefixes = {"classifier."},
      .signature = {{"classifier.weight", "bert.pooler.dense.weight"}},
      .what = "a sequence-classification model (BertForSequenceClassification)",
      .make_command =
          "`bertcc finetune classify --model PRETRAINED --train-file train.csv --output-dir DIR` (GLUE: "
          "`bertcc finetune glue`)",
      .kind = "",
      .declare = declare,
      .outputs = outputs,
      .onnx = write_onnx,
      .make = [](Bert& m) -> std::unique_ptr<Head> { return std::make_unique<SequenceClassificationHead>(m); },
  };
  return s;
}

}  // namespace bertcc
