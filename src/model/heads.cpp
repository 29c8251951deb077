// Fine-tuning heads with Hugging Face names and losses: qa_outputs (BertForQuestionAnswering),
// classifier on the pooled output (BertForSequenceClassification, regression when num_labels == 1)
// and classifier per token (BertForTokenClassification). Forward and backward side by side; the
// backward adds into the gradient buffers and hands d(sequence)/d(pooled) to encode_backward.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

namespace bertcc {

using namespace kernels;

namespace {
// Checks the labels of a batch for the head and returns how many rows count in the loss.
int64_t check_labels(const BertBatch& b, Heads h, int64_t K) {
  const int64_t B = b.B, T = b.T;
  if (h == Heads::QuestionAnswering) {
    BERTCC_CHECK(b.start_positions.size() == size_t(B) && b.end_positions.size() == size_t(B),
                 "finetune_step: question answering needs start_positions and end_positions [", B, "]");
    return B;
  }
  if (h == Heads::SequenceClassification && K == 1) {
    BERTCC_CHECK(b.targets.size() == size_t(B), "finetune_step: regression needs targets [", B, "]");
    return B;
  }
  const int64_t n = h == Heads::SequenceClassification ? B : B * T;
  BERTCC_CHECK(b.labels.size() == size_t(n), "finetune_step: classification needs labels [",
               h == Heads::SequenceClassification ? "B" : "B*T", " = ", n, "]");
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (h == Heads::TokenClassification && b.labels[i] == -100) continue;
    BERTCC_CHECK(b.labels[i] >= 0 && b.labels[i] < K, "finetune_step: label ", b.labels[i], " at ", i,
                 " is outside [0, ", K, ")");
    ++count;
  }
  return count;
}
}  // namespace

FinetuneLoss Bert::finetune_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                 float loss_scale) {
  require_host("finetune_step");
  if (heads_ == Heads::JointQuestionAnswering) return joint_qa_step(batch, training, backward, prec, rng, loss_scale);
  BERTCC_CHECK(heads_ == Heads::QuestionAnswering || heads_ == Heads::SequenceClassification ||
                   heads_ == Heads::TokenClassification,
               "finetune_step: model has no fine-tuning head");
  const int64_t B = batch.B, T = batch.T, N = B * T, C = cfg_.hidden_size;
  const int64_t K = heads_ == Heads::QuestionAnswering ? 2 : cfg_.num_labels();
  const bool have_labels = backward || !(batch.labels.empty() && batch.targets.empty() &&
                                         batch.start_positions.empty());
  const int64_t count = have_labels ? check_labels(batch, heads_, K) : 0;
  encode(batch, training, prec, rng);
  FinetuneLoss out;
  out.count = count;

  // Head input: sequence output (QA: no dropout, as HF) or dropout(pooled) / dropout(sequence).
  // ELECTRA's sequence classifier (HF ElectraClassificationHead) instead takes h[:, 0] through
  // dropout, dense, gelu, dropout into out_proj.
  const bool per_token = heads_ != Heads::SequenceClassification;
  const bool electra_cls = !per_token && cfg_.electra();
  const int64_t R = per_token ? N : B;  // rows the head sees
  std::vector<float> cls, a1, d1, g1;   // ELECTRA head: h[:, 0], its dropout, dense, gelu
  uint64_t drop_cls = 0;
  if (electra_cls) {
    cls.resize(static_cast<size_t>(B * C));
    for (int64_t b = 0; b < B; ++b) std::memcpy(cls.data() + b * C, sequence_output() + b * T * C, sizeof(float) * C);
  }
  const float* src = per_token ? sequence_output() : electra_cls ? nullptr : pooled_output();
  const float p = (training && heads_ != Heads::QuestionAnswering) ? cfg_.head_dropout() : 0.0f;
  if (electra_cls) {
    a1 = cls;
    if (p > 0) {
      drop_cls = rng.reserve(B * C);
      dropout_forward(a1.data(), cls.data(), B * C, p, rng, drop_cls);
    }
    d1.resize(static_cast<size_t>(B * C));
    g1.resize(static_cast<size_t>(B * C));
    linear_forward(d1.data(), a1.data(), w("classifier.dense.weight"), w("classifier.dense.bias"), B, C, C, prec,
                   w16("classifier.dense.weight", prec));
    gelu_forward(g1.data(), d1.data(), B * C, Activation::GeluErf);
    src = g1.data();
  }
  uint64_t drop_base = 0;
  const float* hin = src;
  if (p > 0) {
    head_in_.resize(R * C);
    drop_base = rng.reserve(R * C);
    dropout_forward(head_in_.data(), src, R * C, p, rng, drop_base);
    hin = head_in_.data();
  }
  const std::string wn = heads_ == Heads::QuestionAnswering ? "qa_outputs.weight"
                         : electra_cls                      ? "classifier.out_proj.weight"
                                                            : "classifier.weight";
  const std::string bn = heads_ == Heads::QuestionAnswering ? "qa_outputs.bias"
                         : electra_cls                      ? "classifier.out_proj.bias"
                                                            : "classifier.bias";
  head_logits_.resize(R * K);
  linear_forward(head_logits_.data(), hin, w(wn), w(bn), R, K, C, prec, w16(wn, prec));
  if (!have_labels) return out;

  // ---- loss, and d(loss)/d(logits) in `dlogits` ----
  std::vector<float> dlogits;
  if (heads_ == Heads::QuestionAnswering) {
    // logits [B,T,2] -> start [B,T], end [B,T]; CE with ignore index T after clamping to [0,T]
    std::vector<float> st(N), en(N), ls(B);
    for (int64_t n = 0; n < N; ++n) {
      st[n] = head_logits_[2 * n];
      en[n] = head_logits_[2 * n + 1];
    }
    auto clamp = [&](const std::vector<int32_t>& v) {
      std::vector<int32_t> r(B);
      for (int64_t b = 0; b < B; ++b) r[b] = std::clamp<int32_t>(v[b], 0, static_cast<int32_t>(T));
      return r;
    };
    const std::vector<int32_t> sp = clamp(batch.start_positions), ep = clamp(batch.end_positions);
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
      softmax_xent_forward_backward(lg.data(), ls.data(), (which == 0 ? sp : ep).data(), B, T,
                                    static_cast<int32_t>(T), gs, &out.correct);
      double s = 0;
      for (int64_t b = 0; b < B; ++b) s += ls[b];
      if (n > 0) total += 0.5 * s / static_cast<double>(n);
    }
    out.loss = total;
    out.count = ns + ne;
    if (!backward) return out;
    dlogits.resize(N * 2);
    for (int64_t n = 0; n < N; ++n) {
      dlogits[2 * n] = st[n];
      dlogits[2 * n + 1] = en[n];
    }
  } else if (heads_ == Heads::SequenceClassification && K == 1) {  // regression: MSE (token heads: one class)
    dlogits.resize(B);
    double s = 0;
    for (int64_t b = 0; b < B; ++b) {
      const double d = static_cast<double>(head_logits_[b]) - batch.targets[b];
      s += d * d;
      dlogits[b] = static_cast<float>(2.0 * d / static_cast<double>(B)) * loss_scale;
    }
    out.loss = s / static_cast<double>(B);
    if (!backward) return out;
  } else {
    dlogits = head_logits_;
    std::vector<float> ls(R);
    const float gs = backward && count > 0 ? loss_scale / static_cast<float>(count) : 0.0f;
    softmax_xent_forward_backward(dlogits.data(), ls.data(), batch.labels.data(), R, K, -100, gs, &out.correct);
    double s = 0;
    for (int64_t r = 0; r < R; ++r) s += ls[r];
    out.loss = count > 0 ? s / static_cast<double>(count) : 0.0;
    if (!backward) return out;
  }

  // ---- backward: head linear -> dropout -> encoder ----
  head_din_.assign(R * C, 0.0f);
  linear_backward(head_din_.data(), grad(wn), grad(bn), dlogits.data(), hin, w(wn), R, K, C, prec, w16(wn, prec));
  const float* dsrc = head_din_.data();
  if (p > 0) {
    head_dseq_.assign(R * C, 0.0f);
    dropout_backward(head_dseq_.data(), head_din_.data(), R * C, p, rng, drop_base);
    dsrc = head_dseq_.data();
  }
  if (electra_cls) {
    // dsrc = d(gelu out) -> gelu -> dense -> dropout -> rows 0 of the sequence gradient
    std::vector<float> dd1(static_cast<size_t>(B * C), 0.0f), da1(static_cast<size_t>(B * C), 0.0f);
    gelu_backward(dd1.data(), d1.data(), dsrc, B * C, Activation::GeluErf);
    linear_backward(da1.data(), grad("classifier.dense.weight"), grad("classifier.dense.bias"), dd1.data(), a1.data(),
                    w("classifier.dense.weight"), B, C, C, prec, w16("classifier.dense.weight", prec));
    std::vector<float> dcls(static_cast<size_t>(B * C), 0.0f);
    if (p > 0) dropout_backward(dcls.data(), da1.data(), B * C, p, rng, drop_cls);
    else dcls = da1;
    head_dseq_.assign(static_cast<size_t>(N * C), 0.0f);
    for (int64_t b = 0; b < B; ++b) std::memcpy(head_dseq_.data() + b * T * C, dcls.data() + b * C, sizeof(float) * C);
    encode_backward(head_dseq_.data(), nullptr, prec);
  } else if (per_token) {
    encode_backward(dsrc, nullptr, prec);
  } else {
    encode_backward(nullptr, dsrc, prec);
  }
  return out;
}

FinetuneLoss Bert::discriminator_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                      float loss_scale, float denom) {
  require_host("discriminator_step");
  BERTCC_CHECK(heads_ == Heads::Discriminator, "discriminator_step: model has no ELECTRA discriminator head");
  const int64_t B = batch.B, T = batch.T, N = B * T, C = cfg_.hidden_size;
  BERTCC_CHECK(batch.labels.size() == static_cast<size_t>(N), "discriminator_step: needs labels [B*T = ", N, "]");
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (!batch.input_mask[n] || batch.labels[n] == -100) continue;
    BERTCC_CHECK(batch.labels[n] == 0 || batch.labels[n] == 1, "discriminator_step: label ", batch.labels[n], " at ", n,
                 " is not 0 (original) or 1 (replaced)");
    ++count;
  }
  encode(batch, training, prec, rng);
  const Activation act = cfg_.activation();
  FinetuneLoss out;
  out.count = count;
  // dense -> activation -> dense_prediction, on every token (HF computes padding too; the loss skips it)
  std::vector<float> t1(static_cast<size_t>(N * C)), tg(static_cast<size_t>(N * C));
  const float* h = sequence_output();
  linear_forward(t1.data(), h, w("discriminator_predictions.dense.weight"), w("discriminator_predictions.dense.bias"), N,
                 C, C, prec, w16("discriminator_predictions.dense.weight", prec));
  gelu_forward(tg.data(), t1.data(), N * C, act);
  head_logits_.resize(static_cast<size_t>(N));
  linear_forward(head_logits_.data(), tg.data(), w("discriminator_predictions.dense_prediction.weight"),
                 w("discriminator_predictions.dense_prediction.bias"), N, 1, C, prec,
                 w16("discriminator_predictions.dense_prediction.weight", prec));
  // BCE with logits, stable form: max(x, 0) - x y + log(1 + exp(-|x|)); d/dx = sigmoid(x) - y.
  std::vector<float> dlogits(static_cast<size_t>(N), 0.0f);
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
  if (!backward) return out;
  std::vector<float> dtg(static_cast<size_t>(N * C), 0.0f), dt1(static_cast<size_t>(N * C), 0.0f);
  linear_backward(dtg.data(), grad("discriminator_predictions.dense_prediction.weight"),
                  grad("discriminator_predictions.dense_prediction.bias"), dlogits.data(), tg.data(),
                  w("discriminator_predictions.dense_prediction.weight"), N, 1, C, prec,
                  w16("discriminator_predictions.dense_prediction.weight", prec));
  gelu_backward(dt1.data(), t1.data(), dtg.data(), N * C, act);
  head_dseq_.assign(static_cast<size_t>(N * C), 0.0f);
  linear_backward(head_dseq_.data(), grad("discriminator_predictions.dense.weight"),
                  grad("discriminator_predictions.dense.bias"), dt1.data(), h, w("discriminator_predictions.dense.weight"),
                  N, C, C, prec, w16("discriminator_predictions.dense.weight", prec));
  encode_backward(head_dseq_.data(), nullptr, prec);
  return out;
}

}  // namespace bertcc
