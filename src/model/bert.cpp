#include "bertcc/bert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

namespace bertcc {

using namespace kernels;

// ---------------------------------------------------------------------------------------------
// Parameter table. Q, K and V weights are adjacent (one [3C,C] block) and so are their biases,
// so the QKV projection is a single GEMM while each tensor keeps its HF name.
// ---------------------------------------------------------------------------------------------
// ELECTRA uses the same internal names (its electra.* tensors are renamed at load and save) and
// adds bert.embeddings_project when its embeddings are narrower or wider than the encoder.
static void build_table(ParamTable& t, const BertConfig& c, Heads heads) {
  const int64_t V = c.vocab_size, C = c.hidden_size, I = c.intermediate_size, E = c.embedding_dim();
  BERTCC_CHECK(!c.electra() || heads != Heads::PreTraining, "config: ELECTRA has no BertForPreTraining heads "
               "(its pre-training uses ElectraForPreTraining and ElectraForMaskedLM)");
  BERTCC_CHECK((heads != Heads::Discriminator && heads != Heads::Generator) || c.electra(),
               "config: the ELECTRA heads need model_type 'electra'");
  const std::string e = "bert.embeddings.";
  t.add(e + "word_embeddings.weight", {V, E}, true);
  t.add(e + "position_embeddings.weight", {c.max_position_embeddings, E}, true);
  t.add(e + "token_type_embeddings.weight", {c.type_vocab_size, E}, true);
  t.add(e + "LayerNorm.weight", {E}, false);
  t.add(e + "LayerNorm.bias", {E}, false);
  if (E != C) {
    t.add("bert.embeddings_project.weight", {C, E}, true);
    t.add("bert.embeddings_project.bias", {C}, false);
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    for (const char* n : {"query", "key", "value"}) t.add(p + "attention.self." + n + ".weight", {C, C}, true);
    for (const char* n : {"query", "key", "value"}) t.add(p + "attention.self." + n + ".bias", {C}, false);
    t.add(p + "attention.output.dense.weight", {C, C}, true);
    t.add(p + "attention.output.dense.bias", {C}, false);
    t.add(p + "attention.output.LayerNorm.weight", {C}, false);
    t.add(p + "attention.output.LayerNorm.bias", {C}, false);
    t.add(p + "intermediate.dense.weight", {I, C}, true);
    t.add(p + "intermediate.dense.bias", {I}, false);
    t.add(p + "output.dense.weight", {C, I}, true);
    t.add(p + "output.dense.bias", {C}, false);
    t.add(p + "output.LayerNorm.weight", {C}, false);
    t.add(p + "output.LayerNorm.bias", {C}, false);
  }
  if (has_pooler(heads) && !c.electra()) {
    t.add("bert.pooler.dense.weight", {C, C}, true);
    t.add("bert.pooler.dense.bias", {C}, false);
  }
  const int64_t K = c.num_labels();
  if (heads == Heads::QuestionAnswering) {
    t.add("qa_outputs.weight", {2, C}, true);
    t.add("qa_outputs.bias", {2}, false);
  }
  if (heads == Heads::JointQuestionAnswering) {  // XLNet's PoolerStartLogits / PoolerEndLogits / PoolerAnswerClass
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
  if (heads == Heads::SequenceClassification || heads == Heads::TokenClassification)
    BERTCC_CHECK(K > 0, "config: a classification model needs num_labels/id2label");
  if (heads == Heads::SequenceClassification && c.electra()) {  // HF ElectraClassificationHead
    t.add("classifier.dense.weight", {C, C}, true);
    t.add("classifier.dense.bias", {C}, false);
    t.add("classifier.out_proj.weight", {K, C}, true);
    t.add("classifier.out_proj.bias", {K}, false);
  } else if (heads == Heads::SequenceClassification || heads == Heads::TokenClassification) {
    t.add("classifier.weight", {K, C}, true);
    t.add("classifier.bias", {K}, false);
  }
  if (heads == Heads::Discriminator) {  // HF ElectraDiscriminatorPredictions
    t.add("discriminator_predictions.dense.weight", {C, C}, true);
    t.add("discriminator_predictions.dense.bias", {C}, false);
    t.add("discriminator_predictions.dense_prediction.weight", {1, C}, true);
    t.add("discriminator_predictions.dense_prediction.bias", {1}, false);
  }
  if (heads == Heads::Generator) {  // HF ElectraGeneratorPredictions + generator_lm_head (tied weight)
    t.add("generator_predictions.dense.weight", {E, C}, true);
    t.add("generator_predictions.dense.bias", {E}, false);
    t.add("generator_predictions.LayerNorm.weight", {E}, false);
    t.add("generator_predictions.LayerNorm.bias", {E}, false);
    t.add("generator_lm_head.bias", {V}, false);
  }
  if (heads == Heads::PreTraining) {
    BERTCC_CHECK(E == C, "config: BERT pre-training heads need embedding_size == hidden_size");
    t.add("cls.predictions.transform.dense.weight", {C, C}, true);
    t.add("cls.predictions.transform.dense.bias", {C}, false);
    t.add("cls.predictions.transform.LayerNorm.weight", {C}, false);
    t.add("cls.predictions.transform.LayerNorm.bias", {C}, false);
    t.add("cls.predictions.bias", {V}, false);
    t.add("cls.seq_relationship.weight", {2, C}, true);
    t.add("cls.seq_relationship.bias", {2}, false);
  }
}

const char* architecture_name(Heads h) {
  switch (h) {
    case Heads::None: return "BertModel";
    case Heads::PreTraining: return "BertForPreTraining";
    case Heads::QuestionAnswering: return "BertForQuestionAnswering";
    case Heads::JointQuestionAnswering: return "BertForQuestionAnsweringJoint";
    case Heads::SequenceClassification: return "BertForSequenceClassification";
    case Heads::TokenClassification: return "BertForTokenClassification";
    case Heads::Discriminator: return "ElectraForPreTraining";
    case Heads::Generator: return "ElectraForMaskedLM";
  }
  return "BertModel";
}

std::string architecture_name(Heads h, bool electra) {
  if (!electra) return architecture_name(h);
  switch (h) {
    case Heads::None: return "ElectraModel";
    case Heads::Discriminator: return "ElectraForPreTraining";
    case Heads::Generator: return "ElectraForMaskedLM";
    default: return "Electra" + std::string(architecture_name(h)).substr(4);  // BertForX -> ElectraForX
  }
}

bool has_pooler(Heads h) {
  return h != Heads::QuestionAnswering && h != Heads::JointQuestionAnswering && h != Heads::TokenClassification &&
         h != Heads::Discriminator &&
         h != Heads::Generator;
}

void BertBatch::validate(const BertConfig& c, const std::string& where) const {
  const size_t n = static_cast<size_t>(B * T);
  BERTCC_CHECK(B > 0 && T > 0, where, ": empty batch");
  BERTCC_CHECK(input_ids.size() == n && segment_ids.size() == n && input_mask.size() == n, where,
               ": input_ids/segment_ids/input_mask must all be [", B, ",", T, "]");
  BERTCC_CHECK(T <= c.max_position_embeddings, where, ": sequence length ", T, " exceeds max_position_embeddings ",
               c.max_position_embeddings);
  for (size_t i = 0; i < n; ++i) {
    BERTCC_CHECK(input_ids[i] >= 0 && input_ids[i] < c.vocab_size, where, ": input_ids[", i / T, "][", i % T,
                 "] = ", input_ids[i], " is outside the vocabulary (size ", c.vocab_size, ")");
    BERTCC_CHECK(segment_ids[i] >= 0 && segment_ids[i] < c.type_vocab_size, where, ": segment_ids[", i / T, "][", i % T,
                 "] = ", segment_ids[i], " is outside [0, ", c.type_vocab_size, ")");
    BERTCC_CHECK(input_mask[i] == 0 || input_mask[i] == 1, where, ": input_mask[", i / T, "][", i % T,
                 "] must be 0 or 1");
  }
  if (!mlm_labels.empty()) {
    BERTCC_CHECK(mlm_labels.size() == n, where, ": masked-LM labels must be [", B, ",", T, "]");
    for (size_t i = 0; i < n; ++i)
      BERTCC_CHECK(mlm_labels[i] == -1 || (mlm_labels[i] >= 0 && mlm_labels[i] < c.vocab_size), where,
                   ": masked_lm_ids value ", mlm_labels[i], " (row ", i / T, ", position ", i % T,
                   ") is outside the vocabulary");
  }
  if (!nsp_labels.empty()) {
    BERTCC_CHECK(nsp_labels.size() == static_cast<size_t>(B), where, ": next_sentence_labels must be [", B, "]");
    for (int64_t b = 0; b < B; ++b)
      BERTCC_CHECK(nsp_labels[b] == 0 || nsp_labels[b] == 1, where, ": next_sentence_labels[", b, "] = ", nsp_labels[b],
                   " must be 0 or 1");
  }
}

// ---------------------------------------------------------------------------------------------
// Activation arena: every tensor the backward pass needs, sized from (config, B, T), plus
// scratch shared by all layers. Rebuilt only when (B, T) changes.
// ---------------------------------------------------------------------------------------------
struct Bert::Acts {
  int64_t B = 0, T = 0;
  bool attention_dropout = false;  // probs also hold the dropped-out probabilities
  Precision prec = Precision::F32;  // ... in bf16 for bf16 GEMMs (half the slot)
  std::vector<float> arena;
  std::vector<float> mask_add;           // [B,T]
  float *emb_sum, *emb_mean, *emb_rstd;  // [N,E], [N], [N]
  float *emb_out, *demb_a, *demb_b, *demb_c;  // [N,E]: embeddings before the projection; their gradients
  std::vector<float*> x;                 // L+1 of [N,C]: layer inputs/outputs
  struct Layer {
    float *qkv, *probs, *ctx, *ln1_sum, *ln1_mean, *ln1_rstd, *h1, *inter, *gelu, *ln2_sum, *ln2_mean, *ln2_rstd;
    uint64_t seed_attn_out = 0, seed_ffn_out = 0;  // hidden dropout sites, regenerated in backward
  };
  std::vector<Layer> layers;
  uint64_t seed_emb = 0;
  bool dropout = false;
  uint64_t rng_seed = 0;  // dropout masks are regenerated from (rng_seed, per-site base)
  // pooler: cls [B,C], pooled_pre [B,C], pooled [B,C]
  float *cls, *pooled;
  // scratch
  float *att_work, *tmp_c, *g, *d1, *d2, *dh, *dc, *dqkv, *di, *di2, *dcls, *dpool;
  // pre-training heads: sized by the number of masked positions, reused across steps
  struct Head {
    std::vector<int64_t> rows;
    std::vector<int32_t> labels;
    std::vector<float> hm, t1, tg, tl, tmean, trstd, logits, losses, dtl, dtg, dt1, dhm, dseq, dpooled, nsp, nsp_losses;
  } head;
};

Bert::Bert(const BertConfig& config, Heads heads) : cfg_(config), heads_(heads) {
  cfg_.validate("config");
  pooler_ = has_pooler(heads_) && !cfg_.electra();
  build_table(table_, cfg_, heads_);
  check_memory(8.0 * static_cast<double>(table_.total()),
               "the weights and gradients of this model (" + std::to_string(table_.total()) + " parameters)",
               "check the config's sizes");
  params_.assign(table_.total(), 0.0f);
  grads_.assign(table_.total(), 0.0f);
}

Bert::~Bert() = default;

void Bert::init_weights(uint64_t seed) {
  params16_valid_ = false;
  Rng rng{seed, 0};
  for (const auto& e : table_.entries()) {
    float* p = params_.data() + e.offset;
    const bool is_ln_weight = e.name.find("LayerNorm.weight") != std::string::npos;
    if (e.shape.size() == 2) {
      for (size_t i = 0; i < e.numel; ++i) p[i] = cfg_.initializer_range * rng.next_normal();
    } else {
      std::fill(p, p + e.numel, is_ln_weight ? 1.0f : 0.0f);
    }
  }
  float* wte = param("bert.embeddings.word_embeddings.weight");
  std::fill(wte, wte + cfg_.embedding_dim(), 0.0f);  // padding_idx = 0, as HF initialises it
}

void Bert::freeze_below_top_layers(int layers) {
  const int L = cfg_.num_hidden_layers;
  first_trainable_layer_ = layers < 0 ? 0 : std::max(0, L - layers);
  embeddings_frozen_ = layers >= 0;
  for (const auto& e : table_.entries()) {
    bool frozen = false;
    if (embeddings_frozen_ && (e.name.rfind("bert.embeddings.", 0) == 0 || e.name.rfind("bert.embeddings_project.", 0) == 0))
      frozen = true;
    const std::string lp = "bert.encoder.layer.";
    if (e.name.rfind(lp, 0) == 0) frozen = std::stoi(e.name.substr(lp.size())) < first_trainable_layer_;
    table_.set_trainable(e.name, !frozen);
  }
}

void Bert::set_layerwise_lr_decay(float decay) {
  BERTCC_CHECK(decay > 0 && decay <= 1, "--layerwise-lr-decay must be in (0, 1], got ", decay);
  const int L = cfg_.num_hidden_layers;
  const std::string lp = "bert.encoder.layer.";
  for (const auto& e : table_.entries()) {
    int depth = L + 2;
    if (e.name.rfind("bert.embeddings.", 0) == 0 || e.name.rfind("bert.embeddings_project.", 0) == 0) depth = 0;
    if (e.name.rfind(lp, 0) == 0) depth = std::stoi(e.name.substr(lp.size())) + 1;
    table_.set_lr_scale(e.name, static_cast<float>(std::pow(static_cast<double>(decay), L + 2 - depth)));
  }
}

void Bert::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void Bert::refresh_bf16(Precision p) {
  if (p != Precision::BF16 || params16_valid_) return;
  params16_.resize(params_.size());
  to_bf16(params_.data(), params16_.data(), params_.size());
  params16_valid_ = true;
}

// The activation arena's slices for (B, T): (where the slice pointer goes, floats). Returns the
// arena's size in floats (64-byte aligned slices).
int64_t Bert::plan_acts(Acts& a, const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec,
                        std::vector<std::pair<float**, int64_t>>& plan) {
  const int64_t N = B * T, C = cfg.hidden_size, I = cfg.intermediate_size, NH = cfg.num_attention_heads;
  const int64_t L = cfg.num_hidden_layers, E = cfg.embedding_dim();
  a.x.assign(L + 1, nullptr);
  a.layers.assign(L, {});
  plan.push_back({&a.emb_sum, N * E});
  for (float** p : {&a.emb_out, &a.demb_a, &a.demb_b, &a.demb_c}) plan.push_back({p, E != C ? N * E : 0});
  plan.push_back({&a.emb_mean, N});
  plan.push_back({&a.emb_rstd, N});
  for (int64_t l = 0; l <= L; ++l) plan.push_back({&a.x[l], N * C});
  for (auto& ly : a.layers) {
    plan.push_back({&ly.qkv, N * 3 * C});
    plan.push_back({&ly.probs, attention_saved_size(B, T, NH, attention_dropout, prec)});
    plan.push_back({&ly.ctx, N * C});
    plan.push_back({&ly.ln1_sum, N * C});
    plan.push_back({&ly.ln1_mean, N});
    plan.push_back({&ly.ln1_rstd, N});
    plan.push_back({&ly.h1, N * C});
    plan.push_back({&ly.inter, N * I});
    plan.push_back({&ly.gelu, N * I});
    plan.push_back({&ly.ln2_sum, N * C});
    plan.push_back({&ly.ln2_mean, N});
    plan.push_back({&ly.ln2_rstd, N});
  }
  plan.push_back({&a.cls, B * C});
  plan.push_back({&a.pooled, B * C});
  plan.push_back({&a.att_work, attention_work_size(B, T, C, NH)});
  for (float** p : {&a.tmp_c, &a.g, &a.d1, &a.d2, &a.dh, &a.dc}) plan.push_back({p, N * C});
  plan.push_back({&a.dqkv, N * 3 * C});
  plan.push_back({&a.di, N * I});
  plan.push_back({&a.di2, N * I});
  plan.push_back({&a.dcls, B * C});
  plan.push_back({&a.dpool, B * C});
  int64_t total = 0;
  for (auto& [p, n] : plan) total += (n + 15) / 16 * 16;
  return total;
}

double Bert::activation_bytes(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec) {
  Acts a;
  std::vector<std::pair<float**, int64_t>> plan;
  return 4.0 * static_cast<double>(plan_acts(a, cfg, B, T, attention_dropout, prec, plan)) + 4.0 * B * T;
}

void Bert::ensure_acts(int64_t B, int64_t T, bool attention_dropout, Precision prec) {
  if (acts_ && acts_->B == B && acts_->T == T && acts_->attention_dropout == attention_dropout && acts_->prec == prec)
    return;
  // The arena only grows: batches of varying length (fine-tuning pads each batch to its longest
  // row) re-carve the same memory instead of reallocating and faulting in fresh pages.
  if (!acts_) acts_ = std::make_unique<Acts>();
  Acts& a = *acts_;
  a.B = B;
  a.T = T;
  a.attention_dropout = attention_dropout;
  a.prec = prec;
  std::vector<std::pair<float**, int64_t>> plan;  // count first, then carve (one allocation)
  const int64_t total = plan_acts(a, cfg_, B, T, attention_dropout, prec, plan);
  if (a.arena.size() < static_cast<size_t>(total)) {
    a.arena.clear();
    a.arena.shrink_to_fit();
    try {
      check_memory(4.0 * static_cast<double>(total),
                   "the activations of a batch of " + std::to_string(B) + " x " + std::to_string(T) + " tokens",
                   "use a smaller batch (or more gradient accumulation) or a shorter sequence");
    } catch (...) {
      a.B = a.T = 0;  // no arena: the next call carves again
      throw;
    }
    a.arena.assign(static_cast<size_t>(total), 0.0f);
  }
  int64_t off = 0;
  for (auto& [p, n] : plan) {
    *p = a.arena.data() + off;
    off += (n + 15) / 16 * 16;
  }
  a.mask_add.assign(static_cast<size_t>(B * T), 0.0f);
}

void Bert::reserve_activations(int64_t B, int64_t T, Precision prec) {
  ensure_acts(B, T, cfg_.attention_probs_dropout_prob > 0, prec);
}

const std::vector<float>& Bert::mlm_logits() const {
  BERTCC_CHECK(acts_, "mlm_logits: no forward pass yet");
  return acts_->head.logits;
}

const float* Bert::sequence_output() const { return acts_->x.back(); }
const float* Bert::pooled_output() const { return pooler_ ? acts_->pooled : nullptr; }

void Bert::encode(const BertBatch& batch, bool training, Precision prec, Rng& rng) {
  const int64_t B = batch.B, T = batch.T, N = B * T;
  const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, NH = cfg_.num_attention_heads;
  const float p_h = training ? cfg_.hidden_dropout_prob : 0.0f;
  const float p_a = training ? cfg_.attention_probs_dropout_prob : 0.0f;
  ensure_acts(B, T, p_a > 0, prec);
  refresh_bf16(prec);
  batch_ids_ = batch.input_ids;
  batch_seg_ = batch.segment_ids;
  Acts& a = *acts_;
  a.dropout = training;
  a.rng_seed = rng.seed;
  const Activation act = cfg_.activation();
  const float eps = cfg_.layer_norm_eps;
  for (int64_t i = 0; i < N; ++i) a.mask_add[i] = (1.0f - static_cast<float>(batch.input_mask[i])) * -10000.0f;

  // embeddings -> LayerNorm -> dropout [-> embeddings_project (ELECTRA, embedding_size != hidden)]
  const int64_t E = cfg_.embedding_dim();
  const bool project = E != C;
  float* emb = project ? a.emb_out : a.x[0];
  embeddings_forward(a.emb_sum, batch.input_ids.data(), batch.segment_ids.data(),
                     w("bert.embeddings.word_embeddings.weight"), w("bert.embeddings.position_embeddings.weight"),
                     w("bert.embeddings.token_type_embeddings.weight"), B, T, E);
  layernorm_forward(emb, a.emb_mean, a.emb_rstd, a.emb_sum, w("bert.embeddings.LayerNorm.weight"),
                    w("bert.embeddings.LayerNorm.bias"), N, E, eps);
  if (p_h > 0) {
    a.seed_emb = rng.reserve(N * E);
    dropout_forward(emb, emb, N * E, p_h, rng, a.seed_emb);
  }
  if (project)
    linear_forward(a.x[0], a.emb_out, w("bert.embeddings_project.weight"), w("bert.embeddings_project.bias"), N, C, E,
                   prec, w16("bert.embeddings_project.weight", prec));

  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    Acts::Layer& ly = a.layers[l];
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    const float* xin = a.x[l];
    linear_forward(ly.qkv, xin, w(p + "attention.self.query.weight"), w(p + "attention.self.query.bias"), N, 3 * C, C,
                   prec, w16(p + "attention.self.query.weight", prec));
    const uint64_t seed_att = p_a > 0 ? rng.reserve(B * NH * T * T) : 0;  // Pd is saved: backward needs no seed
    attention_forward(ly.ctx, ly.probs, a.att_work, ly.qkv, a.mask_add.data(), B, T, C, NH, p_a, rng, seed_att,
                      prec);
    linear_forward(a.tmp_c, ly.ctx, w(p + "attention.output.dense.weight"), w(p + "attention.output.dense.bias"), N, C,
                   C, prec, w16(p + "attention.output.dense.weight", prec));
    if (p_h > 0) {
      ly.seed_attn_out = rng.reserve(N * C);
      dropout_forward(a.tmp_c, a.tmp_c, N * C, p_h, rng, ly.seed_attn_out);
    }
    residual_layernorm_forward(ly.h1, ly.ln1_sum, ly.ln1_mean, ly.ln1_rstd, a.tmp_c, xin,
                               w(p + "attention.output.LayerNorm.weight"), w(p + "attention.output.LayerNorm.bias"), N,
                               C, eps);
    linear_forward(ly.inter, ly.h1, w(p + "intermediate.dense.weight"), w(p + "intermediate.dense.bias"), N, I, C, prec,
                   w16(p + "intermediate.dense.weight", prec));
    gelu_forward(ly.gelu, ly.inter, N * I, act);
    linear_forward(a.tmp_c, ly.gelu, w(p + "output.dense.weight"), w(p + "output.dense.bias"), N, C, I, prec,
                   w16(p + "output.dense.weight", prec));
    if (p_h > 0) {
      ly.seed_ffn_out = rng.reserve(N * C);
      dropout_forward(a.tmp_c, a.tmp_c, N * C, p_h, rng, ly.seed_ffn_out);
    }
    residual_layernorm_forward(a.x[l + 1], ly.ln2_sum, ly.ln2_mean, ly.ln2_rstd, a.tmp_c, ly.h1,
                               w(p + "output.LayerNorm.weight"), w(p + "output.LayerNorm.bias"), N, C, eps);
  }

  // pooler: tanh(dense(h[:, 0]))
  if (!pooler_) return;
  for (int64_t b = 0; b < B; ++b) std::memcpy(a.cls + b * C, a.x.back() + b * T * C, sizeof(float) * C);
  linear_forward(a.pooled, a.cls, w("bert.pooler.dense.weight"), w("bert.pooler.dense.bias"), B, C, C, prec,
                 w16("bert.pooler.dense.weight", prec));
  tanh_forward(a.pooled, a.pooled, B * C);
}

void Bert::encode_backward(const float* dseq, const float* dpooled, Precision prec) {
  Acts& a = *acts_;
  const int64_t B = a.B, T = a.T, N = B * T;
  const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, NH = cfg_.num_attention_heads;
  const Activation act = cfg_.activation();
  const float p_h = a.dropout ? cfg_.hidden_dropout_prob : 0.0f;
  const float p_a = a.dropout ? cfg_.attention_probs_dropout_prob : 0.0f;
  const Rng rng{a.rng_seed, 0};

  // g = d(sequence output)
  if (dseq)
    std::memcpy(a.g, dseq, sizeof(float) * N * C);
  else
    std::fill(a.g, a.g + N * C, 0.0f);
  if (dpooled) {
    BERTCC_CHECK(pooler_, "encode_backward: this model has no pooler");
    // pooled = tanh(cls W^T + b); cls = h[:, 0]
    std::fill(a.dpool, a.dpool + B * C, 0.0f);
    tanh_backward(a.dpool, a.pooled, dpooled, B * C);
    std::fill(a.dcls, a.dcls + B * C, 0.0f);
    linear_backward(a.dcls, grad("bert.pooler.dense.weight"), grad("bert.pooler.dense.bias"), a.dpool, a.cls,
                    w("bert.pooler.dense.weight"), B, C, C, prec, w16("bert.pooler.dense.weight", prec));
    for (int64_t b = 0; b < B; ++b) {
      float* gr = a.g + b * T * C;
      for (int64_t c = 0; c < C; ++c) gr[c] += a.dcls[b * C + c];
    }
    if (grad_ready_) grad_ready_(table_.at("bert.pooler.dense.weight").offset);
  }

  for (int l = cfg_.num_hidden_layers - 1; l >= first_trainable_layer_; --l) {
    Acts::Layer& ly = a.layers[l];
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    // x[l+1] = LN2(dropout(ffn_out) + h1)
    std::fill(a.d1, a.d1 + N * C, 0.0f);
    layernorm_backward(a.d1, grad(p + "output.LayerNorm.weight"), grad(p + "output.LayerNorm.bias"), a.g, ly.ln2_sum,
                       w(p + "output.LayerNorm.weight"), ly.ln2_mean, ly.ln2_rstd, N, C);
    std::memcpy(a.dh, a.d1, sizeof(float) * N * C);  // residual branch into h1
    const float* dffn = a.d1;
    if (p_h > 0) {
      std::fill(a.d2, a.d2 + N * C, 0.0f);
      dropout_backward(a.d2, a.d1, N * C, p_h, rng, ly.seed_ffn_out);
      dffn = a.d2;
    }
    // ffn_out = gelu W2^T + b2
    std::fill(a.di, a.di + N * I, 0.0f);
    linear_backward(a.di, grad(p + "output.dense.weight"), grad(p + "output.dense.bias"), dffn, ly.gelu,
                    w(p + "output.dense.weight"), N, C, I, prec, w16(p + "output.dense.weight", prec));
    std::fill(a.di2, a.di2 + N * I, 0.0f);
    gelu_backward(a.di2, ly.inter, a.di, N * I, act);
    // inter = h1 W1^T + b1
    linear_backward(a.dh, grad(p + "intermediate.dense.weight"), grad(p + "intermediate.dense.bias"), a.di2, ly.h1,
                    w(p + "intermediate.dense.weight"), N, I, C, prec, w16(p + "intermediate.dense.weight", prec));
    // h1 = LN1(dropout(attn_out) + x[l])
    std::fill(a.d1, a.d1 + N * C, 0.0f);
    layernorm_backward(a.d1, grad(p + "attention.output.LayerNorm.weight"), grad(p + "attention.output.LayerNorm.bias"),
                       a.dh, ly.ln1_sum, w(p + "attention.output.LayerNorm.weight"), ly.ln1_mean, ly.ln1_rstd, N, C);
    std::memcpy(a.g, a.d1, sizeof(float) * N * C);  // residual branch into x[l]
    const float* dattn = a.d1;
    if (p_h > 0) {
      std::fill(a.d2, a.d2 + N * C, 0.0f);
      dropout_backward(a.d2, a.d1, N * C, p_h, rng, ly.seed_attn_out);
      dattn = a.d2;
    }
    std::fill(a.dc, a.dc + N * C, 0.0f);
    linear_backward(a.dc, grad(p + "attention.output.dense.weight"), grad(p + "attention.output.dense.bias"), dattn,
                    ly.ctx, w(p + "attention.output.dense.weight"), N, C, C, prec,
                    w16(p + "attention.output.dense.weight", prec));
    attention_backward(a.dqkv, a.att_work, a.dc, ly.qkv, ly.probs, B, T, C, NH, p_a, prec);
    // qkv = x[l] Wqkv^T + bqkv   (Q/K/V weights and biases are adjacent in the flat buffers)
    linear_backward(a.g, grad(p + "attention.self.query.weight"), grad(p + "attention.self.query.bias"), a.dqkv, a.x[l],
                    w(p + "attention.self.query.weight"), N, 3 * C, C, prec,
                    w16(p + "attention.self.query.weight", prec));
    if (grad_ready_) grad_ready_(table_.at(p + "attention.self.query.weight").offset);  // the layer's first tensor
  }

  if (embeddings_frozen_) {  // no gradient for frozen embeddings
    if (grad_ready_) grad_ready_(0);
    return;
  }
  // x[0] = [project(] dropout(LN(emb_sum)) [)]
  const int64_t E = cfg_.embedding_dim();
  const bool project = E != C;
  float* da = project ? a.demb_a : nullptr;  // scratch [N,E] (the encoder's [N,C] ones when E == C)
  float* db = project ? a.demb_b : a.d2;
  float* dc = project ? a.demb_c : a.d1;
  const float* dx0 = a.g;
  if (project) {
    std::fill(da, da + N * E, 0.0f);
    linear_backward(da, grad("bert.embeddings_project.weight"), grad("bert.embeddings_project.bias"), a.g, a.emb_out,
                    w("bert.embeddings_project.weight"), N, C, E, prec, w16("bert.embeddings_project.weight", prec));
    dx0 = da;
  }
  if (p_h > 0) {
    std::fill(db, db + N * E, 0.0f);
    dropout_backward(db, dx0, N * E, p_h, rng, a.seed_emb);
    dx0 = db;
  }
  std::fill(dc, dc + N * E, 0.0f);
  layernorm_backward(dc, grad("bert.embeddings.LayerNorm.weight"), grad("bert.embeddings.LayerNorm.bias"), dx0,
                     a.emb_sum, w("bert.embeddings.LayerNorm.weight"), a.emb_mean, a.emb_rstd, N, E);
  // HF's nn.Embedding(padding_idx=pad) gives the padding row no gradient from the lookup.
  float* dwte = grad("bert.embeddings.word_embeddings.weight");
  std::vector<float> pad_row(dwte, dwte + E);
  embeddings_backward(dwte, grad("bert.embeddings.position_embeddings.weight"),
                      grad("bert.embeddings.token_type_embeddings.weight"), dc, batch_ids_.data(), batch_seg_.data(),
                      B, T, E, cfg_.vocab_size, cfg_.type_vocab_size);
  std::copy(pad_row.begin(), pad_row.end(), dwte);
  if (grad_ready_) grad_ready_(0);
}

PretrainLoss Bert::pretrain_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                 float loss_scale, float mlm_denom, float nsp_denom, std::vector<float>* mlm_logits_out) {
  BERTCC_CHECK(heads_ == Heads::PreTraining || heads_ == Heads::Generator, "pretrain_step: model has no pre-training heads");
  const bool nsp = heads_ == Heads::PreTraining;  // ELECTRA's generator: masked LM only
  BERTCC_CHECK(batch.mlm_labels.size() == batch.input_ids.size() && (!nsp || batch.nsp_labels.size() == size_t(batch.B)),
               "pretrain_step: batch has no masked-LM or next-sentence labels");
  const int64_t B = batch.B, T = batch.T, N = B * T;
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  encode(batch, training, prec, rng);
  // The MLM head: BERT's cls.predictions (transform to the hidden width, activation from the
  // config) or ELECTRA's generator_predictions + generator_lm_head (to embedding_size; HF fixes its
  // activation to gelu). Both decode with the word embeddings.
  const Activation act = nsp ? cfg_.activation() : Activation::GeluErf;
  const int64_t Eh = nsp ? C : cfg_.embedding_dim();
  const std::string dense = nsp ? "cls.predictions.transform.dense" : "generator_predictions.dense";
  const std::string lnorm = nsp ? "cls.predictions.transform.LayerNorm" : "generator_predictions.LayerNorm";
  const std::string obias = nsp ? "cls.predictions.bias" : "generator_lm_head.bias";
  PretrainLoss out;
  if (mlm_logits_out) mlm_logits_out->clear();

  // ---- MLM head on the masked positions only ----
  Acts::Head& h = acts_->head;
  h.rows.clear();
  h.labels.clear();
  for (int64_t n = 0; n < N; ++n)
    if (batch.mlm_labels[n] != -1) {
      h.rows.push_back(n);
      h.labels.push_back(batch.mlm_labels[n]);
    }
  const int64_t M = static_cast<int64_t>(h.rows.size());
  out.mlm_count = M;
  if (M > 0) {
    h.hm.resize(M * C);
    for (auto* v : {&h.t1, &h.tg, &h.tl}) v->resize(M * Eh);
    h.tmean.resize(M);
    h.trstd.resize(M);
    h.logits.resize(M * V);  // overwritten in place by its own gradient: no separate probabilities
    h.losses.resize(M);
    gather_rows(h.hm.data(), sequence_output(), h.rows.data(), M, C);
    linear_forward(h.t1.data(), h.hm.data(), w(dense + ".weight"), w(dense + ".bias"), M, Eh, C, prec,
                   w16(dense + ".weight", prec));
    gelu_forward(h.tg.data(), h.t1.data(), M * Eh, act);
    layernorm_forward(h.tl.data(), h.tmean.data(), h.trstd.data(), h.tg.data(), w(lnorm + ".weight"), w(lnorm + ".bias"),
                      M, Eh, cfg_.layer_norm_eps);
    linear_forward(h.logits.data(), h.tl.data(), w("bert.embeddings.word_embeddings.weight"), w(obias), M, V, Eh, prec,
                   w16("bert.embeddings.word_embeddings.weight", prec));
    if (mlm_logits_out) mlm_logits_out->assign(h.logits.begin(), h.logits.end());
    softmax_xent_forward_backward(h.logits.data(), h.losses.data(), h.labels.data(), M, V, -1,
                                  backward ? loss_scale / (mlm_denom > 0 ? mlm_denom : static_cast<float>(M)) : 0.0f,
                                  &out.mlm_correct);
    double s = 0;
    for (int64_t m = 0; m < M; ++m) s += h.losses[m];
    out.mlm_loss_sum = s;
    out.mlm_loss = s / static_cast<double>(M);
  }

  if (!nsp) {  // ELECTRA's generator
    out.loss = out.mlm_loss;
  } else {  // ---- NSP head on the pooled output ----
    h.nsp.resize(B * 2);
    h.nsp_losses.resize(B);
    linear_forward(h.nsp.data(), pooled_output(), w("cls.seq_relationship.weight"), w("cls.seq_relationship.bias"), B,
                   2, C, prec, w16("cls.seq_relationship.weight", prec));
    softmax_xent_forward_backward(h.nsp.data(), h.nsp_losses.data(), batch.nsp_labels.data(), B, 2, -1,
                                  backward ? loss_scale / (nsp_denom > 0 ? nsp_denom : static_cast<float>(B)) : 0.0f,
                                  &out.nsp_correct);
    double s = 0;
    for (int64_t b = 0; b < B; ++b) s += h.nsp_losses[b];
    out.nsp_loss_sum = s;
    out.nsp_loss = s / static_cast<double>(B);
    out.loss = out.mlm_loss + out.nsp_loss;
  }
  if (!backward) return out;

  // ---- backward ----
  if (nsp) {
    h.dpooled.assign(B * C, 0.0f);
    linear_backward(h.dpooled.data(), grad("cls.seq_relationship.weight"), grad("cls.seq_relationship.bias"),
                    h.nsp.data(), pooled_output(), w("cls.seq_relationship.weight"), B, 2, C, prec,
                    w16("cls.seq_relationship.weight", prec));
  }
  h.dseq.assign(N * C, 0.0f);
  if (M > 0) {
    for (auto* v : {&h.dtl, &h.dtg, &h.dt1}) v->assign(M * Eh, 0.0f);
    h.dhm.assign(M * C, 0.0f);
    // decoder tied to the word embeddings: its gradient adds into the embedding gradient
    linear_backward(h.dtl.data(), grad("bert.embeddings.word_embeddings.weight"), grad(obias), h.logits.data(),
                    h.tl.data(), w("bert.embeddings.word_embeddings.weight"), M, V, Eh, prec,
                    w16("bert.embeddings.word_embeddings.weight", prec));
    layernorm_backward(h.dtg.data(), grad(lnorm + ".weight"), grad(lnorm + ".bias"), h.dtl.data(), h.tg.data(),
                       w(lnorm + ".weight"), h.tmean.data(), h.trstd.data(), M, Eh);
    gelu_backward(h.dt1.data(), h.t1.data(), h.dtg.data(), M * Eh, act);
    linear_backward(h.dhm.data(), grad(dense + ".weight"), grad(dense + ".bias"), h.dt1.data(), h.hm.data(),
                    w(dense + ".weight"), M, Eh, C, prec, w16(dense + ".weight", prec));
    scatter_add_rows(h.dseq.data(), h.dhm.data(), h.rows.data(), M, C);
  }
  encode_backward(h.dseq.data(), nsp ? h.dpooled.data() : nullptr, prec);
  return out;
}

double Bert::forward_flops(const BertConfig& c, int64_t B, int64_t T, int64_t M, bool heads) {
  const double N = static_cast<double>(B * T), C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const double per_layer =
      2 * N * C * (3 * C) + 2 * 2 * static_cast<double>(B) * T * T * C + 2 * N * C * C + 2 * 2 * N * C * I;
  double f = per_layer * c.num_hidden_layers + 2.0 * B * C * C;
  if (heads) f += 2.0 * M * C * C + 2.0 * M * C * V + 2.0 * B * C * 2;
  return f;
}

}  // namespace bertcc
