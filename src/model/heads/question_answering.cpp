// BertForQuestionAnswering (and ElectraForQuestionAnswering): qa_outputs on every token, no
// dropout (as HF); logits [B,T,2] (start, end); the loss is the mean of the start and end
// cross-entropies (positions clamped to [0, T], T ignored). No pooler (add_pooling_layer=False).
#include <algorithm>
#include <cmath>

#include "bertcc/error.h"
#include "bertcc/onnx_graph.h"
#include "bertcc/params.h"
#include "kernels/kernels.h"
#include "model/heads/linear_head.h"
#include "model/heads/specs.h"

namespace bertcc {

namespace {

class QuestionAnsweringHead : public LinearHead {
 public:
  explicit QuestionAnsweringHead(Bert& m) : LinearHead(m, /*per_token=*/true, "qa_outputs", /*dropout=*/false) {}

 protected:
  int64_t width() const override { return 2; }
  int64_t check_labels(const BertBatch& b) const override {
    BERTCC_CHECK(b.start_positions.size() == size_t(b.B) && b.end_positions.size() == size_t(b.B),
                 "finetune_step: question answering needs start_positions and end_positions [", b.B, "]");
    return b.B;
  }
  void loss(const BertBatch& batch, bool backward, float loss_scale, int64_t, FinetuneLoss& out,
            std::vector<float>& dlogits) override;
};

void QuestionAnsweringHead::loss(const BertBatch& batch, bool backward, float loss_scale, int64_t, FinetuneLoss& out,
                                 std::vector<float>& dlogits) {
  const int64_t B = batch.B, T = batch.T, N = B * T;
  // logits [B,T,2] -> start [B,T], end [B,T]; CE with ignore index T after clamping to [0,T]
  std::vector<float> st(N), en(N), ls(B);
  for (int64_t n = 0; n < N; ++n) {
    st[n] = head_logits_[2 * n];
    en[n] = head_logits_[2 * n + 1];
  }
  // Unpadded: the padding has no hidden states; its positions take no part in the softmax
  // (padded, they do, as in Hugging Face, with the hidden states computed there).
  if (last_packed())
    for (int64_t n = 0; n < N; ++n)
      if (!batch.input_mask[n]) st[n] = en[n] = -INFINITY;
  auto clamp = [&](const std::vector<int32_t>& v) {
    std::vector<int32_t> r(B);
    for (int64_t b = 0; b < B; ++b) r[b] = std::clamp<int32_t>(v[b], 0, static_cast<int32_t>(T));
    return r;
  };
  std::vector<int32_t> sp = clamp(batch.start_positions), ep = clamp(batch.end_positions);
  if (last_packed())  // a position in the padding is outside the sequence: ignored, as one past T is
    for (int64_t b = 0; b < B; ++b)
      for (int32_t* q : {&sp[b], &ep[b]})
        if (*q < T && !batch.input_mask[b * T + *q]) *q = static_cast<int32_t>(T);
  int64_t ns = 0, ne = 0;
  for (int64_t b = 0; b < B; ++b) {
    ns += sp[b] < T;
    ne += ep[b] < T;
  }
  double total = 0;
  for (int which = 0; which < 2; ++which) {
    std::vector<float>& lg = which == 0 ? st : en;
    const int64_t n = which == 0 ? ns : ne;
    const float gs = backward && n > 0 ? 0.5f * loss_scale / static_cast<float>(n) : 0.0f;
    kernels::softmax_xent_forward_backward(lg.data(), ls.data(), (which == 0 ? sp : ep).data(), B, T,
                                           static_cast<int32_t>(T), gs, &out.correct);
    double s = 0;
    for (int64_t b = 0; b < B; ++b) s += ls[b];
    if (n > 0) total += 0.5 * s / static_cast<double>(n);
  }
  out.loss = total;
  out.count = ns + ne;
  if (!backward) return;
  dlogits.resize(N * 2);
  for (int64_t n = 0; n < N; ++n) {
    dlogits[2 * n] = st[n];
    dlogits[2 * n + 1] = en[n];
  }
}

void declare(ParamTable& t, const BertConfig& c) {
  t.add("qa_outputs.weight", {2, c.hidden_size}, true);
  t.add("qa_outputs.bias", {2}, false);
}

std::vector<HeadOutput> outputs(const BertConfig&) {
  return {{"start_logits", {HeadOutput::kBatch, HeadOutput::kSequence}, false},
          {"end_logits", {HeadOutput::kBatch, HeadOutput::kSequence}, false}};
}

// ONNX: qa_outputs on every token, its two columns as start_logits and end_logits [B, S].
void write_onnx(OnnxGraph& g, const std::string& h, const std::string&) {
  const std::string lg = g.linear(h, "qa_outputs");  // [B, S, 2]
  for (int k = 0; k < 2; ++k) {
    const std::string one = g.node(
        "Squeeze", {g.node("Slice", {lg, g.const_i64({k}), g.const_i64({k + 1}), g.const_i64({2})}), g.const_i64({2})});
    g.rename(one, k == 0 ? "start_logits" : "end_logits");
    g.output(k == 0 ? "start_logits" : "end_logits", {"batch", "sequence"});
  }
}

}  // namespace

const HeadSpec& question_answering_head() {
  static const HeadSpec s{
      .id = Heads::QuestionAnswering,
      .name = "qa",
      .architecture = "BertForQuestionAnswering",
      .electra_architecture = "ElectraForQuestionAnswering",
      .pooler = false,
      .labels = HeadLabels::Span,
      .needs_labels = false,
      .task = "qa",
      .serve_tasks = {"qa"},
      .serve_as = Heads::QuestionAnswering,
      .by_architecture = true,
      .beam_search = false,
      .prefixes = {"qa_outputs."},
      .signature = {{"qa_outputs.weight"}},
      .what = "a question-answering model (BertForQuestionAnswering)",
      .make_command = "`bertcc finetune squad --model PRETRAINED --train-file train-v1.1.json --output-dir DIR`",
      .kind = "",
      .declare = declare,
      .outputs = outputs,
      .onnx = write_onnx,
      .make = [](Bert& m) -> std::unique_ptr<Head> { return std::make_unique<QuestionAnsweringHead>(m); },
  };
  return s;
}

}  // namespace bertcc
