// Inference on features (inference.h).
#include "bertcc/inference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "bertcc/dist.h"
#include "bertcc/error.h"

namespace bertcc {

int argmax(const std::vector<float>& v, size_t begin, size_t end) {
  end = std::min(end, v.size());
  size_t best = begin;
  for (size_t i = begin; i < end; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int>(best - begin);
}

// A model whose weights diverged (or hold NaN) gives non-finite logits, whose argmax would still
// name a label: an error naming the example instead.
static std::vector<std::vector<float>>& check_finite(std::vector<std::vector<float>>& logits) {
  for (size_t i = 0; i < logits.size(); ++i)
    for (float v : logits[i])
      BERTCC_CHECK(std::isfinite(v), "example ", i + 1, ": the model produced a non-finite logit (", v,
                   "): its weights have diverged or are not finite");
  return logits;
}

std::vector<std::vector<float>> predict_logits(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                               Precision prec) {
  std::vector<size_t> order(f.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Length-sorted batches waste little padding; longest first, so the activation arena is sized
  // once. Results go back to input order.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return f[a].input_ids.size() > f[b].input_ids.size(); });
  std::vector<std::vector<float>> out(f.size());
  Rng rng{0, 0};
  // Under data parallelism batch j is predicted by rank j % W and the logits are gathered, so
  // every rank gets the logits one process would compute (same batches, same kernels).
  dist::Communicator& comm = dist::world();
  const size_t W = static_cast<size_t>(comm.world()), R = static_cast<size_t>(comm.rank());
  std::vector<float> mine;  // per batch: floats per row, then the rows
  const size_t bs = static_cast<size_t>(std::max<int64_t>(batch_size, 1));
  for (size_t s = 0, j = 0; s < order.size(); s += bs, ++j) {
    if (j % W != R) continue;
    std::vector<size_t> idx(order.begin() + static_cast<int64_t>(s),
                            order.begin() + static_cast<int64_t>(std::min(order.size(), s + bs)));
    const BertBatch b = make_finetune_batch(f, idx, model.head_labels(), false, model.config().max_position_embeddings);
    model.finetune_step(b, rng, StepArgs{.precision = prec});
    const auto& lg = model.head_logits();
    const size_t per_row = lg.size() / idx.size();
    if (W > 1) {
      mine.push_back(static_cast<float>(per_row));
      mine.insert(mine.end(), lg.begin(), lg.end());
      continue;
    }
    for (size_t r = 0; r < idx.size(); ++r)
      out[idx[r]].assign(lg.begin() + r * per_row, lg.begin() + (r + 1) * per_row);
  }
  if (W == 1) return check_finite(out);
  std::vector<float> all;
  std::vector<size_t> counts;
  comm.allgatherv(mine.data(), mine.size(), all, counts);
  std::vector<size_t> pos(W, 0);  // read position in each rank's part
  for (size_t r = 1; r < W; ++r) pos[r] = pos[r - 1] + counts[r - 1];
  for (size_t s = 0, j = 0; s < order.size(); s += bs, ++j) {
    size_t& p = pos[j % W];
    const size_t per_row = static_cast<size_t>(all[p++]);
    for (size_t i = s; i < std::min(order.size(), s + bs); ++i, p += per_row)
      out[order[i]].assign(all.begin() + static_cast<int64_t>(p), all.begin() + static_cast<int64_t>(p + per_row));
  }
  return check_finite(out);
}

namespace {

// Runs `fn(batch, rows)` over length-sorted batches of `f` (longest first), rows = feature indices.
template <class Fn>
void for_each_batch(const Bert& model, const std::vector<FtFeature>& f, int64_t batch_size, Fn fn) {
  std::vector<size_t> order(f.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return f[a].input_ids.size() > f[b].input_ids.size(); });
  const size_t bs = static_cast<size_t>(std::max<int64_t>(batch_size, 1));
  for (size_t s = 0; s < order.size(); s += bs) {
    const std::vector<size_t> idx(order.begin() + static_cast<ptrdiff_t>(s),
                                  order.begin() + static_cast<ptrdiff_t>(std::min(order.size(), s + bs)));
    fn(make_finetune_batch(f, idx, model.head_labels(), false, model.config().max_position_embeddings), idx);
  }
}

}  // namespace

std::vector<std::vector<float>> predict_embeddings(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                                   Precision prec) {
  const int64_t C = model.config().hidden_size;
  std::vector<std::vector<float>> out(f.size());
  Rng rng{0, 0};
  std::vector<float> buf;
  for_each_batch(model, f, batch_size, [&](const BertBatch& b, const std::vector<size_t>& idx) {
    model.encode(b, /*training=*/false, prec, rng, /*backward=*/false);
    const float* h = model.sequence_output_on_host(buf);
    for (size_t r = 0; r < idx.size(); ++r) {
      std::vector<float>& v = out[idx[r]];
      v.assign(static_cast<size_t>(2 * C), 0.0f);
      const float* row = h + static_cast<int64_t>(r) * b.T * C;
      std::copy(row, row + C, v.begin());  // [CLS]
      const int64_t L = static_cast<int64_t>(f[idx[r]].input_ids.size());
      std::vector<double> mean(static_cast<size_t>(C), 0.0);
      for (int64_t t = 0; t < L; ++t)
        for (int64_t c = 0; c < C; ++c) mean[static_cast<size_t>(c)] += row[t * C + c];
      for (int64_t c = 0; c < C; ++c)
        v[static_cast<size_t>(C + c)] = static_cast<float>(mean[static_cast<size_t>(c)] / L);
    }
  });
  return out;
}

std::vector<std::vector<float>> predict_hidden(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                               Precision prec) {
  const int64_t C = model.config().hidden_size;
  std::vector<std::vector<float>> out(f.size());
  Rng rng{0, 0};
  std::vector<float> hbuf, pbuf;
  for_each_batch(model, f, batch_size, [&](const BertBatch& b, const std::vector<size_t>& idx) {
    model.encode(b, /*training=*/false, prec, rng, /*backward=*/false);
    const float* h = model.sequence_output_on_host(hbuf);
    const float* p = model.pooled_output_on_host(pbuf);
    for (size_t r = 0; r < idx.size(); ++r) {
      const int64_t L = static_cast<int64_t>(f[idx[r]].input_ids.size());
      const float* row = h + static_cast<int64_t>(r) * b.T * C;
      std::vector<float>& v = out[idx[r]];
      v.assign(row, row + L * C);
      if (p) v.insert(v.end(), p + static_cast<int64_t>(r) * C, p + static_cast<int64_t>(r + 1) * C);
    }
  });
  return out;
}

std::vector<std::vector<float>> predict_masked(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                               Precision prec, int32_t mask_id) {
  BERTCC_CHECK(model.heads() == Heads::PreTraining,
               "fill-mask needs a model with its masked-LM head (BertForPreTraining)");
  const size_t V = static_cast<size_t>(model.config().vocab_size);
  std::vector<std::vector<float>> out(f.size());
  Rng rng{0, 0};
  std::vector<float> lg;  // [masked rows, V], on the host whatever the backend
  for_each_batch(model, f, batch_size, [&](BertBatch b, const std::vector<size_t>& idx) {
    b.mlm_labels.assign(b.input_ids.size(), -1);
    b.nsp_labels.assign(static_cast<size_t>(b.B), 0);
    for (size_t n = 0; n < b.input_ids.size(); ++n)
      if (b.input_ids[n] == mask_id && b.input_mask[n]) b.mlm_labels[n] = 0;  // any id: only the logits are used
    model.pretrain_step(b, rng, StepArgs{.precision = prec, .mlm_logits = &lg});
    size_t m = 0;  // masked rows come in token order, row by row
    for (size_t r = 0; r < idx.size(); ++r)
      for (int64_t t = 0; t < b.T; ++t)
        if (b.mlm_labels[r * static_cast<size_t>(b.T) + static_cast<size_t>(t)] != -1) {
          out[idx[r]].insert(out[idx[r]].end(), lg.begin() + static_cast<ptrdiff_t>(m * V),
                             lg.begin() + static_cast<ptrdiff_t>((m + 1) * V));
          ++m;
        }
  });
  return out;
}

std::vector<std::vector<std::string>> ner_predict(Bert& m, const NerFeatures& nf, const std::vector<NerSentence>& sents,
                                                  const std::vector<std::string>& labels, int64_t batch_size,
                                                  Precision prec) {
  return ner_decode(nf, sents, labels, predict_logits(m, nf.f, batch_size, prec));
}

std::vector<std::vector<std::string>> ner_decode(const NerFeatures& nf, const std::vector<NerSentence>& sents,
                                                 const std::vector<std::string>& labels,
                                                 const std::vector<std::vector<float>>& logits) {
  std::vector<std::vector<std::string>> out(sents.size());
  for (size_t i = 0; i < sents.size(); ++i) out[i].assign(sents[i].words.size(), "O");
  const size_t K = labels.size();
  for (size_t i = 0; i < nf.f.size(); ++i)
    for (size_t j = 0; j < nf.word_pos[i].size(); ++j) {
      const int32_t p = nf.word_pos[i][j];
      if (p < 0) continue;
      const size_t b = static_cast<size_t>(p) * K;
      out[nf.sentence[i]][nf.first_word[i] + j] = labels[static_cast<size_t>(argmax(logits[i], b, b + K))];
    }
  return out;
}

}  // namespace bertcc
