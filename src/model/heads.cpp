// Fine-tuning heads with Hugging Face names and losses: qa_outputs (BertForQuestionAnswering),
// classifier on the pooled output (BertForSequenceClassification, regression when num_labels == 1)
// and classifier per token (BertForTokenClassification). Forward and backward side by side; the
// backward adds into the gradient buffers and hands d(sequence)/d(pooled) to encode_backward.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
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
  if (heads_ == Heads::JointQuestionAnswering) return joint_qa_step(batch, training, backward, prec, rng, loss_scale);
  BERTCC_CHECK(heads_ == Heads::QuestionAnswering || heads_ == Heads::SequenceClassification ||
                   heads_ == Heads::TokenClassification,
               "finetune_step: model has no fine-tuning head");
  const int64_t B = batch.B, T = batch.T, N = B * T, C = cfg_.hidden_size;
  const int64_t K = heads_ == Heads::QuestionAnswering ? 2 : cfg_.num_labels();
  const bool have_labels = backward || !(batch.labels.empty() && batch.targets.empty() &&
                                         batch.start_positions.empty());
  const int64_t count = have_labels ? check_labels(batch, heads_, K) : 0;
  encode(batch, training, prec, rng, backward);
  Backend& be = *be_;
  FinetuneLoss out;
  out.count = count;

  // Head input: sequence output (QA: no dropout, as HF) or dropout(pooled) / dropout(sequence).
  // ELECTRA's sequence classifier (HF ElectraClassificationHead) instead takes h[:, 0] through
  // dropout, dense, gelu, dropout into out_proj. The head's layers run on the backend; the loss
  // runs on the host over the (small) logits, whose gradient goes back up.
  const bool per_token = heads_ != Heads::SequenceClassification;
  const bool electra_cls = !per_token && cfg_.electra();
  const int64_t R = per_token ? N : B;  // rows the head sees
  float *cls = nullptr, *a1 = nullptr, *d1 = nullptr, *g1 = nullptr;  // ELECTRA head: h[:, 0], dropout, dense, gelu
  uint64_t drop_cls = 0;
  if (electra_cls) {
    cls = scratch(head_cls_, B * C, false);
    be.copy_rows(cls, C, sequence_output(), T * C, B, C);
  }
  const float* src = per_token ? sequence_output() : electra_cls ? nullptr : pooled_output();
  const float p = (training && heads_ != Heads::QuestionAnswering) ? cfg_.head_dropout() : 0.0f;
  if (electra_cls) {
    a1 = scratch(head_a1_, B * C, false);
    be.copy(a1, cls, sizeof(float) * static_cast<size_t>(B * C));
    if (p > 0) {
      drop_cls = rng.reserve(B * C);
      be.dropout_forward(a1, cls, B * C, p, rng, drop_cls);
    }
    d1 = scratch(head_d1_, B * C, false);
    g1 = scratch(head_g1_, B * C, false);
    be.linear_forward(d1, a1, w(refs_.cls_dense.w), w(refs_.cls_dense.b), B, C, C, prec,
                      w16(refs_.cls_dense.w, prec));
    be.gelu_forward(g1, d1, B * C, Activation::GeluErf);
    src = g1;
  }
  uint64_t drop_base = 0;
  const float* hin = src;
  if (p > 0) {
    float* hd = scratch(head_in_, R * C, false);
    drop_base = rng.reserve(R * C);
    be.dropout_forward(hd, src, R * C, p, rng, drop_base);
    hin = hd;
  }
  const ParamRef wn = refs_.out.w, bn = refs_.out.b;  // qa_outputs, classifier or ELECTRA's classifier.out_proj
  float* logits = be.on_host() ? (head_logits_.resize(R * K), head_logits_.data()) : scratch(head_out_, R * K, false);
  be.linear_forward(logits, hin, w(wn), w(bn), R, K, C, prec, w16(wn, prec));
  to_host(head_logits_, logits, R * K);
  if (!have_labels) return out;

  // ---- loss, and d(loss)/d(logits) in `dlogits` (host) ----
  std::vector<float>& dlogits = head_dlogits_;
  if (heads_ == Heads::QuestionAnswering) {
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
  const float* dl = to_backend(dlogits);
  float* din = scratch(head_din_, R * C, true);
  be.linear_backward(din, dgrad(wn), dgrad(bn), dl, hin, w(wn), R, K, C, prec, w16(wn, prec));
  const float* dsrc = din;
  if (p > 0) {
    float* dd = scratch(head_dseq_, R * C, true);
    be.dropout_backward(dd, din, R * C, p, rng, drop_base);
    dsrc = dd;
  }
  if (electra_cls) {
    // dsrc = d(gelu out) -> gelu -> dense -> dropout -> rows 0 of the sequence gradient
    float* dd1 = scratch(head_dd1_, B * C, true);
    float* da1 = scratch(head_da1_, B * C, true);
    be.gelu_backward(dd1, d1, dsrc, B * C, Activation::GeluErf);
    be.linear_backward(da1, dgrad(refs_.cls_dense.w), dgrad(refs_.cls_dense.b), dd1, a1,
                       w(refs_.cls_dense.w), B, C, C, prec, w16(refs_.cls_dense.w, prec));
    const float* dcls = da1;
    if (p > 0) {
      float* dc = scratch(head_dcls_, B * C, true);
      be.dropout_backward(dc, da1, B * C, p, rng, drop_cls);
      dcls = dc;
    }
    float* dseq = scratch(head_dseq_, N * C, true);
    be.copy_rows(dseq, T * C, dcls, C, B, C);
    encode_backward(dseq, nullptr, prec);
  } else if (per_token) {
    encode_backward(dsrc, nullptr, prec);
  } else {
    encode_backward(nullptr, dsrc, prec);
  }
  return out;
}

FinetuneLoss Bert::discriminator_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                      float loss_scale, float denom) {
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
  encode(batch, training, prec, rng, backward);
  Backend& be = *be_;
  const Activation act = cfg_.activation();
  FinetuneLoss out;
  out.count = count;
  // dense -> activation -> dense_prediction, on every token (HF computes padding too; the loss skips it)
  float* t1 = scratch(head_d1_, N * C, false);
  float* tg = scratch(head_g1_, N * C, false);
  const float* h = sequence_output();
  be.linear_forward(t1, h, w(refs_.disc_dense.w), w(refs_.disc_dense.b), N,
                    C, C, prec, w16(refs_.disc_dense.w, prec));
  be.gelu_forward(tg, t1, N * C, act);
  float* logits = be.on_host() ? (head_logits_.resize(N), head_logits_.data()) : scratch(head_out_, N, false);
  be.linear_forward(logits, tg, w(refs_.disc_pred.w),
                    w(refs_.disc_pred.b), N, 1, C, prec,
                    w16(refs_.disc_pred.w, prec));
  to_host(head_logits_, logits, N);
  // BCE with logits, stable form: max(x, 0) - x y + log(1 + exp(-|x|)); d/dx = sigmoid(x) - y.
  std::vector<float>& dlogits = head_dlogits_;
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
  if (!backward) return out;
  const float* dl = to_backend(dlogits);
  float* dtg = scratch(head_dd1_, N * C, true);
  float* dt1 = scratch(head_da1_, N * C, true);
  be.linear_backward(dtg, dgrad(refs_.disc_pred.w),
                     dgrad(refs_.disc_pred.b), dl, tg,
                     w(refs_.disc_pred.w), N, 1, C, prec,
                     w16(refs_.disc_pred.w, prec));
  be.gelu_backward(dt1, t1, dtg, N * C, act);
  float* dseq = scratch(head_dseq_, N * C, true);
  be.linear_backward(dseq, dgrad(refs_.disc_dense.w),
                     dgrad(refs_.disc_dense.b), dt1, h, w(refs_.disc_dense.w),
                     N, C, C, prec, w16(refs_.disc_dense.w, prec));
  encode_backward(dseq, nullptr, prec);
  return out;
}

}  // namespace bertcc
