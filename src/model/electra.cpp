#include "bertcc/electra.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "model/parts.h"

namespace bertcc {

namespace {
const char* const kShared[] = {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
                               "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
                               "bert.embeddings.LayerNorm.bias"};
// The embedding tensors the generator and the discriminator share, kShared's, by reference.
std::array<ParamRef, 5> embedding_refs(const Bert& m) {
  const EncoderRefs& r = ModelParts::encoder(m).refs();
  return {r.word, r.position, r.token_type, r.emb_norm.g, r.emb_norm.b};
}
}  // namespace

BertConfig electra_generator_config(const BertConfig& disc, double fraction) {
  if (fraction <= 0) fraction = disc.hidden_size == 768 ? 1.0 / 3.0 : 0.25;
  BERTCC_CHECK(fraction <= 1, "--generator-hidden-size ", fraction, " must be in (0, 1]");
  BertConfig g = disc;
  g.model_type = "electra";
  g.hidden_size = static_cast<int>(std::max<long long>(1, std::llround(disc.hidden_size * fraction)));
  g.num_attention_heads = std::max(1, g.hidden_size / 64);
  BERTCC_CHECK(g.hidden_size % g.num_attention_heads == 0, "generator hidden size ", g.hidden_size,
               " is not a multiple of its ", g.num_attention_heads, " heads (choose another --generator-hidden-size)");
  g.intermediate_size = 4 * g.hidden_size;
  g.embedding_size = disc.embedding_dim();
  return g;
}

double electra_forward_flops(const BertConfig& disc, const BertConfig& gen, int64_t B, int64_t T, int64_t M) {
  const double N = static_cast<double>(B * T), E = disc.embedding_dim(), V = disc.vocab_size;
  auto encoder = [&](const BertConfig& c) {  // Bert::forward_flops without the pooler, plus embeddings_project
    const double C = c.hidden_size;
    return Bert::forward_flops(c, B, T, 0, false) - 2.0 * static_cast<double>(B) * C * C + (E != C ? 2 * N * E * C : 0);
  };
  const double Cd = disc.hidden_size, Cg = gen.hidden_size;
  return encoder(disc) + 2 * N * Cd * Cd + 2 * N * Cd + encoder(gen) + 2.0 * static_cast<double>(M) * (Cg * E + E * V);
}

void electra_share_embeddings(const Bert& disc, Bert& gen) {
  BERTCC_CHECK(&disc.backend() == &gen.backend(),
               "ELECTRA: the generator and the discriminator compute on different "
               "backends (",
               gen.backend().describe(), " and ", disc.backend().describe(), ")");
  for (const char* n : kShared) {
    const ParamEntry& d = disc.table().at(n);
    const ParamEntry& g = gen.table().at(n);
    BERTCC_CHECK(d.shape == g.shape, "ELECTRA: the generator's ", n,
                 " differs in shape from the discriminator's "
                 "(they share embeddings: same vocab_size, embedding_size, max_position_embeddings, type_vocab_size)");
    ModelWeights& gw = ModelParts::weights(gen);
    const ModelWeights& dw = ModelParts::weights(disc);
    gen.backend().copy(gw.params_on_backend() + g.offset, dw.w(dw.table().ref(n)), sizeof(float) * d.numel);
  }
}

ElectraLoss electra_step(Bert& gen, Bert& disc, const BertBatch& batch, Rng& rng, const ElectraStepOptions& so) {
  const bool training = so.training, backward = so.backward;
  const Precision prec = so.precision;
  const std::vector<float>* gumbel = so.gumbel;
  std::vector<int32_t>* sampled = so.sampled;
  const float disc_weight = so.disc_weight;
  BERTCC_CHECK(gen.heads() == Heads::Generator && disc.heads() == Heads::Discriminator,
               "ELECTRA step: needs an ElectraForMaskedLM generator and an ElectraForPreTraining discriminator");
  BERTCC_CHECK(&disc.backend() == &gen.backend(),
               "ELECTRA step: the generator and the discriminator compute on "
               "different backends");
  const int64_t V = gen.config().vocab_size, N = batch.B * batch.T;
  ElectraLoss out;
  // ---- generator: masked LM; replacements sampled from its logits (no gradient through them) ----
  // argmax(logits + Gumbel(0, 1)) per masked position: on the generator's backend from the counter
  // RNG (Backend::gumbel_argmax), or on the host from a given noise tensor (dump-step's batch file).
  std::vector<float> logits;
  std::vector<int32_t> pick;
  const PretrainLoss g = gen.pretrain_step(batch, rng,
                                           StepArgs{.training = training,
                                                    .backward = backward,
                                                    .precision = prec,
                                                    .loss_scale = so.loss_scale,
                                                    .mlm_denom = so.mlm_denom,
                                                    .mlm_logits = gumbel ? &logits : nullptr,
                                                    .gumbel_picks = gumbel ? nullptr : &pick});
  out.gen_loss = g.mlm_count > 0 ? g.mlm_loss_sum / static_cast<double>(g.mlm_count) : 0.0;
  out.gen_loss_sum = g.mlm_loss_sum;
  out.masked = g.mlm_count;
  out.gen_correct = g.mlm_correct;
  const int64_t M = g.mlm_count;
  BERTCC_CHECK(!gumbel || gumbel->size() == static_cast<size_t>(M * V), "ELECTRA step: Gumbel noise has ",
               gumbel ? gumbel->size() : 0, " values, expected masked tokens x vocab = ", M, " x ", V);
  BertBatch d = batch;  // the discriminator sees the original tokens with the masked ones replaced
  d.mlm_labels.clear();
  d.nsp_labels.clear();
  d.labels.assign(static_cast<size_t>(N), 0);
  std::vector<int64_t> at;  // the token index of each masked position
  for (int64_t n = 0; n < N; ++n)
    if (batch.mlm_labels[n] != -1) at.push_back(n);
  BERTCC_CHECK(static_cast<int64_t>(at.size()) == M, "ELECTRA step: ", at.size(),
               " masked labels but the generator counted ", M);
  if (gumbel) {
    pick.assign(at.size(), 0);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      const float* x = logits.data() + m * V;
      const float* gz = gumbel->data() + m * V;
      int32_t best = 0;
      double best_v = -INFINITY;
      for (int64_t v = 0; v < V; ++v) {
        const double s = static_cast<double>(x[v]) + static_cast<double>(gz[v]);
        if (s > best_v) {
          best_v = s;
          best = static_cast<int32_t>(v);
        }
      }
      pick[static_cast<size_t>(m)] = best;
    }
  }
  BERTCC_CHECK(pick.size() == at.size(), "ELECTRA step: ", pick.size(), " replacements for ", at.size(),
               " masked tokens");
  if (sampled) *sampled = pick;
  for (size_t m = 0; m < at.size(); ++m) {
    const int64_t n = at[m];
    d.input_ids[n] = pick[m];
    d.labels[n] = pick[m] != batch.mlm_labels[n];
  }
  // ---- discriminator: replaced-token detection, weighted ----
  const FinetuneLoss dl = disc.finetune_step(d, rng,
                                             StepArgs{.training = training,
                                                      .backward = backward,
                                                      .precision = prec,
                                                      .loss_scale = disc_weight * so.loss_scale,
                                                      .denom = so.disc_denom});
  out.disc_loss = dl.loss;
  out.disc_loss_sum = dl.loss * static_cast<double>(dl.count);
  out.tokens = dl.count;
  out.disc_correct = dl.correct;
  const auto& dlog = disc.head_logits();
  for (int64_t n = 0; n < N; ++n) {
    if (!batch.input_mask[n]) continue;
    out.replaced += d.labels[n];
    // head_logits holds logits until the next step (the discriminator's finetune_step keeps them)
    const bool pred = dlog[n] > 0;
    out.predicted_replaced += pred;
    out.replaced_hit += pred && d.labels[n];
  }
  out.loss = out.gen_loss + disc_weight * out.disc_loss;
  if (!backward) return out;
  // ---- shared embeddings: one gradient, in the discriminator ----
  Backend& be = disc.backend();
  ModelWeights &gw = ModelParts::weights(gen), &dw = ModelParts::weights(disc);
  const auto gr = embedding_refs(gen), dr = embedding_refs(disc);  // kShared's tensors, in its order
  for (size_t i = 0; i < gr.size(); ++i) {
    const ParamEntry& e = gen.table()[gr[i]];
    float* gg = gw.dgrad(gr[i]);
    be.add_rows(dw.dgrad(dr[i]), 0, gg, 0, 1, static_cast<int64_t>(e.numel));
    be.zero(gg, sizeof(float) * e.numel);
  }
  return out;
}

}  // namespace bertcc
