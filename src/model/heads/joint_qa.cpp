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
#include <numeric>

#include "bertcc/error.h"
#include "bertcc/onnx_graph.h"
#include "bertcc/params.h"
#include "kernels/kernels.h"
#include "model/head.h"
#include "model/heads/specs.h"

namespace bertcc {

int joint_qa_output_size(const BertConfig& c) {
  const int k1 = c.start_beam(), k2 = c.end_beam();
  return 2 * k1 + 2 * k1 * k2 + 1;
}

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

class JointQaHead : public Head {
 public:
  explicit JointQaHead(Bert& m)
      : Head(m),
        start_(lin("start_logits.dense")),
        end0_(lin("end_logits.dense_0")),
        end1_(lin("end_logits.dense_1")),
        ans0_(lin("answer_class.dense_0")),
        end_norm_(norm("end_logits.LayerNorm")),
        ans1_(ref("answer_class.dense_1.weight")) {}
  // With start/end positions (in the window; 0/0 = no answer: answer class 1): loss = (CE(start) +
  // CE(end | true start)) / 2 + 0.5 BCE(answer class), means over the rows; head_logits() = start
  // [B*T], end [B*T], class [B]. Without positions: the beam search (joint_qa_output_size floats
  // per row, see bert.h).
  FinetuneLoss finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args) override;
  // The loss conditions the end on the true start: a start in the padding has no packed row.
  bool labels_within(const BertBatch& batch, int64_t b, int64_t n) const override {
    return batch.start_positions.size() != static_cast<size_t>(batch.B) ||
           batch.start_positions[static_cast<size_t>(b)] < n;
  }

 private:
  // The training forward's buffers (where the backend computes) for the backward.
  struct Fwd {
    const float* h;
    const int64_t *start_rows, *cls_rows, *start_of, *row_b;
    float *xin, *tmp, *a, *y, *mean, *rstd, *zin, *za;
  };
  // end logits of M rows [h_t ; h_start] (xin, on the backend): a = tanh(dense_0), y = LayerNorm(a)
  // (mean, rstd kept for backward), e = dense_1(y)
  void end_logits(const float* xin, int64_t M, float* a, float* y, float* mean, float* rstd, float* e, Precision prec);
  void beam_search(const BertBatch& batch, const std::vector<float>& pm, Precision prec);
  // The beam search's buffers where the backend computes (one row's k1 x T candidates).
  struct Beam {
    float *xin, *tmp, *a, *y, *mean, *rstd, *e, *za, *c;
    const float* zin;
  };
  // Unpadded: the start (and `end`: the end) logits of the encoder's rows, on the host in s (and
  // e), laid out padded [B*T] in place, zeros at the padding (masked after).
  void logits_padded(bool end);
  void beam_row(int64_t b, int64_t T, const std::vector<float>& pm, const std::vector<double>& lp, const Beam& bb,
                Precision prec);
  Fwd train_forward(const BertBatch& batch, const std::vector<float>& pm, Precision prec);
  void train_loss(const BertBatch& batch, bool backward, float loss_scale, FinetuneLoss& out);
  void train_backward(const BertBatch& batch, const std::vector<float>& pm, Precision prec, const Fwd& f);

  LinearRef start_, end0_, end1_, ans0_;  // XLNet's poolers
  NormRef end_norm_;
  ParamRef ans1_;
  // training and beam scratch (keys of scratch() on a device) and row indices
  std::vector<float> s, xin, tmp, a, y, mean, rstd, e, zin, tmpb, za, c, dc, dza, dz, dzin, dhs, dy, da, dx, dxin, dseq;
  std::vector<float> rows_tmp, s_rows, e_rows, e_row;
  std::vector<int64_t> start_rows, start_of, row_b;
};

FinetuneLoss JointQaHead::finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args) {
  const bool training = args.training, backward = args.backward;
  const Precision prec = args.precision;
  const float loss_scale = args.loss_scale;
  const int64_t B = batch.B, T = batch.T;
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
  if (!have_labels) {
    beam_search(batch, pm, prec);
    return out;
  }
  const Fwd f = train_forward(batch, pm, prec);
  train_loss(batch, backward, loss_scale, out);
  if (!backward) return out;
  train_backward(batch, pm, prec, f);
  return out;
}

void JointQaHead::end_logits(const float* xin, int64_t M, float* a, float* y, float* mean, float* rstd, float* e,
                             Precision prec) {
  const int64_t C = cfg_.hidden_size;
  Backend& be = backend();
  be.linear_forward(a, xin, w(end0_.w), w(end0_.b), M, C, 2 * C, prec, w16(end0_.w, prec));
  be.tanh_forward(a, a, M * C);
  be.layernorm_forward(y, mean, rstd, a, w(end_norm_.g), w(end_norm_.b), M, C, cfg_.layer_norm_eps);
  be.linear_forward(e, y, w(end1_.w), w(end1_.b), M, 1, C, prec, w16(end1_.w, prec));
}

// ---- beam search: the head's layers on the backend, the top-k on the host ----
void JointQaHead::beam_search(const BertBatch& batch, const std::vector<float>& pm, Precision prec) {
  const int64_t B = batch.B, T = batch.T, N = B * T, C = cfg_.hidden_size;
  Backend& be = backend();
  const float* hd = sequence_rows();  // the encoder's rows (packed: the real tokens alone)
  float* sd = scratch(s, rows(), false);
  be.linear_forward(sd, hd, w(start_.w), w(start_.b), rows(), 1, C, prec, w16(start_.w, prec));
  to_host(s, sd, rows());
  logits_padded(/*end=*/false);
  apply_mask(s.data(), pm.data(), N);
  const int64_t K1 = cfg_.start_beam(), K2 = cfg_.end_beam();
  const int64_t k1 = std::min<int64_t>(K1, T);
  const int64_t per_row = 2 * K1 + 2 * K1 * K2 + 1;
  head_logits_.assign(static_cast<size_t>(B * per_row), 0.0f);
  // one row's k1 x T candidates at a time (at most: packed, k1 x its length): rows (i, t) =
  // [h_t ; h_start_i], end logits through a = tanh(dense_0), y = LayerNorm(a), e = dense_1(y)
  const int64_t R = k1 * T;
  Beam bb;
  bb.xin = scratch(xin, R * 2 * C, false);
  bb.tmp = scratch(tmp, R * C, false);
  bb.a = scratch(a, R * C, false);
  bb.y = scratch(y, R * C, false);
  bb.mean = scratch(mean, R, false);
  bb.rstd = scratch(rstd, R, false);
  bb.e = scratch(e, R, false);
  bb.za = scratch(za, C, false);
  bb.c = scratch(c, 1, false);
  start_of.resize(static_cast<size_t>(R));
  // the start log-probabilities of every row; the answer class's inputs [expected start state
  // sum_t softmax(s)_t h_t ; h_[CLS]] of every row, on the backend
  std::vector<std::vector<double>> lps(static_cast<size_t>(B));
  std::vector<double> probs(static_cast<size_t>(N));
  for (int64_t b = 0; b < B; ++b) {
    log_softmax(s.data() + b * T, T, lps[b]);
    for (int64_t t = 0; t < T; ++t) probs[b * T + t] = std::exp(lps[b][t]);
  }
  float* zinp = scratch(zin, B * 2 * C, false);
  if (!last_packed()) {
    be.weighted_row_sums(zinp, 2 * C, hd, probs.data(), B, T, C);
    be.copy_rows(zinp + C, 2 * C, hd, T * C, B, C);
  } else {  // over each sequence's own rows (the padding's probabilities are 0); the [CLS] rows
    for (int64_t b = 0; b < B; ++b) {
      const auto [r0, n] = seq(b);
      be.weighted_row_sums(zinp + b * 2 * C, 2 * C, hd + r0 * C, probs.data() + b * T, 1, n, C);
    }
    float* tb = scratch(tmpb, B * C, false);
    be.gather_rows(tb, hd, rows_on_backend(cls_rows()), B, C);
    be.copy_rows(zinp + C, 2 * C, tb, C, B, C);
  }
  bb.zin = zinp;
  for (int64_t b = 0; b < B; ++b) beam_row(b, T, pm, lps[b], bb, prec);
}

// One row's beams: its k1 starts, each start's k2 ends, its answer class.
void JointQaHead::beam_row(int64_t b, int64_t T, const std::vector<float>& pm, const std::vector<double>& lp,
                           const Beam& bb, Precision prec) {
  const int64_t C = cfg_.hidden_size;
  Backend& be = backend();
  const float* hd = sequence_rows();
  const auto [r0, n] = seq(b);  // the row's positions in the encoder's rows (padded: b T and T)
  const int64_t K1 = cfg_.start_beam(), K2 = cfg_.end_beam();
  const int64_t k1 = std::min<int64_t>(K1, T), k2 = std::min<int64_t>(K2, T);
  const int64_t per_row = 2 * K1 + 2 * K1 * K2 + 1, R = k1 * n;
  std::vector<double> elp;
  float* o = head_logits_.data() + b * per_row;  // [K1 start lp | K1 start idx | K1*K2 end lp | K1*K2 end idx | cls]
  const std::vector<int64_t> st = top_k(lp, k1);
  for (int64_t i = 0; i < k1; ++i) {
    be.copy_rows(bb.xin + i * n * 2 * C, 2 * C, hd + r0 * C, C, n, C);
    for (int64_t t = 0; t < n; ++t) start_of[i * n + t] = r0 + std::min(st[i], n - 1);
  }
  be.gather_rows(bb.tmp, hd, rows_on_backend(start_of), R, C);
  for (int64_t i = 0; i < k1; ++i)  // packed, a start in the padding (a masked one): its zero hidden state
    if (st[i] >= n) be.zero(bb.tmp + i * n * C, sizeof(float) * static_cast<size_t>(n * C));
  be.copy_rows(bb.xin + C, 2 * C, bb.tmp, C, R, C);
  end_logits(bb.xin, R, bb.a, bb.y, bb.mean, bb.rstd, bb.e, prec);
  to_host(e, bb.e, R);
  for (int64_t i = 0; i < k1; ++i) {
    e_row.assign(static_cast<size_t>(T), 0.0f);  // (the padding's, masked next)
    std::copy_n(e.data() + i * n, n, e_row.data());
    float* ei = e_row.data();
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
  be.linear_forward(bb.za, bb.zin + b * 2 * C, w(ans0_.w), w(ans0_.b), 1, C, 2 * C, prec, w16(ans0_.w, prec));
  be.tanh_forward(bb.za, bb.za, C);
  be.linear_forward(bb.c, bb.za, w(ans1_), nullptr, 1, 1, C, prec, w16(ans1_, prec));
  o[per_row - 1] = to_host(c, bb.c, 1)[0];
}

void JointQaHead::logits_padded(bool end) {
  if (!last_packed()) return;
  rows_tmp = s;
  unpack_rows(rows_tmp.data(), 1, nullptr, s);
  if (!end) return;
  rows_tmp = e;
  unpack_rows(rows_tmp.data(), 1, nullptr, e);
}

// ---- training: end and answer class conditioned on the true start, on the backend ----
JointQaHead::Fwd JointQaHead::train_forward(const BertBatch& batch, const std::vector<float>& pm, Precision prec) {
  // N: the encoder's rows (packed: the real tokens alone; a true start in the padding has the batch
  // computed padded, packed_lengths)
  const int64_t B = batch.B, T = batch.T, N = rows(), C = cfg_.hidden_size;
  Backend& be = backend();
  Fwd f;
  f.h = sequence_rows();
  const float* h = f.h;
  start_rows.resize(static_cast<size_t>(B));
  start_of.resize(static_cast<size_t>(N));
  row_b.resize(static_cast<size_t>(N));
  for (int64_t b = 0; b < B; ++b) {
    const auto [r0, n] = seq(b);
    start_rows[b] = r0 + batch.start_positions[b];
    for (int64_t t = 0; t < n; ++t) {
      start_of[r0 + t] = r0 + batch.start_positions[b];
      row_b[r0 + t] = b;
    }
  }
  f.start_rows = rows_on_backend(start_rows);
  const int64_t* cls_rows_d = f.cls_rows = rows_on_backend(cls_rows());
  f.start_of = rows_on_backend(start_of);
  f.row_b = rows_on_backend(row_b);
  // start logits
  float* sd = scratch(s, N, false);
  be.linear_forward(sd, h, w(start_.w), w(start_.b), N, 1, C, prec, w16(start_.w, prec));
  // end logits of the rows [h_t ; h_start]: a = tanh(dense_0), y = LayerNorm(a) (mean, rstd kept), e = dense_1(y)
  f.xin = scratch(xin, N * 2 * C, false);
  f.tmp = scratch(tmp, N * C, false);
  be.copy_rows(f.xin, 2 * C, h, C, N, C);
  be.gather_rows(f.tmp, h, f.start_of, N, C);
  be.copy_rows(f.xin + C, 2 * C, f.tmp, C, N, C);
  f.a = scratch(a, N * C, false);
  f.y = scratch(y, N * C, false);
  f.mean = scratch(mean, N, false);
  f.rstd = scratch(rstd, N, false);
  float* ed = scratch(e, N, false);
  end_logits(f.xin, N, f.a, f.y, f.mean, f.rstd, ed, prec);
  // answer class of [h_start ; h_cls]
  f.zin = scratch(zin, B * 2 * C, false);
  float* tb = scratch(tmpb, B * C, false);
  be.gather_rows(tb, h, f.start_rows, B, C);
  be.copy_rows(f.zin, 2 * C, tb, C, B, C);
  be.gather_rows(tb, h, cls_rows_d, B, C);
  be.copy_rows(f.zin + C, 2 * C, tb, C, B, C);
  f.za = scratch(za, B * C, false);
  float* cd = scratch(c, B, false);
  be.linear_forward(f.za, f.zin, w(ans0_.w), w(ans0_.b), B, C, 2 * C, prec, w16(ans0_.w, prec));
  be.tanh_forward(f.za, f.za, B * C);
  be.linear_forward(cd, f.za, w(ans1_), nullptr, B, 1, C, prec, w16(ans1_, prec));
  // the logits on the host (the scratch itself there), masked
  to_host(s, sd, N);
  to_host(e, ed, N);
  to_host(c, cd, B);
  logits_padded(/*end=*/true);
  apply_mask(s.data(), pm.data(), B * T);
  apply_mask(e.data(), pm.data(), B * T);
  // head_logits_: start [B*T], end [B*T], answer class [B] (for inspection; gradients use copies)
  head_logits_.assign(s.begin(), s.end());
  head_logits_.insert(head_logits_.end(), e.begin(), e.end());
  head_logits_.insert(head_logits_.end(), c.begin(), c.begin() + B);
  return f;
}

// ---- losses: CE over the window for start and end, BCE for the answer class ----
void JointQaHead::train_loss(const BertBatch& batch, bool backward, float loss_scale, FinetuneLoss& out) {
  const int64_t B = batch.B, T = batch.T;
  const std::vector<int32_t>& sp = batch.start_positions;
  const std::vector<int32_t>& ep = batch.end_positions;
  const float g = backward ? 0.5f * loss_scale / static_cast<float>(B) : 0.0f;
  std::vector<float> ls(static_cast<size_t>(B));
  double total = 0;
  for (int which = 0; which < 2; ++which) {
    std::vector<float>& lg = which == 0 ? s : e;  // overwritten by the gradient when backward
    kernels::softmax_xent_forward_backward(lg.data(), ls.data(), (which == 0 ? sp : ep).data(), B, T,
                                           static_cast<int32_t>(T), g, &out.correct);
    double sum = 0;
    for (int64_t b = 0; b < B; ++b) sum += ls[b];
    total += 0.5 * sum / static_cast<double>(B);
  }
  dc.resize(static_cast<size_t>(B));
  double bce = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double x = c[b], yb = (sp[b] == 0 && ep[b] == 0) ? 1.0 : 0.0;
    bce += std::max(x, 0.0) - x * yb + std::log1p(std::exp(-std::fabs(x)));
    dc[b] = static_cast<float>((1.0 / (1.0 + std::exp(-x)) - yb) / static_cast<double>(B)) * 0.5f * loss_scale;
  }
  total += 0.5 * bce / static_cast<double>(B);
  out.loss = total;
  out.count = 2 * B;
}

// ---- backward (on the backend; the masked positions get no gradient) ----
void JointQaHead::train_backward(const BertBatch& batch, const std::vector<float>& pm, Precision prec, const Fwd& f) {
  const int64_t B = batch.B, T = batch.T, N = rows(), C = cfg_.hidden_size;  // N: the encoder's rows
  Backend& be = backend();
  const bool packed = last_packed();
  for (int64_t i = 0; i < B * T; ++i)
    if (pm[i] > 0) s[i] = e[i] = 0.0f;
  if (packed) {  // the real tokens' gradients, in the rows
    pack_rows(e, 1, e_rows);
    pack_rows(s, 1, s_rows);
  }
  const float* dcd = to_backend(dc);
  const float* de = to_backend(packed ? e_rows : e);
  const float* ds = to_backend(packed ? s_rows : s);
  float* dh = scratch(dseq, N * C, true);
  float* dhsd = scratch(dhs, B * C, true);
  // answer class
  {
    float* dzad = scratch(dza, B * C, true);
    float* dzd = scratch(dz, B * C, true);
    float* dzind = scratch(dzin, B * 2 * C, true);
    be.linear_backward(dzad, dgrad(ans1_), nullptr, dcd, f.za, w(ans1_), B, 1, C, prec, w16(ans1_, prec));
    be.tanh_backward(dzd, f.za, dzad, B * C);
    be.linear_backward(dzind, dgrad(ans0_.w), dgrad(ans0_.b), dzd, f.zin, w(ans0_.w), B, C, 2 * C, prec,
                       w16(ans0_.w, prec));
    be.add_rows(dhsd, C, dzind, 2 * C, B, C);
    if (packed) {  // into the [CLS] rows
      float* tb = scratch(tmpb, B * C, false);
      be.copy_rows(tb, C, dzind + C, 2 * C, B, C);
      be.scatter_add_rows(dh, tb, f.cls_rows, B, C);
    } else {
      be.add_rows(dh, T * C, dzind + C, 2 * C, B, C);
    }
  }
  // end logits
  {
    float* dyd = scratch(dy, N * C, true);
    float* dad = scratch(da, N * C, true);
    float* dxd = scratch(dx, N * C, true);
    float* dxind = scratch(dxin, N * 2 * C, true);
    be.linear_backward(dyd, dgrad(end1_.w), dgrad(end1_.b), de, f.y, w(end1_.w), N, 1, C, prec, w16(end1_.w, prec));
    be.layernorm_backward(dad, dgrad(end_norm_.g), dgrad(end_norm_.b), dyd, f.a, w(end_norm_.g), f.mean, f.rstd, N, C);
    be.tanh_backward(dxd, f.a, dad, N * C);
    be.linear_backward(dxind, dgrad(end0_.w), dgrad(end0_.b), dxd, f.xin, w(end0_.w), N, C, 2 * C, prec,
                       w16(end0_.w, prec));
    be.add_rows(dh, C, dxind, 2 * C, N, C);
    be.copy_rows(f.tmp, C, dxind + C, 2 * C, N, C);
    be.scatter_add_rows(dhsd, f.tmp, f.row_b, N, C);  // dhs[b] += the rows of b, in order
  }
  // start logits
  be.linear_backward(dh, dgrad(start_.w), dgrad(start_.b), ds, f.h, w(start_.w), N, 1, C, prec, w16(start_.w, prec));
  be.scatter_add_rows(dh, dhsd, f.start_rows, B, C);
  encode_backward(dh, nullptr, prec);
}

void declare(ParamTable& t, const BertConfig& cfg) {  // XLNet's PoolerStartLogits / PoolerEndLogits / PoolerAnswerClass
  const int64_t C = cfg.hidden_size;
  t.add("start_logits.dense.weight", {1, C}, true);
  t.add("start_logits.dense.bias", {1}, false);
  t.add("end_logits.dense_0.weight", {C, 2 * C}, true);
  t.add("end_logits.dense_0.bias", {C}, false);
  t.add("end_logits.LayerNorm.weight", {C}, false);
  t.add("end_logits.LayerNorm.bias", {C}, false);
  t.add("end_logits.dense_1.weight", {1, C}, true);
  t.add("end_logits.dense_1.bias", {1}, false);
  t.add("answer_class.dense_0.weight", {C, 2 * C}, true);
  t.add("answer_class.dense_0.bias", {C}, false);
  t.add("answer_class.dense_1.weight", {1, C}, true);  // no bias
}

// The beam search's outputs, as export-onnx writes them (XLNet's and NVIDIA's ELECTRA's names).
std::vector<HeadOutput> outputs(const BertConfig& cfg) {
  const int64_t K1 = cfg.start_beam(), K2 = cfg.end_beam(), b = HeadOutput::kBatch;
  return {{"start_top_log_probs", {b, K1}, false},
          {"start_top_index", {b, K1}, true},
          {"end_top_log_probs", {b, K1 * K2}, false},
          {"end_top_index", {b, K1 * K2}, true},
          {"cls_logits", {b}, false}};
}

// ONNX: the beam search at inference, as above and as NVIDIA's TFElectraForQuestionAnswering with
// joint_head: outputs start_top_log_probs / start_top_index [B, K1], end_top_log_probs /
// end_top_index [B, K1*K2] (start-major: i * K2 + j), cls_logits [B]. dense_0 of the end and
// answer-class layers takes [x ; y] (2C inputs); it is applied as x @ Wx + y @ Wy, so the
// [B, K1, S, 2C] concatenation is never formed.
void write_onnx(OnnxGraph& g, const std::string& h, const std::string& positions) {
  using Attr = OnnxGraph::Attr;
  const BertConfig& c = g.config();
  const int64_t C = c.hidden_size, K1 = c.start_beam(), K2 = c.end_beam();
  // columns [c0, c0 + C) of a [C, 2C] weight, transposed for MatMul
  auto half = [&](const std::string& n, int64_t c0) {
    const float* w = g.data(n);
    std::vector<float> t(static_cast<size_t>(C * C));
    for (int64_t o = 0; o < C; ++o)
      for (int64_t i = 0; i < C; ++i) t[static_cast<size_t>(i * C + o)] = w[o * 2 * C + c0 + i];
    return g.weight(n + (c0 == 0 ? "_t_first" : "_t_second"), {C, C}, t.data());
  };
  auto row = [&](const std::string& n) { return g.weight(n + "_t", {C, 1}, g.data(n)); };  // [1, C] -> [C, 1]
  // p_mask as bertcc's: open are [CLS] (position 0) and segment-1 real tokens but the last one
  const std::string len = g.node("ReduceSum", {"attention_mask", g.const_i64({1})}, {Attr::i("keepdims", 1)});
  const std::string last = g.node("Sub", {len, g.const_i64_scalar(1)});  // [B, 1]
  const std::string one = g.const_i64_scalar(1);
  const std::string in_context = g.node(
      "And", {g.node("And", {g.node("Equal", {"token_type_ids", one}), g.node("Equal", {"attention_mask", one})}),
              g.node("Not", {g.node("Equal", {positions, last})})});
  const std::string open = g.node("Or", {g.node("Equal", {positions, g.const_i64_scalar(0)}), in_context});  // [B, S]
  const std::string closed = g.const_f32(-1e30f);
  // start: log-softmax of the masked logits, the K1 best
  const std::string s =
      g.node("Where", {open, g.node("Squeeze", {g.linear(h, "start_logits.dense"), g.const_i64({2})}), closed});
  // the k largest along the last axis, sorted: [values, indices]
  auto top_k = [&](const std::string& x, int64_t k) {
    return g.nodes("TopK", {x, g.const_i64({k})}, {Attr::i("axis", -1), Attr::i("largest", 1), Attr::i("sorted", 1)},
                   {"", ""});
  };
  const std::vector<std::string> st = top_k(g.node("LogSoftmax", {s}, {Attr::i("axis", -1)}), K1);
  g.rename(st[0], "start_top_log_probs");
  g.rename(st[1], "start_top_index");
  // the hidden states at those starts [B, K1, C]
  const std::string gidx =
      g.node("Expand", {g.node("Unsqueeze", {st[1], g.const_i64({2})}),
                        g.node("Concat", {g.node("Shape", {st[1]}), g.const_i64({C})}, {Attr::i("axis", 0)})});
  const std::string hs = g.node("GatherElements", {h, gidx}, {Attr::i("axis", 1)});
  // end logits for every (start i, position t): dense_1(LN(tanh(dense_0([h_t ; h_start_i]))))
  const std::string a_t = g.node("MatMul", {h, half("end_logits.dense_0.weight", 0)});  // [B, S, C]
  const std::string a_s = g.node("Add", {g.node("MatMul", {hs, half("end_logits.dense_0.weight", C)}),
                                         g.param("end_logits.dense_0.bias")});  // [B, K1, C]
  const std::string a = g.node(
      "Tanh",
      {g.node("Add", {g.node("Unsqueeze", {a_t, g.const_i64({1})}), g.node("Unsqueeze", {a_s, g.const_i64({2})})})});
  const std::string e0 =
      g.node("Add", {g.node("MatMul", {g.layer_norm(a, "end_logits.LayerNorm"), row("end_logits.dense_1.weight")}),
                     g.param("end_logits.dense_1.bias")});  // [B, K1, S, 1]
  const std::string e = g.node(
      "Where", {g.node("Unsqueeze", {open, g.const_i64({1})}), g.node("Squeeze", {e0, g.const_i64({3})}), closed});
  const std::vector<std::string> en = top_k(g.node("LogSoftmax", {e}, {Attr::i("axis", -1)}), K2);
  const std::string flat = g.const_i64({0, K1 * K2});
  g.rename(g.node("Reshape", {en[0], flat}), "end_top_log_probs");
  g.rename(g.node("Reshape", {en[1], flat}), "end_top_index");
  // answer class from the expected start state sum_t softmax(s)_t h_t and h_[CLS]
  const std::string hexp = g.node(
      "Squeeze",
      {g.node("MatMul", {g.node("Unsqueeze", {g.node("Softmax", {s}, {Attr::i("axis", -1)}), g.const_i64({1})}), h}),
       g.const_i64({1})});                    // [B, C]
  const std::string hcls = g.first_token(h);  // [B, C]
  const std::string z =
      g.node("Tanh", {g.node("Add", {g.node("Add", {g.node("MatMul", {hexp, half("answer_class.dense_0.weight", 0)}),
                                                    g.node("MatMul", {hcls, half("answer_class.dense_0.weight", C)})}),
                                     g.param("answer_class.dense_0.bias")})});
  g.rename(g.node("Squeeze", {g.node("MatMul", {z, row("answer_class.dense_1.weight")}), g.const_i64({1})}),
           "cls_logits");
  const std::string k1 = std::to_string(K1), k12 = std::to_string(K1 * K2);
  g.output("start_top_log_probs", {"batch", k1});
  g.output("start_top_index", {"batch", k1}, OnnxGraph::kInt64);
  g.output("end_top_log_probs", {"batch", k12});
  g.output("end_top_index", {"batch", k12}, OnnxGraph::kInt64);
  g.output("cls_logits", {"batch"});
}

}  // namespace

const HeadSpec& joint_question_answering_head() {
  static const HeadSpec spec{
      .id = Heads::JointQuestionAnswering,
      .name = "qa-joint",
      .architecture = "BertForQuestionAnsweringJoint",
      .electra_architecture = "ElectraForQuestionAnsweringJoint",
      .pooler = false,
      .labels = HeadLabels::Span,
      .needs_labels = false,
      .task = "qa",
      .serve_tasks = {"qa"},
      .serve_as = Heads::JointQuestionAnswering,
      .by_architecture = true,
      .beam_search = true,
      .prefixes = {"start_logits.", "end_logits.", "answer_class."},
      .signature = {{"start_logits.dense.weight"}},
      .what = "a question-answering model (BertForQuestionAnswering)",
      .make_command = "`bertcc finetune squad --model PRETRAINED --train-file train-v1.1.json --output-dir DIR`",
      .kind = "",
      .declare = declare,
      .outputs = outputs,
      .onnx = write_onnx,
      .make = [](Bert& m) -> std::unique_ptr<Head> { return std::make_unique<JointQaHead>(m); },
  };
  return spec;
}

}  // namespace bertcc
