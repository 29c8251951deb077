// The model's parameters (weights.h): the table, the host and device copies, initialisation,
// freezing and the learning-rate scales. The int8 copies: int8.cpp.
#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/head_spec.h"
#include "bertcc/rng.h"
#include "bertcc/runtime.h"
#include "core/huge_pages.h"
#include "model/int8.h"
#include "model/packed.h"

namespace bertcc {

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

struct ModelWeights::DeviceState {
  DeviceBuffer<float> params, grads;
  DeviceBuffer<bf16_t> params16;
};

ModelWeights::ModelWeights(const BertConfig& cfg, const HeadSpec& head) : cfg_(cfg), be_(&cpu_backend()) {
  build_table(table_, cfg_, head);
  check_memory(4.0 * static_cast<double>(table_.total()),
               "the weights of this model (" + std::to_string(table_.total()) + " parameters)",
               "check the config's sizes");
  params_.resize(table_.total());  // zeros, resident as they are written (ZeroPagesAllocator)
}

ModelWeights::~ModelWeights() = default;

void ModelWeights::ensure_grads() {
  if (grads_.empty()) {
    check_memory(4.0 * static_cast<double>(table_.total()),
                 "the gradients of this model (" + std::to_string(table_.total()) + " parameters)",
                 "check the config's sizes");
    assign_in_huge_pages(grads_, table_.total(), 0.0f);
  }
  if (dev_ && !dev_grads_) {
    check_not_inference_only("a backward or an optimizer step");
    dev_->grads = DeviceBuffer<float>(*be_, grads_.size());
    dev_grads_ = dev_->grads.get();
    be_->zero(dev_grads_, sizeof(float) * grads_.size());
  }
}

void ModelWeights::init_weights(uint64_t seed) {
  invalidate_copies();
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
  float* wte = params_.data() + table_.at("bert.embeddings.word_embeddings.weight").offset;
  std::fill(wte, wte + cfg_.embedding_dim(), 0.0f);  // padding_idx = 0, as HF initialises it
}

void ModelWeights::freeze_below_top_layers(int layers) {
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

void ModelWeights::set_layerwise_lr_decay(float decay) {
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

void ModelWeights::zero_grad() {
  ensure_grads();
  if (dev_grads_)
    be_->zero(dev_grads_, sizeof(float) * grads_.size());
  else
    std::fill(grads_.begin(), grads_.end(), 0.0f);
}

void ModelWeights::use_backend(Backend& be) {
  be_ = &be;
  dev_.reset();
  dev_params_ = dev_grads_ = nullptr;
  dev_params16_ = nullptr;
  dev_offset_.clear();
  invalidate_copies();
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

void ModelWeights::use_backend_for_inference(Backend& be, Precision prec) {
  if (be.on_host() || prec != Precision::BF16) return use_backend(be);
  use_backend(cpu_backend());  // off any device first: no weights or gradients there
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

void ModelWeights::check_not_inference_only(const char* what) const {
  BERTCC_CHECK(dev_offset_.empty(), what, ": this model was placed on ", be_->describe(),
               " for bf16 inference only (its encoder matrices are there in bf16 alone)");
}

void ModelWeights::params_to_device() {
  check_not_inference_only("params_to_device");
  invalidate_copies();
  if (dev_params_) be_->upload(dev_params_, params_.data(), sizeof(float) * params_.size());
}

void ModelWeights::params_to_host() {
  check_not_inference_only("params_to_host");
  if (dev_params_) be_->download(params_.data(), dev_params_, sizeof(float) * params_.size());
}

void ModelWeights::grads_to_host() {
  ensure_grads();
  if (dev_grads_) be_->download(grads_.data(), dev_grads_, sizeof(float) * grads_.size());
}

void ModelWeights::grads_to_device() {
  ensure_grads();
  if (dev_grads_) be_->upload(dev_grads_, grads_.data(), sizeof(float) * grads_.size());
}

void ModelWeights::refresh_bf16(Precision p) {
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
    if (params16_.size() != params_.size()) assign_in_huge_pages(params16_, params_.size(), bf16_t{0});
    to_bf16(params_.data(), params16_.data(), params_.size());
  }
  params16_valid_ = true;
}

}  // namespace bertcc
