// ELECTRA pre-training (replaced-token detection): a small generator (ElectraForMaskedLM) fills the
// masked positions with tokens sampled from its softmax, and the discriminator (ElectraForPreTraining)
// learns which tokens were replaced. The two share their embeddings (word, position, token type and
// the embeddings' LayerNorm; each keeps its own embeddings_project); the loss is
// generator MLM loss + disc_weight (50) x discriminator loss, and no gradient flows through sampling.
#pragma once
#include <cstdint>
#include <vector>

#include "bertcc/bert.h"

namespace bertcc {

struct ElectraLoss {
  double loss = 0, gen_loss = 0, disc_loss = 0;        // means over this batch's masked / real tokens
  double gen_loss_sum = 0, disc_loss_sum = 0;          // the cross-entropy sums behind them
  int64_t masked = 0, gen_correct = 0;                 // generator: masked tokens, argmax == original
  int64_t tokens = 0, disc_correct = 0, replaced = 0;  // discriminator: attended tokens, right calls, replaced ones
  int64_t replaced_hit = 0, predicted_replaced = 0;    // true positives, positives (precision = hit / predicted)
};

// Google's generator for a discriminator: the same depth and embeddings, hidden size
// round(hidden x fraction) (fraction <= 0: Google's, 1/3 for hidden 768 (base), else 1/4), one
// attention head per 64, intermediate 4 x hidden.
BertConfig electra_generator_config(const BertConfig& disc, double fraction = 0);

// Forward FLOPs of one ELECTRA step (matrix products only, as Bert::forward_flops): generator
// encoder and MLM head on the M masked positions, discriminator encoder and head on every token.
double electra_forward_flops(const BertConfig& disc, const BertConfig& gen, int64_t B, int64_t T, int64_t M);

// The generator's shared embedding tensors take the discriminator's values (call after every update).
void electra_share_embeddings(const Bert& disc, Bert& gen);

// One ELECTRA step on `batch` (input_ids already masked, mlm_labels = original ids at the masked
// positions, -1 elsewhere). Replacements are argmax(logits + Gumbel noise) at each masked position;
// the noise comes from `gumbel` ([masked, vocab] in token order) when given, else from `rng`. A
// sampled token equal to the original counts as original. With `backward`, gradients are added into
// both models; the shared embeddings' gradient ends in the discriminator's (the generator's copy is
// zeroed). `sampled` receives the sampled ids.
//
// Gradient accumulation and data parallelism: `mlm_denom` / `disc_denom` > 0 replace the batch's own
// masked / real token counts as the normalisers of the two losses (the global counts of a step),
// and `loss_scale` multiplies both gradients (fp16).
struct ElectraStepOptions {
  bool training = false;  // dropout on
  bool backward = false;  // the gradients added into both models'
  Precision precision = Precision::F32;
  float disc_weight = 50.0f;
  float loss_scale = 1.0f, mlm_denom = 0.0f, disc_denom = 0.0f;
  const std::vector<float>* gumbel = nullptr;
  std::vector<int32_t>* sampled = nullptr;
};
ElectraLoss electra_step(Bert& gen, Bert& disc, const BertBatch& batch, Rng& rng, const ElectraStepOptions& so);

}  // namespace bertcc
