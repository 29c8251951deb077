// Bert (bertcc/bert.h): the composition of its weights (weights.h), encoder (encoder.h) and head
// (head.h), and what it forwards to each.
#include "bertcc/bert.h"

#include <string>
#include <utility>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/head_spec.h"
#include "bertcc/runtime.h"
#include "model/encoder.h"
#include "model/head.h"
#include "model/weights.h"

namespace bertcc {

const char* architecture_name(Heads h) { return head_spec(h).architecture; }

std::string architecture_name(Heads h, bool electra) {
  const HeadSpec& s = head_spec(h);
  return electra ? s.electra_architecture : s.architecture;
}

bool has_pooler(Heads h) { return head_spec(h).pooler; }

Bert::Bert(const BertConfig& config, Heads heads) : cfg_(config), heads_(heads) {
  cfg_.validate("config");
  check_memory(4.0 * estimated_parameters(cfg_),
               "the weights of this model (about " +
                   std::to_string(static_cast<long long>(estimated_parameters(cfg_))) + " parameters)",
               "check the config's sizes");
  const HeadSpec& spec = head_spec(heads_);
  weights_ = std::make_unique<ModelWeights>(cfg_, spec);
  encoder_ = std::make_unique<Encoder>(cfg_, *weights_, spec.pooler && !cfg_.electra());
  head_ = spec.make(*this);  // binds the head's tensors
}

Bert::~Bert() = default;

HeadLabels Bert::head_labels() const { return head_spec(heads_).labels; }

void Bert::set_joint_beam(int start_n_top, int end_n_top) {
  cfg_.start_n_top = start_n_top;
  cfg_.end_n_top = end_n_top;
}

// ---- weights ----
const ParamTable& Bert::table() const { return weights_->table(); }
ParamVector& Bert::params() { return weights_->params(); }
const ParamVector& Bert::params() const { return std::as_const(*weights_).params(); }
std::vector<float>& Bert::grads() { return weights_->grads(); }
float* Bert::param(const std::string& name) { return weights_->params().data() + table().at(name).offset; }
float* Bert::grad(const std::string& name) { return weights_->grads().data() + table().at(name).offset; }
bool Bert::has_grads() const { return weights_->has_grads(); }
void Bert::init_weights(uint64_t seed) { weights_->init_weights(seed); }
void Bert::zero_grad() { weights_->zero_grad(); }
void Bert::freeze_below_top_layers(int layers) { weights_->freeze_below_top_layers(layers); }
void Bert::set_layerwise_lr_decay(float decay) { weights_->set_layerwise_lr_decay(decay); }

// ---- where it computes ----
void Bert::use_backend(Backend& be) {
  encoder_->release_activations();  // the arena lives on the old backend
  weights_->use_backend(be);
}

void Bert::use_backend_for_inference(Backend& be, Precision prec) {
  encoder_->release_activations();
  weights_->use_backend_for_inference(be, prec);
}

bool Bert::inference_only() const { return weights_->inference_only(); }
void Bert::keep_int8_weights_only() { weights_->keep_int8_weights_only(encoder_->int8_linears()); }
void Bert::prepare_inference_load(Precision prec) { weights_->prepare_inference_load(encoder_->int8_linears(), prec); }
void Bert::tensor_written(ParamRef r) { weights_->tensor_written(r); }
void Bert::keep_packed_weights_only(Precision prec) {
  weights_->keep_packed_weights_only(encoder_->int8_linears(), prec);
}
Backend& Bert::backend() const { return weights_->backend(); }
void Bert::params_to_device() { weights_->params_to_device(); }
void Bert::params_to_host() { weights_->params_to_host(); }
void Bert::grads_to_host() { weights_->grads_to_host(); }
void Bert::grads_to_device() { weights_->grads_to_device(); }
float* Bert::params_on_backend() { return weights_->params_on_backend(); }
float* Bert::grads_on_backend() { return weights_->grads_on_backend(); }

// ---- steps ----
PretrainLoss Bert::pretrain_step(const BertBatch& batch, Rng& rng, const StepArgs& args) {
  return head_->pretrain_step(batch, rng, args);
}

FinetuneLoss Bert::finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args) {
  return head_->finetune_step(batch, rng, args);
}

// ---- the encoder ----
void Bert::encode(const BertBatch& batch, bool training, Precision prec, Rng& rng, bool backward) {
  encoder_->encode(batch, training, prec, rng, backward, *head_);
}
const float* Bert::sequence_output() const { return encoder_->sequence_output(); }
const float* Bert::pooled_output() const { return encoder_->pooled_output(); }
bool Bert::last_packed() const { return encoder_->last_packed(); }
const float* Bert::sequence_output_on_host(std::vector<float>& buf) const {
  return encoder_->sequence_output_on_host(buf);
}
const float* Bert::pooled_output_on_host(std::vector<float>& buf) const { return encoder_->pooled_output_on_host(buf); }
void Bert::encode_backward(const float* dseq, const float* dpooled, Precision prec) {
  encoder_->encode_backward(dseq, dpooled, prec);
}
void Bert::set_grad_ready_hook(std::function<void(size_t)> hook) { encoder_->set_grad_ready_hook(std::move(hook)); }
void Bert::reserve_activations(int64_t B, int64_t T, Precision prec) { encoder_->reserve_activations(B, T, prec); }

double Bert::activation_bytes(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec) {
  return Encoder::activation_bytes(cfg, B, T, attention_dropout, prec);
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
