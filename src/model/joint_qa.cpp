// The joint SQuAD head of XLNet and NVIDIA's ELECTRA (TFElectraForQuestionAnswering, joint_head):
//   start_logits.dense:            s_t = h_t . w + b, masked by p_mask (-1e30)
//   end_logits.dense_0/LayerNorm/dense_1:
//                                  e_t = dense_1(LN(tanh(dense_0([h_t ; h_start])))), masked
//   answer_class.dense_0/dense_1:  c = dense_1(tanh(dense_0([h_start ; h_cls]))) (dense_1 has no bias)
// Training conditions the end and the answer class on the true start; the loss is NVIDIA's
// (CE(start) + CE(end)) / 2 + 0.5 BCE(answer_class, is_impossible), means over the batch rows, where
// a window without the answer has start = end = 0 ([CLS]) and is_impossible = 1.
// Inference: the start_n_top most likely starts (log-softmax), for each the end_n_top most likely
// ends given that start, and the answer class from the start probabilities' expected hidden state.
// p_mask (NVIDIA's, from the token types): 1 for the question, the [SEP]s and padding; 0 for the
// context and [CLS].
// Training (and evaluation with labels) runs on the model's backend: the GEMMs over [h_t ; h_start]
// (B x T rows of 2C), tanh, LayerNorm and the row moves where the encoder ran; only the logits
// (B x T start, B x T end, B answer classes) come to the host for the masks, the losses and their
// gradients, which go back up. The beam search (inference) runs the head's layers there too, one
// row's start_n_top x T candidates at a time; the top-k choices and log-softmaxes are host work on
// the downloaded logits; the answer class's expected start state is a weighted row sum there
// (Backend::weighted_row_sums, in double), so the sequence output stays where it is.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

namespace bertcc {

using namespace kernels;

namespace {

// 1 where an answer cannot start or end: segment 0 (question, [SEP], padding) except [CLS] at 0,
// and the last real token (the closing [SEP]).
std::vector<float> answer_mask(const BertBatch& b) {
  std::vector<float> p(static_cast<size_t>(b.B * b.T), 1.0f);
  for (int64_t r = 0; r < b.B; ++r) {
    int64_t last = -1;
    for (int64_t t = 0; t < b.T; ++t)
      if (b.input_mask[r * b.T + t]) last = t;
    for (int64_t t = 0; t < b.T; ++t) {
      const int64_t i = r * b.T + t;
      if (t == 0 || (b.segment_ids[i] == 1 && b.input_mask[i] && t != last)) p[i] = 0.0f;
    }
  }
  return p;
}

void apply_mask(float* x, const float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = p[i] > 0 ? -1e30f : x[i];
}

// Log-softmax of one row (double accumulation), into out.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(s);
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
}

// The k largest (value descending, lower index first on ties), as tf.math.top_k.
std::vector<int64_t> top_k(const std::vector<double>& v, int64_t k) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  k = std::min<int64_t>(k, static_cast<int64_t>(v.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace

int joint_qa_output_size(const BertConfig& c) {
  const int k1 = c.start_beam(), k2 = c.end_beam();
  return 2 * k1 + 2 * k1 * k2 + 1;
}

FinetuneLoss Bert::joint_qa_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                 float loss_scale) {
  BERTCC_CHECK(heads_ == Heads::JointQuestionAnswering, "joint_qa_step: model has no joint QA head");
  const int64_t B = batch.B, T = batch.T, N = B * T, C = cfg_.hidden_size;
  const bool have_labels = backward || !batch.start_positions.empty();
  if (have_labels) {
    BERTCC_CHECK(batch.start_positions.size() == size_t(B) && batch.end_positions.size() == size_t(B),
                 "joint QA: needs start_positions and end_positions [", B, "]");
    for (int64_t b = 0; b < B; ++b)
      BERTCC_CHECK(batch.start_positions[b] >= 0 && batch.start_positions[b] < T && batch.end_positions[b] >= 0 &&
                       batch.end_positions[b] < T,
                   "joint QA: row ", b, ": start/end ", batch.start_positions[b], "/", batch.end_positions[b],
                   " outside the window [0, ", T, ") (the joint head conditions the end on the start)");
  }
  encode(batch, training, prec, rng, backward);
  const std::vector<float> pm = answer_mask(batch);
  FinetuneLoss out;
  // end logits of M rows [h_t ; h_start] (xin, on the backend): a = tanh(dense_0), y = LayerNorm(a)
  // (mean, rstd kept for backward), e = dense_1(y)
  auto end_logits = [&](const float* xin, int64_t M, float* a, float* y, float* mean, float* rstd, float* e) {
    Backend& be = *be_;
    be.linear_forward(a, xin, w(refs_.end0.w), w(refs_.end0.b), M, C, 2 * C, prec,
                      w16(refs_.end0.w, prec));
    be.tanh_forward(a, a, M * C);
    be.layernorm_forward(y, mean, rstd, a, w(refs_.end_norm.g), w(refs_.end_norm.b), M, C,
                         cfg_.layer_norm_eps);
    be.linear_forward(e, y, w(refs_.end1.w), w(refs_.end1.b), M, 1, C, prec,
                      w16(refs_.end1.w, prec));
  };
  if (!have_labels) {  // ---- beam search: the head's layers on the backend, the top-k on the host ----
    Backend& be = *be_;
    JointScratch& J = joint_;
    const float* hd = sequence_output();
    float* sd = scratch(J.s, N, false);
    be.linear_forward(sd, hd, w(refs_.start.w), w(refs_.start.b), N, 1, C, prec,
                      w16(refs_.start.w, prec));
    to_host(J.s, sd, N);
    std::vector<float>& s = J.s;
    apply_mask(s.data(), pm.data(), N);
    const int64_t K1 = cfg_.start_beam(), K2 = cfg_.end_beam();
    const int64_t k1 = std::min<int64_t>(K1, T), k2 = std::min<int64_t>(K2, T);
    const int64_t per_row = 2 * K1 + 2 * K1 * K2 + 1;
    head_logits_.assign(static_cast<size_t>(B * per_row), 0.0f);
    // one row's k1 x T candidates at a time: rows (i, t) = [h_t ; h_start_i], end logits through
    // a = tanh(dense_0), y = LayerNorm(a), e = dense_1(y)
    const int64_t R = k1 * T;
    float* xin = scratch(J.xin, R * 2 * C, false);
    float* tmp = scratch(J.tmp, R * C, false);
    float* a = scratch(J.a, R * C, false);
    float* y = scratch(J.y, R * C, false);
    float* mean = scratch(J.mean, R, false);
    float* rstd = scratch(J.rstd, R, false);
    float* e = scratch(J.e, R, false);
    float* za = scratch(J.za, C, false);
    float* c = scratch(J.c, 1, false);
    J.start_of.resize(static_cast<size_t>(R));
    // the start log-probabilities of every row; the answer class's inputs [expected start state
    // sum_t softmax(s)_t h_t ; h_[CLS]] of every row, on the backend
    std::vector<std::vector<double>> lps(static_cast<size_t>(B));
    std::vector<double> probs(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b) {
      log_softmax(s.data() + b * T, T, lps[b]);
      for (int64_t t = 0; t < T; ++t) probs[b * T + t] = std::exp(lps[b][t]);
    }
    float* zin = scratch(J.zin, B * 2 * C, false);
    be.weighted_row_sums(zin, 2 * C, hd, probs.data(), B, T, C);
    be.copy_rows(zin + C, 2 * C, hd, T * C, B, C);
    std::vector<double> elp;
    for (int64_t b = 0; b < B; ++b) {
      float* o =
          head_logits_.data() + b * per_row;  // [K1 start lp | K1 start idx | K1*K2 end lp | K1*K2 end idx | cls]
      const std::vector<double>& lp = lps[b];
      const std::vector<int64_t> st = top_k(lp, k1);
      for (int64_t i = 0; i < k1; ++i) {
        be.copy_rows(xin + i * T * 2 * C, 2 * C, hd + b * T * C, C, T, C);
        for (int64_t t = 0; t < T; ++t) J.start_of[i * T + t] = b * T + st[i];
      }
      be.gather_rows(tmp, hd, rows_on_backend(J.start_of), R, C);
      be.copy_rows(xin + C, 2 * C, tmp, C, R, C);
      end_logits(xin, R, a, y, mean, rstd, e);
      to_host(J.e, e, R);
      for (int64_t i = 0; i < k1; ++i) {
        float* ei = J.e.data() + i * T;
        apply_mask(ei, pm.data() + b * T, T);
        log_softmax(ei, T, elp);
        const std::vector<int64_t> en = top_k(elp, k2);
        o[i] = static_cast<float>(lp[st[i]]);
        o[K1 + i] = static_cast<float>(st[i]);
        for (int64_t j = 0; j < k2; ++j) {
          o[2 * K1 + i * K2 + j] = static_cast<float>(elp[en[j]]);
          o[2 * K1 + K1 * K2 + i * K2 + j] = static_cast<float>(en[j]);
        }
      }
      // answer class (one row at a time, as the end logits)
      be.linear_forward(za, zin + b * 2 * C, w(refs_.ans0.w), w(refs_.ans0.b), 1, C,
                        2 * C, prec, w16(refs_.ans0.w, prec));
      be.tanh_forward(za, za, C);
      be.linear_forward(c, za, w(refs_.ans1), nullptr, 1, 1, C, prec,
                        w16(refs_.ans1, prec));
      o[per_row - 1] = to_host(J.c, c, 1)[0];
    }
    return out;
  }

  // ---- training: end and answer class conditioned on the true start, on the backend ----
  Backend& be = *be_;
  JointScratch& J = joint_;
  const float* h = sequence_output();
  std::vector<int32_t> sp(batch.start_positions.begin(), batch.start_positions.end());
  std::vector<int32_t> ep(batch.end_positions.begin(), batch.end_positions.end());
  J.start_rows.resize(static_cast<size_t>(B));
  J.cls_rows.resize(static_cast<size_t>(B));
  J.start_of.resize(static_cast<size_t>(N));
  J.row_b.resize(static_cast<size_t>(N));
  for (int64_t b = 0; b < B; ++b) {
    J.start_rows[b] = b * T + sp[b];
    J.cls_rows[b] = b * T;
    for (int64_t t = 0; t < T; ++t) {
      J.start_of[b * T + t] = b * T + sp[b];
      J.row_b[b * T + t] = b;
    }
  }
  const int64_t* start_rows = rows_on_backend(J.start_rows);
  const int64_t* cls_rows = rows_on_backend(J.cls_rows);
  const int64_t* start_of = rows_on_backend(J.start_of);
  const int64_t* row_b = rows_on_backend(J.row_b);
  const float* W0 = w(refs_.end0.w);
  const float* W1 = w(refs_.end1.w);
  const float* Ws = w(refs_.start.w);
  const float* Wc0 = w(refs_.ans0.w);
  const float* Wc1 = w(refs_.ans1);
  // start logits
  float* s = scratch(J.s, N, false);
  be.linear_forward(s, h, Ws, w(refs_.start.b), N, 1, C, prec, w16(refs_.start.w, prec));
  // end logits of the rows [h_t ; h_start]: a = tanh(dense_0), y = LayerNorm(a) (mean, rstd kept), e = dense_1(y)
  float* xin = scratch(J.xin, N * 2 * C, false);
  float* tmp = scratch(J.tmp, N * C, false);
  be.copy_rows(xin, 2 * C, h, C, N, C);
  be.gather_rows(tmp, h, start_of, N, C);
  be.copy_rows(xin + C, 2 * C, tmp, C, N, C);
  float* a = scratch(J.a, N * C, false);
  float* y = scratch(J.y, N * C, false);
  float* mean = scratch(J.mean, N, false);
  float* rstd = scratch(J.rstd, N, false);
  float* e = scratch(J.e, N, false);
  end_logits(xin, N, a, y, mean, rstd, e);
  // answer class of [h_start ; h_cls]
  float* zin = scratch(J.zin, B * 2 * C, false);
  float* tb = scratch(J.tmpb, B * C, false);
  be.gather_rows(tb, h, start_rows, B, C);
  be.copy_rows(zin, 2 * C, tb, C, B, C);
  be.gather_rows(tb, h, cls_rows, B, C);
  be.copy_rows(zin + C, 2 * C, tb, C, B, C);
  float* za = scratch(J.za, B * C, false);
  float* c = scratch(J.c, B, false);
  be.linear_forward(za, zin, Wc0, w(refs_.ans0.b), B, C, 2 * C, prec,
                    w16(refs_.ans0.w, prec));
  be.tanh_forward(za, za, B * C);
  be.linear_forward(c, za, Wc1, nullptr, B, 1, C, prec, w16(refs_.ans1, prec));
  // the logits on the host (the scratch itself there), masked
  to_host(J.s, s, N);
  to_host(J.e, e, N);
  to_host(J.c, c, B);
  std::vector<float>&hs = J.s, &he = J.e;
  const std::vector<float>& hc = J.c;
  apply_mask(hs.data(), pm.data(), N);
  apply_mask(he.data(), pm.data(), N);
  // head_logits_: start [B*T], end [B*T], answer class [B] (for inspection; gradients use copies)
  head_logits_.assign(hs.begin(), hs.end());
  head_logits_.insert(head_logits_.end(), he.begin(), he.end());
  head_logits_.insert(head_logits_.end(), hc.begin(), hc.begin() + B);
  // ---- losses: CE over the window for start and end, BCE for the answer class ----
  const float g = backward ? 0.5f * loss_scale / static_cast<float>(B) : 0.0f;
  std::vector<float> ls(static_cast<size_t>(B));
  double total = 0;
  for (int which = 0; which < 2; ++which) {
    std::vector<float>& lg = which == 0 ? hs : he;  // overwritten by the gradient when backward
    softmax_xent_forward_backward(lg.data(), ls.data(), (which == 0 ? sp : ep).data(), B, T, static_cast<int32_t>(T), g,
                                  &out.correct);
    double sum = 0;
    for (int64_t b = 0; b < B; ++b) sum += ls[b];
    total += 0.5 * sum / static_cast<double>(B);
  }
  J.dc.resize(static_cast<size_t>(B));
  double bce = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double x = hc[b], yb = (sp[b] == 0 && ep[b] == 0) ? 1.0 : 0.0;
    bce += std::max(x, 0.0) - x * yb + std::log1p(std::exp(-std::fabs(x)));
    J.dc[b] = static_cast<float>((1.0 / (1.0 + std::exp(-x)) - yb) / static_cast<double>(B)) * 0.5f * loss_scale;
  }
  total += 0.5 * bce / static_cast<double>(B);
  out.loss = total;
  out.count = 2 * B;
  if (!backward) return out;

  // ---- backward (on the backend; the masked positions get no gradient) ----
  for (int64_t i = 0; i < N; ++i)
    if (pm[i] > 0) hs[i] = he[i] = 0.0f;
  const float* dc = to_backend(J.dc);
  const float* de = to_backend(J.e);
  const float* ds = to_backend(J.s);
  float* dh = scratch(head_dseq_, N * C, true);
  float* dhs = scratch(J.dhs, B * C, true);
  // answer class
  {
    float* dza = scratch(J.dza, B * C, true);
    float* dz = scratch(J.dz, B * C, true);
    float* dzin = scratch(J.dzin, B * 2 * C, true);
    be.linear_backward(dza, dgrad(refs_.ans1), nullptr, dc, za, Wc1, B, 1, C, prec,
                       w16(refs_.ans1, prec));
    be.tanh_backward(dz, za, dza, B * C);
    be.linear_backward(dzin, dgrad(refs_.ans0.w), dgrad(refs_.ans0.b), dz, zin, Wc0, B,
                       C, 2 * C, prec, w16(refs_.ans0.w, prec));
    be.add_rows(dhs, C, dzin, 2 * C, B, C);
    be.add_rows(dh, T * C, dzin + C, 2 * C, B, C);
  }
  // end logits
  {
    float* dy = scratch(J.dy, N * C, true);
    float* da = scratch(J.da, N * C, true);
    float* dx = scratch(J.dx, N * C, true);
    float* dxin = scratch(J.dxin, N * 2 * C, true);
    be.linear_backward(dy, dgrad(refs_.end1.w), dgrad(refs_.end1.b), de, y, W1, N, 1, C,
                       prec, w16(refs_.end1.w, prec));
    be.layernorm_backward(da, dgrad(refs_.end_norm.g), dgrad(refs_.end_norm.b), dy, a,
                          w(refs_.end_norm.g), mean, rstd, N, C);
    be.tanh_backward(dx, a, da, N * C);
    be.linear_backward(dxin, dgrad(refs_.end0.w), dgrad(refs_.end0.b), dx, xin, W0, N, C,
                       2 * C, prec, w16(refs_.end0.w, prec));
    be.add_rows(dh, C, dxin, 2 * C, N, C);
    be.copy_rows(tmp, C, dxin + C, 2 * C, N, C);
    be.scatter_add_rows(dhs, tmp, row_b, N, C);  // dhs[b] += the rows of b, in order
  }
  // start logits
  be.linear_backward(dh, dgrad(refs_.start.w), dgrad(refs_.start.b), ds, h, Ws, N, 1, C, prec,
                     w16(refs_.start.w, prec));
  be.scatter_add_rows(dh, dhs, start_rows, B, C);
  encode_backward(dh, nullptr, prec);
  return out;
}

}  // namespace bertcc
