// ELECTRA's discriminator, HF's ElectraForPreTraining (ElectraDiscriminatorPredictions):
// logits = dense_prediction(act(dense(h))) per token, into head_logits() [B*T]; the loss is HF's:
// binary cross-entropy with logits, mean over the tokens with input_mask 1 (labels [B*T]:
// 1 = replaced, 0 = original, -100 = ignored). ELECTRA has no pooler.
#include <algorithm>
#include <cmath>

#include "bertcc/error.h"
#include "bertcc/onnx_graph.h"
#include "bertcc/params.h"
#include "model/head.h"
#include "model/heads/specs.h"

namespace bertcc {

namespace {

class DiscriminatorHead : public Head {
 public:
  explicit DiscriminatorHead(Bert& m)
      : Head(m),
        dense_(lin("discriminator_predictions.dense")),
        pred_(lin("discriminator_predictions.dense_prediction")) {}
  FinetuneLoss finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args) override;

 private:
  // The BCE loss over head_logits_ and its gradient (into dlogits_), normalised by denom (> 0) or
  // the batch's count of counted tokens.
  void loss(const BertBatch& batch, float loss_scale, float denom, int64_t count, FinetuneLoss& out);
  LinearRef dense_, pred_;
  std::vector<float> t1_, tg_, dtg_, dt1_, dseq_, dlogits_, logits_dev_, dlogits_rows_;
};

FinetuneLoss DiscriminatorHead::finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args) {
  const bool training = args.training, backward = args.backward;
  const Precision prec = args.precision;
  const float loss_scale = args.loss_scale;
  const float denom = args.denom;
  const int64_t B = batch.B, T = batch.T, N = B * T, C = cfg_.hidden_size;  // (N: the batch's positions)
  BERTCC_CHECK(batch.labels.size() == static_cast<size_t>(N), "discriminator: needs labels [B*T = ", N, "]");
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (!batch.input_mask[n] || batch.labels[n] == -100) continue;
    BERTCC_CHECK(batch.labels[n] == 0 || batch.labels[n] == 1, "discriminator: label ", batch.labels[n], " at ", n,
                 " is not 0 (original) or 1 (replaced)");
    ++count;
  }
  encode(batch, training, prec, rng, backward);
  Backend& be = backend();
  const Activation act = cfg_.activation();
  FinetuneLoss out;
  out.count = count;
  // dense -> activation -> dense_prediction, on the encoder's R rows (padded: every position, as HF,
  // the loss skipping the padding; unpadded: the real tokens alone, the logits laid out padded with
  // 0 at the padding)
  const int64_t R = rows();
  const bool unpack = last_packed();
  float* t1 = scratch(t1_, R * C, false);
  float* tg = scratch(tg_, R * C, false);
  const float* h = sequence_rows();
  be.linear_forward(t1, h, w(dense_.w), w(dense_.b), R, C, C, prec, w16(dense_.w, prec));
  be.gelu_forward(tg, t1, R * C, act);
  float* logits =
      be.on_host() && !unpack ? (head_logits_.resize(N), head_logits_.data()) : scratch(logits_dev_, R, false);
  be.linear_forward(logits, tg, w(pred_.w), w(pred_.b), R, 1, C, prec, w16(pred_.w, prec));
  if (unpack)
    unpack_rows(to_host(logits_dev_, logits, R).data(), 1, nullptr, head_logits_);
  else
    to_host(head_logits_, logits, N);
  loss(batch, loss_scale, denom, count, out);
  if (!backward) return out;
  if (unpack) pack_rows(dlogits_, 1, dlogits_rows_);
  const float* dl = to_backend(unpack ? dlogits_rows_ : dlogits_);
  float* dtg = scratch(dtg_, R * C, true);
  float* dt1 = scratch(dt1_, R * C, true);
  be.linear_backward(dtg, dgrad(pred_.w), dgrad(pred_.b), dl, tg, w(pred_.w), R, 1, C, prec, w16(pred_.w, prec));
  be.gelu_backward(dt1, t1, dtg, R * C, act);
  float* dseq = scratch(dseq_, R * C, true);
  be.linear_backward(dseq, dgrad(dense_.w), dgrad(dense_.b), dt1, h, w(dense_.w), R, C, C, prec, w16(dense_.w, prec));
  encode_backward(dseq, nullptr, prec);
  return out;
}

// BCE with logits, stable form: max(x, 0) - x y + log(1 + exp(-|x|)); d/dx = sigmoid(x) - y.
void DiscriminatorHead::loss(const BertBatch& batch, float loss_scale, float denom, int64_t count, FinetuneLoss& out) {
  const int64_t N = batch.B * batch.T;
  std::vector<float>& dlogits = dlogits_;
  dlogits.assign(static_cast<size_t>(N), 0.0f);
  const double norm = denom > 0 ? denom : static_cast<double>(std::max<int64_t>(count, 1));
  double s = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (!batch.input_mask[n] || batch.labels[n] == -100) continue;
    const double x = head_logits_[n], y = batch.labels[n];
    s += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x)));
    out.correct += (x > 0) == (y > 0.5);
    dlogits[n] = static_cast<float>((1.0 / (1.0 + std::exp(-x)) - y) / norm) * loss_scale;
  }
  out.loss = count > 0 ? s / static_cast<double>(count) : 0.0;
}

void declare(ParamTable& t, const BertConfig& c) {
  const int64_t C = c.hidden_size;
  BERTCC_CHECK(c.electra(), "config: the ELECTRA heads need model_type 'electra'");
  t.add("discriminator_predictions.dense.weight", {C, C}, true);
  t.add("discriminator_predictions.dense.bias", {C}, false);
  t.add("discriminator_predictions.dense_prediction.weight", {1, C}, true);
  t.add("discriminator_predictions.dense_prediction.bias", {1}, false);
}

std::vector<HeadOutput> outputs(const BertConfig&) {  // one replaced-token logit per token
  return {{"logits", {HeadOutput::kBatch, HeadOutput::kSequence}, false}};
}

// ONNX: ElectraForPreTraining's one replaced-token logit per token, logits [B, S].
void write_onnx(OnnxGraph& g, const std::string& h, const std::string&) {
  const std::string d = g.gelu(g.linear(h, "discriminator_predictions.dense"), g.config().activation());
  const std::string lg = g.linear(d, "discriminator_predictions.dense_prediction");  // [B, S, 1]
  g.rename(g.node("Squeeze", {lg, g.const_i64({2})}), "logits");
  g.output("logits", {"batch", "sequence"});
}

}  // namespace

const HeadSpec& discriminator_head() {
  static const HeadSpec s{
      .id = Heads::Discriminator,
      .name = "discriminator",
      .architecture = "ElectraForPreTraining",
      .electra_architecture = "ElectraForPreTraining",
      .pooler = false,
      .labels = HeadLabels::Replaced,
      .needs_labels = false,
      .task = nullptr,
      .serve_tasks = {"embed"},
      .serve_as = Heads::None,  // ELECTRA's pre-training checkpoint: its encoder embeds
      .by_architecture = true,
      .beam_search = false,
      .prefixes = {"discriminator_predictions."},
      .signature = {},  // (none: convert keeps such a checkpoint's encoder)
      .what = "a model directory",
      .make_command = "`bertcc init-model` or `bertcc pretrain`",
      .kind = ", an ELECTRA pre-training checkpoint",
      .declare = declare,
      .outputs = outputs,
      .onnx = write_onnx,
      .make = [](Bert& m) -> std::unique_ptr<Head> { return std::make_unique<DiscriminatorHead>(m); },
  };
  return s;
}

}  // namespace bertcc
