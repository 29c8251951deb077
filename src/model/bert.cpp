#include "bertcc/bert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "backend/backend.h"
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

// ---------------------------------------------------------------------------------------------
// Activation arena: every tensor the backward pass needs, sized from (config, B, T), plus
// scratch shared by all layers. Rebuilt only when (B, T) changes.
// ---------------------------------------------------------------------------------------------
struct Bert::Acts {
  int64_t B = 0, T = 0;
  // Unpadded execution (Shape::packed): the encoder computes N rows, the batch's real tokens
  // packed sequence after sequence (FlashAttention's varlen layout): sequence b is rows cu[b] to
  // cu[b+1]; att_off[b] is where its saved attention starts in a layer's `probs`, drop_off[b] where
  // its attention-dropout numbers start after the layer's seed_att. seq_pad is the sequence output
  // restored to [B,T,C] (zeros at the padding) for the heads, which read the padded layout.
  bool packed = false;
  int64_t N = 0, att_saved = 0, att_work_floats = 0;
  std::vector<int64_t> cu, att_off, cls_rows;
  std::vector<uint64_t> drop_off;
  uint64_t drop_total = 0;  // the attention-dropout numbers of a layer (every sequence's)
  std::vector<int32_t> pids, pseg;  // the packed ids and segment ids (host)
  float* seq_pad = nullptr;
  int64_t reserved = 0;  // floats reserve_activations asked for (the arena is at least that)
  bool attention_dropout = false;  // probs also hold the dropped-out probabilities
  // A forward that no backward follows: every layer's slices are layer 0's, the layer inputs
  // alternate between two buffers, and the backward's buffers are empty (a layer's activations,
  // not the model's, whatever the depth).
  bool inference = false;
  Precision prec = Precision::F32;  // ... in bf16 for bf16 GEMMs (half the slot)
  std::vector<float> arena;
  std::vector<float> mask_add;           // [B,T]
  DeviceBuffer<float> darena, dmask;     // on a device: the arena and mask_add there
  DeviceBuffer<int32_t> dids, dseg;      // on a device: the batch's ids there
  const float* mask = nullptr;           // mask_add where the backend computes
  // --cuda-graphs: the inference forwards recorded (Bert::encode), by shape and the arena's place,
  // oldest first; `seen`: shapes run unrecorded, recorded when they come again. Destroyed with the
  // arena they name.
  struct Graphs {
    struct Entry {
      int64_t B, T;
      Precision prec;
      const float* arena;
      uint64_t epoch;  // the backend's memory_epoch when recorded: valid while it stays
      void* exec;
    };
    static constexpr size_t kMax = 64;  // recorded shapes kept (a server's batches come in many shapes)
    Backend* be = nullptr;
    std::vector<Entry> recorded, seen;  // seen: exec null, epoch when last run unrecorded
    Graphs() = default;
    Graphs(const Graphs&) = delete;
    Graphs& operator=(const Graphs&) = delete;
    ~Graphs() {
      for (const Entry& e : recorded) be->graph_destroy(e.exec);
    }
  } graphs;
  float *emb_sum, *emb_mean, *emb_rstd;  // [N,E], [N], [N]
  float *emb_out, *demb_a, *demb_b, *demb_c;  // [N,E]: embeddings before the projection; their gradients
  std::vector<float*> x;                 // L+1 of [N,C]: layer inputs/outputs
  struct Layer {
    float *qkv, *probs, *ctx, *ln1_sum, *ln1_mean, *ln1_rstd, *h1, *inter, *gelu, *ln2_sum, *ln2_mean, *ln2_rstd;
    // bf16 only (empty slices otherwise): the bf16 roundings of the four GEMM inputs x, ctx, h1
    // and gelu, made once in the forward and taken again by the backward's dW products (gelu16:
    // one slot for all layers, which the GELU backward writes again before FFN2's dW reads it); and
    // FFN1's output inter as its rounding alone, written by the product (LinearIo::y16): the
    // GELU's input, forward and backward
    float *x16, *ctx16, *h1_16, *gelu16, *inter16;
    // bf16 only: the QKV product's output as its rounding alone (LinearIo::y16), which the attention
    // reads in place of qkv, forward and backward (its saved buffer then holds no q, k, v)
    float* qkv16;
    uint64_t seed_attn_out = 0, seed_ffn_out = 0;  // hidden dropout sites, regenerated in backward
    uint64_t seed_att = 0;                          // attention dropout (regenerated by CUDA's backward)
  };
  std::vector<Layer> layers;
  uint64_t seed_emb = 0;
  bool dropout = false;
  uint64_t rng_seed = 0;  // dropout masks are regenerated from (rng_seed, per-site base)
  // pooler: cls [B,C], pooled_pre [B,C], pooled [B,C]
  float *cls, *pooled;
  // inference: the region that buffers with disjoint lives share, and two places in it (floats);
  // lean: bf16 on a backend whose products write their roundings alone (no fp32 qkv or inter: the
  // region holds qkv16 and inter16 instead)
  float* region = nullptr;
  int64_t region_ctx = 0;
  bool lean = false;
  // scratch
  float *att_work, *tmp_c, *g, *d1, *d2, *dh, *dc, *dqkv, *di, *di2, *dcls, *dpool;
  float* di2_16;  // bf16 only: di2's rounding, written by gelu_backward for both FFN1 products
  float* d2_16;   // bf16 only: d2's rounding (the dropout backward's output), for the next products
  float* dqkv16;  // bf16 only: dqkv's rounding, written by the attention backward for the QKV products
  // a bf16 slice as such, or null outside bf16 (where the backend rounds nothing)
  bf16_t* as16(float* p) const { return prec == Precision::BF16 ? reinterpret_cast<bf16_t*>(p) : nullptr; }
  // pre-training heads: sized by the number of masked positions, reused across steps
  struct Head {
    std::vector<int64_t> rows;
    std::vector<int32_t> labels;
    std::vector<float> hm, t1, tg, tl, tmean, trstd, logits, losses, dtl, dtg, dt1, dhm, dseq, dpooled, nsp, nsp_losses;
    // On a device: each vector's buffer there, the rows and labels there.
    std::unordered_map<const std::vector<float>*, DeviceBuffer<float>> dev;
    std::unordered_map<const std::vector<int64_t>*, DeviceBuffer<int64_t>> devi;
    DeviceBuffer<int64_t> drows;
    DeviceBuffer<int32_t> dlabels, dnsp_labels;
  } head;
};

struct Bert::DeviceState {
  DeviceBuffer<float> params, grads;
  DeviceBuffer<bf16_t> params16;
};

Bert::Bert(const BertConfig& config, Heads heads) : cfg_(config), heads_(heads), be_(&cpu_backend()) {
  cfg_.validate("config");
  pooler_ = has_pooler(heads_) && !cfg_.electra();
  build_table(table_, cfg_, heads_);
  bind_refs();
  check_memory(4.0 * static_cast<double>(table_.total()),
               "the weights of this model (" + std::to_string(table_.total()) + " parameters)", "check the config's sizes");
  params_.assign(table_.total(), 0.0f);
}

// Every tensor the steps read, looked up once. The fused Q/K/V product reads query, key and value
// (weights, then biases) as one [3C, C] matrix and one [3C] vector: checked here.
void Bert::bind_refs() {
  const ParamTable& t = table_;
  auto lin = [&t](const std::string& n, bool bias = true) {
    return LinearRef{t.ref(n + ".weight"), bias ? t.ref(n + ".bias") : ParamRef{}};
  };
  auto opt_lin = [&t](const std::string& n) { return LinearRef{t.find_ref(n + ".weight"), t.find_ref(n + ".bias")}; };
  auto norm = [&t](const std::string& n) { return NormRef{t.ref(n + ".weight"), t.ref(n + ".bias")}; };
  auto opt_norm = [&t](const std::string& n) { return NormRef{t.find_ref(n + ".weight"), t.find_ref(n + ".bias")}; };
  const std::string e = "bert.embeddings.";
  refs_.word = t.ref(e + "word_embeddings.weight");
  refs_.position = t.ref(e + "position_embeddings.weight");
  refs_.token_type = t.ref(e + "token_type_embeddings.weight");
  refs_.emb_norm = norm(e + "LayerNorm");
  refs_.project = opt_lin("bert.embeddings_project");
  const size_t C = static_cast<size_t>(cfg_.hidden_size);
  refs_.layers.clear();
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    LayerRefs L;
    L.qkv = lin(p + "attention.self.query");
    for (const char* part : {"weight", "bias"}) {
      const std::string a = std::string(".") + part;
      const size_t q = t.at(p + "attention.self.query" + a).offset, n = t.at(p + "attention.self.query" + a).numel;
      BERTCC_CHECK(t.at(p + "attention.self.key" + a).offset == q + n && t.at(p + "attention.self.value" + a).offset == q + 2 * n &&
                       n == (a == ".weight" ? C * C : C),
                   "parameter table: layer ", l, "'s query, key and value ", part, "s are not one block");
    }
    L.attn_out = lin(p + "attention.output.dense");
    L.attn_norm = norm(p + "attention.output.LayerNorm");
    L.ffn_in = lin(p + "intermediate.dense");
    L.ffn_out = lin(p + "output.dense");
    L.ffn_norm = norm(p + "output.LayerNorm");
    refs_.layers.push_back(L);
  }
  refs_.pooler = opt_lin("bert.pooler.dense");
  // the masked-LM transform: BERT's cls.predictions, ELECTRA's generator_predictions; the decoder
  // is tied to the word embeddings
  const bool gen = heads_ == Heads::Generator;
  refs_.mlm_dense = opt_lin(gen ? "generator_predictions.dense" : "cls.predictions.transform.dense");
  refs_.mlm_norm = opt_norm(gen ? "generator_predictions.LayerNorm" : "cls.predictions.transform.LayerNorm");
  refs_.mlm_bias = t.find_ref(gen ? "generator_lm_head.bias" : "cls.predictions.bias");
  refs_.nsp = opt_lin("cls.seq_relationship");
  refs_.out = heads_ == Heads::QuestionAnswering ? opt_lin("qa_outputs")
              : t.find_ref("classifier.out_proj.weight") ? opt_lin("classifier.out_proj")
                                                         : opt_lin("classifier");
  refs_.cls_dense = opt_lin("classifier.dense");
  refs_.disc_dense = opt_lin("discriminator_predictions.dense");
  refs_.disc_pred = opt_lin("discriminator_predictions.dense_prediction");
  refs_.start = opt_lin("start_logits.dense");
  refs_.end0 = opt_lin("end_logits.dense_0");
  refs_.end_norm = opt_norm("end_logits.LayerNorm");
  refs_.end1 = opt_lin("end_logits.dense_1");
  refs_.ans0 = opt_lin("answer_class.dense_0");
  refs_.ans1 = t.find_ref("answer_class.dense_1.weight");
}

void Bert::ensure_grads() {
  if (grads_.empty()) {
    check_memory(4.0 * static_cast<double>(table_.total()),
                 "the gradients of this model (" + std::to_string(table_.total()) + " parameters)",
                 "check the config's sizes");
    grads_.assign(table_.total(), 0.0f);
  }
  if (dev_ && !dev_grads_) {
    check_not_inference_only("a backward or an optimizer step");
    dev_->grads = DeviceBuffer<float>(*be_, grads_.size());
    dev_grads_ = dev_->grads.get();
    be_->zero(dev_grads_, sizeof(float) * grads_.size());
  }
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

void Bert::zero_grad() {
  ensure_grads();
  if (dev_grads_)
    be_->zero(dev_grads_, sizeof(float) * grads_.size());
  else
    std::fill(grads_.begin(), grads_.end(), 0.0f);
}

void Bert::use_backend(Backend& be) {
  acts_.reset();  // the arena lives on the old backend
  be_ = &be;
  dev_.reset();
  dev_params_ = dev_grads_ = nullptr;
  dev_params16_ = nullptr;
  dev_offset_.clear();
  params16_valid_ = false;
  if (be.on_host()) return;
  dev_ = std::make_unique<DeviceState>();
  dev_->params = DeviceBuffer<float>(be, params_.size());
  dev_->params16 = DeviceBuffer<bf16_t>(be, params_.size());
  dev_params_ = dev_->params.get();
  dev_params16_ = dev_->params16.get();
  params_to_device();
}

namespace {
// The encoder layers' GEMM matrices: read only by linear_forward/_backward, which in bf16 read
// their bf16 roundings alone.
bool encoder_gemm_matrix(const std::string& name) {
  static const std::string lp = "bert.encoder.layer.";
  if (name.rfind(lp, 0) != 0) return false;
  for (const char* s : {".attention.self.query.weight", ".attention.self.key.weight", ".attention.self.value.weight",
                        ".attention.output.dense.weight", ".intermediate.dense.weight", ".output.dense.weight"}) {
    const std::string suffix = s;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}
}  // namespace

void Bert::use_backend_for_inference(Backend& be, Precision prec) {
  if (be.on_host() || prec != Precision::BF16) return use_backend(be);
  use_backend(cpu_backend());  // off any device first: no arena, weights or gradients there
  be_ = &be;
  // fp32 on the device: every tensor but the encoder's GEMM matrices, each at its offset modulo 64
  // floats (256 bytes) in the full layout, so that every kept tensor has the alignment it had there
  // (GEMM algorithms and vector loads are chosen by alignment) and neighbours stay neighbours (the
  // query, key and value biases are read as one). bf16: the full layout, rounded once on the host.
  // A matrix whose bf16 copy is not 16-byte aligned keeps its fp32 copy too: the CUDA GEMM rounds
  // such a weight again from fp32 into aligned scratch (see cuda::gemm); BERT's shapes (hidden
  // sizes that are multiples of 8) have none.
  int64_t next = 0;
  dev_offset_.assign(table_.entries().size(), -1);
  for (size_t i = 0; i < table_.entries().size(); ++i) {
    const ParamEntry& e = table_.entries()[i];
    if (encoder_gemm_matrix(e.name) && e.offset % 8 == 0) continue;  // -1
    const int64_t orig = static_cast<int64_t>(e.offset);
    next += ((orig - next) % 64 + 64) % 64;
    dev_offset_[i] = next;
    next += static_cast<int64_t>(e.numel);
  }
  dev_ = std::make_unique<DeviceState>();
  dev_->params = DeviceBuffer<float>(be, static_cast<size_t>(std::max<int64_t>(next, 1)));
  dev_->params16 = DeviceBuffer<bf16_t>(be, params_.size());
  dev_params_ = dev_->params.get();
  dev_params16_ = dev_->params16.get();
  for (size_t i = 0; i < table_.entries().size(); ++i) {
    const ParamEntry& e = table_.entries()[i];
    const int64_t off = dev_offset_[i];
    if (off >= 0) be.upload(dev_params_ + off, params_.data() + e.offset, sizeof(float) * e.numel);
  }
  {
    std::vector<bf16_t> r16(params_.size());  // bertcc::to_bf16: the bits of the device's rounding
    to_bf16(params_.data(), r16.data(), params_.size());
    be.upload(dev_params16_, r16.data(), sizeof(bf16_t) * r16.size());
  }
  params16_valid_ = true;
}

void Bert::check_not_inference_only(const char* what) const {
  BERTCC_CHECK(dev_offset_.empty(), what, ": this model was placed on ", be_->describe(),
               " for bf16 inference only (its encoder matrices are there in bf16 alone)");
}

void Bert::params_to_device() {
  check_not_inference_only("params_to_device");
  params16_valid_ = false;
  if (dev_params_) be_->upload(dev_params_, params_.data(), sizeof(float) * params_.size());
}

void Bert::params_to_host() {
  check_not_inference_only("params_to_host");
  if (dev_params_) be_->download(params_.data(), dev_params_, sizeof(float) * params_.size());
}

void Bert::grads_to_host() {
  ensure_grads();
  if (dev_grads_) be_->download(grads_.data(), dev_grads_, sizeof(float) * grads_.size());
}

void Bert::grads_to_device() {
  ensure_grads();
  if (dev_grads_) be_->upload(dev_grads_, grads_.data(), sizeof(float) * grads_.size());
}

float* Bert::scratch(std::vector<float>& v, int64_t n, bool zeroed) {
  if (be_->on_host()) {
    if (zeroed)
      v.assign(static_cast<size_t>(n), 0.0f);
    else
      v.resize(static_cast<size_t>(n));
    return v.data();
  }
  BERTCC_CHECK(acts_, "scratch: no forward pass yet");
  float* p = acts_->head.dev[&v].ensure(*be_, static_cast<size_t>(n));
  if (zeroed) be_->zero(p, sizeof(float) * static_cast<size_t>(n));
  return p;
}

const std::vector<float>& Bert::to_host(std::vector<float>& v, const float* p, int64_t n) {
  if (be_->on_host()) return v;
  v.resize(static_cast<size_t>(n));
  be_->download(v.data(), p, sizeof(float) * static_cast<size_t>(n));
  return v;
}

float* Bert::to_backend(std::vector<float>& v) {
  if (be_->on_host()) return v.data();
  float* p = scratch(v, static_cast<int64_t>(v.size()), false);
  be_->upload(p, v.data(), sizeof(float) * v.size());
  return p;
}

const int64_t* Bert::rows_on_backend(std::vector<int64_t>& v) {
  if (be_->on_host()) return v.data();
  BERTCC_CHECK(acts_, "rows_on_backend: no forward pass yet");
  int64_t* p = acts_->head.devi[&v].ensure(*be_, std::max<size_t>(1, v.size()));
  be_->upload(p, v.data(), sizeof(int64_t) * v.size());
  return p;
}

void Bert::refresh_bf16(Precision p) {
  if (!dev_offset_.empty()) {  // inference only: the bf16 weights were made once, from the host's
    BERTCC_CHECK(p == Precision::BF16, "this model was placed on the device for bf16 inference only; "
                                       "--precision fp32 needs its fp32 weights there");
    BERTCC_CHECK(params16_valid_, "the weights changed after the model was placed on the device for bf16 "
                                  "inference only");
    return;
  }
  if (p != Precision::BF16 || params16_valid_) return;
  if (dev_params16_) {
    be_->to_bf16(dev_params16_, dev_params_, static_cast<int64_t>(params_.size()));
  } else {
    params16_.resize(params_.size());
    to_bf16(params_.data(), params16_.data(), params_.size());
  }
  params16_valid_ = true;
}

namespace {
// Floats a slice of n floats takes in the arena: slices start 64 bytes apart at least.
int64_t slot_floats(int64_t n) { return (n + 15) / 16 * 16; }
int64_t arena_floats(const std::vector<std::pair<float**, int64_t>>& plan) {
  int64_t total = 0;
  for (const auto& [p, n] : plan) total += slot_floats(n);
  return total;
}
}  // namespace

// The activation arena's slices for (B, T): (where the slice pointer goes, floats). Returns the
// arena's size in floats (64-byte aligned slices). Training: every layer's saved activations and the
// backward's scratch; inference (no backward follows): plan_inference_acts.
int64_t Bert::plan_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                        std::vector<std::pair<float**, int64_t>>& plan, bool inference) {
  const int64_t B = s.B, T = s.T, N = s.N, C = cfg.hidden_size, I = cfg.intermediate_size;
  const int64_t L = cfg.num_hidden_layers, E = cfg.embedding_dim();
  const int64_t h16 = prec == Precision::BF16 ? 1 : 0;  // bf16 copies (n bf16 in (n + 1) / 2 floats): bf16 only
  // In bf16 the backward reads the roundings of the layer inputs and of h1 (x16, h1_16), never
  // their fp32 values, which only the layer's own forward reads (the residual adds and the roundings
  // made there): the layer inputs alternate between two buffers, and one h1 serves
  // every layer (ensure_acts aliases them). The encoder's output x[L] is x[L % 2], read by the heads.
  // Likewise qkv and FFN1's output inter: in bf16 those products write their outputs as their
  // roundings alone (LinearIo::y16, as PyTorch's autocast Linear writes bf16), qkv16 and inter16,
  // which the attention and the GELU read, forward and backward; one fp32 qkv and one inter, space
  // a product may pass through (the CPU's), serve every layer, and each layer keeps 2 bytes per
  // element instead of 4. And the attention's output ctx: in bf16 the attention writes only its
  // rounding ctx16, which the attention-output product and the attention's backward read (no fp32
  // ctx at all: null_unkept).
  const bool transient = h16;
  a.x.assign(L + 1, nullptr);
  a.layers.assign(L, {});
  if (inference) return plan_inference_acts(a, cfg, s, prec, be, plan);
  plan.push_back({&a.seq_pad, s.packed ? B * T * C : 0});
  plan.push_back({&a.emb_sum, N * E});
  plan.push_back({&a.emb_out, E != C ? N * E : 0});
  for (float** p : {&a.demb_a, &a.demb_b, &a.demb_c}) plan.push_back({p, E != C ? N * E : 0});
  plan.push_back({&a.emb_mean, N});
  plan.push_back({&a.emb_rstd, N});
  for (int64_t l = 0; l <= (transient ? std::min<int64_t>(L, 1) : L); ++l) plan.push_back({&a.x[l], N * C});
  for (auto& ly : a.layers) {
    // bf16: layer 0's qkv slot also holds h1 (after qkv) and, in the backward, di2 or dqkv
    const bool front = &ly == &a.layers.front();
    plan.push_back({&ly.qkv, !transient ? N * 3 * C : front ? std::max(slot_floats(N * 3 * C) + N * C, N * I) : 0});
    plan.push_back({&ly.probs, s.att_saved});
    plan.push_back({&ly.qkv16, h16 * (N * 3 * C + 1) / 2});
    plan.push_back({&ly.ctx, (1 - h16) * N * C});  // bf16: ctx16 alone (null_unkept)
    plan.push_back({&ly.ln1_sum, N * C});
    plan.push_back({&ly.ln1_mean, N});
    plan.push_back({&ly.ln1_rstd, N});
    plan.push_back({&ly.h1, transient ? 0 : N * C});  // bf16: inside layer 0's qkv slot
    plan.push_back({&ly.inter, transient && &ly != &a.layers.front() ? 0 : N * I});
    plan.push_back({&ly.gelu, (1 - h16) * N * I});  // bf16: FFN2 reads gelu16 alone (null_unkept)
    plan.push_back({&ly.ln2_sum, N * C});
    plan.push_back({&ly.ln2_mean, N});
    plan.push_back({&ly.ln2_rstd, N});
    for (float** p : {&ly.x16, &ly.ctx16, &ly.h1_16}) plan.push_back({p, h16 * (N * C + 1) / 2});
    plan.push_back({&ly.gelu16, front ? h16 * (N * I + 1) / 2 : 0});  // one for all layers: the backward remakes it
    plan.push_back({&ly.inter16, h16 * (N * I + 1) / 2});
  }
  plan.push_back({&a.cls, B * C});
  plan.push_back({&a.pooled, B * C});
  plan.push_back({&a.att_work, s.att_work});  // the CPU's forward uses it too
  plan.push_back({&a.tmp_c, N * C});
  for (float** p : {&a.g, &a.d1, &a.d2, &a.dh, &a.dc}) plan.push_back({p, N * C});
  // The backward's scratch for the FFN (di, di2, di2_16) and for the attention (dqkv, dqkv16) is
  // never live at once: a layer's FFN backward is done before its attention backward starts, and
  // the QKV products, dqkv's last readers, run before the next layer's FFN. So dqkv shares di2's
  // slot and dqkv16 di2_16's (ensure_acts: alias). In bf16 the forward's transient buffers
  // (layer 0's qkv, h1 and inter, which serve every layer and which no backward reads) are dead
  // once the backward starts: di takes inter's slot, and di2 / dqkv the slot of qkv and h1. (dqkv
  // and dqkv16 have no slot of their own: alias places them.)
  plan.push_back({&a.di, transient ? 0 : N * I});
  plan.push_back({&a.di2, transient ? 0 : std::max(N * I, N * 3 * C)});
  plan.push_back({&a.di2_16, h16 * std::max((N * I + 1) / 2, (N * 3 * C + 1) / 2)});
  plan.push_back({&a.d2_16, h16 * (N * C + 1) / 2});
  plan.push_back({&a.dcls, B * C});
  plan.push_back({&a.dpool, B * C});
  return arena_floats(plan);
}

// A forward that no backward follows, in one layer's memory and less: each buffer is live only
// between its writer and its last reader, so buffers whose lives do not overlap share one region R
// (per layer: qkv and ctx, then the attention output, then FFN1's output, then FFN2's output;
// before the layers, the embeddings' sum; the residual LayerNorms keep no sums),
// every layer uses layer 0's slices, and the layer input is written over by the layer's output
// (x[l] is last read by the first residual LayerNorm). The same kernels in the same order on the
// same values: the same bits as the training arena (Model.InferenceForwardInOneLayersMemory...).
int64_t Bert::plan_inference_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                                  std::vector<std::pair<float**, int64_t>>& plan) {
  const int64_t B = s.B, T = s.T, N = s.N, C = cfg.hidden_size, I = cfg.intermediate_size;
  const int64_t E = cfg.embedding_dim();
  const int64_t h16 = prec == Precision::BF16 ? 1 : 0;
  a.lean = h16 && !be.y16_needs_y();
  a.region_ctx = a.lean ? 0 : slot_floats(N * 3 * C);  // 64-byte aligned places inside R
  // (tmp_c, N C floats, fits either way; the residual LayerNorms keep no sums: no backward reads them)
  const int64_t R = a.lean ? std::max({(N * 3 * C + 1) / 2, (N * I + 1) / 2, N * E})
                           : std::max({a.region_ctx + N * C, N * I, N * E});
  const int64_t own16 = h16 && !a.lean ? 1 : 0;  // qkv16 and inter16 in slots of their own (else in R)
  Acts::Layer& ly = a.layers.front();
  plan.push_back({&a.region, R});
  plan.push_back({&a.emb_out, E != C ? N * E : 0});
  plan.push_back({&a.emb_mean, N});
  plan.push_back({&a.emb_rstd, N});
  plan.push_back({&a.x[0], N * C});
  plan.push_back({&a.seq_pad, s.packed ? B * T * C : 0});
  plan.push_back({&ly.probs, s.att_saved});
  plan.push_back({&ly.qkv16, own16 * (N * 3 * C + 1) / 2});
  plan.push_back({&ly.inter16, own16 * (N * I + 1) / 2});
  plan.push_back({&ly.ln1_mean, N});
  plan.push_back({&ly.ln1_rstd, N});
  plan.push_back({&ly.h1, N * C});
  plan.push_back({&ly.gelu, (1 - h16) * N * I});  // fp32 only (bf16: FFN2 reads gelu16)
  plan.push_back({&ly.ln2_mean, N});
  plan.push_back({&ly.ln2_rstd, N});
  for (float** p : {&ly.x16, &ly.ctx16, &ly.h1_16}) plan.push_back({p, h16 * (N * C + 1) / 2});
  plan.push_back({&ly.gelu16, h16 * (N * I + 1) / 2});
  plan.push_back({&a.cls, B * C});
  plan.push_back({&a.pooled, B * C});
  plan.push_back({&a.att_work, s.att_work});
  return arena_floats(plan);
}

void Bert::place_inference_acts(Acts& a) {
  Acts::Layer& ly = a.layers.front();
  a.emb_sum = a.region;
  ly.qkv = a.region;
  ly.ctx = a.region + a.region_ctx;  // after qkv: attention reads one and writes the other
  a.tmp_c = a.region;                // written after attention (qkv dead) and after GELU (inter dead)
  ly.ln1_sum = ly.ln2_sum = nullptr;  // not kept (the LayerNorms' backward reads them)
  ly.inter = a.region;               // written after the first residual LayerNorm (ctx, tmp_c dead)
  if (a.lean) {  // the products' roundings alone, where their fp32 outputs would be
    ly.qkv16 = ly.inter16 = a.region;
    ly.qkv = ly.inter = ly.ctx = nullptr;
  }
  for (float*& x : a.x) x = a.x[0];  // the layer's output over its input
  for (size_t l = 1; l < a.layers.size(); ++l) a.layers[l] = ly;
  a.g = a.d1 = a.d2 = a.dh = a.dc = a.dqkv = a.di = a.di2 = a.di2_16 = a.d2_16 = a.dqkv16 = a.dcls = a.dpool = nullptr;
  a.demb_a = a.demb_b = a.demb_c = nullptr;
}

Bert::Shape Bert::padded_shape(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec,
                               const Backend& be) {
  const int64_t C = cfg.hidden_size, NH = cfg.num_attention_heads;
  const bool h16 = prec == Precision::BF16;
  return Shape{B, T, B * T, be.attention_saved_size(B, T, C, NH, attention_dropout, prec, h16),
               be.attention_work_size(B, T, C, NH), false};
}

double Bert::activation_bytes(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec) {
  Acts a;
  std::vector<std::pair<float**, int64_t>> plan;
  const Shape s = padded_shape(cfg, B, T, attention_dropout, prec, cpu_backend());
  return 4.0 * static_cast<double>(plan_acts(a, cfg, s, prec, cpu_backend(), plan)) + 4.0 * B * T;
}

void Bert::ensure_acts(const Shape& s, bool attention_dropout, Precision prec, bool inference) {
  const int64_t B = s.B, T = s.T;
  if (acts_ && acts_->B == B && acts_->T == T && acts_->N == s.N && acts_->packed == s.packed &&
      acts_->att_saved == s.att_saved && acts_->att_work_floats == s.att_work &&
      acts_->attention_dropout == attention_dropout && acts_->prec == prec && acts_->inference == inference)
    return;
  // The arena only grows: batches of varying length (fine-tuning pads each batch to its longest
  // row) re-carve the same memory instead of reallocating and faulting in fresh pages.
  if (!acts_) acts_ = std::make_unique<Acts>();
  Acts& a = *acts_;
  a.B = B;
  a.T = T;
  a.N = s.N;
  a.packed = s.packed;
  a.att_saved = s.att_saved;
  a.att_work_floats = s.att_work;
  a.attention_dropout = attention_dropout;
  a.prec = prec;
  a.inference = inference;
  std::vector<std::pair<float**, int64_t>> plan;  // count first, then carve (one allocation)
  const int64_t total = std::max(plan_acts(a, cfg_, s, prec, *be_, plan, inference), a.reserved);
  // bf16: the fp32 GELU and attention outputs are not kept (their training slices are empty):
  // gelu_forward and attention_forward write the bf16 copies only, and the products read those
  // (linear_forward and _backward take x16 for x). After alias (inference places ctx in its region).
  auto null_unkept = [&a, prec] {
    if (prec == Precision::BF16)
      for (auto& ly : a.layers) ly.gelu = ly.ctx = nullptr;
  };
  // Inference: layer l's slices are layer 0's, and buffers share a region (place_inference_acts).
  // (Copying the whole Layer copies its dropout seeds too: each forward sets them before use, and
  // only a backward, refused after an inference forward, reads them afterwards.)
  // bf16 training: the layer inputs alternate and h1 is layer 0's (plan_acts).
  // Training: the backward's scratch shares slots (plan_acts).
  const int64_t NC = s.N * cfg_.hidden_size;
  auto alias = [&a, prec, NC] {
    if (a.inference) return place_inference_acts(a);
    a.dqkv = a.di2;
    a.dqkv16 = a.di2_16;
    if (prec != Precision::BF16) return;
    for (size_t l = 2; l < a.x.size(); ++l) a.x[l] = a.x[l % 2];
    Acts::Layer& front = a.layers.front();
    front.h1 = front.qkv + slot_floats(3 * NC);
    a.di = front.inter;
    a.di2 = a.dqkv = front.qkv;
    for (size_t l = 1; l < a.layers.size(); ++l) {
      a.layers[l].h1 = front.h1;
      a.layers[l].qkv = front.qkv;
      a.layers[l].inter = front.inter;
      a.layers[l].gelu16 = front.gelu16;
    }
  };
  if (!be_->on_host()) {  // device memory: the allocation itself says when it does not fit
    float* base = a.darena.ensure(*be_, static_cast<size_t>(total));
    int64_t off = 0;
    for (auto& [p, n] : plan) {
      *p = base + off;
      off += slot_floats(n);
    }
    alias();
    null_unkept();
    a.dmask.ensure(*be_, static_cast<size_t>(B * T));
    a.mask_add.assign(static_cast<size_t>(B * T), 0.0f);
    a.mask = a.dmask.get();
    return;
  }
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
    off += slot_floats(n);
  }
  alias();
  null_unkept();
  a.mask_add.assign(static_cast<size_t>(B * T), 0.0f);
  a.mask = a.mask_add.data();
}

void Bert::reserve_activations(int64_t B, int64_t T, Precision prec) {
  // for the padded layout, and for the packed one at its largest (every row full: the padded rows
  // plus the sequence output restored to [B,T,C], each sequence's attention on its own)
  const bool drop = cfg_.attention_probs_dropout_prob > 0;
  const Shape pad = padded_shape(cfg_, B, T, drop, prec, *be_);
  const Shape one = padded_shape(cfg_, 1, T, drop, prec, *be_);
  const Shape packed{B, T, B * T, B * slot_floats(one.att_saved), one.att_work, true};
  Acts scratch_acts;
  std::vector<std::pair<float**, int64_t>> plan;
  int64_t most = plan_acts(scratch_acts, cfg_, pad, prec, *be_, plan);
  if (!padded_execution()) {
    plan.clear();
    most = std::max(most, plan_acts(scratch_acts, cfg_, packed, prec, *be_, plan));
  }
  if (!acts_) acts_ = std::make_unique<Acts>();
  acts_->reserved = std::max(acts_->reserved, most);
  ensure_acts(pad, drop, prec);
}

bool Bert::last_packed() const { return acts_ && acts_->packed; }
const float* Bert::sequence_output() const { return acts_->packed ? acts_->seq_pad : acts_->x.back(); }
const float* Bert::pooled_output() const { return pooler_ ? acts_->pooled : nullptr; }

const float* Bert::pooled_output_on_host(std::vector<float>& buf) const {
  BERTCC_CHECK(acts_ && acts_->B > 0, "pooled_output: no forward pass yet");
  if (!pooler_ || be_->on_host()) return pooled_output();
  buf.resize(static_cast<size_t>(acts_->B * cfg_.hidden_size));
  be_->download(buf.data(), pooled_output(), sizeof(float) * buf.size());
  return buf.data();
}

const float* Bert::sequence_output_on_host(std::vector<float>& buf) const {
  BERTCC_CHECK(acts_ && acts_->B > 0, "sequence_output: no forward pass yet");
  if (be_->on_host()) return sequence_output();
  buf.resize(static_cast<size_t>(acts_->B * acts_->T * cfg_.hidden_size));
  be_->download(buf.data(), sequence_output(), sizeof(float) * buf.size());
  return buf.data();
}

namespace {
// --cuda-graphs: `forward` (an inference forward's device work on the arena at `arena`) run as a
// recorded graph. A shape's first run on an arena is run as it is: it sizes every scratch buffer and
// lets cuBLASLt choose its algorithms, so that recording queues device work alone. Its next run is
// recorded and launched, later ones launch the record. When one of the backend's buffers has been
// freed since (memory_epoch), a record may name a buffer that is gone: it is dropped, and its shape
// starts again with a run as it is. The kernels and their arguments are those of the unrecorded
// forward, so are the results.
template <class Graphs, class F>
void run_recorded(Graphs& gs, const float* arena, Backend& be, int64_t B, int64_t T, Precision prec, F&& forward) {
  gs.be = &be;
  const uint64_t epoch = be.memory_epoch();
  for (auto it = gs.recorded.begin(); it != gs.recorded.end();) {
    if (it->epoch == epoch) {
      ++it;
    } else {
      be.graph_destroy(it->exec);
      it = gs.recorded.erase(it);
    }
  }
  auto same = [&](const auto& e) { return e.B == B && e.T == T && e.prec == prec && e.arena == arena; };
  for (const auto& e : gs.recorded)
    if (same(e)) return be.graph_launch(e.exec);
  auto seen = std::find_if(gs.seen.begin(), gs.seen.end(), same);
  if (seen == gs.seen.end() || seen->epoch != epoch) {
    forward();
    if (seen != gs.seen.end()) gs.seen.erase(seen);
    if (gs.seen.size() >= 4 * Graphs::kMax) gs.seen.erase(gs.seen.begin());
    gs.seen.push_back({B, T, prec, arena, be.memory_epoch(), nullptr});
    return;
  }
  be.graph_begin();
  try {
    forward();
  } catch (...) {
    be.graph_abort();
    throw;
  }
  void* exec = be.graph_end();  // (nothing was freed while recording: freeing is an error there)
  if (gs.recorded.size() >= Graphs::kMax) {
    be.graph_destroy(gs.recorded.front().exec);
    gs.recorded.erase(gs.recorded.begin());
  }
  gs.recorded.push_back({B, T, prec, arena, epoch, exec});
  be.graph_launch(exec);
}
}  // namespace

std::vector<int64_t> Bert::packed_lengths(const BertBatch& batch) const {
  if (padded_execution() || batch.input_mask.size() != static_cast<size_t>(batch.B * batch.T)) return {};
  std::vector<int64_t> len(static_cast<size_t>(batch.B));
  int64_t total = 0;
  for (int64_t b = 0; b < batch.B; ++b) {
    const int32_t* m = batch.input_mask.data() + b * batch.T;
    int64_t n = 0;
    while (n < batch.T && m[n] != 0) ++n;
    for (int64_t t = n; t < batch.T; ++t)
      if (m[t] != 0) return {};  // not a run of ones then zeros: computed padded
    if (n == 0) return {};       // an empty row has no [CLS] row to pool: computed padded
    len[static_cast<size_t>(b)] = n;
    total += n;
  }
  if (total == batch.B * batch.T) return {};  // no padding: the padded layout is the packed one
  return len;
}

void Bert::encode(const BertBatch& batch, bool training, Precision prec, Rng& rng, bool backward) {
  const int64_t B = batch.B, T = batch.T;
  const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, NH = cfg_.num_attention_heads;
  const float p_h = training ? cfg_.hidden_dropout_prob : 0.0f;
  const float p_a = training ? cfg_.attention_probs_dropout_prob : 0.0f;
  const bool h16 = prec == Precision::BF16;
  Backend& be = *be_;
  // Unpadded execution: the rows are the real tokens, sequence after sequence; each sequence's
  // attention runs on its own rows (no mask: it has no padding), its saved attention slice after
  // the previous sequence's and its dropout numbers after the previous sequence's.
  const std::vector<int64_t> len = packed_lengths(batch);
  const bool packed = !len.empty();
  Shape shape = padded_shape(cfg_, B, T, p_a > 0, prec, be);
  std::vector<int64_t> cu, att_off;
  std::vector<uint64_t> drop_off;
  uint64_t drop_total = 0;
  if (packed) {
    cu.assign(static_cast<size_t>(B + 1), 0);
    att_off.assign(static_cast<size_t>(B), 0);
    drop_off.assign(static_cast<size_t>(B), 0);
    int64_t saved = 0, work = 0;
    uint64_t drops = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = len[static_cast<size_t>(b)];
      cu[static_cast<size_t>(b + 1)] = cu[static_cast<size_t>(b)] + n;
      att_off[static_cast<size_t>(b)] = saved;
      drop_off[static_cast<size_t>(b)] = drops;
      saved += slot_floats(be.attention_saved_size(1, n, C, NH, p_a > 0, prec, h16));
      work = std::max(work, be.attention_work_size(1, n, C, NH));
      drops += static_cast<uint64_t>(attention_drop_numbers(NH, n));
    }
    shape = Shape{B, T, cu.back(), saved, work, true};
    drop_total = drops;
  }
  const int64_t N = shape.N;
  ensure_acts(shape, p_a > 0, prec, /*inference=*/!backward);
  if (backward) ensure_grads();  // before the backward's parallel regions take gradient pointers
  refresh_bf16(prec);
  Acts& a = *acts_;
  if (packed) {
    a.cu = std::move(cu);
    a.att_off = std::move(att_off);
    a.drop_off = std::move(drop_off);
    a.drop_total = drop_total;
    a.cls_rows.assign(a.cu.begin(), a.cu.end() - 1);
    a.pids.resize(static_cast<size_t>(N));
    a.pseg.resize(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = a.cu[static_cast<size_t>(b + 1)] - a.cu[static_cast<size_t>(b)];
      std::copy_n(batch.input_ids.data() + b * T, n, a.pids.data() + a.cu[static_cast<size_t>(b)]);
      std::copy_n(batch.segment_ids.data() + b * T, n, a.pseg.data() + a.cu[static_cast<size_t>(b)]);
    }
    batch_ids_ = a.pids;
    batch_seg_ = a.pseg;
  } else {
    batch_ids_ = batch.input_ids;
    batch_seg_ = batch.segment_ids;
  }
  const int32_t* ids = batch_ids_.data();
  const int32_t* seg = batch_seg_.data();
  if (!be.on_host()) {  // the batch's ids on the device (kept for the embeddings' backward)
    ids = a.dids.ensure(be, static_cast<size_t>(N));
    seg = a.dseg.ensure(be, static_cast<size_t>(N));
    be.upload(a.dids.get(), batch_ids_.data(), sizeof(int32_t) * N);
    be.upload(a.dseg.get(), batch_seg_.data(), sizeof(int32_t) * N);
  }
  a.dropout = training;
  a.rng_seed = rng.seed;
  const Activation act = cfg_.activation();
  const float eps = cfg_.layer_norm_eps;
  // a GEMM input's bf16 rounding, made by its forward product and kept for the backward's
  auto keep16 = [&a](float* slot) { return LinearIo{nullptr, a.as16(slot), nullptr}; };
  if (packed) {  // no padding in a sequence's own rows: an additive mask of zeros
    std::fill(a.mask_add.begin(), a.mask_add.end(), 0.0f);
  } else {
    for (int64_t i = 0; i < N; ++i) a.mask_add[i] = (1.0f - static_cast<float>(batch.input_mask[i])) * -10000.0f;
  }
  if (!be.on_host()) be.upload(a.dmask.get(), a.mask_add.data(), sizeof(float) * B * T);
  auto seq_rows = [&a](int64_t b) {  // sequence b's first packed row and its row count
    return std::pair<int64_t, int64_t>{a.cu[static_cast<size_t>(b)],
                                       a.cu[static_cast<size_t>(b + 1)] - a.cu[static_cast<size_t>(b)]};
  };

  // The forward from the embeddings on: device work alone (the batch is where the backend computes).
  auto forward = [&] {
    // embeddings -> LayerNorm -> dropout [-> embeddings_project (ELECTRA, embedding_size != hidden)]
    const int64_t E = cfg_.embedding_dim();
    const bool project = E != C;
    float* emb = project ? a.emb_out : a.x[0];
    if (packed) {  // positions count from 0 in each sequence
      for (int64_t b = 0; b < B; ++b) {
        const auto [r0, n] = seq_rows(b);
        be.embeddings_forward(a.emb_sum + r0 * E, ids + r0, seg + r0, w(refs_.word), w(refs_.position),
                              w(refs_.token_type), 1, n, E);
      }
    } else {
      be.embeddings_forward(a.emb_sum, ids, seg, w(refs_.word), w(refs_.position), w(refs_.token_type), B, T, E);
    }
    be.layernorm_forward(emb, a.emb_mean, a.emb_rstd, a.emb_sum, w(refs_.emb_norm.g),
                      w(refs_.emb_norm.b), N, E, eps);
    if (p_h > 0) {
      a.seed_emb = rng.reserve(N * E);
      be.dropout_forward(emb, emb, N * E, p_h, rng, a.seed_emb);
    }
    if (project)
      be.linear_forward(a.x[0], a.emb_out, w(refs_.project.w), w(refs_.project.b), N, C, E,
                     prec, w16(refs_.project.w, prec));

    for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
      Acts::Layer& ly = a.layers[l];
      const LayerRefs& L = refs_.layers[static_cast<size_t>(l)];
      const float* xin = a.x[l];
      // x[l]'s rounding: made here for layer 0 (after the embeddings' dropout), by the previous
      // layer's LayerNorm for the others
      // (bf16: the output as its rounding qkv16 alone, what the attention reads)
      LinearIo qkv_io = l == 0 ? keep16(ly.x16) : LinearIo{a.as16(ly.x16), nullptr, nullptr};
      qkv_io.y16 = a.as16(ly.qkv16);
      be.linear_forward(ly.qkv, xin, w(L.qkv.w), w(L.qkv.b), N, 3 * C, C,
                     prec, w16(L.qkv.w, prec), qkv_io);
      // (bf16: the output as its rounding ctx16 alone, what the product reads)
      if (packed) {
        ly.seed_att = p_a > 0 ? rng.reserve(a.drop_total) : 0;
        for (int64_t b = 0; b < B; ++b) {
          const auto [r0, n] = seq_rows(b);
          be.attention_forward(ly.ctx ? ly.ctx + r0 * C : nullptr, a.as16(ly.ctx16) ? a.as16(ly.ctx16) + r0 * C : nullptr,
                               ly.probs + a.att_off[static_cast<size_t>(b)], a.att_work,
                               prec == Precision::BF16 ? nullptr : ly.qkv + r0 * 3 * C,
                               a.as16(ly.qkv16) ? a.as16(ly.qkv16) + r0 * 3 * C : nullptr, a.mask, 1, n, C, NH, p_a,
                               rng, ly.seed_att + a.drop_off[static_cast<size_t>(b)], prec);
        }
      } else {
        ly.seed_att = p_a > 0 ? rng.reserve(attention_drop_numbers(B * NH, T)) : 0;  // the CPU saves Pd; CUDA regenerates it
        be.attention_forward(ly.ctx, a.as16(ly.ctx16), ly.probs, a.att_work, prec == Precision::BF16 ? nullptr : ly.qkv,
                             a.as16(ly.qkv16), a.mask, B, T, C, NH, p_a, rng, ly.seed_att, prec);
      }
      be.linear_forward(a.tmp_c, ly.ctx, w(L.attn_out.w), w(L.attn_out.b), N, C,
                     C, prec, w16(L.attn_out.w, prec),
                     LinearIo{a.as16(ly.ctx16), nullptr, nullptr});
      if (p_h > 0) ly.seed_attn_out = rng.reserve(N * C);
      be.residual_dropout_layernorm_forward(ly.h1, ly.ln1_sum, ly.ln1_mean, ly.ln1_rstd, a.tmp_c, xin,
                                            w(L.attn_norm.g),
                                            w(L.attn_norm.b), N, C, eps, a.as16(ly.h1_16), p_h,
                                            rng, ly.seed_attn_out);
      // bf16: FFN1's output as its rounding inter16 alone (as PyTorch's autocast Linear writes bf16),
      // the GELU's input forward and backward
      LinearIo ffn1_io{a.as16(ly.h1_16), nullptr, nullptr};
      ffn1_io.y16 = a.as16(ly.inter16);
      be.linear_forward(ly.inter, ly.h1, w(L.ffn_in.w), w(L.ffn_in.b), N, I, C, prec,
                     w16(L.ffn_in.w, prec), ffn1_io);
      if (prec == Precision::BF16)
        be.gelu_forward16(a.as16(ly.gelu16), a.as16(ly.inter16), N * I, act);
      else
        be.gelu_forward(ly.gelu, ly.inter, N * I, act);
      be.linear_forward(a.tmp_c, ly.gelu, w(L.ffn_out.w), w(L.ffn_out.b), N, C, I, prec,
                     w16(L.ffn_out.w, prec), LinearIo{a.as16(ly.gelu16), nullptr, nullptr});
      if (p_h > 0) ly.seed_ffn_out = rng.reserve(N * C);
      be.residual_dropout_layernorm_forward(a.x[l + 1], ly.ln2_sum, ly.ln2_mean, ly.ln2_rstd, a.tmp_c, ly.h1,
                                            w(L.ffn_norm.g), w(L.ffn_norm.b), N, C, eps,
                                            l + 1 < cfg_.num_hidden_layers ? a.as16(a.layers[l + 1].x16) : nullptr, p_h,
                                            rng, ly.seed_ffn_out);
    }

    // packed: the sequence output restored to [B,T,C] for the heads (zeros at the padding)
    if (packed)
      for (int64_t b = 0; b < B; ++b) {
        const auto [r0, n] = seq_rows(b);
        be.copy(a.seq_pad + b * T * C, a.x.back() + r0 * C, sizeof(float) * static_cast<size_t>(n * C));
        if (n < T) be.zero(a.seq_pad + (b * T + n) * C, sizeof(float) * static_cast<size_t>((T - n) * C));
      }
    // pooler: tanh(dense(h[:, 0]))
    if (!pooler_) return;
    if (packed)
      be.gather_rows(a.cls, a.x.back(), rows_on_backend(a.cls_rows), B, C);
    else
      be.copy_rows(a.cls, C, a.x.back(), T * C, B, C);
    be.linear_forward(a.pooled, a.cls, w(refs_.pooler.w), w(refs_.pooler.b), B, C, C, prec,
                   w16(refs_.pooler.w, prec));
    be.tanh_forward(a.pooled, a.pooled, B * C);
  };
  // --cuda-graphs: an inference forward runs as one recorded graph from its shape's second time on
  if (!training && !backward && be.graphs() && cuda_graphs() && !packed)
    run_recorded(a.graphs, a.darena.get(), be, B, T, prec, forward);
  else
    forward();
}

void Bert::encode_backward(const float* dseq, const float* dpooled, Precision prec) {
  BERTCC_CHECK(acts_ && !acts_->inference, "encode_backward: the forward was run without backward (inference)");
  Acts& a = *acts_;
  const int64_t B = a.B, T = a.T, N = a.N;
  const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size, NH = cfg_.num_attention_heads;
  const bool packed = a.packed;
  auto seq_rows = [&a](int64_t b) {  // sequence b's first packed row and its row count
    return std::pair<int64_t, int64_t>{a.cu[static_cast<size_t>(b)],
                                       a.cu[static_cast<size_t>(b + 1)] - a.cu[static_cast<size_t>(b)]};
  };
  const Activation act = cfg_.activation();
  const float p_h = a.dropout ? cfg_.hidden_dropout_prob : 0.0f;
  const float p_a = a.dropout ? cfg_.attention_probs_dropout_prob : 0.0f;
  const Rng rng{a.rng_seed, 0};
  Backend& be = *be_;
  auto zero = [&](float* p, int64_t n) { be.zero(p, sizeof(float) * static_cast<size_t>(n)); };

  // g = d(sequence output) (packed: its real rows; the padding's gradient reaches nothing)
  if (dseq && packed) {
    for (int64_t b = 0; b < B; ++b) {
      const auto [r0, n] = seq_rows(b);
      be.copy(a.g + r0 * C, dseq + b * T * C, sizeof(float) * static_cast<size_t>(n * C));
    }
  } else if (dseq) {
    be.copy(a.g, dseq, sizeof(float) * N * C);
  } else {
    zero(a.g, N * C);
  }
  if (dpooled) {
    BERTCC_CHECK(pooler_, "encode_backward: this model has no pooler");
    // pooled = tanh(cls W^T + b); cls = h[:, 0]
    zero(a.dpool, B * C);
    be.tanh_backward(a.dpool, a.pooled, dpooled, B * C);
    zero(a.dcls, B * C);
    be.linear_backward(a.dcls, dgrad(refs_.pooler.w), dgrad(refs_.pooler.b), a.dpool, a.cls,
                    w(refs_.pooler.w), B, C, C, prec, w16(refs_.pooler.w, prec));
    if (packed)
      be.scatter_add_rows(a.g, a.dcls, rows_on_backend(a.cls_rows), B, C);
    else
      be.add_rows(a.g, T * C, a.dcls, C, B, C);
    if (grad_ready_) grad_ready_(table_[refs_.pooler.w].offset);
  }

  for (int l = cfg_.num_hidden_layers - 1; l >= first_trainable_layer_; --l) {
    Acts::Layer& ly = a.layers[l];
    const LayerRefs& L = refs_.layers[static_cast<size_t>(l)];
    // x[l+1] = LN2(dropout(ffn_out) + h1)
    // (the layer's gradient buffers are written, not added to: no zeroing pass). The gradient
    // into h1 goes straight to dh, the residual branch's buffer, which FFN1's backward adds to
    // only after the FFN branch has read it (no copy)
    const float* dffn = a.dh;
    const bf16_t* dffn16 = nullptr;  // its rounding, where the dropout backward makes it
    if (p_h > 0) {
      be.layernorm_dropout_backward(a.dh, dgrad(L.ffn_norm.g), dgrad(L.ffn_norm.b), a.g,
                                    ly.ln2_sum, w(L.ffn_norm.g), ly.ln2_mean, ly.ln2_rstd, N, C, a.d2,
                                    a.as16(a.d2_16), p_h, rng, ly.seed_ffn_out);
      dffn = a.d2;
      dffn16 = a.as16(a.d2_16);
    } else {
      be.layernorm_backward(a.dh, dgrad(L.ffn_norm.g), dgrad(L.ffn_norm.b), a.g,
                            ly.ln2_sum, w(L.ffn_norm.g), ly.ln2_mean, ly.ln2_rstd, N, C,
                            /*overwrite=*/true);
    }
    // ffn_out = gelu W2^T + b2; inter = h1 W1^T + b1. In bf16 both FFN1 products read the
    // gradient's rounding only, so the GELU backward makes that and the bias gradient (fused on
    // CUDA: the fp32 gradient is not written). bf16 keeps no GELU output per layer (2 bytes per
    // FFN element, the largest activation of a layer): the GELU backward, which reads its input
    // anyway, writes it again (gelu_forward16's bits) into layer 0's slot, where the FFN2 weight
    // gradient, computed after the input gradient, reads it.
    if (prec == Precision::BF16) {
      be.linear_backward(a.di, nullptr, nullptr, dffn, nullptr, w(L.ffn_out.w), N, C, I, prec,
                         w16(L.ffn_out.w, prec), LinearIo{nullptr, nullptr, dffn16, /*overwrite_dx=*/true});
      be.gelu_bias_backward(a.as16(a.di2_16), dgrad(L.ffn_in.b), a.as16(ly.inter16), a.di, N, I,
                            act, a.di2, a.as16(ly.gelu16));
      be.linear_backward(nullptr, dgrad(L.ffn_out.w), dgrad(L.ffn_out.b), dffn,
                         /*x: gelu16 alone*/ nullptr, w(L.ffn_out.w), N, C, I, prec,
                         w16(L.ffn_out.w, prec), LinearIo{a.as16(ly.gelu16), nullptr, dffn16});
      be.linear_backward(a.dh, dgrad(L.ffn_in.w), nullptr, nullptr, /*x: h1_16 alone*/ nullptr,
                         w(L.ffn_in.w), N, I, C, prec, w16(L.ffn_in.w, prec),
                         LinearIo{a.as16(ly.h1_16), nullptr, a.as16(a.di2_16)});
    } else {
      be.linear_backward(a.di, dgrad(L.ffn_out.w), dgrad(L.ffn_out.b), dffn, ly.gelu,
                         w(L.ffn_out.w), N, C, I, prec, w16(L.ffn_out.w, prec),
                         LinearIo{nullptr, nullptr, dffn16, /*overwrite_dx=*/true});
      be.gelu_backward(a.di2, ly.inter, a.di, N * I, act, nullptr, /*overwrite=*/true);
      be.linear_backward(a.dh, dgrad(L.ffn_in.w), dgrad(L.ffn_in.b), a.di2,
                         ly.h1, w(L.ffn_in.w), N, I, C, prec,
                         w16(L.ffn_in.w, prec), LinearIo{a.as16(ly.h1_16), nullptr, nullptr});
    }
    // h1 = LN1(dropout(attn_out) + x[l]); the gradient into x[l] goes straight to g (read by LN2's
    // backward above, added to by the QKV backward after the attention branch has read it)
    const float* dattn = a.g;
    const bf16_t* dattn16 = nullptr;
    if (p_h > 0) {
      be.layernorm_dropout_backward(a.g, dgrad(L.attn_norm.g),
                                    dgrad(L.attn_norm.b), a.dh, ly.ln1_sum,
                                    w(L.attn_norm.g), ly.ln1_mean, ly.ln1_rstd, N, C, a.d2,
                                    a.as16(a.d2_16), p_h, rng, ly.seed_attn_out);
      dattn = a.d2;
      dattn16 = a.as16(a.d2_16);
    } else {
      be.layernorm_backward(a.g, dgrad(L.attn_norm.g),
                            dgrad(L.attn_norm.b), a.dh, ly.ln1_sum,
                            w(L.attn_norm.g), ly.ln1_mean, ly.ln1_rstd, N, C,
                            /*overwrite=*/true);
    }
    // (bf16: ctx16 alone; ctx is null)
    be.linear_backward(a.dc, dgrad(L.attn_out.w), dgrad(L.attn_out.b), dattn,
                    ly.ctx, w(L.attn_out.w), N, C, C, prec,
                    w16(L.attn_out.w, prec),
                    LinearIo{a.as16(ly.ctx16), nullptr, dattn16, /*overwrite_dx=*/true});
    // (bf16: null qkv, whose buffer holds the last layer's; the layer's qkv16 serves)
    // (bf16: dqkv's rounding too, the QKV products' operand)
    if (packed) {
      for (int64_t b = 0; b < B; ++b) {
        const auto [r0, n] = seq_rows(b);
        auto at16 = [](bf16_t* p, int64_t off) { return p ? p + off : nullptr; };
        be.attention_backward(a.dqkv + r0 * 3 * C, at16(a.as16(a.dqkv16), r0 * 3 * C), a.att_work, a.dc + r0 * C,
                              prec == Precision::BF16 ? nullptr : ly.qkv + r0 * 3 * C,
                              at16(a.as16(ly.qkv16), r0 * 3 * C), ly.ctx ? ly.ctx + r0 * C : nullptr,
                              at16(a.as16(ly.ctx16), r0 * C), ly.probs + a.att_off[static_cast<size_t>(b)], a.mask, 1,
                              n, C, NH, p_a, rng, ly.seed_att + a.drop_off[static_cast<size_t>(b)], prec);
      }
    } else {
      be.attention_backward(a.dqkv, a.as16(a.dqkv16), a.att_work, a.dc, prec == Precision::BF16 ? nullptr : ly.qkv,
                            a.as16(ly.qkv16), ly.ctx, a.as16(ly.ctx16), ly.probs, a.mask, B, T, C, NH, p_a, rng,
                            ly.seed_att, prec);
    }
    // qkv = x[l] Wqkv^T + bqkv   (Q/K/V weights and biases are adjacent in the flat buffers)
    // (bf16: x16 alone; x[l]'s buffer holds a later layer's input by now)
    be.linear_backward(a.g, dgrad(L.qkv.w), dgrad(L.qkv.b), a.dqkv,
                    prec == Precision::BF16 ? nullptr : a.x[l],
                    w(L.qkv.w), N, 3 * C, C, prec,
                    w16(L.qkv.w, prec),
                    LinearIo{a.as16(ly.x16), nullptr, a.as16(a.dqkv16)});
    if (grad_ready_) grad_ready_(table_[L.qkv.w].offset);  // the layer's first tensor
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
    be.linear_backward(da, dgrad(refs_.project.w), dgrad(refs_.project.b), a.g, a.emb_out,
                    w(refs_.project.w), N, C, E, prec, w16(refs_.project.w, prec),
                    LinearIo{nullptr, nullptr, nullptr, /*overwrite_dx=*/true});
    dx0 = da;
  }
  if (p_h > 0) {
    be.dropout_backward(db, dx0, N * E, p_h, rng, a.seed_emb, nullptr, /*overwrite=*/true);
    dx0 = db;
  }
  be.layernorm_backward(dc, dgrad(refs_.emb_norm.g), dgrad(refs_.emb_norm.b), dx0,
                     a.emb_sum, w(refs_.emb_norm.g), a.emb_mean, a.emb_rstd, N, E, /*overwrite=*/true);
  // HF's nn.Embedding(padding_idx=pad) gives the padding row no gradient from the lookup.
  float* dwte = dgrad(refs_.word);
  // (kept where the backend computes: a download here would wait for the whole backward on a device)
  float* pad_row = scratch(pad_row_, E, false);
  be.copy_rows(pad_row, E, dwte, E, 1, E);
  const int32_t* ids = be.on_host() ? batch_ids_.data() : a.dids.get();
  const int32_t* seg = be.on_host() ? batch_seg_.data() : a.dseg.get();
  if (packed) {
    for (int64_t b = 0; b < B; ++b) {
      const auto [r0, n] = seq_rows(b);
      be.embeddings_backward(dwte, dgrad(refs_.position), dgrad(refs_.token_type), dc + r0 * E, ids + r0, seg + r0, 1,
                             n, E, cfg_.vocab_size, cfg_.type_vocab_size);
    }
  } else {
    be.embeddings_backward(dwte, dgrad(refs_.position), dgrad(refs_.token_type), dc, ids, seg, B, T, E,
                           cfg_.vocab_size, cfg_.type_vocab_size);
  }
  be.copy_rows(dwte, E, pad_row, E, 1, E);
  if (grad_ready_) grad_ready_(0);
}

PretrainLoss Bert::pretrain_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                 float loss_scale, float mlm_denom, float nsp_denom, std::vector<float>* mlm_logits_out,
                                 GumbelSample* sample) {
  BERTCC_CHECK(heads_ == Heads::PreTraining || heads_ == Heads::Generator, "pretrain_step: model has no pre-training heads");
  const bool nsp = heads_ == Heads::PreTraining;  // ELECTRA's generator: masked LM only
  BERTCC_CHECK(batch.mlm_labels.size() == batch.input_ids.size() && (!nsp || batch.nsp_labels.size() == size_t(batch.B)),
               "pretrain_step: batch has no masked-LM or next-sentence labels");
  const int64_t B = batch.B, T = batch.T, N = B * T;
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  encode(batch, training, prec, rng, backward);
  // The MLM head: BERT's cls.predictions (transform to the hidden width, activation from the
  // config) or ELECTRA's generator_predictions + generator_lm_head (to embedding_size; HF fixes its
  // activation to gelu). Both decode with the word embeddings.
  const Activation act = nsp ? cfg_.activation() : Activation::GeluErf;
  const int64_t Eh = nsp ? C : cfg_.embedding_dim();
  const LinearRef& dense = refs_.mlm_dense;
  const NormRef& lnorm = refs_.mlm_norm;
  const ParamRef obias = refs_.mlm_bias;
  PretrainLoss out;
  if (mlm_logits_out) mlm_logits_out->clear();
  if (sample) sample->picks.clear();

  // ---- MLM head on the masked positions only ----
  Acts::Head& h = acts_->head;
  Backend& be = *be_;
  // A head buffer of n floats where the backend computes (the vector itself on the CPU);
  // zeroed when `zeroed` (what backward accumulates into).
  auto buf = [&](std::vector<float>& v, int64_t n, bool zeroed) { return scratch(v, n, zeroed); };
  // The per-row losses summed in order on the host (downloaded from a device).
  auto host_sum = [&](std::vector<float>& v, const float* p, int64_t n) {
    if (!be.on_host()) {
      v.resize(static_cast<size_t>(n));
      be.download(v.data(), p, sizeof(float) * static_cast<size_t>(n));
    }
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += v[i];
    return s;
  };
  h.rows.clear();
  h.labels.clear();
  for (int64_t n = 0; n < N; ++n)
    if (batch.mlm_labels[n] != -1) {
      h.rows.push_back(n);
      h.labels.push_back(batch.mlm_labels[n]);
    }
  const int64_t M = static_cast<int64_t>(h.rows.size());
  out.mlm_count = M;
  const int64_t* rows = h.rows.data();
  const int32_t* labels = h.labels.data();
  if (!be.on_host() && M > 0) {
    rows = h.drows.ensure(be, static_cast<size_t>(M));
    labels = h.dlabels.ensure(be, static_cast<size_t>(M));
    be.upload(h.drows.get(), h.rows.data(), sizeof(int64_t) * M);
    be.upload(h.dlabels.get(), h.labels.data(), sizeof(int32_t) * M);
  }
  float *hm = nullptr, *t1 = nullptr, *tg = nullptr, *tl = nullptr, *tmean = nullptr, *trstd = nullptr;
  float* logits = nullptr;
  if (M > 0) {
    hm = buf(h.hm, M * C, false);
    t1 = buf(h.t1, M * Eh, false);
    tg = buf(h.tg, M * Eh, false);
    tl = buf(h.tl, M * Eh, false);
    tmean = buf(h.tmean, M, false);
    trstd = buf(h.trstd, M, false);
    logits = buf(h.logits, M * V, false);  // overwritten in place by its own gradient: no separate probabilities
    float* losses = buf(h.losses, M, false);
    be.gather_rows(hm, sequence_output(), rows, M, C);
    be.linear_forward(t1, hm, w(dense.w), w(dense.b), M, Eh, C, prec, w16(dense.w, prec));
    be.gelu_forward(tg, t1, M * Eh, act);
    be.layernorm_forward(tl, tmean, trstd, tg, w(lnorm.g), w(lnorm.b), M, Eh, cfg_.layer_norm_eps);
    be.linear_forward(logits, tl, w(refs_.word), w(obias), M, V, Eh, prec,
                      w16(refs_.word, prec));
    if (mlm_logits_out) {
      mlm_logits_out->resize(static_cast<size_t>(M * V));
      be.download(mlm_logits_out->data(), logits, sizeof(float) * static_cast<size_t>(M * V));
    }
    if (sample) {  // the forward pass has reserved its dropout streams: the noise comes next
      sample->picks.resize(static_cast<size_t>(M));
      be.gumbel_argmax(sample->picks.data(), logits, M, V, rng, rng.reserve(static_cast<uint64_t>(M * V)));
    }
    be.softmax_xent(logits, losses, labels, M, V, -1,
                    backward ? loss_scale / (mlm_denom > 0 ? mlm_denom : static_cast<float>(M)) : 0.0f,
                    &out.mlm_correct);
    const double s = host_sum(h.losses, losses, M);
    out.mlm_loss_sum = s;
    out.mlm_loss = s / static_cast<double>(M);
  }

  float* nsp_logits = nullptr;
  if (!nsp) {  // ELECTRA's generator
    out.loss = out.mlm_loss;
  } else {  // ---- NSP head on the pooled output ----
    nsp_logits = buf(h.nsp, B * 2, false);
    float* nsp_losses = buf(h.nsp_losses, B, false);
    const int32_t* nsp_labels = batch.nsp_labels.data();
    if (!be.on_host()) {
      nsp_labels = h.dnsp_labels.ensure(be, static_cast<size_t>(B));
      be.upload(h.dnsp_labels.get(), batch.nsp_labels.data(), sizeof(int32_t) * B);
    }
    be.linear_forward(nsp_logits, pooled_output(), w(refs_.nsp.w), w(refs_.nsp.b), B,
                      2, C, prec, w16(refs_.nsp.w, prec));
    be.softmax_xent(nsp_logits, nsp_losses, nsp_labels, B, 2, -1,
                    backward ? loss_scale / (nsp_denom > 0 ? nsp_denom : static_cast<float>(B)) : 0.0f,
                    &out.nsp_correct);
    const double s = host_sum(h.nsp_losses, nsp_losses, B);
    out.nsp_loss_sum = s;
    out.nsp_loss = s / static_cast<double>(B);
    out.loss = out.mlm_loss + out.nsp_loss;
  }
  if (!backward) return out;

  // ---- backward ----
  float* dpooled = nullptr;
  if (nsp) {
    dpooled = buf(h.dpooled, B * C, true);
    be.linear_backward(dpooled, dgrad(refs_.nsp.w), dgrad(refs_.nsp.b), nsp_logits,
                       pooled_output(), w(refs_.nsp.w), B, 2, C, prec,
                       w16(refs_.nsp.w, prec));
  }
  float* dseq = buf(h.dseq, N * C, true);
  if (M > 0) {
    float* dtl = buf(h.dtl, M * Eh, true);
    float* dtg = buf(h.dtg, M * Eh, true);
    float* dt1 = buf(h.dt1, M * Eh, true);
    float* dhm = buf(h.dhm, M * C, true);
    // decoder tied to the word embeddings: its gradient adds into the embedding gradient
    be.linear_backward(dtl, dgrad(refs_.word), dgrad(obias), logits, tl,
                       w(refs_.word), M, V, Eh, prec,
                       w16(refs_.word, prec));
    be.layernorm_backward(dtg, dgrad(lnorm.g), dgrad(lnorm.b), dtl, tg, w(lnorm.g), tmean,
                          trstd, M, Eh);
    be.gelu_backward(dt1, t1, dtg, M * Eh, act);
    be.linear_backward(dhm, dgrad(dense.w), dgrad(dense.b), dt1, hm, w(dense.w), M, Eh, C,
                       prec, w16(dense.w, prec));
    be.scatter_add_rows(dseq, dhm, rows, M, C);
  }
  encode_backward(dseq, dpooled, prec);
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
