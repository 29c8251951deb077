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
#include "model/acts.h"
#include "model/head.h"
#include "model/int8.h"

namespace bertcc {

using namespace kernels;

// ---------------------------------------------------------------------------------------------
// Parameter table. Q, K and V weights are adjacent (one [3C,C] block) and so are their biases,
// so the QKV projection is a single GEMM while each tensor keeps its HF name.
// ---------------------------------------------------------------------------------------------
// ELECTRA uses the same internal names (its electra.* tensors are renamed at load and save) and
// adds bert.embeddings_project when its embeddings are narrower or wider than the encoder. The
// head declares its own tensors (HeadSpec::declare, src/model/heads/).
static void build_table(ParamTable& t, const BertConfig& c, const HeadSpec& head) {
  const int64_t V = c.vocab_size, C = c.hidden_size, I = c.intermediate_size, E = c.embedding_dim();
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
  if (head.pooler && !c.electra()) {
    t.add("bert.pooler.dense.weight", {C, C}, true);
    t.add("bert.pooler.dense.bias", {C}, false);
  }
  head.declare(t, c);  // the head's own tensors (src/model/heads/)
}

const char* architecture_name(Heads h) { return head_spec(h).architecture; }

std::string architecture_name(Heads h, bool electra) {
  const HeadSpec& s = head_spec(h);
  return electra ? s.electra_architecture : s.architecture;
}

bool has_pooler(Heads h) { return head_spec(h).pooler; }

struct Bert::DeviceState {
  DeviceBuffer<float> params, grads;
  DeviceBuffer<bf16_t> params16;
};

Bert::Bert(const BertConfig& config, Heads heads) : cfg_(config), heads_(heads), be_(&cpu_backend()) {
  cfg_.validate("config");
  check_memory(4.0 * estimated_parameters(cfg_),
               "the weights of this model (about " +
                   std::to_string(static_cast<long long>(estimated_parameters(cfg_))) + " parameters)",
               "check the config's sizes");
  const HeadSpec& spec = head_spec(heads_);
  pooler_ = spec.pooler && !cfg_.electra();
  build_table(table_, cfg_, spec);
  bind_refs();
  head_ = spec.make(*this);  // binds the head's tensors
  check_memory(4.0 * static_cast<double>(table_.total()),
               "the weights of this model (" + std::to_string(table_.total()) + " parameters)",
               "check the config's sizes");
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
      BERTCC_CHECK(t.at(p + "attention.self.key" + a).offset == q + n &&
                       t.at(p + "attention.self.value" + a).offset == q + 2 * n && n == (a == ".weight" ? C * C : C),
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
  params16_valid_ = q8_valid_ = false;
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
    if (embeddings_frozen_ &&
        (e.name.rfind("bert.embeddings.", 0) == 0 || e.name.rfind("bert.embeddings_project.", 0) == 0))
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
  params16_valid_ = q8_valid_ = false;
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
  params16_valid_ = q8_valid_ = false;
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
    BERTCC_CHECK(p == Precision::BF16,
                 "this model was placed on the device for bf16 inference only; "
                 "--precision fp32 needs its fp32 weights there");
    BERTCC_CHECK(params16_valid_,
                 "the weights changed after the model was placed on the device for bf16 "
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

PretrainLoss Bert::pretrain_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                 float loss_scale, float mlm_denom, float nsp_denom, std::vector<float>* mlm_logits_out,
                                 GumbelSample* sample) {
  return head_->pretrain_step(batch, training, backward, prec, rng, loss_scale, mlm_denom, nsp_denom, mlm_logits_out,
                              sample);
}

FinetuneLoss Bert::finetune_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                 float loss_scale) {
  return head_->finetune_step(batch, training, backward, prec, rng, loss_scale, 0.0f);
}

FinetuneLoss Bert::joint_qa_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                 float loss_scale) {
  BERTCC_CHECK(heads_ == Heads::JointQuestionAnswering, "joint_qa_step: model has no joint QA head");
  return head_->finetune_step(batch, training, backward, prec, rng, loss_scale, 0.0f);
}

FinetuneLoss Bert::discriminator_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                      float loss_scale, float denom) {
  BERTCC_CHECK(heads_ == Heads::Discriminator, "discriminator_step: model has no ELECTRA discriminator head");
  return head_->finetune_step(batch, training, backward, prec, rng, loss_scale, denom);
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
