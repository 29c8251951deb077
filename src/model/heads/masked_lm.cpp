#include "model/heads/masked_lm.h"

#include <algorithm>
#include <vector>

#include "bertcc/error.h"
#include "model/acts.h"
#include "model/int8.h"

namespace bertcc {

namespace {
// The per-row losses summed in order on the host (downloaded from a device).
double host_sum(Backend& be, std::vector<float>& v, const float* p, int64_t n) {
  if (!be.on_host()) {
    v.resize(static_cast<size_t>(n));
    be.download(v.data(), p, sizeof(float) * static_cast<size_t>(n));
  }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i];
  return s;
}
}  // namespace

MaskedLmHead::MaskedLmHead(Bert& m, bool nsp) : Head(m), nsp_(nsp) {
  dense_ = lin(nsp ? "cls.predictions.transform.dense" : "generator_predictions.dense");
  lnorm_ = norm(nsp ? "cls.predictions.transform.LayerNorm" : "generator_predictions.LayerNorm");
  obias_ = ref(nsp ? "cls.predictions.bias" : "generator_lm_head.bias");
  if (nsp) nsp_out_ = lin("cls.seq_relationship");
}

// Pre-training forward (and backward): the masked LM on the masked positions, then (BERT) NSP on
// the pooled output; loss = mean MLM CE (+ mean NSP CE).
bool MaskedLmHead::labels_within(const BertBatch& batch, int64_t b, int64_t n) const {
  if (batch.mlm_labels.size() != static_cast<size_t>(batch.B * batch.T)) return true;
  for (int64_t t = n; t < batch.T; ++t)
    if (batch.mlm_labels[static_cast<size_t>(b * batch.T + t)] != -1) return false;
  return true;
}

PretrainLoss MaskedLmHead::pretrain_step(const BertBatch& batch, Rng& rng, const StepArgs& args) {
  const bool training = args.training, backward = args.backward;
  const Precision prec = args.precision;
  const float loss_scale = args.loss_scale;
  std::vector<float>* mlm_logits_out = args.mlm_logits;
  std::vector<int32_t>* picks = args.gumbel_picks;
  BERTCC_CHECK(
      batch.mlm_labels.size() == batch.input_ids.size() && (!nsp_ || batch.nsp_labels.size() == size_t(batch.B)),
      "pretrain_step: batch has no masked-LM or next-sentence labels");
  encode(batch, training, prec, rng, backward);
  PretrainLoss out;
  if (mlm_logits_out) mlm_logits_out->clear();
  if (picks) picks->clear();
  Fwd f;
  mlm_forward(batch, backward, prec, rng, loss_scale, args.mlm_denom, mlm_logits_out, picks, f, out);
  if (!nsp_) {  // ELECTRA's generator
    out.loss = out.mlm_loss;
  } else {
    nsp_forward(batch, backward, prec, loss_scale, args.nsp_denom, f, out);
    out.loss = out.mlm_loss + out.nsp_loss;
  }
  if (!backward) return out;
  this->backward(batch, prec, f);
  return out;
}

// ---- MLM head on the masked positions only ----
void MaskedLmHead::mlm_forward(const BertBatch& batch, bool backward, Precision prec, Rng& rng, float loss_scale,
                               float mlm_denom, std::vector<float>* mlm_logits_out, std::vector<int32_t>* picks, Fwd& f,
                               PretrainLoss& out) {
  const int64_t B = batch.B, T = batch.T, C = cfg_.hidden_size, V = cfg_.vocab_size, Eh = width();
  const Activation act = this->act();
  auto& h = acts().head;
  Backend& be = backend();
  h.rows.clear();
  h.labels.clear();
  // the masked positions' rows in the encoder's output, in token order (packed: cu[b] + t; a label
  // in the padding has the batch computed padded, packed_lengths)
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r0 = seq(b).first;
    for (int64_t t = 0; t < T; ++t)
      if (batch.mlm_labels[b * T + t] != -1) {
        h.rows.push_back(r0 + t);
        h.labels.push_back(batch.mlm_labels[b * T + t]);
      }
  }
  const int64_t M = static_cast<int64_t>(h.rows.size());
  f.M = M;
  out.mlm_count = M;
  const int64_t* rows = h.rows.data();
  const int32_t* labels = h.labels.data();
  if (!be.on_host() && M > 0) {
    rows = h.drows.ensure(be, static_cast<size_t>(M));
    labels = h.dlabels.ensure(be, static_cast<size_t>(M));
    be.upload(h.drows.get(), h.rows.data(), sizeof(int64_t) * M);
    be.upload(h.dlabels.get(), h.labels.data(), sizeof(int32_t) * M);
  }
  f.rows = rows;
  if (M == 0) return;
  const ParamRef word = word_embeddings();
  f.hm = scratch(h.hm, M * C, false);
  f.t1 = scratch(h.t1, M * Eh, false);
  f.tg = scratch(h.tg, M * Eh, false);
  f.tl = scratch(h.tl, M * Eh, false);
  f.tmean = scratch(h.tmean, M, false);
  f.trstd = scratch(h.trstd, M, false);
  f.logits = scratch(h.logits, M * V, false);  // overwritten in place by its own gradient: no separate probabilities
  float* losses = scratch(h.losses, M, false);
  be.gather_rows(f.hm, sequence_rows(), rows, M, C);
  be.linear_forward(f.t1, f.hm, w(dense_.w), w(dense_.b), M, Eh, C, prec, w16(dense_.w, prec));
  be.gelu_forward(f.tg, f.t1, M * Eh, act);
  be.layernorm_forward(f.tl, f.tmean, f.trstd, f.tg, w(lnorm_.g), w(lnorm_.b), M, Eh, cfg_.layer_norm_eps);
  if (!decode_int8(f.logits, f.tl, M, prec))
    be.linear_forward(f.logits, f.tl, w(word), w(obias_), M, V, Eh, prec, w16(word, prec));
  if (mlm_logits_out) {
    mlm_logits_out->resize(static_cast<size_t>(M * V));
    be.download(mlm_logits_out->data(), f.logits, sizeof(float) * static_cast<size_t>(M * V));
  }
  if (picks) {  // the forward pass has reserved its dropout streams: the noise comes next
    picks->resize(static_cast<size_t>(M));
    be.gumbel_argmax(picks->data(), f.logits, M, V, rng, rng.reserve(static_cast<uint64_t>(M * V)));
  }
  be.softmax_xent(f.logits, losses, labels, M, V, -1,
                  backward ? loss_scale / (mlm_denom > 0 ? mlm_denom : static_cast<float>(M)) : 0.0f, &out.mlm_correct);
  const double s = host_sum(be, h.losses, losses, M);
  out.mlm_loss_sum = s;
  out.mlm_loss = s / static_cast<double>(M);
}

// int8: the decoder reads the word embeddings' int8 rows, the lookup's (a model for int8 inference
// alone gives their fp32 pages back): blocks of rows dequantized (float(q) * scale, the lookup's
// values), each block's logits an fp32 product into a block of columns. A logit depends on its row
// and its vocabulary entry alone, as in one product.
bool MaskedLmHead::decode_int8(float* logits, const float* x, int64_t M, Precision prec) {
  const kernels::Int8Weight* q = weights_.int8_word_embeddings(prec);
  if (!q) return false;
  const int64_t V = q->N, E = q->K, block = std::min<int64_t>(V, 2048);
  std::vector<float> rows(static_cast<size_t>(block * E)), y(static_cast<size_t>(M * block));
  const float* bias = w(obias_);
  for (int64_t v0 = 0; v0 < V; v0 += block) {
    const int64_t n = std::min(block, V - v0);
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < n; ++v) {
      const int8_t* r = q->q.data() + (v0 + v) * E;
      const float s = q->scale[static_cast<size_t>(v0 + v)];
      for (int64_t e = 0; e < E; ++e) rows[static_cast<size_t>(v * E + e)] = static_cast<float>(r[e]) * s;
    }
    backend().linear_forward(y.data(), x, rows.data(), bias + v0, M, n, E, prec, nullptr);
    for (int64_t m = 0; m < M; ++m) std::copy_n(y.data() + m * n, n, logits + m * V + v0);
  }
  return true;
}

// ---- NSP head on the pooled output ----
void MaskedLmHead::nsp_forward(const BertBatch& batch, bool backward, Precision prec, float loss_scale, float nsp_denom,
                               Fwd& f, PretrainLoss& out) {
  const int64_t B = batch.B, C = cfg_.hidden_size;
  auto& h = acts().head;
  Backend& be = backend();
  f.nsp_logits = scratch(h.nsp, B * 2, false);
  float* nsp_losses = scratch(h.nsp_losses, B, false);
  const int32_t* nsp_labels = batch.nsp_labels.data();
  if (!be.on_host()) {
    nsp_labels = h.dnsp_labels.ensure(be, static_cast<size_t>(B));
    be.upload(h.dnsp_labels.get(), batch.nsp_labels.data(), sizeof(int32_t) * B);
  }
  be.linear_forward(f.nsp_logits, pooled_output(), w(nsp_out_.w), w(nsp_out_.b), B, 2, C, prec, w16(nsp_out_.w, prec));
  be.softmax_xent(f.nsp_logits, nsp_losses, nsp_labels, B, 2, -1,
                  backward ? loss_scale / (nsp_denom > 0 ? nsp_denom : static_cast<float>(B)) : 0.0f, &out.nsp_correct);
  const double s = host_sum(be, h.nsp_losses, nsp_losses, B);
  out.nsp_loss_sum = s;
  out.nsp_loss = s / static_cast<double>(B);
}

// ---- backward: NSP into the pooled output, the MLM head into the masked rows (the encoder's rows) ----
void MaskedLmHead::backward(const BertBatch& batch, Precision prec, const Fwd& f) {
  const int64_t B = batch.B, N = rows(), C = cfg_.hidden_size, V = cfg_.vocab_size, Eh = width();
  const int64_t M = f.M;
  auto& h = acts().head;
  Backend& be = backend();
  float* dpooled = nullptr;
  if (nsp_) {
    dpooled = scratch(h.dpooled, B * C, true);
    be.linear_backward(dpooled, dgrad(nsp_out_.w), dgrad(nsp_out_.b), f.nsp_logits, pooled_output(), w(nsp_out_.w), B,
                       2, C, prec, w16(nsp_out_.w, prec));
  }
  float* dseq = scratch(h.dseq, N * C, true);
  if (M > 0) {
    const ParamRef word = word_embeddings();
    float* dtl = scratch(h.dtl, M * Eh, true);
    float* dtg = scratch(h.dtg, M * Eh, true);
    float* dt1 = scratch(h.dt1, M * Eh, true);
    float* dhm = scratch(h.dhm, M * C, true);
    // decoder tied to the word embeddings: its gradient adds into the embedding gradient
    be.linear_backward(dtl, dgrad(word), dgrad(obias_), f.logits, f.tl, w(word), M, V, Eh, prec, w16(word, prec));
    be.layernorm_backward(dtg, dgrad(lnorm_.g), dgrad(lnorm_.b), dtl, f.tg, w(lnorm_.g), f.tmean, f.trstd, M, Eh);
    be.gelu_backward(dt1, f.t1, dtg, M * Eh, act());
    be.linear_backward(dhm, dgrad(dense_.w), dgrad(dense_.b), dt1, f.hm, w(dense_.w), M, Eh, C, prec,
                       w16(dense_.w, prec));
    be.scatter_add_rows(dseq, dhm, f.rows, M, C);
  }
  encode_backward(dseq, dpooled, prec);
}

}  // namespace bertcc
